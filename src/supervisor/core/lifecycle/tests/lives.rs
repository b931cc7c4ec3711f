//! Crashes, restarts, stops, lost conversations and results.

use super::*;

#[test]
fn rule_11_a_needed_agent_restarts_after_a_backoff_and_a_crash_loop_fails_the_bot() {
    let mut life = Lifecycle::default();
    let t0 = Instant::now();
    let waiting = in_flight(false);
    let first = life.crashed(t0, LIMITS, &waiting, 0, "boom");
    assert_eq!(first.backoff, Some(Duration::from_millis(250)));
    assert!(has_item(&first.effects, "system", "restart_pending"));
    assert!(life.restart_pending);
    life.started();
    assert!(!life.restart_pending);
    life.crashed(t0 + Duration::from_secs(1), LIMITS, &waiting, 0, "boom");
    let loop_ = life.crashed(t0 + Duration::from_secs(2), LIMITS, &waiting, 0, "boom");
    assert!(has_item(&loop_.effects, "error", "crash_loop"));
    assert!(has_item(&loop_.effects, "system", "failed_with_queue"));
    assert_eq!(states(&loop_.effects), [State::Failed]);
    assert_eq!(loop_.backoff, None);
}

#[test]
fn rule_11_an_agent_nobody_needs_is_not_restarted_after_a_crash() {
    let mut life = Lifecycle::default();
    let none = Turns::default();
    assert_eq!(
        life.crashed(Instant::now(), LIMITS, &none, 0, "boom"),
        Crashed::default()
    );
    assert!(!life.restart_pending);
    let held = life.crashed(Instant::now(), LIMITS, &none, 1, "boom");
    assert!(held.backoff.is_some(), "a bot a client holds is restarted");
}

#[test]
fn rule_11_a_succeeded_turn_restarts_the_backoff_from_its_first_step() {
    let mut life = Lifecycle::default();
    let t0 = Instant::now();
    let none = Turns::default();
    life.crashed(t0, LIMITS, &none, 1, "boom");
    life.crashed(t0, LIMITS, &none, 1, "boom");
    assert_eq!(
        life.turn_result(&mut resumed(true), &none, &result(true), None),
        [Effect::State(State::Idle)]
    );
    let next = life.crashed(t0, LIMITS, &none, 1, "boom");
    assert_eq!(next.backoff, Some(Duration::from_millis(250)));
}

#[test]
fn a_failure_restarting_cannot_fix_fails_the_bot_instead_of_a_crash() {
    let mut life = Lifecycle::default();
    let mut run = resumed(true);
    let mut turns = in_flight(true);
    turns.result(ResultOutcome::Error, &serde_json::json!({}), None);
    life.turn_result(
        &mut run,
        &turns,
        &result(false),
        Some("authentication error: 401".into()),
    );
    let steps = life.exited(
        &mut run,
        &mut turns,
        &exit(code(1), Some("s"), false),
        |_| false,
        |_| None,
    );
    assert!(has_item(&steps.now, "error", "fatal"));
    assert!(has_item(&steps.now, "system", "failed_with_queue"));
    assert_eq!(states(&steps.now), [State::Failed]);
    assert_eq!(steps.crashed, None);
}

#[test]
fn the_stderr_of_a_failure_restarting_cannot_fix_fails_the_bot() {
    let mut life = Lifecycle::default();
    let mut e = exit(code(1), Some("s"), false);
    e.stderr = "Invalid API key";
    e.stderr_fatal = Some("authentication");
    let steps = life.exited(
        &mut resumed(true),
        &mut Turns::default(),
        &e,
        |_| false,
        |_| None,
    );
    assert!(has_item(&steps.now, "error", "fatal"));
    assert_eq!(states(&steps.now), [State::Failed]);
}

#[test]
fn a_fatal_result_of_one_process_does_not_fail_the_crash_of_the_next() {
    let mut life = Lifecycle::default();
    let none = Turns::default();
    let mut first = resumed(true);
    life.turn_result(
        &mut first,
        &none,
        &result(false),
        Some("authentication error: 401".into()),
    );
    // That process was stopped (an idle stop, a Stop, a Restart); the next one crashes.
    Lifecycle::stopped(
        &first,
        &mut Turns::default(),
        StopReason::Idle,
        Some("s"),
        |_| false,
        |_| None,
        0,
    );
    life.restart(true, RestartMode::Resume, Some("s"));
    let steps = life.exited(
        &mut resumed(true),
        &mut Turns::default(),
        &exit(killed(), Some("s"), false),
        |_| false,
        |_| None,
    );
    assert!(has_item(&steps.now, "error", "crash"));
    assert!(steps.crashed.is_some());
}

