//! `botvisorctl` as a person at a terminal uses it, against the scripted fake CLI (issue 17):
//! `send` shows exactly its own turn under many concurrent senders, prompts are found and
//! answered from anywhere, `--json` and exit codes, and `watch` through a daemon restart.

use std::path::Path;
use std::process::Stdio;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

use support::terminal::IN_A_TERMINAL;
use support::*;

const CTL: &str = env!("CARGO_BIN_EXE_botvisorctl");

fn ctl(bus: &str) -> tokio::process::Command {
    let mut c = tokio::process::Command::new(CTL);
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("DBUS_SESSION_BUS_ADDRESS", bus)
        .stdin(Stdio::null())
        .kill_on_drop(true);
    c
}

/// Runs botvisorctl: (exit code, stdout, stderr).
async fn run(bus: &str, args: &[&str]) -> (i32, String, String) {
    let out = ctl(bus).args(args).output().await.unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A `[done: …]` line with its time (the turn's own, which varies) as `TIME`; other lines as
/// they are.
fn untimed(line: &str) -> String {
    match line.strip_suffix(']').and_then(|l| l.rsplit_once(", ")) {
        Some((head, time))
            if line.starts_with("[done: ") && (time.ends_with(" ms") || time.ends_with(" s")) =>
        {
            format!("{head}, TIME]")
        }
        _ => line.to_owned(),
    }
}

/// `botvisorctl create` of a bot named `name` run by the fake CLI with `plan`, in `cwd`.
async fn create(s: &FakeSetup, name: &str, cwd: &Path, plan: Value) -> String {
    let env = fake_env(&s.env.home, &s.state, plan, &s.env.marker);
    let mut args: Vec<String> = vec![
        "--json".into(),
        "create".into(),
        "--cwd".into(),
        cwd.to_str().unwrap().into(),
        "--name".into(),
        name.into(),
    ];
    for (k, v) in &env {
        args.push("--env".into());
        args.push(format!("{k}={v}"));
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, out, err) = run(&s.env.bus.address, &args).await;
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    v["id"].as_str().unwrap().to_owned()
}

/// Issue 17, points 1 and 2: 100 sends from 5 concurrent senders to one bot, whose turns queue
/// behind each other. Each `send` prints exactly its own reply and its own end, in order, and
/// exits 0; with `--json` every object is of its own turn and the last is its end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_senders_each_see_exactly_their_own_turn() {
    let s = FakeSetup::start("").await;
    let bus = s.env.bus.address.clone();
    create(&s, "busy", &s.env.work, json!([{"mode": "normal"}])).await;
    const SENDERS: usize = 5;
    const EACH: usize = 20;
    let mut workers = Vec::new();
    for w in 0..SENDERS {
        let bus = bus.clone();
        workers.push(tokio::spawn(async move {
            let mut wrong = Vec::new();
            for i in 0..EACH {
                let text = format!("hello {w}-{i}");
                let as_json = i % 4 == 3;
                if w == 0 {
                    // Setting notes (no turn) never show up in a send.
                    let model = format!("fake-{i}");
                    let (code, _, err) = run(&bus, &["set", "busy", "--model", &model]).await;
                    if code != 0 {
                        wrong.push(format!("set: exit {code}: {err}"));
                    }
                }
                let mut args = vec!["send", "busy", text.as_str()];
                if as_json {
                    args.insert(0, "--json");
                }
                let (code, out, err) = run(&bus, &args).await;
                let lines: Vec<&str> = out.lines().collect();
                if code != 0 {
                    wrong.push(format!("{text}: exit {code}: {out} {err}"));
                    continue;
                }
                if !as_json {
                    let want = [
                        format!("fake: {text}"),
                        "[done: success, $0.0000 this turn, TIME]".into(),
                    ];
                    let lines: Vec<String> = lines.iter().map(|l| untimed(l)).collect();
                    if lines != want {
                        wrong.push(format!("{text}: printed {lines:?}"));
                    }
                    continue;
                }
                let objects: Vec<Value> = lines
                    .iter()
                    .map(|l| serde_json::from_str(l).unwrap())
                    .collect();
                let turn = objects[0]["turn_id"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                let kinds: Vec<String> = objects
                    .iter()
                    .map(|o| match o["event"].as_str().unwrap_or_default() {
                        "chat" => o["kind"].as_str().unwrap().to_owned(),
                        other => other.to_owned(),
                    })
                    .collect();
                let own = objects[1..].iter().all(|o| {
                    o["turn_id"] == turn.as_str() || o["payload"]["turn_id"] == turn.as_str()
                });
                let want = [
                    "sent",
                    "user",
                    "assistant",
                    "result",
                    "turn_finished",
                    "turn_finished",
                ];
                if !own || kinds != want || objects[2]["payload"]["text"] != format!("fake: {text}")
                {
                    wrong.push(format!("{text} (json): {kinds:?} {out}"));
                }
            }
            wrong
        }));
    }
    let mut wrong = Vec::new();
    for w in workers {
        wrong.extend(w.await.unwrap());
    }
    assert!(
        wrong.is_empty(),
        "{} of 100 sends were wrong:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
    let (_, out, _) = run(&bus, &["--json", "chat", "busy"]).await;
    assert!(
        out.contains(r#""reason":"setting_applied""#),
        "the settings were applied while the sends ran"
    );
    // A running agent is stopped, and the verdict said.
    let (code, out, err) = run(&bus, &["stop", "busy"]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("stopped busy (verdict: clean"), "{out}");
    let (code, out, _) = run(&bus, &["--json", "stop", "busy"]).await;
    assert_eq!(code, 0);
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(
        (v["state"].as_str(), v["was_running"].as_bool()),
        (Some("stopped"), Some(false))
    );
}

/// Issue 17, points 1 and 6: a turn waits for permission while other turns queue; `list`,
/// `status`, `chat` and a `watch` started late all show the request id and how to answer;
/// `send` shows the prompt, the answer given elsewhere (named by the client), only its own
/// turn, and ends with its outcome.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_is_found_everywhere_and_answered_elsewhere() {
    let s = FakeSetup::start("").await;
    let bus = s.env.bus.address.clone();
    let id = create(
        &s,
        "asker",
        &s.env.work,
        json!([{"mode": "normal", "ask": {"tool": "Write", "input_bytes": 10}}]),
    )
    .await;
    let mut send = ctl(&bus)
        .args(["send", "asker", "first"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut sent = BufReader::new(send.stdout.take().unwrap()).lines();
    let shown = tokio::time::timeout(EVENT_TIMEOUT, sent.next_line())
        .await
        .expect("send shows the prompt")
        .unwrap()
        .unwrap();
    assert!(
        shown.contains("Write") && shown.contains("request ask-0-0"),
        "{shown}"
    );
    assert!(
        shown.contains("botvisorctl answer asker ask-0-0 allow|deny"),
        "{shown}"
    );
    // A second message queues behind the waiting turn (another terminal).
    let second = tokio::spawn({
        let bus = bus.clone();
        async move { run(&bus, &["send", "asker", "second"]).await }
    });

    let (code, out, _) = run(&bus, &["list"]).await;
    assert_eq!(code, 0);
    assert!(out.contains("waiting for permission"), "{out}");
    assert!(out.contains("botvisorctl answer "), "{out}");
    assert!(out.contains(" ask-0-0 allow|deny"), "{out}");
    let short = &id[..6];
    assert!(
        out.lines().nth(1).unwrap().starts_with(short),
        "short ids: {out}"
    );
    let (_, out, _) = run(&bus, &["status", "asker"]).await;
    assert!(
        out.contains("waiting for permission") && out.contains("ask-0-0"),
        "{out}"
    );
    let (_, out, _) = run(&bus, &["--json", "list"]).await;
    let listed: Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    assert_eq!(listed["pending_permissions"][0]["request_id"], "ask-0-0");
    let (_, out, _) = run(&bus, &["chat", "asker"]).await;
    assert!(out.contains("(request ask-0-0)"), "{out}");

    // A watch started now lists the open prompt first.
    let mut watch = ctl(&bus)
        .args(["--json", "watch"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut watched = BufReader::new(watch.stdout.take().unwrap()).lines();
    let first = read_until(&mut watched, |v| v["event"] == "watching").await;
    assert_eq!(first.len(), 1, "{first:?}");
    let first = &first[0];
    assert_eq!(first["event"], "pending_permission", "{first}");
    assert_eq!(first["request_id"], "ask-0-0");
    assert_eq!(first["name"], "asker");

    let (code, out, err) = run(&bus, &["answer", "asker", "ask-0-0", "allow"]).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), "allowed request ask-0-0");

    let status = tokio::time::timeout(EVENT_TIMEOUT, send.wait())
        .await
        .unwrap()
        .unwrap();
    let mut rest = Vec::new();
    while let Some(line) = sent.next_line().await.unwrap() {
        rest.push(line);
    }
    assert!(status.success(), "{rest:?}");
    let rest: Vec<String> = rest.iter().map(|l| untimed(l)).collect();
    assert_eq!(
        rest,
        [
            "[permission allow] request ask-0-0 by botvisorctl (".to_owned()
                + rest[0].split(" by botvisorctl (").nth(1).unwrap_or("?"),
            "fake: first".to_owned(),
            "[done: success, $0.0000 this turn, TIME]".to_owned(),
        ],
        "send printed other turns or missed its own"
    );
    // The second turn asks next; the watcher sees it, and it is denied from here.
    tokio::time::timeout(EVENT_TIMEOUT, async {
        while let Some(line) = watched.next_line().await.unwrap() {
            let v: Value = serde_json::from_str(&line).unwrap();
            // PendingPermissions as JSON: a list of requests.
            if v["event"] == "properties"
                && v["changed"]["PendingPermissions"][0]["request_id"] == "ask-0-1"
            {
                return;
            }
        }
        panic!("watch ended");
    })
    .await
    .expect("the second turn asks");
    let (code, _, err) = run(&bus, &["answer", "asker", "ask-0-1", "deny"]).await;
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = tokio::time::timeout(EVENT_TIMEOUT, second)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(code, 0, "{out} {err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 4, "{lines:?}");
    assert!(
        lines[0].contains("request ask-0-1") && lines[0].contains("waiting"),
        "{lines:?}"
    );
    assert!(
        lines[1].starts_with("[permission deny] request ask-0-1 by botvisorctl (:"),
        "{lines:?}"
    );
    assert_eq!(
        [lines[2].to_owned(), untimed(lines[3])],
        ["fake: second", "[done: success, $0.0000 this turn, TIME]"]
    );
    // Who answered is named in the chat for every client.
    let (_, out, _) = run(&bus, &["--json", "chat", "asker"]).await;
    let answers: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| v["kind"] == "permission_answer")
        .collect();
    assert_eq!(answers.len(), 2);
    for a in &answers {
        assert_eq!(a["payload"]["client"], "botvisorctl", "{a}");
        assert!(
            a["payload"]["turn_id"].is_string(),
            "an answer carries its turn: {a}"
        );
    }
    watch.kill().await.unwrap();
}

/// Reads JSON lines from `lines` until `stop` holds for one, returning those before it.
async fn read_until(
    lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    stop: impl Fn(&Value) -> bool,
) -> Vec<Value> {
    let mut seen = Vec::new();
    tokio::time::timeout(EVENT_TIMEOUT, async {
        while let Some(line) = lines.next_line().await.unwrap() {
            let v: Value = serde_json::from_str(&line).unwrap();
            if stop(&v) {
                return;
            }
            seen.push(v);
        }
        panic!("the output ended; saw {seen:?}");
    })
    .await
    .unwrap_or_else(|_| panic!("timed out; saw {seen:?}"));
    seen
}

/// Issue 17, point 4: at daemon shutdown every bot's last state (`stopped`) is signalled before
/// the bus name goes; `watch` says botvisord left and came back, and a `watch` of one bot ends
/// when that bot is deleted. The daemon's log names its configuration file and CLI binary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_sees_every_last_change_before_botvisord_leaves_and_its_return() {
    let mut s = FakeSetup::start("").await;
    let bus = s.env.bus.address.clone();
    let mut ids = Vec::new();
    for i in 0..4 {
        let name = format!("agent{i}");
        ids.push(create(&s, &name, &s.env.work, json!([{"mode": "normal"}])).await);
        let (code, _, err) = run(&bus, &["send", &name, "hi"]).await;
        assert_eq!(code, 0, "{err}");
    }
    let log = s.daemon.log_text();
    assert!(
        log.contains("configuration read") && log.contains("config.toml"),
        "{log}"
    );
    assert!(
        log.contains("binary=") && log.contains("fake_claude.py"),
        "{log}"
    );

    let mut watch = ctl(&bus)
        .args(["--json", "watch"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut watched = BufReader::new(watch.stdout.take().unwrap()).lines();
    read_until(&mut watched, |v| v["event"] == "watching").await;

    assert!(s.daemon.terminate().await.success());
    let before_leaving = read_until(&mut watched, |v| v["event"] == "daemon_left").await;
    for id in &ids {
        let last = before_leaving
            .iter()
            .rev()
            .filter(|v| v["bot"].as_str().is_some_and(|b| b.ends_with(id.as_str())))
            .find_map(|v| v["changed"]["State"].as_str());
        assert_eq!(last, Some("stopped"), "bot {id}: {before_leaving:?}");
    }

    s.daemon = Daemon::start(&s.cfg, &s.env.conn).await;
    read_until(&mut watched, |v| v["event"] == "daemon_back").await;
    // The same watch goes on with the new botvisord.
    let (code, _, err) = run(&bus, &["send", "agent1", "after the restart"]).await;
    assert_eq!(code, 0, "{err}");
    read_until(&mut watched, |v| {
        v["event"] == "chat" && v["payload"]["text"] == "fake: after the restart"
    })
    .await;
    watch.kill().await.unwrap();

    let mut one = ctl(&bus)
        .args(["watch", "agent0"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut one_out = BufReader::new(one.stdout.take().unwrap()).lines();
    // The watch of one bot is subscribed when botvisord knows its match rule: wait for a
    // state line of that bot after a send.
    let (code, _, _) = run(&bus, &["send", "agent0", "again"]).await;
    assert_eq!(code, 0);
    tokio::time::timeout(EVENT_TIMEOUT, async {
        while let Some(l) = one_out.next_line().await.unwrap() {
            if l.contains("turn ") && l.contains("ended: success") {
                return;
            }
        }
    })
    .await
    .expect("the watch of one bot sees its turn");
    let (code, out, err) = run(&bus, &["delete", "agent0"]).await;
    assert_eq!(
        code, 2,
        "delete without a terminal asks for --yes: {out} {err}"
    );
    assert!(err.contains("--yes"), "{err}");
    let (code, out, err) = run(&bus, &["delete", "--yes", "agent0"]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("deleted agent0 ("), "{out}");
    let status = tokio::time::timeout(EVENT_TIMEOUT, one.wait())
        .await
        .expect("watch ends")
        .unwrap();
    assert!(status.success());
    let mut rest = Vec::new();
    while let Some(l) = one_out.next_line().await.unwrap() {
        rest.push(l);
    }
    assert!(
        rest.last()
            .is_some_and(|l| l.starts_with("bot removed: agent0")),
        "{rest:?}"
    );
}

/// Issue 17, point 6: `send` in a terminal asks itself; a question answered by another client
/// goes away without Enter, naming who answered (not only a bus name), and output that arrives
/// is printed on clean lines; a question answered here is answered by this client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_terminal_question_goes_when_answered_elsewhere() {
    let s = FakeSetup::start("").await;
    let bus = s.env.bus.address.clone();
    create(
        &s,
        "asker",
        &s.env.work,
        json!([{"mode": "normal", "ask": {"tool": "Write", "input_bytes": 10}}]),
    )
    .await;
    let in_terminal = |answer: Option<&str>, text: &str| {
        let mut c = tokio::process::Command::new("python3");
        c.args(["-c", IN_A_TERMINAL, CTL, "send", "asker", text])
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("DBUS_SESSION_BUS_ADDRESS", &bus)
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .kill_on_drop(true);
        if let Some(a) = answer {
            c.env("ANSWER", a);
        }
        c.spawn().unwrap()
    };

    // Answered elsewhere: no Enter needed.
    let mut send = in_terminal(None, "first");
    let mut out = send.stdout.take().unwrap();
    let mut seen = Vec::new();
    tokio::time::timeout(EVENT_TIMEOUT, async {
        use tokio::io::AsyncReadExt;
        let mut buf = [0u8; 4096];
        while !String::from_utf8_lossy(&seen).contains("[y/N]") {
            let n = out.read(&mut buf).await.unwrap();
            assert!(n > 0, "ended: {}", String::from_utf8_lossy(&seen));
            seen.extend_from_slice(&buf[..n]);
        }
    })
    .await
    .expect("send asks in the terminal");
    let (code, _, err) = run(&bus, &["answer", "asker", "ask-0-0", "allow"]).await;
    assert_eq!(code, 0, "{err}");
    let status = tokio::time::timeout(EVENT_TIMEOUT, send.wait())
        .await
        .expect("send ends without Enter")
        .unwrap();
    {
        use tokio::io::AsyncReadExt;
        out.read_to_end(&mut seen).await.unwrap();
    }
    let text = String::from_utf8_lossy(&seen).into_owned();
    assert!(status.success(), "{text}");
    assert!(text.contains("Allow Write {\"content\":\"xxxxxxxxxx\",\"file_path\":\"/dev/null\"}? (request ask-0-0) [y/N]"), "{text:?}");
    // The question's lines are cleared (to the end of the screen), then the note replaces it.
    assert!(
        text.contains("\r\x1b[J(answered elsewhere: allow by botvisorctl (:"),
        "{text:?}"
    );
    assert!(text.contains("fake: first\r\n[done: success"), "{text:?}");
    assert!(!text.contains("\x1b[3"), "NO_COLOR is honoured: {text:?}");

    // Answered here: y and Enter.
    let send = in_terminal(Some("y"), "second");
    let done = tokio::time::timeout(EVENT_TIMEOUT, send.wait_with_output())
        .await
        .expect("send ends")
        .unwrap();
    let text = String::from_utf8_lossy(&done.stdout).into_owned();
    assert!(done.status.success(), "{text}");
    assert!(text.contains("fake: second"), "{text:?}");
    assert!(!text.contains("answered elsewhere"), "{text:?}");
    let answers = json_lines(&s.state.join("answers.jsonl"));
    assert_eq!(answers.len(), 2);
    assert!(
        answers.iter().all(|a| a["behavior"] == "allow"),
        "{answers:?}"
    );
}

/// Issue 17, point 9: `list` aligns its columns by display width (CJK and emoji names) and fits
/// the terminal's width; `create` says when a name was taken and suffixed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_aligns_wide_names_and_fits_the_terminal() {
    use unicode_width::UnicodeWidthStr;
    let s = FakeSetup::start("").await;
    let bus = s.env.bus.address.clone();
    let deep = s
        .env
        .work
        .join("a-rather-long-folder-name/and-another-one/下の階層");
    std::fs::create_dir_all(&deep).unwrap();
    create(&s, "a", &deep, json!([{"mode": "normal"}])).await;
    create(&s, "日本語のボット🤖", &deep, json!([{"mode": "normal"}])).await;
    let (code, out, err) = run(&bus, &["create", "--cwd", deep.to_str().unwrap()]).await;
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("note: a bot named 下の階層 exists") || out.contains("created 下の階層 ("),
        "{out}"
    );
    let (code, out, _) = run(&bus, &["create", "--cwd", deep.to_str().unwrap()]).await;
    assert_eq!(code, 0);
    assert!(
        out.contains("note: a bot named 下の階層 exists already, so this one is 下の階層-2"),
        "{out}"
    );
    for columns in ["200", "50"] {
        let out = ctl(&bus)
            .env("COLUMNS", columns)
            .arg("list")
            .output()
            .await
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let width: usize = columns.parse().unwrap();
        for line in text.lines() {
            assert!(
                line.width() <= width,
                "wider than {width}: {line:?}\n{text}"
            );
        }
        // Each row's state starts at the header's STATE column, whatever the name's width.
        let header = text.lines().next().unwrap();
        assert!(header.contains("RUNTIME"), "{text}");
        // Issue 30: every bot on one line, even at 50 columns.
        assert_eq!(text.lines().count(), 5, "{text}");
        assert_eq!(text.matches(" claude ").count(), 4, "{text}");
        let at = header[..header.find("STATE").unwrap()].width();
        for line in text.lines().skip(1).filter(|l| l.contains("stopped")) {
            assert_eq!(line[..line.find("stopped").unwrap()].width(), at, "{text}");
        }
    }
}

/// `watch --json BOT` says it watches one bot, however many there are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_of_one_bot_counts_one() {
    let s = FakeSetup::start("").await;
    let plan = serde_json::json!([{"mode": "normal"}]);
    create(&s, "one", &s.env.work, plan.clone()).await;
    create(&s, "two", &s.env.work, plan).await;
    let bus = s.env.bus.address.clone();
    let mut watch = ctl(&bus)
        .args(["--json", "watch", "one"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(watch.stdout.take().unwrap()).lines();
    let watching = tokio::time::timeout(EVENT_TIMEOUT, async {
        loop {
            let line = lines.next_line().await.unwrap().expect("watch prints");
            let v: Value = serde_json::from_str(&line).unwrap();
            if v["event"] == "watching" {
                return v;
            }
        }
    })
    .await
    .expect("watch says it is subscribed");
    assert_eq!(watching["bots"], 1, "{watching}");
}

/// `top`: with `--json` (and likewise when stdout is not a terminal) one JSON line per refresh,
/// `-n` of them, each with every bot, its state, agent and usage; CPU% is known only from the
/// second refresh of a running agent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_prints_one_json_line_per_refresh_with_every_bot() {
    let s = FakeSetup::start("").await;
    let bus = s.env.bus.address.clone();
    let other = s.env.dir.path().join("other");
    std::fs::create_dir(&other).unwrap();
    create(&s, "running", &s.env.work, json!([{"mode": "normal"}])).await;
    create(&s, "resting", &other, json!([{"mode": "normal"}])).await;
    let (code, _, err) = run(&bus, &["send", "running", "hi"]).await;
    assert_eq!(code, 0, "{err}");
    for args in [
        &["--json", "top", "-n", "2", "--interval", "0.2"][..],
        &["top", "--iterations", "2", "--interval", "0.2"][..],
    ] {
        let (code, out, err) = run(&bus, args).await;
        assert_eq!(code, 0, "{args:?}: {err}");
        let lines: Vec<Value> = out
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect();
        assert_eq!(lines.len(), 2, "{args:?}: {out}");
        for (i, line) in lines.iter().enumerate() {
            assert!(line["time"].is_string(), "{line}");
            let bots = line["bots"].as_array().unwrap();
            let names: Vec<&str> = bots.iter().map(|b| b["name"].as_str().unwrap()).collect();
            assert_eq!(names, ["resting", "running"], "{line}");
            let (resting, running) = (&bots[0], &bots[1]);
            assert_eq!(resting["state"], "stopped", "{resting}");
            assert_eq!(resting["process_id"], 0);
            for key in [
                "memory_current",
                "cpu_usage_nsec",
                "cpu_percent",
                "tasks_current",
            ] {
                assert!(resting[key].is_null(), "no agent, no {key}: {resting}");
            }
            assert_eq!(resting["memory_max"], Value::Null, "no limit");
            assert_eq!(running["state"], "idle", "{running}");
            assert!(running["process_id"].as_u64().unwrap() > 0, "{running}");
            assert!(running["id"].as_str().unwrap().len() == 32, "{running}");
            if i == 0 {
                assert!(running["cpu_percent"].is_null(), "first refresh: {running}");
            }
            for key in ["memory_current", "cpu_usage_nsec", "tasks_current"] {
                assert!(running.get(key).is_some(), "{key}: {running}");
            }
        }
    }
    let (code, _, err) = run(&bus, &["top", "--interval", "0"]).await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("0.1 to 3600"), "{err}");
}

/// What botvisord says is shown on one line per field: a bot whose folder's name holds a newline,
/// a tab, ESC and a right-to-left override is one row of `list`, one line of `status` and of
/// `watch`, with those characters escaped; a model name with a newline is refused in an error
/// of one line that shows it escaped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_characters_from_botvisord_are_escaped_on_one_line() {
    let s = FakeSetup::start("").await;
    let bus = s.env.bus.address.clone();
    let mut watch = ctl(&bus)
        .arg("watch")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut watched = BufReader::new(watch.stdout.take().unwrap()).lines();
    let mut notes = BufReader::new(watch.stderr.take().unwrap()).lines();
    tokio::time::timeout(EVENT_TIMEOUT, notes.next_line())
        .await
        .expect("watch says it is watching")
        .unwrap();

    let cwd = s.env.work.join("evil\nrow\tx\u{1b}[2J\u{202e}txt");
    std::fs::create_dir_all(&cwd).unwrap();
    let escaped = "evil\\nrow\\tx\\u{1b}[2J\\u{202e}txt";
    create(&s, "odd", &cwd, json!([{"mode": "normal"}])).await;

    let (code, out, err) = run(&bus, &["list"]).await;
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "a header and one row: {out:?}");
    assert!(lines[1].contains(escaped), "{out:?}");

    let (code, out, err) = run(&bus, &["status", "odd"]).await;
    assert_eq!(code, 0, "{err}");
    let cwd_line = out.lines().find(|l| l.contains("cwd:")).unwrap();
    assert!(cwd_line.ends_with(escaped), "{out:?}");
    assert!(!out.contains('\u{1b}') && !out.contains('\t'), "{out:?}");

    let added = tokio::time::timeout(EVENT_TIMEOUT, async {
        loop {
            let line = watched.next_line().await.unwrap().expect("watch prints");
            if line.contains("bot added") {
                return line;
            }
        }
    })
    .await
    .expect("watch shows the new bot");
    assert!(added.ends_with(escaped), "{added:?}");

    let (code, out, err) = run(&bus, &["set", "odd", "--model", "bad\nmodel"]).await;
    assert_eq!(code, 1, "{out}");
    assert_eq!(err.lines().count(), 1, "{err:?}");
    assert!(err.contains("`bad\\nmodel`"), "{err:?}");
}

/// `set` with empty values says it went back to the CLI's defaults, for the model and the
/// permission mode alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_names_the_clis_default_for_empty_values() {
    let s = FakeSetup::start("").await;
    let bus = s.env.bus.address.clone();
    create(&s, "plain", &s.env.work, json!([{"mode": "normal"}])).await;
    let (code, out, err) = run(
        &bus,
        &["set", "plain", "--permission-mode", "", "--model", ""],
    )
    .await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out.trim_end(),
        "plain: permission mode (the CLI's default), model (the CLI's default) (taken at the \
         next start)"
    );
}

