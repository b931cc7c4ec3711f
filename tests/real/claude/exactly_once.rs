//! Tier 3: design rule 8 (nothing sent is lost, nothing sent twice) and rule 4 (a lost
//! conversation is not a turn; a signal never gives a conversation up) when the daemon or the
//! real Claude Code CLI is killed at random moments. Each sweep prints its seed; a failure names
//! it, and `BOTVISOR_TEST_SEED=<seed>` replays the same moments.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use serde_json::Value;

use botvisor::dbus::client::BotProxy;
use support::moments::Moments;
use support::stand_in_api::{ApiRequest, Reply, Script};
use support::*;

/// How many times each sweep kills: 20, or `BOTVISOR_TEST_KILLS` (for a longer measuring run).
fn kills() -> u32 {
    std::env::var("BOTVISOR_TEST_KILLS")
        .ok()
        .and_then(|k| k.parse().ok())
        .unwrap_or(20)
}

/// Every message gets an answer that starts after 1 s (the CLI has written the message into its
/// transcript and not replayed it yet) and then streams for about 1 s.
fn slow_script() -> Script {
    Arc::new(|req: &ApiRequest| Reply::Delayed {
        after: Duration::from_secs(1),
        reply: Box::new(Reply::SlowText {
            chunks: (0..10)
                .map(|i| format!("{} {i} ", req.last_user_text))
                .collect(),
            every: Duration::from_millis(100),
        }),
    })
}

/// The share of turns killed once each that must end answered (issue 25: a message taken and
/// unanswered is asked again without its first attempt).
const MIN_ANSWERED_PERCENT: usize = 95;

