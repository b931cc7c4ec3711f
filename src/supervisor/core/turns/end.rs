//! How a turn ends, with no I/O: its result, a watchdog's or an interrupt's end, a process that
//! exited with it in flight (settled, or read back from the conversation: issue 25), a start
//! that failed, a conversation lost. Each method ends the turn once (design rule 8) and returns
//! the [`Effect`]s that record and publish it.

use serde_json::{Value, json};

use super::{Ended, Inflight, Settled, Turns, turn_finished_payload};
use crate::runtime::{ResultOutcome, TakenTurn};
use crate::supervisor::core::decide::{self, NoRedo, TurnOutcome, UnreplayedFate};
use crate::supervisor::core::effect::{CommitBuilder, Effect, Publish, Write};
use crate::supervisor::core::spend::Spend;
use crate::supervisor::core::taken::{self, Resolved};

impl Turns {
    /// The CLI reported a turn's result (`payload` is recorded as the `result` item). It ends the
    /// turn in flight once that began, or at once for a slash command ([`Inflight::answered_here`]);
    /// an error before the replay ends it too (design rule 4's fallback: the turn fails
    /// visibly). A success before the replay of any other message is a stray one (the late
    /// result of a turn a watchdog ended) and leaves it in flight. A turn an interrupt was sent
    /// for ends `interrupted`.
    pub fn result(
        &mut self,
        outcome: ResultOutcome,
        payload: &Value,
        error: Option<String>,
    ) -> Ended {
        let ours = match &self.inflight {
            Some(i) if i.answered_here() => true,
            Some(_) => outcome == ResultOutcome::Error,
            None => false,
        };
        let turn = if ours { self.inflight.take() } else { None };
        let (spend, conversation) = match &turn {
            Some(t) => self.meter.turn_ended(&t.session, payload),
            None => (Spend::default(), None),
        };
        // Ended before any replay: its delivery record is no longer needed either.
        let unreplayed = turn.as_ref().is_some_and(|t| !t.replayed);
        let asked_again = turn.as_ref().is_some_and(|t| t.turn.cut.is_some());
        let turn_id = turn.map(|t| t.turn.id);
        let interrupted = turn_id.is_some() && self.interrupting == turn_id;
        if interrupted {
            self.interrupting = None;
        }
        // A message asked again whose resume the CLI refused before it took it (Claude Code:
        // an error result "Resume rejected by --resume-drops-turn: …", then exit 1): it is in
        // the conversation once, unanswered, and is not asked again (issue 25).
        let cut_refused = unreplayed && asked_again && outcome == ResultOutcome::Error;
        let error = if interrupted { None } else { error };
        let outcome = match outcome {
            _ if interrupted => TurnOutcome::Interrupted,
            _ if cut_refused => TurnOutcome::TakenNotAnswered,
            ResultOutcome::Success => TurnOutcome::Success,
            ResultOutcome::Error => TurnOutcome::Error,
        };
        let reason = if interrupted {
            "interrupt"
        } else if cut_refused {
            "cut_refused"
        } else {
            payload
                .get("subtype")
                .and_then(Value::as_str)
                .unwrap_or_default()
        };
        let mut c = CommitBuilder::default();
        c.item("result", turn_id.as_deref(), payload.to_string());
        if let Some(e) = &error {
            c.write(Write::LastError(e.clone()))
                .then(Publish::LastError(e.clone()));
        }
        if let Some(t) = &turn_id {
            let text = error.as_deref().unwrap_or_default();
            if unreplayed {
                c.write(Write::DeliveryDone(t.clone()));
            }
            if !spend.is_zero() || conversation.is_some() {
                c.write(Write::Spend {
                    spend,
                    conversation,
                });
            }
            if !spend.is_zero() {
                c.then(Publish::Spend(spend));
            }
            c.write(Write::TurnFinished {
                turn_id: t.clone(),
                outcome,
            })
            .item(
                "turn_finished",
                Some(t),
                turn_finished_payload(t, outcome, reason, text, Some(&spend)),
            )
            .then(Publish::TurnFinished {
                turn_id: t.clone(),
                outcome,
            });
        }
        let mut effects: Vec<Effect> = c.build().into_iter().collect();
        effects.push(Effect::Queued(self.waiting()));
        Ended {
            effects,
            succeeded: turn_id.is_some() && outcome == TurnOutcome::Success,
            turn_id,
            error,
            spend,
        }
    }