/// A bot deleted while `send` waits for its turn, which the agent has taken: the turn ends
/// `interrupted` before the bot's object goes away, and `send` ends with exit code 1 ("the
/// operation failed", as for a bot that fails), saying the bot was deleted, not with 4 (a turn
/// interrupted, worth sending again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_whose_bot_is_deleted_fails_with_exit_code_1() {
    let s = FakeSetup::start("").await;
    let bus = s.env.bus.address.clone();
    // The agent takes the message and answers only after 10 minutes.
    let plan = json!([{"mode": "normal", "reply_after_s": 600}]);
    create(&s, "doomed", &s.env.work, plan).await;
    let mut watch = ctl(&bus)
        .args(["--json", "watch", "doomed"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut watched = BufReader::new(watch.stdout.take().unwrap()).lines();
    read_until(&mut watched, |v| v["event"] == "watching").await;
    let mut send = ctl(&bus)
        .args(["--json", "send", "doomed", "hello"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Taken: the CLI replayed it, and the turn began in a conversation now on record.
    read_until(&mut watched, |v| {
        v["changed"]["SessionId"]
            .as_str()
            .is_some_and(|s| !s.is_empty())
    })
    .await;
    let (code, _, err) = run(&bus, &["delete", "doomed", "--yes"]).await;
    assert_eq!(code, 0, "{err}");
    let mut sent = BufReader::new(send.stdout.take().unwrap()).lines();
    let mut lines = Vec::new();
    while let Some(line) = sent.next_line().await.unwrap() {
        lines.push(serde_json::from_str::<Value>(&line).unwrap());
    }
    let out = tokio::time::timeout(EVENT_TIMEOUT, send.wait_with_output())
        .await
        .expect("send ends when its bot is deleted")
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    let finished = lines.iter().find(|v| v["event"] == "turn_finished");
    assert_eq!(
        finished.map(|v| v["outcome"].clone()),
        Some(json!("interrupted")),
        "{lines:?}"
    );
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("the bot was deleted before the turn ended"),
        "{err}"
    );
}

/// `top` outlives a restart of botvisord, as `watch` does: `{"event": "daemon_left"}` once when
/// it is gone, `{"event": "daemon_back"}` when it is back, then refreshes of the new daemon's
/// bots (it used to end with exit code 1, "botvisord is not running").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_waits_through_a_daemon_restart() {
    let mut s = FakeSetup::start("").await;
    let bus = s.env.bus.address.clone();
    create(&s, "steady", &s.env.work, json!([{"mode": "normal"}])).await;
    let mut top = ctl(&bus)
        .args(["--json", "top", "--interval", "0.1"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(top.stdout.take().unwrap()).lines();
    read_until(&mut lines, |v| v["bots"][0]["name"] == "steady").await;
    assert!(s.daemon.terminate().await.success());
    read_until(&mut lines, |v| v["event"] == "daemon_left").await;
    s.daemon = Daemon::start(&s.cfg, &s.env.conn).await;
    let meanwhile = read_until(&mut lines, |v| v["event"] == "daemon_back").await;
    assert!(
        meanwhile.iter().all(|v| v.get("bots").is_none()),
        "no refresh of bots while botvisord is away: {meanwhile:?}"
    );
    read_until(&mut lines, |v| v["bots"][0]["name"] == "steady").await;
    assert!(
        top.try_wait().unwrap().is_none(),
        "top still runs after the restart"
    );
    top.kill().await.unwrap();
}

/// `botvisorctl send BOT -` with `bytes` written to its stdin by a task of its own, 1 MiB at a
/// time (the writer stops when botvisorctl closes stdin early); its output once it ends.
async fn send_from_stdin(
    bus: &str,
    bot: &str,
    bytes: impl Iterator<Item = u8> + Send + 'static,
) -> std::process::Output {
    use tokio::io::AsyncWriteExt;
    let mut send = ctl(bus)
        .args(["send", bot, "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = send.stdin.take().unwrap();
    let writer = tokio::spawn(async move {
        let mut bytes = bytes.peekable();
        while bytes.peek().is_some() {
            let chunk: Vec<u8> = bytes.by_ref().take(1 << 20).collect();
            if stdin.write_all(&chunk).await.is_err() {
                return;
            }
        }
    });
    let out = tokio::time::timeout(EVENT_TIMEOUT, send.wait_with_output())
        .await
        .expect("send ends")
        .unwrap();
    writer.await.unwrap();
    out
}

/// A message longer than `Send` takes (1 MiB) is refused by botvisorctl before it sends, with
/// the daemon's words and the exit code of a usage error, whatever its size: 200,000,000 bytes
/// used to meet the bus's own limit first (`botvisorctl: excess data`, exit 1). Nothing is sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_message_is_refused_before_it_is_sent() {
    let s = FakeSetup::start("").await;
    let bus = s.env.bus.address.clone();
    create(&s, "small", &s.env.work, json!([{"mode": "normal"}])).await;
    for size in [2_000_000usize, 200_000_000] {
        let out = send_from_stdin(&bus, "small", std::iter::repeat_n(b'x', size)).await;
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{size}: {err}");
        assert!(
            err.contains(&format!(
                "botvisorctl: the message is {size} bytes; Send takes at most \
                 1048576 bytes (1 MiB)."
            )),
            "{size}: {err}"
        );
    }
    assert!(s.messages().is_empty(), "{:?}", s.messages());
}

/// A message holding a NUL byte, which D-Bus cannot carry, is refused by botvisorctl in words
/// with the exit code of a usage error; before, the bus library dropped the connection
/// ("the connection to the bus … was lost", exit 1). Nothing is sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_with_a_nul_byte_is_refused_before_it_is_sent() {
    let s = FakeSetup::start("").await;
    let bus = s.env.bus.address.clone();
    create(&s, "small", &s.env.work, json!([{"mode": "normal"}])).await;
    let out = send_from_stdin(&bus, "small", b"a\0b".iter().copied()).await;
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("NUL byte (U+0000)"), "{err}");
    assert!(s.messages().is_empty(), "{:?}", s.messages());
}

/// `create --memory-max` passes the limit to `CreateBot` in bytes (2G is 2 GiB, as systemd's
/// `MemoryMax=` reads it): the bot's `memory_max` is that, or, where botvisord has no memory
/// controller, `CreateBot` answers NotSupported; a size that is not one is a usage error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_takes_a_memory_limit_with_a_suffix() {
    let s = FakeSetup::start("").await;
    let bus = s.env.bus.address.clone();
    let cwd = s.env.work.to_str().unwrap();
    let (code, out, err) = run(
        &bus,
        &["--json", "create", "--cwd", cwd, "--memory-max", "2G"],
    )
    .await;
    if code == 0 {
        let v: Value = serde_json::from_str(out.trim()).unwrap();
        let id = v["id"].as_str().unwrap();
        let (code, out, err) = run(&bus, &["--json", "status", id]).await;
        assert_eq!(code, 0, "{err}");
        let v: Value = serde_json::from_str(out.trim()).unwrap();
        assert_eq!(v["memory_max"], 2u64 << 30, "{v}");
    } else {
        assert_eq!(code, 1, "{err}");
        assert!(err.contains("cannot be applied"), "{err}");
    }
    let (code, _, err) = run(&bus, &["create", "--cwd", cwd, "--memory-max", "2X"]).await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("is not a size"), "{err}");
}

