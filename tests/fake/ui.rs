//! `botvisorctl ui` in a real terminal (tmux: send-keys, capture-pane) against the scripted fake
//! CLI (issue 30): it lists the bots and follows a chat, answers a prompt, sends, escapes what it
//! shows, fits a narrow and a wide terminal and fifty bots, waits through botvisord going away,
//! and puts the terminal back when it quits. With the real CLIs: tests/real/ui.rs.

use std::collections::HashMap;

use serde_json::json;
use zbus::Variant;

use support::terminal::{Tmux, have_tmux};
use support::*;

const CTL: &str = env!("CARGO_BIN_EXE_botvisorctl");

/// Creates a bot named `name` run by the fake CLI with `plan`.
pub(crate) async fn bot(
    s: &FakeSetup,
    name: &str,
    plan: serde_json::Value,
) -> botvisor::dbus::client::BotProxy<'static> {
    let env = fake_env(&s.env.home, &s.state, plan, &s.env.marker);
    let work = s.env.work.to_str().unwrap();
    let mut o = create_options(work, &env);
    o.insert("name", Variant::from(name));
    let path = bounded("CreateBot", async {
        s.env.manager().await.create_bot(o).await.unwrap()
    })
    .await;
    s.env.bot(&path).await
}

/// `botvisorctl ui` in a tmux window `width` × `height` on the setup's bus; the shell says how
/// it ended (`ui ended: CODE`).
fn ui(s: &FakeSetup, width: u16, height: u16) -> Tmux {
    let bus = s.env.bus.address.clone();
    let home = s.env.home.to_str().unwrap().to_owned();
    Tmux::start(
        s.env.dir.path(),
        width,
        height,
        &s.env.work,
        &[("DBUS_SESSION_BUS_ADDRESS", &bus), ("HOME", &home)],
        // The shell stays after the dashboard, so its words stay on the screen.
        &format!("{CTL} ui; echo \"ui ended: $?\"; exec sleep 3600"),
    )
}

/// The dashboard lists the bots, follows the chosen bot's chat, sends what is written, shows its
/// prompt and answers it with a key, and `q` puts the terminal back (out of the alternate
/// screen), exiting 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_sends_answers_and_quits_cleanly() {
    if !have_tmux() {
        return;
    }
    let s = FakeSetup::start("").await;
    bot(&s, "alpha", json!([{"mode": "normal"}])).await;
    let beta = bot(
        &s,
        "beta",
        json!([{"mode": "normal", "ask": {"tool": "Write", "input": {"file_path": "/tmp/x", "content": "hi"}}}]),
    )
    .await;
    let t = ui(&s, 120, 30);
    t.wait("both bots", |s| s.contains("alpha") && s.contains("beta"))
        .await;
    assert_eq!(t.format("#{alternate_on}"), "1");
    t.keys(&["Down", "Enter"]);
    t.wait_for("to beta>").await;
    t.text("hello there");
    t.keys(&["Enter"]);
    // One frame may be caught half drawn: the prompt is waited for with its keys.
    let screen = t
        .wait("the prompt with its keys", |s| {
            s.contains("beta asks: Write") && s.contains("y allow")
        })
        .await;
    assert!(
        screen.contains("> hello there"),
        "the message is in the chat: {screen}"
    );
    t.keys(&["y"]);
    let screen = t.wait_for("fake: hello there").await;
    assert!(!screen.contains("beta asks"), "the prompt went: {screen}");
    let items = chat(&beta).await;
    let answer = of_kind(&items, "permission_answer")[0].clone();
    assert_eq!(answer["behavior"], "allow");
    assert_eq!(answer["client"], "botvisorctl ui");
    t.keys(&["q"]);
    t.wait_for("ui ended: 0").await;
    assert_eq!(
        t.format("#{alternate_on}"),
        "0",
        "out of the alternate screen"
    );
}

/// What an agent says is shown escaped: an escape sequence that would clear the screen or set
/// the window's title is printed as text, and the title stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_an_agent_says_steers_the_terminal() {
    if !have_tmux() {
        return;
    }
    let s = FakeSetup::start("").await;
    let hostile = "evil\u{1b}]2;pwned\u{7}\u{1b}[2J\u{202e}drow";
    let b = bot(&s, "host", json!([{"mode": "normal", "reply": hostile}])).await;
    let mut finished = b.receive_turn_finished().await.unwrap();
    let turn = b.send("go", HashMap::new()).await.unwrap();
    wait_turns(&mut finished, &[turn]).await;
    let t = ui(&s, 100, 20);
    let title = t.format("#{pane_title}");
    let screen = t
        .wait_for(r"evil\u{1b}]2;pwned\u{7}\u{1b}[2J\u{202e}drow")
        .await;
    assert!(screen.contains("host"), "{screen}");
    assert_eq!(t.format("#{pane_title}"), title, "the title did not change");
    t.keys(&["q"]);
    t.wait_for("ui ended: 0").await;
}

