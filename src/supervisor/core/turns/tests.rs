//! The rules of turns and delivery, case by case, with no bus, database or process.

use super::*;
use crate::runtime::ResultOutcome;

fn turn(id: &str) -> QueuedTurn {
    QueuedTurn {
        id: id.to_owned(),
        text: format!("text of {id}"),
        ..QueuedTurn::default()
    }
}

fn queued(ids: &[&str]) -> Turns {
    let mut t = Turns::default();
    for id in ids {
        t.queue(turn(id));
    }
    t
}

fn commits(effects: &[Effect]) -> Vec<(&Vec<Write>, &Vec<Publish>)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Commit { writes, publish } => Some((writes, publish)),
            _ => None,
        })
        .collect()
}

fn chat_kinds(writes: &[Write]) -> Vec<&str> {
    writes
        .iter()
        .filter_map(|w| match w {
            Write::Chat { kind, .. } => Some(kind.as_str()),
            _ => None,
        })
        .collect()
}

fn no_transcript(_: &str) -> bool {
    false
}

#[test]
fn rule_7_messages_are_delivered_one_at_a_time_in_the_order_sent() {
    let mut t = queued(&["a", "b"]);
    let (first, _) = t.deliver("s", std::time::SystemTime::UNIX_EPOCH).unwrap();
    assert_eq!(first.id, "a");
    assert!(
        t.deliver("s", std::time::SystemTime::UNIX_EPOCH).is_none(),
        "one message in flight at a time"
    );
    t.replayed("s", Some("s"), Some("s"), no_transcript)
        .unwrap();
    t.result(ResultOutcome::Success, &json!({"subtype": "success"}), None);
    assert_eq!(
        t.deliver("s", std::time::SystemTime::UNIX_EPOCH)
            .unwrap()
            .0
            .id,
        "b"
    );
}

#[test]
fn rule_8_where_a_message_goes_is_committed_before_it_is_written() {
    let mut t = queued(&["a"]);
    // Written at 1.0015 s past the epoch: kept, as the table keeps it, to the millisecond.
    let now = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_micros(1_001_500);
    let (_, effects) = t.deliver("s", now).unwrap();
    let c = commits(&effects);
    assert_eq!(
        c[0].0,
        &vec![Write::Delivery {
            turn_id: "a".into(),
            session_id: "s".into(),
            at: std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_millis(1001),
        }]
    );
    assert_eq!(
        t.inflight.as_ref().unwrap().written,
        std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_millis(1001)
    );
}

#[test]
fn rule_8_a_message_sent_twice_by_recovery_and_a_client_is_queued_once() {
    let mut t = queued(&["a"]);
    t.queue(turn("a"));
    assert_eq!(t.queue.len(), 1);
    t.deliver("s", std::time::SystemTime::UNIX_EPOCH);
    t.queue(turn("a"));
    assert!(t.queue.is_empty(), "in flight counts as known");
}

#[test]
fn rule_3_the_session_is_recorded_when_the_turn_begins_not_before() {
    let mut t = queued(&["a"]);
    let (_, effects) = t.deliver("new", std::time::SystemTime::UNIX_EPOCH).unwrap();
    assert!(
        !commits(&effects)[0]
            .0
            .iter()
            .any(|w| matches!(w, Write::Session(_))),
        "nothing is recorded at delivery"
    );
    let r = t.replayed("new", Some("new"), None, no_transcript).unwrap();
    let c = commits(&r.effects);
    assert!(c[0].0.contains(&Write::Session(Some("new".into()))));
    assert!(c[0].0.contains(&Write::TurnRunning("a".into())));
    assert_eq!(c[0].1, &vec![Publish::SessionId(Some("new".into()))]);
}

#[test]
fn rule_3_a_session_already_recorded_is_not_written_again() {
    let mut t = queued(&["a"]);
    t.deliver("s", std::time::SystemTime::UNIX_EPOCH);
    let r = t
        .replayed("s", Some("s"), Some("s"), no_transcript)
        .unwrap();
    assert!(
        !commits(&r.effects)[0]
            .0
            .iter()
            .any(|w| matches!(w, Write::Session(_)))
    );
}

#[test]
fn rule_3_another_reported_id_waits_for_its_transcript() {
    let mut t = queued(&["a"]);
    t.deliver("launched", std::time::SystemTime::UNIX_EPOCH);
    let r = t
        .replayed("launched", Some("other"), None, no_transcript)
        .unwrap();
    assert_eq!(r.reported_later.as_deref(), Some("other"));
    assert!(
        commits(&r.effects)[0]
            .0
            .contains(&Write::Session(Some("launched".into())))
    );
}

