//! Issue 31, group commit: the chat items of stdout lines that arrive together are committed in
//! one transaction and then signalled in the order the CLI printed them; nothing is signalled
//! before it is stored (design rule 1).

use std::collections::HashMap;

use serde_json::json;
use support::*;

/// The `assistant` items signalled for a message `text`, until its turn ends.
async fn signalled(
    bot: &botvisor::dbus::client::BotProxy<'static>,
    text: &str,
) -> Vec<(u64, String)> {
    let mut items = bot.receive_chat_item_added().await.unwrap();
    let mut finished = bot.receive_turn_finished().await.unwrap();
    let turn = bot.send(text, HashMap::new()).await.unwrap();
    assistant_items_until_end(&mut items, &mut finished, &turn).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_lines_is_committed_as_a_group_and_signalled_in_order() {
    let fake = FakeSetup::start("").await;
    let n = 500;
    let bot = fake
        .bot(json!([{"mode": "normal", "burst": n, "reply": "the end"}]))
        .await;
    let got = signalled(&bot, "go").await;
    let mut want: Vec<String> = (0..n).map(|i| format!("burst {i}")).collect();
    want.push("the end".into());
    let texts: Vec<&str> = got.iter().map(|(_, t)| t.as_str()).collect();
    assert_eq!(texts, want, "every line signalled once, in order");
    assert!(got.windows(2).all(|w| w[0].0 < w[1].0), "seqs in order");
    // Stored as signalled.
    let stored = stored_assistant_items(&bot).await;
    assert_eq!(stored, got);
    // The lines that arrived together went in groups (the journal says so at debug level).
    let log = fake.daemon.log_text();
    let groups: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("committed a group of lines"))
        .collect();
    println!("{} groups of lines committed together", groups.len());
    assert!(!groups.is_empty(), "no group commit:\n{log}");
}
