//! What a bot's chat says of its schedules' fires (issue 49), read while botvisord may be
//! restarting: the fake-CLI tests (`tests/fake/schedules.rs`) and the real-CLI ones
//! (`tests/real/schedules.rs`) share it.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use botvisor::dbus::client::BotProxy;

use crate::EVENT_TIMEOUT;

/// The bot's chat, or `None` while botvisord cannot answer (it restarts).
pub async fn chat_now(bot: &BotProxy<'_>) -> Option<Vec<(String, serde_json::Value)>> {
    let items = tokio::time::timeout(Duration::from_secs(10), bot.get_chat(0, 0))
        .await
        .ok()?
        .ok()?;
    Some(
        items
            .into_iter()
            .map(|(_, k, _, p)| (k, serde_json::from_str(&p).unwrap()))
            .collect(),
    )
}

/// The scheduled messages of the bot's chat: due time → turn ids (one each, if fired once);
/// `None` while botvisord cannot answer.
pub async fn scheduled(bot: &BotProxy<'_>) -> Option<BTreeMap<i64, Vec<String>>> {
    let mut out: BTreeMap<i64, Vec<String>> = BTreeMap::new();
    for (kind, p) in chat_now(bot).await? {
        if kind == "user"
            && let Some(due) = p["schedule"]["due"].as_i64()
        {
            out.entry(due)
                .or_default()
                .push(p["turn_id"].as_str().unwrap_or_default().to_owned());
        }
    }
    Some(out)
}

/// [`scheduled`], asked again while botvisord restarts (each call bounded), until `done` holds
/// (at most [`EVENT_TIMEOUT`] · 2).
pub async fn wait_scheduled(
    bot: &BotProxy<'_>,
    what: &str,
    done: impl Fn(&BTreeMap<i64, Vec<String>>) -> bool,
) -> BTreeMap<i64, Vec<String>> {
    let deadline = Instant::now() + EVENT_TIMEOUT * 2;
    loop {
        if let Some(now) = scheduled(bot).await
            && done(&now)
        {
            return now;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not within {:?}",
            EVENT_TIMEOUT * 2
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Every turn that ended, by turn id: its outcomes (one each, if ended once).
pub async fn ends(bot: &BotProxy<'_>) -> HashMap<String, Vec<String>> {
    let mut out: HashMap<String, Vec<String>> = HashMap::new();
    for (kind, p) in chat_now(bot).await.unwrap_or_default() {
        if kind == "turn_finished" {
            out.entry(p["turn_id"].as_str().unwrap_or_default().to_owned())
                .or_default()
                .push(p["outcome"].as_str().unwrap_or_default().to_owned());
        }
    }
    out
}