#[test]
fn rule_3_another_reported_id_with_a_transcript_is_recorded() {
    let mut t = queued(&["a"]);
    t.deliver("launched", std::time::SystemTime::UNIX_EPOCH);
    let r = t
        .replayed("launched", Some("forked"), None, |id| id == "forked")
        .unwrap();
    assert_eq!(r.reported_later, None);
    assert!(
        commits(&r.effects)[0]
            .0
            .contains(&Write::Session(Some("forked".into())))
    );
}

#[test]
fn a_second_replay_of_the_same_turn_changes_nothing() {
    let mut t = queued(&["a"]);
    t.deliver("s", std::time::SystemTime::UNIX_EPOCH);
    assert!(t.replayed("s", None, None, no_transcript).is_some());
    assert!(t.replayed("s", None, None, no_transcript).is_none());
}

#[test]
fn rule_1_a_result_commits_the_result_and_the_typed_end_then_publishes_in_order() {
    let mut t = queued(&["a"]);
    t.deliver("s", std::time::SystemTime::UNIX_EPOCH);
    t.replayed("s", None, Some("s"), no_transcript);
    let ended = t.result(
        ResultOutcome::Error,
        &json!({"subtype": "error_during_execution"}),
        Some("boom".into()),
    );
    assert_eq!(ended.turn_id.as_deref(), Some("a"));
    assert!(!ended.succeeded);
    let c = commits(&ended.effects);
    assert_eq!(chat_kinds(c[0].0), ["result", "turn_finished"]);
    assert!(c[0].0.contains(&Write::LastError("boom".into())));
    assert_eq!(
        c[0].1,
        &vec![
            Publish::Item(0),
            Publish::LastError("boom".into()),
            Publish::Item(1),
            Publish::TurnFinished {
                turn_id: "a".into(),
                outcome: TurnOutcome::Error
            },
        ]
    );
}

#[test]
fn a_turns_cost_is_committed_with_its_end_and_said_in_its_turn_finished_item() {
    let mut t = queued(&["a", "b"]);
    let end = |t: &mut Turns, total: f64| {
        t.deliver("s", std::time::SystemTime::UNIX_EPOCH);
        t.replayed("s", None, Some("s"), no_transcript);
        t.result(
            ResultOutcome::Success,
            &json!({"subtype": "success", "total_cost_usd": total,
                    "usage": {"input_tokens": 12, "output_tokens": 7}}),
            None,
        )
    };
    end(&mut t, 0.000188);
    let ended = end(&mut t, 0.000376);
    let spent = crate::supervisor::core::spend::Spend {
        cost_nanos: 188_000,
        input_tokens: 12,
        output_tokens: 7,
    };
    assert_eq!(ended.spend, spent, "the second turn's own cost");
    let c = commits(&ended.effects);
    assert!(c[0].0.contains(&Write::Spend {
        spend: spent,
        conversation: Some(("s".into(), 376_000)),
    }));
    assert!(c[0].1.contains(&Publish::Spend(spent)));
    let finished = c[0]
        .0
        .iter()
        .find_map(|w| match w {
            Write::Chat { kind, payload, .. } if kind == "turn_finished" => Some(payload.clone()),
            _ => None,
        })
        .unwrap();
    let finished: serde_json::Value = serde_json::from_str(&finished).unwrap();
    assert_eq!(
        (
            &finished["cost_usd"],
            &finished["input_tokens"],
            &finished["output_tokens"]
        ),
        (&json!(0.000188), &json!(12), &json!(7))
    );
}

#[test]
fn a_result_before_the_replay_is_not_the_turns_unless_it_is_an_error() {
    let mut t = queued(&["a"]);
    t.deliver("s", std::time::SystemTime::UNIX_EPOCH);
    let ended = t.result(ResultOutcome::Success, &json!({}), None);
    assert_eq!(
        ended.turn_id, None,
        "a stray success leaves the message in flight"
    );
    assert!(t.inflight.is_some());
    let ended = t.result(ResultOutcome::Error, &json!({}), Some("no".into()));
    assert_eq!(
        ended.turn_id.as_deref(),
        Some("a"),
        "rule 4's fallback: it fails visibly"
    );
}

