//! Tier 3: supervision on the real Claude Code CLI. The stand-in API answers with `Bash` tool
//! calls, so the real CLI starts real descendants (a background job runs in its own session,
//! claude-code-facts.md).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use serde_json::json;

use support::stand_in_api::{ApiRequest, Reply, Script};
use support::*;

const BACKGROUND: &str = "run sleep in the background";
const FOREGROUND: &str = "run sleep in the foreground";

fn bash_script() -> Script {
    Arc::new(|req: &ApiRequest| {
        if req.has_tool_result {
            Reply::Text("The command is running.".into())
        } else if req.last_user_text.contains(BACKGROUND) {
            Reply::ToolUse {
                name: "Bash".into(),
                input: json!({"command": "sleep 300", "run_in_background": true, "description": "sleep"}),
            }
        } else if req.last_user_text.contains(FOREGROUND) {
            Reply::ToolUse {
                name: "Bash".into(),
                // The CLI refuses a standalone foreground `sleep`.
                input: json!({"command": "tail -f /dev/null", "description": "wait"}),
            }
        } else {
            Reply::Text(format!("Hello! You said: {}", req.last_user_text))
        }
    })
}

fn running(env: &TestEnv, command: &str) -> Vec<u32> {
    env.leftovers()
        .into_iter()
        .filter(|(_, cmd)| cmd.starts_with(command))
        .map(|(pid, _)| pid)
        .collect()
}

fn sleeps(env: &TestEnv) -> Vec<u32> {
    running(env, "sleep 300")
}

async fn wait_for(env: &TestEnv, command: &str) -> u32 {
    tokio::time::timeout(EVENT_TIMEOUT, async {
        loop {
            if let Some(pid) = running(env, command).first() {
                return *pid;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| {
        panic!(
            "`{command}` never started; {}",
            fact("the Bash tool runs the command the model asks for")
        )
    })
}

async fn wait_for_sleep(env: &TestEnv) -> u32 {
    wait_for(env, "sleep 300").await
}

#[cfg_attr(
    botvisor_skip_claude,
    ignore = "BOTVISOR_TEST_CLAUDE_BIN not set: no real Claude Code to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_proves_the_background_job_gone() {
    let Some(claude) = claude_bin() else { return };
    let env = TestEnv::new().await;
    allow_bash(&env);
    let setup = RealSetup::start(&env, claude, bash_script()).await;
    let bot = setup.create_bot(&env, &env.work, &[]).await;
    let seen = send_and_wait(&bot, BACKGROUND).await;
    assert_eq!(seen.outcome, "success", "{seen:?}");
    wait_for_sleep(&env).await;
    stop_and_wait(&bot).await;
    assert_eq!(bot.stop_verdict().await.unwrap(), "clean");
    assert!(sleeps(&env).is_empty(), "the background sleep survived");
    env.assert_no_leftovers();
}

#[cfg_attr(
    botvisor_skip_claude,
    ignore = "BOTVISOR_TEST_CLAUDE_BIN not set: no real Claude Code to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cli_killed_from_outside_is_published_and_its_orphaned_job_stopped() {
    let Some(claude) = claude_bin() else { return };
    let env = TestEnv::new().await;
    allow_bash(&env);
    let setup = RealSetup::start(&env, claude, bash_script()).await;
    let bot = setup.create_bot(&env, &env.work, &[]).await;
    assert_eq!(send_and_wait(&bot, BACKGROUND).await.outcome, "success");
    wait_for_sleep(&env).await;
    let mut items = bot.receive_chat_item_added().await.unwrap();
    let pid = bot.process_id().await.unwrap();
    // SAFETY: kill(2) on the agent, as a crash from outside.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    let crash = tokio::time::timeout(EVENT_TIMEOUT, async {
        loop {
            let a = items.next().await.unwrap();
            let a = a.args().unwrap();
            if a.kind == "error" {
                return serde_json::from_str::<serde_json::Value>(&a.payload).unwrap();
            }
        }
    })
    .await
    .expect("the crash is published");
    assert_eq!(crash["reason"], "crash");
    tokio::time::timeout(EVENT_TIMEOUT, async {
        let mut changes = bot.receive_stop_verdict_changed().await;
        while bot.stop_verdict().await.unwrap().is_empty() {
            changes.next().await;
        }
    })
    .await
    .unwrap();
    assert_eq!(bot.stop_verdict().await.unwrap(), "clean");
    assert!(
        sleeps(&env).is_empty(),
        "the orphaned background job survived"
    );
    env.assert_no_leftovers();
}