    /// Ends `turn_id` durably and then says so: its status, an optional chat item (`kind`,
    /// payload), its typed `turn_finished` item and, with `adopt`, the conversation that took it,
    /// in one commit (rules 1 and 8: every turn ends with one durable outcome).
    pub fn finish(
        turn_id: &str,
        outcome: TurnOutcome,
        reason: &str,
        item: Option<(&str, Value)>,
        adopt: Option<&str>,
    ) -> Effect {
        let text = item
            .as_ref()
            .and_then(|(_, p)| p.get("text").and_then(Value::as_str))
            .unwrap_or_default()
            .to_owned();
        let mut c = CommitBuilder::default();
        c.write(Write::TurnFinished {
            turn_id: turn_id.to_owned(),
            outcome,
        })
        .write(Write::DeliveryDone(turn_id.to_owned()));
        if let Some(s) = adopt {
            c.write(Write::Session(Some(s.to_owned())))
                .then(Publish::SessionId(Some(s.to_owned())));
        }
        if let Some((kind, payload)) = item {
            c.item(kind, Some(turn_id), payload.to_string());
        }
        c.item(
            "turn_finished",
            Some(turn_id),
            turn_finished_payload(turn_id, outcome, reason, &text, None),
        )
        .then(Publish::TurnFinished {
            turn_id: turn_id.to_owned(),
            outcome,
        });
        c.build().expect("a turn's end writes rows")
    }

    /// The process of the turn in flight is gone. A turn that began ends with `outcome` (and
    /// `text` in an `error` item for a crash, a `system` item otherwise). A message not yet
    /// replayed goes back to the head of the queue, unless the conversation it went to holds it
    /// already: then it is never sent again (design rule 8, [`decide::unreplayed_message`]),
    /// and ends as a turn that began when its end was asked for (`interrupted`), else
    /// `taken_not_answered`. `holds` answers whether the conversation holds it.
    pub fn settle(
        &mut self,
        outcome: TurnOutcome,
        reason: &str,
        text: String,
        recorded: Option<&str>,
        holds: impl FnOnce(&Inflight) -> bool,
    ) -> (Settled, Vec<Effect>) {
        let Some(inf) = self.inflight.take() else {
            return (Settled::Nothing, Vec::new());
        };
        if !inf.replayed {
            return match decide::unreplayed_message(recorded, &inf.session, holds(&inf)) {
                UnreplayedFate::Resend => {
                    self.queue.push_front(inf.turn);
                    (Settled::Requeued, vec![Effect::Queued(self.waiting())])
                }
                // An end a client asked for (a Stop, a Delete; a stop that gave up) ends a message
                // the conversation took as it ends a turn that began: the model had it, and
                // the turn is what was stopped (Claude Code replays a message only once the
                // answer begins).
                UnreplayedFate::Taken { adopt } if outcome == TurnOutcome::Interrupted => {
                    let item = (!text.is_empty()).then(|| ("system", json!({ "text": text })));
                    let end = Turns::finish(&inf.turn.id, outcome, reason, item, adopt.as_deref());
                    (Settled::Ended, vec![end, Effect::Queued(self.waiting())])
                }
                UnreplayedFate::Taken { adopt } => {
                    let end =
                        taken::unanswered_end(&inf.turn.id, NoRedo::NotAsked, adopt.as_deref());
                    (Settled::Taken, vec![end, Effect::Queued(self.waiting())])
                }
            };
        }
        let kind = if outcome == TurnOutcome::Crashed {
            "error"
        } else {
            "system"
        };
        let item = (!text.is_empty()).then(|| (kind, json!({ "text": text })));
        let end = Turns::finish(&inf.turn.id, outcome, reason, item, None);
        (Settled::Ended, vec![end])
    }

