//! Tier 3: the desktop half of the API on the real Claude Code CLI: permission prompts answered
//! by any client, interrupts, streamed text, three clients at once.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use serde_json::{Value, json};
use zbus::{Connection, Variant};

use botvisor::dbus::client::BotProxy;
use support::stand_in_api::{ApiRequest, Reply, Script};
use support::*;

const WRITE: &str = "please write the file";
const TALK: &str = "talk for a while";

fn script(target: std::path::PathBuf) -> Script {
    Arc::new(move |req: &ApiRequest| {
        if req.has_tool_result {
            Reply::Text("I tried.".into())
        } else if req.last_user_text.contains(WRITE) {
            Reply::ToolUse {
                name: "Write".into(),
                input: json!({"file_path": target.to_str().unwrap(), "content": "hello from the agent"}),
            }
        } else if req.last_user_text.contains(TALK) {
            Reply::SlowText {
                chunks: (0..60).map(|i| format!("word{i} ")).collect(),
                every: Duration::from_millis(120),
            }
        } else {
            Reply::SlowText {
                chunks: ["Hel", "lo", ", ", "str", "eam", "ing", " wor", "ld"]
                    .map(String::from)
                    .to_vec(),
                every: Duration::from_millis(150),
            }
        }
    })
}

/// Every signal the daemon sends, in order, as seen by `conn`.
async fn signal_log(conn: &Connection) -> zbus::MessageStream {
    let rule = zbus::MatchRule::builder()
        .msg_type(zbus::message::Type::Signal)
        .sender(botvisor::dbus::BUS_NAME)
        .build()
        .unwrap();
    zbus::MessageStream::for_match_rule(rule, conn, None)
        .await
        .unwrap()
}

async fn bot_on(conn: &Connection, path: &zbus::OwnedObjectPath) -> BotProxy<'static> {
    BotProxy::builder(conn)
        .path(path.clone())
        .build()
        .await
        .unwrap()
}

async fn next_prompt(bot: &BotProxy<'static>) -> (String, String, Value) {
    let mut prompts = bot.receive_permission_requested().await.unwrap();
    let sig = tokio::time::timeout(EVENT_TIMEOUT, prompts.next())
        .await
        .unwrap_or_else(|_| {
            panic!(
                "no permission request; {}",
                fact("a tool that needs permission asks with a can_use_tool control request")
            )
        })
        .unwrap();
    let a = sig.args().unwrap();
    (
        a.request_id.clone(),
        a.tool.clone(),
        serde_json::from_str(&a.input_json).unwrap(),
    )
}

/// Waits, in a task of its own, for the bot's next permission request.
fn watch_prompt(bot: &BotProxy<'static>) -> tokio::task::JoinHandle<(String, String, Value)> {
    let bot = bot.clone();
    tokio::spawn(async move { next_prompt(&bot).await })
}

/// `(seq, kind)` of the ChatItemAdded signals in a log, until `TurnFinished` of `turn`.
async fn chat_signals_until(log: &mut zbus::MessageStream, turn: &str) -> Vec<(u64, String)> {
    let mut out = Vec::new();
    tokio::time::timeout(EVENT_TIMEOUT, async {
        while let Some(Ok(msg)) = log.next().await {
            let hdr = msg.header();
            match hdr.member().map(|m| m.as_str()) {
                Some("ChatItemAdded") => {
                    let (seq, kind, _): (u64, String, String) = msg.body().deserialize().unwrap();
                    out.push((seq, kind));
                }
                Some("TurnFinished") => {
                    let (id, _): (String, String) = msg.body().deserialize().unwrap();
                    if id == turn {
                        return;
                    }
                }
                _ => {}
            }
        }
    })
    .await
    .expect("the turn finishes");
    out
}

