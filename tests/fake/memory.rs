//! Memory where it matters (issue 31): under memory pressure idle bots are stopped, the least
//! recently used first, never one with work, a prompt, a live descendant or a holder; the next
//! message resumes the conversation; the configuration turns it off.
//!
//! The kernel will not stall on demand, so the daemon watches a FIFO instead of its PSI file
//! (`memory_pressure_file`, the test hook of `process::pressure`): each line written to it is one
//! pressure event.

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use botvisor::dbus::client::BotProxy;
use futures_util::StreamExt;
use serde_json::json;
use support::*;

/// A FIFO in the test's folder, and a daemon that watches it for memory pressure (`extra` is
/// more configuration).
async fn start(extra: &str) -> (FakeSetup, PathBuf) {
    let env = TestEnv::new().await;
    let fifo = env.dir.path().join("pressure");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo(3) with a NUL-terminated path that outlives the call.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
    let config = format!(
        "stop_grace_s = 0.5\nmemory_pressure_file = \"{}\"\n{extra}",
        fifo.display()
    );
    (FakeSetup::start_in(env, &config).await, fifo)
}

/// Waits until the daemon's journal says `text`.
async fn wait_log(fake: &FakeSetup, text: &str) {
    tokio::time::timeout(EVENT_TIMEOUT, async {
        while !fake.daemon.log_text().contains(text) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the journal never said {text:?}"));
}

/// How many times the daemon's journal says `text`.
fn log_count(fake: &FakeSetup, text: &str) -> usize {
    fake.daemon.log_text().matches(text).count()
}

/// One pressure event. The daemon holds the FIFO open while it watches, so the open does not
/// wait; `ENXIO` means nobody watches it.
fn press(fifo: &Path) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(fifo)?;
    f.write_all(b"pressure\n")
}

/// A bot of the fake CLI following `plan`, with one turn answered when `plan` answers.
async fn bot(fake: &FakeSetup, plan: serde_json::Value) -> BotProxy<'static> {
    fake.bot(plan).await
}

