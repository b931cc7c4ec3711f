//! Turns and delivery, with no I/O: the queue of messages a bot was sent, the one in flight, and
//! what each thing that happens to it means (design rules 3, 7 and 8). Every method changes the
//! state and returns the [`Effect`]s its shell executes in order; facts the core cannot know
//! (whether a transcript exists, whether a conversation holds a message) are asked through the
//! closures it is given, so a test answers them.

use std::collections::VecDeque;
use std::time::SystemTime;

use serde_json::{Value, json};

use super::effect::{CommitBuilder, Effect, Publish, Write};
use super::spend::{Meter, Spend, usd};
use super::taken::{self, Resolved};
use crate::runtime::{Cut, ResultOutcome, TakenTurn};
use crate::supervisor::core::State;
use crate::supervisor::core::decide::{self, NoRedo, SessionChoice, TurnOutcome, UnreplayedFate};

/// A message waiting for a process to take it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct QueuedTurn {
    /// The turn id `Send` returned.
    pub id: String,
    /// The user's text.
    pub text: String,
    /// How many times it was asked again after its conversation took it unanswered (issue 25).
    pub redos: u32,
    /// Where the resume that asks it again cuts its conversation, to drop the unanswered
    /// attempt; `None` once that attempt is gone (the message was replayed) or for a first ask.
    pub cut: Option<Cut>,
}

impl QueuedTurn {
    /// A message sent as `text`, asked for the first time.
    pub fn new(id: impl Into<String>, text: impl Into<String>) -> QueuedTurn {
        QueuedTurn {
            id: id.into(),
            text: text.into(),
            ..QueuedTurn::default()
        }
    }
}

/// The message written to the CLI and not yet ended.
#[derive(Debug, Clone, PartialEq)]
pub struct Inflight {
    /// The turn.
    pub turn: QueuedTurn,
    /// The CLI replayed it: the turn began (design rule 3).
    pub replayed: bool,
    /// The conversation it was written to.
    pub session: String,
    /// When its delivery was recorded (a transcript entry of it is at or after this).
    pub written: SystemTime,
    /// The agent called a tool in this turn: its work began, so a usage limit that cuts it
    /// ends it `limited` instead of sending the message again (`core::limits::refused`).
    pub worked: bool,
    /// How many chat items of its answer (`assistant`, `tool_use`, `tool_result`) are recorded:
    /// what its conversation's file holds beyond them is recorded if its process dies
    /// ([`Turns::settle_unasked`]).
    pub answer_items: usize,
}

impl Inflight {
    /// Whether what the CLI says now is this turn's: it replayed the message (the turn began),
    /// or the message is a slash command (`/cost`, `/compact`), which Claude Code runs itself,
    /// without replaying it: its output and its `result` come with no replay before them
    /// (2.1.328, tests/real/claude/sessions.rs `a_slash_command_the_cli_runs_itself_ends_its_turn`;
    /// issue 23: a failed `/compact` left the bot `busy` for ever).
    pub fn answered_here(&self) -> bool {
        self.replayed || is_slash_command(&self.turn.text)
    }
}

/// Whether `text` is a slash command to the CLI: its first character is `/`.
pub fn is_slash_command(text: &str) -> bool {
    text.starts_with('/')
}

/// What [`Turns::settle`] did with the turn in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    /// No turn was in flight.
    Nothing,
    /// Its message goes to the next process.
    Requeued,
    /// Its conversation holds its message: ended `taken_not_answered`.
    Taken,
    /// Its conversation holds its message unanswered: asked again (issue 25).
    Redone,
    /// Its conversation holds its whole answer: ended `success`, the answer read back.
    Recovered,
    /// It had begun and ended with the outcome given.
    Ended,
}

/// What a replay meant.
#[derive(Debug, Clone, PartialEq)]
pub struct Replayed {
    /// The rows and publications.
    pub effects: Vec<Effect>,
    /// A session id the CLI reported instead of the launched one, to be recorded once its
    /// transcript exists ([`decide::SessionChoice::LaunchedUntil`]).
    pub reported_later: Option<String>,
}

/// What a turn's result meant.
#[derive(Debug, Clone, PartialEq)]
pub struct Ended {
    /// The rows and publications.
    pub effects: Vec<Effect>,
    /// The turn it ended, if the result was the in-flight turn's.
    pub turn_id: Option<String>,
    /// The turn ended with its outcome `success`: the agent works (the crash backoff restarts).
    pub succeeded: bool,
    /// The error the result reported, unless the turn was interrupted (an interrupt's error is
    /// the interrupt, not a failure).
    pub error: Option<String>,
    /// What the turn cost (zero for a result that ended no turn).
    pub spend: Spend,
}