#[test]
fn a_turn_result_leaves_the_bot_busy_while_a_message_is_in_flight_or_it_is_stopping() {
    let mut life = Lifecycle::default();
    assert!(
        life.turn_result(&mut resumed(true), &in_flight(false), &result(true), None)
            .is_empty()
    );
    let mut stopping = Run {
        stopping: true,
        ..resumed(true)
    };
    assert!(
        life.turn_result(&mut stopping, &Turns::default(), &result(true), None)
            .is_empty()
    );
}

#[test]
fn rule_4_a_lost_conversation_is_forgotten_once_and_its_message_waits_again() {
    let mut run = resumed(false);
    let mut turns = in_flight(false);
    let (effects, stop) = Lifecycle::conversation_lost(&mut run, &mut turns, "s").unwrap();
    assert!(stop);
    assert!(forgets(&effects));
    assert!(has_item(&effects, "system", "conversation_not_found"));
    assert_eq!(
        turns
            .queue
            .iter()
            .map(|t| t.id.as_str())
            .collect::<Vec<_>>(),
        ["a", "b"],
        "its message first, never lost"
    );
    assert!(!run.usable(), "the process takes no message any more");
    assert!(Lifecycle::conversation_lost(&mut run, &mut turns, "s").is_none());
}

#[test]
fn rule_4_a_conversation_lost_while_stopping_is_not_stopped_again() {
    let mut run = Run {
        stopping: true,
        ..resumed(false)
    };
    let (_, stop) = Lifecycle::conversation_lost(&mut run, &mut Turns::default(), "s").unwrap();
    assert!(!stop);
}

#[test]
fn rule_4_the_exit_of_a_process_that_lost_its_conversation_is_not_a_crash() {
    let mut life = Lifecycle::default();
    let mut run = resumed(false);
    let mut turns = in_flight(false);
    Lifecycle::conversation_lost(&mut run, &mut turns, "s");
    let steps = life.exited(
        &mut run,
        &mut turns,
        &exit(code(1), None, false),
        |_| false,
        |_| None,
    );
    assert_eq!(steps.crashed, None);
    assert!(items(&steps.now).is_empty());
    assert_eq!(states(&steps.now), [State::Stopped]);
    assert_eq!(life.crashes.len(), 0);
}

#[test]
fn rule_9_a_process_that_exits_while_being_stopped_is_released_then_stopped() {
    let mut life = Lifecycle::default();
    let mut turns = in_flight(true);
    let mut run = Run {
        stopping: true,
        ..resumed(true)
    };
    let steps = life.exited(
        &mut run,
        &mut turns,
        &exit(killed(), Some("s"), true),
        |_| false,
        |_| None,
    );
    assert_eq!(
        finished(&steps.now),
        [("a".into(), TurnOutcome::Interrupted)]
    );
    assert_eq!(steps.clean_up.as_str(), "late exit");
    assert_eq!(steps.then, [Effect::State(State::Stopped)]);
    assert_eq!(steps.crashed, None);
}

#[test]
fn rule_8_a_stop_ends_a_begun_turn_interrupted_and_requeues_one_not_taken() {
    let mut turns = in_flight(true);
    let effects = Lifecycle::stopped(
        &resumed(true),
        &mut turns,
        StopReason::Stop,
        Some("s"),
        |_| false,
        |_| None,
        0,
    );
    assert_eq!(finished(&effects), [("a".into(), TurnOutcome::Interrupted)]);
    assert!(!effects.contains(&Effect::Park(false)));
    let mut turns = in_flight(false);
    let effects = Lifecycle::stopped(
        &resumed(false),
        &mut turns,
        StopReason::Stop,
        Some("s"),
        |_| false,
        |_| None,
        0,
    );
    assert!(finished(&effects).is_empty());
    assert_eq!(turns.queue.front().map(|t| t.id.as_str()), Some("a"));
}