/// Fifty bots in a 40-column terminal: the list shows the chosen one, End goes to the last; made
/// 300 columns wide the bots and the chat stand side by side, with the folder column.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_bots_fit_a_narrow_and_a_wide_terminal() {
    if !have_tmux() {
        return;
    }
    let s = FakeSetup::start("").await;
    for i in 0..50 {
        bot(&s, &format!("bot-{i:02}"), json!([{"mode": "normal"}])).await;
    }
    let t = ui(&s, 40, 20);
    let screen = t.wait_for("bot-00").await;
    assert!(screen.contains("50 bot(s)"), "{screen}");
    for line in screen.lines() {
        assert!(
            unicode_width::UnicodeWidthStr::width(line) <= 40,
            "{line:?} is wider than the window"
        );
    }
    t.keys(&["End"]);
    t.wait_for("> bot-49").await;
    t.resize(300, 40);
    let screen = t
        .wait("the list beside the chat", |s| {
            s.lines()
                .any(|l| l.contains("┌ bots") && l.contains("┌ bot-49 (claude"))
        })
        .await;
    assert!(
        screen.contains(s.env.work.to_str().unwrap()),
        "the folder column: {screen}"
    );
    t.keys(&["q"]);
    t.wait_for("ui ended: 0").await;
}

/// botvisord going away shows a banner and the dashboard waits; when it is back the bots are read
/// again. SIGTERM ends the dashboard with the terminal put back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_waits_for_botvisord_to_come_back() {
    if !have_tmux() {
        return;
    }
    let mut s = FakeSetup::start("").await;
    bot(&s, "keeper", json!([{"mode": "normal"}])).await;
    let t = ui(&s, 100, 20);
    t.wait_for("keeper").await;
    s.daemon.terminate().await;
    t.wait_for("botvisord is not running on this bus").await;
    s.daemon = Daemon::start(&s.cfg, &s.env.conn).await;
    let screen = t
        .wait("the bots again", |s| {
            s.lines()
                .next()
                .is_some_and(|title| title.contains("1 bot(s)"))
                && !s.contains("is not running")
        })
        .await;
    assert!(screen.contains("keeper"), "{screen}");
    let pid = t.format("#{pane_pid}");
    // The shell's child is botvisorctl: SIGTERM to it.
    let out = std::process::Command::new("pkill")
        .args(["-TERM", "-P", &pid, "-x", "botvisorctl"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    t.wait_for("ui ended: 0").await;
    assert_eq!(t.format("#{alternate_on}"), "0");
}

/// Without a terminal the dashboard refuses with a usage error (exit 2) and says what works in a
/// pipe.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_needs_a_terminal() {
    let s = FakeSetup::start("").await;
    let out = tokio::process::Command::new(CTL)
        .env_clear()
        .env("DBUS_SESSION_BUS_ADDRESS", &s.env.bus.address)
        .arg("ui")
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("needs a terminal"), "{err}");
}

/// Issue 30, in the way 8: `top -n 2` in a terminal leaves its last refresh on the screen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_with_a_count_leaves_its_last_refresh() {
    if !have_tmux() {
        return;
    }
    let s = FakeSetup::start("").await;
    bot(&s, "counted", json!([{"mode": "normal"}])).await;
    let bus = s.env.bus.address.clone();
    let t = Tmux::start(
        s.env.dir.path(),
        100,
        20,
        &s.env.work,
        &[("DBUS_SESSION_BUS_ADDRESS", &bus)],
        &format!("{CTL} top -n 2 --interval 0.1; echo \"top ended: $?\"; exec sleep 3600"),
    );
    let screen = t.wait_for("top ended: 0").await;
    assert!(
        screen.contains("counted") && screen.contains("CPU%"),
        "{screen}"
    );
    assert_eq!(
        screen.matches("counted").count(),
        1,
        "drawn in place: {screen}"
    );
}
