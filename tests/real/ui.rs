//! `botvisorctl ui` in a real terminal (tmux) with the real CLIs (issue 30): a Claude Code bot
//! asks to write a file and is answered "always" from the dashboard (its next edit is not asked
//! at all), denied with words, stopped and restarted; a Codex bot is sent a message. With the
//! scripted fake CLI: tests/fake/ui.rs.

use support::codex::CodexSetup;
use support::stand_in_api::demo_script;
use support::terminal::{Tmux, have_tmux};
use support::*;

const CTL: &str = env!("CARGO_BIN_EXE_botvisorctl");

/// `botvisorctl --address BUS ui` in a tmux window (the bus given as a flag, as `--host` gives
/// one); the shell says how it ended.
fn ui(env: &TestEnv, width: u16, height: u16) -> Tmux {
    let home = env.home.to_str().unwrap().to_owned();
    Tmux::start(
        env.dir.path(),
        width,
        height,
        &env.work,
        &[("HOME", &home)],
        &format!(
            "{CTL} --address '{}' ui; echo \"ui ended: $?\"; exec sleep 3600",
            env.bus.address
        ),
    )
}

/// Claude Code 2.1.328: a Write asked from the dashboard and answered `a` (always): the file is
/// written, the bot's mode becomes acceptEdits (the CLI's suggestion), and the next Write is not
/// asked at all. Back in the default mode, `n` with words denies: the file stays unwritten and the
/// chat says who denied and why. `S` stops the agent, `R` starts it again.
#[cfg_attr(
    botvisor_skip_claude,
    ignore = "BOTVISOR_TEST_CLAUDE_BIN not set: no real Claude Code to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claude_bot_is_answered_always_and_denied_from_the_dashboard() {
    if !have_tmux() {
        return;
    }
    let Some(claude) = claude_bin() else { return };
    let env = TestEnv::new().await;
    let setup = RealSetup::start(&env, claude, demo_script()).await;
    let bot = setup.create_bot(&env, &env.work, &[]).await;
    let name = bot.name().await.unwrap();
    // Every turn's end, from the first: the dashboard sends, so the turn ids are not known here.
    let mut finished = bot.receive_turn_finished().await.unwrap();
    let t = ui(&env, 140, 40);
    t.wait_for(&name).await;
    let first = env.work.join("first.txt");
    t.keys(&["Enter"]);
    t.text(&format!("write {}: one", first.display()));
    t.keys(&["Enter"]);
    let screen = t.wait_for("asks: Write").await;
    // The key says what it lets run (issue 46).
    assert!(
        screen.contains("a allow every file edit without asking from now on"),
        "{screen}"
    );
    t.keys(&["a"]);
    assert_eq!(wait_any_turn(&mut finished).await, "success");
    assert_eq!(
        std::fs::read_to_string(&first).ok().as_deref(),
        Some("one"),
        "{:?}",
        chat(&bot).await
    );
    wait_permission_mode(&bot, "acceptEdits").await;
    let second = env.work.join("second.txt");
    t.keys(&["Enter"]);
    t.text(&format!("write {}: two", second.display()));
    t.keys(&["Enter"]);
    let turns = wait_any_turn(&mut finished).await;
    assert_eq!(turns, "success");
    assert_eq!(std::fs::read_to_string(&second).unwrap(), "two");
    let items = chat(&bot).await;
    assert_eq!(
        of_kind(&items, "permission_request").len(),
        1,
        "the second Write was not asked: {items:?}"
    );
    let answer = of_kind(&items, "permission_answer")[0].clone();
    assert_eq!(answer["scope"], "always");
    assert_eq!(answer["permission_mode"], "acceptEdits");

    bot.set_permission_mode("default").await.unwrap();
    wait_permission_mode(&bot, "default").await;
    let third = env.work.join("third.txt");
    t.keys(&["Enter"]);
    t.text(&format!("write {}: three", third.display()));
    t.keys(&["Enter"]);
    t.wait("the third Write asked", |s| {
        s.matches("asks: Write").count() == 1 && s.contains("third.txt")
    })
    .await;
    t.keys(&["n"]);
    t.wait_for("tell the model").await;
    t.text("not in this folder");
    t.keys(&["Enter"]);
    t.wait_for(": not in this folder").await;
    let outcome = wait_any_turn(&mut finished).await;
    assert_eq!(outcome, "success");
    assert!(!third.exists());

    t.keys(&["S"]);
    wait_state(&bot, "stopped").await;
    t.keys(&["R"]);
    t.wait_for("restarting the agent").await;
    t.keys(&["q"]);
    t.wait_for("ui ended: 0").await;
}

/// The next `TurnFinished`'s outcome.
async fn wait_any_turn(finished: &mut botvisor::dbus::client::TurnFinishedStream) -> String {
    let sig = tokio::time::timeout(EVENT_TIMEOUT, futures_util::StreamExt::next(finished))
        .await
        .expect("a turn ends")
        .expect("the stream goes on");
    sig.args().unwrap().outcome.clone()
}

/// Codex 0.171.0: a message written in the dashboard goes to a Codex bot, and its answer shows.
#[cfg_attr(
    botvisor_skip_codex,
    ignore = "BOTVISOR_TEST_CODEX_BIN not set: no real Codex to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_codex_bot_is_sent_a_message_from_the_dashboard() {
    if !have_tmux() {
        return;
    }
    let Some(codex) = codex_bin() else { return };
    let env = TestEnv::new().await;
    let setup = CodexSetup::start(&env, codex, support::responses_api::echo_script()).await;
    let bot = setup.bot(&env, "").await;
    let name = bot.name().await.unwrap();
    let t = ui(&env, 120, 30);
    t.wait_for(&name).await;
    let screen = t.wait_for("codex").await;
    assert!(screen.contains(&name), "{screen}");
    t.keys(&["Enter"]);
    t.text("hello from the dashboard");
    t.keys(&["Enter"]);
    t.wait_for("Hello! You said: hello from the dashboard")
        .await;
    let items = chat(&bot).await;
    assert_eq!(
        of_kind(&items, "user")[0]["text"],
        "hello from the dashboard"
    );
    t.keys(&["q"]);
    t.wait_for("ui ended: 0").await;
    drop(setup);
}
