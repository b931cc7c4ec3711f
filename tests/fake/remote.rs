//! Issue 18: bots on another machine through the engines D-Bus already has. botvisorctl reaches
//! a botvisord over a real OpenSSH server on loopback (its own keys and configuration, nothing
//! of the user's `~/.ssh`) and `systemd-stdio-bridge` on the far side: create, send with a
//! permission prompt answered in a terminal, watch, a big item read whole (no file descriptor
//! crosses such a link), stop; `--host` and Ctrl-C over it; and a bridge run as another user is
//! still refused (design rule 14).
//!
//! Skipped, saying so, only where sshd is not installed (`.ci/run` installs it).

use std::path::Path;
use std::process::Stdio;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

use support::sshd::{HOST, Sshd, encode};
use support::terminal::IN_A_TERMINAL;
use support::*;

pub(crate) const CTL: &str = env!("CARGO_BIN_EXE_botvisorctl");

/// botvisorctl with `bus` as its whole idea of where botvisord is (`DBUS_SESSION_BUS_ADDRESS`,
/// or none), a `HOME` of the test's, and `extra` environment.
pub(crate) fn ctl(
    bus: Option<&str>,
    home: &Path,
    extra: &[(&str, &str)],
) -> tokio::process::Command {
    let mut c = tokio::process::Command::new(CTL);
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("NO_COLOR", "1")
        .envs(extra.iter().copied())
        .stdin(Stdio::null())
        .kill_on_drop(true);
    if let Some(bus) = bus {
        c.env("DBUS_SESSION_BUS_ADDRESS", bus);
    }
    c
}