    /// The process of the turn in flight ended unasked (it crashed, or exited by itself), as
    /// [`Turns::settle`], except that a message its conversation took is resolved by what the
    /// conversation's file holds (issue 25, [`taken::resolve`]): `look` reads it. A whole answer
    /// read back ends the turn `success`; a message taken and unanswered is asked again, first in
    /// the queue, while `redo_limit` allows; otherwise a message never replayed ends
    /// `taken_not_answered` and a turn that began ends with `outcome`.
    pub fn settle_unasked(
        &mut self,
        outcome: TurnOutcome,
        reason: &str,
        text: String,
        recorded: Option<&str>,
        redo_limit: u32,
        look: impl FnOnce(&Inflight) -> Option<TakenTurn>,
    ) -> (Settled, Vec<Effect>) {
        let Some(inf) = self.inflight.as_ref() else {
            return (Settled::Nothing, Vec::new());
        };
        let Some(taken) = look(inf) else {
            // Begun, never written down, nothing of an answer shown: asked again, uncut.
            let lost = inf
                .replayed
                .then(|| {
                    taken::lost_before_written(&inf.turn, inf.answer_items, inf.worked, redo_limit)
                })
                .flatten();
            if let Some(Resolved::Redo { turn, effects }) = lost {
                self.inflight = None;
                self.queue.push_front(turn);
                let mut effects = effects;
                effects.push(Effect::Queued(self.waiting()));
                return (Settled::Redone, effects);
            }
            return self.settle(outcome, reason, text, recorded, |_| false);
        };
        let inf = self.inflight.take().expect("in flight");
        let adopt = match decide::unreplayed_message(recorded, &inf.session, true) {
            UnreplayedFate::Taken { adopt } if !inf.replayed => adopt,
            _ => None,
        };
        let in_chat = if inf.replayed { inf.answer_items } else { 0 };
        let mut effects = Vec::new();
        let settled = match taken::resolve(&inf.turn, &taken, in_chat, redo_limit, adopt.as_deref())
        {
            Resolved::Answered(done) => {
                effects.extend(done);
                Settled::Recovered
            }
            Resolved::Redo {
                turn,
                effects: redo,
            } => {
                effects.extend(redo);
                self.queue.push_front(turn);
                Settled::Redone
            }
            Resolved::Unanswered { why, effects: read } => {
                effects.extend(read);
                if inf.replayed {
                    let kind = if outcome == TurnOutcome::Crashed {
                        "error"
                    } else {
                        "system"
                    };
                    let item = (!text.is_empty()).then(|| (kind, json!({ "text": text })));
                    effects.push(Turns::finish(&inf.turn.id, outcome, reason, item, None));
                    Settled::Ended
                } else {
                    effects.push(taken::unanswered_end(&inf.turn.id, why, adopt.as_deref()));
                    Settled::Taken
                }
            }
        };
        effects.push(Effect::Queued(self.waiting()));
        (settled, effects)
    }

    /// The CLI printed nothing within the start watchdog's bound (design rule 15): the message in
    /// flight fails visibly (`error`, reason `start_timeout`) unless its conversation holds it
    /// already, which ends it `taken_not_answered` (rule 8); with none in flight (a CLI whose
    /// handshake never ended took none), the first waiting message fails; what else waits,
    /// waits.
    pub fn start_timed_out(
        &mut self,
        recorded: Option<&str>,
        holds: impl FnOnce(&Inflight) -> bool,
    ) -> Vec<Effect> {
        self.start_failed("start_timeout", recorded, holds)
    }

    /// The process cannot run a turn (its start timed out, `start_timeout`; or its handshake was
    /// refused, `open_failed`): as [`Turns::start_timed_out`], with `reason`.
    pub fn start_failed(
        &mut self,
        reason: &str,
        recorded: Option<&str>,
        holds: impl FnOnce(&Inflight) -> bool,
    ) -> Vec<Effect> {
        let Some(inf) = self.inflight.take() else {
            // A CLI that never finished its handshake (Codex) took no message: the one waiting
            // for this start fails, never written.
            let Some(head) = self.queue.pop_front() else {
                return vec![Effect::Queued(self.waiting())];
            };
            let end = Turns::finish(&head.id, TurnOutcome::Error, reason, None, None);
            return vec![end, Effect::Queued(self.waiting())];
        };
        let end = match decide::unreplayed_message(recorded, &inf.session, holds(&inf)) {
            UnreplayedFate::Taken { adopt } => {
                taken::unanswered_end(&inf.turn.id, NoRedo::NotAsked, adopt.as_deref())
            }
            UnreplayedFate::Resend => {
                Turns::finish(&inf.turn.id, TurnOutcome::Error, reason, None, None)
            }
        };
        vec![end, Effect::Queued(self.waiting())]
    }

    /// The CLI did not end the turn within the interrupt's grace (design rule 15): it ends
    /// `interrupted` (reason `interrupt_timeout`) with `text` in a `system` item.
    pub fn interrupt_timed_out(&mut self, text: &str) -> Vec<Effect> {
        self.interrupting = None;
        let mut effects: Vec<Effect> = self
            .inflight
            .take()
            .map(|inf| {
                Turns::finish(
                    &inf.turn.id,
                    TurnOutcome::Interrupted,
                    "interrupt_timeout",
                    Some((
                        "system",
                        json!({"text": text, "reason": "interrupt_timeout"}),
                    )),
                    None,
                )
            })
            .into_iter()
            .collect();
        effects.push(Effect::Queued(self.waiting()));
        effects
    }

    /// The CLI could not find the conversation it was resumed on (design rule 4): a message not
    /// yet replayed was never taken, so it waits again, first.
    pub fn conversation_lost(&mut self) -> Vec<Effect> {
        if let Some(inf) = self.inflight.take_if(|i| !i.replayed) {
            self.queue.push_front(inf.turn);
        }
        vec![Effect::Queued(self.waiting())]
    }
}
