//! Start-up recovery after a daemon crash, with no I/O (design rule 8 across a daemon crash: every
//! turn the previous run left open ends once or is delivered once; [`decide::left_turn`]).

use std::time::SystemTime;

use serde_json::{Value, json};

use super::effect::{CommitBuilder, Effect};
use super::records::item;
use super::turns::{Turns, taken_note};
use crate::runtime::{ChatPayload, TakenTurn};
use crate::supervisor::core::QueuedTurn;
use crate::supervisor::core::decide::{self, LeftTurn, TurnOutcome, UnreplayedFate};

/// What the previous run left in the store for one bot.
#[derive(Debug, Clone, Default)]
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
#[derive(Debug, Clone)]
pub struct LeftRunning {
    /// The turn and its text.
    pub turn: QueuedTurn,
    /// When it was sent: its line in the conversation is later.
    pub sent_at: SystemTime,
    /// How many chat items of its answer the chat holds already.
    pub in_chat: usize,
}

/// Settles what the previous run left: its open requests are denied (nobody can answer them
/// now); every turn whose message the conversation holds is reconciled with it
/// ([`decide::reconcile`]): the answer the chat lacks is recorded, marked `recovered: true`,
/// and a whole answer ends the turn `success` (reason `recovered`); otherwise a turn that had
/// begun ends `interrupted` (reason `daemon_restarted`) and a message written and taken ends
/// `taken_not_answered`; every other queued message waits in `turns`, in order, to be
/// delivered once. `look(turn, session, since)` reads what the conversation `session` holds of
/// the turn's message, written since `since`; `recorded` is the bot's conversation.
pub fn recover(
    turns: &mut Turns,
    left: Left,
    recorded: Option<&str>,
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
    for run in left.running {
        let taken = recorded.and_then(|s| look(&run.turn, s, run.sent_at));
        let answered = match &taken {
            Some(t) => {
                let (missing, answered) = decide::reconcile(t, run.in_chat);
                effects.extend(recovered_items(&run.turn.id, missing));
                answered
            }
            None => false,
        };
        effects.push(if answered {
            recovered_end(&run.turn.id, None)
        } else {
            Turns::finish(
                &run.turn.id,
                TurnOutcome::Interrupted,
                "daemon_restarted",
                Some((
                    "system",
                    json!({"text": "botvisord stopped before the turn finished."}),
                )),
                None,
            )
        });
    }
    for (turn, sent) in left.queued {
        let taken = sent.as_ref().and_then(|(s, at)| look(&turn, s, *at));
        let sent_to = sent.as_ref().map(|(s, _)| s.as_str());
        let fate = decide::left_turn(false, recorded, sent_to, |_| taken.is_some());
        match fate {
            LeftTurn::Unreplayed(UnreplayedFate::Taken { adopt }) => {
                let (missing, answered) = taken
                    .as_ref()
                    .map_or((&[][..], false), |t| decide::reconcile(t, 0));
                effects.extend(recovered_items(&turn.id, missing));
                effects.push(if answered {
                    recovered_end(&turn.id, adopt.as_deref())
                } else {
                    Turns::finish(
                        &turn.id,
                        TurnOutcome::TakenNotAnswered,
                        "taken_not_answered",
                        Some(("system", taken_note())),
                        adopt.as_deref(),
                    )
                });
            }
            _ => {
                if !turns.knows(&turn.id) {
                    turns.queue.push_back(turn);
                }
            }
        }
    }
    effects.push(Effect::Queued(turns.waiting()));
    effects
}

/// The chat items of an answer read back from the conversation, each marked `recovered: true`,
/// in one commit; `None` when there are none.
fn recovered_items(turn_id: &str, items: &[ChatPayload]) -> Option<Effect> {
    let mut c = CommitBuilder::default();
    for i in items {
        let mut payload = i.payload.clone();
        if let Some(o) = payload.as_object_mut() {
            o.insert("recovered".into(), Value::Bool(true));
        }
        c.item(i.kind, Some(turn_id), payload.to_string());
    }
    c.build()
}

/// The end of a turn whose whole answer was read back from the conversation: `success`, reason
/// `recovered`.
fn recovered_end(turn_id: &str, adopt: Option<&str>) -> Effect {
    Turns::finish(
        turn_id,
        TurnOutcome::Success,
        "recovered",
        Some((
            "system",
            json!({
                "text": "botvisord stopped during this turn; its answer was read back from the conversation.",
                "reason": "recovered",
            }),
        )),
        adopt,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::supervisor::core::effect::Write;

    fn turn(id: &str) -> QueuedTurn {
        QueuedTurn {
            id: id.to_owned(),
            text: id.to_owned(),
        }
    }

    use crate::supervisor::core::effect::finished_turns as finished;

    fn running(id: &str, in_chat: usize) -> LeftRunning {
        LeftRunning {
            turn: turn(id),
            sent_at: SystemTime::UNIX_EPOCH,
            in_chat,
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
        let effects = recover(&mut turns, left, Some("s"), |_, _, _| Some(answer(true)));
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
        let effects = recover(&mut turns, left, Some("s"), |_, _, _| Some(answer(false)));
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
            running: vec![running("run", 0)],
            queued: vec![
                (turn("taken"), sent("s")),
                (turn("lost"), sent("s")),
                (turn("never"), None),
            ],
        };
        let effects = recover(&mut turns, left, Some("s"), |t, _, _| {
            (t.id == "taken").then(TakenTurn::bare)
        });
        assert_eq!(
            finished(&effects),
            [
                ("run".into(), TurnOutcome::Interrupted),
                ("taken".into(), TurnOutcome::TakenNotAnswered)
            ]
        );
        let queued: Vec<&str> = turns.queue.iter().map(|t| t.id.as_str()).collect();
        assert_eq!(queued, ["lost", "never"], "in order, once");
        assert_eq!(effects.last(), Some(&Effect::Queued(2)));
        assert!(matches!(&effects[0], Effect::Commit { writes, .. }
            if matches!(&writes[0], Write::Chat { kind, .. } if kind == "permission_answer")));
    }

    #[test]
    fn rule_8_a_message_a_client_sent_during_recovery_is_not_queued_twice() {
        let mut turns = Turns::default();
        turns.queue(turn("a"));
        let left = Left {
            queued: vec![(turn("a"), None)],
            ..Left::default()
        };
        recover(&mut turns, left, None, |_, _, _| None);
        assert_eq!(turns.queue.len(), 1);
    }

    #[test]
    fn rule_8_a_message_a_conversation_not_on_record_holds_makes_it_the_record() {
        let mut turns = Turns::default();
        let left = Left {
            queued: vec![(turn("a"), sent("other"))],
            ..Left::default()
        };
        let effects = recover(&mut turns, left, Some("s"), |_, _, _| {
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