/// The queue and the turn in flight.
#[derive(Debug, Default, Clone)]
pub struct Turns {
    /// Messages waiting for the CLI, oldest first (design rule 7).
    pub queue: VecDeque<QueuedTurn>,
    /// The message written to the CLI and not yet ended.
    pub inflight: Option<Inflight>,
    /// The turn an interrupt was sent for.
    pub interrupting: Option<String>,
    /// What the turn in flight costs, from what the CLI tells.
    pub meter: Meter,
}

/// The payload of a `turn_finished` chat item: `{"turn_id", "outcome", "reason", "text"}`, and
/// for a turn the CLI finished what it cost: `cost_usd` (US dollars), `input_tokens`,
/// `output_tokens`.
pub fn turn_finished_payload(
    turn_id: &str,
    outcome: TurnOutcome,
    reason: &str,
    text: &str,
    spend: Option<&Spend>,
) -> String {
    let mut p =
        json!({"turn_id": turn_id, "outcome": outcome.as_str(), "reason": reason, "text": text});
    if let Some(s) = spend {
        p["cost_usd"] = json!(usd(s.cost_nanos));
        p["input_tokens"] = json!(s.input_tokens);
        p["output_tokens"] = json!(s.output_tokens);
    }
    p.to_string()
}

impl Turns {
    /// The turn ids of the messages [`Turns::waiting`] counts, the one in flight first.
    pub fn waiting_ids(&self) -> Vec<String> {
        self.inflight
            .iter()
            .filter(|i| !i.replayed)
            .map(|i| i.turn.id.clone())
            .chain(self.queue.iter().map(|t| t.id.clone()))
            .collect()
    }

    /// Messages sent and not yet taken by the CLI: the queue and an in-flight message not yet
    /// replayed (`QueuedMessages`).
    pub fn waiting(&self) -> u32 {
        self.queue.len() as u32 + self.inflight.as_ref().map_or(0, |i| u32::from(!i.replayed))
    }

    /// The turn what the CLI says now belongs to: the message in flight, once it is answered
    /// in this conversation ([`Inflight::answered_here`]); `None` between turns (what the CLI
    /// says then, at its start or after a turn's end, is the bot's, not a turn's).
    pub fn answering(&self) -> Option<&str> {
        self.inflight
            .as_ref()
            .filter(|i| i.answered_here())
            .map(|i| i.turn.id.as_str())
    }

    /// A chat item the CLI printed (`kind`: `assistant`, `tool_use`, `tool_result`, `system`,
    /// …; `payload`: a JSON object as text): recorded as the [`Turns::answering`] turn's, then
    /// published (design rule 1).
    pub fn said_by_cli(&mut self, kind: &str, payload: String) -> Vec<Effect> {
        if let Some(i) = self.inflight.as_mut().filter(|i| i.answered_here()) {
            i.worked |= kind == "tool_use";
            if matches!(kind, "assistant" | "tool_use" | "tool_result") {
                i.answer_items += 1;
            }
        }
        let mut c = CommitBuilder::default();
        c.item(kind, self.answering(), payload);
        c.build().into_iter().collect()
    }

    /// The CLI asked for a tool's permission in the turn it answers now: its work began (issue
    /// 25: such a turn is not asked again).
    pub fn asked_for_a_tool(&mut self) {
        if let Some(i) = self.inflight.as_mut().filter(|i| i.answered_here()) {
            i.worked = true;
        }
    }

    /// Whether the turn `turn_id` is queued or in flight.
    pub fn knows(&self, turn_id: &str) -> bool {
        self.queue.iter().any(|t| t.id == turn_id)
            || self.inflight.as_ref().is_some_and(|i| i.turn.id == turn_id)
    }

    /// A message a client sent: queued at the end unless it is known already (a message sent
    /// while the daemon recovered was loaded from the store: never twice, rule 8). A bot a
    /// client's Stop parked is let go: the message is taken to the agent.
    pub fn queue(&mut self, turn: QueuedTurn) -> Vec<Effect> {
        if !self.knows(&turn.id) {
            self.queue.push_back(turn);
        }
        vec![Effect::Park(false), Effect::Queued(self.waiting())]
    }

    /// The next message goes to the conversation `session`: it is in flight from now, and where
    /// it went is committed before it is written (rule 8 across a daemon crash). `None` when
    /// nothing waits or a message is in flight already. `now` stands for when it was written
    /// until the commit says ([`Turns::delivery_recorded`]). The shell writes `turn.text` once
    /// the commit is done. The process was launched without a cut: see [`Turns::deliver_cut`].
    pub fn deliver(&mut self, session: &str, now: SystemTime) -> Option<(QueuedTurn, Vec<Effect>)> {
        self.deliver_cut(session, now, None)
    }

