//! botvisor-notify where dunst cannot show it: a stand-in notification server (no `actions`
//! capability; one that goes away and comes back; a signal from someone else), botvisord killed
//! and started again, and the `[[hooks]]`. The fake CLI plays the agent.

use std::collections::HashMap;

use serde_json::json;

use support::desktop::{Notifier, StandInServer, poll};
use support::*;

/// The `allow-N` key of a `Notify`'s actions.
fn allow_key(actions: &[String]) -> String {
    actions
        .iter()
        .find(|a| a.starts_with("allow-"))
        .cloned()
        .unwrap_or_else(|| panic!("no Allow in {actions:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_actions_gets_the_answer_line_and_it_works() {
    let fake = FakeSetup::start("").await;
    let server = StandInServer::start(&fake.env.bus.address, &["body"]).await;
    let bot = fake
        .bot(json!([{"mode": "normal", "ask": {"tool": "Write"}}]))
        .await;
    let _notify = Notifier::start(&fake.env, "").await;
    let mut finished = bot.receive_turn_finished().await.unwrap();
    let turn = bot.send("go", HashMap::new()).await.unwrap();
    let n = server
        .wait("a permission request", |r| {
            r.notified
                .iter()
                .find(|n| n.summary.ends_with("asks to use Write"))
                .cloned()
        })
        .await;
    assert!(n.actions.is_empty(), "{n:?}");
    assert_eq!(n.hints["urgency"], "1");
    assert_eq!(n.hints["category"], "x-botvisor.permission");
    assert_eq!(n.hints["desktop-entry"], "botvisor-notify");
    let line = n
        .body
        .lines()
        .find_map(|l| l.strip_prefix("Answer: "))
        .unwrap_or_else(|| panic!("no answer line in {:?}", n.body));
    let words: Vec<&str> = line.split(' ').collect();
    assert_eq!(&words[..2], ["botvisorctl", "answer"], "{line}");
    assert_eq!(words[4], "allow|deny", "{line}");
    // The line, run as it says (allow), answers the request.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_botvisorctl"))
        .args([
            "--address",
            &fake.env.bus.address,
            "answer",
            words[2],
            words[3],
            "allow",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(wait_turns(&mut finished, &[turn]).await[0].1, "success");
    server
        .wait("its notification closed", |r| {
            r.closed.contains(&n.id).then_some(())
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_comes_back_is_shown_the_open_request_and_no_one_else_answers() {
    let fake = FakeSetup::start("").await;
    let server = StandInServer::start(&fake.env.bus.address, &["actions", "body"]).await;
    let bot = fake
        .bot(json!([{"mode": "normal", "ask": {"tool": "Write"}}]))
        .await;
    let notify = Notifier::start(&fake.env, "").await;
    let mut finished = bot.receive_turn_finished().await.unwrap();
    let turn = bot.send("go", HashMap::new()).await.unwrap();
    let asks = |r: &support::desktop::Record| {
        r.notified
            .iter()
            .find(|n| n.summary.ends_with("asks to use Write"))
            .cloned()
    };
    server.wait("a permission request", asks).await;
    server.leave().await;
    notify
        .wait_log("the notification server left the bus")
        .await;
    let server = StandInServer::start(&fake.env.bus.address, &["actions", "body"]).await;
    let n = server.wait("the request shown again", asks).await;
    assert_eq!(n.replaces, 0, "a new server knows no earlier id");
    assert_eq!(&n.actions[..2], ["default", "Open"]);
    // A signal from a connection that is not the server's is not taken, even sent to
    // botvisor-notify itself (a signal with a destination passes every match rule).
    let key = allow_key(&n.actions);
    let target = notify.unique_name(&fake.env.conn).await;
    fake.env
        .conn
        .emit_signal(
            Some(target.as_str()),
            "/org/freedesktop/Notifications",
            "org.freedesktop.Notifications",
            "ActionInvoked",
            &(n.id, key.replace("allow", "deny")),
        )
        .await
        .unwrap();
    server.invoke(n.id, &key).await;
    assert_eq!(wait_turns(&mut finished, &[turn]).await[0].1, "success");
    let answers = json_lines(&fake.state.join("answers.jsonl"));
    assert_eq!(answers.len(), 1, "{answers:?}");
    assert_eq!(answers[0]["behavior"], "allow");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn botvisord_leaving_closes_its_requests_and_coming_back_is_followed() {
    let mut fake = FakeSetup::start("").await;
    let server = StandInServer::start(&fake.env.bus.address, &["actions", "body"]).await;
    let bot = fake
        .bot(json!([{"mode": "normal", "ask": {"tool": "Write"}}]))
        .await;
    let notify = Notifier::start(&fake.env, "").await;
    bot.send("one", HashMap::new()).await.unwrap();
    let first = server
        .wait("a permission request", |r| {
            r.notified
                .iter()
                .find(|n| n.summary.ends_with("asks to use Write"))
                .cloned()
        })
        .await;
    fake.daemon.kill();
    server
        .wait("the request closed", |r| {
            r.closed.contains(&first.id).then_some(())
        })
        .await;
    fake.daemon = Daemon::start(&fake.cfg, &fake.env.conn).await;
    notify.wait_log("botvisord is on the bus bots=1").await;
    let bot = fake.env.bot(&bot.inner().path().to_owned().into()).await;
    let mut finished = bot.receive_turn_finished().await.unwrap();
    let turn = bot.send("two", HashMap::new()).await.unwrap();
    let again = server
        .wait("the new request", |r| {
            r.notified
                .iter()
                .filter(|n| n.summary.ends_with("asks to use Write"))
                .nth(1)
                .cloned()
        })
        .await;
    server.invoke(again.id, &allow_key(&again.actions)).await;
    let outcome = wait_turns(&mut finished, &[turn]).await;
    assert_eq!(outcome[0].1, "success");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hooks_run_one_at_a_time_with_a_timeout_and_a_bounded_queue() {
    let fake = FakeSetup::start("").await;
    let bot = fake.bot(json!([{"mode": "normal"}])).await;
    let d = fake.env.dir.path().join("hooks");
    std::fs::create_dir_all(&d).unwrap();
    let d = d.display();
    let config = format!(
        r#"[notify]
desktop = false

[[hooks]]
name = "record"
command = ["sh", "-c", "mkdir {d}/lock || echo overlap >> {d}/overlap; cat >> {d}/events.jsonl; echo \"$BOTVISOR_EVENT|$BOTVISOR_SUMMARY\" >> {d}/env.txt; rmdir {d}/lock"]
events = ["turn_finished", "state_changed"]

[[hooks]]
name = "slow"
command = ["sh", "-c", "while [ ! -e {d}/release ]; do sleep 0.02; done; cat >> {d}/slow.jsonl"]
events = ["turn_finished"]
queue = 1

[[hooks]]
name = "spam"
command = ["sh", "-c", "yes spam >&2"]
events = ["turn_finished"]
timeout_s = 0.5

[[hooks]]
name = "leaver"
command = ["sh", "-c", "env -u BOTVISOR_TEST_RUN sleep 3 & echo leaving-words >&2; exit 3"]
events = ["turn_finished"]
"#
    );
    let notify = Notifier::start(&fake.env, &config).await;
    for i in 0..4 {
        assert_eq!(
            send_and_wait(&bot, &format!("m{i}")).await.outcome,
            "success"
        );
    }
    let dir = fake.env.dir.path().join("hooks");
    let turns = poll("4 turn_finished events", || {
        let events = json_lines(&dir.join("events.jsonl"));
        let turns: Vec<serde_json::Value> = events
            .into_iter()
            .filter(|e| e["event"] == "turn_finished")
            .collect();
        (turns.len() == 4).then_some(turns)
    })
    .await
    .unwrap_or_else(|| panic!("{}", notify.log_text()));
    assert_eq!(turns[0]["outcome"], "success");
    assert_eq!(turns[0]["bot"]["name"], "work");
    assert_eq!(turns[0]["held"], false);
    assert_eq!(turns[3]["reply"], "fake: m3");
    assert!(
        json_lines(&dir.join("events.jsonl"))
            .iter()
            .any(|e| e["event"] == "state_changed" && e["state"] == "busy")
    );
    let env = std::fs::read_to_string(dir.join("env.txt")).unwrap();
    assert!(env.contains("turn_finished|work finished"), "{env}");
    assert!(
        !dir.join("overlap").exists(),
        "two runs of one hook overlapped"
    );
    // The slow hook: one ran, one waited, two were dropped and said so.
    notify.wait_log("the hook's queue is full").await;
    std::fs::write(dir.join("release"), "").unwrap();
    notify.wait_log("hook=slow dropped=2").await;
    poll("the slow hook's two runs", || {
        (json_lines(&dir.join("slow.jsonl")).len() == 2).then_some(())
    })
    .await
    .expect("two runs");
    // The spamming hook was killed at its timeout each time, its stderr cut.
    notify.wait_log("killed after its timeout of 0.5 s").await;
    let log = notify.log_text();
    let line = log
        .lines()
        .find(|l| l.contains("killed after its timeout"))
        .unwrap();
    assert!(line.contains("spam") && line.len() < 4000, "{line}");
    // A hook that left a process holding its stderr open: what it said is still told.
    notify.wait_log("leaving-words").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_requests_at_once_are_one_notification() {
    let fake = FakeSetup::start("").await;
    let server = StandInServer::start(&fake.env.bus.address, &["actions", "body"]).await;
    let bot = fake
        .bot(json!([{"mode": "normal", "ask": {"tool": "Write", "count": 200}}]))
        .await;
    let notify = Notifier::start(&fake.env, "[notify]\nturn_finished = false\n").await;
    let mut finished = bot.receive_turn_finished().await.unwrap();
    let turn = bot.send("go", HashMap::new()).await.unwrap();
    let first = server
        .wait("the 200th request counted", |r| {
            r.notified
                .iter()
                .find(|n| n.body.contains("(199 more requests waiting)"))
                .cloned()
        })
        .await;
    let pending = bot.pending_permissions().await.unwrap();
    assert_eq!(pending.len(), 200);
    for (id, _, _) in &pending {
        bot.respond_permission(id, "allow", HashMap::new())
            .await
            .unwrap();
    }
    assert_eq!(wait_turns(&mut finished, &[turn]).await[0].1, "success");
    server
        .wait("its notification closed", |r| {
            r.closed.contains(&first.id).then_some(())
        })
        .await;
    let record = server
        .wait("the record", |r| {
            Some((r.notified.clone(), r.closed.clone()))
        })
        .await;
    let ids: std::collections::HashSet<u32> = record.0.iter().map(|n| n.id).collect();
    assert_eq!(
        ids.len(),
        1,
        "one notification, replaced in place: {:?}",
        record.0.len()
    );
    eprintln!(
        "200 requests answered one by one: {} Notify calls, {} CloseNotification",
        record.0.len(),
        record.1.len()
    );
    assert!(notify.log_text().contains("botvisord is on the bus"));
}

/// Issue 46 §4: no notification server on the bus is a warning (on stderr, where the user looks)
/// at start, not an INFO line once a notification is due; a server that comes is said, and one
/// that leaves is a warning again: once per change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_notification_server_is_a_warning_at_start_and_when_it_leaves() {
    let fake = FakeSetup::start("").await;
    let notify = Notifier::start(&fake.env, "").await;
    notify.wait_log("no notification server on this bus").await;
    let warnings = |log: &str| {
        log.lines()
            .filter(|l| l.contains("no notification server on this bus"))
            .map(|l| {
                assert!(l.contains("WARN"), "a warning: {l}");
                l.to_owned()
            })
            .collect::<Vec<_>>()
    };
    let first = warnings(&notify.log_text());
    assert_eq!(first.len(), 1, "{first:?}");
    assert!(first[0].contains("has no owner"), "{first:?}");
    let server = StandInServer::start(&fake.env.bus.address, &["actions", "body"]).await;
    notify.wait_log("a notification server took").await;
    server.leave().await;
    notify
        .wait_log("the notification server left the bus")
        .await;
    assert_eq!(
        warnings(&notify.log_text()).len(),
        2,
        "{}",
        notify.log_text()
    );
}
