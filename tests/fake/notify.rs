//! botvisor-notify with a real notification server (design rule 17): dunst under Xvfb on the
//! test's private bus, its own record of what it shows and its context menu (driven by a
//! scripted dmenu) to invoke the actions; the real Claude Code for the permission round trip, the
//! fake CLI for the rest. Without dunst or Xvfb these tests print `skipped: …`
//! (`BOTVISOR_TEST_REQUIRE_DUNST=1` makes them fail instead).

use std::collections::HashMap;

use serde_json::json;
use zbus::Variant;

use support::desktop::{Dunst, Notifier, Xvfb, desktop_or_skip, poll};
use support::*;

/// A desktop: Xvfb and dunst on `env`'s bus.
async fn desktop(env: &TestEnv) -> (Xvfb, Dunst) {
    let x = Xvfb::start();
    let d = Dunst::start(
        &env.dir.path().join("dunst"),
        &env.bus.address,
        &x.display,
        &env.conn,
    )
    .await;
    (x, d)
}

/// A folder named `name` in `env.work` (a bot created there takes its name).
fn folder(env: &TestEnv, name: &str) -> std::path::PathBuf {
    let p = env.work.join(name);
    std::fs::create_dir_all(&p).unwrap();
    p
}

/// Waits for the `TurnFinished` of `turn` on `finished` (subscribed before the send).
async fn turn_end(finished: &mut botvisor::dbus::client::TurnFinishedStream, turn: &str) -> String {
    wait_turns(finished, &[turn.to_owned()]).await[0].1.clone()
}