#[test]
fn a_slash_command_ends_with_its_result_though_never_replayed() {
    let mut t = Turns::default();
    t.queue(QueuedTurn {
        id: "a".into(),
        text: "/cost".into(),
        ..QueuedTurn::default()
    });
    t.deliver("s", std::time::SystemTime::UNIX_EPOCH);
    let ended = t.result(ResultOutcome::Success, &json!({"num_turns": 0}), None);
    assert_eq!(ended.turn_id.as_deref(), Some("a"), "the command's result");
    assert!(t.inflight.is_none());
    assert!(ended.succeeded);
    let writes: Vec<Write> = ended
        .effects
        .iter()
        .filter_map(|e| match e {
            Effect::Commit { writes, .. } => Some(writes.clone()),
            _ => None,
        })
        .flatten()
        .collect();
    assert!(
        writes.contains(&Write::DeliveryDone("a".into())),
        "{writes:?}"
    );
    assert!(
        !writes.iter().any(|w| matches!(w, Write::Session(_))),
        "no conversation is recorded for it (rule 3)"
    );
}

#[test]
fn an_interrupted_turn_ends_interrupted_without_an_error() {
    let mut t = queued(&["a"]);
    t.deliver("s", std::time::SystemTime::UNIX_EPOCH);
    t.replayed("s", None, Some("s"), no_transcript);
    t.interrupting = Some("a".into());
    let ended = t.result(
        ResultOutcome::Error,
        &json!({"subtype": "error_during_execution"}),
        Some("aborted".into()),
    );
    let c = commits(&ended.effects);
    assert!(!c[0].0.iter().any(|w| matches!(w, Write::LastError(_))));
    assert!(c[0].1.contains(&Publish::TurnFinished {
        turn_id: "a".into(),
        outcome: TurnOutcome::Interrupted
    }));
    assert_eq!(t.interrupting, None);
}

#[test]
fn rule_8_a_crash_before_the_replay_resends_a_message_the_conversation_lacks() {
    let mut t = queued(&["a", "b"]);
    t.deliver("s", std::time::SystemTime::UNIX_EPOCH);
    let (settled, effects) = t.settle(
        TurnOutcome::Crashed,
        "agent_exited",
        "x".into(),
        Some("s"),
        |_| false,
    );
    assert_eq!(settled, Settled::Requeued);
    assert_eq!(t.queue.front().unwrap().id, "a", "first again");
    assert_eq!(effects, vec![Effect::Queued(2)]);
}

#[test]
fn rule_8_a_crash_before_the_replay_never_resends_a_message_the_conversation_holds() {
    let mut t = queued(&["a"]);
    t.deliver("new-one", std::time::SystemTime::UNIX_EPOCH);
    let (settled, effects) = t.settle(
        TurnOutcome::Crashed,
        "agent_exited",
        "x".into(),
        Some("old"),
        |i| i.session == "new-one",
    );
    assert_eq!(settled, Settled::Taken);
    assert!(t.queue.is_empty());
    let c = commits(&effects);
    assert!(c[0].0.contains(&Write::TurnFinished {
        turn_id: "a".into(),
        outcome: TurnOutcome::TakenNotAnswered
    }));
    assert!(
        c[0].0.contains(&Write::Session(Some("new-one".into()))),
        "the conversation that took it is recorded (rule 3)"
    );
}

/// A client's Stop while the model answers a message Claude Code has not replayed yet (it
/// replays only once the answer begins): the conversation holds it, so it is never sent again,
/// and its turn ends as the stop ends a turn that began, `interrupted` (reason `stopped`), not
/// as a message nobody asked to end (hostile run of issues 45/46: it ended
/// `taken_not_answered` while `send` said it waited).
#[test]
fn rule_8_a_stop_before_the_replay_ends_the_taken_message_interrupted() {
    let mut t = queued(&["a", "b"]);
    t.deliver("s", std::time::SystemTime::UNIX_EPOCH);
    let (settled, effects) = t.settle(
        TurnOutcome::Interrupted,
        "stopped",
        "The agent was stopped before the turn finished.".into(),
        Some("s"),
        |_| true,
    );
    assert_eq!(settled, Settled::Ended);
    assert_eq!(t.waiting_ids(), ["b"], "only the one never written waits");
    let c = commits(&effects);
    assert!(c[0].0.contains(&Write::TurnFinished {
        turn_id: "a".into(),
        outcome: TurnOutcome::Interrupted
    }));
    assert_eq!(chat_kinds(c[0].0), ["system", "turn_finished"]);
    assert!(effects.contains(&Effect::Queued(1)));
}

