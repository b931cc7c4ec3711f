//! Issue 30: how far an "allow" reaches (`RespondPermission`'s `scope`), and `SetName`, on the
//! D-Bus API with the scripted fake CLI. What the real CLIs make of a wider scope is in
//! `tests/facts/claude.rs` and `tests/facts/codex.rs`.

use std::collections::HashMap;

use serde_json::{Value, json};
use zbus::Variant;

use support::*;

fn error_text(e: &zbus::Error) -> String {
    match e {
        zbus::Error::MethodError(name, Some(text), _) => format!("{name}: {text}"),
        other => other.to_string(),
    }
}

/// The suggestions Claude Code 2.1.328 makes for a Bash command outside the working directory
/// (facts::claude::an_allow_with_the_suggestions_is_not_asked_again).
fn bash_suggestions() -> Value {
    json!([
        {"type": "addRules", "rules": [{"toolName": "Bash", "ruleContent": "ls /tmp"}],
         "behavior": "allow", "destination": "localSettings"},
        {"type": "addRules", "rules": [{"toolName": "Read", "ruleContent": "//tmp/**"}],
         "behavior": "allow", "destination": "session"}
    ])
}

/// Waits for the bot's first open request and returns its id.
async fn open_request(bot: &botvisor::dbus::client::BotProxy<'_>) -> String {
    let bot = watching(bot).await;
    let changes = bot.receive_pending_permissions_changed().await;
    let now = bot.pending_permissions().await.unwrap();
    if let Some((id, _, _)) = now.first() {
        return id.clone();
    }
    let mut changes = changes;
    tokio::time::timeout(EVENT_TIMEOUT, async {
        while let Some(c) = futures_util::StreamExt::next(&mut changes).await {
            if let Some((id, _, _)) = c.get().await.unwrap().first() {
                return id.clone();
            }
        }
        panic!("the PendingPermissions stream ended");
    })
    .await
    .expect("a permission request opens")
}

/// The request's item lists the scopes it offers; a scope it does not offer is refused by name
/// and leaves it open; `session` sends the suggestions for the session, `always` as offered;
/// the answer's item records the scope.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allow_reaches_as_far_as_its_scope_and_the_chat_says_so() {
    let s = FakeSetup::start("").await;
    let plain = s
        .bot(json!([{"mode": "normal", "ask": {"tool": "Write", "input_bytes": 3}}]))
        .await;
    let mut finished = plain.receive_turn_finished().await.unwrap();
    let turn = plain.send("plain", HashMap::new()).await.unwrap();
    let id = open_request(&plain).await;
    let items = chat(&plain).await;
    let asked = of_kind(&items, "permission_request")[0].clone();
    assert_eq!(asked["scopes"], json!(["once"]), "{asked}");
    // No suggestions: nothing wider to give; refused, and still open.
    let e = plain
        .respond_permission(
            &id,
            "allow",
            HashMap::from([("scope", Variant::from("always"))]),
        )
        .await
        .unwrap_err();
    let text = error_text(&e);
    assert!(
        text.contains("InvalidArgument") && text.contains("offers the scope once; not `always`"),
        "{text}"
    );
    let e = plain
        .respond_permission(
            &id,
            "deny",
            HashMap::from([("scope", Variant::from("session"))]),
        )
        .await
        .unwrap_err();
    assert!(error_text(&e).contains("`scope` goes with `allow`"), "{e}");
    assert_eq!(plain.pending_permissions().await.unwrap().len(), 1);
    plain
        .respond_permission(&id, "allow", HashMap::new())
        .await
        .unwrap();
    wait_turns(&mut finished, std::slice::from_ref(&turn)).await;
    let items = chat(&plain).await;
    assert_eq!(of_kind(&items, "permission_answer")[0]["scope"], "once");

    // With Bash's suggestions (rules only, which Claude Code keeps for its process alone):
    // the session.
    let s2 = FakeSetup::start_in(TestEnv::new().await, "").await;
    for (scope, want) in [("session", json!(["session", "session"]))] {
        let bot = s2
            .bot(
                json!([{"mode": "normal", "ask": {"tool": "Bash", "input": {"command": "ls /tmp"},
                                                   "suggestions": bash_suggestions()}}]),
            )
            .await;
        let mut finished = bot.receive_turn_finished().await.unwrap();
        let turn = bot.send("list /tmp", HashMap::new()).await.unwrap();
        let id = open_request(&bot).await;
        let items = chat(&bot).await;
        assert_eq!(
            of_kind(&items, "permission_request")[0]["scopes"],
            json!(["once", "session"])
        );
        let e = bot
            .respond_permission(
                &id,
                "allow",
                HashMap::from([("scope", Variant::from("always"))]),
            )
            .await
            .unwrap_err();
        assert!(error_text(&e).contains("not `always`"), "{e}");
        bot.respond_permission(
            &id,
            "allow",
            HashMap::from([("scope", Variant::from(scope))]),
        )
        .await
        .unwrap();
        wait_turns(&mut finished, std::slice::from_ref(&turn)).await;
        let items = chat(&bot).await;
        let answer = of_kind(&items, "permission_answer")[0].clone();
        assert_eq!(answer["scope"], scope, "{answer}");
        assert!(answer.get("permission_mode").is_none(), "{answer}");
        let grants = json_lines(&s2.state.join("grants.jsonl"));
        let sent = &grants.last().unwrap()["updatedPermissions"];
        let destinations: Vec<Value> = sent
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["destination"].clone())
            .collect();
        assert_eq!(json!(destinations), want, "{scope}: {sent}");
        assert_eq!(sent[0]["rules"][0]["ruleContent"], "ls /tmp");
        bot.delete().await.unwrap();
    }
}

/// A file edit's suggestion (Claude Code offers `setMode` `acceptEdits`) makes the bot's
/// permission mode `acceptEdits`: `PermissionMode` says so once the agent took it, and it is the
/// bot's from then on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_allowed_for_the_session_makes_the_mode_accept_edits() {
    let s = FakeSetup::start("").await;
    let suggestion = json!([{"type": "setMode", "mode": "acceptEdits", "destination": "session"}]);
    let bot = s
        .bot(
            json!([{"mode": "normal", "ask": {"tool": "Write", "input_bytes": 3,
                                               "suggestions": suggestion}}]),
        )
        .await;
    let mut finished = bot.receive_turn_finished().await.unwrap();
    let turn = bot.send("edit", HashMap::new()).await.unwrap();
    let id = open_request(&bot).await;
    bot.respond_permission(
        &id,
        "allow",
        HashMap::from([("scope", Variant::from("session"))]),
    )
    .await
    .unwrap();
    wait_turns(&mut finished, std::slice::from_ref(&turn)).await;
    wait_permission_mode(&bot, "acceptEdits").await;
    let items = chat(&bot).await;
    let answer = of_kind(&items, "permission_answer")[0].clone();
    assert_eq!(answer["permission_mode"], "acceptEdits", "{answer}");
    assert_eq!(answer["scope"], "session");
    // The mode is botvisor's to keep: the CLI was not sent it as a rule.
    let grants = json_lines(&s.state.join("grants.jsonl"));
    assert_eq!(grants[0]["updatedPermissions"], Value::Null);
    assert!(
        of_kind(&items, "system")
            .iter()
            .any(|p| p["reason"] == "setting_applied" && p["value"] == "acceptEdits"),
        "{items:?}"
    );
}