#[test]
fn a_turn_a_delete_ended_says_the_bot_was_deleted() {
    // Told in the turn's own end, for a client that can no longer ask botvisord (it may be
    // shutting down right after the Delete).
    for (why, reason) in [
        (StopReason::Delete, "deleted"),
        (StopReason::Stop, "stopped"),
    ] {
        let effects = Lifecycle::stopped(
            &resumed(true),
            &mut in_flight(true),
            why,
            Some("s"),
            |_| false,
            |_| None,
            0,
        );
        let ended = crate::supervisor::core::effect::writes(&effects)
            .find_map(|w| match w {
                Write::Chat { kind, payload, .. } if kind == "turn_finished" => {
                    serde_json::from_str::<serde_json::Value>(payload).ok()
                }
                _ => None,
            })
            .expect("the turn ends");
        assert_eq!(ended["reason"], reason, "{why:?}");
    }
}

#[test]
fn rule_3_a_stopped_process_records_the_session_it_reported_once_its_transcript_exists() {
    let mut run = resumed(true);
    run.reported(Some("t".into()), Some("s"));
    let effects = Lifecycle::stopped(
        &run,
        &mut Turns::default(),
        StopReason::Idle,
        Some("s"),
        |id| id == "t",
        |_| None,
        0,
    );
    assert!(matches!(&effects[0], Effect::Commit { writes, .. }
        if writes == &[Write::Session(Some("t".into()))]));
}

#[test]
fn rule_4_the_stop_of_a_lost_conversation_lets_its_message_go_to_a_new_one() {
    let run = Run {
        lost: true,
        ..resumed(false)
    };
    let effects = Lifecycle::stopped(
        &run,
        &mut in_flight(false),
        StopReason::Replaced,
        None,
        |_| false,
        |_| None,
        0,
    );
    assert!(effects.contains(&Effect::Park(false)));
}

#[test]
fn a_restart_clears_the_crash_count_and_a_fresh_one_forgets_the_conversation_first() {
    let mut life = Lifecycle {
        force_resume: Some("x".into()),
        in_use_retried: true,
        ..Lifecycle::default()
    };
    life.crashed(Instant::now(), LIMITS, &Turns::default(), 1, "boom");
    let forget = life.restart(true, RestartMode::Fresh, Some("s")).unwrap();
    assert!(has_item(&forget, "system", "fresh_restart"));
    assert!(forgets(&forget));
    let then = life.restart_recorded(true);
    assert!(life.crashes.is_empty());
    assert_eq!((life.force_resume, life.in_use_retried), (None, false));
    assert!(
        matches!(&then[0], Effect::Commit { writes, .. }
        if writes == &[Write::LastError(String::new())]),
        "{then:?}"
    );
    assert_eq!(
        then[1..],
        [
            Effect::Park(false),
            Effect::State(State::Stopped),
            Effect::Start
        ]
    );
    let kept = Lifecycle::default()
        .restart(true, RestartMode::Resume, Some("s"))
        .unwrap();
    assert!(kept.is_empty(), "nothing to forget");
    let nothing = Lifecycle::default()
        .restart(true, RestartMode::Fresh, None)
        .unwrap();
    assert!(nothing.is_empty(), "nothing recorded, nothing to forget");
}

#[test]
fn rule_5_a_fresh_restart_whose_forget_was_not_recorded_does_not_start() {
    let mut life = Lifecycle::default();
    life.crashed(Instant::now(), LIMITS, &Turns::default(), 1, "boom");
    let then = life.restart_recorded(false);
    assert!(!then.contains(&Effect::Start));
    assert!(
        then.contains(&Effect::Park(true)),
        "parked: no pump may resume the old conversation"
    );
}

#[test]
fn rule_9_a_stop_that_gave_up_fails_the_bot_and_says_what_waits() {
    let effects = Lifecycle::stop_gave_up(&mut in_flight(false), Some("s"), |_| false);
    assert!(has_item(&effects, "system", "failed_with_queue"));
    assert_eq!(states(&effects), [State::Failed]);
    assert_eq!(
        Lifecycle::stop_gave_up(&mut Turns::default(), None, |_| false),
        [Effect::State(State::Failed)]
    );
}

