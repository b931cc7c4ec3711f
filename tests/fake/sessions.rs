//! Tier 2: conversation lifecycle faults that the real CLI does not produce on demand, driven by
//! the scripted fake CLI (`tests/fake_cli/fake_claude.py`).

use std::collections::HashMap;

use futures_util::StreamExt;
use serde_json::json;
use support::*;

type Fake = FakeSetup;

async fn start_fake() -> Fake {
    FakeSetup::start("stop_grace_s = 0.5\nfresh_start_if_dies_within_s = 15\n").await
}

fn flag<'a>(argv: &'a [String], name: &str) -> Option<&'a str> {
    argv.iter()
        .position(|a| a == name)
        .map(|i| argv[i + 1].as_str())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_conversation_whose_process_is_slow_to_exit_is_replaced_without_a_failed_turn() {
    let fake = start_fake().await;
    let bot = fake
        .bot(json!([
            {"mode": "normal"},
            {"mode": "not_found", "linger_s": 60, "ignore_term": true},
            {"mode": "normal"}
        ]))
        .await;
    let first = send_and_wait(&bot, "one").await;
    assert_eq!(first.outcome, "success");
    let old_session = bot.session_id().await.unwrap();
    stop_and_wait(&bot).await;

    let second = send_and_wait(&bot, "two").await;
    assert_eq!(second.outcome, "success", "{second:?}");
    let launches = fake.launches();
    assert_eq!(launches.len(), 3, "{launches:?}");
    assert_eq!(flag(&launches[1], "--resume"), Some(old_session.as_str()));
    let new_session = flag(&launches[2], "--session-id").expect("a new conversation");
    assert_ne!(new_session, old_session);
    assert_eq!(bot.session_id().await.unwrap(), new_session);

    let items = chat(&bot).await;
    assert!(of_kind(&items, "error").is_empty(), "{items:?}");
    let notes = of_kind(&items, "system");
    assert_eq!(notes.len(), 1, "{items:?}");
    assert_eq!(notes[0]["reason"], "conversation_not_found");
    // "two" went to the new process, once.
    let got: Vec<_> = fake
        .messages()
        .into_iter()
        .filter(|(_, t)| t == "two")
        .collect();
    assert_eq!(got, vec![(2, "two".to_owned())]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_id_in_use_switches_to_resume_once_and_never_repeats_arguments() {
    let fake = start_fake().await;
    let bot = fake
        .bot(json!([{"mode": "in_use"}, {"mode": "in_use"}, {"mode": "normal"}]))
        .await;
    let seen = send_and_wait(&bot, "hi").await;
    assert_eq!(seen.outcome, "success", "{seen:?}");
    let launches = fake.launches();
    assert_eq!(launches.len(), 3, "{launches:?}");
    let first = flag(&launches[0], "--session-id").unwrap();
    assert_eq!(flag(&launches[1], "--resume"), Some(first));
    let third = flag(&launches[2], "--session-id").expect("a new conversation");
    assert_ne!(third, first);
    for pair in launches.windows(2) {
        assert_ne!(pair[0], pair[1], "the same arguments were retried");
    }
    let got: Vec<_> = fake.messages().into_iter().map(|(_, t)| t).collect();
    assert_eq!(got, vec!["hi"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unrecognised_lost_conversation_fails_the_turn_then_starts_fresh() {
    let fake = start_fake().await;
    let bot = fake
        .bot(json!([
            {"mode": "normal"},
            {"mode": "unrecognized_error", "code": 1},
            {"mode": "normal"}
        ]))
        .await;
    assert_eq!(send_and_wait(&bot, "one").await.outcome, "success");
    let old_session = bot.session_id().await.unwrap();
    stop_and_wait(&bot).await;
    let two = send_and_wait(&bot, "two").await;
    assert_eq!(two.outcome, "error", "the turn fails visibly");
    wait_state(&bot, "stopped").await;
    assert_eq!(bot.session_id().await.unwrap(), "", "the record is cleared");
    let three = send_and_wait(&bot, "three").await;
    assert_eq!(three.outcome, "success");
    let launches = fake.launches();
    assert_eq!(flag(&launches[1], "--resume"), Some(old_session.as_str()));
    let new_session = flag(&launches[2], "--session-id").expect("a new conversation");
    assert_ne!(new_session, old_session);
    let items = chat(&bot).await;
    assert!(
        of_kind(&items, "system")
            .iter()
            .any(|p| p["reason"] == "died_after_launch"),
        "{items:?}"
    );
}

/// A CLI's error in words that hold a NUL (U+0000), which D-Bus cannot carry: botvisord stays on
/// the bus, and clients read the error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_whose_words_hold_a_nul_keeps_botvisord_on_the_bus() {
    let fake = start_fake().await;
    let bot = fake
        .bot(json!([
            {"mode": "unrecognized_error", "code": 1, "text": "broken\u{0}words"},
            {"mode": "normal"}
        ]))
        .await;
    let one = send_and_wait(&bot, "one").await;
    assert_eq!(one.outcome, "error", "{one:?}");
    // `LastError` said the words (then, as likely as not, the exit's): readable either way.
    let error = bot.last_error().await.unwrap();
    assert!(!error.contains('\0'), "{error:?}");
    let items = chat(&bot).await;
    assert!(
        of_kind(&items, "result")
            .iter()
            .any(|p| p["errors"][0] == "broken\u{0}words"),
        "the chat keeps the words whole: {items:?}"
    );
    let two = send_and_wait(&bot, "two").await;
    assert_eq!(two.outcome, "success", "{two:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_cli_that_dies_at_launch_without_a_failed_turn_keeps_its_conversation() {
    // A broken install or a failing wrapper: exit 7 at once, no result. The transcript exists, so
    // the conversation is kept and resumed by the next start (design rule 4: only "a failed turn,
    // then" an early exit gives a conversation up).
    let fake = start_fake().await;
    let bot = fake
        .bot(json!([
            {"mode": "normal"},
            {"mode": "die_at_start", "code": 7},
            {"mode": "normal"}
        ]))
        .await;
    assert_eq!(send_and_wait(&bot, "one").await.outcome, "success");
    let old_session = bot.session_id().await.unwrap();
    stop_and_wait(&bot).await;
    let two = send_and_wait(&bot, "two").await;
    assert_eq!(two.outcome, "success", "{two:?}");
    assert_eq!(bot.session_id().await.unwrap(), old_session);
    let launches = fake.launches();
    assert_eq!(flag(&launches[1], "--resume"), Some(old_session.as_str()));
    assert_eq!(flag(&launches[2], "--resume"), Some(old_session.as_str()));
    let items = chat(&bot).await;
    assert!(
        !of_kind(&items, "system")
            .iter()
            .any(|p| p["reason"] == "died_after_launch"),
        "{items:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_whose_process_died_before_the_replay_goes_to_the_next_process_once() {
    let fake = start_fake().await;
    let bot = fake
        .bot(json!([{"mode": "die_before_replay", "code": 3}, {"mode": "normal"}]))
        .await;
    let mut finished = bot.receive_turn_finished().await.unwrap();
    let seen = send_and_wait(&bot, "m1").await;
    assert_eq!(seen.outcome, "success", "{seen:?}");
    assert_eq!(
        fake.messages(),
        vec![(0, "m1".to_owned()), (1, "m1".to_owned())],
        "read by the dying process, then once by the next"
    );
    let items = chat(&bot).await;
    assert_eq!(of_kind(&items, "user").len(), 1);
    assert_eq!(of_kind(&items, "assistant").len(), 1);
    assert_eq!(of_kind(&items, "result").len(), 1);
    // Exactly one TurnFinished for it.
    use futures_util::StreamExt;
    let mut count = 0;
    while let Ok(Some(sig)) =
        tokio::time::timeout(std::time::Duration::from_millis(200), finished.next()).await
    {
        if sig.args().unwrap().turn_id == seen.turn_id {
            count += 1;
        }
    }
    assert_eq!(count, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lines_that_are_not_the_protocol_become_error_items_and_the_stream_goes_on() {
    let fake = start_fake().await;
    let bot = fake.bot(json!([{"mode": "garbage"}])).await;
    let seen = send_and_wait(&bot, "still there?").await;
    assert_eq!(seen.outcome, "success");
    let items = chat(&bot).await;
    let errors = of_kind(&items, "error");
    assert_eq!(errors.len(), 3, "{errors:?}");
    assert_eq!(errors[0]["line"], "this is not json");
    assert!(errors[2]["line"].as_str().unwrap().len() <= 4096);
    assert_eq!(
        of_kind(&items, "assistant")[0]["text"],
        "fake: still there?"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_calls_on_one_bot_are_applied_in_the_order_sent() {
    let fake = start_fake().await;
    let bot = fake.bot(json!([{"mode": "normal"}])).await;
    let mut finished = bot.receive_turn_finished().await.unwrap();
    let texts: Vec<String> = (0..40).map(|i| format!("m{i:02}")).collect();
    // All calls leave before any reply comes back.
    let calls = texts.iter().map(|t| bot.send(t, HashMap::new()));
    let ids: Vec<String> = futures_util::future::join_all(calls)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    wait_turns(&mut finished, &ids).await;
    let users: Vec<String> = of_kind(&chat(&bot).await, "user")
        .iter()
        .map(|p| p["text"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(users, texts);
    let taken: Vec<String> = fake.messages().into_iter().map(|(_, t)| t).collect();
    assert_eq!(taken, texts);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_the_cli_took_without_a_replay_is_not_sent_again() {
    let fake = start_fake().await;
    let bot = fake
        .bot(json!([
            {"mode": "normal"},
            {"mode": "take_then_die"},
            {"mode": "normal"}
        ]))
        .await;
    assert_eq!(send_and_wait(&bot, "one").await.outcome, "success");
    stop_and_wait(&bot).await;
    // Resumed; the CLI writes "two" into the conversation and dies before replaying it.
    let seen = send_and_wait(&bot, "two").await;
    assert_eq!(seen.outcome, "taken_not_answered");
    assert!(
        of_kind(&chat(&bot).await, "system")
            .iter()
            .any(|p| p["reason"] == "taken_not_answered")
    );
    assert_eq!(send_and_wait(&bot, "three").await.outcome, "success");
    let taken: Vec<String> = fake.messages().into_iter().map(|(_, t)| t).collect();
    assert_eq!(taken, vec!["one", "two", "three"], "two was sent again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_cli_reporting_another_id_keeps_the_launched_conversation() {
    let fake = start_fake().await;
    let bot = fake
        .bot(json!([
            {"mode": "normal"},
            {"mode": "normal", "report_session": "0badc0de-0000-4000-8000-000000000000"},
            {"mode": "normal"}
        ]))
        .await;
    assert_eq!(send_and_wait(&bot, "one").await.outcome, "success");
    let launched = bot.session_id().await.unwrap();
    stop_and_wait(&bot).await;
    // Resumed on `launched`; the CLI says another id but keeps writing to `launched`.
    assert_eq!(send_and_wait(&bot, "two").await.outcome, "success");
    assert_eq!(
        bot.session_id().await.unwrap(),
        launched,
        "an id without a transcript was recorded"
    );
    stop_and_wait(&bot).await;
    assert_eq!(send_and_wait(&bot, "three").await.outcome, "success");
    let launches = fake.launches();
    assert_eq!(flag(&launches[2], "--resume"), Some(launched.as_str()));
    let items = chat(&bot).await;
    assert!(
        of_kind(&items, "system").is_empty(),
        "no conversation was replaced: {items:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forked_conversation_is_recorded_once_its_transcript_exists() {
    let fake = start_fake().await;
    let bot = fake
        .bot(json!([{"mode": "normal"}, {"mode": "normal", "fork": true}, {"mode": "normal"}]))
        .await;
    let direct = fake
        .env
        .bot_uncached(&bot.inner().path().to_owned().into())
        .await;
    assert_eq!(send_and_wait(&bot, "one").await.outcome, "success");
    let first = direct.session_id().await.unwrap();
    stop_and_wait(&bot).await;
    // The CLI forks: the replay names a new id whose transcript is written only after it.
    assert_eq!(send_and_wait(&bot, "two").await.outcome, "success");
    // Read after TurnFinished, from the daemon itself: adopted before the turn's end.
    let forked = direct.session_id().await.unwrap();
    assert_ne!(forked, first, "the fork was not adopted");
    stop_and_wait(&bot).await;
    assert_eq!(send_and_wait(&bot, "three").await.outcome, "success");
    assert_eq!(flag(&fake.launches()[2], "--resume"), Some(forked.as_str()));
}

/// The typed outcome a turn left in the history.
fn turn_outcome(items: &[(u64, String, serde_json::Value)], turn_id: &str) -> Vec<String> {
    of_kind(items, "turn_finished")
        .iter()
        .filter(|p| p["turn_id"] == turn_id)
        .map(|p| p["outcome"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_turn_leaves_one_typed_outcome_in_the_history() {
    // Every outcome, `crashed` and `taken_not_answered` included: with `redo_limit` on, a
    // message the agent died on before any answer is asked again instead (issue 25; the kill
    // sweeps of tests/real/claude/exactly_once.rs).
    let fake =
        FakeSetup::start("stop_grace_s = 0.5\ncrash_loop_limit = 50\nredo_limit = 0\n").await;
    let bot = fake
        .bot(json!([
            {"mode": "normal"},
            {"mode": "die_after_replay", "code": 3},
            {"mode": "normal", "result_is_error": true},
            {"mode": "take_then_die"},
            {"mode": "normal"}
        ]))
        .await;
    let ok = send_and_wait(&bot, "one").await;
    stop_and_wait(&bot).await;
    let crashed = send_and_wait(&bot, "two").await;
    let api_error = send_and_wait(&bot, "three").await;
    stop_and_wait(&bot).await;
    let taken = send_and_wait(&bot, "four").await;
    let items = chat(&bot).await;
    for (seen, want) in [
        (&ok, "success"),
        (&crashed, "crashed"),
        (&api_error, "error"),
        (&taken, "taken_not_answered"),
    ] {
        assert_eq!(seen.outcome, want, "{seen:?}");
        assert_eq!(
            turn_outcome(&items, &seen.turn_id),
            vec![want],
            "the history of turn {} ({want}): {items:?}",
            seen.turn_id
        );
    }
    // Committed before TurnFinished: the client saw the item in the turn's signals.
    assert!(
        crashed
            .items
            .iter()
            .any(|(_, k, p)| k == "turn_finished" && p["outcome"] == "crashed")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bot_that_fails_with_messages_waiting_says_so() {
    let fake = FakeSetup::start("stop_grace_s = 0.5\ncrash_loop_limit = 2\n").await;
    let bot = fake.bot(json!([{"mode": "die_at_start", "code": 2}])).await;
    bot.send("waiting", HashMap::new()).await.unwrap();
    wait_state(&bot, "failed").await;
    let items = chat(&bot).await;
    let notes: Vec<_> = of_kind(&items, "system")
        .into_iter()
        .filter(|p| p["reason"] == "failed_with_queue")
        .collect();
    assert_eq!(notes.len(), 1, "{items:?}");
    assert_eq!(notes[0]["queued"], 1);
    assert!(notes[0]["text"].as_str().unwrap().contains("Restart"));
}

/// A fake-CLI bot working in `cwd`.
async fn bot_in(fake: &Fake, cwd: &std::path::Path) -> botvisor::dbus::client::BotProxy<'static> {
    let env_map = fake_env(
        &fake.env.home,
        &fake.state,
        json!([{"mode": "normal"}]),
        &fake.env.marker,
    );
    let path = fake
        .env
        .manager()
        .await
        .create_bot(create_options(cwd.to_str().unwrap(), &env_map))
        .await
        .unwrap();
    fake.env.bot(&path).await
}

fn method_error(e: &zbus::Error) -> (String, String) {
    match e {
        zbus::Error::MethodError(name, text, _) => {
            (name.to_string(), text.clone().unwrap_or_default())
        }
        other => panic!("not a method error: {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_to_a_bot_whose_folder_is_gone_is_refused_and_its_return_resumes_the_conversation() {
    let fake = start_fake().await;
    let cwd = fake.env.dir.path().join("project");
    std::fs::create_dir(&cwd).unwrap();
    let bot = bot_in(&fake, &cwd).await;
    assert_eq!(send_and_wait(&bot, "one").await.outcome, "success");
    let session = bot.session_id().await.unwrap();
    stop_and_wait(&bot).await;
    let items_before = chat(&bot).await.len();

    std::fs::remove_dir(&cwd).unwrap();
    let err = bot.send("two", HashMap::new()).await.unwrap_err();
    let (name, text) = method_error(&err);
    assert_eq!(name, "org.botvisor.Botvisor1.Error.Busy", "{text}");
    assert!(text.contains("working directory"), "{text}");
    assert!(text.contains(cwd.to_str().unwrap()), "{text}");
    assert!(text.contains("does not exist"), "{text}");
    let err = bot.restart(HashMap::new()).await.unwrap_err();
    assert_eq!(method_error(&err).0, "org.botvisor.Botvisor1.Error.Busy");
    // Nothing changed: no chat item, nothing queued, no launch, no error recorded.
    assert_eq!(chat(&bot).await.len(), items_before);
    assert_eq!(bot.queued_messages().await.unwrap(), 0);
    assert_eq!(bot.state().await.unwrap(), "stopped");
    assert_eq!(bot.last_error().await.unwrap(), "");
    assert_eq!(fake.launches().len(), 1);

    std::fs::create_dir(&cwd).unwrap();
    assert_eq!(send_and_wait(&bot, "three").await.outcome, "success");
    let launches = fake.launches();
    assert_eq!(launches.len(), 2, "{launches:?}");
    assert_eq!(flag(&launches[1], "--resume"), Some(session.as_str()));
    let texts: Vec<String> = fake.messages().into_iter().map(|(_, t)| t).collect();
    assert_eq!(texts, ["one", "three"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_folder_removed_under_a_running_agent_is_named_when_the_agent_cannot_come_back() {
    let fake = start_fake().await;
    let cwd = fake.env.dir.path().join("project");
    std::fs::create_dir(&cwd).unwrap();
    let bot = bot_in(&fake, &cwd).await;
    bot.hold().await.unwrap();
    assert_eq!(send_and_wait(&bot, "one").await.outcome, "success");
    let session = bot.session_id().await.unwrap();
    let mut errors = bot.receive_last_error_changed().await;

    // The folder goes, then the agent dies: the held bot tries to start it again, in vain.
    std::fs::remove_dir(&cwd).unwrap();
    let pid = bot.process_id().await.unwrap();
    // SAFETY: kill(2) on the fake agent this test's daemon started.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    let last = tokio::time::timeout(EVENT_TIMEOUT, async {
        loop {
            let text = errors.next().await.unwrap().get().await.unwrap();
            if text.contains("cannot start") {
                return text;
            }
        }
    })
    .await
    .expect("the failed start is reported");
    assert!(last.contains("working directory"), "{last}");
    assert!(last.contains(cwd.to_str().unwrap()), "{last}");
    assert!(last.contains("does not exist"), "{last}");
    assert!(
        !last.contains("fake_claude.py"),
        "the binary is not blamed: {last}"
    );
    let items = chat(&bot).await;
    let errors_seen = of_kind(&items, "error");
    assert_eq!(errors_seen.last().unwrap()["text"], last.as_str());
    assert_eq!(fake.launches().len(), 1, "no crash loop");

    std::fs::create_dir(&cwd).unwrap();
    assert_eq!(send_and_wait(&bot, "two").await.outcome, "success");
    let launches = fake.launches();
    assert_eq!(flag(&launches[1], "--resume"), Some(session.as_str()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_left_open_by_a_killed_daemon_is_closed_by_the_next() {
    let mut fake = start_fake().await;
    let bot = fake
        .bot(json!([
            {"mode": "normal", "ask": {"tool": "Write", "input_bytes": 10}},
            {"mode": "normal"}
        ]))
        .await;
    let mut prompts = bot.receive_permission_requested().await.unwrap();
    let turn = bot.send("ask me", HashMap::new()).await.unwrap();
    let request_id = tokio::time::timeout(EVENT_TIMEOUT, prompts.next())
        .await
        .expect("the agent asks")
        .unwrap()
        .args()
        .unwrap()
        .request_id
        .clone();
    fake.daemon.kill();
    fake.daemon = Daemon::start(&fake.cfg, &fake.env.conn).await;
    assert_eq!(send_and_wait(&bot, "after").await.outcome, "success");
    let items = chat(&bot).await;
    let answers: Vec<_> = of_kind(&items, "permission_answer")
        .into_iter()
        .filter(|p| p["request_id"] == request_id.as_str())
        .collect();
    assert_eq!(answers.len(), 1, "{items:?}");
    assert_eq!(answers[0]["by"], "botvisord");
    assert_eq!(answers[0]["behavior"], "deny");
    let ends: Vec<_> = of_kind(&items, "turn_finished")
        .into_iter()
        .filter(|p| p["turn_id"] == turn.as_str())
        .collect();
    assert_eq!(ends.len(), 1, "{items:?}");
}

/// A Restart clears `LastError`: the client acted on it, and a bot that works again does not
/// show an old crash loop (found by a fresh user in `botvisorctl status`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_clears_the_last_error() {
    let fake = FakeSetup::start("stop_grace_s = 0.5\ncrash_loop_limit = 2\n").await;
    let bot = fake
        .bot(json!([
            {"mode": "die_at_start", "code": 2},
            {"mode": "die_at_start", "code": 2},
            {"mode": "normal"}
        ]))
        .await;
    let mut finished = bot.receive_turn_finished().await.unwrap();
    let turn = bot.send("waiting", HashMap::new()).await.unwrap();
    wait_state(&bot, "failed").await;
    assert!(bot.last_error().await.unwrap().contains("crashed"));
    bot.restart(HashMap::new()).await.unwrap();
    let outcomes = wait_turns(&mut finished, std::slice::from_ref(&turn)).await;
    assert_eq!(outcomes, vec![(turn, "success".to_owned())]);
    assert_eq!(bot.last_error().await.unwrap(), "");
}
