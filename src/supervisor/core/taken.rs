//! A message the conversation took and botvisor did not see answered, with no I/O (issue 25,
//! design rule 8: "every message is answered once"): what its conversation's file holds decides
//! whether it is answered already (the answer read back), asked again (the next resume drops the
//! unanswered attempt), or ends unanswered. [`decide::taken_fate`] is the decision; this file
//! turns it into effects, for a process that ended unasked ([`super::turns::Turns::settle_unasked`])
//! and for a daemon that died ([`super::left_turns::recover`]).

use serde_json::{Value, json};

use super::decide::{self, NoRedo, TakenFate, TurnOutcome};
use super::effect::{CommitBuilder, Effect, Publish, Write};
use super::turns::{QueuedTurn, Turns};
use crate::runtime::{ChatPayload, Cut, TakenTurn};

/// What [`resolve`] made of a taken message.
#[derive(Debug, Clone, PartialEq)]
pub enum Resolved {
    /// Its whole answer was read back: these effects record what the chat lacked and end the
    /// turn `success` (reason `recovered`).
    Answered(Vec<Effect>),
    /// Asked again: these effects record it (the turn `queued` again with its cut, a `system`
    /// item); `turn` goes back to the head of the queue.
    Redo {
        /// The turn as it waits now (`redos` counted, `cut` set).
        turn: QueuedTurn,
        /// The commit.
        effects: Vec<Effect>,
    },
    /// Not asked again, for `why`: these effects record what the file holds of a partial answer;
    /// the caller ends the turn as its case says.
    Unanswered {
        /// Why not.
        why: NoRedo,
        /// What the file holds that the chat lacked, if anything.
        effects: Vec<Effect>,
    },
}

/// Issue 25 for `turn`, whose conversation's file holds its message as `taken`: `in_chat` items
/// of its answer are recorded already; `redo_limit` is how many times a message may be asked
/// again (0: never); `adopt` is the conversation that
/// took it when that is not the recorded one (a new conversation a turn began in: recorded,
/// design rule 3).
pub fn resolve(
    turn: &QueuedTurn,
    taken: &TakenTurn,
    in_chat: usize,
    redo_limit: u32,
    adopt: Option<&str>,
) -> Resolved {
    let (missing, _) = decide::reconcile(taken, in_chat);
    match decide::taken_fate(taken, turn.redos, redo_limit) {
        TakenFate::Answered => {
            let mut effects: Vec<Effect> = recovered_items(&turn.id, missing).into_iter().collect();
            effects.push(recovered_end(&turn.id, adopt));
            Resolved::Answered(effects)
        }
        TakenFate::Redo(cut) => {
            // A first message taken by a conversation that is not the recorded one: that
            // conversation is left, and the message goes where the next start goes, uncut.
            let (cut, adopt) = match (cut, adopt) {
                (Cut::Whole, Some(_)) => (None, None),
                (cut, adopt) => (Some(cut), adopt),
            };
            let redone = QueuedTurn {
                redos: turn.redos + 1,
                cut: cut.clone(),
                ..turn.clone()
            };
            Resolved::Redo {
                effects: vec![redo(&redone, adopt)],
                turn: redone,
            }
        }
        TakenFate::Unanswered(why) => Resolved::Unanswered {
            why,
            effects: recovered_items(&turn.id, missing).into_iter().collect(),
        },
    }
}

/// Issue 25 for `turn`, whose turn began (the CLI replayed it) but whose conversation's file does
/// not hold it (the CLI died before it wrote it down), whose chat holds nothing of an answer
/// (`in_chat` items) and whose agent began no work (`worked`: a tool called or its permission
/// asked): the conversation never took it, so it is asked again, uncut, while `redo_limit`
/// allows (`None` otherwise: the turn ends as its case says).
pub fn lost_before_written(
    turn: &QueuedTurn,
    in_chat: usize,
    worked: bool,
    redo_limit: u32,
) -> Option<Resolved> {
    if in_chat > 0 || worked || turn.redos >= redo_limit {
        return None;
    }
    let redone = QueuedTurn {
        redos: turn.redos + 1,
        cut: None,
        ..turn.clone()
    };
    Some(Resolved::Redo {
        effects: vec![redo(&redone, None)],
        turn: redone,
    })
}

/// The commit that asks `turn` again: its row `queued` with its count and cut, its delivery
/// record gone (it is written again, anew), `adopt` recorded, and a `system` item (reason
/// `redo`, `redo`: the count) saying so.
fn redo(turn: &QueuedTurn, adopt: Option<&str>) -> Effect {
    let mut c = CommitBuilder::default();
    c.write(Write::TurnRedo {
        turn_id: turn.id.clone(),
        cut: turn.cut.clone(),
    })
    .write(Write::DeliveryDone(turn.id.clone()));
    if let Some(s) = adopt {
        c.write(Write::Session(Some(s.to_owned())))
            .then(Publish::SessionId(Some(s.to_owned())));
    }
    let how = match &turn.cut {
        Some(Cut::At { .. } | Cut::BeforeTurn { .. }) => {
            "in the same conversation, without the unanswered attempt"
        }
        Some(Cut::Whole) => "in a new conversation (it was the only message of its conversation)",
        None => "once more (the conversation did not keep it)",
    };
    c.item(
        "system",
        Some(&turn.id),
        json!({
            "text": format!(
                "The agent stopped after the message \u{201c}{}\u{201d} reached the conversation \
                 and before it was answered; botvisor asks it again {how}.",
                quoted(&turn.text)
            ),
            "reason": "redo",
            "redo": turn.redos,
        })
        .to_string(),
    );
    c.build().expect("a redo writes rows")
}

