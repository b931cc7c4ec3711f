//! Issue 31, a warm start on the real Codex: `Hold` on a bot stopped for idleness starts
//! `codex app-server` and resumes its thread before any message; nothing is recorded (design
//! rule 3) and the rollout gains nothing, and the next message is answered by that process, in
//! the same thread, with what came before.

use support::codex::{CodexSetup, wait_session};
use support::responses_api::echo_script;
use support::*;

#[cfg_attr(
    botvisor_skip_codex,
    ignore = "BOTVISOR_TEST_CODEX_BIN not set: no real Codex to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_starts_the_stopped_app_server_on_its_thread_and_the_next_message_goes_to_it() {
    let Some(codex) = codex_bin() else { return };
    let env = TestEnv::new().await;
    let s =
        CodexSetup::start_configured(&env, codex, echo_script(), "", "idle_timeout_s = 1\n").await;
    let bot = s.bot(&env, "").await;
    assert_eq!(send_and_wait(&bot, "one").await.outcome, "success");
    let thread = wait_session(&bot).await;
    wait_state(&bot, "stopped").await;
    let rollout = s.rollout(&thread).expect("the thread's rollout");
    let before = std::fs::read(&rollout).unwrap();
    let items = chat(&bot).await.len();

    bot.hold().await.unwrap();
    let pid = wait_running(&bot).await;
    wait_state(&bot, "idle").await;
    assert_eq!(chat(&bot).await.len(), items, "no chat item for a start");
    let requests = s.api.requests().len();
    assert_eq!(send_and_wait(&bot, "two").await.outcome, "success");
    assert_eq!(
        bot.process_id().await.unwrap(),
        pid,
        "the warm agent answered"
    );
    assert_eq!(bot.session_id().await.unwrap(), thread);
    let asked = s.api.requests();
    let last = asked
        .get(requests..)
        .and_then(|r| r.last())
        .expect("the message reached the model");
    assert_eq!(last.last_user_text, "two");
    assert!(
        last.body.to_string().contains("You said: one"),
        "the earlier turn is in the thread: {}",
        last.body
    );
    // The thread continued where it was.
    let after = std::fs::read(&rollout).unwrap();
    assert!(
        after.starts_with(&before),
        "the rollout was only appended to"
    );

    bot.release().await.unwrap();
    wait_state(&bot, "stopped").await;
    assert_eq!(bot.stop_verdict().await.unwrap(), "clean");
}