#[test]
fn rule_8_a_crash_after_the_replay_ends_the_turn_crashed_with_its_words() {
    let mut t = queued(&["a"]);
    t.deliver("s", std::time::SystemTime::UNIX_EPOCH);
    t.replayed("s", None, Some("s"), no_transcript);
    let (settled, effects) = t.settle(
        TurnOutcome::Crashed,
        "agent_exited",
        "The agent exited.".into(),
        Some("s"),
        |_| panic!("a turn that began needs no transcript check"),
    );
    assert_eq!(settled, Settled::Ended);
    let c = commits(&effects);
    assert_eq!(chat_kinds(c[0].0), ["error", "turn_finished"]);
}

#[test]
fn rule_4_a_lost_conversation_is_not_a_turn_its_message_waits_first() {
    let mut t = queued(&["a", "b"]);
    t.deliver("gone", std::time::SystemTime::UNIX_EPOCH);
    let effects = t.conversation_lost();
    assert_eq!(
        t.queue.iter().map(|q| q.id.as_str()).collect::<Vec<_>>(),
        ["a", "b"]
    );
    assert_eq!(effects, vec![Effect::Queued(2)]);
}

#[test]
fn a_message_whose_stdin_closed_waits_again_first() {
    let mut t = queued(&["a", "b"]);
    t.deliver("s", std::time::SystemTime::UNIX_EPOCH);
    t.unwritten();
    assert_eq!(t.queue.front().unwrap().id, "a");
    assert_eq!(t.waiting(), 2);
}

#[test]
fn rule_15_a_start_timeout_fails_the_waiting_turn_visibly_and_keeps_the_rest() {
    let mut t = queued(&["a", "b"]);
    t.deliver("s", std::time::SystemTime::UNIX_EPOCH);
    let effects = t.start_timed_out(Some("s"), |_| false);
    let c = commits(&effects);
    assert!(c[0].1.contains(&Publish::TurnFinished {
        turn_id: "a".into(),
        outcome: TurnOutcome::Error
    }));
    assert_eq!(effects.last(), Some(&Effect::Queued(1)));
}

#[test]
fn rule_8_a_start_timeout_after_the_conversation_took_the_message_is_not_an_error() {
    let mut t = queued(&["a"]);
    t.deliver("s", std::time::SystemTime::UNIX_EPOCH);
    let effects = t.start_timed_out(Some("s"), |_| true);
    assert!(commits(&effects)[0].1.contains(&Publish::TurnFinished {
        turn_id: "a".into(),
        outcome: TurnOutcome::TakenNotAnswered
    }));
}

#[test]
fn rule_15_an_interrupt_the_cli_ignores_ends_the_turn_interrupted() {
    let mut t = queued(&["a"]);
    t.deliver("s", std::time::SystemTime::UNIX_EPOCH);
    t.replayed("s", None, Some("s"), no_transcript);
    t.interrupting = Some("a".into());
    let effects = t.interrupt_timed_out("did not end");
    assert_eq!(t.interrupting, None);
    let c = commits(&effects);
    assert_eq!(chat_kinds(c[0].0), ["system", "turn_finished"]);
    assert!(c[0].1.contains(&Publish::TurnFinished {
        turn_id: "a".into(),
        outcome: TurnOutcome::Interrupted
    }));
}

#[test]
fn rule_15_a_start_timeout_before_the_handshake_ended_fails_the_first_waiting_message() {
    let mut t = queued(&["a", "b"]);
    let effects = t.start_timed_out(Some("s"), |_| panic!("never written: nothing to look at"));
    assert!(commits(&effects)[0].1.contains(&Publish::TurnFinished {
        turn_id: "a".into(),
        outcome: TurnOutcome::Error
    }));
    assert_eq!(t.queue.front().unwrap().id, "b", "what else waits, waits");
    assert_eq!(effects.last(), Some(&Effect::Queued(1)));
}

#[test]
fn a_refused_handshake_fails_the_first_waiting_message_with_its_reason() {
    let mut t = queued(&["a", "b"]);
    let effects = t.start_failed("open_failed", Some("s"), |_| panic!("never written"));
    let c = commits(&effects);
    assert!(
        c[0].0
            .iter()
            .any(|w| matches!(w, Write::Chat { kind, payload, .. }
        if kind == "turn_finished" && payload.contains("open_failed")))
    );
    assert_eq!(t.queue.front().unwrap().id, "b");
}

#[test]
fn rule_8_a_message_whose_delivery_is_not_on_record_is_not_written_and_waits_first() {
    let mut t = queued(&["a", "b"]);
    t.deliver("s", std::time::SystemTime::UNIX_EPOCH).unwrap();
    assert!(!t.delivery_recorded(false));
    assert!(t.inflight.is_none());
    assert_eq!(t.queue.front().map(|q| q.id.as_str()), Some("a"));
}

