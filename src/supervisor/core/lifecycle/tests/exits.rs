//! What an exit means.

use super::*;
use crate::runtime::{Cut, TakenTurn};

#[test]
fn rule_11_a_crash_ends_the_running_turn_at_once_and_says_why() {
    let mut life = Lifecycle::default();
    let mut turns = in_flight(true);
    // Part of an answer was shown: it is not asked again (issue 25).
    turns.said_by_cli("assistant", r#"{"text":"half"}"#.into());
    let mut run = resumed(true);
    let mut e = exit(killed(), Some("s"), true);
    e.stderr = "segfault";
    let steps = life.exited(&mut run, &mut turns, &e, |_| false, |_| None);
    assert_eq!(finished(&steps.now), [("a".into(), TurnOutcome::Crashed)]);
    assert!(has_item(&steps.now, "error", "crash"));
    assert_eq!(states(&steps.now), [State::Stopped]);
    assert_eq!(steps.clean_up.as_str(), "crash");
    let text = steps.crashed.expect("a crash");
    assert!(text.contains("segfault"), "{text}");
    assert_eq!(turns.queue.len(), 1, "the waiting message stays queued");
    assert!(
        !forgets(&steps.now),
        "a crash never gives a conversation up"
    );
}

#[test]
fn a_clean_exit_with_nothing_in_flight_stops_the_bot() {
    let mut life = Lifecycle::default();
    let steps = life.exited(
        &mut resumed(true),
        &mut Turns::default(),
        &exit(code(0), Some("s"), false),
        |_| false,
        |_| None,
    );
    assert!(items(&steps.now).is_empty());
    assert_eq!(states(&steps.now), [State::Stopped]);
    assert_eq!((steps.clean_up.as_str(), steps.crashed), ("exit", None));
}

#[test]
fn a_new_conversation_refused_as_in_use_is_resumed_once() {
    let mut life = Lifecycle::default();
    let mut turns = in_flight(false);
    let mut run = Run::new(SessionStart::New("x".into()));
    let mut e = exit(code(1), None, true);
    e.stderr_in_use = Some("x".into());
    let steps = life.exited(&mut run, &mut turns, &e, |_| false, |_| None);
    assert_eq!(life.force_resume.as_deref(), Some("x"));
    assert_eq!(steps.crashed, None);
    assert_eq!(turns.queue.len(), 2, "the message waits for the resume");
    // Refused again: it counts as a crash (with its backoff), and the message, never taken,
    // still waits.
    let mut run = Run::new(SessionStart::Resume("x".into()));
    turns.deliver("x", std::time::SystemTime::UNIX_EPOCH);
    let steps = life.exited(&mut run, &mut turns, &e, |_| false, |_| None);
    assert!(finished(&steps.now).is_empty());
    assert!(steps.crashed.is_some());
    assert_eq!(turns.queue.front().map(|t| t.id.as_str()), Some("a"));
}

#[test]
fn rule_4_a_resumed_cli_that_fails_its_turn_and_exits_at_once_gives_its_conversation_up() {
    let mut life = Lifecycle::default();
    let mut run = resumed(false);
    life.turn_result(&mut run, &Turns::default(), &result(false), None);
    assert!(run.refused);
    let mut e = exit(code(1), Some("s"), false);
    e.lived = Duration::from_secs(1);
    let steps = life.exited(&mut run, &mut Turns::default(), &e, |_| false, |_| None);
    assert!(forgets(&steps.now));
    assert!(has_item(&steps.now, "system", "died_after_launch"));
}

#[test]
fn rule_4_a_resumed_cli_that_exits_at_once_without_a_failed_turn_keeps_its_conversation() {
    // A broken install, `node` not found (127), a wrapper that fails: a crash, not a refusal.
    for c in [1, 7, 127] {
        let mut e = exit(code(c), Some("s"), false);
        e.lived = Duration::from_secs(1);
        let steps = Lifecycle::default().exited(
            &mut resumed(false),
            &mut Turns::default(),
            &e,
            |_| false,
            |_| None,
        );
        assert!(!forgets(&steps.now), "exit {c}");
        assert!(steps.crashed.is_some());
    }
}

#[test]
fn rule_4_a_death_by_a_signal_a_turn_begun_or_a_long_life_keeps_the_conversation() {
    for (status, began, lived) in [
        (killed(), false, 1),
        (code(1), true, 1),
        (code(1), false, 60),
    ] {
        let mut life = Lifecycle::default();
        let mut e = exit(status, Some("s"), false);
        e.lived = Duration::from_secs(lived);
        let steps = life.exited(
            &mut Run {
                refused: true,
                ..resumed(began)
            },
            &mut Turns::default(),
            &e,
            |_| false,
            |_| None,
        );
        assert!(!forgets(&steps.now), "{status} began {began} lived {lived}");
    }
}

#[test]
fn rule_8_a_message_the_conversation_holds_is_not_sent_again_after_a_crash() {
    let mut life = Lifecycle::default();
    let mut turns = in_flight(false);
    let mut e = exit(killed(), Some("s"), true);
    e.lived = Duration::from_secs(1);
    let steps = life.exited(
        &mut resumed(false),
        &mut turns,
        &e,
        |_| false,
        |_| Some(TakenTurn::bare()),
    );
    assert_eq!(
        finished(&steps.now),
        [("a".into(), TurnOutcome::TakenNotAnswered)]
    );
    assert!(
        !forgets(&steps.now),
        "a taken message keeps its conversation"
    );
    assert_eq!(turns.queue.len(), 1);
}

#[test]
fn rule_3_a_reported_session_is_recorded_at_the_exit_once_its_transcript_exists() {
    let mut run = resumed(true);
    run.reported(Some("t".into()), Some("s"));
    assert_eq!(run.reported_session.as_deref(), Some("t"));
    let steps = Lifecycle::default().exited(
        &mut run.clone(),
        &mut Turns::default(),
        &exit(code(0), Some("s"), false),
        |id| id == "t",
        |_| None,
    );
    assert!(matches!(&steps.now[0], Effect::Commit { writes, .. }
        if writes == &[Write::Session(Some("t".into()))]));
    let steps = Lifecycle::default().exited(
        &mut run,
        &mut Turns::default(),
        &exit(code(0), Some("s"), false),
        |_| false,
        |_| None,
    );
    assert!(
        !steps.now.iter().any(|e| matches!(e, Effect::Commit { .. })),
        "no transcript, no record"
    );
}

#[test]
fn rule_9_a_late_exit_sends_a_message_not_taken_again() {
    let mut life = Lifecycle::default();
    let mut turns = in_flight(false);
    let mut run = Run {
        stopping: true,
        ..resumed(false)
    };
    let steps = life.exited(
        &mut run,
        &mut turns,
        &exit(killed(), Some("s"), true),
        |_| false,
        |_| None,
    );
    assert!(finished(&steps.now).is_empty());
    assert_eq!(turns.queue.front().map(|t| t.id.as_str()), Some("a"));
}

#[test]
fn a_crash_with_nothing_on_stderr_says_only_how_it_ended() {
    let steps = Lifecycle::default().exited(
        &mut resumed(true),
        &mut Turns::default(),
        &exit(killed(), Some("s"), false),
        |_| false,
        |_| None,
    );
    let text = steps.crashed.unwrap();
    assert!(!text.contains("Its last output"), "{text}");
}

#[test]
fn a_turn_begun_then_refused_as_in_use_again_ends_error() {
    let mut life = Lifecycle {
        in_use_retried: true,
        ..Lifecycle::default()
    };
    let mut run = Run {
        in_use: Some("x".into()),
        ..resumed(true)
    };
    let mut turns = in_flight(true);
    let steps = life.exited(
        &mut run,
        &mut turns,
        &exit(code(1), Some("s"), true),
        |_| false,
        |_| None,
    );
    assert_eq!(finished(&steps.now), [("a".into(), TurnOutcome::Error)]);
}

#[test]
fn an_id_in_use_in_the_stderr_counts_only_before_a_turn_began_and_not_while_stopping() {
    for run in [
        resumed(true),
        Run {
            stopping: true,
            ..resumed(false)
        },
    ] {
        let mut life = Lifecycle::default();
        let mut run = run;
        let mut e = exit(code(1), Some("s"), false);
        e.stderr_in_use = Some("x".into());
        life.exited(&mut run, &mut Turns::default(), &e, |_| false, |_| None);
        assert_eq!(life.force_resume, None, "{run:?}");
    }
}

#[test]
fn rule_4_an_early_exit_does_not_forget_a_conversation_recorded_since() {
    let mut life = Lifecycle::default();
    let mut e = exit(code(1), Some("other"), false);
    e.lived = Duration::from_secs(1);
    let steps = life.exited(
        &mut Run {
            refused: true,
            ..resumed(false)
        },
        &mut Turns::default(),
        &e,
        |_| false,
        |_| None,
    );
    assert!(!forgets(&steps.now));
}

fn at(drops: &str) -> Cut {
    Cut::At {
        at: "parent".into(),
        drops: drops.into(),
    }
}

/// What a transcript holds of a message taken and not answered, with where a resume cuts it.
fn unanswered(drops: &str) -> TakenTurn {
    TakenTurn {
        cut: Some(at(drops)),
        ..TakenTurn::bare()
    }
}

#[test]
fn issue_25_a_message_taken_and_unanswered_when_the_agent_died_is_asked_again_without_the_attempt()
{
    for began in [false, true] {
        let mut life = Lifecycle::default();
        let mut turns = in_flight(began);
        let steps = life.exited(
            &mut resumed(began),
            &mut turns,
            &exit(killed(), Some("s"), true),
            |_| false,
            |_| Some(unanswered("u1")),
        );
        assert_eq!(finished(&steps.now), [], "began {began}: no end, a redo");
        let head = turns.queue.front().unwrap();
        assert_eq!(
            (head.id.as_str(), head.redos, head.cut.clone()),
            ("a", 1, Some(at("u1"))),
            "began {began}: first again, with its cut"
        );
        assert!(
            crate::supervisor::core::effect::writes(&steps.now).any(|w| *w
                == Write::TurnRedo {
                    turn_id: "a".into(),
                    cut: Some(at("u1"))
                }),
            "began {began}: on record"
        );
        assert!(steps.crashed.is_some(), "a crash is still a crash");
        // The next start resumes without the attempt, and that process delivers it with its cut.
        let d = life.start_decision(
            Some("s"),
            true,
            |_| true,
            || SessionStart::New("n".into()),
            turns.queue.front().unwrap().cut.as_ref(),
        );
        assert_eq!(
            (d.start.clone(), d.cut.clone()),
            (SessionStart::Resume("s".into()), Some(at("u1")))
        );
        let (sent, effects) = turns
            .deliver_cut("s", std::time::SystemTime::UNIX_EPOCH, d.cut.as_ref())
            .unwrap();
        assert_eq!(sent.cut, Some(at("u1")));
        assert!(
            !crate::supervisor::core::effect::writes(&effects)
                .any(|w| matches!(w, Write::TurnUncut(_)))
        );
    }
}

#[test]
fn issue_25_a_message_asked_again_to_the_limit_work_begun_or_a_whole_answer_is_not_asked_again() {
    // At the limit: unanswered, as before.
    let mut turns = Turns::default();
    turns.queue(QueuedTurn {
        redos: 3,
        ..turn("a")
    });
    turns.deliver("s", std::time::SystemTime::UNIX_EPOCH);
    let steps = Lifecycle::default().exited(
        &mut resumed(false),
        &mut turns,
        &exit(killed(), Some("s"), true),
        |_| false,
        |_| Some(unanswered("u")),
    );
    assert_eq!(
        finished(&steps.now),
        [("a".into(), TurnOutcome::TakenNotAnswered)]
    );
    // A tool was called: the turn that began ends crashed.
    let mut turns = in_flight(true);
    let steps = Lifecycle::default().exited(
        &mut resumed(true),
        &mut turns,
        &exit(killed(), Some("s"), true),
        |_| false,
        |_| {
            Some(TakenTurn {
                tool_called: true,
                ..unanswered("u")
            })
        },
    );
    assert_eq!(finished(&steps.now), [("a".into(), TurnOutcome::Crashed)]);
    // The whole answer is in the transcript: read back, success.
    let mut turns = in_flight(true);
    let steps = Lifecycle::default().exited(
        &mut resumed(true),
        &mut turns,
        &exit(killed(), Some("s"), true),
        |_| false,
        |_| {
            Some(TakenTurn {
                answered: true,
                answer: vec![crate::runtime::ChatPayload {
                    kind: "assistant",
                    payload: serde_json::json!({"text": "done"}),
                }],
                ..unanswered("u")
            })
        },
    );
    assert_eq!(finished(&steps.now), [("a".into(), TurnOutcome::Success)]);
    assert_eq!(turns.queue.len(), 1, "b still waits");
    // redo_limit 0: never.
    let mut turns = in_flight(false);
    let mut e = exit(killed(), Some("s"), true);
    e.redo_limit = 0;
    let steps = Lifecycle::default().exited(
        &mut resumed(false),
        &mut turns,
        &e,
        |_| false,
        |_| Some(unanswered("u")),
    );
    assert_eq!(
        finished(&steps.now),
        [("a".into(), TurnOutcome::TakenNotAnswered)]
    );
}

#[test]
fn issue_25_a_cut_the_cli_refuses_ends_the_turn_unanswered_and_is_no_crash() {
    let mut life = Lifecycle::default();
    let mut turns = Turns::default();
    turns.queue(QueuedTurn {
        redos: 1,
        cut: Some(at("u")),
        ..turn("a")
    });
    turns.queue(turn("b"));
    turns.deliver_cut("s", std::time::SystemTime::UNIX_EPOCH, Some(&at("u")));
    let mut run = Run::with_cut(SessionStart::Resume("s".into()), Some(at("u")));
    let mut e = exit(code(1), Some("s"), true);
    e.stderr = "Resume rejected by --resume-drops-turn: the range holds another turn";
    let steps = life.exited(&mut run, &mut turns, &e, |_| true, |_| None);
    assert_eq!(
        finished(&steps.now),
        [("a".into(), TurnOutcome::TakenNotAnswered)]
    );
    assert!(steps.crashed.is_none(), "not a crash");
    assert!(!forgets(&steps.now), "the conversation is kept");
    assert_eq!(turns.queue.front().unwrap().id, "b");
    assert_eq!(turns.queue.front().unwrap().cut, None);
}

#[test]
fn issue_25_a_cut_a_running_cli_refuses_ends_the_turn_unanswered_and_the_process_goes_on() {
    let before = Cut::BeforeTurn {
        turn_id: "x".into(),
    };
    let mut turns = Turns::default();
    turns.queue(QueuedTurn {
        redos: 1,
        cut: Some(before.clone()),
        ..turn("a")
    });
    turns.queue(turn("b"));
    let mut run = Run::with_cut(SessionStart::Resume("s".into()), Some(before));
    let effects = Lifecycle::cut_refused(
        &mut run,
        &mut turns,
        "thread/revert: thread/revert only supports paginated threads",
    );
    assert_eq!(
        finished(&effects),
        [("a".into(), TurnOutcome::TakenNotAnswered)]
    );
    assert!(has_item(&effects, "system", "cut_refused"));
    assert!(states(&effects).is_empty(), "the process goes on");
    assert!(!forgets(&effects), "the conversation is kept");
    assert_eq!(run.cut, None);
    assert!(run.usable());
    assert_eq!(turns.queue.front().unwrap().id, "b");
}

#[test]
fn issue_25_a_message_whose_cut_another_process_delivers_goes_uncut() {
    let mut turns = Turns::default();
    turns.queue(QueuedTurn {
        redos: 1,
        cut: Some(at("u")),
        ..turn("a")
    });
    let (sent, effects) = turns
        .deliver_cut("new", std::time::SystemTime::UNIX_EPOCH, None)
        .unwrap();
    assert_eq!(sent.cut, None);
    assert!(
        crate::supervisor::core::effect::writes(&effects)
            .any(|w| *w == Write::TurnUncut("a".into()))
    );
}

#[test]
fn issue_25_a_begun_turn_the_conversation_never_kept_and_nothing_shown_is_asked_again_uncut() {
    let mut life = Lifecycle::default();
    let mut turns = in_flight(true);
    let steps = life.exited(
        &mut resumed(true),
        &mut turns,
        &exit(killed(), Some("s"), true),
        |_| false,
        |_| None,
    );
    assert_eq!(finished(&steps.now), []);
    let head = turns.queue.front().unwrap();
    assert_eq!(
        (head.id.as_str(), head.redos, head.cut.clone()),
        ("a", 1, None)
    );
    // A tool call shown: it ends crashed.
    let mut turns = in_flight(true);
    turns.said_by_cli("tool_use", r#"{"id":"t","name":"Bash"}"#.into());
    let steps = Lifecycle::default().exited(
        &mut resumed(true),
        &mut turns,
        &exit(killed(), Some("s"), true),
        |_| false,
        |_| None,
    );
    assert_eq!(finished(&steps.now), [("a".into(), TurnOutcome::Crashed)]);
    // A tool's permission asked: the same.
    let mut turns = in_flight(true);
    turns.asked_for_a_tool();
    let steps = Lifecycle::default().exited(
        &mut resumed(true),
        &mut turns,
        &exit(killed(), Some("s"), true),
        |_| false,
        |_| None,
    );
    assert_eq!(finished(&steps.now), [("a".into(), TurnOutcome::Crashed)]);
}
