//! Tier 3: issue 25 and design rule 8 ("every message answered once, every answer in the chat")
//! on the real Codex CLI (`codex app-server`, `BOTVISOR_TEST_CODEX_BIN`), at chosen moments: an
//! answer Codex recorded while botvisord could not see it is read back into the chat; a message
//! asked again whose attempt the thread no longer lets botvisor drop (another process continued
//! the thread) ends `taken_not_answered`, reason `cut_refused`, with no crash and nothing lost.
//! The seeded sweeps are tests/real/codex/kills.rs. Skipped (loudly) without the binary.

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use support::codex::{CodexSetup, wait_no_leftovers};
use support::responses_api::{Reply, ResponsesRequest, Script};
use support::*;

/// Whether the rollout `path` says that a turn ended answered with `text` (`task_complete`
/// whose `last_agent_message` is it): read here, independently of botvisor's reader.
fn completed_with(path: &std::path::Path, text: &str) -> bool {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .any(|v| {
            v["payload"]["type"] == "task_complete" && v["payload"]["last_agent_message"] == text
        })
}

#[cfg_attr(
    botvisor_skip_codex,
    ignore = "BOTVISOR_TEST_CODEX_BIN not set: no real Codex to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_codex_recorded_while_botvisord_was_frozen_is_read_back_into_the_chat() {
    let Some(codex) = codex_bin() else { return };
    let env = TestEnv::new().await;
    let script: Script = Arc::new(|req: &ResponsesRequest| Reply::SlowText {
        chunks: vec![
            "Hello! ".into(),
            "You said: ".into(),
            req.last_user_text.clone(),
        ],
        every: Duration::from_millis(200),
    });
    let mut s = CodexSetup::start(&env, codex, script).await;
    let created = s.bot(&env, "").await;
    let path: zbus::OwnedObjectPath = created.inner().path().to_owned().into();
    let bot = env.bot_uncached(&path).await;
    assert_eq!(send_and_wait(&bot, "one").await.outcome, "success");
    let thread = bot.session_id().await.unwrap();
    let two = bot.send("two", HashMap::new()).await.unwrap();
    s.api
        .wait_for(|r| r.last_user_text == "two", EVENT_TIMEOUT)
        .await;
    // botvisord stops reading; Codex goes on, ends the turn and writes it down.
    // SAFETY: kill(2) on the test's own daemon.
    unsafe { libc::kill(s.daemon.pid() as i32, libc::SIGSTOP) };
    let rollout = s.rollout(&thread).expect("a rollout");
    let written = tokio::time::timeout(EVENT_TIMEOUT, async {
        while !completed_with(&rollout, "Hello! You said: two") {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    // SAFETY: as above; a stopped process dies of SIGKILL.
    unsafe { libc::kill(s.daemon.pid() as i32, libc::SIGKILL) };
    s.daemon.kill();
    written.expect("Codex ends the turn while botvisord is stopped");
    s.daemon = Daemon::start(&s.cfg, &env.conn).await;
    let bot = env.bot_uncached(&path).await;
    let mut finished = bot.receive_turn_finished().await.unwrap();
    let ended = match of_kind(&chat(&bot).await, "turn_finished")
        .into_iter()
        .find(|p| p["turn_id"] == two.as_str())
    {
        Some(p) => (p["outcome"].clone(), p["reason"].clone()),
        None => {
            let (_, outcome) = wait_turns(&mut finished, std::slice::from_ref(&two))
                .await
                .remove(0);
            let items = chat(&bot).await;
            let p = of_kind(&items, "turn_finished")
                .into_iter()
                .find(|p| p["turn_id"] == two.as_str())
                .cloned()
                .unwrap();
            assert_eq!(p["outcome"], json!(outcome));
            (p["outcome"].clone(), p["reason"].clone())
        }
    };
    let items = chat(&bot).await;
    assert_eq!(
        ended,
        (json!("success"), json!("recovered")),
        "the answer in the rollout is the turn's: {items:?}"
    );
    let answers: Vec<&Value> = of_kind(&items, "assistant")
        .into_iter()
        .filter(|p| p["turn_id"] == two.as_str())
        .collect();
    assert_eq!(answers.len(), 1, "{items:?}");
    assert_eq!(answers[0]["text"], "Hello! You said: two");
    assert_eq!(answers[0]["recovered"], true);
    assert_eq!(
        s.api.asked().iter().filter(|a| *a == "two").count(),
        1,
        "not asked again"
    );
    let three = send_and_wait(&bot, "three").await;
    assert_eq!(three.outcome, "success", "{three:?}");
    assert_eq!(bot.session_id().await.unwrap(), thread);
    assert_eq!(
        s.api.requests().pop().unwrap().user_texts(),
        ["one", "two", "three"]
    );
    stop_and_wait(&bot).await;
    wait_no_leftovers(&env).await;
}

/// Runs one turn of `text` on `thread` in a Codex app-server of the test's own (another process
/// on the bot's thread, as the user's terminal would be), on the bot's `CODEX_HOME`.
async fn turn_elsewhere(s: &CodexSetup, env: &TestEnv, thread: &str, text: &str) {
    let mut child = tokio::process::Command::new(s.cfg.codex_bin.clone().unwrap())
        .arg("app-server")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .envs(&s.bot_env)
        .current_dir(&env.work)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn codex app-server");
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let cwd = env.work.to_str().unwrap();
    for request in [
        json!({"method": "initialize", "id": 0, "params": {"clientInfo": {"name": "terminal", "version": "0"}}}),
        json!({"method": "initialized"}),
        json!({"method": "thread/resume", "id": 1, "params": {"threadId": thread, "cwd": cwd}}),
        json!({"method": "turn/start", "id": 2, "params": {"threadId": thread,
               "input": [{"type": "text", "text": text}]}}),
    ] {
        stdin
            .write_all(format!("{request}\n").as_bytes())
            .await
            .unwrap();
    }
    tokio::time::timeout(EVENT_TIMEOUT, async {
        while let Ok(Some(line)) = lines.next_line().await {
            let v: Value = serde_json::from_str(&line).unwrap_or_default();
            assert!(v.get("error").is_none(), "{v}");
            if v["method"] == "turn/completed" {
                return;
            }
        }
        panic!("the app-server ended before the turn");
    })
    .await
    .expect("the turn elsewhere completes");
    drop(stdin);
    let _ = tokio::time::timeout(EVENT_TIMEOUT, child.wait()).await;
}

#[cfg_attr(
    botvisor_skip_codex,
    ignore = "BOTVISOR_TEST_CODEX_BIN not set: no real Codex to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_the_thread_went_on_after_is_not_dropped_and_the_turn_ends_cut_refused() {
    let Some(codex) = codex_bin() else { return };
    let env = TestEnv::new().await;
    let hung = Arc::new(AtomicBool::new(false));
    let script: Script = Arc::new(move |req: &ResponsesRequest| {
        if req.last_user_text == "hang" && !hung.swap(true, Ordering::SeqCst) {
            Reply::Never
        } else {
            Reply::Text(format!("Hello! You said: {}", req.last_user_text))
        }
    });
    // One crash is a crash loop: the bot waits in `failed`, its message asked again queued.
    let s = CodexSetup::start_configured(&env, codex, script, "", "crash_loop_limit = 1\n").await;
    let created = s.bot(&env, "").await;
    let path: zbus::OwnedObjectPath = created.inner().path().to_owned().into();
    let bot = env.bot_uncached(&path).await;
    assert_eq!(send_and_wait(&bot, "one").await.outcome, "success");
    let thread = bot.session_id().await.unwrap();
    let mut finished = bot.receive_turn_finished().await.unwrap();
    let hang = bot.send("hang", HashMap::new()).await.unwrap();
    s.api
        .wait_for(|r| r.last_user_text == "hang", EVENT_TIMEOUT)
        .await;
    let pid = bot.process_id().await.unwrap();
    // SAFETY: kill(2) on the agent's pid, as a crash from outside.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    wait_state(&bot, "failed").await;
    let items = chat(&bot).await;
    assert!(
        of_kind(&items, "system")
            .iter()
            .any(|p| p["reason"] == "redo" && p["turn_id"] == hang.as_str()),
        "asked again: {items:?}"
    );
    // Meanwhile another process continues the thread.
    turn_elsewhere(&s, &env, &thread, "elsewhere").await;
    bot.restart(HashMap::new()).await.unwrap();
    let ended = wait_turns(&mut finished, std::slice::from_ref(&hang)).await;
    assert_eq!(ended[0].1, "taken_not_answered", "{ended:?}");
    let items = chat(&bot).await;
    let end = of_kind(&items, "turn_finished")
        .into_iter()
        .find(|p| p["turn_id"] == hang.as_str())
        .unwrap();
    assert_eq!(end["reason"], "cut_refused", "{end}");
    let why = of_kind(&items, "system")
        .into_iter()
        .find(|p| p["reason"] == "cut_refused")
        .unwrap_or_else(|| panic!("no item says why: {items:?}"));
    assert!(
        why["text"].as_str().unwrap().contains("went on after"),
        "{why}"
    );
    let after = send_and_wait(&bot, "after").await;
    assert_eq!(after.outcome, "success", "{after:?}");
    assert_eq!(bot.session_id().await.unwrap(), thread, "the same thread");
    assert_eq!(
        s.api.requests().pop().unwrap().user_texts(),
        ["one", "hang", "elsewhere", "after"],
        "nothing dropped, nothing twice"
    );
    let crashes = of_kind(&items, "error")
        .iter()
        .filter(|p| p["reason"] == "crash")
        .count();
    assert_eq!(crashes, 1, "the refusal is no crash: {items:?}");
    assert_eq!(bot.state().await.unwrap(), "idle");
    stop_and_wait(&bot).await;
    wait_no_leftovers(&env).await;
}
