//! Issue 45 on the real Claude Code: whatever path puts a message to the CLI again after a
//! failed attempt, the request the model is sent holds it once. Claude Code 2.1.328 keeps a
//! failed attempt in its conversation and joins its text with the next message's into one user
//! turn (`"first job\n", "first job"`); botvisor drops the attempt first (a truncating resume).
//! Every test of this binary also fails when any request holds one of its messages more often
//! than it sent it (`support::repeats`); these check each request themselves too, since a
//! message the user sends again on purpose is allowed twice there.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use support::stand_in_api::{ApiRequest, Reply, Script, plan_echo, plan_limit_refusal};
use support::*;

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Asserts that no request of `setup`'s stand-in to the main conversation holds `text` more
/// than once, joined or not; returns how many held it at all.
fn held_once_in_each(setup: &RealSetup, text: &str) -> usize {
    let mut holding = 0;
    for req in setup.api.requests().iter().filter(|r| r.has_tools) {
        let texts = req.user_texts();
        let n = support::repeats::occurrences(text, &texts);
        assert!(n <= 1, "a request holds `{text}` {n} times: {texts:?}");
        holding += usize::from(n == 1);
    }
    holding
}

/// The chat's assistant texts, in order.
async fn answers(bot: &botvisor::dbus::client::BotProxy<'_>) -> Vec<String> {
    of_kind(&chat(bot).await, "assistant")
        .iter()
        .filter_map(|p| p["text"].as_str().map(str::to_owned))
        .collect()
}

/// A subscription bot's message that hits the plan's limit, and whose retry at the reset hits
/// it again (the reset told was early), is sent once each time: the second and third requests
/// hold it once, in the same conversation as the turn answered before, with the attempts left
/// out. The chat shows the message once, each limit's note, and one answer.
#[cfg_attr(
    botvisor_skip_claude,
    ignore = "BOTVISOR_TEST_CLAUDE_BIN not set: no real Claude Code to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limit_hit_twice_in_a_row_sends_the_message_once_each_time() {
    let Some(claude) = claude_bin() else { return };
    let env = TestEnv::new().await;
    const JOB: &str = "first LIMIT15 job";
    let refused = Arc::new(AtomicUsize::new(0));
    let until: Arc<Mutex<u64>> = Arc::default();
    let (r, u) = (refused.clone(), until.clone());
    let script: Script = Arc::new(move |req: &ApiRequest| {
        if req.has_tools && req.last_user_text.contains(JOB) && r.load(Ordering::SeqCst) < 2 {
            r.fetch_add(1, Ordering::SeqCst);
            let reset = unix_now() + 4;
            *u.lock().unwrap() = reset;
            return plan_limit_refusal(reset);
        }
        plan_echo("allowed", &req.last_user_text, unix_now() + 5 * 3600)
    });
    let mut setup =
        RealSetup::start_with_config(&env, claude, script, "limit_margin_s = 1\n").await;
    setup.bot_env.remove("ANTHROPIC_API_KEY");
    let bot = setup
        .create_bot(
            &env,
            &env.work,
            &[("CLAUDE_CODE_OAUTH_TOKEN", "sk-ant-oat01-stand-in")],
        )
        .await;
    assert_eq!(send_and_wait(&bot, "warm up").await.outcome, "success");
    let session = bot.session_id().await.unwrap();
    let mut finished = bot.receive_turn_finished().await.unwrap();
    let turn = bot.send(JOB, HashMap::new()).await.unwrap();
    let outcomes = wait_turns(&mut finished, std::slice::from_ref(&turn)).await;
    assert_eq!(outcomes[0].1, "success", "{:?}", chat(&bot).await);
    assert_eq!(refused.load(Ordering::SeqCst), 2, "refused twice");
    assert_eq!(
        held_once_in_each(&setup, JOB),
        3,
        "asked three times, once each"
    );
    assert_eq!(
        bot.session_id().await.unwrap(),
        session,
        "the same conversation"
    );
    assert_eq!(
        answers(&bot).await,
        [
            "Hello! You said: warm up",
            &format!("Hello! You said: {JOB}")
        ],
        "one answer each, the warm-up's turn still in the conversation"
    );
    let items = chat(&bot).await;
    let users: Vec<_> = of_kind(&items, "user");
    assert_eq!(users.len(), 2, "the message once in the chat: {items:?}");
    let limits = of_kind(&items, "system")
        .iter()
        .filter(|p| p["reason"] == "limit_reached")
        .count();
    assert_eq!(limits, 2, "each limit said: {items:?}");
    // The model still has the earlier turn: the last request holds both messages.
    let last = setup
        .api
        .requests()
        .into_iter()
        .rfind(|r| r.has_tools)
        .unwrap();
    let texts = last.user_texts();
    assert_eq!(
        support::repeats::occurrences("warm up", &texts),
        1,
        "{texts:?}"
    );
}

