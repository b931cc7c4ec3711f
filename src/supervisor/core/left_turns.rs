//! Start-up recovery after a daemon crash, with no I/O (design rule 8 across a daemon crash: every
//! turn the previous run left open ends once or is delivered once; [`decide::left_turn`]).

use serde_json::json;

use super::effect::Effect;
use super::records::item;
use super::turns::{Turns, taken_note};
use crate::supervisor::core::QueuedTurn;
use crate::supervisor::core::decide::{self, LeftTurn, TurnOutcome, UnreplayedFate};

/// What the previous run left in the store for one bot.
#[derive(Debug, Clone, Default)]
pub struct Left {
    /// Permission requests it left unanswered: `(request_id, tool)`.
    pub open_prompts: Vec<(String, String)>,
    /// Turns it left `running`.
    pub running: Vec<String>,
    /// Turns it left `queued`, oldest first, each with the conversation it was written to, if
    /// its delivery was recorded.
    pub queued: Vec<(QueuedTurn, Option<String>)>,
}

/// Settles what the previous run left: its open requests are denied (nobody can answer them
/// now); a turn that had begun ends `interrupted` (reason `daemon_restarted`); a message written
/// to a conversation that holds it ends `taken_not_answered`; every other queued message waits
/// in `turns`, in order, to be delivered once. `holds(turn, session)` says whether the
/// conversation `session` holds the turn's message (its transcript, since the delivery).
pub fn recover(
    turns: &mut Turns,
    left: Left,
    recorded: Option<&str>,
    mut holds: impl FnMut(&QueuedTurn, &str) -> bool,
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
    for turn_id in left.running {
        effects.push(Turns::finish(
            &turn_id,
            TurnOutcome::Interrupted,
            "daemon_restarted",
            Some((
                "system",
                json!({"text": "botvisord stopped before the turn finished."}),
            )),
            None,
        ));
    }
    for (turn, sent_to) in left.queued {
        let fate = decide::left_turn(false, recorded, sent_to.as_deref(), |s| holds(&turn, s));
        match fate {
            LeftTurn::Unreplayed(UnreplayedFate::Taken { adopt }) => {
                effects.push(Turns::finish(
                    &turn.id,
                    TurnOutcome::TakenNotAnswered,
                    "taken_not_answered",
                    Some(("system", taken_note())),
                    adopt.as_deref(),
                ));
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

    #[test]
    fn rule_8_after_a_daemon_crash_every_left_turn_ends_once_or_is_delivered_once() {
        let mut turns = Turns::default();
        let left = Left {
            open_prompts: vec![("r1".into(), "Bash".into())],
            running: vec!["run".into()],
            queued: vec![
                (turn("taken"), Some("s".into())),
                (turn("lost"), Some("s".into())),
                (turn("never"), None),
            ],
        };
        let effects = recover(&mut turns, left, Some("s"), |t, _| t.id == "taken");
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
        recover(&mut turns, left, None, |_, _| false);
        assert_eq!(turns.queue.len(), 1);
    }

    #[test]
    fn rule_8_a_message_a_conversation_not_on_record_holds_makes_it_the_record() {
        let mut turns = Turns::default();
        let left = Left {
            queued: vec![(turn("a"), Some("other".into()))],
            ..Left::default()
        };
        let effects = recover(&mut turns, left, Some("s"), |_, _| true);
        assert!(
            effects
                .iter()
                .any(|e| matches!(e, Effect::Commit { writes, .. }
            if writes.contains(&Write::Session(Some("other".into())))))
        );
        assert!(turns.queue.is_empty());
    }
}
