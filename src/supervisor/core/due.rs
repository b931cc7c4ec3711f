//! A deadline of the bot that came (issue 27: handled by the core as [`super::Input::Timeout`]):
//! streamed text let out, a look after a tool, a watchdog (design rule 15), the crash backoff
//! over (rule 11), the idle deadline (rules 12 and 13), a usage limit's end, a look at the process
//! that holds the conversation (rule 7).

use std::time::Instant;

use super::bot_core::{BotCore, Due};
use super::budget;
use super::effect::Effect;
use super::idle::Activity;
use super::look::Look;
use super::machine::Facts;
use super::stop::StopReason;
use super::timeouts;
use super::watchdogs::Expired;

/// What the chat says of a permission request its turn's end left unanswered.
const TURN_ENDED: &str = "The turn ended before this request was answered.";

impl BotCore {
    /// What the bot does, as far as idleness goes (design rule 12).
    pub fn activity(&self, facts: &dyn Facts) -> Activity {
        let (holders, open_prompts) = facts.watchers();
        Activity {
            running: self.process.as_ref().is_some_and(|p| !p.run.stopping),
            in_flight: self.turns.inflight.is_some(),
            queued: !self.turns.queue.is_empty(),
            background_tasks: self.background_tasks,
            holders,
            open_prompts,
        }
    }

    /// One deadline that came.
    pub(super) fn due(&mut self, now: Instant, due: Due, facts: &dyn Facts) {
        match due {
            Due::FlushText => self.flush_text(now),
            Due::LookForDescendants => self.emit([Effect::LookForDescendants]),
            Due::Watchdog(expired) => self.watchdog(expired, facts),
            // Nothing to do but what follows every input: the pump may start the agent now.
            Due::RestartBackoffOver => {}
            Due::Idle => {
                self.idle_at = None;
                self.look_before_idle_stop(StopReason::Idle, facts);
            }
            Due::LookAtHolder => {
                if let Some(h) = &self.held {
                    self.emit([Effect::Look(Look::Holder(h.identity.clone()))]);
                }
            }
            Due::LookAfterCrash => self.look_after_crash(now, facts),
            Due::LimitLifted => {
                tracing::info!("usage limit over; the waiting messages go");
                let (cost, budget) = self.spend();
                self.emit(budget::hold_over(self.process.is_some(), cost, budget));
            }
        }
    }

    /// A watchdog caught a CLI that stopped answering: said (chat item, `LastError`, journal),
    /// the turn ended, the process stopped (design rule 15).
    fn watchdog(&mut self, expired: Expired, facts: &dyn Facts) {
        let bounds = self.settings.bounds;
        match expired {
            Expired::Start => {
                tracing::warn!("the agent printed nothing within start_timeout_s; stopping it");
                let recorded = facts.recorded();
                self.emit([Effect::ClosePrompts(TURN_ENDED.into())]);
                let effects = timeouts::start_timed_out(
                    &mut self.turns,
                    bounds.start_s,
                    recorded.as_deref(),
                    |i| facts.taken_turn(i).is_some(),
                );
                self.emit(effects);
                self.emit([Effect::Stop(StopReason::StartTimeout)]);
            }
            Expired::Interrupt(turn) => {
                let Some(effects) =
                    timeouts::interrupt_timed_out(&mut self.turns, &turn, bounds.interrupt_grace_s)
                else {
                    return;
                };
                tracing::warn!(turn_id = %turn, "the agent did not end the turn within interrupt_grace_s; stopping it");
                // Every item of the turn before its end: a question left open is closed first.
                self.emit([Effect::ClosePrompts(TURN_ENDED.into())]);
                self.emit(effects);
                self.emit([Effect::Stop(StopReason::InterruptTimeout)]);
            }
            Expired::Control(request_id) => {
                let Some(p) = self.process.as_mut() else {
                    return;
                };
                let effects = p.controls.timed_out(&request_id, bounds.control_s);
                if !effects.is_empty() {
                    tracing::warn!(%request_id, "a live setting was not answered (control_timeout_s)");
                }
                self.emit(effects);
            }
        }
    }
}