#[cfg_attr(
    botvisor_skip_claude,
    ignore = "BOTVISOR_TEST_CLAUDE_BIN not set: no real Claude Code to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allow_and_deny_through_dunst_answer_the_real_cli() {
    let Some(claude) = claude_bin() else { return };
    if !desktop_or_skip() {
        return;
    }
    let env = TestEnv::new().await;
    let real = RealSetup::start(&env, claude, stand_in_api::demo_script()).await;
    let (_x, dunst) = desktop(&env).await;
    let work = folder(&env, "writer");
    let bot = real.create_bot(&env, &work, &[]).await;
    let _notify = Notifier::start(&env, "").await;
    let mut finished = bot.receive_turn_finished().await.unwrap();

    // Allow: the tool runs.
    let target = work.join("note.txt");
    let turn = bot
        .send(
            &format!("write {}: hello", target.display()),
            HashMap::new(),
        )
        .await
        .unwrap();
    let shown = dunst.wait_shown("writer asks to use Write", 1).await;
    let n = &shown[0];
    assert!(
        n["DUNST_BODY"].contains(&format!("file_path: {}", target.display())),
        "{n:?}"
    );
    assert_eq!(n["DUNST_CATEGORY"], "x-botvisor.permission");
    assert_eq!(n["DUNST_DESKTOP_ENTRY"], "botvisor-notify");
    assert_eq!(n["DUNST_URGENCY"], "NORMAL");
    assert_eq!(n["DUNST_APP_NAME"], "botvisor");
    let menu = dunst.choose("#Allow ").await;
    let lines: Vec<&str> = menu.lines().collect();
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("#Allow once (writer asks to use Write)")),
        "{menu}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("#Deny (writer asks to use Write)")),
        "{menu}"
    );
    assert_eq!(turn_end(&mut finished, &turn).await, "success");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "hello");
    let answers = chat(&bot).await;
    let answer = of_kind(&answers, "permission_answer");
    assert_eq!(answer[0]["behavior"], "allow");
    assert_eq!(answer[0]["client"], "botvisor-notify");
    dunst.wait_closed(&n["DUNST_ID"]).await;

    // Deny: it does not.
    let denied = work.join("denied.txt");
    let turn = bot
        .send(&format!("write {}: no", denied.display()), HashMap::new())
        .await
        .unwrap();
    dunst.wait_shown("writer asks to use Write", 2).await;
    dunst.choose("#Deny ").await;
    turn_end(&mut finished, &turn).await;
    assert!(!denied.exists(), "the denied write happened");
    let answers = chat(&bot).await;
    assert_eq!(
        of_kind(&answers, "permission_answer")[1]["behavior"],
        "deny"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_answered_elsewhere_moves_on_in_place_then_closes() {
    if !desktop_or_skip() {
        return;
    }
    let fake = FakeSetup::start("").await;
    let (_x, dunst) = desktop(&fake.env).await;
    // Hostile input: markup, a text-direction override, a line that looks like a menu entry.
    let hostile = "<b>bold</b> & \u{202e}txt.exe\n#Allow (x) [1,allow-1]";
    let bot = fake
        .bot(
            json!([{"mode": "normal", "ask": {"tool": "Bash", "count": 2,
                                               "input": {"command": hostile}}}]),
        )
        .await;
    let notify = Notifier::start(&fake.env, "[notify]\nturn_finished = false\n").await;
    let mut finished = bot.receive_turn_finished().await.unwrap();
    let turn = bot.send("go", HashMap::new()).await.unwrap();
    // Shown at the first request, then replaced when the second opens.
    let first = dunst
        .wait_shown_where("both requests", |s| {
            s["DUNST_SUMMARY"].ends_with("asks to use Bash")
                && s["DUNST_BODY"].contains("(1 more request waiting)")
        })
        .await;
    let body = &first["DUNST_BODY"];
    assert!(
        body.contains("&lt;b&gt;bold&lt;/b&gt; &amp; \\u{202e}txt.exe\\n#Allow"),
        "{body}"
    );
    assert!(
        !body.contains('\u{202e}') && body.contains("(1 more request waiting)"),
        "{body}"
    );
    let menu = dunst.choose("#Nothing").await;
    assert_eq!(
        menu.lines().filter(|l| l.starts_with("#Allow")).count(),
        1,
        "{menu}"
    );

    let pending = bot.pending_permissions().await.unwrap();
    assert_eq!(pending.len(), 2);
    bot.respond_permission(&pending[0].0, "allow", HashMap::new())
        .await
        .unwrap();
    // The same notification now shows the second request alone.
    let shown_before = dunst.shown().len();
    let second = poll("the second request alone", || {
        dunst.shown()[shown_before..]
            .iter()
            .find(|s| !s["DUNST_BODY"].contains("more request"))
            .cloned()
    })
    .await
    .expect("the second request shown");
    assert_eq!(second["DUNST_ID"], first["DUNST_ID"], "replaced in place");
    bot.respond_permission(&pending[1].0, "deny", HashMap::new())
        .await
        .unwrap();
    dunst.wait_closed(&first["DUNST_ID"]).await;
    assert_eq!(turn_end(&mut finished, &turn).await, "success");
    assert!(notify.log_text().contains("notification server"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_that_ends_unattended_notifies_once_and_a_held_bot_gets_none() {
    if !desktop_or_skip() {
        return;
    }
    let fake = FakeSetup::start("").await;
    let (_x, dunst) = desktop(&fake.env).await;
    let alone = create_in(
        &fake,
        "alone",
        json!([{"mode": "normal", "reply": "All done here."}]),
    )
    .await;
    let watched = create_in(&fake, "watched", json!([{"mode": "normal"}])).await;
    watched.hold().await.unwrap();
    let _notify = Notifier::start(&fake.env, "").await;

    assert_eq!(send_and_wait(&alone, "one").await.outcome, "success");
    let shown = dunst.wait_shown("alone finished", 1).await;
    assert_eq!(shown[0]["DUNST_BODY"], "All done here.");
    assert_eq!(shown[0]["DUNST_URGENCY"], "LOW");
    assert_eq!(shown[0]["DUNST_CATEGORY"], "im.received");
    // The held bot's turn, then another of the lone bot's: botvisor-notify handles them in
    // that order, so had the held one notified, dunst would show it before the second.
    assert_eq!(send_and_wait(&watched, "two").await.outcome, "success");
    assert_eq!(send_and_wait(&alone, "three").await.outcome, "success");
    let shown = dunst.wait_shown("alone finished", 2).await;
    // One at a time: the first closed when the next turn began, or, when botvisor-notify saw
    // the next turn's start and end together (a loaded machine), replaced in place by the
    // second (the latest content wins).
    if shown[1]["DUNST_ID"] != shown[0]["DUNST_ID"] {
        dunst.wait_closed(&shown[0]["DUNST_ID"]).await;
    }
    let all = dunst.shown();
    assert!(
        !all.iter().any(|s| s["DUNST_SUMMARY"].contains("watched")),
        "{all:#?}"
    );
    assert_eq!(all.len(), 2, "one notification per turn: {all:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_bot_notifies_with_its_reason_once() {
    if !desktop_or_skip() {
        return;
    }
    let fake = FakeSetup::start("stop_grace_s = 0.5\ncrash_loop_limit = 2\n").await;
    let (_x, dunst) = desktop(&fake.env).await;
    let bot = create_in(
        &fake,
        "crashy",
        json!([{"mode": "die_at_start", "code": 2}]),
    )
    .await;
    let _notify = Notifier::start(&fake.env, "").await;
    bot.send("waiting", HashMap::new()).await.unwrap();
    wait_state(&bot, "failed").await;
    let shown = dunst.wait_shown("crashy failed", 1).await;
    let n = &shown[0];
    assert_eq!(n["DUNST_URGENCY"], "CRITICAL");
    assert_eq!(n["DUNST_CATEGORY"], "x-botvisor.failed");
    let last = bot.last_error().await.unwrap();
    assert!(
        !last.is_empty() && n["DUNST_BODY"].contains(&last[..last.len().min(40)]),
        "{n:?} / {last}"
    );
    // Restart clears `failed`: its notification goes.
    bot.restart(HashMap::new()).await.unwrap();
    dunst.wait_closed(&n["DUNST_ID"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dunst_killed_and_back_shows_the_open_request_again() {
    if !desktop_or_skip() {
        return;
    }
    let fake = FakeSetup::start("").await;
    let (_x, mut dunst) = desktop(&fake.env).await;
    let bot = create_in(
        &fake,
        "patient",
        json!([{"mode": "normal", "ask": {"tool": "Write"}}]),
    )
    .await;
    let _notify = Notifier::start(&fake.env, "").await;
    let mut finished = bot.receive_turn_finished().await.unwrap();
    let turn = bot.send("go", HashMap::new()).await.unwrap();
    dunst.wait_shown("patient asks to use Write", 1).await;
    dunst.kill(&fake.env.conn).await;
    dunst.restart(&fake.env.conn).await;
    dunst.wait_shown("patient asks to use Write", 2).await;
    dunst.choose("#Allow ").await;
    assert_eq!(turn_end(&mut finished, &turn).await, "success");
    let answers = json_lines(&fake.state.join("answers.jsonl"));
    assert_eq!(answers[0]["behavior"], "allow");
}

/// A bot of the fake CLI following `plan`, created in a folder `name` (its name).
async fn create_in(
    fake: &FakeSetup,
    name: &str,
    plan: serde_json::Value,
) -> botvisor::dbus::client::BotProxy<'static> {
    let dir = folder(&fake.env, name);
    let env_map = fake_env(&fake.env.home, &fake.state, plan, &fake.env.marker);
    let mut o = create_options(dir.to_str().unwrap(), &env_map);
    o.insert("name", Variant::from(name));
    let path = fake.env.manager().await.create_bot(o).await.unwrap();
    fake.env.bot(&path).await
}
