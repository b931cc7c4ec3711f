//! Issue 45 on the real Codex 0.171.0: a failed turn (a usage limit, an API error) stays in the
//! thread and its message goes with the next request (two user messages), so botvisor reverts
//! the failed turn (`thread/revert`) before anything more goes: whatever is sent next, the model
//! is sent each message once. Every test here also fails when any request holds one of its
//! messages more often than it sent it (`support::repeats`).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::SystemTime;

use support::codex::CodexSetup;
use support::responses_api::{Reply, ResponsesRequest, Script, codex_limit_headers};
use support::*;

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Asserts that no request holds `text` more than once; returns how many held it.
fn held_once_in_each(s: &CodexSetup, text: &str) -> usize {
    let mut holding = 0;
    for req in s.api.requests() {
        let texts = req.user_texts();
        let n = support::repeats::occurrences(text, &texts);
        assert!(n <= 1, "a request holds `{text}` {n} times: {texts:?}");
        holding += usize::from(n == 1);
    }
    holding
}

fn echo(req: &ResponsesRequest) -> Reply {
    Reply::Text(format!("Hello! You said: {}", req.last_user_text))
}

/// The plan's limit refuses a message twice in a row (its retry at the reset is refused again),
/// after a turn answered before: each request holds it once, the thread is kept with the earlier
/// turn, and the message is answered once.
#[cfg_attr(
    botvisor_skip_codex,
    ignore = "BOTVISOR_TEST_CODEX_BIN not set: no real Codex to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_usage_limit_hit_twice_in_a_row_sends_the_message_once_each_time() {
    let Some(codex) = codex_bin() else { return };
    let env = TestEnv::new().await;
    const JOB: &str = "first LIMIT15 job";
    let refused = Arc::new(AtomicUsize::new(0));
    let r = refused.clone();
    let script: Script = Arc::new(move |req: &ResponsesRequest| {
        if req.last_user_text.contains(JOB) && r.load(Ordering::SeqCst) < 2 {
            r.fetch_add(1, Ordering::SeqCst);
            let reset = unix_now() + 4;
            return Reply::WithHeaders {
                headers: codex_limit_headers(100, 300, reset),
                reply: Box::new(Reply::Status {
                    status: 429,
                    body: serde_json::json!({"error": {
                        "type": "usage_limit_reached",
                        "message": "The usage limit has been reached",
                        "plan_type": "plus",
                        "resets_at": reset,
                        "resets_in_seconds": 4,
                    }}),
                }),
            };
        }
        echo(req)
    });
    let s = CodexSetup::start_configured(&env, codex, script, "", "limit_margin_s = 1\n").await;
    let bot = s.bot(&env, "").await;
    assert_eq!(send_and_wait(&bot, "warm up").await.outcome, "success");
    let thread = bot.session_id().await.unwrap();
    let mut finished = bot.receive_turn_finished().await.unwrap();
    let turn = bot.send(JOB, HashMap::new()).await.unwrap();
    let outcomes = wait_turns(&mut finished, std::slice::from_ref(&turn)).await;
    assert_eq!(outcomes[0].1, "success", "{:?}", chat(&bot).await);
    assert_eq!(refused.load(Ordering::SeqCst), 2, "refused twice");
    assert_eq!(
        held_once_in_each(&s, JOB),
        3,
        "asked three times, once each"
    );
    assert_eq!(bot.session_id().await.unwrap(), thread, "the same thread");
    let last = s.api.requests().pop().unwrap().user_texts();
    assert_eq!(
        support::repeats::occurrences("warm up", &last),
        1,
        "the earlier turn is kept: {last:?}"
    );
    let items = chat(&bot).await;
    assert_eq!(of_kind(&items, "user").len(), 2, "{items:?}");
}

/// A turn whose model request fails (HTTP 500, no retries) ends `error`; the same message sent
/// again reaches the model once, with the earlier turn kept.
#[cfg_attr(
    botvisor_skip_codex,
    ignore = "BOTVISOR_TEST_CODEX_BIN not set: no real Codex to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_failed_turn_the_next_message_goes_without_the_failed_attempt() {
    let Some(codex) = codex_bin() else { return };
    let env = TestEnv::new().await;
    let failing = Arc::new(AtomicUsize::new(0));
    let f = failing.clone();
    let script: Script = Arc::new(move |req: &ResponsesRequest| {
        if req.last_user_text.contains("fail") && f.fetch_add(1, Ordering::SeqCst) == 0 {
            return Reply::Status {
                status: 500,
                body: serde_json::json!({"error": {"type": "server_error",
                    "message": "Internal server error"}}),
            };
        }
        echo(req)
    });
    let s = CodexSetup::start(&env, codex, script).await;
    let bot = s.bot(&env, "").await;
    assert_eq!(send_and_wait(&bot, "warm up").await.outcome, "success");
    let failed = send_and_wait(&bot, "this will fail").await;
    assert_eq!(failed.outcome, "error", "{failed:?}");
    let again = send_and_wait(&bot, "this will fail").await;
    assert_eq!(again.outcome, "success", "{again:?}");
    let last = s.api.requests().pop().unwrap().user_texts();
    assert_eq!(
        support::repeats::occurrences("this will fail", &last),
        1,
        "the failed attempt is not in the request: {last:?}"
    );
    assert_eq!(
        support::repeats::occurrences("warm up", &last),
        1,
        "{last:?}"
    );
}
