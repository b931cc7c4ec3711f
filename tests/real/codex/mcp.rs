//! Issue 29: the real Codex CLI as an MCP client of `botvisorctl mcp`. A Codex bot whose
//! `CODEX_HOME/config.toml` names `botvisorctl mcp` in `[mcp_servers.botvisor]` is made by the
//! Responses stand-in to call the server's tools: `list_bots` answers with the bots (the call and
//! its result are in the bot's chat, the turn ends `success`); `delete_bot`, which the default
//! `[mcp] tools` does not allow, comes back as an MCP error result that Codex reports (a failed
//! tool call, the turn still a success), and the server goes on answering.

use std::sync::Arc;

use serde_json::{Value, json};

use support::codex::CodexSetup;
use support::responses_api::{Reply, ResponsesRequest, Script, mcp_call};
use support::*;

const CTL: &str = env!("CARGO_BIN_EXE_botvisorctl");

/// The text Codex gave the model as a function call's output: Codex 0.171.0 sends an MCP
/// result as `input_text` blocks (`Wall time: … seconds\nOutput:`, then the result's text).
fn output_text(req: &ResponsesRequest) -> Option<String> {
    let last = req.body["input"].as_array()?.last()?;
    (last["type"] == "function_call_output").then(|| match &last["output"] {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        other => other.to_string(),
    })
}

/// `list them` calls `list_bots`, `delete it` calls `delete_bot` on the bot `work`; after a
/// call's output the model says `tool said: <output>`.
fn script() -> Script {
    Arc::new(|req: &ResponsesRequest| {
        if let Some(output) = output_text(req) {
            return Reply::Text(format!("tool said: {output}"));
        }
        match req.last_user_text.trim() {
            "list them" => mcp_call("botvisor", "list_bots", json!({})),
            "delete it" => mcp_call("botvisor", "delete_bot", json!({"bot": "work"})),
            other => Reply::Text(format!("Hello! You said: {other}")),
        }
    })
}

/// The one `tool_use` and its `tool_result` of a turn.
fn the_call(seen: &TurnSeen) -> (Value, Value) {
    let one = |kind: &str| {
        let all = of_kind(&seen.items, kind);
        assert_eq!(all.len(), 1, "one {kind} in {seen:?}");
        all[0].clone()
    };
    let (used, result) = (one("tool_use"), one("tool_result"));
    assert_eq!(result["tool_use_id"], used["id"], "{seen:?}");
    (used, result)
}

#[cfg_attr(
    botvisor_skip_codex,
    ignore = "BOTVISOR_TEST_CODEX_BIN not set: no real Codex to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_codex_bot_lists_the_bots_over_mcp_and_a_refused_tool_is_a_failed_call() {
    let Some(codex) = codex_bin() else { return };
    let env = TestEnv::new().await;
    // Codex starts the server for each thread; the server does not get the bus address from
    // the environment Codex gives it, so `--address` names the test's bus.
    let servers = format!(
        "\n[mcp_servers.botvisor]\ncommand = \"{CTL}\"\nargs = [\"mcp\", \"--address\", \"{}\"]\n\
         startup_timeout_sec = 20\ntool_timeout_sec = 120\n",
        env.bus.address
    );
    let s = CodexSetup::start_with(&env, codex, script(), &servers).await;
    let bot = s.bot(&env, "").await;
    let id = bot.id().await.unwrap();

    let seen = send_and_wait(&bot, "list them").await;
    assert_eq!(seen.outcome, "success", "{seen:?}");
    // Codex offered the server's tools to the model as the namespace `mcp__botvisor`.
    let asked = s.api.requests()[0].body.clone();
    let namespace = asked["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|t| t["type"] == "namespace" && t["name"] == "mcp__botvisor")
        .unwrap_or_else(|| panic!("no mcp__botvisor namespace in {}", asked["tools"]));
    let offered: Vec<&str> = namespace["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(
        offered.contains(&"list_bots") && offered.contains(&"delete_bot"),
        "{offered:?}"
    );
    let (used, result) = the_call(&seen);
    assert_eq!(used["name"], "mcp__botvisor__list_bots", "{used}");
    assert_eq!(result["is_error"], false, "{result}");
    let listed = result["content"][0]["text"].as_str().unwrap_or_default();
    let listed: Value = serde_json::from_str(listed).unwrap_or_else(|_| panic!("{result}"));
    assert_eq!(listed["bots"][0]["id"], id.as_str(), "{listed}");
    assert_eq!(listed["bots"][0]["runtime"], "codex", "{listed}");
    let said = of_kind(&seen.items, "assistant");
    assert!(
        said.iter()
            .any(|a| a["text"].as_str().unwrap_or_default().contains(&id)),
        "the model got the list: {said:?}"
    );

    // Not allowed by the default `[mcp] tools`: an isError result, which Codex reports as a
    // failed call (and gives the model as the call's output); the turn is not failed.
    let seen = send_and_wait(&bot, "delete it").await;
    assert_eq!(seen.outcome, "success", "{seen:?}");
    let (used, refused) = the_call(&seen);
    assert_eq!(used["name"], "mcp__botvisor__delete_bot", "{used}");
    assert_eq!(used["input"], json!({"bot": "work"}), "{used}");
    assert_eq!(refused["is_error"], true, "{refused}");
    assert_eq!(refused["status"], "failed", "{refused}");
    assert!(
        refused.to_string().contains("is not allowed here"),
        "{refused}"
    );
    let said = of_kind(&seen.items, "assistant");
    assert!(
        said.iter().any(|a| a["text"]
            .as_str()
            .unwrap_or_default()
            .contains("is not allowed here")),
        "the model was told why: {said:?}"
    );
    let manager = env.manager().await;
    assert_eq!(
        bounded("ListBots", manager.list_bots())
            .await
            .unwrap()
            .len(),
        1
    );

    // The server goes on answering.
    let seen = send_and_wait(&bot, "list them").await;
    assert_eq!(seen.outcome, "success", "{seen:?}");
    let (_, result) = the_call(&seen);
    assert_eq!(result["is_error"], false, "{result}");
    assert!(result.to_string().contains(&id), "{result}");
    stop_and_wait(&bot).await;
    env.assert_no_leftovers();
}
