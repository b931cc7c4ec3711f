//! Tier 3: the `botvisord` binary on a private bus with the real Codex CLI (`codex app-server`,
//! `BOTVISOR_TEST_CODEX_BIN`) against the loopback Responses stand-in, in a scratch `CODEX_HOME`,
//! through the D-Bus API as a client sees it. Skipped (loudly) without the variable; CI sets it
//! (and `BOTVISOR_TEST_REQUIRE_CODEX`, which turns a skip into a failure).

mod support;

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use futures_util::StreamExt;
use zbus::Variant;

use support::responses_api::{
    Reply, ResponsesApi, Script, codex_env, codex_home, echo_script, shell_script,
};
use support::*;

/// A daemon whose bots may be Codex bots, and the stand-in they talk to.
struct CodexSetup {
    api: ResponsesApi,
    daemon: Daemon,
    cfg: DaemonConfig,
    codex_home: PathBuf,
    bot_env: HashMap<String, String>,
}

impl CodexSetup {
    async fn start(env: &TestEnv, codex: PathBuf, script: Script) -> CodexSetup {
        CodexSetup::start_with(env, codex, script, "").await
    }

    /// With `provider_extra` added to the stand-in provider's table.
    async fn start_with(
        env: &TestEnv,
        codex: PathBuf,
        script: Script,
        provider_extra: &str,
    ) -> CodexSetup {
        let api = ResponsesApi::start(script).await;
        let codex_home = codex_home(&env.home, &api.base_url, provider_extra);
        let mut cfg = env.daemon_config(None);
        cfg.codex_bin = Some(codex);
        let daemon = Daemon::start(&cfg, &env.conn).await;
        let bot_env = codex_env(&env.home, &codex_home, &env.marker);
        CodexSetup {
            api,
            daemon,
            cfg,
            codex_home,
            bot_env,
        }
    }

    /// Creates a Codex bot in `env.work` with `permission_mode` ("" for the CLI's default).
    async fn bot(&self, env: &TestEnv, permission_mode: &str) -> BotProxy<'static> {
        let work = env.work.to_str().unwrap().to_owned();
        let mut o = create_options(&work, &self.bot_env);
        o.insert("runtime", Variant::from("codex"));
        o.insert("permission_mode", Variant::from(permission_mode));
        let path = env
            .manager()
            .await
            .create_bot(o)
            .await
            .unwrap_or_else(|e| panic!("CreateBot codex: {e}"));
        env.bot(&path).await
    }

    fn rollout(&self, thread: &str) -> Option<PathBuf> {
        botvisor::runtime::codex::rollout::find(&self.codex_home, thread)
    }
}

use botvisor::dbus::client::BotProxy;

fn texts<'a>(items: &'a [(u64, String, serde_json::Value)], kind: &str) -> Vec<&'a str> {
    items
        .iter()
        .filter(|(_, k, _)| k == kind)
        .filter_map(|(_, _, p)| p["text"].as_str())
        .collect()
}

