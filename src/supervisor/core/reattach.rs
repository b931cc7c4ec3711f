//! An agent taken over from the previous botvisord (issue 47), with no I/O: the process as the
//! core knew it and the turn it was answering go on as they were, instead of being settled as
//! after a daemon crash ([`super::left_turns`]).

use std::time::{Duration, Instant};

use super::bot_core::{BotCore, Process};
use super::control::Controls;
use super::decide;
use super::effect::Effect;
use super::left_turns::Left;
use super::lifecycle::Run;
use super::machine::Facts;
use super::state::State;
use super::taken;
use super::turns::Inflight;

/// How long an agent taken over after botvisord was killed may be silent, with a turn in flight,
/// before its conversation's file is read for the turn's end: the killed botvisord may have read
/// the turn's last lines and never handled them.
pub(super) const CRASH_LOOK: Duration = Duration::from_secs(5);

impl BotCore {
    /// What the previous botvisord knew of its running process, for the next one
    /// ([`BotCore::reattached`]); `None` with no process.
    pub fn handed_over(&self) -> Option<Run> {
        self.process.as_ref().map(|p| p.run.clone())
    }

    /// The agent the previous botvisord handed over runs on as `run` in conversation `session`:
    /// the turn it had begun (`left.running`, at most one) is in flight again, its answer's
    /// items in the chat counted; else a message written to it and not yet replayed (the first
    /// of `left.queued` with a delivery) is in flight, unreplayed; every other waiting message
    /// waits, in order. Nothing is settled and nothing is said: for the user nothing happened.
    pub(super) fn reattached(&mut self, run: Run, left: Left, session: &str) -> Vec<Effect> {
        self.process = Some(Process {
            run,
            controls: Controls::default(),
        });
        // A message a client sent while the daemon started may be queued already: once, after.
        let sent_meanwhile: Vec<_> = self.turns.queue.drain(..).collect();
        let mut inflight = left.running.into_iter().next().map(|r| Inflight {
            turn: r.turn,
            replayed: true,
            session: session.to_owned(),
            written: r.sent_at,
            worked: r.worked,
            answer_items: r.in_chat,
        });
        for (turn, sent) in left.queued {
            match (&inflight, sent) {
                (None, Some((to, at))) => {
                    inflight = Some(Inflight {
                        turn,
                        replayed: false,
                        session: to,
                        written: at,
                        worked: false,
                        answer_items: 0,
                    })
                }
                _ => self.turns.queue.push_back(turn),
            }
        }
        let known = |id: &str| {
            self.turns.queue.iter().any(|t| t.id == id)
                || inflight.as_ref().is_some_and(|i| i.turn.id == id)
        };
        let meanwhile: Vec<_> = sent_meanwhile
            .into_iter()
            .filter(|t| !known(&t.id))
            .collect();
        self.turns.queue.extend(meanwhile);
        let busy = inflight.is_some();
        self.turns.inflight = inflight;
        vec![
            Effect::State(if busy { State::Busy } else { State::Idle }),
            Effect::Queued(self.turns.waiting()),
        ]
    }

    /// The agent spoke: the look after a crash waits again, or ends with the turn. Before what
    /// it says is handled, a message in flight that it never replayed to this botvisord is
    /// looked for in its conversation's file ([`BotCore::began_unseen`]).
    pub(super) fn crash_spoke(&mut self, now: Instant, facts: &dyn Facts) {
        if self.crash_look.is_some() {
            self.began_unseen(facts);
            self.crash_look = self.turns.inflight.is_some().then(|| now + CRASH_LOOK);
        }
    }

    /// Design rule 8 across a crash: the message in flight was written to the agent taken over,
    /// and its replay was read by the killed botvisord and never handled (the new one reads on
    /// from the next whole line). When the conversation's file holds the message, written since
    /// it was sent, its turn began: it runs, as a replay would have made it (the session
    /// recorded, rule 3), so that the answer that follows is its answer. `true` when it did.
    fn began_unseen(&mut self, facts: &dyn Facts) -> bool {
        let Some(inf) = self.turns.inflight.clone().filter(|i| !i.replayed) else {
            return false;
        };
        if facts.taken_turn(&inf).is_none() {
            return false;
        }
        tracing::info!(turn_id = %inf.turn.id, "the agent took the message before botvisord was killed: its turn runs");
        self.replayed(None, facts);
        true
    }

    /// The agent taken over after a crash stayed silent:
    /// - a message in flight it never replayed that its conversation's file holds began
    ///   ([`BotCore::began_unseen`]); one the file does not hold yet is in the agent's stdin
    ///   whole (a delivery not written whole is never taken over: `deliveries.whole`) and is
    ///   looked for again later;
    /// - when the file holds the turn's whole answer, the turn ended before the killed
    ///   botvisord handled it: what the chat lacks of it is recorded (`recovered: true`) and it
    ///   ends `success` (reason `recovered`), once;
    /// - otherwise it is looked at again later.
    pub(super) fn look_after_crash(&mut self, now: Instant, facts: &dyn Facts) {
        let Some(inf) = self.turns.inflight.clone() else {
            return;
        };
        if !inf.replayed && !self.began_unseen(facts) {
            if !std::mem::replace(&mut self.crash_look_told, true) {
                tracing::info!(turn_id = %inf.turn.id, "the agent taken over is silent and its conversation's file does not hold the message yet; looked at again every 5 s");
            }
            self.crash_look = Some(now + CRASH_LOOK);
            return;
        }
        let Some(inf) = self.turns.inflight.clone() else {
            return;
        };
        match facts.taken_turn(&inf) {
            Some(t) if t.answered && inf.replayed => {
                tracing::info!(turn_id = %inf.turn.id, "the turn had ended before botvisord was killed: its answer is read back");
                let (missing, _) = decide::reconcile(&t, inf.answer_items);
                self.turns.inflight = None;
                let mut effects: Vec<Effect> = taken::recovered_items(&inf.turn.id, missing)
                    .into_iter()
                    .collect();
                effects.push(taken::recovered_end(&inf.turn.id, None));
                effects.push(Effect::State(State::Idle));
                effects.push(Effect::Queued(self.turns.waiting()));
                self.emit(effects);
            }
            _ => {
                if !std::mem::replace(&mut self.crash_look_told, true) {
                    tracing::info!(turn_id = %inf.turn.id, "the agent taken over is silent and its conversation's file does not hold the turn's end yet; looked at again every 5 s");
                }
                self.crash_look = Some(now + CRASH_LOOK)
            }
        }
    }
}