/// `botvisorctl chat … | head`: the reader goes away while botvisorctl still writes. It ends
/// quietly with exit 0, as a filter does, not with a panic and its backtrace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_into_a_pipe_closed_early_ends_quietly() {
    use tokio::io::AsyncReadExt;
    let s = FakeSetup::start("").await;
    let bus = s.env.bus.address.clone();
    create(&s, "long", &s.env.work, json!([{"mode": "normal"}])).await;
    // Four items of 100 KB: more than a pipe holds, so botvisorctl is still writing when the
    // reader closes.
    let text = "x".repeat(100_000);
    for _ in 0..2 {
        let (code, _, err) = run(&bus, &["send", "long", &text]).await;
        assert_eq!(code, 0, "{err}");
    }
    let mut child = ctl(&bus)
        .args(["chat", "long", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut first = [0u8; 64];
    stdout.read_exact(&mut first).await.unwrap();
    drop(stdout);
    let out = tokio::time::timeout(EVENT_TIMEOUT, child.wait_with_output())
        .await
        .expect("botvisorctl ends")
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(out.status.code(), Some(0), "{err}");
}

/// A folder whose name holds characters a bot's name may not: botvisord names the bot with them
/// as `_`, and `create` does not claim another bot took the name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_in_a_folder_with_unsafe_characters_is_not_said_to_be_renamed() {
    let s = FakeSetup::start("").await;
    let bus = s.env.bus.address.clone();
    let dir = s.env.work.join("we\u{1b}[31mird");
    std::fs::create_dir(&dir).unwrap();
    let (code, out, err) = run(&bus, &["--json", "create", "--cwd", dir.to_str().unwrap()]).await;
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["name"], "we_[31mird");
    assert_eq!(v["name_suffixed"], false, "{v}");
    let (code, out, err) = run(&bus, &["create", "--cwd", dir.to_str().unwrap()]).await;
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("exists already"),
        "a second one is renamed: {out}"
    );
}