/// Runs botvisorctl as [`ctl`] sets it up: (exit code, stdout, stderr).
pub(crate) async fn run(
    bus: Option<&str>,
    home: &Path,
    extra: &[(&str, &str)],
    args: &[&str],
) -> (i32, String, String) {
    let out = tokio::time::timeout(EVENT_TIMEOUT, ctl(bus, home, extra).args(args).output())
        .await
        .unwrap_or_else(|_| panic!("botvisorctl {args:?} did not end"))
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `botvisorctl --json create` over `bus` of a bot named `name` run by the fake CLI with `plan`.
async fn create(s: &FakeSetup, bus: &str, name: &str, plan: Value) -> String {
    let env = fake_env(&s.env.home, &s.state, plan, &s.env.marker);
    let mut args: Vec<String> = ["--json", "create", "--cwd"].map(String::from).to_vec();
    args.push(s.env.work.to_str().unwrap().into());
    args.extend(["--name".into(), name.into()]);
    for (k, v) in &env {
        args.extend(["--env".into(), format!("{k}={v}")]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, out, err) = run(Some(bus), &s.env.home, &[], &args).await;
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    v["id"].as_str().unwrap().to_owned()
}

/// `botvisorctl send BOT TEXT` in a pseudo-terminal, typing `answer` at its question:
/// (exit code, what the terminal showed).
async fn send_in_terminal(
    bus: Option<&str>,
    home: &Path,
    extra: &[(&str, &str)],
    args: &[&str],
    answer: &str,
) -> (i32, String) {
    let mut c = tokio::process::Command::new("python3");
    c.args(["-c", IN_A_TERMINAL, CTL])
        .args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("NO_COLOR", "1")
        .env("ANSWER", answer)
        .envs(extra.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .kill_on_drop(true);
    if let Some(bus) = bus {
        c.env("DBUS_SESSION_BUS_ADDRESS", bus);
    }
    let out = tokio::time::timeout(EVENT_TIMEOUT, c.output())
        .await
        .unwrap_or_else(|_| panic!("send {args:?} did not end"))
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// What a terminal showed, without what differs from one turn to the next: the turn id, the
/// request id, the client's bus name and the message (`text` → `TEXT`).
fn normalized(shown: &str, text: &str, request: &str) -> String {
    shown
        .lines()
        .map(|l| {
            let l = l.replace(text, "TEXT").replace(request, "REQUEST");
            if l.starts_with("(turn ") {
                return "(turn ID)".to_owned();
            }
            // The turn's own time differs from one turn to the next.
            if let Some(head) = l.strip_prefix("[done: ")
                && let Some((before, _)) = head.rsplit_once(", ")
            {
                return format!("[done: {before}, TIME]");
            }
            match l.split_once("by botvisorctl (:") {
                Some((head, tail)) => {
                    let rest = tail.split_once(')').map_or("", |(_, r)| r);
                    format!("{head}by botvisorctl (:NAME){rest}")
                }
                None => l,
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Reads JSON lines until `stop` holds for one; returns those before it.
pub(crate) async fn read_until(
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

/// The whole life of a bot, driven from the far side of an ssh link
/// (`unixexec:path=ssh,…,systemd-stdio-bridge,--bus-path=…` in DBUS_SESSION_BUS_ADDRESS and in
/// `--address`): create; a `watch` over the link; a `send` in a terminal whose permission
/// question is answered there, showing the same as the same `send` run locally; a reply of
/// 2 MB shown whole (read in ranges: no file descriptor crosses the link); stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bot_is_created_asked_watched_and_stopped_across_ssh() {
    let s = FakeSetup::start("").await;
    let Some(sshd) = Sshd::start(&s.env.dir.path().join("ssh"), &[]) else {
        return;
    };
    let local = s.env.bus.address.clone();
    let remote = sshd.unixexec(&["systemd-stdio-bridge", &format!("--bus-path={local}")]);
    let home = &s.env.home;

    let id = create(
        &s,
        &remote,
        "asker",
        json!([{"mode": "normal", "ask": {"tool": "Write", "input_bytes": 10}}]),
    )
    .await;

    let mut watch = ctl(None, home, &[])
        .args(["--address", &remote, "--json", "watch"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut watched = BufReader::new(watch.stdout.take().unwrap()).lines();
    read_until(&mut watched, |v| v["event"] == "watching").await;

    let (code, far) =
        send_in_terminal(Some(&remote), home, &[], &["send", "asker", "first"], "y").await;
    assert_eq!(code, 0, "{far}");
    assert!(
        far.contains(
            "Allow Write {\"content\":\"xxxxxxxxxx\",\"file_path\":\"/dev/null\"}? \
             (request ask-0-0) [y/N]"
        ),
        "{far:?}"
    );
    assert!(far.contains("fake: first\r\n[done: success"), "{far:?}");
    // The same in a terminal on the daemon's machine.
    let (code, near) =
        send_in_terminal(Some(&local), home, &[], &["send", "asker", "second"], "y").await;
    assert_eq!(code, 0, "{near}");
    assert_eq!(
        normalized(&far, "first", "ask-0-0"),
        normalized(&near, "second", "ask-0-1"),
        "send over the link shows what it shows locally"
    );
    let answers = json_lines(&s.state.join("answers.jsonl"));
    assert_eq!(answers.len(), 2, "{answers:?}");
    assert!(answers.iter().all(|a| a["behavior"] == "allow"));

    // The watch over the link saw the question, its answer and the end of the first turn.
    let seen = read_until(&mut watched, |v| {
        v["event"] == "chat" && v["payload"]["text"] == "fake: first"
    })
    .await;
    assert!(
        seen.iter()
            .any(|v| v["event"] == "permission_requested" && v["request_id"] == "ask-0-0"),
        "{seen:?}"
    );
    assert!(
        seen.iter().any(|v| v["event"] == "chat"
            && v["kind"] == "permission_answer"
            && v["payload"]["client"] == "botvisorctl"),
        "{seen:?}"
    );
    read_until(&mut watched, |v| {
        v["event"] == "turn_finished" && v["id"].as_str().is_some_and(|i| id.starts_with(i))
    })
    .await;

    // A reply of 2 MB is served as a preview and read whole in ranges over the link.
    create(
        &s,
        &remote,
        "big",
        json!([{"mode": "normal", "echo_bytes": 2_000_000}]),
    )
    .await;
    let (code, out, err) = run(
        None,
        home,
        &[],
        &["--address", &remote, "--json", "send", "big", "hello"],
    )
    .await;
    assert_eq!(code, 0, "{err}");
    assert!(err.is_empty(), "{err}");
    let reply = out
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|v| v["event"] == "chat" && v["kind"] == "assistant")
        .expect("the reply");
    let text = reply["payload"].to_string();
    assert!(
        text.contains(&"hello".repeat(399_999)),
        "the whole reply, not its preview: {} bytes",
        text.len()
    );

    let (code, out, err) = run(Some(&remote), home, &[], &["--json", "stop", "asker"]).await;
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(
        (v["state"].as_str(), v["was_running"].as_bool()),
        (Some("stopped"), Some(true)),
        "{v}"
    );
    read_until(&mut watched, |v| v["changed"]["State"] == "stopped").await;
    watch.kill().await.unwrap();
    assert!(
        sshd.log().contains("Accepted publickey"),
        "the link is ssh: {}",
        sshd.log()
    );
}

/// `--host [USER@]HOST`: ssh (the program BOTVISOR_SSH names) and systemd-stdio-bridge on the
/// remote user's session bus (here the test's bus, which the login session is given by sshd's
/// `SetEnv`), with nothing of the local session bus. Ctrl-C at the question leaves the turn
/// running and says how to answer, as locally (the link outlives the Ctrl-C); the answer given
/// then over `--host` is the one the agent gets. A host that refuses and a malformed address are
/// clear errors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_reaches_the_remote_users_session_bus_over_ssh() {
    let s = FakeSetup::start("").await;
    let local = s.env.bus.address.clone();
    let Some(sshd) = Sshd::start(
        &s.env.dir.path().join("ssh"),
        &[("DBUS_SESSION_BUS_ADDRESS", &local)],
    ) else {
        return;
    };
    let home = &s.env.home;
    let ssh = sshd.ssh.to_str().unwrap();
    let with_ssh = [("BOTVISOR_SSH", ssh)];
    let host = format!("{}@{HOST}", sshd.user);
    create(
        &s,
        &local,
        "asker",
        json!([{"mode": "normal", "ask": {"tool": "Write", "input_bytes": 10}}]),
    )
    .await;

    let (code, out, err) = run(None, home, &with_ssh, &["-H", &host, "--json", "list"]).await;
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["name"], "asker", "{v}");

    let (code, shown) = send_in_terminal(
        None,
        home,
        &with_ssh,
        &["--host", &host, "send", "asker", "hello"],
        "^C",
    )
    .await;
    assert_eq!(code, 130, "{shown:?}");
    assert!(shown.contains("(left without answering)"), "{shown:?}");
    assert!(
        shown.contains(&format!(
            "left; the turn goes on. Follow it with: botvisorctl --host {host} watch asker"
        )),
        "{shown:?}"
    );
    assert!(
        shown.contains(&format!(
            "botvisorctl --host {host} answer asker ask-0-0 allow|deny"
        )),
        "{shown:?}"
    );
    let (code, out, err) = run(
        None,
        home,
        &with_ssh,
        &["-H", &host, "answer", "asker", "ask-0-0", "allow"],
    )
    .await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), "allowed request ask-0-0");
    let (code, _, err) = run(None, home, &with_ssh, &["-H", &host, "stop", "asker"]).await;
    assert_eq!(code, 0, "{err}");
    let answers = json_lines(&s.state.join("answers.jsonl"));
    assert_eq!(answers.len(), 1, "{answers:?}");
    assert_eq!(answers[0]["behavior"], "allow");

    // A user the far side does not let in.
    let (code, _, err) = run(
        None,
        home,
        &with_ssh,
        &["-H", &format!("no-such-user@{HOST}"), "list"],
    )
    .await;
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(
            "botvisorctl: cannot reach the user bus of no-such-user@remote-box through ssh"
        ),
        "{err}"
    );
    for (args, says) in [
        (
            vec!["--address", "nonsense", "list"],
            "--address is not a D-Bus address",
        ),
        (
            vec!["--host=-oProxyCommand=x", "list"],
            "--host takes [USER@]HOST",
        ),
        (
            vec![
                "--address",
                "unix:path=/x",
                "-H",
                "box",
                "send",
                "demo",
                "hi",
            ],
            "only `list`, `status`, `watch`, `top` and `ui` take several hosts",
        ),
    ] {
        let (code, _, err) = run(None, home, &[], &args).await;
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

/// Design rule 14 over a bridge: `systemd-stdio-bridge` connects to the bus as the user it runs
/// as, so a bridge run by another user (uid 65534) is refused like any other client of theirs,
/// while the same bridge run by the user is served. Needs root (to run the bridge as
/// `nobody`), as tests/fake/access.rs does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bridge_run_by_another_user_is_refused() {
    let s = FakeSetup::start_in(TestEnv::open_to_all().await, "").await;
    let bus = s.env.bus.address.clone();
    let home = &s.env.home;
    let bridge = format!("--bus-path={bus}");
    let own = format!(
        "unixexec:path=systemd-stdio-bridge,argv1={}",
        encode(&bridge)
    );
    let nobody = format!(
        "unixexec:path=setpriv,argv1=--reuid=65534,argv2=--regid=65534,argv3=--clear-groups,\
         argv4=systemd-stdio-bridge,argv5={}",
        encode(&bridge)
    );
    create(&s, &own, "mine", json!([{"mode": "normal"}])).await;
    let (code, out, err) = run(None, home, &[], &["--address", &own, "list"]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("mine"), "{out}");
    for args in [
        vec!["list"],
        vec!["status", "mine"],
        vec!["send", "mine", "hello"],
        vec!["stop", "mine"],
    ] {
        let mut all = vec!["--address", nobody.as_str()];
        all.extend(&args);
        let (code, out, err) = run(None, home, &[], &all).await;
        assert_eq!(code, 1, "{args:?}: {out} {err}");
        assert!(
            err.contains("botvisord serves only user 0; the caller runs as user 65534"),
            "{args:?}: {err}"
        );
        assert!(!out.contains("mine"), "{args:?}: {out}");
    }
    assert!(
        s.messages().is_empty(),
        "nothing was sent: {:?}",
        s.messages()
    );
}

/// A `unixexec:` address whose program records its pid (so the test can end it) before it runs
/// systemd-stdio-bridge on `bus`.
fn killable_link(bus: &str, pid_file: &Path) -> String {
    let script = format!(
        "echo $$ > {}; exec systemd-stdio-bridge --bus-path={bus}",
        pid_file.display()
    );
    format!("unixexec:path=sh,argv1=-c,argv2={}", encode(&script))
}

/// Ends the program whose pid `pid_file` holds.
fn kill_link(pid_file: &Path) {
    let pid: i32 = std::fs::read_to_string(pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // SAFETY: kill(2) of the test's own bridge process.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
}

/// A link that drops during `send` (its bridge is killed while the turn waits for permission)
/// says that the connection was lost, naming the link, that the turn goes on in botvisord, and
/// how to follow it and answer its prompt over the same `--address`; exit code 1 (as when
/// botvisord goes away). A `watch` whose link drops says so and how to watch again, exit 1 (it
/// used to print `I/O error: failed to read from socket`, and watch ended with 0).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_link_says_the_turn_goes_on_and_how_to_follow_it() {
    let s = FakeSetup::start("").await;
    let local = s.env.bus.address.clone();
    let home = &s.env.home;
    let pid_file = s.env.dir.path().join("bridge.pid");
    let link = killable_link(&local, &pid_file);
    create(
        &s,
        &local,
        "asker",
        json!([{"mode": "normal", "ask": {"tool": "Write", "input_bytes": 10}}]),
    )
    .await;
    let said = "the connection to the bus through sh (the program of the unixexec: address from \
                --address) was lost";

    let mut send = ctl(None, home, &[])
        .args(["--address", &link, "send", "asker", "hello"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut shown = BufReader::new(send.stdout.take().unwrap()).lines();
    tokio::time::timeout(EVENT_TIMEOUT, async {
        while let Some(line) = shown.next_line().await.unwrap() {
            if line.contains("waiting; answer with") {
                return;
            }
        }
        panic!("send ended before its prompt");
    })
    .await
    .expect("the prompt");
    kill_link(&pid_file);
    let out = tokio::time::timeout(EVENT_TIMEOUT, send.wait_with_output())
        .await
        .expect("send ends")
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "{said} before the turn ended; the turn goes on in botvisord. Follow it with \
             `botvisorctl --address {link} watch asker`"
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "it waits for permission: botvisorctl --address {link} answer asker ask-0-0 allow|deny"
        )),
        "{err}"
    );
    assert!(!err.contains("I/O error: failed"), "{err}");

    let mut watch = ctl(None, home, &[])
        .args(["--address", &link, "--json", "watch"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut watched = BufReader::new(watch.stdout.take().unwrap()).lines();
    read_until(&mut watched, |v| v["event"] == "watching").await;
    kill_link(&pid_file);
    let out = tokio::time::timeout(EVENT_TIMEOUT, watch.wait_with_output())
        .await
        .expect("watch ends")
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "{said}; what happens in botvisord goes on. Watch again with \
             `botvisorctl --address {link} watch`"
        )),
        "{err}"
    );
}

/// A `unixexec:` program that ends before the connection is made: the error says how it ended
/// (its exit status) and whether it printed anything, instead of always pointing at "what the
/// program printed" above.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_that_ends_at_once_is_described_as_it_ended() {
    let dir = tempfile::tempdir().unwrap();
    let silent = "unixexec:path=false";
    let (code, _, err) = run(None, dir.path(), &[], &["--address", silent, "list"]).await;
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(
            "the program ended (exit status: 1) and printed nothing on its standard error"
        ),
        "{err}"
    );
    assert!(!err.contains("printed is above"), "{err}");
    let noisy = format!(
        "unixexec:path=sh,argv1=-c,argv2={}",
        encode("echo no bus here >&2; exit 3")
    );
    let (code, _, err) = run(None, dir.path(), &[], &["--address", &noisy, "list"]).await;
    assert_eq!(code, 1, "{err}");
    assert!(err.starts_with("no bus here\n"), "{err}");
    assert!(
        err.contains("the program ended (exit status: 3); what it printed is above"),
        "{err}"
    );
}

/// Issue 30: `botvisorctl --host HOST ui` shows the remote botvisord's bots and answers a prompt
/// over the link, in a terminal (tmux).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_works_over_host() {
    if !support::terminal::have_tmux() {
        return;
    }
    let s = FakeSetup::start("").await;
    let local = s.env.bus.address.clone();
    let Some(sshd) = Sshd::start(
        &s.env.dir.path().join("ssh"),
        &[("DBUS_SESSION_BUS_ADDRESS", &local)],
    ) else {
        return;
    };
    let id = create(
        &s,
        &local,
        "faraway",
        json!([{"mode": "normal", "ask": {"tool": "Write", "input_bytes": 4}}]),
    )
    .await;
    let host = format!("{}@{HOST}", sshd.user);
    let home = s.env.home.to_str().unwrap().to_owned();
    let ssh = sshd.ssh.to_str().unwrap().to_owned();
    let t = support::terminal::Tmux::start(
        s.env.dir.path(),
        120,
        30,
        &s.env.work,
        &[("HOME", &home), ("BOTVISOR_SSH", &ssh)],
        &format!(
            "{} --host {host} ui; echo \"ui ended: $?\"; exec sleep 3600",
            env!("CARGO_BIN_EXE_botvisorctl")
        ),
    );
    t.wait_for("faraway").await;
    t.keys(&["Enter"]);
    t.text("over the link");
    t.keys(&["Enter"]);
    t.wait_for("faraway asks: Write").await;
    t.keys(&["y"]);
    t.wait_for("fake: over the link").await;
    t.keys(&["q"]);
    t.wait_for("ui ended: 0").await;
    let path = s.env.manager().await.get_bot(&id).await.unwrap();
    let items = chat(&s.env.bot(&path).await).await;
    assert_eq!(of_kind(&items, "permission_answer")[0]["behavior"], "allow");
}
