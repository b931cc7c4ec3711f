//! Issue 29: the real Claude Code as an MCP client of `botvisorctl mcp`. A bot's Claude Code,
//! started with `--mcp-config` naming `botvisorctl mcp` (through a wrapper given to botvisord as
//! its Claude Code binary, so every bot's CLI gets it), is made by the stand-in API to call the
//! server's tools: it creates a second bot, sends it a message and gets the second bot's answer
//! back as the tool's result; a tool `[mcp] tools` does not allow comes back as an MCP error and
//! the server goes on answering.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Value, json};

use support::stand_in_api::{ApiRequest, Reply, StandInApi};
use support::*;

const CTL: &str = env!("CARGO_BIN_EXE_botvisorctl");

/// The text of a `tool_result` block (a string, or text blocks).
fn result_text(block: &Value) -> String {
    match &block["content"] {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

/// What the user asked last (one of `asks`), and every tool result of the conversation, in
/// order, as `(tool, text, is_error)`. Claude Code 2.1.328 merges the messages of a turn: one
/// user message holds the turn's tool results and then the user's next text, so the order of
/// blocks says little; each tool is called once per ask here.
fn since_last_ask(req: &ApiRequest, asks: &[&str]) -> (String, Vec<(String, String, bool)>) {
    let blocks: Vec<(String, Value)> = req.body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|m| {
            let role = m["role"].as_str().unwrap_or_default().to_owned();
            match &m["content"] {
                Value::Array(b) => b.iter().map(|b| (role.clone(), b.clone())).collect(),
                Value::String(t) => vec![(role, json!({"type": "text", "text": t}))],
                _ => Vec::new(),
            }
        })
        .collect();
    let at = blocks.iter().rposition(|(role, b)| {
        role == "user"
            && b["type"] == "text"
            && b["text"].as_str().is_some_and(|t| asks.contains(&t.trim()))
    });
    let Some(at) = at else {
        return (String::new(), Vec::new());
    };
    let ask = blocks[at].1["text"].as_str().unwrap().trim().to_owned();
    let name_of = |id: &Value| {
        blocks
            .iter()
            .find(|(_, b)| b["type"] == "tool_use" && b["id"] == *id)
            .and_then(|(_, b)| b["name"].as_str())
            .unwrap_or_default()
            .to_owned()
    };
    let results = blocks
        .iter()
        .filter(|(_, b)| b["type"] == "tool_result")
        .map(|(_, b)| {
            (
                name_of(&b["tool_use_id"]),
                result_text(b),
                b["is_error"] == true,
            )
        })
        .collect();
    (ask, results)
}

/// A wrapper that botvisord runs as Claude Code: the real CLI with `--mcp-config FILE` and the
/// stand-in's environment (a bot created through MCP gets no `env` of its own: what reaches it
/// is the daemon's allow-listed environment, and the wrapper's).
fn wrapper(dir: &Path, claude: &Path, mcp_config: &Path, api_url: &str, env: &TestEnv) -> PathBuf {
    let tmp = env.home.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let path = dir.join("claude-with-mcp");
    let script = format!(
        "#!/bin/sh\n\
         export ANTHROPIC_BASE_URL='{api_url}' ANTHROPIC_API_KEY=sk-ant-test-stand-in \
         DISABLE_TELEMETRY=1 CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_AUTOUPDATER=1 \
         DISABLE_ERROR_REPORTING=1 BOTVISOR_TEST_RUN='{marker}' TMPDIR='{tmp}'\n\
         exec '{claude}' --mcp-config '{mcp}' \"$@\"\n",
        marker = env.marker,
        tmp = tmp.display(),
        claude = claude.display(),
        mcp = mcp_config.display(),
    );
    std::fs::write(&path, script).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

#[cfg_attr(
    botvisor_skip_claude,
    ignore = "BOTVISOR_TEST_CLAUDE_BIN not set: no real Claude Code to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bot_creates_a_bot_sends_it_work_and_gets_the_answer_over_mcp() {
    let Some(claude) = claude_bin() else { return };
    let env = TestEnv::new().await;
    // A repository: the second bot gets a git worktree of its own (issue 28).
    let second_folder = env.dir.path().join("second");
    std::fs::create_dir_all(&second_folder).unwrap();
    support::git::repository(&second_folder);
    let second = second_folder.to_str().unwrap().to_owned();

    let script_folder = second.clone();
    let script: support::stand_in_api::Script = Arc::new(move |req: &ApiRequest| {
        const ASKS: [&str; 4] = [
            "orchestrate",
            "delete it",
            "list them",
            "ping from the first bot",
        ];
        let (ask, results) = since_last_ask(req, &ASKS);
        let result = |tool: &str| {
            results
                .iter()
                .find(|(t, _, _)| t == &format!("mcp__botvisor__{tool}"))
                .cloned()
        };
        let said = |(tool, text, _): (String, String, bool)| {
            Reply::Text(format!("tool {tool} said: {text}"))
        };
        let call = |name: &str, input: Value| Reply::ToolUse {
            name: format!("mcp__botvisor__{name}"),
            input,
        };
        match ask.as_str() {
            "orchestrate" => match (result("create_bot"), result("send_message")) {
                (_, Some(sent)) => said(sent),
                (Some((_, made, false)), None) => {
                    let made: Value = serde_json::from_str(&made).unwrap_or(Value::Null);
                    call(
                        "send_message",
                        json!({"bot": made["id"], "text": "ping from the first bot",
                               "timeout_s": 80}),
                    )
                }
                (Some(failed), None) => said(failed),
                (None, None) => call(
                    "create_bot",
                    json!({"folder": script_folder, "runtime": "claude", "name": "second",
                           "worktree": true}),
                ),
            },
            "delete it" => result("delete_bot")
                .map(said)
                .unwrap_or_else(|| call("delete_bot", json!({"bot": "second"}))),
            "list them" => result("list_bots")
                .map(said)
                .unwrap_or_else(|| call("list_bots", json!({}))),
            "ping from the first bot" => Reply::Text("pong from the second bot".into()),
            other => Reply::Text(format!("Hello! You said: {other}")),
        }
    });
    let api = StandInApi::start(script).await;

    // botvisor's configuration: the daemon's and `botvisorctl mcp`'s `[mcp]`.
    let config = write_config(
        env.dir.path(),
        &format!("[mcp]\nfolders = [\"{}\"]\n", env.dir.path().display()),
    );
    let mcp_config = env.dir.path().join("mcp.json");
    std::fs::write(
        &mcp_config,
        json!({"mcpServers": {"botvisor": {
            "type": "stdio",
            "command": CTL,
            "args": ["--address", env.bus.address, "mcp", "--config", config],
        }}})
        .to_string(),
    )
    .unwrap();
    // The user lets the agent use the server's tools without asking.
    let claude_dir = env.home.join(".claude");
    std::fs::create_dir_all(&claude_dir).unwrap();
    std::fs::write(
        claude_dir.join("settings.json"),
        r#"{"permissions":{"allow":["mcp__botvisor"]}}"#,
    )
    .unwrap();
    let bin = wrapper(env.dir.path(), &claude, &mcp_config, &api.url, &env);
    let mut cfg = env.daemon_config(Some(bin));
    cfg.config = Some(config);
    let daemon = Daemon::start(&cfg, &env.conn).await;

    let first_env = claude_env(&env.home, &api.url, &env.marker);
    let first = create_bot_in(&env, &first_env).await;
    let first_id = first.id().await.unwrap();
    let seen = send_and_wait(&first, "orchestrate").await;
    let answer = seen
        .items
        .iter()
        .filter(|(_, k, _)| k == "assistant")
        .filter_map(|(_, _, p)| p["text"].as_str())
        .collect::<Vec<_>>()
        .join("\n");
    assert_eq!(
        seen.outcome,
        "success",
        "{seen:?}\n{}\nasked: {:?}",
        daemon.log_text(),
        api.requests()
            .iter()
            .map(|r| r.body["tools"]
                .as_array()
                .map(|t| t.iter().map(|t| t["name"].clone()).collect::<Vec<_>>()))
            .collect::<Vec<_>>()
    );
    assert!(
        answer.contains("tool mcp__botvisor__send_message said:")
            && answer.contains("pong from the second bot")
            && answer.contains("\"outcome\":\"success\""),
        "{answer}\n{seen:?}"
    );

    // The second bot: created by the first bot's agent, named by Claude Code's clientInfo.
    let manager = env.manager().await;
    let second_bot = env.bot(&manager.get_bot("second").await.unwrap()).await;
    assert_eq!(second_bot.created_by_bot().await.unwrap(), first_id);
    let client = second_bot.created_by().await.unwrap();
    assert_eq!(client, "claude-code", "Claude Code's clientInfo.name");
    // In a worktree of the repository, not in the repository's own folder.
    let worktree = second_bot.worktree().await.unwrap();
    assert_eq!(second_bot.cwd().await.unwrap(), worktree);
    assert_ne!(worktree, second);
    assert_eq!(second_bot.branch().await.unwrap(), "botvisor/second");
    assert!(
        support::git::worktrees(&second_folder).contains(&worktree),
        "{worktree}"
    );
    // The chat of both shows the exchange.
    let second_chat = chat(&second_bot).await;
    let users = of_kind(&second_chat, "user");
    assert_eq!(
        users[0]["text"], "ping from the first bot",
        "{second_chat:?}"
    );
    let said = of_kind(&second_chat, "assistant");
    assert_eq!(
        said[0]["text"], "pong from the second bot",
        "{second_chat:?}"
    );
    let first_chat = chat(&first).await;
    let results = of_kind(&first_chat, "tool_result");
    assert!(
        results
            .iter()
            .any(|r| r.to_string().contains("pong from the second bot")),
        "{first_chat:?}"
    );

    // Deleting is not allowed by default: an MCP error, and the server goes on.
    let seen = send_and_wait(&first, "delete it").await;
    assert_eq!(seen.outcome, "success", "{seen:?}");
    let refused = seen
        .items
        .iter()
        .find(|(_, k, _)| k == "tool_result")
        .map(|(_, _, p)| p.clone())
        .expect("a tool result");
    assert_eq!(refused["is_error"], true, "{refused}");
    assert!(
        refused.to_string().contains("is not allowed here"),
        "{refused}"
    );
    assert_eq!(
        manager.list_bots().await.unwrap().len(),
        2,
        "nothing deleted"
    );
    let seen = send_and_wait(&first, "list them").await;
    let listed = seen
        .items
        .iter()
        .find(|(_, k, _)| k == "tool_result")
        .map(|(_, _, p)| p.clone())
        .expect("a tool result");
    assert_ne!(listed["is_error"], true, "{listed}");
    assert!(
        listed.to_string().contains(&first_id),
        "the server still answers: {listed}"
    );
    drop(daemon);
    env.assert_no_leftovers();
}