/// botvisord dies while `stop` waits for the agent to be proven gone: `stop` ends with exit 1
/// and says so, instead of waiting for ever (or for another stop's state).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_ends_with_words_when_botvisord_goes_away() {
    let mut s = FakeSetup::start("stop_grace_s = 30\n").await;
    let bus = s.env.bus.address.clone();
    create(
        &s,
        "stubborn",
        &s.env.work,
        json!([{"mode": "silent", "ignore_term": true}]),
    )
    .await;
    let mut sender = ctl(&bus)
        .args(["send", "stubborn", "hi"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let manager = s.env.manager().await;
    let path = manager.list_bots().await.unwrap().remove(0);
    let bot = s.env.bot(&path).await;
    wait_state(&bot, "busy").await;
    // The fake read the message: it ignores SIGTERM from now on (set before it reads).
    tokio::time::timeout(EVENT_TIMEOUT, async {
        while s.messages().is_empty() {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the agent reads the message");
    let stop = ctl(&bus)
        .args(["stop", "stubborn"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_state(&bot, "stopping").await;
    s.daemon.kill();
    let out = tokio::time::timeout(EVENT_TIMEOUT, stop.wait_with_output())
        .await
        .expect("stop ends")
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("went away"), "{err}");
    let _ = sender.kill().await;
    // As `stop` says: the next botvisord stops what is left.
    s.cfg.config = Some(write_config(s.env.dir.path(), "stop_grace_s = 0.5\n"));
    s.daemon = Daemon::start(&s.cfg, &s.env.conn).await;
    tokio::time::timeout(EVENT_TIMEOUT, async {
        while !s.env.leftovers().is_empty() {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("left running: {:?}", s.env.leftovers()));
}

/// Issue 30: `answer` takes the only open prompt without an id, a unique start of an id, and
/// `--always`; it says which prompts are open when it cannot tell which one is meant.
/// `rename` renames.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answer_finds_the_prompt_by_a_prefix_or_alone_and_rename_renames() {
    let s = FakeSetup::start("").await;
    let bus = s.env.bus.address.clone();
    let suggestion = json!([{"type": "addRules", "rules": [{"toolName": "Bash"}],
                             "behavior": "allow", "destination": "localSettings"}]);
    create(
        &s,
        "asker",
        &s.env.work,
        json!([{"mode": "normal", "ask": {"tool": "Bash", "count": 2, "input": {"command": "x"},
                                          "suggestions": suggestion}}]),
    )
    .await;
    let (code, _, err) = run(&bus, &["answer", "asker", "allow"]).await;
    assert_eq!(code, 1);
    assert!(err.contains("asker has no open permission prompt"), "{err}");
    let send = tokio::spawn({
        let bus = bus.clone();
        async move { run(&bus, &["send", "asker", "go"]).await }
    });
    // Both requests open.
    let path = s.env.manager().await.get_bot("asker").await.unwrap();
    let bot = s.env.bot(&path).await;
    let changes = bot.receive_pending_permissions_changed().await;
    tokio::time::timeout(EVENT_TIMEOUT, async {
        let mut changes = changes;
        while bot.pending_permissions().await.unwrap().len() < 2 {
            futures_util::StreamExt::next(&mut changes).await;
        }
    })
    .await
    .expect("two prompts open");
    let (code, _, err) = run(&bus, &["answer", "asker", "allow"]).await;
    assert_eq!(code, 1);
    assert!(
        err.contains("asker has 2 open permission prompts: ask-0-0 (Bash), ask-0-1 (Bash)")
            && err.contains("botvisorctl answer asker REQUEST allow|deny"),
        "{err}"
    );
    let (code, _, err) = run(&bus, &["answer", "asker", "ask-0", "allow"]).await;
    assert_eq!(code, 1);
    assert!(err.contains("`ask-0` starts 2 open requests"), "{err}");
    // An empty id (a script's unset variable) answers nothing.
    let (code, _, err) = run(&bus, &["answer", "asker", "", "deny"]).await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("the request id is empty"), "{err}");
    assert_eq!(bot.pending_permissions().await.unwrap().len(), 2);
    let (code, _, err) = run(&bus, &["answer", "asker", "zzz", "allow"]).await;
    assert_eq!(code, 1);
    assert!(
        err.contains("no open permission prompt of asker starts with `zzz`"),
        "{err}"
    );
    // A rule alone holds for the CLI's session only (facts::claude): no `always` for it.
    let (code, _, err) = run(&bus, &["answer", "asker", "ask-0-1", "allow", "--always"]).await;
    assert_eq!(code, 1);
    assert!(
        err.contains("offers the scope once, session; not `always`"),
        "{err}"
    );
    let (code, out, err) = run(&bus, &["answer", "asker", "ask-0-1", "allow", "--session"]).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out.trim(),
        "allowed request ask-0-1, and the same while the agent runs (session)"
    );
    let (code, _, err) = run(&bus, &["answer", "asker", "deny", "--always"]).await;
    assert_eq!(code, 2, "{err}");
    let (code, out, err) = run(&bus, &["--json", "answer", "asker", "deny"]).await;
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(
        v,
        json!({"request_id": "ask-0-0", "behavior": "deny", "scope": "once"})
    );
    let (code, out, err) = tokio::time::timeout(EVENT_TIMEOUT, send)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(code, 0, "{out} {err}");
    let grants = json_lines(&s.state.join("grants.jsonl"));
    assert_eq!(grants.len(), 2, "{grants:?}");
    assert!(
        grants
            .iter()
            .any(|g| g["updatedPermissions"][0]["destination"] == "session"),
        "{grants:?}"
    );
    let (code, _, err) = run(&bus, &["answer", "asker", "allow", "maybe"]).await;
    assert_eq!(code, 2, "{err}");

    let (code, out, err) = run(&bus, &["rename", "asker", "helper"]).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), "renamed asker to helper");
    let (_, out, _) = run(&bus, &["list"]).await;
    assert!(out.contains("helper") && !out.contains("asker"), "{out}");
    let (code, _, err) = run(&bus, &["rename", "helper", "deadbeef"]).await;
    assert_eq!(code, 1);
    assert!(err.contains("could be a bot id"), "{err}");
}

/// Issue 30, in the way 8: a message that may begin with `-` is sent without `--`; a runtime
/// botvisord does not know is a usage error (exit 2); a 3-character id prefix says that 4 are
/// needed; botvisord's refusals are said in words, without their D-Bus names; `watch` cuts a
/// long streamed answer as it cuts items, saying how to read it whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_frictions_of_the_first_hour() {
    let s = FakeSetup::start("").await;
    let bus = s.env.bus.address.clone();
    let id = create(
        &s,
        "demo",
        &s.env.work,
        json!([{"mode": "normal", "stream_reply": true, "reply_size": 300000}]),
    )
    .await;
    let mut watch = ctl(&bus)
        .args(["watch", "demo"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut watched = BufReader::new(watch.stdout.take().unwrap()).lines();
    // Subscribed once it said so on stderr.
    let mut said = BufReader::new(watch.stderr.take().unwrap()).lines();
    tokio::time::timeout(EVENT_TIMEOUT, said.next_line())
        .await
        .unwrap()
        .unwrap();
    let (code, out, err) = run(&bus, &["send", "demo", "-x"]).await;
    assert_eq!(code, 0, "{out} {err}");
    let lines = tokio::time::timeout(EVENT_TIMEOUT, async {
        let mut lines = Vec::new();
        while let Some(l) = watched.next_line().await.unwrap() {
            let end = l.contains("turn ") && l.contains("ended: success");
            lines.push(l);
            if end {
                return lines;
            }
        }
        panic!("watch ended: {lines:?}");
    })
    .await
    .expect("watch shows the turn");
    assert!(lines.iter().any(|l| l.contains("> -x")), "{lines:?}");
    assert!(
        lines.iter().all(|l| l.chars().count() < 2200),
        "a line is longer than the cut: {:?}",
        lines.iter().map(|l| l.len()).collect::<Vec<_>>()
    );
    let short = &id[..6];
    assert!(
        lines
            .iter()
            .any(|l| l.contains("293.0 KiB in all; botvisorctl chat ") && l.contains(short)),
        "{lines:?}"
    );
    let (code, _, err) = run(&bus, &["create", "--runtime", "gemini"]).await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("unknown runtime `gemini`"), "{err}");
    let (code, _, err) = run(&bus, &["status", &id[..3]]).await;
    assert_eq!(code, 1);
    assert!(
        err.contains("an id prefix takes 4 characters or more"),
        "{err}"
    );
    let (code, _, err) = run(&bus, &["set", "demo", "--model=-bad"]).await;
    assert_eq!(code, 1);
    assert!(
        err.starts_with("botvisorctl: invalid model name `-bad`"),
        "{err}"
    );
}

/// Issue 30: `doctor` says what it found and how to fix it, and exits 0 only when every check
/// passes. With botvisord running, the CLIs as it sees them (its environment): without a login
/// of its own it warns (issue 46: bots may bring their own key), a Codex not installed only
/// warns; each bot's login is judged as botvisord judges it (`GetLogin`): a bot with a key in its
/// own environment passes, one without fails naming itself and the fix; logged in, every bot
/// passes. Without botvisord on the bus and no activation file, it fails saying how to start it,
/// and a state folder open to others fails (with `chmod 700`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_names_what_fails_and_the_fix() {
    use std::os::unix::fs::PermissionsExt;
    let s = FakeSetup::start("").await;
    let home = s.env.dir.path().join("doctor-home");
    let state = home.join(".local/state/botvisor");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o755)).unwrap();
    let doctor = |bus: String| {
        let mut c = ctl(&bus);
        c.env("HOME", &home)
            .env("BOTVISOR_CLAUDE_BIN", fake_cli())
            .arg("doctor");
        c
    };
    let out = doctor(s.env.bus.address.clone()).output().await.unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("ok   botvisord: running on the bus (pid "),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "ok   claude: the running botvisord runs {}",
            fake_cli().display()
        )),
        "{text}"
    );
    assert!(
        text.contains("warn claude login: the running botvisord gives its bots no login: no "),
        "{text}"
    );
    assert!(text.contains("fix: claude /login"), "{text}");
    assert!(text.contains("warn codex: "), "{text}");
    // Run from a terminal (issue 47): a restart ends the turns, said with the way to keep them.
    assert!(
        text.contains(
            "warn restarts: a restart of botvisord ends the running turns (each taken message is \
             answered once by the next one): botvisord does not run as a systemd user unit"
        ),
        "{text}"
    );
    assert!(
        text.contains("fix: run botvisord as the systemd user unit (scripts/install.sh)"),
        "{text}"
    );
    assert!(text.contains("all checks passed"), "{text}");
    // The README's offline path: a bot with a key in its own environment has a login; one
    // without fails, named, with the fix.
    let keyed = create(&s, "keyed", &s.env.work, json!([{"mode": "normal"}])).await;
    let bare = create(&s, "bare", &s.env.work, json!([{"mode": "normal"}])).await;
    let mut env = fake_env(
        &s.env.home,
        &s.state,
        json!([{"mode": "normal"}]),
        &s.env.marker,
    );
    env.insert("ANTHROPIC_API_KEY".into(), "offline".into());
    let mut set: Vec<String> = vec!["set".into(), keyed.clone()];
    for (k, v) in &env {
        set.push("--env".into());
        set.push(format!("{k}={v}"));
    }
    let set: Vec<&str> = set.iter().map(String::as_str).collect();
    let (code, _, err) = run(&s.env.bus.address, &set).await;
    assert_eq!(code, 0, "{err}");
    let out = doctor(s.env.bus.address.clone()).output().await.unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(1), "{text}");
    let line = |start: &str| {
        text.lines()
            .find(|l| l.starts_with(start))
            .unwrap_or_else(|| panic!("no {start:?} in {text}"))
            .to_owned()
    };
    let keyed_line = line("ok   login keyed: ");
    let (short, said) = keyed_line["ok   login keyed: ".len()..]
        .split_once(' ')
        .unwrap();
    assert!(keyed.starts_with(short), "{keyed_line}");
    assert_eq!(said, "(claude): ANTHROPIC_API_KEY in the bot's environment");
    assert!(
        line("FAIL login bare: ").contains("(claude): no login: no "),
        "{text}"
    );
    assert!(
        text.contains("fix: claude /login as botvisord's user, or `botvisorctl set bare --env ANTHROPIC_API_KEY=…`"),
        "{text}"
    );
    assert!(text.contains("1 check(s) failed"), "{text}");
    assert!(!text.contains("offline"), "a value is never said: {text}");
    // Logged in as the running botvisord's user (its HOME): every bot has a login.
    std::fs::create_dir_all(s.env.home.join(".claude")).unwrap();
    std::fs::write(s.env.home.join(".claude/.credentials.json"), "{}").unwrap();
    let out = doctor(s.env.bus.address.clone()).output().await.unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("all checks passed"), "{text}");
    assert!(text.contains("ok   login bare: "), "{text}");
    assert!(text.contains("ok   claude login: "), "{text}");
    let bot = s
        .env
        .bot(&s.env.manager().await.get_bot(&bare).await.unwrap())
        .await;
    let login = bot
        .get_login(std::collections::HashMap::new())
        .await
        .unwrap();
    assert_eq!(login["source"], "file");
    assert_eq!(
        login["file"],
        s.env
            .home
            .join(".claude/.credentials.json")
            .to_str()
            .unwrap()
    );

    // A bus without botvisord, which cannot start it: this shell's view.
    let bare = PrivateBus::start(&s.env.dir.path().join("bare-bus"));
    let out = doctor(bare.address.clone()).output().await.unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("FAIL state folder: ") && text.contains("open to other users (755)"),
        "{text}"
    );
    assert!(
        text.contains(&format!("fix: chmod 700 {}", state.display())),
        "{text}"
    );
    let mut c = doctor(bare.address.clone());
    let out = c.arg("--json").output().await.unwrap();
    assert_eq!(out.status.code(), Some(1));
    let checks: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let daemon = checks.iter().find(|c| c["check"] == "botvisord").unwrap();
    assert_eq!(daemon["status"], "fail", "{checks:?}");
    assert!(
        daemon["fix"].as_str().unwrap().contains("run `botvisord`"),
        "{daemon}"
    );

    // A bus address that cannot be read is a finding, and the other checks still run; a file
    // where the state folder goes is named as such (issue 30's hostile run, finding 8).
    std::fs::remove_dir(&state).unwrap();
    std::fs::write(&state, "").unwrap();
    let out = doctor("garbage;;".into()).output().await.unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("FAIL bus: "), "{text}");
    assert!(
        text.contains("is a file, not a folder") && text.contains("fix: move it away"),
        "{text}"
    );
}