/// Waits for the first `system` item with reason `memory_pressure` among `bots` (subscribed
/// before the event is sent) and returns its bot's name and the item.
async fn first_stopped_for_memory(
    streams: &mut [(&'static str, botvisor::dbus::client::ChatItemAddedStream)],
) -> (&'static str, serde_json::Value) {
    tokio::time::timeout(EVENT_TIMEOUT, async {
        loop {
            let nexts = streams.iter_mut().map(|(name, s)| {
                let name = *name;
                Box::pin(async move { (name, s.next().await) })
            });
            let ((name, sig), _, _) = futures_util::future::select_all(nexts).await;
            let sig = sig.expect("the chat stream ended");
            let a = sig.args().unwrap();
            let p: serde_json::Value = serde_json::from_str(&a.payload).unwrap();
            if a.kind == "system" && p["reason"] == "memory_pressure" {
                return (name, p);
            }
        }
    })
    .await
    .expect("a bot is stopped for memory pressure")
}

async fn streams(
    bots: &[(&'static str, &BotProxy<'static>)],
) -> Vec<(&'static str, botvisor::dbus::client::ChatItemAddedStream)> {
    let mut out = Vec::new();
    for (name, bot) in bots {
        out.push((*name, bot.receive_chat_item_added().await.unwrap()));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_least_recently_used_idle_bot_is_stopped_first_and_the_next_message_resumes_it() {
    let (fake, fifo) = start("").await;
    let normal = json!([{"mode": "normal"}]);
    let a = bot(&fake, normal.clone()).await;
    let b = bot(&fake, normal.clone()).await;
    let c = bot(&fake, normal).await;
    // Used in the order a, b, c, then a again: b is the least recently used, then c.
    for bot in [&a, &b, &c, &a] {
        assert_eq!(send_and_wait(bot, "hello").await.outcome, "success");
    }
    let session = b.session_id().await.unwrap();
    wait_log(&fake, "watching memory pressure").await;

    let mut s = streams(&[("a", &a), ("b", &b), ("c", &c)]).await;
    press(&fifo).unwrap();
    let (name, item) = first_stopped_for_memory(&mut s).await;
    assert_eq!(name, "b", "the least recently used first: {item}");
    assert!(
        item["text"].as_str().unwrap().contains("memory pressure"),
        "{item}"
    );
    assert!(item["idle_s"].is_u64(), "{item}");
    wait_state(&b, "stopped").await;
    assert_eq!(b.stop_verdict().await.unwrap(), "clean");
    assert_eq!(a.state().await.unwrap(), "idle", "one bot per event");
    assert_eq!(c.state().await.unwrap(), "idle", "one bot per event");
    wait_log(
        &fake,
        "stopped the least recently used idle bot to give memory back",
    )
    .await;

    press(&fifo).unwrap();
    let (name, _) = first_stopped_for_memory(&mut s).await;
    assert_eq!(name, "c", "then the next least recently used");
    wait_state(&c, "stopped").await;
    assert_eq!(a.state().await.unwrap(), "idle");

    // Not parked: the next message starts it again on the same conversation.
    assert_eq!(send_and_wait(&b, "again").await.outcome, "success");
    assert_eq!(b.session_id().await.unwrap(), session, "resumed");
    let resumed = fake.launches().last().unwrap().join(" ");
    assert!(
        resumed.contains(&format!("--resume {session}")),
        "{resumed}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bot_with_work_a_prompt_a_live_descendant_or_a_holder_is_never_stopped() {
    let (fake, fifo) = start("").await;
    // Each of these was used before `free`, so each would go first if it could.
    let busy = bot(&fake, json!([{"mode": "silent"}])).await;
    busy.send("in flight", Default::default()).await.unwrap();
    busy.send("queued", Default::default()).await.unwrap();
    let asking = bot(
        &fake,
        json!([{"mode": "normal", "ask": {"tool": "Write", "input_bytes": 10}}]),
    )
    .await;
    let mut prompts = asking.receive_permission_requested().await.unwrap();
    asking.send("write it", Default::default()).await.unwrap();
    tokio::time::timeout(EVENT_TIMEOUT, prompts.next())
        .await
        .expect("the prompt opens");
    let working = bot(
        &fake,
        json!([{"mode": "normal", "spawn": ["setsid sleep 300 &"]}]),
    )
    .await;
    assert_eq!(send_and_wait(&working, "hi").await.outcome, "success");
    let held = bot(&fake, json!([{"mode": "normal"}])).await;
    assert_eq!(send_and_wait(&held, "hi").await.outcome, "success");
    held.hold().await.unwrap();
    let free = bot(&fake, json!([{"mode": "normal"}])).await;
    assert_eq!(send_and_wait(&free, "hi").await.outcome, "success");
    wait_log(&fake, "watching memory pressure").await;

    let all = [
        ("busy", &busy),
        ("asking", &asking),
        ("working", &working),
        ("held", &held),
        ("free", &free),
    ];
    let mut s = streams(&all).await;
    press(&fifo).unwrap();
    let (name, _) = first_stopped_for_memory(&mut s).await;
    assert_eq!(name, "free", "the only bot that may be stopped");
    wait_state(&free, "stopped").await;

    // Again: now no bot may be stopped, and the journal says so.
    let before = log_count(&fake, botvisor::supervisor::evict::NOTHING_TO_STOP);
    press(&fifo).unwrap();
    tokio::time::timeout(EVENT_TIMEOUT, async {
        while log_count(&fake, botvisor::supervisor::evict::NOTHING_TO_STOP) == before {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the event is handled");
    for (name, bot) in &all[..4] {
        let state = bot.state().await.unwrap();
        assert!(
            state != "stopped" && state != "stopping",
            "{name} was stopped: {state}"
        );
        let items = chat(bot).await;
        assert!(
            of_kind(&items, "system")
                .iter()
                .all(|p| p["reason"] != "memory_pressure"),
            "{name}: {items:?}"
        );
    }
    // The silent CLI replays neither: one written to it (the turn in flight), one queued.
    assert_eq!(busy.queued_messages().await.unwrap(), 1, "still waiting");
    assert_eq!(held.state().await.unwrap(), "idle");
    // The escaped descendant goes with its bot when the daemon stops.
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_configuration_turns_it_off() {
    let (fake, fifo) = start("stop_idle_on_memory_pressure = false\n").await;
    let bot = bot(&fake, json!([{"mode": "normal"}])).await;
    assert_eq!(send_and_wait(&bot, "hi").await.outcome, "success");
    // Said once the watch would have begun (`daemon::run` watches before it says it serves).
    wait_log(&fake, "botvisord is serving").await;
    // Nobody watches the FIFO: no event can stop a bot.
    let err = press(&fifo).expect_err("botvisord watches memory pressure while it is off");
    assert_eq!(err.raw_os_error(), Some(libc::ENXIO), "{err}");
    assert_eq!(bot.state().await.unwrap(), "idle");
    let log = fake.daemon.log_text();
    assert!(log.contains("stop_idle_on_memory_pressure is off"), "{log}");
    assert!(!log.contains("watching memory pressure"), "{log}");
}
