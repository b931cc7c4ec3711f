//! Issue 31, a warm start: a client's `Hold` on a stopped bot starts its agent before any
//! message, so that the first message is answered at a running agent's pace, and nothing is
//! recorded unless a message comes (design rule 3). What the real CLIs do with such a start is
//! tested on them (`real::claude::warm_start`, `real::codex::warm_start`); here, with the
//! scripted fake, where the daemon decides: which holds start an agent and which never do.

use std::collections::HashMap;
use std::time::Duration;

use futures_util::{FutureExt, StreamExt};
use serde_json::json;
use support::*;
use zbus::Variant;

fn flag<'a>(argv: &'a [String], name: &str) -> Option<&'a str> {
    argv.iter()
        .position(|a| a == name)
        .map(|i| argv[i + 1].as_str())
}

/// Waits until the fake CLI logged its `n`th launch (it logs as it starts, after the daemon
/// shows its `ProcessId`), and returns every launch's arguments.
async fn wait_launches(fake: &FakeSetup, n: usize) -> Vec<Vec<String>> {
    tokio::time::timeout(EVENT_TIMEOUT, async {
        loop {
            let launches = fake.launches();
            if launches.len() >= n {
                return launches;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the fake CLI starts")
}

/// `call` starts no agent: `State` stays `stopped`. Calls on one bot are applied in order
/// (design rule 7) and what they change is published in that order (rule 1), so a `SetModel`
/// made after `call` is a fence: once its `Model` change is heard, whatever `call` started would
/// have shown in `State` before it. No time is waited for something not to happen.
async fn starts_nothing(
    bot: &botvisor::dbus::client::BotProxy<'static>,
    call: impl std::future::Future<Output = zbus::Result<()>>,
) {
    let shown = watching(bot).await;
    let mut states = shown.receive_state_changed().await;
    let models = shown.receive_model_changed().await;
    let model = shown.model().await.unwrap();
    call.await.unwrap();
    let fence = if model == "fence-a" {
        "fence-b"
    } else {
        "fence-a"
    };
    bot.set_model(fence).await.unwrap();
    wait_property(models, model, &fence.to_owned(), "Model").await;
    let mut seen = Vec::new();
    while let Some(Some(change)) = states.next().now_or_never() {
        seen.push(change.get().await.unwrap());
    }
    assert!(
        seen.iter().all(|s| s == "stopped"),
        "the call started the agent: State went {seen:?}"
    );
    assert_eq!(bot.process_id().await.unwrap(), 0);
}

/// What the daemon says `Holders` is now, read past the proxy's cache: the cached value follows
/// `PropertiesChanged`, which may come after the reply of the call that changed it.
async fn holders_now(bot: &botvisor::dbus::client::BotProxy<'static>) -> u32 {
    let props = zbus::fdo::PropertiesProxy::builder(bot.inner().connection())
        .destination(bot.inner().destination().to_owned())
        .path(bot.inner().path().to_owned())
        .cache_properties(zbus::proxy::CacheProperties::No)
        .build()
        .await
        .unwrap();
    let iface = zbus::names::InterfaceName::try_from(bot.inner().interface().to_string()).unwrap();
    u32::try_from(props.get(iface, "Holders").await.unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_starts_an_idle_stopped_agent_on_its_conversation_and_the_next_message_goes_to_it() {
    let fake = FakeSetup::start("idle_timeout_s = 1\n").await;
    let bot = fake
        .bot(json!([{"mode": "normal"}, {"mode": "normal"}]))
        .await;
    assert_eq!(send_and_wait(&bot, "one").await.outcome, "success");
    let session = bot.session_id().await.unwrap();
    wait_state(&bot, "stopped").await;
    assert_eq!(fake.launches().len(), 1);
    let items = chat(&bot).await.len();

    bot.hold().await.unwrap();
    wait_running(&bot).await;
    wait_state(&bot, "idle").await;
    let launches = wait_launches(&fake, 2).await;
    assert_eq!(launches.len(), 2, "{launches:?}");
    assert_eq!(flag(&launches[1], "--resume"), Some(session.as_str()));
    // Nothing was written to the agent, and nothing recorded (rule 3).
    assert_eq!(fake.messages().len(), 1);
    assert_eq!(bot.session_id().await.unwrap(), session);
    assert_eq!(chat(&bot).await.len(), items, "no chat item for a start");

    assert_eq!(send_and_wait(&bot, "two").await.outcome, "success");
    assert_eq!(
        fake.launches().len(),
        2,
        "the message went to the warm agent"
    );
    let texts: Vec<(u64, String)> = fake.messages();
    assert_eq!(texts, [(0, "one".to_owned()), (1, "two".to_owned())]);
    assert_eq!(bot.session_id().await.unwrap(), session);

    // The idle deadline applies again once the lease ends.
    bot.release().await.unwrap();
    wait_state(&bot, "stopped").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warm_start_of_a_new_bot_records_no_conversation_until_a_message() {
    let fake = FakeSetup::start("idle_timeout_s = 1\n").await;
    let bot = fake
        .bot(json!([{"mode": "normal"}, {"mode": "normal"}]))
        .await;
    bot.hold().await.unwrap();
    wait_running(&bot).await;
    wait_state(&bot, "idle").await;
    assert_eq!(wait_launches(&fake, 1).await.len(), 1);
    // Released with no message: stopped for idleness, and no conversation on record (rule 3).
    bot.release().await.unwrap();
    wait_state(&bot, "stopped").await;
    assert_eq!(bot.session_id().await.unwrap(), "");
    assert!(chat(&bot).await.iter().all(|(_, kind, _)| kind != "user"));
    // The first message starts a new conversation.
    assert_eq!(send_and_wait(&bot, "hello").await.outcome, "success");
    let launches = fake.launches();
    assert_eq!(launches.len(), 2, "{launches:?}");
    assert_eq!(flag(&launches[1], "--resume"), None);
    assert_ne!(bot.session_id().await.unwrap(), "");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_starts_nothing_when_asked_not_to_or_when_a_stop_parked_the_bot() {
    let fake = FakeSetup::start("").await;
    let bot = fake
        .bot(json!([{"mode": "normal"}, {"mode": "normal"}]))
        .await;
    // Asked not to.
    starts_nothing(
        &bot,
        bot.hold_with(HashMap::from([("warm_start", Variant::from(false))])),
    )
    .await;
    bot.release().await.unwrap();
    // A wrong option changes nothing: no lease.
    let e = bot
        .hold_with(HashMap::from([("warm", Variant::from(true))]))
        .await
        .unwrap_err();
    assert_eq!(
        error_name(&e),
        "org.botvisor.Botvisor1.Error.InvalidArgument",
        "{e}"
    );
    assert_eq!(holders_now(&bot).await, 0);
    let e = bot
        .hold_with(HashMap::from([("warm_start", Variant::from("yes"))]))
        .await
        .unwrap_err();
    assert_eq!(
        error_name(&e),
        "org.botvisor.Botvisor1.Error.InvalidArgument",
        "{e}"
    );

    // Parked by a client's Stop: the user stopped it; opening its chat does not undo that.
    assert_eq!(send_and_wait(&bot, "one").await.outcome, "success");
    stop_and_wait(&bot).await;
    starts_nothing(&bot, bot.hold()).await;
    assert_eq!(fake.launches().len(), 1);
    // A Send still starts it.
    assert_eq!(send_and_wait(&bot, "two").await.outcome, "success");
    assert_eq!(fake.launches().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_warm_start_off_leaves_hold_a_lease_only() {
    let fake = FakeSetup::start("warm_start = false\n").await;
    let bot = fake.bot(json!([{"mode": "normal"}])).await;
    starts_nothing(&bot, bot.hold()).await;
    assert_eq!(holders_now(&bot).await, 1);
    // Asked for by the lease itself, it starts.
    bot.hold_with(HashMap::from([("warm_start", Variant::from(true))]))
        .await
        .unwrap();
    wait_running(&bot).await;
    assert_eq!(holders_now(&bot).await, 1, "holding twice is one lease");
    assert_eq!(wait_launches(&fake, 1).await.len(), 1);
}