/// Issue 30: shell completion names the running botvisord's bots for a BOT argument (the
/// dynamic completion `completions SHELL` registers: `COMPLETE=<shell> botvisorctl -- …`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completion_names_the_bots_of_the_running_daemon() {
    let s = FakeSetup::start("").await;
    let bus = s.env.bus.address.clone();
    // `al;touch x` would run `touch` if the shell inserted it: offered by its id only.
    for name in ["alpha", "alpine", "beta", "al;touch x", "al>x"] {
        create(&s, name, &s.env.work, json!([{"mode": "normal"}])).await;
    }
    let complete = |words: &[&str]| {
        let mut c = ctl(&bus);
        c.env("COMPLETE", "fish")
            .arg("--")
            .arg("botvisorctl")
            .args(words);
        c
    };
    let out = complete(&["send", "al"]).output().await.unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let names: Vec<&str> = text
        .lines()
        .map(|l| l.split('\t').next().unwrap())
        .collect();
    assert_eq!(names, ["alpha", "alpine"], "{text}");
    assert!(text.contains("alpha\tstopped in "), "{text}");
    // "bet": a prefix no bot id (hex) can have.
    let out = complete(&["--json", "watch", "bet"])
        .output()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(text.starts_with("beta\t"), "{text}");
    let (code, script, _) = run(&bus, &["completions", "bash"]).await;
    assert_eq!(code, 0);
    assert!(
        script.contains("COMPLETE=\"bash\"") || script.contains("COMPLETE=bash"),
        "{script}"
    );
}