/// How a note names a message (it may stand after later ones in the chat): its first line, at
/// most 60 characters, `…` where cut.
fn quoted(text: &str) -> String {
    const MOST: usize = 60;
    let line = text.trim().lines().next().unwrap_or_default();
    let mut out: String = line.chars().take(MOST).collect();
    if line.chars().count() > MOST || text.trim().lines().nth(1).is_some() {
        out.push('…');
    }
    out
}

/// The end of a turn whose message the conversation holds unanswered and is not asked again for
/// `why`: `taken_not_answered`, with a `system` item saying so ([`taken_note`]).
pub fn unanswered_end(turn_id: &str, why: NoRedo, adopt: Option<&str>) -> Effect {
    Turns::finish(
        turn_id,
        TurnOutcome::TakenNotAnswered,
        "taken_not_answered",
        Some(("system", taken_note(why))),
        adopt,
    )
}

/// The `system` item of a turn whose message the conversation holds unanswered and is not asked
/// again for `why` (reason `taken_not_answered`, `why`: the [`NoRedo`]'s words).
pub fn taken_note(why: NoRedo) -> Value {
    json!({
        "text": format!(
            "The agent stopped after this message reached the conversation and before it was \
             answered; it is not asked again: {}.",
            why.words()
        ),
        "reason": "taken_not_answered",
    })
}

/// The chat items of an answer read back from the conversation, each marked `recovered: true`,
/// in one commit; `None` when there are none.
pub fn recovered_items(turn_id: &str, items: &[ChatPayload]) -> Option<Effect> {
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
pub fn recovered_end(turn_id: &str, adopt: Option<&str>) -> Effect {
    Turns::finish(
        turn_id,
        TurnOutcome::Success,
        "recovered",
        Some((
            "system",
            json!({
                "text": "The agent's answer to this message was read back from the conversation.",
                "reason": "recovered",
            }),
        )),
        adopt,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(redos: u32) -> QueuedTurn {
        QueuedTurn {
            id: "t".into(),
            text: "hello".into(),
            redos,
            cut: None,
        }
    }

    fn at() -> Cut {
        Cut::At {
            at: "p".into(),
            drops: "u".into(),
        }
    }

    fn taken(cut: Option<Cut>, answer: Vec<ChatPayload>, answered: bool) -> TakenTurn {
        TakenTurn {
            cut,
            answer,
            answered,
            tool_called: false,
        }
    }

    fn writes(effects: &[Effect]) -> Vec<Write> {
        effects
            .iter()
            .flat_map(|e| match e {
                Effect::Commit { writes, .. } => writes.clone(),
                _ => Vec::new(),
            })
            .collect()
    }

    #[test]
    fn a_redo_counts_keeps_its_cut_and_forgets_the_delivery() {
        let Resolved::Redo { turn: t, effects } =
            resolve(&turn(1), &taken(Some(at()), Vec::new(), false), 0, 3, None)
        else {
            panic!("asked again")
        };
        assert_eq!((t.redos, t.cut.clone()), (2, Some(at())));
        let w = writes(&effects);
        assert!(w.contains(&Write::TurnRedo {
            turn_id: "t".into(),
            cut: Some(at())
        }));
        assert!(w.contains(&Write::DeliveryDone("t".into())));
        assert!(!w.iter().any(|w| matches!(w, Write::TurnFinished { .. })));
    }

    #[test]
    fn a_first_message_of_a_conversation_not_on_record_is_asked_again_uncut() {
        let Resolved::Redo { turn: t, effects } = resolve(
            &turn(0),
            &taken(Some(Cut::Whole), Vec::new(), false),
            0,
            3,
            Some("new"),
        ) else {
            panic!("asked again")
        };
        assert_eq!(t.cut, None);
        assert!(
            !writes(&effects)
                .iter()
                .any(|w| matches!(w, Write::Session(_)))
        );
    }

    #[test]
    fn a_whole_answer_is_recorded_once_and_ends_the_turn() {
        let answer = vec![
            ChatPayload {
                kind: "assistant",
                payload: json!({"text": "a"}),
            },
            ChatPayload {
                kind: "assistant",
                payload: json!({"text": "b"}),
            },
        ];
        let Resolved::Answered(effects) = resolve(&turn(0), &taken(None, answer, true), 1, 3, None)
        else {
            panic!("answered")
        };
        let items: Vec<Write> = writes(&effects)
            .into_iter()
            .filter(|w| matches!(w, Write::Chat { kind, .. } if kind == "assistant"))
            .collect();
        assert_eq!(items.len(), 1, "only what the chat lacked: {items:?}");
        assert!(writes(&effects).contains(&Write::TurnFinished {
            turn_id: "t".into(),
            outcome: TurnOutcome::Success
        }));
    }

    /// A redo's note names its message (it may stand after later messages in the chat: a
    /// hostile run of issue 45 read "this message" under another one).
    #[test]
    fn a_redo_note_names_its_message_by_its_first_line() {
        let turn = QueuedTurn::new("t", "SIGT msg 02\nand more");
        let Effect::Commit { writes, .. } = redo(&turn, None) else {
            panic!("a commit");
        };
        let said = writes
            .iter()
            .find_map(|w| match w {
                Write::Chat { payload, .. } => Some(payload.clone()),
                _ => None,
            })
            .unwrap();
        assert!(
            said.contains("the message \u{201c}SIGT msg 02…\u{201d} reached"),
            "{said}"
        );
        assert_eq!(quoted(&"x".repeat(61)), format!("{}…", "x".repeat(60)));
        assert_eq!(quoted("short"), "short");
    }
}