/// The outcome of `turn` once it ended: read from the chat, or awaited as `TurnFinished` (the
/// stream is subscribed before the chat is read, so an end between the two is not missed).
async fn turn_end(bot: &BotProxy<'_>, turn: &str) -> String {
    let mut finished = bot.receive_turn_finished().await.unwrap();
    let ended = of_kind(&chat(bot).await, "turn_finished")
        .into_iter()
        .find(|p| p["turn_id"] == turn)
        .map(|p| p["outcome"].as_str().unwrap_or_default().to_owned());
    if let Some(outcome) = ended {
        return outcome;
    }
    tokio::time::timeout(EVENT_TIMEOUT, async {
        loop {
            let sig = finished.next().await.expect("signal stream");
            let a = sig.args().unwrap();
            if a.turn_id == turn {
                return a.outcome.clone();
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("turn {turn} did not end"))
}

/// Checks what a user would see after a sweep: every message once in the chat, every turn
/// ended once, the conversation kept, every request the model got holding each message at most
/// once (a message taken and unanswered is asked again without its first attempt: issue 25),
/// and every answer on the conversation's branch in the chat. Returns how many of the killed
/// turns (all but the first and the last) were answered.
async fn check_sweep(
    seed: u64,
    env: &TestEnv,
    bot: &BotProxy<'_>,
    setup: &RealSetup,
    sent: &[(String, String)],
    session: &str,
) -> usize {
    let items = chat(bot).await;
    let users: Vec<&str> = of_kind(&items, "user")
        .iter()
        .map(|p| p["text"].as_str().unwrap())
        .collect();
    for req in setup.api.requests().iter().filter(|r| r.has_tools) {
        let said = req.user_texts();
        for (text, _) in sent {
            let n = said.iter().filter(|t| t.trim() == text).count();
            assert!(
                n <= 1,
                "seed {seed}: a request to the model holds `{text}` {n} times: {said:?}"
            );
        }
    }
    for (text, _) in sent {
        let n = users.iter().filter(|u| **u == text).count();
        assert_eq!(n, 1, "seed {seed}: `{text}` is {n} times in the chat");
    }
    for p in of_kind(&items, "system") {
        assert!(
            !matches!(
                p["reason"].as_str(),
                Some("transcript_missing" | "conversation_not_found" | "died_after_launch")
            ),
            "seed {seed}: the conversation was replaced: {p}"
        );
    }
    for (_, kind, p) in &items {
        assert!(
            !p.to_string().contains("No conversation found"),
            "seed {seed}: a {kind} item shows the CLI's lost conversation: {p}"
        );
    }
    assert_eq!(
        bot.session_id().await.unwrap(),
        session,
        "seed {seed}: the conversation changed"
    );
    let mut outcomes: HashMap<&str, usize> = HashMap::new();
    for (text, turn) in sent {
        let ends: Vec<&Value> = of_kind(&items, "turn_finished")
            .into_iter()
            .filter(|p| p["turn_id"] == turn.as_str())
            .collect();
        assert_eq!(
            ends.len(),
            1,
            "seed {seed}: turn of `{text}` ended {} times: {ends:?}",
            ends.len()
        );
        *outcomes
            .entry(ends[0]["outcome"].as_str().unwrap_or_default())
            .or_default() += 1;
    }
    // Every answer the conversation holds is one the user was shown.
    let said: Vec<&str> = of_kind(&items, "assistant")
        .iter()
        .filter_map(|p| p["text"].as_str())
        .collect();
    let branch = transcript_branch(&env.home.join(".claude"), session);
    let mut missing = Vec::new();
    // Claude Code's own filler ("No response requested.", model `<synthetic>`) is no answer.
    for line in branch
        .iter()
        .filter(|l| l["type"] == "assistant" && l["message"]["model"] != "<synthetic>")
    {
        for block in line["message"]["content"].as_array().into_iter().flatten() {
            if let Some(text) = block["text"].as_str().filter(|t| !t.trim().is_empty())
                && !said.iter().any(|s| s.trim() == text.trim())
            {
                missing.push(text.to_owned());
            }
        }
    }
    assert!(
        missing.is_empty(),
        "seed {seed}: answers in the conversation the chat lacks: {missing:?}"
    );
    let killed = &sent[1..sent.len() - 1];
    let answered = killed
        .iter()
        .filter(|(_, turn)| {
            of_kind(&items, "turn_finished")
                .iter()
                .any(|p| p["turn_id"] == turn.as_str() && p["outcome"] == "success")
        })
        .count();
    let redos = of_kind(&items, "system")
        .iter()
        .filter(|p| p["reason"] == "redo")
        .count();
    println!(
        "seed {seed}: {answered} of {} killed turns answered ({redos} asked again); outcomes {outcomes:?}",
        killed.len()
    );
    for (text, turn) in killed {
        let of_turn: Vec<String> = items
            .iter()
            .filter(|(_, k, p)| k != "user" && p["turn_id"] == turn.as_str())
            .map(|(_, k, p)| {
                if k == "result" {
                    format!("result {p:.600}")
                } else {
                    format!("{k} {}", p["reason"])
                }
            })
            .collect();
        let ok = of_kind(&items, "turn_finished")
            .iter()
            .any(|p| p["turn_id"] == turn.as_str() && p["outcome"] == "success");
        if !ok {
            println!("seed {seed}: `{text}` unanswered: {of_turn:?}");
        }
    }
    answered
}

/// Issue 25: each turn killed once (the daemon and the CLI in turn, at a random moment of it) is
/// answered: a message the conversation took and did not answer is asked again without its
/// first attempt. Every other rule of the sweeps holds too.
#[cfg_attr(
    botvisor_skip_claude,
    ignore = "BOTVISOR_TEST_CLAUDE_BIN not set: no real Claude Code to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_killed_once_is_answered_once() {
    let Some(claude) = claude_bin() else { return };
    let env = TestEnv::new().await;
    let (mut moments, seed) = Moments::new("one kill per turn sweep");
    let mut setup =
        RealSetup::start_with_config(&env, claude, slow_script(), "stop_grace_s = 3\n").await;
    let created = setup.create_bot(&env, &env.work, &[]).await;
    let path: zbus::OwnedObjectPath = created.inner().path().to_owned().into();
    let bot = env.bot_uncached(&path).await;
    let first = send_and_wait(&bot, "k00").await;
    assert_eq!(first.outcome, "success", "seed {seed}: {first:?}");
    let session = bot.session_id().await.unwrap();
    let mut sent = vec![("k00".to_owned(), first.turn_id)];
    for i in 1..=kills() {
        let text = format!("k{i:02}");
        let turn = bot.send(&text, HashMap::new()).await.unwrap();
        sent.push((text, turn.clone()));
        if i % 2 == 0 {
            tokio::time::sleep(moments.next(2500)).await; // the kill moment, not a wait
            setup.daemon.kill();
            setup.daemon = Daemon::start(&setup.cfg, &env.conn).await;
        } else {
            // A proxy of the daemon running now (the last one may have been restarted).
            // Its cache filled first (`watching`), so that the stream and the read below see one
            // cache: seen once, a fresh proxy's wait ran out its bound while the agent that
            // started right after the daemon's restart ran.
            let live = watching(&env.bot(&path).await).await;
            let mut pids = live.receive_process_id_changed().await;
            let mut pid = live.process_id().await.unwrap();
            while pid == 0 {
                let change = tokio::time::timeout(EVENT_TIMEOUT, pids.next())
                    .await
                    .unwrap_or_else(|_| panic!("seed {seed}: no process started"))
                    .unwrap();
                pid = change.get().await.unwrap();
            }
            tokio::time::sleep(moments.next(2000)).await; // the kill moment, not a wait
            // SAFETY: kill(2) on the agent's pid, as a crash from outside.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        }
        turn_end(&bot, &turn).await;
    }
    let last = send_and_wait(&bot, "last").await;
    assert_eq!(last.outcome, "success", "seed {seed}: {last:?}");
    sent.push(("last".to_owned(), last.turn_id));
    let answered = check_sweep(seed, &env, &bot, &setup, &sent, &session).await;
    assert!(
        answered * 100 >= kills() as usize * MIN_ANSWERED_PERCENT,
        "seed {seed}: only {answered} of {} turns killed once were answered",
        kills()
    );
}

/// Issue 45: botvisord stopped gently (SIGTERM, as a session's end or an upgrade without
/// systemd does) at a seeded moment of each of 20 turns, and a new one started: every message is
/// answered once (the answer read back, or the message asked again without the cut attempt,
/// which the chat says), no request to the model holds it twice, and the conversation is kept.
#[cfg_attr(
    botvisor_skip_claude,
    ignore = "BOTVISOR_TEST_CLAUDE_BIN not set: no real Claude Code to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_stopped_during_each_turn_answers_every_message_once() {
    let Some(claude) = claude_bin() else { return };
    let env = TestEnv::new().await;
    let (mut moments, seed) = Moments::new("daemon SIGTERM sweep");
    let mut setup =
        RealSetup::start_with_config(&env, claude, slow_script(), "stop_grace_s = 3\n").await;
    let created = setup.create_bot(&env, &env.work, &[]).await;
    let path: zbus::OwnedObjectPath = created.inner().path().to_owned().into();
    let bot = env.bot_uncached(&path).await;
    let first = send_and_wait(&bot, "t00").await;
    assert_eq!(first.outcome, "success", "seed {seed}: {first:?}");
    let session = bot.session_id().await.unwrap();
    let mut sent = vec![("t00".to_owned(), first.turn_id)];
    for i in 1..=kills() {
        let text = format!("t{i:02}");
        let turn = bot.send(&text, HashMap::new()).await.unwrap();
        sent.push((text, turn.clone()));
        tokio::time::sleep(moments.next(2500)).await; // the stop's moment, not a wait
        assert!(
            setup.daemon.terminate().await.success(),
            "seed {seed}: botvisord exits cleanly on SIGTERM"
        );
        setup.daemon = Daemon::start(&setup.cfg, &env.conn).await;
        turn_end(&bot, &turn).await;
    }
    let last = send_and_wait(&bot, "last").await;
    assert_eq!(last.outcome, "success", "seed {seed}: {last:?}");
    sent.push(("last".to_owned(), last.turn_id));
    let answered = check_sweep(seed, &env, &bot, &setup, &sent, &session).await;
    assert_eq!(
        answered,
        kills() as usize,
        "seed {seed}: every turn botvisord's own stop cut is answered"
    );
    // The chat says which were asked again: one `redo` item for each, none for the others.
    let items = chat(&bot).await;
    for (text, turn) in &sent[1..sent.len() - 1] {
        let redos = of_kind(&items, "system")
            .iter()
            .filter(|p| p["reason"] == "redo" && p["turn_id"] == turn.as_str())
            .count();
        assert!(
            redos <= 1,
            "seed {seed}: `{text}` asked again {redos} times"
        );
    }
}

#[cfg_attr(
    botvisor_skip_claude,
    ignore = "BOTVISOR_TEST_CLAUDE_BIN not set: no real Claude Code to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_killed_at_random_moments_of_turns_sends_each_message_once() {
    let Some(claude) = claude_bin() else { return };
    let env = TestEnv::new().await;
    let (mut moments, seed) = Moments::new("daemon kill sweep");
    let mut setup =
        RealSetup::start_with_config(&env, claude, slow_script(), "stop_grace_s = 3\n").await;
    let created = setup.create_bot(&env, &env.work, &[]).await;
    let path: zbus::OwnedObjectPath = created.inner().path().to_owned().into();
    let bot = env.bot_uncached(&path).await;
    let first = send_and_wait(&bot, "m00").await;
    assert_eq!(first.outcome, "success", "seed {seed}: {first:?}");
    let session = bot.session_id().await.unwrap();
    let mut sent = vec![("m00".to_owned(), first.turn_id)];
    for i in 1..=kills() {
        let text = format!("m{i:02}");
        let turn = bot.send(&text, HashMap::new()).await.unwrap();
        sent.push((text, turn));
        tokio::time::sleep(moments.next(2500)).await; // the kill moment, not a wait
        setup.daemon.kill();
        setup.daemon = Daemon::start(&setup.cfg, &env.conn).await;
    }
    // Every turn ends first (a long sweep queues more than a turn's bound of work).
    for (_, turn) in &sent {
        turn_end(&bot, turn).await;
    }
    let last = send_and_wait(&bot, "last").await;
    assert_eq!(last.outcome, "success", "seed {seed}: {last:?}");
    sent.push(("last".to_owned(), last.turn_id));
    check_sweep(seed, &env, &bot, &setup, &sent, &session).await;
}

#[cfg_attr(
    botvisor_skip_claude,
    ignore = "BOTVISOR_TEST_CLAUDE_BIN not set: no real Claude Code to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_killed_at_random_moments_never_loses_its_conversation() {
    let Some(claude) = claude_bin() else { return };
    let env = TestEnv::new().await;
    let (mut moments, seed) = Moments::new("CLI kill sweep");
    let setup = RealSetup::start_with_config(
        &env,
        claude,
        slow_script(),
        "crash_loop_limit = 1000\ncrash_loop_window_s = 1\n",
    )
    .await;
    let created = setup.create_bot(&env, &env.work, &[]).await;
    let path: zbus::OwnedObjectPath = created.inner().path().to_owned().into();
    let bot = env.bot_uncached(&path).await;
    let first = send_and_wait(&bot, "c00").await;
    assert_eq!(first.outcome, "success", "seed {seed}: {first:?}");
    let session = bot.session_id().await.unwrap();
    let mut sent = vec![("c00".to_owned(), first.turn_id)];
    let mut pids = created.receive_process_id_changed().await;
    for i in 1..=kills() {
        let text = format!("c{i:02}");
        let turn = bot.send(&text, HashMap::new()).await.unwrap();
        sent.push((text, turn));
        // The moment counts from the launch when the message starts a process.
        let mut pid = bot.process_id().await.unwrap();
        while pid == 0 {
            let change = tokio::time::timeout(EVENT_TIMEOUT, pids.next())
                .await
                .unwrap_or_else(|_| panic!("seed {seed}: no process started"))
                .unwrap();
            pid = change.get().await.unwrap();
        }
        tokio::time::sleep(moments.next(2000)).await; // the kill moment, not a wait
        // SAFETY: kill(2) on the agent's pid, as a crash from outside.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    }
    // Every turn ends first (a long sweep queues more than a turn's bound of work).
    for (_, turn) in &sent {
        turn_end(&bot, turn).await;
    }
    let last = send_and_wait(&bot, "last").await;
    assert_eq!(last.outcome, "success", "seed {seed}: {last:?}");
    sent.push(("last".to_owned(), last.turn_id));
    check_sweep(seed, &env, &bot, &setup, &sent, &session).await;
}

#[cfg_attr(
    botvisor_skip_claude,
    ignore = "BOTVISOR_TEST_CLAUDE_BIN not set: no real Claude Code to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_cli_killed_before_its_replay_keeps_its_conversation() {
    let Some(claude) = claude_bin() else { return };
    let env = TestEnv::new().await;
    let setup = RealSetup::start(&env, claude, slow_script()).await;
    let created = setup.create_bot(&env, &env.work, &[]).await;
    let path: zbus::OwnedObjectPath = created.inner().path().to_owned().into();
    let bot = env.bot_uncached(&path).await;
    assert_eq!(send_and_wait(&bot, "x").await.outcome, "success");
    let session = bot.session_id().await.unwrap();
    stop_and_wait(&bot).await;
    let mut finished = bot.receive_turn_finished().await.unwrap();
    let y = bot.send("y", HashMap::new()).await.unwrap();
    // Killed while the resumed CLI waits for the model's first answer: launched, the message
    // taken into the conversation, no replay yet.
    setup
        .api
        .wait_for(|r| r.last_user_text == "y", EVENT_TIMEOUT)
        .await;
    let pid = bot.process_id().await.unwrap();
    assert_ne!(pid, 0);
    // SAFETY: kill(2) on the agent's pid, as a crash from outside.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    let y_outcome = wait_turns(&mut finished, std::slice::from_ref(&y)).await;
    let z = send_and_wait(&bot, "z").await;
    assert_eq!(z.outcome, "success", "{z:?}");
    assert_eq!(
        bot.session_id().await.unwrap(),
        session,
        "a conversation whose transcript exists was given up after y ended {y_outcome:?}"
    );
    let items = chat(&bot).await;
    assert!(
        !of_kind(&items, "system")
            .iter()
            .any(|p| p["reason"] == "died_after_launch"),
        "{items:?}"
    );
    let last = setup.api.requests().last().unwrap().body.to_string();
    assert!(last.contains("\"x\""), "z was answered without the history");
}

