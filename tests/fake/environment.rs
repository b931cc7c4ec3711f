//! Issue 46 §1: `SetEnvironment` changes one variable when asked to (`merge`, `unset`), and the
//! agent takes a new environment when `botvisorctl set` says it does: an idle agent at once, a
//! busy one once its turn ends, an interrupt included, with the waiting messages carried on.

use futures_util::StreamExt;
use serde_json::json;
use std::collections::HashMap;
use zbus::Variant;

use support::*;

/// Waits until the bot's agent is another process than `old` (0: any), and returns its pid.
async fn new_agent(bot: &botvisor::dbus::client::BotProxy<'_>, old: u32) -> u32 {
    let shown = watching(bot).await;
    let mut changes = shown.receive_process_id_changed().await;
    let now = shown.process_id().await.unwrap();
    if now != 0 && now != old {
        return now;
    }
    bounded("a new agent", async {
        while let Some(c) = changes.next().await {
            let pid = c.get().await.unwrap();
            if pid != 0 && pid != old {
                return pid;
            }
        }
        panic!("the ProcessId stream ended")
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_variable_is_set_or_unset_and_the_rest_kept() {
    let fake = FakeSetup::start("").await;
    let mut env_map = fake_env(
        &fake.env.home,
        &fake.state,
        json!([{"mode": "normal"}]),
        &fake.env.marker,
    );
    env_map.insert("KEEP".into(), "kept".into());
    env_map.insert("GONE".into(), "soon".into());
    env_map.insert("TOKEN".into(), "old".into());
    let bot = create_bot_in(&fake.env, &env_map).await;
    assert_eq!(send_and_wait(&bot, "one").await.outcome, "success");
    let first = bot.process_id().await.unwrap();
    let options = HashMap::from([
        ("merge", Variant::from(true)),
        ("unset", Variant::from(vec!["GONE"])),
    ]);
    bot.set_environment(HashMap::from([("TOKEN", "new")]), options)
        .await
        .unwrap();
    // An idle agent takes it at once: restarted on its conversation.
    let agent = new_agent(&bot, first).await;
    let seen = environ(agent).await;
    assert_eq!(seen.get("TOKEN").map(String::as_str), Some("new"));
    assert_eq!(
        seen.get("KEEP").map(String::as_str),
        Some("kept"),
        "the rest kept"
    );
    assert!(seen.contains_key("FAKE_CLAUDE_PLAN"), "the rest kept");
    assert!(!seen.contains_key("GONE"), "unset");
    // `unset` with `merge` false is refused by name and changes nothing.
    let options = HashMap::from([
        ("merge", Variant::from(false)),
        ("unset", Variant::from(vec!["KEEP"])),
    ]);
    let err = bot
        .set_environment(HashMap::new(), options)
        .await
        .unwrap_err();
    assert_eq!(
        error_name(&err),
        "org.botvisor.Botvisor1.Error.InvalidArgument"
    );
    assert_eq!(send_and_wait(&bot, "two").await.outcome, "success");
    assert_eq!(bot.process_id().await.unwrap(), agent, "nothing changed");
    // A variable that is not set, unset: nothing changes, and the idle agent runs on (a hostile
    // run saw it restarted for nothing). The next message goes to the same agent.
    let options = HashMap::from([("unset", Variant::from(vec!["NOPE_NOT_SET"]))]);
    bot.set_environment(HashMap::new(), options).await.unwrap();
    assert_eq!(send_and_wait(&bot, "three").await.outcome, "success");
    assert_eq!(bot.process_id().await.unwrap(), agent, "not restarted");
    assert_eq!(fake.launches().len(), 2, "{:?}", fake.launches());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_agent_takes_a_new_environment_once_its_turn_is_interrupted() {
    let fake = FakeSetup::start("").await;
    let plan = json!([{"mode": "normal", "run_until_interrupt": ["exec sleep 300"],
                       "tools_after_s": 0.1}, {"mode": "normal"}]);
    let bot = fake.bot(plan).await;
    let mut finished = bot.receive_turn_finished().await.unwrap();
    let busy = bot.send("a long task", HashMap::new()).await.unwrap();
    wait_state(&bot, "busy").await;
    let agent = bot.process_id().await.unwrap();
    let waiting = bot.send("and then this", HashMap::new()).await.unwrap();
    let options = HashMap::from([("merge", Variant::from(true))]);
    bot.set_environment(HashMap::from([("ROTATED", "1")]), options)
        .await
        .unwrap();
    // The turn in flight is not cut for it: once the actor took a later command (it takes
    // them in order), the agent is the same and still busy.
    let changes = watching(&bot).await.receive_budget_usd_changed().await;
    bot.set_budget(1000.0).await.unwrap();
    wait_property(
        changes,
        bot.budget_usd().await.unwrap(),
        &1000.0,
        "BudgetUSD",
    )
    .await;
    assert_eq!(bot.process_id().await.unwrap(), agent);
    assert_eq!(bot.state().await.unwrap(), "busy");
    assert!(bot.interrupt().await.unwrap());
    let outcomes = wait_turns(&mut finished, &[busy.clone(), waiting.clone()]).await;
    assert_eq!(
        outcomes,
        [
            (busy, "interrupted".to_owned()),
            (waiting, "success".to_owned())
        ],
        "the waiting message is carried on"
    );
    let now = bot.process_id().await.unwrap();
    assert_ne!(now, agent, "the agent restarted once its turn ended");
    assert_eq!(
        environ(now).await.get("ROTATED").map(String::as_str),
        Some("1"),
        "with the new environment"
    );
    let launches = fake.launches();
    assert_eq!(launches.len(), 2, "{launches:?}");
    assert!(
        launches[1].iter().any(|a| a == "--resume"),
        "on its conversation: {launches:?}"
    );
}