#[cfg_attr(
    botvisor_skip_claude,
    ignore = "BOTVISOR_TEST_CLAUDE_BIN not set: no real Claude Code to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_stop_waits_for_the_background_task_then_the_next_message_resumes() {
    let Some(claude) = claude_bin() else { return };
    let env = TestEnv::new().await;
    allow_bash(&env);
    let setup = RealSetup::start(&env, claude, bash_script()).await;
    let mut bot_env = setup.bot_env.clone();
    bot_env.insert("BOTVISOR_TEST_RUN".into(), env.marker.clone());
    let work = env.work.to_str().unwrap().to_owned();
    let mut options = create_options(&work, &bot_env);
    options.insert("idle_timeout_s", zbus::Variant::from(1u32));
    let path = env.manager().await.create_bot(options).await.unwrap();
    let bot = env.bot(&path).await;
    assert_eq!(send_and_wait(&bot, BACKGROUND).await.outcome, "success");
    let session = bot.session_id().await.unwrap();
    let sleep_pid = wait_for_sleep(&env).await;
    // While the background task runs: no idle stop within three timeouts.
    let mut states = bot.receive_state_changed().await;
    let stopped = tokio::time::timeout(Duration::from_secs(3), async {
        loop {
            let c = states.next().await.unwrap();
            if c.get().await.unwrap() == "stopping" {
                return;
            }
        }
    })
    .await;
    assert!(
        stopped.is_err(),
        "stopped for idleness while a background task ran; {}",
        fact("a background Bash task is reported (system/background_tasks_changed)")
    );
    assert_ne!(bot.process_id().await.unwrap(), 0);
    // The task ends; the bot goes idle and is stopped.
    // SAFETY: kill(2) on the agent's sleep, from the test.
    unsafe { libc::kill(sleep_pid as i32, libc::SIGKILL) };
    wait_state(&bot, "stopped").await;
    assert_eq!(bot.stop_verdict().await.unwrap(), "clean");
    // The next message resumes the same conversation.
    assert_eq!(send_and_wait(&bot, "still there?").await.outcome, "success");
    assert_eq!(bot.session_id().await.unwrap(), session);
    stop_and_wait(&bot).await;
}

#[cfg_attr(
    botvisor_skip_claude,
    ignore = "BOTVISOR_TEST_CLAUDE_BIN not set: no real Claude Code to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_killed_mid_turn_is_cleaned_up_by_the_next_one() {
    let Some(claude) = claude_bin() else { return };
    let env = TestEnv::new().await;
    allow_bash(&env);
    let mut setup = RealSetup::start(&env, claude, bash_script()).await;
    let bot = setup.create_bot(&env, &env.work, &[]).await;
    let path = bot.inner().path().to_owned();
    let mut finished = bot.receive_turn_finished().await.unwrap();
    let turn = bot.send(FOREGROUND, HashMap::new()).await.unwrap();
    wait_for(&env, "tail -f /dev/null").await;
    // Wait until the daemon has recorded the sleep (its descendants are looked for again
    // after a tool starts).
    let db = setup.cfg.database.clone();
    tokio::time::timeout(EVENT_TIMEOUT, async {
        loop {
            let n: i64 = rusqlite::Connection::open(&db)
                .unwrap()
                .query_row(
                    "SELECT COUNT(*) FROM processes WHERE role = 'descendant'",
                    [],
                    |r| r.get(0),
                )
                .unwrap_or(0);
            if n >= 2 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the descendants are recorded");
    setup.daemon.kill();
    assert!(!env.leftovers().is_empty(), "the agent outlived its daemon");
    let _daemon = Daemon::start(&setup.cfg, &env.conn).await;
    let outcomes = wait_turns(&mut finished, std::slice::from_ref(&turn)).await;
    assert_eq!(outcomes[0].1, "interrupted");
    let bot = env.bot(&path.into()).await;
    let items = chat(&bot).await;
    let recovered = of_kind(&items, "system")
        .into_iter()
        .find(|p| p["reason"] == "recovered_processes")
        .cloned()
        .expect("the chat says what was stopped");
    assert_eq!(recovered["verdict"], "clean", "{recovered}");
    env.assert_no_leftovers();
}
