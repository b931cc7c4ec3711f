//! Big chats never take the daemon off the bus (issue 11, design rule 15): on a private bus
//! with the stock session-bus limits, a history far over D-Bus's 64 MiB array limit is paged,
//! big items are served as previews and read whole with `ReadChatItem`/`OpenChatItem`, signals
//! and properties stay bounded, `Send` has a maximum, a history an older botvisor wrote is
//! served the same way, and a lost bus connection is explained in the journal.

use std::collections::HashMap;
use std::io::Read;
use std::time::Duration;

use futures_util::StreamExt;
use serde_json::{Value, json};

use botvisor::dbus::BUS_NAME;
use botvisor::dbus::client::{BotProxy, read_whole_item};
use botvisor::preview::is_preview;
use botvisor::sizes::{MAX_ITEM_BYTES, MAX_PAGE_BYTES, MAX_PROPERTY_BYTES};
use support::*;

const MIB: usize = 1 << 20;

/// Every item of the chat, paged with `GetChat(last seq, 0)` until an empty page: the pages
/// and the items.
async fn all_pages(bot: &BotProxy<'_>) -> (usize, Vec<(u64, String, String, String)>) {
    let mut items: Vec<(u64, String, String, String)> = Vec::new();
    let mut pages = 0;
    loop {
        let after = items.last().map_or(0, |i| i.0);
        let page = bot.get_chat(after, 0).await.expect("GetChat answers");
        if page.is_empty() {
            return (pages, items);
        }
        pages += 1;
        let bytes: usize = page
            .iter()
            .map(|i| 32 + i.1.len() + i.2.len() + i.3.len())
            .sum();
        assert!(
            bytes <= MAX_PAGE_BYTES,
            "a page of {bytes} bytes is over the budget"
        );
        items.extend(page);
    }
}

/// The daemon still owns its name and answers.
async fn assert_on_the_bus(env: &TestEnv, bot: &BotProxy<'_>) {
    let dbus = zbus::fdo::DBusProxy::new(&env.conn).await.unwrap();
    assert!(
        dbus.name_has_owner(BUS_NAME.try_into().unwrap())
            .await
            .unwrap(),
        "botvisord left the bus"
    );
    bot.inner()
        .connection()
        .call_method(
            Some(BUS_NAME),
            bot.inner().path(),
            Some("org.freedesktop.DBus.Peer"),
            "Ping",
            &(),
        )
        .await
        .expect("botvisord answers");
}