/// Waits until `LastError` satisfies `pred`; returns it.
async fn wait_last_error(bot: &BotProxy<'_>, pred: impl Fn(&str) -> bool) -> String {
    let mut changes = bot.receive_last_error_changed().await;
    let now = bot.last_error().await.unwrap();
    if pred(&now) {
        return now;
    }
    tokio::time::timeout(EVENT_TIMEOUT, async {
        while let Some(c) = changes.next().await {
            let e = c.get().await.unwrap();
            if pred(&e) {
                return e;
            }
        }
        panic!("LastError stream ended")
    })
    .await
    .expect("LastError shows it")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversation_is_resumed_across_a_daemon_restart() {
    let Some(codex) = codex_bin() else { return };
    let env = TestEnv::new().await;
    let mut s = CodexSetup::start(&env, codex, echo_script()).await;
    let bot = s.bot(&env, "").await;
    assert_eq!(bot.runtime().await.unwrap(), "codex");
    assert_eq!(
        bot.session_id().await.unwrap(),
        "",
        "no thread before a turn"
    );

    let seen = send_and_wait(&bot, "hello").await;
    assert_eq!(seen.outcome, "success", "{seen:?}");
    let kinds: Vec<&str> = seen.items.iter().map(|(_, k, _)| k.as_str()).collect();
    assert_eq!(kinds.first(), Some(&"user"), "{kinds:?}");
    assert_eq!(kinds.last(), Some(&"turn_finished"), "{kinds:?}");
    assert_eq!(
        texts(&seen.items, "assistant"),
        vec!["Hello! You said: hello"]
    );
    let thread = bot.session_id().await.unwrap();
    assert!(
        !thread.is_empty(),
        "the thread is recorded once a turn began"
    );
    assert!(s.rollout(&thread).is_some(), "its rollout exists");

    let status = s.daemon.terminate().await;
    assert!(status.success(), "{status:?}");
    s.daemon = Daemon::start(&s.cfg, &env.conn).await;
    let bot = env
        .bot(&env.manager().await.list_bots().await.unwrap()[0])
        .await;
    let seen = send_and_wait(&bot, "again").await;
    assert_eq!(seen.outcome, "success", "{seen:?}");
    assert_eq!(bot.session_id().await.unwrap(), thread, "the same thread");
    let last = s.api.requests().pop().unwrap();
    assert!(
        last.body.to_string().contains("Hello! You said: hello"),
        "thread/resume gave the model the history"
    );
    stop_and_wait(&bot).await;
    env.assert_no_leftovers();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_removed_while_the_daemon_was_down_starts_a_new_thread_and_says_why() {
    let Some(codex) = codex_bin() else { return };
    let env = TestEnv::new().await;
    let mut s = CodexSetup::start(&env, codex, echo_script()).await;
    let bot = s.bot(&env, "").await;
    assert_eq!(send_and_wait(&bot, "one").await.outcome, "success");
    let thread = bot.session_id().await.unwrap();
    s.daemon.terminate().await;
    std::fs::remove_file(s.rollout(&thread).expect("a rollout")).unwrap();
    s.daemon = Daemon::start(&s.cfg, &env.conn).await;
    let bot = env
        .bot(&env.manager().await.list_bots().await.unwrap()[0])
        .await;
    let seen = send_and_wait(&bot, "two").await;
    assert_eq!(seen.outcome, "success", "{seen:?}");
    let new = bot.session_id().await.unwrap();
    assert!(!new.is_empty() && new != thread, "a new thread: {new}");
    let all = chat(&bot).await;
    let why = of_kind(&all, "system")
        .into_iter()
        .find(|p| p["reason"] == "transcript_missing")
        .unwrap_or_else(|| panic!("no system item says why: {all:?}"));
    assert!(why["text"].as_str().unwrap().contains(&thread), "{why}");
    assert!(
        !s.api
            .requests()
            .last()
            .unwrap()
            .body
            .to_string()
            .contains("You said: one")
    );
    stop_and_wait(&bot).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_approval_allowed_runs_it_and_one_declined_does_not() {
    let Some(codex) = codex_bin() else { return };
    let env = TestEnv::new().await;
    let s = CodexSetup::start(&env, codex, shell_script()).await;
    let bot = s.bot(&env, "on-request:workspace-write").await;
    for (behavior, runs) in [("allow", true), ("deny", false)] {
        let target = env.work.join(format!("made-by-{behavior}"));
        let mut asks = bot.receive_permission_requested().await.unwrap();
        let mut finished = bot.receive_turn_finished().await.unwrap();
        let turn = bot
            .send(
                &format!("run escalated: touch {}", target.display()),
                HashMap::new(),
            )
            .await
            .unwrap();
        let ask = tokio::time::timeout(EVENT_TIMEOUT, asks.next())
            .await
            .expect("PermissionRequested")
            .unwrap();
        let a = ask.args().unwrap();
        assert_eq!(a.tool, "commandExecution");
        assert!(a.input_json.contains("touch"), "{}", a.input_json);
        let fresh = env
            .bot_uncached(&bot.inner().path().to_owned().into())
            .await;
        let pending = fresh.pending_permissions().await.unwrap();
        assert_eq!(pending.len(), 1, "{pending:?}");
        assert_eq!(pending[0].0, a.request_id);
        bot.respond_permission(&a.request_id, behavior, HashMap::new())
            .await
            .unwrap();
        let outcome = wait_turns(&mut finished, &[turn]).await;
        assert_eq!(outcome[0].1, "success", "{behavior}");
        assert_eq!(target.exists(), runs, "{behavior}");
        let all = chat(&bot).await;
        let result = of_kind(&all, "tool_result")
            .into_iter()
            .last()
            .cloned()
            .unwrap();
        assert_eq!(result["is_error"], !runs, "{result}");
    }
    stop_and_wait(&bot).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_ends_the_turn_interrupted_and_the_next_message_goes_on() {
    let Some(codex) = codex_bin() else { return };
    let env = TestEnv::new().await;
    let script: Script = std::sync::Arc::new(|req| {
        if req.last_user_text == "talk" {
            Reply::SlowText {
                chunks: (0..100).map(|i| format!("word{i} ")).collect(),
                every: Duration::from_millis(300),
            }
        } else {
            Reply::Text(format!("Hello! You said: {}", req.last_user_text))
        }
    });
    let s = CodexSetup::start(&env, codex, script).await;
    let bot = s.bot(&env, "").await;
    let mut finished = bot.receive_turn_finished().await.unwrap();
    let mut deltas = bot.receive_text_delta().await.unwrap();
    let turn = bot.send("talk", HashMap::new()).await.unwrap();
    tokio::time::timeout(EVENT_TIMEOUT, deltas.next())
        .await
        .expect("text streams");
    assert!(bot.interrupt().await.unwrap());
    let done = wait_turns(&mut finished, &[turn]).await;
    assert_eq!(done[0].1, "interrupted");
    let seen = send_and_wait(&bot, "after").await;
    assert_eq!(seen.outcome, "success", "{seen:?}");
    stop_and_wait(&bot).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_change_applies_live_to_the_next_request() {
    let Some(codex) = codex_bin() else { return };
    let env = TestEnv::new().await;
    let s = CodexSetup::start(&env, codex, echo_script()).await;
    let bot = s.bot(&env, "").await;
    assert_eq!(send_and_wait(&bot, "one").await.outcome, "success");
    let pid = bot.process_id().await.unwrap();
    let mut items = bot.receive_chat_item_added().await.unwrap();
    bot.set_model("other-model").await.unwrap();
    tokio::time::timeout(EVENT_TIMEOUT, async {
        while let Some(sig) = items.next().await {
            let a = sig.args().unwrap();
            if a.payload.contains("setting_applied") {
                return;
            }
            assert_ne!(a.kind, "error", "{}", a.payload);
        }
    })
    .await
    .expect("the running agent took the model");
    assert_eq!(send_and_wait(&bot, "two").await.outcome, "success");
    assert_eq!(bot.process_id().await.unwrap(), pid, "no restart");
    let models: Vec<String> = s.api.requests().iter().map(|r| r.model.clone()).collect();
    assert_eq!(models, vec!["fake-model", "other-model"]);
    stop_and_wait(&bot).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_proves_a_setsid_command_gone() {
    let Some(codex) = codex_bin() else { return };
    let env = TestEnv::new().await;
    let s = CodexSetup::start(&env, codex, shell_script()).await;
    let bot = s.bot(&env, "never:danger-full-access").await;
    let seen = send_and_wait(&bot, "run: setsid sleep 600 > /dev/null 2>&1 &").await;
    assert_eq!(seen.outcome, "success", "{seen:?}");
    let sleeping = || {
        env.leftovers()
            .into_iter()
            .filter(|(_, cmd)| cmd.starts_with("sleep 600"))
            .map(|(pid, _)| pid)
            .collect::<Vec<_>>()
    };
    let pid = tokio::time::timeout(EVENT_TIMEOUT, async {
        loop {
            if let Some(p) = sleeping().first() {
                return *p;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the model's command started sleep 600");
    let sid = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    println!("sleep 600: {sid}");
    stop_and_wait(&bot).await;
    let verdict = bot.stop_verdict().await.unwrap();
    assert!(
        sleeping().is_empty(),
        "sleep 600 survived the stop ({verdict})"
    );
    assert!(
        verdict == "clean" || verdict == "descendants-killed",
        "{verdict}"
    );
    env.assert_no_leftovers();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_codex_home_is_a_named_error_not_a_crash_loop() {
    let Some(codex) = codex_bin() else { return };
    let env = TestEnv::new().await;
    let mut s = CodexSetup::start(&env, codex, echo_script()).await;
    s.bot_env.insert(
        "CODEX_HOME".into(),
        env.home.join("no-such-home").to_string_lossy().into_owned(),
    );
    let bot = s.bot(&env, "").await;
    bot.send("hello", HashMap::new()).await.unwrap();
    let e = wait_last_error(&bot, |e| !e.is_empty()).await;
    assert!(
        e.contains("no-such-home") && e.contains("does not exist"),
        "{e}"
    );
    assert!(e.starts_with("cannot start the agent"), "{e}");
    assert_eq!(bot.state().await.unwrap(), "stopped");
    assert_eq!(
        bot.stop_verdict().await.unwrap(),
        "",
        "no agent was ever started"
    );
    assert_eq!(bot.queued_messages().await.unwrap(), 1, "the message waits");
    assert!(s.api.requests().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_api_that_is_not_there_shows_in_last_error() {
    let Some(codex) = codex_bin() else { return };
    let env = TestEnv::new().await;
    let s = CodexSetup::start(&env, codex, echo_script()).await;
    // A port nobody listens on: Codex retries "Reconnecting..." without end.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let home = codex_home(
        &env.home.join("closed"),
        &format!("http://127.0.0.1:{closed}/v1"),
        "",
    );
    let mut bot_env = s.bot_env.clone();
    bot_env.insert("CODEX_HOME".into(), home.to_string_lossy().into_owned());
    let work = env.work.to_str().unwrap().to_owned();
    let mut o = create_options(&work, &bot_env);
    o.insert("runtime", Variant::from("codex"));
    let path = env.manager().await.create_bot(o).await.unwrap();
    let bot = env.bot(&path).await;
    let mut finished = bot.receive_turn_finished().await.unwrap();
    let turn = bot.send("hello", HashMap::new()).await.unwrap();
    let e = wait_last_error(&bot, |e| e.contains("unreachable")).await;
    println!("LastError: {e}");
    assert!(e.contains("without limit") && !e.contains(" of 0"), "{e}");
    assert!(bot.interrupt().await.unwrap());
    let done = wait_turns(&mut finished, &[turn]).await;
    assert_eq!(done[0].1, "interrupted");
    stop_and_wait(&bot).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permission_modes_are_listed_per_runtime_checked_and_applied_live() {
    let Some(codex) = codex_bin() else { return };
    let env = TestEnv::new().await;
    let s = CodexSetup::start(&env, codex, echo_script()).await;
    let modes = env.manager().await.permission_modes().await.unwrap();
    assert!(
        modes["codex"].contains(&"on-request:workspace-write".to_owned()),
        "{modes:?}"
    );
    assert!(modes["claude"].contains(&"plan".to_owned()), "{modes:?}");
    assert!(!modes["codex"].contains(&"plan".to_owned()));

    let work = env.work.to_str().unwrap().to_owned();
    let mut o = create_options(&work, &s.bot_env);
    o.insert("runtime", Variant::from("codex"));
    o.insert("permission_mode", Variant::from("plan"));
    let e = env.manager().await.create_bot(o).await.unwrap_err();
    assert!(
        e.to_string().contains("InvalidArgument") && e.to_string().contains("on-request"),
        "{e}"
    );
    assert!(env.manager().await.list_bots().await.unwrap().is_empty());

    let bot = s.bot(&env, "never").await;
    assert_eq!(send_and_wait(&bot, "one").await.outcome, "success");
    let e = bot.set_permission_mode("acceptEdits").await.unwrap_err();
    assert!(e.to_string().contains("InvalidArgument"), "{e}");
    let mut items = bot.receive_chat_item_added().await.unwrap();
    bot.set_permission_mode("on-request:read-only")
        .await
        .unwrap();
    tokio::time::timeout(EVENT_TIMEOUT, async {
        while let Some(sig) = items.next().await {
            let a = sig.args().unwrap();
            if a.payload.contains("setting_applied") {
                return;
            }
            assert_ne!(a.kind, "error", "{}", a.payload);
        }
    })
    .await
    .expect("the running agent took the permission setting");
    assert_eq!(bot.permission_mode().await.unwrap(), "on-request:read-only");
    stop_and_wait(&bot).await;
}