/// A message whose model request fails with an API error (HTTP 500, retried once by the CLI,
/// `CLAUDE_CODE_MAX_RETRIES=1`) ends `error`; what is sent next goes without the failed attempt:
/// the same message sent again reaches the model once, and another message does not carry the
/// failed one with it.
#[cfg_attr(
    botvisor_skip_claude,
    ignore = "BOTVISOR_TEST_CLAUDE_BIN not set: no real Claude Code to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_an_api_error_the_next_message_goes_without_the_failed_attempt() {
    let Some(claude) = claude_bin() else { return };
    let env = TestEnv::new().await;
    let failing = Arc::new(AtomicUsize::new(0));
    let f = failing.clone();
    let script: Script = Arc::new(move |req: &ApiRequest| {
        if req.has_tools && req.last_user_text.contains("fail") && f.load(Ordering::SeqCst) < 2 {
            f.fetch_add(1, Ordering::SeqCst);
            return Reply::Status {
                status: 500,
                body: serde_json::json!({"type": "error", "error": {"type": "api_error",
                    "message": "Internal server error"}}),
            };
        }
        Reply::Text(format!("Hello! You said: {}", req.last_user_text))
    });
    let setup = RealSetup::start(&env, claude, script).await;
    let bot = setup
        .create_bot(&env, &env.work, &[("CLAUDE_CODE_MAX_RETRIES", "1")])
        .await;
    assert_eq!(send_and_wait(&bot, "warm up").await.outcome, "success");
    let failed = send_and_wait(&bot, "this will fail").await;
    assert_eq!(failed.outcome, "error", "{failed:?}");
    assert_eq!(failing.load(Ordering::SeqCst), 2, "the CLI retried once");
    // Sent again on purpose: the model sees it once.
    let again = send_and_wait(&bot, "this will fail").await;
    assert_eq!(again.outcome, "success", "{again:?}");
    let last = setup
        .api
        .requests()
        .into_iter()
        .rfind(|r| r.has_tools)
        .unwrap();
    let texts = last.user_texts();
    assert_eq!(
        support::repeats::occurrences("this will fail", &texts),
        1,
        "the failed attempt is not in the request: {texts:?}"
    );
    assert_eq!(
        support::repeats::occurrences("warm up", &texts),
        1,
        "{texts:?}"
    );
    assert_eq!(
        answers(&bot).await,
        [
            "Hello! You said: warm up",
            "Hello! You said: this will fail"
        ]
    );
}

/// A client's Stop while the model answers a message: Claude Code replays a message only once
/// the model's answer begins, so botvisor has not seen it taken yet. That message's turn ends
/// `interrupted` (reason `stopped`), once, and is never asked again (it stays in the
/// conversation, as an interrupted message does); the chat's note counts only the message never
/// written, which goes at the Restart, once. Before the fix (a hostile run of
/// issues 45 and 46) the stopped message ended `taken_not_answered` while the note (and `send`)
/// said it waited to go at the next message or a Restart, which never sent it.
#[cfg_attr(
    botvisor_skip_claude,
    ignore = "BOTVISOR_TEST_CLAUDE_BIN not set: no real Claude Code to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_while_the_model_answers_ends_that_turn_and_only_what_waits_goes_later() {
    let Some(claude) = claude_bin() else { return };
    let env = TestEnv::new().await;
    const SLOW: &str = "a slow question";
    const NEXT: &str = "then this one";
    let script: Script = Arc::new(|req: &ApiRequest| {
        let reply = Reply::Text(format!("Hello! You said: {}", req.last_user_text));
        if req.has_tools && req.last_user_text.contains(SLOW) {
            return Reply::Delayed {
                after: std::time::Duration::from_secs(60),
                reply: Box::new(reply),
            };
        }
        reply
    });
    let setup = RealSetup::start(&env, claude, script).await;
    let bot = setup.create_bot(&env, &env.work, &[]).await;
    assert_eq!(send_and_wait(&bot, "warm up").await.outcome, "success");
    let slow = bot.send(SLOW, HashMap::new()).await.unwrap();
    let next = bot.send(NEXT, HashMap::new()).await.unwrap();
    let deadline = std::time::Instant::now() + EVENT_TIMEOUT;
    while !setup
        .api
        .requests()
        .iter()
        .any(|r| r.has_tools && r.last_user_text.contains(SLOW))
    {
        assert!(std::time::Instant::now() < deadline, "the model is asked");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    bot.stop().await.unwrap();
    wait_state(&bot, "stopped").await;
    let items = chat(&bot).await;
    let ends: Vec<(String, String)> = of_kind(&items, "turn_finished")
        .iter()
        .filter(|p| p["turn_id"] == slow.as_str())
        .map(|p| {
            (
                p["outcome"].as_str().unwrap().to_owned(),
                p["reason"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        ends,
        [("interrupted".to_owned(), "stopped".to_owned())],
        "the stopped message's turn"
    );
    let notes: Vec<&serde_json::Value> = of_kind(&items, "system")
        .into_iter()
        .filter(|p| p["reason"] == "stopped_with_queue")
        .collect();
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert_eq!(notes[0]["turn_ids"], serde_json::json!([next]), "{notes:?}");
    assert_eq!(bot.queued_messages().await.unwrap(), 1);
    let mut finished = bot.receive_turn_finished().await.unwrap();
    bot.restart(HashMap::new()).await.unwrap();
    assert_eq!(
        wait_turns(&mut finished, std::slice::from_ref(&next)).await,
        [(next.clone(), "success".to_owned())]
    );
    // No request holds either twice; the stopped one stays in the conversation, as an
    // interrupted message does, so the next request holds it once too (before `NEXT`).
    assert!(held_once_in_each(&setup, SLOW) >= 1);
    assert_eq!(held_once_in_each(&setup, NEXT), 1);
    assert_eq!(
        answers(&bot).await,
        ["Hello! You said: warm up", "Hello! You said: then this one"]
    );
}