#[cfg_attr(
    botvisor_skip_claude,
    ignore = "BOTVISOR_TEST_CLAUDE_BIN not set: no real Claude Code to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_clients_share_one_bot_and_a_second_client_answers_the_prompt() {
    let Some(claude) = claude_bin() else { return };
    let env = TestEnv::new().await;
    let target = env.work.join("out.txt");
    let setup = RealSetup::start(&env, claude, script(target.clone())).await;
    let b_conn = env.bus.connect().await;
    let c_conn = env.bus.connect().await;
    let mut a_log = signal_log(&env.conn).await;
    let mut b_log = signal_log(&b_conn).await;
    let mut c_log = signal_log(&c_conn).await;
    let om = zbus::fdo::ObjectManagerProxy::builder(&c_conn)
        .destination(botvisor::dbus::BUS_NAME)
        .path(botvisor::dbus::ROOT_PATH)
        .build()
        .await
        .unwrap();
    let mut added = om.receive_interfaces_added().await.unwrap();

    // A creates and sends; B answers; C only watches.
    let a_bot = setup.create_bot(&env, &env.work, &[]).await;
    let path = a_bot.inner().path().to_owned().into();
    let added = tokio::time::timeout(EVENT_TIMEOUT, added.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(added.args().unwrap().object_path.as_str(), path_str(&path));
    let b_bot = bot_on(&b_conn, &path).await;
    let b_prompt = tokio::spawn(async move {
        let (id, tool, input) = next_prompt(&b_bot).await;
        assert_eq!(tool, "Write");
        let pending = b_bot.pending_permissions().await.unwrap();
        assert_eq!(pending.len(), 1);
        b_bot
            .respond_permission(&id, "allow", HashMap::new())
            .await
            .unwrap();
        (id, input)
    });
    let turn = a_bot.send(WRITE, HashMap::new()).await.unwrap();
    let (request_id, input) = b_prompt.await.unwrap();
    assert!(input["file_path"].as_str().unwrap().ends_with("out.txt"));

    let a_seen = chat_signals_until(&mut a_log, &turn).await;
    let b_seen = chat_signals_until(&mut b_log, &turn).await;
    let c_seen = chat_signals_until(&mut c_log, &turn).await;
    assert_eq!(a_seen, b_seen);
    assert_eq!(a_seen, c_seen);
    let history: Vec<(u64, String)> = chat(&a_bot)
        .await
        .into_iter()
        .map(|(s, k, _)| (s, k))
        .collect();
    assert_eq!(a_seen, history, "signals and history agree");

    assert_eq!(
        std::fs::read_to_string(&target).unwrap(),
        "hello from the agent"
    );
    let items = chat(&a_bot).await;
    let answer = of_kind(&items, "permission_answer")[0].clone();
    assert_eq!(answer["behavior"], "allow");
    assert_eq!(answer["by"], b_conn.unique_name().unwrap().as_str());
    let results = of_kind(&items, "tool_result");
    assert_eq!(results[0]["is_error"], false);

    // The first answer won: a second one is a named error.
    let err = a_bot
        .respond_permission(&request_id, "deny", HashMap::new())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("NotFound"), "{err}");
    assert!(err.to_string().contains("already answered"), "{err}");
    assert!(a_bot.pending_permissions().await.unwrap().is_empty());
}

fn path_str(p: &zbus::OwnedObjectPath) -> &str {
    p.as_str()
}

#[cfg_attr(
    botvisor_skip_claude,
    ignore = "BOTVISOR_TEST_CLAUDE_BIN not set: no real Claude Code to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deny_keeps_the_file_unwritten_and_the_model_sees_the_message() {
    let Some(claude) = claude_bin() else { return };
    let env = TestEnv::new().await;
    let target = env.work.join("out.txt");
    let setup = RealSetup::start(&env, claude, script(target.clone())).await;
    let bot = setup.create_bot(&env, &env.work, &[]).await;
    let answering = {
        let bot = bot.clone();
        tokio::spawn(async move {
            let (id, _, _) = next_prompt(&bot).await;
            let options = HashMap::from([("message", Variant::from("not in this folder"))]);
            bot.respond_permission(&id, "deny", options).await.unwrap();
        })
    };
    let seen = send_and_wait(&bot, WRITE).await;
    answering.await.unwrap();
    assert_eq!(seen.outcome, "success");
    assert!(!target.exists(), "a denied Write ran");
    let told = setup
        .api
        .requests()
        .into_iter()
        .find(|r| r.has_tool_result)
        .expect("the model got the tool result");
    let body = told.body.to_string();
    assert!(
        body.contains("not in this folder"),
        "{}: {body}",
        fact("a deny answer's message reaches the model in the tool result")
    );
    let items = chat(&bot).await;
    assert_eq!(of_kind(&items, "permission_answer")[0]["behavior"], "deny");
    assert_eq!(of_kind(&items, "tool_result")[0]["is_error"], true);
}

#[cfg_attr(
    botvisor_skip_claude,
    ignore = "BOTVISOR_TEST_CLAUDE_BIN not set: no real Claude Code to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_open_when_the_bot_stops_is_denied_and_recorded() {
    let Some(claude) = claude_bin() else { return };
    let env = TestEnv::new().await;
    let target = env.work.join("out.txt");
    let setup = RealSetup::start(&env, claude, script(target.clone())).await;
    let bot = setup.create_bot(&env, &env.work, &[]).await;
    let prompt = watch_prompt(&bot);
    bot.send(WRITE, HashMap::new()).await.unwrap();
    let (id, _, _) = prompt.await.unwrap();
    stop_and_wait(&bot).await;
    assert!(!target.exists());
    let items = chat(&bot).await;
    let answer = of_kind(&items, "permission_answer")[0].clone();
    assert_eq!(answer["behavior"], "deny");
    assert_eq!(answer["by"], "botvisord");
    assert_eq!(answer["request_id"], id.as_str());
    assert!(bot.pending_permissions().await.unwrap().is_empty());
    let err = bot
        .respond_permission(&id, "allow", HashMap::new())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("NotFound"), "{err}");
}