/// The reply of the fake CLI's `echo_bytes` to `text` (ASCII).
fn echo(text: &str, n: usize) -> String {
    text.repeat(n / text.len() + 1)[..n].to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_history_over_64_mib_is_paged_and_every_item_reads_back_whole() {
    let setup = FakeSetup::start("").await;
    let bot = setup
        .bot(json!([{"mode": "normal", "echo_bytes": 12 * MIB}]))
        .await;
    // Six turns of 12 MiB: 72 MiB of history, over the 64 MiB a D-Bus array may hold.
    let mut expected = HashMap::new();
    for i in 0..6 {
        let text = format!("turn {i} says hello. ");
        let seen = send_and_wait(&bot, &text).await;
        assert_eq!(seen.outcome, "success");
        let (seq, _, signalled) = seen
            .items
            .iter()
            .find(|(_, k, _)| k == "assistant")
            .expect("the 12 MiB reply was signalled");
        assert!(is_preview(signalled), "ChatItemAdded carried {signalled}");
        // The item of the turn, its turn id first (docs/dbus-api.md, GetChat).
        let whole = format!(
            "{{\"turn_id\":{},{}",
            json!(seen.turn_id),
            &json!({"text": echo(&text, 12 * MIB)}).to_string()[1..]
        );
        assert_eq!(signalled["size"], whole.len() as u64);
        assert_eq!(signalled["preview_of"], "text");
        expected.insert(*seq, whole);
    }
    assert!(expected.values().map(String::len).sum::<usize>() > 64 * MIB);

    // The reported call: GetChat(0, 0) on the whole history.
    let first = bot.get_chat(0, 0).await.expect("GetChat(0, 0) answers");
    assert!(!first.is_empty());
    assert_on_the_bus(&setup.env, &bot).await;

    let (pages, items) = all_pages(&bot).await;
    assert_eq!(
        items.len(),
        6 * 4,
        "user, assistant, result and turn_finished per turn"
    );
    assert!(
        items.windows(2).all(|w| w[1].0 == w[0].0 + 1),
        "no item skipped"
    );
    assert!(pages >= 1);
    for (seq, kind, _, payload) in &items {
        let served: Value = serde_json::from_str(payload).unwrap();
        let whole = read_whole_item(&bot, *seq).await.expect("ReadChatItem");
        match expected.get(seq) {
            Some(want) => {
                assert!(is_preview(&served), "item {seq} ({kind}) served whole");
                assert_eq!(whole.len(), want.len());
                assert!(whole == *want, "item {seq} read back differs");
            }
            None => assert_eq!(whole, *payload, "a small item reads back as served"),
        }
    }

    // `botvisorctl chat` pages to the end and prints every item whole.
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_botvisorctl"))
        .env_clear()
        .env("DBUS_SESSION_BUS_ADDRESS", &setup.env.bus.address)
        .args(["chat", "--json", &bot.id().await.unwrap()])
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed: Vec<Value> = out
        .stdout
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect();
    assert_eq!(
        printed.len(),
        items.len(),
        "{:?}",
        printed
            .iter()
            .map(|l| (
                l["seq"].clone(),
                l["kind"].clone(),
                l["payload"]["reason"].clone()
            ))
            .collect::<Vec<_>>()
    );
    for line in &printed {
        let seq = line["seq"].as_u64().unwrap();
        if let Some(want) = expected.get(&seq) {
            let want: Value = serde_json::from_str(want).unwrap();
            assert!(
                line["payload"] == want,
                "botvisorctl chat printed item {seq} differently"
            );
        }
    }

    // The same item through a file descriptor.
    let (&seq, want) = expected.iter().next().unwrap();
    let fd = bot.open_chat_item(seq, HashMap::new()).await.unwrap();
    let mut file = std::fs::File::from(std::os::fd::OwnedFd::from(fd));
    let mut got = String::new();
    file.read_to_string(&mut got).unwrap();
    assert!(got == *want, "OpenChatItem's file differs");
    use std::io::Write;
    assert!(file.write_all(b"x").is_err(), "the file is sealed");

    let err = bot
        .read_chat_item(999, 0, 0, HashMap::new())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("NotFound"), "{err}");
    assert_on_the_bus(&setup.env, &bot).await;
    assert!(!setup.daemon.log_text().contains("bus connection"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_send_over_the_maximum_is_refused_and_changes_nothing() {
    let setup = FakeSetup::start("").await;
    let bot = setup.bot(json!([{"mode": "normal"}])).await;
    let huge = "x".repeat(100 * MIB);
    let err = bot.send(&huge, HashMap::new()).await.unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("org.botvisor.Botvisor1.Error.InvalidArgument") && text.contains("1 MiB"),
        "{text}"
    );
    assert_on_the_bus(&setup.env, &bot).await;
    assert!(
        bot.get_chat(0, 0).await.unwrap().is_empty(),
        "nothing stored"
    );
    assert_eq!(bot.queued_messages().await.unwrap(), 0);
    assert!(setup.launches().is_empty(), "no agent started");

    // The largest message taken: stored once, delivered whole, read back whole.
    let most = "y".repeat(botvisor::sizes::MAX_SEND_BYTES);
    let seen = send_and_wait(&bot, &most).await;
    assert_eq!(seen.outcome, "success");
    assert_eq!(setup.messages(), [(0, most.clone())]);
    let (seq, _, user) = seen.items.iter().find(|(_, k, _)| k == "user").unwrap();
    assert!(is_preview(user), "a 1 MiB message's item is over 1 MiB");
    assert_eq!(user["turn_id"], seen.turn_id.as_str());
    let whole: Value = serde_json::from_str(&read_whole_item(&bot, *seq).await.unwrap()).unwrap();
    assert_eq!(whole["text"], most.as_str());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_history_an_older_botvisor_wrote_is_served_the_same_way() {
    let env = TestEnv::new().await;
    let cfg = env.daemon_config(Some(fake_cli()));
    let state = env.dir.path().join("fake-state");
    let bot_id = "0123456789abcdef0123456789abcdef";
    let queued_text = echo("queued before the upgrade; ", 2 * MIB);
    let mut written = Vec::new();
    {
        // Schema version 3 (the last before issue 11), written as it wrote things: every
        // payload whole in chat_items, every message also in turns.text.
        let conn = botvisor::store::Connection::open(&cfg.database).unwrap();
        for sql in &botvisor::store::schema::MIGRATIONS[..3] {
            conn.execute_batch(sql).unwrap();
        }
        conn.pragma_update(None, "user_version", 3).unwrap();
        let record = botvisor::store::BotRecord {
            env: fake_env(&env.home, &state, json!([{"mode": "normal"}]), &env.marker)
                .into_iter()
                .collect(),
            ..botvisor::store::BotRecord::new(bot_id, "old", env.work.to_str().unwrap(), "claude")
        };
        // The row as version 3 wrote it (no column a later migration added).
        conn.execute(
            "INSERT INTO bots (id, name, cwd, runtime, model, permission_mode, env,
                               idle_timeout_s, session_id, last_error, created_at)
             VALUES (?1, ?2, ?3, ?4, '', '', ?5, NULL, NULL, '', ?6)",
            [
                record.id.as_str(),
                record.name.as_str(),
                record.cwd.as_str(),
                record.runtime.as_str(),
                serde_json::to_string(&record.env).unwrap().as_str(),
                record.created_at.as_str(),
            ],
        )
        .unwrap();
        let mut seq = 0;
        let mut add = |kind: &str, turn: &str, payload: String| {
            seq += 1;
            conn.execute(
                "INSERT INTO chat_items (bot_id, seq, kind, time, turn_id, payload)
                 VALUES (?1, ?2, ?3, '2026-01-01T00:00:00.000Z', NULLIF(?4, ''), ?5)",
                [
                    bot_id,
                    seq.to_string().as_str(),
                    kind,
                    turn,
                    payload.as_str(),
                ],
            )
            .unwrap();
            written.push((seq as u64, payload));
        };
        for i in 0..6 {
            let turn = format!("old-{i}");
            let text = format!("old turn {i}");
            add(
                "user",
                &turn,
                json!({"text": text, "turn_id": turn}).to_string(),
            );
            add(
                "assistant",
                &turn,
                json!({"text": echo(&format!("old reply {i} "), 12 * MIB)}).to_string(),
            );
            conn.execute(
                "INSERT INTO turns (id, bot_id, text, status, outcome, created_at)
                 VALUES (?1, ?2, ?3, 'finished', 'success', '2026-01-01T00:00:00.000Z')",
                [turn.as_str(), bot_id, text.as_str()],
            )
            .unwrap();
        }
        add(
            "user",
            "old-q",
            json!({"text": queued_text, "turn_id": "old-q"}).to_string(),
        );
        conn.execute(
            "INSERT INTO turns (id, bot_id, text, status, created_at)
             VALUES ('old-q', ?1, ?2, 'queued', '2026-01-01T00:00:00.000Z')",
            [bot_id, queued_text.as_str()],
        )
        .unwrap();
    }
    let mut finished = {
        // Subscribed before the daemon starts: the queued message is delivered at once.
        let rule = zbus::MatchRule::builder()
            .msg_type(zbus::message::Type::Signal)
            .interface(botvisor::dbus::BOT_INTERFACE)
            .member("TurnFinished")
            .build()
            .unwrap();
        zbus::MessageStream::for_match_rule(rule, &env.conn, None)
            .await
            .unwrap()
    };
    let daemon = Daemon::start(&cfg, &env.conn).await;
    let path = env.manager().await.list_bots().await.unwrap().remove(0);
    let bot = env.bot(&path).await;

    let first = bot.get_chat(0, 0).await.expect("GetChat(0, 0) answers");
    assert!(!first.is_empty());
    let (_, items) = all_pages(&bot).await;
    assert!(items.len() >= written.len());
    for (seq, payload) in &written {
        let served = &items[*seq as usize - 1];
        assert_eq!(served.0, *seq);
        if payload.len() > MAX_ITEM_BYTES {
            let p: Value = serde_json::from_str(&served.3).unwrap();
            assert!(is_preview(&p), "old item {seq} served whole");
        } else {
            assert_eq!(served.3, *payload);
        }
        let whole = read_whole_item(&bot, *seq).await.unwrap();
        assert!(whole == *payload, "old item {seq} reads back differently");
    }
    assert_on_the_bus(&env, &bot).await;

    // The message queued before the upgrade, now stored once, goes to the agent whole.
    tokio::time::timeout(EVENT_TIMEOUT, async {
        while let Some(m) = finished.next().await {
            let (turn, outcome): (String, String) = m.unwrap().body().deserialize().unwrap();
            if turn == "old-q" {
                assert_eq!(outcome, "success");
                return;
            }
        }
    })
    .await
    .expect("the queued turn finished");
    let read: Vec<String> = json_lines(&state.join("messages.jsonl"))
        .into_iter()
        .map(|m| m["text"].as_str().unwrap().to_owned())
        .collect();
    assert!(
        read.len() == 1 && read[0] == queued_text,
        "the agent read {:?}",
        read.iter().map(String::len).collect::<Vec<_>>()
    );
    drop(daemon);
}

#[tokio::test(flavor = "multi_thread")]
async fn permission_inputs_streamed_text_and_properties_stay_bounded() {
    let setup = FakeSetup::start("").await;
    let bot = setup
        .bot(json!([{
            "mode": "normal",
            "echo_bytes": 3 * MIB,
            "ask": {"tool": "Write", "input_bytes": 3 * MIB},
            "stream_then_wait": true,
        }]))
        .await;
    let bot_uncached = setup
        .env
        .bot_uncached(&bot.inner().path().clone().into())
        .await;
    let mut prompts = bot.receive_permission_requested().await.unwrap();
    let mut pending_changes = bot.receive_pending_permissions_changed().await;
    let mut deltas = bot.receive_text_delta().await.unwrap();
    let mut finished = bot.receive_turn_finished().await.unwrap();
    let text = "stream this. ";
    let turn = bot.send(text, HashMap::new()).await.unwrap();

    // The 3 MiB tool input: a preview pointing at the item that holds it whole.
    let sig = tokio::time::timeout(EVENT_TIMEOUT, prompts.next())
        .await
        .expect("PermissionRequested")
        .unwrap();
    let a = sig.args().unwrap();
    let input: Value = serde_json::from_str(&a.input_json).unwrap();
    assert!(
        is_preview(&input),
        "PermissionRequested carried {} bytes",
        a.input_json.len()
    );
    assert_eq!(input["file_path"], "/dev/null");
    assert_eq!(input["preview_of"], "content");
    let seq = input["seq"]
        .as_u64()
        .expect("seq of the item holding it whole");
    let item: Value = serde_json::from_str(&read_whole_item(&bot, seq).await.unwrap()).unwrap();
    assert_eq!(item["request_id"], a.request_id.as_str());
    assert_eq!(item["input"]["content"].as_str().unwrap().len(), 3 * MIB);
    let signalled = tokio::time::timeout(EVENT_TIMEOUT, async {
        loop {
            let change = pending_changes.next().await.unwrap();
            let v = change.get().await.unwrap();
            if !v.is_empty() {
                return v;
            }
        }
    })
    .await
    .expect("PendingPermissions changed");
    let pending = bot_uncached.pending_permissions().await.unwrap();
    assert_eq!(pending, signalled, "the property and its change agree");
    assert_eq!(pending.len(), 1);
    assert!(pending[0].2.len() <= botvisor::sizes::MAX_PREVIEW_OBJECT_BYTES);
    assert_eq!(
        serde_json::from_str::<Value>(&pending[0].2).unwrap()["seq"],
        seq
    );
    // Answered without an updated input, the agent gets its own whole input back.
    bot.respond_permission(&a.request_id, "allow", HashMap::new())
        .await
        .unwrap();

    // 3 MiB streamed in one delta: signals of at most 1 MiB that add up to it.
    let want = echo(text, 3 * MIB);
    let mut streamed = String::new();
    tokio::time::timeout(EVENT_TIMEOUT, async {
        while streamed.len() < want.len() {
            let sig = deltas.next().await.unwrap();
            let a = sig.args().unwrap();
            assert!(
                a.text.len() <= MAX_ITEM_BYTES,
                "a TextDelta of {}",
                a.text.len()
            );
            streamed.push_str(&a.text);
        }
    })
    .await
    .expect("the streamed text");
    assert!(streamed == want, "the deltas do not add up to the text");
    let partial = bot_uncached.partial_text().await.unwrap();
    assert!(!partial.is_empty() && partial.len() <= MAX_PROPERTY_BYTES);
    assert!(
        want.ends_with(&partial),
        "PartialText is the end of the text"
    );
    // All of it in one reply, for every bot.
    let objects = zbus::fdo::ObjectManagerProxy::builder(&setup.env.conn)
        .destination(BUS_NAME)
        .path(botvisor::dbus::ROOT_PATH)
        .build()
        .await
        .unwrap()
        .get_managed_objects()
        .await
        .expect("GetManagedObjects answers");
    assert_eq!(objects.len(), 1);

    std::fs::write(setup.state.join("release"), "").unwrap();
    tokio::time::timeout(EVENT_TIMEOUT, async {
        while let Some(sig) = finished.next().await {
            if sig.args().unwrap().turn_id == turn {
                return;
            }
        }
    })
    .await
    .expect("the turn finished");
    let answers = json_lines(&setup.state.join("answers.jsonl"));
    assert_eq!(answers, [json!({"behavior": "allow", "input_equal": true})]);
    assert_on_the_bus(&setup.env, &bot).await;
}

/// A bus that still runs but drops botvisord (here: a message over a tightened
/// `max_message_size`) is named in the journal, and botvisord exits with an error after
/// stopping its bots, so the service manager restarts it.
#[tokio::test(flavor = "multi_thread")]
async fn the_journal_says_why_the_bus_dropped_the_daemon() {
    let env = TestEnv::new_limited(&[("max_message_size", 200_000)]).await;
    let mut cfg = env.daemon_config(Some(fake_cli()));
    cfg.config = Some(write_config(env.dir.path(), ""));
    let mut daemon = Daemon::start(&cfg, &env.conn).await;
    let state = env.dir.path().join("fake-state");
    let bot = create_bot_in(
        &env,
        &fake_env(
            &env.home,
            &state,
            json!([{"mode": "normal", "echo_bytes": 300_000}]),
            &env.marker,
        ),
    )
    .await;
    // The reply's ChatItemAdded (300 kB, within botvisor's bounds) is over this bus's limit.
    bot.send("too big for this bus ", HashMap::new())
        .await
        .unwrap();
    let status = tokio::time::timeout(Duration::from_secs(60), daemon.wait())
        .await
        .expect("botvisord exits once the bus dropped it");
    assert!(
        !status.success(),
        "a bus that still runs dropped it: {status}"
    );
    let log = daemon.log_text();
    assert!(
        log.contains("the bus dropped botvisord's connection while the bus still runs"),
        "{log}"
    );
    assert!(log.contains("botvisord stopped"), "{log}");
}

/// When the session bus goes away, the bots are stopped and botvisord exits normally, saying so.
#[tokio::test(flavor = "multi_thread")]
async fn the_journal_says_when_the_session_bus_went_away() {
    let mut env = TestEnv::new().await;
    let cfg = env.daemon_config(Some(fake_cli()));
    let mut daemon = Daemon::start(&cfg, &env.conn).await;
    env.bus.stop();
    let status = tokio::time::timeout(Duration::from_secs(60), daemon.wait())
        .await
        .expect("botvisord exits once the bus is gone");
    assert!(status.success(), "{status}");
    let log = daemon.log_text();
    assert!(
        log.contains("the session bus went away (the session ended)"),
        "{log}"
    );
}

/// Issue 23: a client whose connection cannot take file descriptors (dbus-next without its
/// native module, a TCP transport) gets `OpenChatItem` answered with a named error that points
/// to `ReadChatItem`, not a call that waits for ever; the same connection goes on working, and a
/// client that can take descriptors still gets one.
#[tokio::test(flavor = "multi_thread")]
async fn open_chat_item_to_a_client_without_descriptors_is_a_named_error() {
    let setup = FakeSetup::start("").await;
    let bot = setup.bot(json!([{"mode": "normal"}])).await;
    send_and_wait(&bot, "hello").await;
    let seq = bot.get_chat(0, 1).await.unwrap()[0].0;

    let conn = setup.env.bus.connect_without_fds().await;
    let plain = BotProxy::builder(&conn)
        .path(bot.inner().path().to_owned())
        .cache_properties(zbus::proxy::CacheProperties::No)
        .build()
        .await
        .unwrap();
    for _ in 0..3 {
        let err = bounded("OpenChatItem", plain.open_chat_item(seq, HashMap::new()))
            .await
            .expect_err("no descriptor can reach this client");
        let text = err.to_string();
        assert!(
            text.contains("org.botvisor.Botvisor1.Error.NotSupported")
                && text.contains("ReadChatItem"),
            "{text}"
        );
        // The connection still works, and ReadChatItem serves the item.
        let (data, size) = bounded(
            "ReadChatItem",
            plain.read_chat_item(seq, 0, 0, HashMap::new()),
        )
        .await
        .unwrap();
        assert_eq!(data.len() as u64, size);
    }
    let fd = bounded("OpenChatItem", bot.open_chat_item(seq, HashMap::new()))
        .await
        .expect("a client that takes descriptors gets one");
    let mut got = String::new();
    std::fs::File::from(std::os::fd::OwnedFd::from(fd))
        .read_to_string(&mut got)
        .unwrap();
    assert!(!got.is_empty());
    assert_on_the_bus(&setup.env, &bot).await;
}

/// Issue 23, from a fresh user's tries: a flood of `OpenChatItem` calls from a connection that
/// cannot take descriptors gets every call answered, and leaves another such client's call
/// answered too (12,000 calls in a row left 6,543 unanswered: the daemon remembered 4,096 answers
/// waiting for the bus's refusal, and the flood pushed the others out).
#[tokio::test(flavor = "multi_thread")]
async fn a_flood_of_open_chat_item_calls_without_descriptors_is_answered_call_by_call() {
    const CALLS: usize = 12_000;
    let setup = FakeSetup::start("").await;
    let bot = setup.bot(json!([{"mode": "normal"}])).await;
    send_and_wait(&bot, "hello").await;
    let seq = bot.get_chat(0, 1).await.unwrap()[0].0;
    let path = bot.inner().path().to_owned();
    let proxy = |conn: zbus::Connection| {
        let path = path.clone();
        async move {
            BotProxy::builder(&conn)
                .path(path)
                .cache_properties(zbus::proxy::CacheProperties::No)
                .build()
                .await
                .unwrap()
        }
    };
    let flooder = proxy(setup.env.bus.connect_without_fds().await).await;
    let victim = proxy(setup.env.bus.connect_without_fds().await).await;
    let started = std::time::Instant::now();
    let flood = futures_util::future::join_all(
        (0..CALLS).map(|_| flooder.open_chat_item(seq, HashMap::new())),
    );
    let late_call = async {
        tokio::time::sleep(Duration::from_millis(300)).await; // in the middle of the flood
        victim.open_chat_item(seq, HashMap::new()).await
    };
    let (answers, victims) = bounded("the flood's answers", async {
        tokio::join!(flood, late_call)
    })
    .await;
    let named = |r: &zbus::Result<zbus::OwnedFd>| {
        r.as_ref()
            .err()
            .is_some_and(|e| e.to_string().contains("Error.NotSupported"))
    };
    let other: Vec<String> = answers
        .iter()
        .filter(|r| !named(r))
        .take(3)
        .map(|r| format!("{:?}", r.as_ref().err()))
        .collect();
    println!(
        "{CALLS} OpenChatItem calls without descriptors answered in {:.1?}",
        started.elapsed()
    );
    assert!(other.is_empty(), "not NotSupported: {other:?}");
    assert!(named(&victims), "{:?}", victims.err());
    assert_on_the_bus(&setup.env, &bot).await;
}
