//! The README's offline stand-in with its options (issue 46 §4: `cargo run --example
//! stand_in_api -- --limit-for SECONDS | --expired-login | --log FILE`), on the real Claude Code:
//! what a person trying botvisor without an account sees. A usage limit shows only to an OAuth
//! login (`CLAUDE_CODE_OAUTH_TOKEN`): to an API key, the same refusal is a rate limit the CLI
//! retries. An expired login holds the bot until a new token, and the log says how often the
//! message reached the API.

use std::collections::HashMap;

use clap::Parser;

use support::stand_in_api::demo_script;
use support::stand_ins::{ApiArgs, Decider, claude_script, log_lines};
use support::*;

/// The README's stand-in, started with the options `args` gives after `stand_in_api`, and the
/// daemon with the real CLI.
async fn setup_with(env: &TestEnv, args: &[&str]) -> RealSetup {
    let claude = claude_bin().expect("checked by the caller");
    let args = ApiArgs::try_parse_from(std::iter::once("stand_in_api").chain(args.iter().copied()))
        .unwrap();
    let script = claude_script(Decider::new(args.behaviour).unwrap(), demo_script());
    RealSetup::start(env, claude, script).await
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

#[cfg_attr(
    botvisor_skip_claude,
    ignore = "BOTVISOR_TEST_CLAUDE_BIN not set: no real Claude Code to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stand_ins_usage_limit_shows_to_an_oauth_login_only() {
    if claude_bin().is_none() {
        return;
    }
    let env = TestEnv::new().await;
    let log = env.dir.path().join("api.jsonl");
    let mut setup = setup_with(
        &env,
        &["--limit-for", "3600", "--log", log.to_str().unwrap()],
    )
    .await;
    // An API key: the refusal is a rate limit, retried; the bot is never `limited`.
    let keyed = setup.create_bot(&env, &env.work, &[]).await;
    let mut items = keyed.receive_chat_item_added().await.unwrap();
    let sent = unix_now();
    keyed.send("hi", HashMap::new()).await.unwrap();
    bounded("a retry of the refused request", async {
        use futures_util::StreamExt;
        while let Some(item) = items.next().await {
            let a = item.args().unwrap();
            let p: serde_json::Value = serde_json::from_str(&a.payload).unwrap();
            if a.kind == "system" && p["reason"] == "api_retry" {
                assert_eq!(p["error_status"], 429, "{p}");
                return;
            }
        }
        panic!("the chat stream ended");
    })
    .await;
    assert_ne!(keyed.state().await.unwrap(), "limited");
    stop_and_wait(&keyed).await;
    // An OAuth token (a subscription, as `claude /login` gives): `limited`, until the reset.
    setup.bot_env.remove("ANTHROPIC_API_KEY");
    let subscribed = setup
        .create_bot(&env, &env.work, &[("CLAUDE_CODE_OAUTH_TOKEN", "offline")])
        .await;
    subscribed.send("hello", HashMap::new()).await.unwrap();
    wait_state(&subscribed, "limited").await;
    assert_eq!(subscribed.limit_kind().await.unwrap(), "five_hour");
    let resets = subscribed.limit_resets_at().await.unwrap();
    assert!(
        (sent + 3600..=unix_now() + 3600).contains(&resets),
        "the limit holds 3600 s from the first request: {resets}"
    );
    let lines = log_lines(&log);
    assert!(
        lines
            .iter()
            .all(|l| l["answer"] == "limit" && l["user_texts"].is_array()),
        "{lines:?}"
    );
    assert_eq!(
        lines.iter().filter(|l| l["asked"] == "hello").count(),
        1,
        "nothing more is sent into a known limit: {lines:?}"
    );
    stop_and_wait(&subscribed).await;
}

#[cfg_attr(
    botvisor_skip_claude,
    ignore = "BOTVISOR_TEST_CLAUDE_BIN not set: no real Claude Code to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stand_ins_expired_login_holds_until_a_new_token() {
    if claude_bin().is_none() {
        return;
    }
    let env = TestEnv::new().await;
    let log = env.dir.path().join("api.jsonl");
    let mut setup = setup_with(&env, &["--expired-login", "--log", log.to_str().unwrap()]).await;
    setup.bot_env.remove("ANTHROPIC_API_KEY");
    let bot = setup
        .create_bot(&env, &env.work, &[("CLAUDE_CODE_OAUTH_TOKEN", "old")])
        .await;
    let mut finished = bot.receive_turn_finished().await.unwrap();
    let turn = bot.send("hello", HashMap::new()).await.unwrap();
    wait_state(&bot, "login_required").await;
    // A new token, the whole environment given again (SetEnvironment replaces it).
    let mut new_env: HashMap<&str, &str> = setup
        .bot_env
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    new_env.insert("CLAUDE_CODE_OAUTH_TOKEN", "new");
    bot.set_environment(new_env, HashMap::new()).await.unwrap();
    assert_eq!(wait_turns(&mut finished, &[turn]).await[0].1, "success");
    let answered: Vec<String> = log_lines(&log)
        .iter()
        .filter(|l| l["asked"] == "hello")
        .map(|l| l["answer"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(
        answered.iter().filter(|a| *a == "reply").count(),
        1,
        "the message reached the API once with the new token: {answered:?}"
    );
    assert!(
        answered.first().is_some_and(|a| a == "expired_login"),
        "{answered:?}"
    );
    stop_and_wait(&bot).await;
}
