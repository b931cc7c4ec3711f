//! Turns and delivery, with no I/O: the queue of messages a bot was sent, the one in flight, and
//! what each thing that happens to it means (design rules 3, 7 and 8). Every method changes the
//! state and returns the [`Effect`]s its shell executes in order; facts the core cannot know
//! (whether a transcript exists, whether a conversation holds a message) are asked through the
//! closures it is given, so a test answers them.

use std::collections::VecDeque;
use std::time::SystemTime;

use serde_json::json;

use super::effect::{CommitBuilder, Effect, Publish, Write};
use super::spend::{Meter, Spend, usd};
use crate::runtime::Cut;
use crate::supervisor::core::State;
use crate::supervisor::core::decide::{self, SessionChoice, TurnOutcome};

mod end;

pub use crate::queued::QueuedTurn;

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
    /// The turn ids of the messages [`Turns::waiting`] counts, in order.
    pub fn waiting_ids(&self) -> Vec<String> {
        self.queue.iter().map(|t| t.id.clone()).collect()
    }

    /// Messages sent and not yet written to an agent (`QueuedMessages`). A message written is
    /// the turn in flight, even before the CLI replays it: Claude Code replays it only once the
    /// model's answer begins (seen on 2.1.328 with a stand-in that answers slowly), and the
    /// model has it meanwhile.
    pub fn waiting(&self) -> u32 {
        self.queue.len() as u32
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
    /// nothing waits or a message is in flight already. `now` is when it is written, kept to the
    /// millisecond as the `deliveries` table keeps it. It is written once the commit is durable
    /// ([`Turns::delivery_recorded`]). The process was launched without a cut: see
    /// [`Turns::deliver_cut`].
    #[cfg(test)]
    pub fn deliver(&mut self, session: &str, now: SystemTime) -> Option<(QueuedTurn, Vec<Effect>)> {
        self.deliver_cut(session, now, None)
    }

    /// `Turns::deliver` by a process launched to resume without what `launched_cut` drops. A
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
        let now = to_millis(now);
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
            at: now,
        });
        Some((turn, c.build().into_iter().collect()))
    }

    /// The commit of `Turns::deliver` ended: `committed`, the message is to be written now
    /// (`true`). Not committed, where it would go is not on record: it is not written (a daemon
    /// crash could deliver it twice, rule 8) and waits again, first.
    pub fn delivery_recorded(&mut self, committed: bool) -> bool {
        if !committed {
            self.unwritten();
        }
        committed
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
}

/// `t` to the whole millisecond below it: a delivery's time as the `deliveries` table keeps it,
/// so that the time in memory and the one a later daemon reads are the same.
fn to_millis(t: SystemTime) -> SystemTime {
    let since = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    SystemTime::UNIX_EPOCH + std::time::Duration::from_millis(since.as_millis() as u64)
}

#[cfg(test)]
mod tests;