#[cfg_attr(
    botvisor_skip_claude,
    ignore = "BOTVISOR_TEST_CLAUDE_BIN not set: no real Claude Code to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interrupting_a_turn_that_asks_closes_its_prompt() {
    let Some(claude) = claude_bin() else { return };
    let env = TestEnv::new().await;
    let target = env.work.join("out.txt");
    let setup = RealSetup::start(&env, claude, script(target.clone())).await;
    let bot = setup.create_bot(&env, &env.work, &[]).await;
    let prompt = watch_prompt(&bot);
    let mut finished = bot.receive_turn_finished().await.unwrap();
    let turn = bot.send(WRITE, HashMap::new()).await.unwrap();
    let (id, _, _) = prompt.await.unwrap();
    assert!(bot.interrupt().await.unwrap());
    let outcomes = wait_turns(&mut finished, std::slice::from_ref(&turn)).await;
    assert_eq!(outcomes[0].1, "interrupted");
    let direct = env
        .bot_uncached(&bot.inner().path().to_owned().into())
        .await;
    assert!(direct.pending_permissions().await.unwrap().is_empty());
    let err = bot
        .respond_permission(&id, "allow", HashMap::new())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("NotFound"), "{err}");
    let items = chat(&bot).await;
    let closed = of_kind(&items, "permission_answer")[0].clone();
    assert_eq!(closed["by"], "botvisord");
    assert!(!target.exists());
}

#[cfg_attr(
    botvisor_skip_claude,
    ignore = "BOTVISOR_TEST_CLAUDE_BIN not set: no real Claude Code to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamed_text_arrives_before_the_final_message() {
    let Some(claude) = claude_bin() else { return };
    let env = TestEnv::new().await;
    let setup = RealSetup::start(&env, claude, script(env.work.join("x"))).await;
    let bot = setup.create_bot(&env, &env.work, &[]).await;
    let mut log = signal_log(&env.conn).await;
    let turn = bot.send("say something", HashMap::new()).await.unwrap();
    let mut deltas = String::new();
    let mut deltas_before_final = 0;
    let mut final_text = None;
    tokio::time::timeout(EVENT_TIMEOUT, async {
        while let Some(Ok(msg)) = log.next().await {
            let hdr = msg.header();
            match hdr.member().map(|m| m.as_str()) {
                Some("TextDelta") => {
                    let (t, text): (String, String) = msg.body().deserialize().unwrap();
                    assert_eq!(t, turn);
                    deltas.push_str(&text);
                    if final_text.is_none() {
                        deltas_before_final += 1;
                    }
                }
                Some("ChatItemAdded") => {
                    let (_, kind, payload): (u64, String, String) =
                        msg.body().deserialize().unwrap();
                    if kind == "assistant" {
                        let p: Value = serde_json::from_str(&payload).unwrap();
                        final_text = Some(p["text"].as_str().unwrap().to_owned());
                    }
                }
                Some("TurnFinished") => return,
                _ => {}
            }
        }
    })
    .await
    .unwrap();
    assert_eq!(final_text.as_deref(), Some("Hello, streaming world"));
    assert!(
        deltas_before_final >= 2,
        "{deltas_before_final} deltas before the message; {}",
        fact("--include-partial-messages streams text_delta events before the message")
    );
    assert_eq!(deltas, "Hello, streaming world");
    assert_eq!(
        bot.partial_text().await.unwrap(),
        "",
        "nothing streams between messages"
    );
}

#[cfg_attr(
    botvisor_skip_claude,
    ignore = "BOTVISOR_TEST_CLAUDE_BIN not set: no real Claude Code to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interrupt_ends_a_long_turn_and_queued_messages_stay_queued() {
    let Some(claude) = claude_bin() else { return };
    let env = TestEnv::new().await;
    let setup = RealSetup::start(&env, claude, script(env.work.join("x"))).await;
    let bot = setup.create_bot(&env, &env.work, &[]).await;
    assert!(
        !bot.interrupt().await.unwrap(),
        "nothing to interrupt: says so"
    );
    let mut deltas = bot.receive_text_delta().await.unwrap();
    let mut finished = bot.receive_turn_finished().await.unwrap();
    let long = bot.send(TALK, HashMap::new()).await.unwrap();
    let next = bot
        .send("after the interrupt", HashMap::new())
        .await
        .unwrap();
    tokio::time::timeout(EVENT_TIMEOUT, deltas.next())
        .await
        .expect("the long turn streams");
    let direct = env
        .bot_uncached(&bot.inner().path().to_owned().into())
        .await;
    assert!(direct.partial_text().await.unwrap().starts_with("word0"));
    assert_eq!(direct.queued_messages().await.unwrap(), 1);
    assert!(bot.interrupt().await.unwrap());
    let outcomes = wait_turns(&mut finished, &[long.clone(), next.clone()]).await;
    assert_eq!(
        outcomes[0],
        (long, "interrupted".to_owned()),
        "{}",
        fact("the interrupt control request ends the running turn")
    );
    assert_eq!(outcomes[1].0, next);
    let items = chat(&bot).await;
    assert!(of_kind(&items, "error").is_empty(), "{items:?}");
    assert!(bot.last_error().await.unwrap().is_empty());
}
