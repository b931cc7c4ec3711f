//! `botvisorctl` end to end on a private bus with the real CLI: a whole conversation with a
//! permission prompt, driven from two "terminals": `watch` in one, `send` and `answer` in others.

use std::process::Stdio;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};

use support::stand_in_api::demo_script;
use support::*;

fn ctl(env: &TestEnv) -> tokio::process::Command {
    let mut c = tokio::process::Command::new(env!("CARGO_BIN_EXE_botvisorctl"));
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("DBUS_SESSION_BUS_ADDRESS", &env.bus.address)
        .stdin(Stdio::null())
        .kill_on_drop(true);
    c
}

async fn run(env: &TestEnv, args: &[&str]) -> (bool, String, String) {
    let out = ctl(env).args(args).output().await.unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[cfg_attr(
    botvisor_skip_claude,
    ignore = "BOTVISOR_TEST_CLAUDE_BIN not set: no real Claude Code to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversation_with_a_permission_prompt_from_two_terminals() {
    let Some(claude) = claude_bin() else { return };
    let env = TestEnv::new().await;
    let setup = RealSetup::start(&env, claude, demo_script()).await;
    let work = env.work.to_str().unwrap();
    let mut create = vec!["--json", "create", "--cwd", work, "--name", "demo"];
    let envs: Vec<String> = setup
        .bot_env
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    for e in &envs {
        create.extend(["--env", e.as_str()]);
    }
    let (ok, out, err) = run(&env, &create).await;
    assert!(ok, "{err}");
    let created: Value = serde_json::from_str(out.trim()).unwrap();
    let id = created["id"].as_str().unwrap().to_owned();
    assert_eq!(created["name"], "demo");
    assert_eq!(id.len(), 32);

    // Terminal 1: watch everything, as JSON lines.
    let mut watch = ctl(&env)
        .args(["--json", "watch"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut watched = BufReader::new(watch.stdout.take().unwrap()).lines();

    // Terminal 2: send (not a terminal, so the prompt is shown, not asked).
    let target = env.work.join("note.txt");
    let message = format!("write {}: hi there", target.display());
    let mut send = ctl(&env)
        .args(["send", "demo", &message])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut sent = BufReader::new(send.stdout.take().unwrap()).lines();

    // The watcher sees the prompt and answers it from a third command.
    let request = tokio::time::timeout(EVENT_TIMEOUT, async {
        while let Some(line) = watched.next_line().await.unwrap() {
            let v: Value = serde_json::from_str(&line).unwrap();
            if v["event"] == "permission_requested" {
                return v["request_id"].as_str().unwrap().to_owned();
            }
        }
        panic!("watch ended");
    })
    .await
    .expect("watch shows the prompt");
    let shown = tokio::time::timeout(EVENT_TIMEOUT, async {
        while let Some(line) = sent.next_line().await.unwrap() {
            if line.starts_with("[permission?]") && line.contains("waiting; answer with") {
                return line;
            }
        }
        panic!("send ended");
    })
    .await
    .expect("send shows the prompt");
    assert!(shown.contains(&request), "{shown}");
    let (ok, _, err) = run(&env, &["answer", &id, &request, "allow"]).await;
    assert!(ok, "{err}");

    let status = tokio::time::timeout(EVENT_TIMEOUT, send.wait())
        .await
        .unwrap()
        .unwrap();
    let mut rest = Vec::new();
    while let Some(line) = sent.next_line().await.unwrap() {
        rest.push(line);
    }
    assert!(status.success(), "send failed: {rest:?}");
    assert!(rest.iter().any(|l| l == "Done."), "{rest:?}");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "hi there");

    // The watcher saw the answer and the end of the turn.
    tokio::time::timeout(EVENT_TIMEOUT, async {
        let mut answered = false;
        while let Some(line) = watched.next_line().await.unwrap() {
            let v: Value = serde_json::from_str(&line).unwrap();
            if v["event"] == "chat" && v["kind"] == "permission_answer" {
                answered = true;
            }
            if v["event"] == "turn_finished" {
                assert!(answered);
                assert_eq!(v["outcome"], "success");
                return;
            }
        }
    })
    .await
    .unwrap();
    watch.kill().await.unwrap();

    // History, set, interrupt, restart, stop, delete.
    let (ok, out, _) = run(&env, &["--json", "chat", "demo"]).await;
    assert!(ok);
    let kinds: Vec<String> = out
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["kind"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert!(
        kinds.contains(&"permission_request".to_owned()),
        "{kinds:?}"
    );
    let (ok, _, err) = run(&env, &["set", "demo", "--mode", "acceptEdits"]).await;
    assert!(ok, "{err}");
    let (ok, _, err) = run(&env, &["set", "demo", "--mode", "nonsense"]).await;
    assert!(!ok);
    assert!(
        err.contains("unknown permission mode `nonsense`") && !err.contains("InvalidArgument"),
        "{err}"
    );
    // A new environment (as for a rotated key): the names are shown, never the values.
    let mut set_env = vec!["--json", "set", "demo", "--env", "ROTATED=s3cret"];
    for e in &envs {
        set_env.extend(["--env", e.as_str()]);
    }
    let path = zbus::OwnedObjectPath::try_from(created["path"].as_str().unwrap()).unwrap();
    let restarted = env.bot(&path).await;
    let before = restarted.process_id().await.unwrap();
    let (ok, out, err) = run(&env, &set_env).await;
    assert!(ok, "{err}");
    // The running agent restarts with the new environment: waited for, so that the fresh
    // restart below is not followed by this one.
    let changes = restarted.receive_process_id_changed().await;
    tokio::time::timeout(EVENT_TIMEOUT, async {
        let mut changes = changes;
        loop {
            let now = restarted.process_id().await.unwrap();
            if before == 0 || (now != 0 && now != before) {
                break;
            }
            futures_util::StreamExt::next(&mut changes).await;
        }
    })
    .await
    .expect("the agent restarts with the new environment");
    let env_agent = restarted.process_id().await.unwrap();
    let shown: Value = serde_json::from_str(out.trim()).unwrap();
    assert!(
        shown["env"].as_array().unwrap().contains(&"ROTATED".into()),
        "{out}"
    );
    assert!(!out.contains("s3cret"), "{out}");
    let (ok, _, err) = run(&env, &["set", "demo", "--env", "NOVALUE"]).await;
    assert!(!ok);
    assert!(err.contains("is not KEY=VALUE"), "{err}");
    let (ok, out, _) = run(&env, &["interrupt", "demo"]).await;
    assert!(ok);
    assert!(out.contains("nothing to interrupt"), "{out}");
    let (ok, _, err) = run(&env, &["restart", "demo", "--fresh"]).await;
    assert!(ok, "{err}");
    // Restart returns at once; the stop below is of the restarted agent (a `stop` sent while
    // botvisord still restarts could see the restart's own passing `stopped`). The fresh
    // restart's agent is the one idle with no conversation: the `set --env` above restarts the
    // agent on its conversation too, and its `idle` may come first.
    // Its agent is a new process: `SessionId` may be heard empty (the forget's commit) before
    // the previous agent's `stopping`, so an idle state and an empty conversation alone could
    // still be the previous agent's.
    let changes = restarted.receive_state_changed().await;
    tokio::time::timeout(EVENT_TIMEOUT, async {
        let mut changes = changes;
        loop {
            let pid = restarted.process_id().await.unwrap();
            if restarted.state().await.unwrap() == "idle"
                && restarted.session_id().await.unwrap().is_empty()
                && pid != 0
                && pid != env_agent
            {
                break;
            }
            futures_util::StreamExt::next(&mut changes).await;
        }
    })
    .await
    .expect("the fresh restart's agent idles");
    let (ok, out, err) = run(&env, &["stop", "demo"]).await;
    assert!(out.starts_with("stopped demo (verdict: "), "{out}");
    assert!(ok, "{err}");
    let (ok, out, _) = run(&env, &["--json", "list"]).await;
    assert!(ok);
    let list: Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    assert_eq!(list["state"], "stopped");
    assert_eq!(list["session_id"], "");
    let (ok, _, err) = run(&env, &["delete", "--yes", "demo"]).await;
    assert!(ok, "{err}");
    let (ok, _, err) = run(&env, &["send", "demo", "hi"]).await;
    assert!(!ok);
    assert!(
        err.contains(
            "no bot has the id, id prefix or name `demo`; `botvisorctl list` shows them all"
        ),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn botvisorctl_says_when_the_daemon_is_not_running() {
    let env = TestEnv::new().await;
    let (ok, _, err) = run(&env, &["list"]).await;
    assert!(!ok);
    assert!(err.contains("botvisord is not running"), "{err}");
}

/// No raw control, invisible or text-direction character in `text` (see `botvisor::text`).
fn assert_printable(what: &str, text: &str) {
    assert_eq!(
        botvisor::text::first_unsafe(&text.replace(['\n', '\t'], "")),
        None,
        "{what} printed an unsafe character raw: {text:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn botvisorctl_escapes_what_it_prints() {
    let env = TestEnv::new().await;
    // A bot from before names were checked, whose name and folder hold escape sequences and a
    // right-to-left override: written straight into the database the daemon then opens.
    let odd_dir = env.dir.path().join("dir\u{1b}]0;pwned\u{7}\u{202e}gpj.exe");
    std::fs::create_dir(&odd_dir).unwrap();
    let cfg = env.daemon_config(Some(fake_cli()));
    {
        let store = botvisor::store::Store::open(&cfg.database).unwrap();
        let mut record = botvisor::store::BotRecord::new(
            "0123456789abcdef0123456789abcdef",
            "old\u{1b}[2Jname\u{9b}31m",
            odd_dir.to_str().unwrap(),
            "claude",
        );
        record.env = fake_env(
            &env.home,
            &env.dir.path().join("fake-state"),
            serde_json::json!([{"mode": "normal", "stream_reply": true}]),
            &env.marker,
        )
        .into_iter()
        .collect();
        store
            .tx(|tx| botvisor::store::bots::insert(tx, &record))
            .unwrap();
    }
    let _daemon = Daemon::start(&cfg, &env.conn).await;

    let (ok, out, err) = run(&env, &["list"]).await;
    assert!(ok, "{err}");
    assert_printable("list", &out);
    assert!(out.contains("old\\u{1b}[2Jname\\u{9b}31m"), "{out}");
    assert!(out.contains("\\u{202e}gpj.exe"), "{out}");
    let (ok, out, _) = run(&env, &["--json", "list"]).await;
    assert!(ok);
    assert_printable("list --json", &out);
    // One object per bot and line.
    let first: Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    assert_eq!(
        first["name"], "old\u{1b}[2Jname\u{9b}31m",
        "the JSON value is unchanged"
    );

    // Chat text (the fake agent echoes it) and errors.
    let id = "0123456789abcdef0123456789abcdef";
    let message = "look\u{1b}[31m red \u{202e}txt.exe\r\nsecond line";
    let (ok, out, err) = run(&env, &["send", id, message]).await;
    assert!(ok, "{err}");
    assert_printable("send", &out);
    assert!(
        out.contains("\\u{1b}[31m red \\u{202e}txt.exe\\r\nsecond line"),
        "{out}"
    );
    let (ok, out, _) = run(&env, &["chat", id]).await;
    assert!(ok);
    assert_printable("chat", &out);
    let (ok, out, _) = run(&env, &["--json", "chat", id]).await;
    assert!(ok);
    assert_printable("chat --json", &out);
    let first: Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    assert_eq!(first["payload"]["text"], message);
    let (ok, _, err) = run(&env, &["send", "nobody\u{1b}[2J\u{202e}", "hi"]).await;
    assert!(!ok);
    assert_printable("an error", &err);
    assert!(err.contains("no bot has the id"), "{err}");
}