/// Issue 30, in the way 7: a Claude bot whose login is refused: `send` ends (exit 1) saying so
/// and how to log in, instead of waiting for a turn that waits for the login.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_says_how_to_log_in_when_the_login_is_refused() {
    let s = FakeSetup::start("").await;
    let bus = s.env.bus.address.clone();
    create(&s, "nologin", &s.env.work, json!([{"mode": "auth_error"}])).await;
    let (code, out, err) =
        tokio::time::timeout(EVENT_TIMEOUT, run(&bus, &["send", "nologin", "hi"]))
            .await
            .expect("send ends");
    assert_eq!(code, 1, "{out} {err}");
    assert!(err.contains("login expired or was refused"), "{err}");
    assert_eq!(
        err.matches("login expired").count(),
        1,
        "said once (issue 46): {err}"
    );
    assert!(!err.contains(".."), "{err}");
    assert!(err.contains("claude /login"), "{err}");
    assert!(
        err.contains("botvisorctl set nologin --env ANTHROPIC_API_KEY="),
        "{err}"
    );
    assert!(err.contains("The message waits"), "{err}");
}

/// `send` to a bot whose conversation another process holds says so at once and goes on
/// waiting; the answer follows once that process exits (issue 30's hostile run, finding 6:
/// `send` printed nothing for the whole wait). The holder is a `sleep` the test names in Claude
/// Code's registry (`sessions/<pid>.json`, as `runtime::claude::registry` reads it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_says_that_the_conversation_is_open_elsewhere_and_waits() {
    let s = FakeSetup::start("").await;
    let bus = s.env.bus.address.clone();
    create(
        &s,
        "held",
        &s.env.work,
        json!([{"mode": "normal"}, {"mode": "normal"}]),
    )
    .await;
    let (code, _, err) = run(&bus, &["send", "held", "one"]).await;
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = run(&bus, &["stop", "held"]).await;
    assert_eq!(code, 0, "{err}");
    let path = s.env.manager().await.get_bot("held").await.unwrap();
    let session = s.env.bot(&path).await.session_id().await.unwrap();
    let mut sleeper = std::process::Command::new("sleep")
        .arg("300")
        .env("BOTVISOR_TEST_RUN", &s.env.marker)
        .spawn()
        .unwrap();
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", sleeper.id())).unwrap();
    let start: u64 = stat
        .rsplit(')')
        .next()
        .unwrap()
        .split_whitespace()
        .nth(19)
        .unwrap()
        .parse()
        .unwrap();
    let registry = s.env.home.join(".claude/sessions");
    std::fs::create_dir_all(&registry).unwrap();
    std::fs::write(
        registry.join(format!("{}.json", sleeper.id())),
        json!({"pid": sleeper.id(), "sessionId": session, "procStart": start.to_string(),
               "entrypoint": "cli", "cwd": s.env.work})
        .to_string(),
    )
    .unwrap();

    let mut send = ctl(&bus)
        .args(["send", "held", "two"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(send.stdout.take().unwrap()).lines();
    let told = tokio::time::timeout(EVENT_TIMEOUT, async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.contains("waiting: the conversation is open in another process") {
                return line;
            }
        }
        panic!("send ended without saying why it waits");
    })
    .await
    .expect("send says why it waits");
    assert!(told.contains(&format!("pid {}", sleeper.id())), "{told}");
    assert!(told.contains("restart held --fork"), "{told}");
    sleeper.kill().unwrap();
    sleeper.wait().unwrap();
    let status = tokio::time::timeout(EVENT_TIMEOUT, send.wait())
        .await
        .expect("the answer follows once the holder exits")
        .unwrap();
    assert!(status.success());
}