#[test]
fn rule_9_a_stop_that_gave_up_ends_the_running_turn_and_says_why() {
    let mut turns = in_flight(true);
    let effects = Lifecycle::stop_gave_up(&mut turns, Some("s"), |_| false);
    let ended = crate::supervisor::core::effect::finished_turns(&effects);
    assert_eq!(ended, [("a".to_owned(), TurnOutcome::Interrupted)]);
    let said = crate::supervisor::core::effect::writes(&effects).any(|w| {
        matches!(w, Write::Chat { kind, payload, .. }
            if kind == "system" && payload.contains("survived SIGKILL"))
    });
    assert!(said, "{effects:?}");
    assert_eq!(states(&effects), [State::Failed]);
    assert_eq!(turns.waiting(), 1);
    // A message not yet replayed waits again, before the bot fails.
    let mut turns = in_flight(false);
    Lifecycle::stop_gave_up(&mut turns, Some("s"), |_| false);
    assert_eq!(turns.waiting(), 2);
}

#[test]
fn rule_2_an_id_refused_as_in_use_is_resumed_without_a_transcript_check_once() {
    let mut life = Lifecycle {
        force_resume: Some("x".into()),
        ..Lifecycle::default()
    };
    let first = life.start_decision(
        Some("s"),
        true,
        |_| panic!("not asked"),
        || SessionStart::New("n".into()),
        None,
    );
    assert_eq!(first.start, SessionStart::Resume("x".into()));
    let next = life.start_decision(
        Some("s"),
        true,
        |_| false,
        || SessionStart::New("n".into()),
        None,
    );
    assert_eq!(next.start, SessionStart::New("n".into()));
    assert!(
        next.forget.is_some(),
        "the missing transcript's record is forgotten"
    );
}

#[test]
fn only_a_lost_conversations_own_stop_unparks_the_bot() {
    for (why, lost) in [(StopReason::Replaced, false), (StopReason::Stop, true)] {
        let run = Run {
            lost,
            ..resumed(false)
        };
        let effects = Lifecycle::stopped(
            &run,
            &mut in_flight(false),
            why,
            None,
            |_| false,
            |_| None,
            0,
        );
        assert!(!effects.contains(&Effect::Park(false)), "{why:?} {lost}");
    }
}

#[test]
fn rule_7_a_restart_beside_a_root_that_survived_sigkill_changes_nothing() {
    let mut life = Lifecycle {
        force_resume: Some("x".into()),
        ..Lifecycle::default()
    };
    assert_eq!(life.restart(false, RestartMode::Fresh, Some("s")), None);
    assert_eq!(life.force_resume.as_deref(), Some("x"));
}

#[test]
fn a_stop_leaves_a_failed_bot_failed() {
    assert!(Lifecycle::stop_ended(State::Failed).is_empty());
    assert_eq!(
        Lifecycle::stop_ended(State::Stopping),
        [Effect::State(State::Stopped)]
    );
}

#[test]
fn rule_5_a_fresh_restart_whose_forget_failed_never_resumes_the_old_conversation() {
    let mut life = Lifecycle::default();
    life.restart(true, RestartMode::Fresh, Some("s")).unwrap();
    life.restart_recorded(false);
    // A later Send starts the agent: a new conversation, and the old one forgotten then.
    let start = life.start_decision(
        Some("s"),
        true,
        |_| true,
        || SessionStart::New("n".into()),
        None,
    );
    assert_eq!(start.start, SessionStart::New("n".into()));
    assert_eq!(
        start.forget,
        Some(("s".into(), crate::runtime::ForgetReason::FreshRestart))
    );
    life.start_forgot(false);
    assert!(life.forget_pending.is_some(), "until it is on record");
    life.start_forgot(true);
    let next = life.start_decision(
        Some("n"),
        true,
        |_| true,
        || SessionStart::New("m".into()),
        None,
    );
    assert_eq!(next.start, SessionStart::Resume("n".into()));
}

#[test]
fn issue_25_a_fork_restart_continues_one_start_in_a_copy_and_leaves_the_conversation() {
    let mut life = Lifecycle::default();
    let effects = life
        .restart(true, RestartMode::Fork, Some("s"))
        .expect("released");
    assert!(has_item(&effects, "system", "fork"));
    assert!(!forgets(&effects), "the conversation is left as it is");
    let new = || SessionStart::New("n".into());
    let d = life.start_decision(Some("s"), true, |_| true, new, None);
    assert_eq!((d.start, d.fork), (SessionStart::Resume("s".into()), true));
    let d = life.start_decision(Some("s"), true, |_| true, new, None);
    assert!(!d.fork, "one start only");
    // Nothing recorded: nothing to fork.
    let mut life = Lifecycle::default();
    assert_eq!(life.restart(true, RestartMode::Fork, None), Some(vec![]));
    assert!(!life.start_decision(None, true, |_| true, new, None).fork);
}