#[test]
fn a_written_message_makes_the_bot_busy_and_an_unwritten_one_waits_first() {
    let mut t = queued(&["a", "b"]);
    t.deliver("s", std::time::SystemTime::UNIX_EPOCH).unwrap();
    assert!(t.delivery_recorded(true));
    assert_eq!(
        t.inflight.as_ref().map(|i| i.written),
        Some(SystemTime::UNIX_EPOCH)
    );
    assert_eq!(
        t.wrote(true),
        [
            Effect::State(crate::supervisor::core::State::Busy),
            Effect::Queued(1)
        ]
    );
    assert!(t.wrote(false).is_empty());
    assert_eq!(t.queue.front().map(|q| q.id.as_str()), Some("a"));
}

#[test]
fn a_message_sent_lets_a_stopped_bot_go_and_only_a_turn_in_flight_is_interrupted() {
    let mut t = Turns::default();
    assert_eq!(t.queue(turn("a"))[0], Effect::Park(false));
    assert_eq!(t.to_interrupt(), None, "nothing in flight");
    t.deliver("s", std::time::SystemTime::UNIX_EPOCH).unwrap();
    assert_eq!(t.to_interrupt().as_deref(), Some("a"));
    t.interrupt_sent("a".into());
    t.replayed("s", Some("s"), Some("s"), no_transcript)
        .unwrap();
    let ended = t.result(ResultOutcome::Error, &json!({}), Some("aborted".into()));
    assert_eq!(ended.error, None, "an interrupt is not a failure");
}

#[test]
fn rule_1_what_the_cli_says_is_the_answering_turns_once_its_message_began() {
    let chat_turn = |t: &mut Turns| {
        let effects = t.said_by_cli("assistant", "{}".into());
        let [Effect::Commit { writes, publish }] = effects.as_slice() else {
            panic!("one commit: {effects:?}");
        };
        assert_eq!(publish, &vec![Publish::Item(0)], "published once committed");
        match writes.as_slice() {
            [Write::Chat { kind, turn_id, .. }] if kind == "assistant" => turn_id.clone(),
            other => panic!("one chat item: {other:?}"),
        }
    };
    let mut t = queued(&["a"]);
    t.queue(QueuedTurn {
        id: "c".into(),
        text: "/compact".into(),
        ..QueuedTurn::default()
    });
    assert_eq!(chat_turn(&mut t), None, "nothing in flight: the bot's");
    t.deliver("s", std::time::SystemTime::UNIX_EPOCH).unwrap();
    assert_eq!(
        chat_turn(&mut t),
        None,
        "written, not yet begun: not the turn's"
    );
    t.replayed("s", Some("s"), Some("s"), no_transcript)
        .unwrap();
    assert_eq!(chat_turn(&mut t).as_deref(), Some("a"));
    t.result(ResultOutcome::Success, &json!({"subtype": "success"}), None);
    assert_eq!(chat_turn(&mut t), None, "after its end: not the turn's");
    t.deliver("s", std::time::SystemTime::UNIX_EPOCH).unwrap();
    assert_eq!(
        chat_turn(&mut t).as_deref(),
        Some("c"),
        "a slash command is answered without a replay"
    );
}

#[test]
fn issue_25_a_refused_resume_of_a_message_asked_again_ends_it_unanswered() {
    let mut t = Turns::default();
    let cut = crate::runtime::Cut::At {
        at: "p".into(),
        drops: "u".into(),
    };
    t.queue(QueuedTurn {
        redos: 1,
        cut: Some(cut.clone()),
        ..turn("a")
    });
    t.deliver_cut("s", std::time::SystemTime::UNIX_EPOCH, Some(&cut));
    let ended = t.result(
        ResultOutcome::Error,
        &json!({"subtype": "error_during_execution",
                "errors": ["Resume rejected by --resume-drops-turn: …"]}),
        Some("Resume rejected by --resume-drops-turn: …".into()),
    );
    let c = commits(&ended.effects);
    assert!(c[0].0.contains(&Write::TurnFinished {
        turn_id: "a".into(),
        outcome: TurnOutcome::TakenNotAnswered
    }));
    // A first ask's error before the replay stays an error (design rule 4's fallback).
    let mut t = queued(&["b"]);
    t.deliver("s", std::time::SystemTime::UNIX_EPOCH);
    let ended = t.result(ResultOutcome::Error, &json!({}), Some("x".into()));
    assert!(commits(&ended.effects)[0].0.contains(&Write::TurnFinished {
        turn_id: "b".into(),
        outcome: TurnOutcome::Error
    }));
}