    /// [`Turns::deliver`] by a process launched to resume without what `launched_cut` drops. A
    /// message asked again whose cut this process did not make goes without it from now on
    /// (its unanswered attempt is in a conversation this one does not resume, or is gone), so
    /// that a later resume does not cut a conversation that never held it (issue 25).
    pub fn deliver_cut(
        &mut self,
        session: &str,
        now: SystemTime,
        launched_cut: Option<&Cut>,
    ) -> Option<(QueuedTurn, Vec<Effect>)> {
        if self.inflight.is_some() {
            return None;
        }
        let mut turn = self.queue.pop_front()?;
        let mut c = CommitBuilder::default();
        if turn.cut.is_some() && turn.cut.as_ref() != launched_cut {
            turn.cut = None;
            c.write(Write::TurnUncut(turn.id.clone()));
        }
        self.inflight = Some(Inflight {
            turn: turn.clone(),
            replayed: false,
            session: session.to_owned(),
            written: now,
            worked: false,
            answer_items: 0,
        });
        c.write(Write::Delivery {
            turn_id: turn.id.clone(),
            session_id: session.to_owned(),
        });
        Some((turn, c.build().into_iter().collect()))
    }

    /// The commit of [`Turns::deliver`] ended: `committed` at `at`, the message is to be written
    /// now (`true`). Not committed, where it would go is not on record: it is not written (a
    /// daemon crash could deliver it twice, rule 8) and waits again, first.
    pub fn delivery_recorded(&mut self, committed: bool, at: Option<SystemTime>) -> bool {
        if !committed {
            self.unwritten();
            return false;
        }
        if let (Some(i), Some(at)) = (self.inflight.as_mut(), at) {
            i.written = at;
        }
        true
    }

    /// The message in flight was written to the CLI (`ok`): the bot is `busy`. Not written (its
    /// stdin closed), it waits again, first.
    pub fn wrote(&mut self, ok: bool) -> Vec<Effect> {
        if !ok {
            self.unwritten();
            return Vec::new();
        }
        vec![Effect::State(State::Busy), Effect::Queued(self.waiting())]
    }

    /// A client asked to interrupt: the turn to send the interrupt for, if one is in flight.
    pub fn to_interrupt(&self) -> Option<String> {
        self.inflight.as_ref().map(|i| i.turn.id.clone())
    }

    /// The interrupt for `turn` was sent: its result ends it `interrupted`.
    pub fn interrupt_sent(&mut self, turn: String) {
        self.interrupting = Some(turn);
    }

    /// The message in flight could not be written (the process's stdin closed): it waits again,
    /// first.
    pub fn unwritten(&mut self) {
        if let Some(i) = self.inflight.take() {
            self.queue.push_front(i.turn);
        }
    }

    /// The CLI replayed the message in flight: its turn began in the conversation it reports,
    /// `reported`, or else the one launched (design rule 3, [`decide::session_to_record`]); the
    /// turn runs and the session is recorded, in one commit. `None` when no message waits for a
    /// replay.
    pub fn replayed(
        &mut self,
        launched: &str,
        reported: Option<&str>,
        recorded: Option<&str>,
        transcript_exists: impl Fn(&str) -> bool,
    ) -> Option<Replayed> {
        let inf = self.inflight.as_mut().filter(|i| !i.replayed)?;
        let choice = decide::session_to_record(launched, reported, transcript_exists);
        let (sid, reported_later) = match choice {
            SessionChoice::Reported(r) => (r, None),
            SessionChoice::Launched => (launched.to_owned(), None),
            SessionChoice::LaunchedUntil(r) => (launched.to_owned(), Some(r)),
        };
        inf.replayed = true;
        // The unanswered attempt a resume was to cut is gone: the message is in this turn now.
        inf.turn.cut = None;
        let turn_id = inf.turn.id.clone();
        let mut c = CommitBuilder::default();
        c.write(Write::TurnRunning(turn_id.clone()))
            .write(Write::DeliveryDone(turn_id));
        if recorded != Some(sid.as_str()) {
            c.write(Write::Session(Some(sid.clone())))
                .then(Publish::SessionId(Some(sid)));
        }
        let mut effects: Vec<Effect> = c.build().into_iter().collect();
        effects.push(Effect::Queued(self.waiting()));
        Some(Replayed {
            effects,
            reported_later,
        })
    }

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
        let mut effects = Vec::new();
        if let Some(t) = &turn_id {
            effects.push(Effect::TurnEnded(t.clone()));
        }
        effects.extend(c.build());
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
    /// already: then it ends `taken_not_answered` and is never sent again (design rule 8,
    /// [`decide::unreplayed_message`]). `holds` answers whether the conversation holds it.
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

#[cfg(test)]
mod tests;