#[cfg_attr(
    botvisor_skip_claude,
    ignore = "BOTVISOR_TEST_CLAUDE_BIN not set: no real Claude Code to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_turn_and_an_api_error_read_back_as_their_outcomes() {
    let Some(claude) = claude_bin() else { return };
    let env = TestEnv::new().await;
    let script: Script = Arc::new(|req: &ApiRequest| {
        if req.last_user_text.contains("forbidden") {
            Reply::Status {
                status: 403,
                body: serde_json::json!({"type": "error", "error": {
                    "type": "permission_error", "message": "not for you"}}),
            }
        } else {
            Reply::SlowText {
                chunks: (0..100).map(|i| format!("w{i} ")).collect(),
                every: Duration::from_millis(100),
            }
        }
    });
    let setup = RealSetup::start(&env, claude, script).await;
    let bot = setup.create_bot(&env, &env.work, &[]).await;
    let mut finished = bot.receive_turn_finished().await.unwrap();
    let mut deltas = bot.receive_text_delta().await.unwrap();
    let talk = bot.send("talk", HashMap::new()).await.unwrap();
    tokio::time::timeout(EVENT_TIMEOUT, deltas.next())
        .await
        .expect("the reply streams");
    assert!(bot.interrupt().await.unwrap());
    let interrupted = wait_turns(&mut finished, std::slice::from_ref(&talk)).await;
    assert_eq!(interrupted[0].1, "interrupted");
    let denied = send_and_wait(&bot, "forbidden").await;
    let items = chat(&bot).await;
    let outcome_of = |turn: &str| -> Vec<String> {
        of_kind(&items, "turn_finished")
            .iter()
            .filter(|p| p["turn_id"] == turn)
            .map(|p| p["outcome"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(outcome_of(&talk), vec!["interrupted"], "{items:?}");
    assert_eq!(denied.outcome, "error", "{denied:?}");
    assert_eq!(outcome_of(&denied.turn_id), vec!["error"], "{items:?}");
}
