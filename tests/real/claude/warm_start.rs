//! Issue 31, a warm start on the real Claude Code: `Hold` on a bot stopped for idleness starts
//! `claude` on its conversation before any message; the CLI so started writes nothing to the
//! conversation (botvisor records nothing either, design rule 3), and the next message is
//! answered by it, in the same conversation, with what came before.

use support::stand_in_api::echo_script;
use support::*;

#[cfg_attr(
    botvisor_skip_claude,
    ignore = "BOTVISOR_TEST_CLAUDE_BIN not set: no real Claude Code to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_starts_the_stopped_cli_on_its_conversation_and_the_next_message_goes_to_it() {
    let Some(claude) = claude_bin() else { return };
    let env = TestEnv::new().await;
    let setup =
        RealSetup::start_with_config(&env, claude, echo_script(), "idle_timeout_s = 1\n").await;
    let bot = setup.create_bot(&env, &env.work, &[]).await;
    assert_eq!(send_and_wait(&bot, "one").await.outcome, "success");
    let session = bot.session_id().await.unwrap();
    wait_state(&bot, "stopped").await;
    let before = transcript_branch(&env.home.join(".claude"), &session);
    let items = chat(&bot).await.len();

    bot.hold().await.unwrap();
    let pid = wait_running(&bot).await;
    wait_state(&bot, "idle").await;
    assert_eq!(chat(&bot).await.len(), items, "no chat item for a start");
    let requests = setup.api.requests().len();
    // The started CLI has its conversation open: it answered botvisor's `initialize`, and a
    // message now goes to it, not to a new process.
    assert_eq!(send_and_wait(&bot, "two").await.outcome, "success");
    assert_eq!(
        bot.process_id().await.unwrap(),
        pid,
        "the warm agent answered"
    );
    assert_eq!(bot.session_id().await.unwrap(), session);
    let asked = setup.api.requests();
    let last = asked
        .iter()
        .skip(requests)
        .rfind(|r| r.has_tools)
        .expect("the message reached the model");
    assert_eq!(last.last_user_text, "two");
    assert!(
        last.body.to_string().contains("You said: one"),
        "the earlier turn is in the conversation: {}",
        last.body
    );
    // The conversation continued where it was: the new turn follows the old one on its branch.
    let after = transcript_branch(&env.home.join(".claude"), &session);
    assert_eq!(after[..before.len()], before[..]);

    bot.release().await.unwrap();
    wait_state(&bot, "stopped").await;
    assert_eq!(bot.stop_verdict().await.unwrap(), "clean");
}
