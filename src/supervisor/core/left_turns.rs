//! Start-up recovery after a daemon crash, with no I/O (design rule 8 across a daemon crash: every
//! turn the previous run left open ends once or is delivered once; [`decide::left_turn`]).

use std::time::SystemTime;

use serde_json::json;

use super::effect::Effect;
use super::records::item;
use super::taken::{self, Resolved};
use super::turns::Turns;
use crate::runtime::TakenTurn;
use crate::supervisor::core::QueuedTurn;
use crate::supervisor::core::decide::{self, LeftTurn, TurnOutcome, UnreplayedFate};

/// What the previous run left in the store for one bot.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Left {
    /// Permission requests it left unanswered: `(request_id, tool)`.
    pub open_prompts: Vec<(String, String)>,
    /// Turns it left `running`.
    pub running: Vec<LeftRunning>,
    /// Turns it left `queued`, oldest first, each with the conversation it was written to and
    /// when, if its delivery was recorded.
    pub queued: Vec<(QueuedTurn, Option<(String, SystemTime)>)>,
}

/// A turn the previous run left `running`.
#[derive(Debug, Clone, PartialEq)]
pub struct LeftRunning {
    /// The turn and its text.
    pub turn: QueuedTurn,
    /// When it was sent: its line in the conversation is later.
    pub sent_at: SystemTime,
    /// How many chat items of its answer the chat holds already.
    pub in_chat: usize,
    /// Its agent began work: a tool was called or its permission asked.
    pub worked: bool,
}

