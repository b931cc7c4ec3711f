//! Tier 2: supervision faults the real CLI will not produce on demand, with the scripted fake CLI:
//! stubborn and escaping descendants, a CLI that ignores SIGTERM, pid reuse, crash loops,
//! authentication failures, leases.

use std::collections::HashMap;
use std::time::Duration;

use futures_util::StreamExt;
use serde_json::json;
use support::*;

type Fake = FakeSetup;

async fn start_fake() -> Fake {
    FakeSetup::start("stop_grace_s = 0.5\n").await
}

/// Waits until `count` processes carry the test's marker besides the fake CLI itself.
async fn wait_marked(env: &TestEnv, count: usize) -> Vec<(u32, String)> {
    tokio::time::timeout(EVENT_TIMEOUT, async {
        loop {
            let left: Vec<_> = env
                .leftovers()
                .into_iter()
                .filter(|(_, cmd)| !cmd.contains("fake_claude.py"))
                .collect();
            if left.len() >= count {
                return left;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the descendants start")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stubborn_escaping_and_short_lived_descendants_are_all_proven_gone() {
    let fake = start_fake().await;
    let bot = fake
        .bot(json!([{
            "mode": "normal",
            "ignore_term": true,
            "spawn": [
                "trap '' TERM; sleep 300",
                "setsid sh -c 'sleep 300 & sleep 300 & exit 0' & exit 0",
                "sleep 0.1"
            ]
        }]))
        .await;
    assert_eq!(send_and_wait(&bot, "hi").await.outcome, "success");
    // The stubborn one, the two escaped grandchildren (orphans of a setsid'd shell that exited).
    let before = wait_marked(&fake.env, 3).await;
    assert!(before.iter().any(|(_, c)| c.contains("trap")), "{before:?}");
    stop_and_wait(&bot).await;
    assert_eq!(bot.stop_verdict().await.unwrap(), "clean");
    fake.env.assert_no_leftovers();
    let items = chat(&bot).await;
    assert!(
        of_kind(&items, "system")
            .iter()
            .all(|p| p["reason"] != "stop_verdict"),
        "a clean stop adds no chat item: {items:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_is_published_and_its_orphans_are_stopped() {
    let fake = start_fake().await;
    let bot = fake
        .bot(json!([{"mode": "normal", "spawn": ["setsid sleep 300"]}]))
        .await;
    assert_eq!(send_and_wait(&bot, "hi").await.outcome, "success");
    wait_marked(&fake.env, 1).await;
    let pid = bot.process_id().await.unwrap();
    let mut errors = bot.receive_chat_item_added().await.unwrap();
    // SAFETY: kill(2) on the fake agent, as a crash from outside.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    let crash = tokio::time::timeout(EVENT_TIMEOUT, async {
        loop {
            let sig = errors.next().await.unwrap();
            let a = sig.args().unwrap();
            if a.kind == "error" {
                return serde_json::from_str::<serde_json::Value>(&a.payload).unwrap();
            }
        }
    })
    .await
    .expect("the crash is published");
    assert_eq!(crash["reason"], "crash");
    wait_state(&bot, "stopped").await;
    let verdict = tokio::time::timeout(EVENT_TIMEOUT, async {
        let mut changes = bot.receive_stop_verdict_changed().await;
        loop {
            let v = bot.stop_verdict().await.unwrap();
            if !v.is_empty() {
                return v;
            }
            changes.next().await;
        }
    })
    .await
    .unwrap();
    assert_eq!(verdict, "clean");
    assert!(
        crash["text"].as_str().unwrap().contains("signal 9"),
        "{crash}"
    );
    fake.env.assert_no_leftovers();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cli_that_ignores_sigterm_is_killed_after_the_grace_period() {
    let fake = start_fake().await;
    let bot = fake
        .bot(json!([{"mode": "normal", "ignore_term": true}]))
        .await;
    assert_eq!(send_and_wait(&bot, "hi").await.outcome, "success");
    stop_and_wait(&bot).await;
    assert_eq!(bot.stop_verdict().await.unwrap(), "clean");
    assert_eq!(bot.process_id().await.unwrap(), 0);
    fake.env.assert_no_leftovers();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reused_pid_is_never_signalled_at_recovery() {
    let mut fake = start_fake().await;
    let bot = fake.bot(json!([{"mode": "normal"}])).await;
    assert_eq!(send_and_wait(&bot, "hi").await.outcome, "success");
    let bot_id = bot.id().await.unwrap();
    assert!(fake.daemon.terminate().await.success());
    // An unrelated process whose pid the database names, with another start time: as if the
    // recorded process had exited and its pid been reused.
    let mut unrelated = std::process::Command::new("sleep")
        .arg("300")
        .spawn()
        .unwrap();
    let db = rusqlite::Connection::open(&fake.cfg.database).unwrap();
    db.execute(
        "INSERT INTO processes (bot_id, pid, start_time, boot_id, role) VALUES (?1, ?2, 1, ?3, 'root')",
        rusqlite::params![
            bot_id,
            unrelated.id(),
            std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
                .unwrap()
                .trim()
        ],
    )
    .unwrap();
    drop(db);
    let _daemon = Daemon::start(&fake.cfg, &fake.env.conn).await;
    let bot = fake.env.bot(&bot.inner().path().to_owned().into()).await;
    assert_eq!(send_and_wait(&bot, "again").await.outcome, "success");
    assert!(
        unrelated.try_wait().unwrap().is_none(),
        "the unrelated process was signalled"
    );
    let left: i64 = rusqlite::Connection::open(&fake.cfg.database)
        .unwrap()
        .query_row(
            "SELECT COUNT(*) FROM processes WHERE pid = ?1",
            [unrelated.id()],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(left, 0, "the stale record is dropped");
    unrelated.kill().unwrap();
    unrelated.wait().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_loop_ends_in_failed_until_restart() {
    let fake = start_fake().await;
    let bot = fake
        .bot(json!([
            {"mode": "die_after_replay", "code": 1},
            {"mode": "die_at_start", "code": 1},
            {"mode": "die_at_start", "code": 1},
            {"mode": "die_at_start", "code": 1},
            {"mode": "die_at_start", "code": 1},
            {"mode": "normal"}
        ]))
        .await;
    bot.hold().await.unwrap();
    let mut finished = bot.receive_turn_finished().await.unwrap();
    let boom = bot.send("boom", HashMap::new()).await.unwrap();
    wait_state(&bot, "failed").await;
    assert_eq!(
        fake.launches().len(),
        5,
        "restarted while held, up to the limit"
    );
    assert!(bot.last_error().await.unwrap().contains("crashed 5 times"));
    assert!(
        of_kind(&chat(&bot).await, "error")
            .iter()
            .any(|p| p["reason"] == "crash_loop")
    );
    // The message the agent died on, unanswered and never written down, waits through the
    // crash loop (issue 25): Restart delivers it.
    assert_eq!(bot.queued_messages().await.unwrap(), 1);
    bot.restart(HashMap::new()).await.unwrap();
    let done = wait_turns(&mut finished, std::slice::from_ref(&boom)).await;
    assert_eq!(done[0].1, "success", "{done:?}");
    assert_eq!(send_and_wait(&bot, "ok now").await.outcome, "success");
    assert_eq!(fake.launches().len(), 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_authentication_failure_at_exit_goes_straight_to_failed() {
    // The turn's outcome as the agent left it: not asked again after Restart (issue 25).
    let fake = FakeSetup::start("stop_grace_s = 0.5\nredo_limit = 0\n").await;
    let bot = fake
        .bot(json!([{"mode": "auth_exit"}, {"mode": "normal"}]))
        .await;
    bot.hold().await.unwrap();
    let seen = send_and_wait(&bot, "hi").await;
    assert_eq!(seen.outcome, "crashed");
    wait_state(&bot, "failed").await;
    assert_eq!(fake.launches().len(), 1, "no restart loop");
    let last = bot.last_error().await.unwrap();
    assert!(last.contains("authentication"), "{last}");
    assert!(last.contains("Invalid API key"), "{last}");
}

/// Issue 24: an authentication error in a turn's result is no failure but a hold: the bot is
/// `login_required`, its message waits, and the agent that exited is not restarted in a loop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_authentication_error_result_holds_the_message_without_a_restart_loop() {
    let fake = start_fake().await;
    let bot = fake
        .bot(json!([{"mode": "auth_error"}, {"mode": "normal"}]))
        .await;
    bot.hold().await.unwrap();
    bot.send("hi", HashMap::new()).await.unwrap();
    wait_state(&bot, "login_required").await;
    let last = bot.last_error().await.unwrap();
    assert!(last.contains("Invalid API key"), "{last}");
    state_stays_clear_of(&bot, &["idle", "busy", "failed"], Duration::from_secs(2)).await;
    assert_eq!(fake.launches().len(), 1, "no restart loop");
    assert_eq!(bot.queued_messages().await.unwrap(), 1, "the message waits");
    // Restart lets it go, answered by the next launch.
    let mut finished = bot.receive_turn_finished().await.unwrap();
    bot.restart(HashMap::new()).await.unwrap();
    let sig = tokio::time::timeout(EVENT_TIMEOUT, finished.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(sig.args().unwrap().outcome, "success");
}

/// A bot held for its login (as for a usage limit) that a client stops: its waiting messages no
/// longer go by themselves, and the chat says so instead of keeping the hold's promise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_bot_stopped_with_waiting_messages_says_they_wait_for_send_or_restart() {
    let fake = start_fake().await;
    let bot = fake
        .bot(json!([{"mode": "auth_error"}, {"mode": "normal"}]))
        .await;
    bot.send("hi", HashMap::new()).await.unwrap();
    wait_state(&bot, "login_required").await;
    bot.send("two", HashMap::new()).await.unwrap();
    stop_and_wait(&bot).await;
    let items = chat(&bot).await;
    let notes: Vec<_> = of_kind(&items, "system")
        .into_iter()
        .filter(|p| p["reason"] == "stopped_with_queue")
        .collect();
    assert_eq!(notes.len(), 1, "{items:?}");
    assert_eq!(notes[0]["queued"], 2);
    assert_eq!(bot.state().await.unwrap(), "stopped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_disconnects_without_release_drops_its_lease() {
    let fake = start_fake().await;
    let bot = fake.bot(json!([{"mode": "normal"}])).await;
    let other = fake.env.bus.connect().await;
    let theirs = botvisor::dbus::client::BotProxy::builder(&other)
        .path(bot.inner().path().to_owned())
        .build()
        .await
        .unwrap();
    theirs.hold().await.unwrap();
    theirs.hold().await.unwrap();
    bot.hold().await.unwrap();
    wait_holders(&bot, 2).await;
    other.close().await.unwrap();
    wait_holders(&bot, 1).await;
    bot.release().await.unwrap();
    wait_holders(&bot, 0).await;
    let err = bot.release().await.unwrap_err();
    assert!(err.to_string().contains("NotFound"), "{err}");
}

/// Waits until `Holders` reads `n` (read from the daemon, not a cache).
async fn wait_holders(bot: &botvisor::dbus::client::BotProxy<'static>, n: u32) {
    let mut changes = bot.receive_holders_changed().await;
    tokio::time::timeout(EVENT_TIMEOUT, async {
        loop {
            let now: u32 = bot.inner().get_property("Holders").await.unwrap();
            if now == n {
                return;
            }
            changes.next().await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("Holders never became {n}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_stop_waits_for_holders_and_then_the_next_message_resumes() {
    let fake = start_fake().await;
    let env_map = fake_env(
        &fake.env.home,
        &fake.state,
        json!([{"mode": "normal"}]),
        &fake.env.marker,
    );
    let work = fake.env.work.to_str().unwrap().to_owned();
    let mut options = create_options(&work, &env_map);
    options.insert("idle_timeout_s", zbus::Variant::from(1u32));
    let path = fake.env.manager().await.create_bot(options).await.unwrap();
    let bot = fake.env.bot(&path).await;
    bot.hold().await.unwrap();
    assert_eq!(send_and_wait(&bot, "one").await.outcome, "success");
    let session = bot.session_id().await.unwrap();
    wait_state(&bot, "idle").await;
    // Held: no idle stop within three timeouts.
    let mut states = bot.receive_state_changed().await;
    let left_idle = tokio::time::timeout(Duration::from_secs(3), async {
        loop {
            let c = states.next().await.unwrap();
            if c.get().await.unwrap() != "idle" {
                return;
            }
        }
    })
    .await;
    assert!(left_idle.is_err(), "the bot left idle while held");
    bot.release().await.unwrap();
    wait_state(&bot, "stopped").await;
    assert_eq!(bot.stop_verdict().await.unwrap(), "clean");
    assert_eq!(send_and_wait(&bot, "two").await.outcome, "success");
    assert_eq!(bot.session_id().await.unwrap(), session, "resumed");
}

/// How many times the fake CLI read `text`.
fn taken(fake: &Fake, text: &str) -> usize {
    json_lines(&fake.state.join("messages.jsonl"))
        .iter()
        .filter(|m| m["text"] == text)
        .count()
}

/// Expects `State` to stay away from every value in `not` for `within`.
async fn state_stays_clear_of(
    bot: &botvisor::dbus::client::BotProxy<'static>,
    not: &[&str],
    within: Duration,
) {
    let mut states = bot.receive_state_changed().await;
    let left = tokio::time::timeout(within, async {
        loop {
            let s = states.next().await.unwrap().get().await.unwrap();
            if not.contains(&s.as_str()) {
                return s;
            }
        }
    })
    .await;
    assert!(left.is_err(), "the state became {left:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_sent_while_the_daemon_recovers_is_delivered_once() {
    let mut fake = start_fake().await;
    let bot = fake.bot(json!([{"mode": "normal"}])).await;
    let path: zbus::OwnedObjectPath = bot.inner().path().to_owned().into();
    let bot_id = bot.id().await.unwrap();
    assert!(fake.daemon.terminate().await.success());
    // A process the previous run "left" that ignores SIGTERM: recovery takes the grace period,
    // during which the daemon owns its name and takes calls.
    let mut left = std::process::Command::new("sh")
        .args(["-c", "trap '' TERM; while :; do sleep 0.05; done"])
        .spawn()
        .unwrap();
    let id = botvisor::process::identity::identify(left.id()).unwrap();
    rusqlite::Connection::open(&fake.cfg.database)
        .unwrap()
        .execute(
            "INSERT INTO processes (bot_id, pid, start_time, boot_id, role) VALUES (?1, ?2, ?3, ?4, 'root')",
            rusqlite::params![bot_id, id.pid, id.start_time as i64, id.boot_id],
        )
        .unwrap();
    let _daemon = Daemon::start(&fake.cfg, &fake.env.conn).await;
    let bot = fake.env.bot(&path).await;
    let mut finished = bot.receive_turn_finished().await.unwrap();
    let first = bot.send("only once", HashMap::new()).await.unwrap();
    let second = bot.send("then this", HashMap::new()).await.unwrap();
    wait_turns(&mut finished, &[first, second]).await;
    left.wait().unwrap();
    assert_eq!(taken(&fake, "only once"), 1);
    assert_eq!(taken(&fake, "then this"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_stop_waits_for_an_escaped_descendant() {
    let fake = start_fake().await;
    let env_map = fake_env(
        &fake.env.home,
        &fake.state,
        json!([{"mode": "normal", "spawn": ["setsid sleep 300 &"]}]),
        &fake.env.marker,
    );
    let work = fake.env.work.to_str().unwrap().to_owned();
    let mut options = create_options(&work, &env_map);
    options.insert("idle_timeout_s", zbus::Variant::from(1u32));
    let path = fake.env.manager().await.create_bot(options).await.unwrap();
    let bot = fake.env.bot(&path).await;
    assert_eq!(send_and_wait(&bot, "hi").await.outcome, "success");
    let escaped = wait_marked(&fake.env, 1).await;
    state_stays_clear_of(&bot, &["stopping", "stopped"], Duration::from_secs(3)).await;
    // The escaped process ends: now the bot is idle and stops.
    // SAFETY: kill(2) on the test's own escaped sleep.
    unsafe { libc::kill(escaped[0].0 as i32, libc::SIGKILL) };
    wait_state(&bot, "stopped").await;
    assert_eq!(bot.stop_verdict().await.unwrap(), "clean");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_conversation_reported_during_a_stop_does_not_undo_the_stop() {
    let fake = start_fake().await;
    let bot = fake
        .bot(json!([{"mode": "silent", "not_found_on_term": true}, {"mode": "normal"}]))
        .await;
    // Written to the agent, never replayed: it goes back to the queue when the agent stops.
    bot.send("not taken", HashMap::new()).await.unwrap();
    tokio::time::timeout(EVENT_TIMEOUT, async {
        while taken(&fake, "not taken") == 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap();
    // The agent answers the SIGTERM with "No conversation found".
    stop_and_wait(&bot).await;
    state_stays_clear_of(&bot, &["idle", "busy"], Duration::from_secs(2)).await;
    assert_eq!(fake.launches().len(), 1, "the stopped bot started again");
    let direct = fake
        .env
        .bot_uncached(&bot.inner().path().to_owned().into())
        .await;
    assert_eq!(
        direct.queued_messages().await.unwrap(),
        1,
        "the message waits"
    );
    assert_eq!(direct.session_id().await.unwrap(), "");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_keeps_waiting_messages_waiting_across_a_daemon_restart() {
    let mut fake = start_fake().await;
    let bot = fake
        .bot(json!([{"mode": "silent"}, {"mode": "normal"}]))
        .await;
    let path: zbus::OwnedObjectPath = bot.inner().path().to_owned().into();
    bot.send("waits", HashMap::new()).await.unwrap();
    tokio::time::timeout(EVENT_TIMEOUT, async {
        while taken(&fake, "waits") == 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap();
    stop_and_wait(&bot).await;
    assert!(fake.daemon.terminate().await.success());
    let _daemon = Daemon::start(&fake.cfg, &fake.env.conn).await;
    let bot = fake.env.bot(&path).await;
    state_stays_clear_of(&bot, &["idle", "busy"], Duration::from_secs(2)).await;
    assert_eq!(
        fake.launches().len(),
        1,
        "a stopped bot started at daemon start"
    );
    assert_eq!(bot.queued_messages().await.unwrap(), 1);
    // The next Send delivers both, in order.
    let mut finished = bot.receive_turn_finished().await.unwrap();
    let next = bot.send("and this", HashMap::new()).await.unwrap();
    wait_turns(&mut finished, &[next]).await;
    assert_eq!(
        taken(&fake, "waits"),
        2,
        "once to the stopped agent, once to the next"
    );
    assert_eq!(taken(&fake, "and this"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_survives_a_daemon_restart() {
    // The turn ends as the agent left it, not asked again at the Restart (issue 25).
    let mut fake = FakeSetup::start("stop_grace_s = 0.5\nredo_limit = 0\n").await;
    let bot = fake
        .bot(json!([{"mode": "auth_exit"}, {"mode": "normal"}]))
        .await;
    let path: zbus::OwnedObjectPath = bot.inner().path().to_owned().into();
    assert_eq!(send_and_wait(&bot, "hi").await.outcome, "crashed");
    wait_state(&bot, "failed").await;
    let err = bot.send("refused", HashMap::new()).await.unwrap_err();
    assert!(err.to_string().contains("Busy"), "{err}");
    assert!(fake.daemon.terminate().await.success());
    let _daemon = Daemon::start(&fake.cfg, &fake.env.conn).await;
    let bot = fake.env.bot(&path).await;
    assert_eq!(bot.state().await.unwrap(), "failed");
    state_stays_clear_of(&bot, &["idle", "busy"], Duration::from_secs(2)).await;
    assert_eq!(fake.launches().len(), 1);
    bot.restart(HashMap::new()).await.unwrap();
    assert_eq!(
        send_and_wait(&bot, "after restart").await.outcome,
        "success"
    );
    assert_eq!(fake.launches().len(), 2);
}

/// Without cgroups (design rule 9 after a daemon crash): a double fork the crashed daemon never
/// recorded (no snapshot came after it) and that its crash orphaned is found by the marker it
/// inherited and stopped by the next daemon, which names it in the chat.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unrecorded_double_fork_is_stopped_by_the_next_daemon_after_a_crash() {
    let mut fake = FakeSetup::start("stop_grace_s = 0.5\n").await;
    let bot = fake
        .bot(json!([{"mode": "normal", "spawn": ["setsid sh -c 'sleep 300 & exit 0' & exit 0"]}]))
        .await;
    assert_eq!(send_and_wait(&bot, "hi").await.outcome, "success");
    let sleep = tokio::time::timeout(EVENT_TIMEOUT, async {
        loop {
            if let Some((pid, _)) = fake
                .env
                .leftovers()
                .into_iter()
                .find(|(_, c)| c.starts_with("sleep 300"))
            {
                return pid;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the escaped sleep starts");
    fake.daemon.kill();
    fake.daemon = Daemon::start(&fake.cfg, &fake.env.conn).await;
    let bot = fake.env.bot(&bot.inner().path().to_owned().into()).await;
    let note = tokio::time::timeout(EVENT_TIMEOUT, async {
        loop {
            if let Some(p) = of_kind(&chat(&bot).await, "system")
                .into_iter()
                .find(|p| p["reason"] == "recovered_processes")
            {
                return p.clone();
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no recovered_processes note:\n{}", fake.daemon.log_text()));
    assert!(
        note["pids"].as_array().unwrap().contains(&json!(sleep)),
        "{note}"
    );
    fake.env.assert_no_leftovers();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_descendant_that_forks_while_it_is_stopped_leaves_nothing_running() {
    // A loop that ignores SIGTERM and keeps forking short-lived parents of `sleep`s: each sleep
    // is orphaned at once (adopted by botvisord, the subreaper) and more are born during the
    // stop's grace, after its first look. The clean-up looks again until it finds nothing new.
    let fake = start_fake().await;
    let bot = fake
        .bot(json!([{"mode": "normal", "spawn": [
            "setsid sh -c 'trap \"\" TERM; while true; do (sleep 300 &); sleep 0.05; done'"
        ]}]))
        .await;
    assert_eq!(send_and_wait(&bot, "hi").await.outcome, "success");
    wait_marked(&fake.env, 4).await;
    stop_and_wait(&bot).await;
    assert_eq!(bot.stop_verdict().await.unwrap(), "clean");
    fake.env.assert_no_leftovers();
}

/// A Delete is durable once answered: a daemon killed while its actor still waits for the agent
/// to stop (a CLI that ignores SIGTERM, a long grace) does not bring the bot back; the next daemon
/// stops what is left and deletes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bot_whose_delete_was_answered_never_comes_back_after_a_daemon_crash() {
    let mut fake = FakeSetup::start("stop_grace_s = 30\n").await;
    let bot = fake
        .bot(json!([{"mode": "silent", "ignore_term": true}]))
        .await;
    bot.send("hi", std::collections::HashMap::new())
        .await
        .unwrap();
    wait_state(&bot, "busy").await;
    let manager = fake.env.manager().await;
    bot.delete().await.unwrap();
    // The actor is in the stop's 30 s grace now: the daemon dies before it deletes the bot.
    fake.daemon.kill();
    fake.cfg.config = Some(write_config(fake.env.dir.path(), "stop_grace_s = 0.5\n"));
    fake.daemon = Daemon::start(&fake.cfg, &fake.env.conn).await;
    assert!(
        manager.list_bots().await.unwrap().is_empty(),
        "the deleted bot is back:\n{}",
        fake.daemon.log_text()
    );
    tokio::time::timeout(EVENT_TIMEOUT, async {
        while !fake.env.leftovers().is_empty() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("left running: {:?}", fake.env.leftovers()));
}

/// Sends `text` to `bot`, whose turn runs a tool and an orphan until it is interrupted, beside
/// a helper the agent started before the turn (`[helper, tool, orphan]`, each found by the start
/// of its command line), interrupts the turn once all three run, and checks what a user sees:
/// the turn ends `interrupted`, botvisord's note (`interrupted_processes`) names the tool and
/// the orphan and not the helper, the two are gone and the helper runs on. Returns the note and
/// the agent's pid while the tools ran.
async fn interrupt_what_the_turn_left(
    fake: &Fake,
    bot: &botvisor::dbus::client::BotProxy<'_>,
    text: &str,
    commands: [&str; 3],
) -> (serde_json::Value, u32) {
    let mut finished = bot.receive_turn_finished().await.unwrap();
    let turn = bot.send(text, HashMap::new()).await.unwrap();
    let [helper, tool, orphan] = bounded("the helper and the tools start", async {
        loop {
            let marked = fake.env.leftovers();
            let pids = commands.map(|what| {
                marked
                    .iter()
                    .find(|(_, c)| c.starts_with(what))
                    .map(|m| m.0)
            });
            if let [Some(h), Some(t), Some(o)] = pids {
                return [h, t, o];
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let agent = bot.process_id().await.unwrap();
    let mut items = bot.receive_chat_item_added().await.unwrap();
    assert!(bot.interrupt().await.unwrap());
    let done = bounded("the interrupted turn's end", finished.next())
        .await
        .unwrap();
    assert_eq!(done.args().unwrap().turn_id, turn);
    assert_eq!(done.args().unwrap().outcome, "interrupted");
    let note = bounded("the note on what the turn left", async {
        loop {
            let sig = items.next().await.unwrap();
            let p: serde_json::Value = serde_json::from_str(&sig.args().unwrap().payload).unwrap();
            if p["reason"] == "interrupted_processes" {
                return p;
            }
        }
    })
    .await;
    let pids: Vec<u64> = note["pids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_u64().unwrap())
        .collect();
    assert!(
        pids.contains(&u64::from(tool)) && pids.contains(&u64::from(orphan)),
        "tool {tool}, orphan {orphan}, helper {helper}: {note}"
    );
    assert!(!pids.contains(&u64::from(helper)), "{note}");
    assert_eq!(note["turn_id"], turn.as_str(), "the interrupted turn's");
    let alive = |pid: u32| std::path::Path::new(&format!("/proc/{pid}")).exists();
    let still: Vec<u32> = fake.env.leftovers().into_iter().map(|(p, _)| p).collect();
    assert!(
        !still.contains(&tool) && !still.contains(&orphan),
        "{still:?}"
    );
    assert!(
        alive(helper) && still.contains(&helper),
        "the agent's own helper runs on"
    );
    (note, agent)
}

/// Issue 23: an interrupt ends what the interrupted turn started. The turn runs a tool (a
/// child of the agent) and a command that left its shell (an orphan the daemon adopts); the
/// agent ends the turn and leaves both running, as Codex was seen to leave `sleep 300`.
/// botvisord stops both by identity and names them in a `system` item (reason
/// `interrupted_processes`); the agent's own helper from before the turn, and the agent, run on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_stops_what_the_interrupted_turn_left_running() {
    let fake = start_fake().await;
    let plan = json!([{"mode": "normal", "spawn": ["exec sleep 302"],
                       "run_until_interrupt": ["exec sleep 300", "sleep 301 &"]}]);
    let bot = fake.bot(plan).await;
    let commands = ["sleep 302", "sleep 300", "sleep 301"];
    let (note, agent) = interrupt_what_the_turn_left(&fake, &bot, "run the tools", commands).await;
    assert_eq!(note["survivors"], json!([]), "{note}");
    assert_eq!(bot.process_id().await.unwrap(), agent, "the agent runs on");
    assert_eq!(send_and_wait(&bot, "after").await.outcome, "success");
    stop_and_wait(&bot).await;
    fake.env.assert_no_leftovers();
}

/// Issue 50: the look at what an agent runs before a turn is taken as the message is written
/// to an agent that began a turn before, not at the CLI's replay: Claude Code prints the replay
/// only once the model answered, so what the turn started by then (here a hook's processes,
/// 50 ms after the message, before the replay) was taken for the agent's own and left running
/// by an interrupt; the turn's first answer waited behind the look too. An interrupt of such a
/// later turn stops what that turn started and nothing from before it: the helper the agent
/// started at launch runs on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_of_a_later_turn_stops_only_what_that_turn_left_running() {
    let fake = start_fake().await;
    let plan = json!([{"mode": "normal", "spawn": ["exec sleep 305"], "tools_on_message": 2,
                       "tools_before_replay": true, "tools_after_s": 0.05,
                       "run_until_interrupt": ["exec sleep 303", "sleep 304 &"]}]);
    let bot = fake.bot(plan).await;
    assert_eq!(send_and_wait(&bot, "first").await.outcome, "success");
    let commands = ["sleep 305", "sleep 303", "sleep 304"];
    interrupt_what_the_turn_left(&fake, &bot, "run the tools", commands).await;
    stop_and_wait(&bot).await;
    fake.env.assert_no_leftovers();
}

/// The first turn of an agent: what the agent runs is looked at once the CLI says it took the
/// message (Claude Code's `system`/`init`, printed before it asks the model), not only at its
/// replay, which Claude Code prints once the model answered: a hook's processes started in
/// between were taken for the agent's own and an interrupt left them running (a hostile run
/// found it). The helper the agent started at launch runs on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_of_a_first_turn_stops_what_it_started_before_its_replay() {
    let fake = start_fake().await;
    let plan = json!([{"mode": "normal", "spawn": ["exec sleep 308"], "init_at_read": true,
                       "tools_before_replay": true, "tools_after_s": 0.05,
                       "run_until_interrupt": ["exec sleep 306", "sleep 307 &"]}]);
    let bot = fake.bot(plan).await;
    let commands = ["sleep 308", "sleep 306", "sleep 307"];
    interrupt_what_the_turn_left(&fake, &bot, "run the tools", commands).await;
    stop_and_wait(&bot).await;
    fake.env.assert_no_leftovers();
}

/// Design rule 9: botvisord shut down while a deleted bot's agent is still being stopped waits
/// for that stop, so no agent is left running (a Delete used to take the bot off the list the
/// shutdown stops before its agent was gone; found as a leftover fake CLI in a loaded run).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_right_after_a_delete_still_ends_the_deleted_bots_agent() {
    let mut fake = start_fake().await;
    let bot = fake
        .bot(json!([{"mode": "normal", "ignore_term": true}]))
        .await;
    assert_eq!(send_and_wait(&bot, "hi").await.outcome, "success");
    assert_ne!(bot.process_id().await.unwrap(), 0, "its agent runs");
    bot.delete().await.unwrap();
    assert!(fake.daemon.terminate().await.success());
    fake.env.assert_no_leftovers();
}

/// Issue 47's reboot rule (design rule 9): a record from another boot never names a process.
/// The agent's process, its hand-over record and its process rows name a live process of
/// another program with the same pid and start time, only the boot id differs (as after a
/// reboot, when pids and start times begin again): botvisord signals nothing, forgets the
/// records, and the bot resumes its conversation once and answers the message the lost agent
/// had taken, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_reboot_no_recorded_pid_is_signalled_and_each_bot_resumes_once() {
    let mut fake = start_fake().await;
    let bot = fake
        .bot(json!([
            {"mode": "normal"},
            {"mode": "normal", "reply_after_s": 300},
            {"mode": "normal"}
        ]))
        .await;
    assert_eq!(send_and_wait(&bot, "first").await.outcome, "success");
    let bot_id = bot.id().await.unwrap();
    let path: zbus::OwnedObjectPath = bot.inner().path().to_owned().into();
    // A second launch takes the next message and is still answering when the machine goes
    // down: the daemon and the agent die at once.
    bot.restart(HashMap::new()).await.unwrap();
    let turn = bot.send("in flight", HashMap::new()).await.unwrap();
    let deadline = std::time::Instant::now() + EVENT_TIMEOUT;
    while taken(&fake, "in flight") == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the agent takes the message"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    fake.daemon.kill();
    for (pid, _) in fake.env.leftovers() {
        // SAFETY: kill(2) on the test's own marked agent.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    }
    // After the boot, another program runs with the recorded pid and start time.
    let mut other = std::process::Command::new("sleep")
        .arg("300")
        .spawn()
        .unwrap();
    let id = botvisor::process::identity::identify(other.id()).unwrap();
    let db = rusqlite::Connection::open(&fake.cfg.database).unwrap();
    db.execute_batch(&format!(
        "DELETE FROM processes WHERE bot_id = '{bot_id}';
         INSERT INTO processes (bot_id, pid, start_time, boot_id, role)
           VALUES ('{bot_id}', {pid}, {start}, 'another boot', 'root');
         INSERT OR REPLACE INTO handovers
           (bot_id, pid, start_time, boot_id, invocation, state, leftover)
           VALUES ('{bot_id}', {pid}, {start}, 'another boot', 'before', '{{}}', x'');",
        pid = id.pid,
        start = id.start_time,
    ))
    .unwrap();
    drop(db);

    let _daemon = Daemon::start(&fake.cfg, &fake.env.conn).await;
    let bot = fake.env.bot(&path).await;
    let ends = wait_turn_ends(&bot, &turn).await;
    assert_eq!(ends, ["success"], "the message in flight is answered once");
    assert!(
        other.try_wait().unwrap().is_none(),
        "botvisord signalled another program's process, named only by a record of another boot"
    );
    let launches = json_lines(&fake.state.join("launches.jsonl"));
    assert_eq!(
        launches.len(),
        3,
        "one launch after the reboot: {launches:?}"
    );
    let session = bot.session_id().await.unwrap();
    let argv: Vec<String> = serde_json::from_value(launches[2]["argv"].clone()).unwrap();
    assert!(
        argv.windows(2)
            .any(|w| w[0] == "--resume" && w[1] == session),
        "the bot resumes its conversation: {argv:?}"
    );
    let db = rusqlite::Connection::open(&fake.cfg.database).unwrap();
    let left: i64 = db
        .query_row(
            "SELECT (SELECT COUNT(*) FROM processes WHERE pid = ?1)
                  + (SELECT COUNT(*) FROM handovers WHERE pid = ?1)",
            [id.pid],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(left, 0, "the records of the other boot are forgotten");
    other.kill().unwrap();
    other.wait().unwrap();
}

/// The outcomes of every `turn_finished` item of `turn`, once there is one (polls the stored
/// chat every 50 ms, at most [`EVENT_TIMEOUT`]).
async fn wait_turn_ends(
    bot: &botvisor::dbus::client::BotProxy<'static>,
    turn: &str,
) -> Vec<String> {
    let deadline = std::time::Instant::now() + EVENT_TIMEOUT;
    loop {
        let ends: Vec<String> = chat(bot)
            .await
            .into_iter()
            .filter(|(_, kind, p)| kind == "turn_finished" && p["turn_id"] == turn)
            .map(|(_, _, p)| p["outcome"].as_str().unwrap_or_default().to_owned())
            .collect();
        if !ends.is_empty() {
            return ends;
        }
        assert!(std::time::Instant::now() < deadline, "turn {turn} ends");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