/// `send` of a message still waiting when a client stops the bot ends at once, exit 1, saying
/// the message waits for the next message or a restart (it used to wait silently for ever: the
/// `stopped_with_queue` note named no turn; a second hostile run, finding 2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_of_a_message_a_stop_left_waiting_ends_saying_so() {
    let s = FakeSetup::start("stop_grace_s = 0.5\n").await;
    let bus = s.env.bus.address.clone();
    create(
        &s,
        "slow",
        &s.env.work,
        json!([{"mode": "normal", "reply_after_s": 30}]),
    )
    .await;
    let path = s.env.manager().await.get_bot("slow").await.unwrap();
    let bot = s.env.bot(&path).await;
    let mut first = ctl(&bus).args(["send", "slow", "one"]).spawn().unwrap();
    wait_state(&bot, "busy").await;
    let shown = watching(&bot).await;
    let changes = shown.receive_queued_messages_changed().await;
    let mut items = bot.receive_chat_item_added().await.unwrap();
    let second = ctl(&bus)
        .args(["send", "slow", "two"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The second message sent (its item in the chat) and waiting behind the first
    // (`QueuedMessages` 1); both watched from before it was sent, so neither change is missed.
    let now = shown.queued_messages().await.unwrap();
    wait_property(changes, now, &1, "QueuedMessages").await;
    tokio::time::timeout(EVENT_TIMEOUT, async {
        while !bot
            .get_chat(0, 0)
            .await
            .unwrap()
            .iter()
            .any(|(_, k, _, p)| k == "user" && p.contains("\"two\""))
        {
            futures_util::StreamExt::next(&mut items).await;
        }
    })
    .await
    .expect("the second message is in the chat");
    let (code, _, err) = run(&bus, &["stop", "slow"]).await;
    assert_eq!(code, 0, "{err}");
    let out = tokio::time::timeout(EVENT_TIMEOUT, second.wait_with_output())
        .await
        .expect("send ends when its message is left waiting")
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("the bot was stopped before the message went") && err.contains("restart slow"),
        "{err}"
    );
    let _ = tokio::time::timeout(EVENT_TIMEOUT, first.wait()).await;
}