/// Settles what the previous run left: its open requests are denied (nobody can answer them
/// now); every turn whose message the conversation holds is resolved by what the conversation's
/// file holds ([`taken::resolve`], issue 25): a whole answer is recorded (what the chat lacks,
/// marked `recovered: true`) and ends the turn `success` (reason `recovered`); a message taken
/// and unanswered is asked again while `redo_limit` allows, before every other waiting message;
/// otherwise a turn that had begun ends `interrupted` (reason `daemon_restarted`) and a message
/// written and taken ends `taken_not_answered`. Every other queued message waits, in order, to be
/// delivered once. `look(turn, session, since)` reads what the conversation `session` holds of
/// the turn's message, written since `since`; `recorded` is the bot's conversation.
pub fn recover(
    turns: &mut Turns,
    left: Left,
    recorded: Option<&str>,
    redo_limit: u32,
    mut look: impl FnMut(&QueuedTurn, &str, SystemTime) -> Option<TakenTurn>,
) -> Vec<Effect> {
    let mut effects = Vec::new();
    for (request_id, tool) in left.open_prompts {
        effects.push(item(
            "permission_answer",
            json!({
                "request_id": request_id, "tool": tool, "behavior": "deny",
                "by": "botvisord",
                "message": "botvisord stopped before this request was answered.",
            }),
        ));
    }
    // The order the waiting messages go in: asked again first (they were sent first), then the
    // queue as it was.
    let mut waiting = Vec::new();
    for run in left.running {
        let taken = recorded.and_then(|s| look(&run.turn, s, run.sent_at));
        let resolved = match taken {
            Some(t) => Some(taken::resolve(&run.turn, &t, run.in_chat, redo_limit, None)),
            None => taken::lost_before_written(&run.turn, run.in_chat, run.worked, redo_limit),
        };
        match resolved {
            Some(Resolved::Answered(done)) => effects.extend(done),
            Some(Resolved::Redo {
                turn,
                effects: redo,
            }) => {
                effects.extend(redo);
                waiting.push(turn);
            }
            other => {
                if let Some(Resolved::Unanswered { effects: read, .. }) = other {
                    effects.extend(read);
                }
                effects.push(Turns::finish(
                    &run.turn.id,
                    TurnOutcome::Interrupted,
                    "daemon_restarted",
                    Some((
                        "system",
                        json!({"text": "botvisord stopped before the turn finished."}),
                    )),
                    None,
                ));
            }
        }
    }
    for (turn, sent) in left.queued {
        let taken = sent.as_ref().and_then(|(s, at)| look(&turn, s, *at));
        let sent_to = sent.as_ref().map(|(s, _)| s.as_str());
        let fate = decide::left_turn(false, recorded, sent_to, |_| taken.is_some());
        match (fate, taken) {
            (LeftTurn::Unreplayed(UnreplayedFate::Taken { adopt }), Some(taken)) => {
                match taken::resolve(&turn, &taken, 0, redo_limit, adopt.as_deref()) {
                    Resolved::Answered(done) => effects.extend(done),
                    Resolved::Redo {
                        turn,
                        effects: redo,
                    } => {
                        effects.extend(redo);
                        waiting.push(turn);
                    }
                    Resolved::Unanswered { why, effects: read } => {
                        effects.extend(read);
                        effects.push(taken::unanswered_end(&turn.id, why, adopt.as_deref()));
                    }
                }
            }
            _ => waiting.push(turn),
        }
    }
    // A message a client sent while the daemon recovered may be queued already: once, after.
    let sent_meanwhile: Vec<QueuedTurn> = turns
        .queue
        .drain(..)
        .filter(|t| !waiting.iter().any(|w| w.id == t.id))
        .collect();
    turns.queue.extend(waiting);
    turns.queue.extend(sent_meanwhile);
    effects.push(Effect::Queued(turns.waiting()));
    effects
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::{ChatPayload, Cut};
    use crate::supervisor::core::effect::Write;

    fn turn(id: &str) -> QueuedTurn {
        QueuedTurn::new(id, id)
    }

    use crate::supervisor::core::effect::finished_turns as finished;

    fn running(id: &str, in_chat: usize) -> LeftRunning {
        LeftRunning {
            turn: turn(id),
            sent_at: SystemTime::UNIX_EPOCH,
            in_chat,
            worked: false,
        }
    }

    fn sent(session: &str) -> Option<(String, SystemTime)> {
        Some((session.to_owned(), SystemTime::UNIX_EPOCH))
    }

    fn answer(answered: bool) -> TakenTurn {
        TakenTurn {
            cut: None,
            answer: vec![
                ChatPayload {
                    kind: "tool_use",
                    payload: json!({"id": "t1", "name": "Bash"}),
                },
                ChatPayload {
                    kind: "tool_result",
                    payload: json!({"tool_use_id": "t1"}),
                },
                ChatPayload {
                    kind: "assistant",
                    payload: json!({"text": "done"}),
                },
            ],
            answered,
            tool_called: true,
        }
    }

    /// The kinds of the chat items `effects` record, with whether each is marked recovered.
    fn items(effects: &[Effect]) -> Vec<(String, bool)> {
        crate::supervisor::core::effect::writes(effects)
            .filter_map(|w| match w {
                Write::Chat { kind, payload, .. } => {
                    Some((kind.clone(), payload.contains("\"recovered\":true")))
                }
                _ => None,
            })
            .collect()
    }

    #[test]
    fn issue_25_an_answer_the_conversation_holds_is_recorded_once_and_ends_the_turn() {
        let mut turns = Turns::default();
        let left = Left {
            running: vec![running("run", 1)],
            queued: vec![(turn("taken"), sent("s"))],
            ..Left::default()
        };
        let effects = recover(&mut turns, left, Some("s"), 3, |_, _, _| Some(answer(true)));
        assert_eq!(
            finished(&effects),
            [
                ("run".into(), TurnOutcome::Success),
                ("taken".into(), TurnOutcome::Success)
            ]
        );
        let got = items(&effects);
        let recovered: Vec<&str> = got
            .iter()
            .filter(|(_, r)| *r)
            .map(|(k, _)| k.as_str())
            .collect();
        assert_eq!(
            recovered,
            [
                "tool_result",
                "assistant",
                "tool_use",
                "tool_result",
                "assistant"
            ],
            "what the chat held of the running turn (one item) is not recorded again"
        );
        assert!(
            effects
                .iter()
                .any(|e| matches!(e, Effect::Commit { writes, .. }
            if writes.iter().any(|w| matches!(w, Write::Chat { kind, payload, .. }
                if kind == "turn_finished" && payload.contains("\"recovered\"")))))
        );
    }

    #[test]
    fn issue_25_a_partial_answer_is_recorded_and_the_turn_ends_unanswered() {
        let mut turns = Turns::default();
        let left = Left {
            running: vec![running("run", 0)],
            queued: vec![(turn("taken"), sent("s"))],
            ..Left::default()
        };
        let effects = recover(&mut turns, left, Some("s"), 3, |_, _, _| {
            Some(answer(false))
        });
        assert_eq!(
            finished(&effects),
            [
                ("run".into(), TurnOutcome::Interrupted),
                ("taken".into(), TurnOutcome::TakenNotAnswered)
            ]
        );
        assert_eq!(items(&effects).iter().filter(|(_, r)| *r).count(), 6);
    }

    #[test]
    fn rule_8_after_a_daemon_crash_every_left_turn_ends_once_or_is_delivered_once() {
        let mut turns = Turns::default();
        let left = Left {
            open_prompts: vec![("r1".into(), "Bash".into())],
            // Part of its answer is in the chat, or it asked for a tool: not asked again.
            running: vec![
                running("run", 1),
                running("unkept", 0),
                LeftRunning {
                    worked: true,
                    ..running("asked", 0)
                },
            ],
            queued: vec![
                (turn("taken"), sent("s")),
                (turn("lost"), sent("s")),
                (turn("never"), None),
            ],
        };
        let effects = recover(&mut turns, left, Some("s"), 3, |t, _, _| {
            (t.id == "taken").then(TakenTurn::bare)
        });
        assert_eq!(
            finished(&effects),
            [
                ("run".into(), TurnOutcome::Interrupted),
                ("asked".into(), TurnOutcome::Interrupted),
                ("taken".into(), TurnOutcome::TakenNotAnswered)
            ]
        );
        let queued: Vec<&str> = turns.queue.iter().map(|t| t.id.as_str()).collect();
        assert_eq!(
            queued,
            ["unkept", "lost", "never"],
            "in order, once; a begun turn the conversation never kept is asked again"
        );
        assert_eq!(effects.last(), Some(&Effect::Queued(3)));
        assert!(matches!(&effects[0], Effect::Commit { writes, .. }
            if matches!(&writes[0], Write::Chat { kind, .. } if kind == "permission_answer")));
    }

    #[test]
    fn issue_25_a_message_taken_and_unanswered_is_asked_again_first_without_the_attempt() {
        let mut turns = Turns::default();
        turns.queue(turn("sent_meanwhile"));
        let left = Left {
            running: vec![running("run", 0)],
            queued: vec![
                (turn("taken"), sent("s")),
                (turn("waiting"), None),
                (turn("sent_meanwhile"), None),
            ],
            ..Left::default()
        };
        let cut = Cut::At {
            at: "p".into(),
            drops: "u".into(),
        };
        let effects = recover(&mut turns, left, Some("s"), 3, |t, _, _| {
            (t.id != "waiting" && t.id != "sent_meanwhile").then(|| TakenTurn {
                cut: Some(cut.clone()),
                ..TakenTurn::bare()
            })
        });
        assert_eq!(finished(&effects), [], "nothing ends: both are asked again");
        let queued: Vec<(&str, u32, Option<&Cut>)> = turns
            .queue
            .iter()
            .map(|t| (t.id.as_str(), t.redos, t.cut.as_ref()))
            .collect();
        assert_eq!(
            queued,
            [
                ("run", 1, Some(&cut)),
                ("taken", 1, Some(&cut)),
                ("waiting", 0, None),
                ("sent_meanwhile", 0, None)
            ]
        );
        let redos = crate::supervisor::core::effect::writes(&effects)
            .filter(|w| matches!(w, Write::TurnRedo { .. }))
            .count();
        assert_eq!(
            redos, 2,
            "each redo is on record before anything is written"
        );
        // At the limit, it ends unanswered.
        let mut turns = Turns::default();
        let left = Left {
            queued: vec![(
                QueuedTurn {
                    redos: 3,
                    ..turn("taken")
                },
                sent("s"),
            )],
            ..Left::default()
        };
        let effects = recover(&mut turns, left, Some("s"), 3, |_, _, _| {
            Some(TakenTurn {
                cut: Some(cut.clone()),
                ..TakenTurn::bare()
            })
        });
        assert_eq!(
            finished(&effects),
            [("taken".into(), TurnOutcome::TakenNotAnswered)]
        );
    }

    #[test]
    fn rule_8_a_message_a_client_sent_during_recovery_is_not_queued_twice() {
        let mut turns = Turns::default();
        turns.queue(turn("a"));
        let left = Left {
            queued: vec![(turn("a"), None)],
            ..Left::default()
        };
        recover(&mut turns, left, None, 3, |_, _, _| None);
        assert_eq!(turns.queue.len(), 1);
    }

    #[test]
    fn rule_8_a_message_a_conversation_not_on_record_holds_makes_it_the_record() {
        let mut turns = Turns::default();
        let left = Left {
            queued: vec![(turn("a"), sent("other"))],
            ..Left::default()
        };
        let effects = recover(&mut turns, left, Some("s"), 3, |_, _, _| {
            Some(TakenTurn::bare())
        });
        assert!(
            effects
                .iter()
                .any(|e| matches!(e, Effect::Commit { writes, .. }
            if writes.contains(&Write::Session(Some("other".into())))))
        );
        assert!(turns.queue.is_empty());
    }
}
