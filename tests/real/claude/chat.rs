//! Tier 3: the `botvisord` binary on a private bus with the real Claude Code CLI against the
//! loopback stand-in API. Skipped (loudly) without `BOTVISOR_TEST_CLAUDE_BIN`; CI always sets it.

use support::stand_in_api::{StandInApi, echo_script};
use support::*;

#[cfg_attr(
    botvisor_skip_claude,
    ignore = "BOTVISOR_TEST_CLAUDE_BIN not set: no real Claude Code to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hello_reply_arrives_and_survives_a_daemon_restart() {
    let Some(claude) = claude_bin() else { return };
    let env = TestEnv::new().await;
    let api = StandInApi::start(echo_script()).await;
    let cfg = env.daemon_config(Some(claude));
    let mut daemon = Daemon::start(&cfg, &env.conn).await;

    let bot_env = claude_env(&env.home, &api.url, &env.marker);
    let work = env.work.to_str().unwrap().to_owned();
    let path = env
        .manager()
        .await
        .create_bot(create_options(&work, &bot_env))
        .await
        .unwrap();
    let bot = env.bot(&path).await;
    assert_eq!(
        bot.session_id().await.unwrap(),
        "",
        "no session before a turn"
    );

    let seen = send_and_wait(&bot, "hello").await;
    assert_eq!(seen.outcome, "success", "{seen:?}\n{}", daemon.log_text());
    let kinds: Vec<&str> = seen.items.iter().map(|(_, k, _)| k.as_str()).collect();
    assert_eq!(kinds.first(), Some(&"user"), "{kinds:?}");
    assert_eq!(kinds.last(), Some(&"turn_finished"), "{kinds:?}");
    assert_eq!(kinds[kinds.len() - 2], "result", "{kinds:?}");
    let reply = seen
        .items
        .iter()
        .find(|(_, k, _)| k == "assistant")
        .expect("an assistant item");
    assert_eq!(reply.2["text"], "Hello! You said: hello");
    let result = &seen.items[seen.items.len() - 2].2;
    assert_eq!(result["subtype"], "success");
    assert!(
        result.get("total_cost_usd").is_some(),
        "{}: {result}",
        fact("a result line carries total_cost_usd")
    );
    assert_eq!(seen.items[0].2["turn_id"], seen.turn_id);
    let seqs: Vec<u64> = seen.items.iter().map(|(s, _, _)| *s).collect();
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "{seqs:?}");

    let history = bot.get_chat(0, 0).await.unwrap();
    let history_kinds: Vec<(u64, String)> =
        history.iter().map(|(s, k, _, _)| (*s, k.clone())).collect();
    let signalled: Vec<(u64, String)> =
        seen.items.iter().map(|(s, k, _)| (*s, k.clone())).collect();
    assert_eq!(history_kinds, signalled);
    let session = bot.session_id().await.unwrap();
    assert!(
        !session.is_empty(),
        "a turn began, so the session is recorded; {}",
        fact("--replay-user-messages echoes the message as user with isReplay: true")
    );

    // Stop the daemon; start it again: the bot and every chat item are still there.
    let status = daemon.terminate().await;
    assert!(status.success(), "{status:?}\n{}", daemon.log_text());
    let _daemon = Daemon::start(&cfg, &env.conn).await;
    let paths = env.manager().await.list_bots().await.unwrap();
    assert_eq!(paths, vec![path.clone()]);
    let bot = env.bot(&path).await;
    let after = bot.get_chat(0, 0).await.unwrap();
    assert_eq!(after, history);
    assert_eq!(bot.session_id().await.unwrap(), session);
    assert_eq!(bot.state().await.unwrap(), "stopped");

    // The next message resumes the same conversation: the model sees the first exchange.
    let seen = send_and_wait(&bot, "again").await;
    assert_eq!(seen.outcome, "success", "{seen:?}");
    assert_eq!(bot.session_id().await.unwrap(), session);
    let last = api.requests().into_iter().rfind(|r| r.has_tools).unwrap();
    let body = last.body.to_string();
    assert!(
        body.contains("Hello! You said: hello"),
        "history not resumed; {}",
        fact("--resume ID sends the conversation's history to the model")
    );
}

/// A reply holding a UTF-16 surrogate without its pair (`\ud800`, valid JSON text a model's
/// output cut inside a pair can carry): Claude Code passes the escape on in its stream-json, and
/// botvisor reads it as U+FFFD (`runtime::json_line`), in an answer and in a tool's input that
/// asks for permission. Before, serde_json refused the line: the answer was lost, the prompt
/// never shown and the turn waited forever (issue 30's hostile run).
#[cfg_attr(
    botvisor_skip_claude,
    ignore = "BOTVISOR_TEST_CLAUDE_BIN not set: no real Claude Code to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_surrogate_in_a_reply_is_read_and_the_turn_ends() {
    use std::collections::HashMap;
    use support::stand_in_api::{LONE_SURROGATE, Reply};
    let Some(claude) = claude_bin() else { return };
    let env = TestEnv::new().await;
    let api = StandInApi::start(std::sync::Arc::new(
        |req: &support::stand_in_api::ApiRequest| {
            if req.has_tool_result {
                Reply::Text("Tool finished.".into())
            } else if req.last_user_text == "run it" {
                Reply::ToolUse {
                    name: "Bash".into(),
                    input: serde_json::json!({"command": format!("echo cut{LONE_SURROGATE}here")}),
                }
            } else {
                Reply::Text(format!("cut {LONE_SURROGATE} here"))
            }
        },
    ))
    .await;
    let cfg = env.daemon_config(Some(claude));
    let daemon = Daemon::start(&cfg, &env.conn).await;
    let bot = create_bot_in(&env, &claude_env(&env.home, &api.url, &env.marker)).await;

    let seen = send_and_wait(&bot, "hello").await;
    assert_eq!(seen.outcome, "success", "{seen:?}\n{}", daemon.log_text());
    let answer = seen
        .items
        .iter()
        .find(|(_, k, _)| k == "assistant")
        .expect("the answer is in the chat");
    assert_eq!(answer.2["text"], "cut \u{fffd} here");
    assert!(
        !seen.items.iter().any(|(_, k, _)| k == "error"),
        "{:?}",
        seen.items
    );

    let watched = watching(&bot).await;
    let mut finished = watched.receive_turn_finished().await.unwrap();
    let mut changes = watched.receive_pending_permissions_changed().await;
    let turn = watched.send("run it", HashMap::new()).await.unwrap();
    let asked = tokio::time::timeout(EVENT_TIMEOUT, async {
        loop {
            if let Some(first) = watched
                .pending_permissions()
                .await
                .unwrap()
                .into_iter()
                .next()
            {
                return first;
            }
            futures_util::StreamExt::next(&mut changes).await;
        }
    })
    .await
    .expect("the permission request is shown");
    assert!(asked.2.contains("cut\u{fffd}here"), "{asked:?}");
    watched
        .respond_permission(&asked.0, "deny", HashMap::new())
        .await
        .unwrap();
    tokio::time::timeout(EVENT_TIMEOUT, async {
        while let Some(s) = futures_util::StreamExt::next(&mut finished).await {
            if s.args().unwrap().turn_id == turn {
                return;
            }
        }
    })
    .await
    .expect("the turn ends");
}
