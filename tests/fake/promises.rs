//! Issue 50: a `Send`'s reply waits for its message to be on record durably, and the `Send`s
//! that come together share that wait (one fsync of the WAL); meanwhile the daemon reads the
//! next calls. What a client sees must not change: every `Send` answered once with its turn
//! id, the messages queued in the order they were sent, each answered once, in that order.

use std::collections::HashMap;

use futures_util::future::join_all;
use serde_json::json;
use support::*;

/// One client sends 30 messages to one bot without waiting for any answer (its calls are on
/// the wire in order): each is answered with its own turn id, queued in the order sent, and
/// each turn ends once, in that order. The answers are sent by tasks of their own: this fails
/// if the work of a `Send` ever left the order of the calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sends_on_one_connection_are_queued_and_answered_in_order() {
    let fake = FakeSetup::start("").await;
    let bot = fake.bot(json!([{"mode": "normal"}])).await;
    let mut finished = bot.receive_turn_finished().await.unwrap();
    let texts: Vec<String> = (0..30).map(|i| format!("message {i}")).collect();
    let turn_ids: Vec<String> = join_all(texts.iter().map(|t| bot.send(t, HashMap::new())))
        .await
        .into_iter()
        .map(|r| r.expect("Send"))
        .collect();
    let done = wait_turns(&mut finished, &turn_ids).await;
    let ended: Vec<&str> = done.iter().map(|(id, _)| id.as_str()).collect();
    let sent: Vec<&str> = turn_ids.iter().map(String::as_str).collect();
    assert_eq!(ended, sent, "turns ended in the order sent");
    assert!(done.iter().all(|(_, o)| o == "success"), "{done:?}");
    let items = chat(&bot).await;
    let users: Vec<(&str, &str)> = of_kind(&items, "user")
        .into_iter()
        .map(|p| (p["turn_id"].as_str().unwrap(), p["text"].as_str().unwrap()))
        .collect();
    let want: Vec<(&str, &str)> = sent
        .iter()
        .copied()
        .zip(texts.iter().map(String::as_str))
        .collect();
    assert_eq!(users, want, "each message queued once, in the order sent");
    let read: Vec<String> = fake.messages().into_iter().map(|(_, t)| t).collect();
    assert_eq!(read, texts, "the agent read each message once, in order");
}

/// Twenty clients, each on a connection of its own, send to twenty bots at once: every one is
/// answered once, each agent reads its message once, and the daemon still answers. The
/// journal's count of fsyncs for them is printed (the store's own test asserts the sharing:
/// `store::tests::promises_made_together_are_kept_by_one_fsync`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sends_from_many_clients_at_once_are_each_answered_once() {
    let fake = FakeSetup::start("").await;
    let mut bots = Vec::new();
    for _ in 0..20 {
        bots.push(fake.bot(json!([{"mode": "normal"}])).await);
    }
    let mut clients = Vec::new();
    for bot in &bots {
        let conn = fake.env.bus.connect().await;
        clients.push(
            botvisor::dbus::client::BotProxy::builder(&conn)
                .path(bot.inner().path().to_owned())
                .build()
                .await
                .unwrap(),
        );
    }
    let mut streams = Vec::new();
    for bot in &bots {
        streams.push(bot.receive_turn_finished().await.unwrap());
    }
    let before = fsyncs_logged(&fake);
    let answers = join_all(
        clients
            .iter()
            .enumerate()
            .map(|(i, c)| async move { c.send(&format!("to bot {i}"), HashMap::new()).await }),
    )
    .await;
    for ((answer, stream), bot) in answers.into_iter().zip(&mut streams).zip(&bots) {
        let turn = answer.expect("Send");
        let done = wait_turns(stream, std::slice::from_ref(&turn)).await;
        assert_eq!(done[0].1, "success");
        let users = chat(bot).await;
        assert_eq!(of_kind(&users, "user").len(), 1, "queued once");
    }
    let mut read: Vec<String> = fake.messages().into_iter().map(|(_, t)| t).collect();
    read.sort();
    let mut want: Vec<String> = (0..20).map(|i| format!("to bot {i}")).collect();
    want.sort();
    assert_eq!(read, want, "each agent read its message once");
    println!(
        "20 sends at once: {} fsyncs of the WAL for their promises",
        fsyncs_logged(&fake) - before
    );
    let bots_listed = fake
        .env
        .manager()
        .await
        .list_bots()
        .await
        .expect("still answering");
    assert_eq!(bots_listed.len(), 20);
}