/// `restart --fork` of a bot with no conversation yet says there is nothing to copy, not that it
/// restarts in a copy (second hostile run, finding 4).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_of_a_bot_without_a_conversation_says_so() {
    let s = FakeSetup::start("").await;
    let bus = s.env.bus.address.clone();
    create(&s, "new", &s.env.work, json!([{"mode": "normal"}])).await;
    let (code, out, err) = run(&bus, &["restart", "new", "--fork"]).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out.trim(),
        "restarting new (it has no conversation yet to copy)"
    );
}

/// Issue 46 §4: the time `send` shows for a turn is the turn's, from its message's `Send` (the
/// `user` item) to its end (the `turn_finished` item), waits included, not the CLI's own
/// `duration_ms` (the fake CLI says 1 ms, and takes 300 ms to answer); `chat` shows the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turns_time_is_from_its_message_to_its_end() {
    let s = FakeSetup::start("").await;
    let bus = s.env.bus.address.clone();
    create(
        &s,
        "slow",
        &s.env.work,
        json!([{"mode": "normal", "reply_after_s": 0.3}]),
    )
    .await;
    let (code, out, err) = run(&bus, &["send", "slow", "hello"]).await;
    assert_eq!(code, 0, "{err}");
    let done = out.lines().last().unwrap_or_default().to_owned();
    let bot = s
        .env
        .bot(&s.env.manager().await.get_bot("slow").await.unwrap())
        .await;
    let items = bot.get_chat(0, 0).await.unwrap();
    let time = |kind: &str| {
        let (_, _, t, _) = items.iter().find(|i| i.1 == kind).unwrap();
        humantime::parse_rfc3339(t).unwrap()
    };
    let took = time("turn_finished")
        .duration_since(time("user"))
        .unwrap()
        .as_millis() as u64;
    assert!(took >= 300, "the fake answered after 300 ms: {took} ms");
    let (_, _, _, end) = items.iter().find(|i| i.1 == "turn_finished").unwrap();
    let end: Value = serde_json::from_str(end).unwrap();
    assert_eq!(end["duration_ms"], took, "{end}");
    let shown = if took >= 1000 {
        format!("{:.1} s", took as f64 / 1000.0)
    } else {
        format!("{took} ms")
    };
    assert_eq!(done, format!("[done: success, $0.0000 this turn, {shown}]"));
    let (_, chat, _) = run(&bus, &["chat", "slow"]).await;
    assert!(
        chat.contains(&format!("[turn ended: success, {shown}]")) && !chat.contains(", 1 ms]"),
        "{chat}"
    );
}

/// Issue 46 §4: `delete --yes` of a bot with a turn running and messages queued deletes it, and
/// says what that loses; an idle bot's deletion says nothing of the kind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_busy_bot_says_what_is_lost() {
    let s = FakeSetup::start("").await;
    let bus = s.env.bus.address.clone();
    create(
        &s,
        "busy",
        &s.env.work,
        json!([{"mode": "normal", "stream_then_wait": true}]),
    )
    .await;
    let bot = s
        .env
        .bot(&s.env.manager().await.get_bot("busy").await.unwrap())
        .await;
    let bot = watching(&bot).await;
    let queued = bot.receive_queued_messages_changed().await;
    let mut text = bot.receive_text_delta().await.unwrap();
    for m in ["first", "second", "third"] {
        bot.send(m, std::collections::HashMap::new()).await.unwrap();
    }
    // The first turn runs (its reply is streaming), the two others wait behind it.
    bounded(
        "the first reply streams",
        futures_util::StreamExt::next(&mut text),
    )
    .await;
    let now = bot.queued_messages().await.unwrap();
    wait_property(queued, now, &2, "QueuedMessages").await;
    let (code, out, err) = run(&bus, &["--json", "delete", "busy", "--yes"]).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        err.trim(),
        "warning: deleting busy loses its running turn (it ends interrupted, unanswered) and \
         2 queued messages (never sent)"
    );
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(
        (&v["turn_running"], &v["queued_messages"]),
        (&json!(true), &json!(2))
    );

    create(&s, "calm", &s.env.work, json!([{"mode": "normal"}])).await;
    let (code, out, err) = run(&bus, &["delete", "calm", "--yes"]).await;
    assert_eq!(code, 0, "{err}");
    assert!(
        err.is_empty() && out.starts_with("deleted calm"),
        "{out} {err}"
    );
}

/// Issue 46 §4: `doctor` says whether a notification server is on the bus, which
/// `botvisor-notify` needs to show anything: a warning without one (hooks still run), its name
/// and version with one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_says_whether_a_notification_server_is_on_the_bus() {
    let s = FakeSetup::start("").await;
    let bus = s.env.bus.address.clone();
    let notifications = |text: &str| {
        text.lines()
            .find(|l| l.contains(" notifications: "))
            .unwrap_or_else(|| panic!("no notifications check: {text}"))
            .to_owned()
    };
    let (_, out, _) = run(&bus, &["doctor"]).await;
    assert!(
        notifications(&out).starts_with("warn notifications: no notification server on this bus"),
        "{out}"
    );
    let _server = support::desktop::StandInServer::start(&bus, &["actions", "body"]).await;
    let (_, out, _) = run(&bus, &["doctor"]).await;
    assert_eq!(
        notifications(&out),
        "ok   notifications: stand-in 1 (botvisor tests) shows botvisor-notify's notifications"
    );
}

/// Issue 46 §4: a question that offers more than "once" says what each answer lets run, and its
/// key answers with that scope: here Claude Code's suggestions, `s` for the session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_terminal_question_says_what_each_allow_lets_run() {
    let s = FakeSetup::start("").await;
    let bus = s.env.bus.address.clone();
    let suggestions = json!([{"type": "addRules", "behavior": "allow", "destination": "localSettings",
                              "rules": [{"toolName": "Bash", "ruleContent": "ls /tmp"}]}]);
    create(
        &s,
        "asker",
        &s.env.work,
        json!([{"mode": "normal", "ask": {"tool": "Bash", "input": {"command": "ls /tmp"},
                                          "suggestions": suggestions}}]),
    )
    .await;
    let send = tokio::process::Command::new("python3")
        .args(["-c", IN_A_TERMINAL, CTL, "send", "asker", "go"])
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("DBUS_SESSION_BUS_ADDRESS", &bus)
        .env("NO_COLOR", "1")
        .env("ANSWER", "s")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let done = tokio::time::timeout(EVENT_TIMEOUT, send.wait_with_output())
        .await
        .expect("send ends")
        .unwrap();
    let text = String::from_utf8_lossy(&done.stdout).into_owned();
    assert!(done.status.success(), "{text}");
    assert!(
        text.contains(
            "Allow Bash {\"command\":\"ls /tmp\"}? (request ask-0-0)\r\n  y  this request, this \
             time\r\n  s  `Bash(ls /tmp)`, without asking, while this agent runs\r\n  [y/s/N] "
        ),
        "{text:?}"
    );
    let grants = json_lines(&s.state.join("grants.jsonl"));
    assert_eq!(
        grants[0]["updatedPermissions"][0]["destination"], "session",
        "{grants:?}"
    );
    let (_, chat, _) = run(&bus, &["--json", "chat", "asker"]).await;
    let answer: Value = chat
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|v| v["kind"] == "permission_answer")
        .unwrap();
    assert_eq!(answer["payload"]["scope"], "session", "{answer}");
    // `chat` (and `watch`) say the same under the request, as `answer`'s flags.
    let (_, chat, _) = run(&bus, &["chat", "asker"]).await;
    assert!(
        chat.contains(
            "(request ask-0-0)\n  allow once: this request, this time\n  allow --session: \
             `Bash(ls /tmp)`, without asking, while this agent runs"
        ),
        "{chat}"
    );
}