fn fsyncs_logged(fake: &FakeSetup) -> usize {
    fake.daemon
        .log_text()
        .lines()
        .filter(|l| l.contains("synced the WAL for promises"))
        .count()
}

/// A `Send`'s reply reaches its client before anything of its turn: one connection pipelines
/// sends to ten bots that answer at once, and reads every message it receives in the order the
/// bus delivered them; each `TurnFinished` names a turn id a reply gave before it. (A hostile
/// run saw one `TurnFinished` come first, once in thousands, when the reply was sent by a task
/// of its own and the agent took the message meanwhile; the actor now takes it once the reply
/// is sent.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_is_answered_before_its_turn_is_heard_of() {
    use futures_util::StreamExt;
    let fake = FakeSetup::start("").await;
    let mut paths = Vec::new();
    for _ in 0..10 {
        paths.push(
            fake.bot(json!([{"mode": "normal"}]))
                .await
                .inner()
                .path()
                .to_owned(),
        );
    }
    let conn = fake.env.bus.connect().await;
    let rule = zbus::MatchRule::builder()
        .msg_type(zbus::message::Type::Signal)
        .member("TurnFinished")
        .build()
        .unwrap();
    zbus::fdo::DBusProxy::new(&conn)
        .await
        .unwrap()
        .add_match_rule(rule)
        .await
        .unwrap();
    let mut all = zbus::MessageStream::from(&conn);
    let mut sent = Vec::new();
    for round in 0..5 {
        for path in &paths {
            let call = zbus::message::Message::method_call(path.clone(), "Send")
                .destination(botvisor::dbus::BUS_NAME)
                .interface(botvisor::dbus::BOT_INTERFACE)
                .build(&(
                    format!("round {round}"),
                    HashMap::<&str, zbus::Variant<'_>>::new(),
                ))
                .unwrap();
            sent.push(call.primary_header().serial_num());
            conn.send(&call).await.unwrap();
        }
    }
    let (mut answered, mut finished) = (std::collections::HashSet::new(), 0);
    bounded("every reply and every turn's end", async {
        while finished < sent.len() {
            let m = all.next().await.unwrap().unwrap();
            let hdr = m.header();
            match m.message_type() {
                zbus::message::Type::MethodReturn
                    if hdr.reply_serial().is_some_and(|s| sent.contains(&s)) =>
                {
                    answered.insert(m.body().deserialize::<String>().unwrap());
                }
                zbus::message::Type::Error => panic!("an error: {m:?}"),
                zbus::message::Type::Signal
                    if hdr.member().is_some_and(|n| n == "TurnFinished") =>
                {
                    let (turn, _): (String, String) = m.body().deserialize().unwrap();
                    assert!(
                        answered.contains(&turn),
                        "TurnFinished of {turn} came before the Send's reply that names it"
                    );
                    finished += 1;
                }
                _ => {}
            }
        }
    })
    .await;
    assert_eq!(answered.len(), sent.len());
}

/// A bot stopped with hundreds of messages waiting does not take its own messages back as
/// another process's when it is sent the next one (a hostile run found the message in flight at
/// the stop imported into the chat again, with its answer: the bot's own messages were looked
/// for among its newest 200, which the waiting ones filled).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_with_many_messages_waiting_imports_none_of_its_own() {
    let fake = FakeSetup::start("").await;
    let bot = fake
        .bot(json!([{"mode": "normal", "transcript_lines": true, "reply_after_s": 0.05}]))
        .await;
    let mut finished = bot.receive_turn_finished().await.unwrap();
    let texts: Vec<String> = (0..300).map(|i| format!("queued message {i}")).collect();
    let turn_ids: Vec<String> = join_all(texts.iter().map(|t| bot.send(t, HashMap::new())))
        .await
        .into_iter()
        .map(|r| r.expect("Send"))
        .collect();
    wait_turns(&mut finished, &turn_ids[..3]).await;
    stop_and_wait(&bot).await;
    let resumed = bot.send("after the stop", HashMap::new()).await.unwrap();
    wait_turns(&mut finished, &turn_ids[3..4]).await;
    let items = chat(&bot).await;
    let imported: Vec<&serde_json::Value> = items
        .iter()
        .filter(|(_, _, p)| p["imported"] == true || p["reason"] == "imported_elsewhere")
        .map(|(_, _, p)| p)
        .collect();
    assert!(
        imported.is_empty(),
        "its own messages imported: {imported:?}"
    );
    let users = of_kind(&items, "user");
    assert_eq!(users.len(), 301, "each message once");
    drop(resumed);
}
