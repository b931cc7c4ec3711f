//! What the core asks the shell to look at in the world, and the answer, which comes back as an
//! input (issue 48, step 3): whether a descendant of the agent lives (`/proc`) before an idle
//! stop (design rules 12 and 13) or a stop for memory pressure (issue 31), and whether the
//! process that holds the conversation still lives (design rule 7). The core asks with
//! [`super::Effect::Look`] and decides when [`super::Input::Looked`] comes, from
//! what the bot does then: nothing the core holds is read outside [`BotCore::handle`].

use std::time::Instant;

use super::bot_core::BotCore;
use super::effect::Effect;
use super::held;
use super::idle::{self, AtIdleDeadline};
use super::machine::Facts;
use super::stop::StopReason;
use crate::process::identity::ProcessIdentity;

/// A look the core asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Look {
    /// Whether a descendant of the agent lives (a tool that runs without the CLI saying so),
    /// before the stop `why` (`Idle` or `MemoryPressure`), asked only when every other sign says
    /// idle.
    Descendants(StopReason),
    /// Whether the process that holds the conversation still lives (one that cannot be checked
    /// counts as alive).
    Holder(ProcessIdentity),
}

/// What a [`Look`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Looked {
    /// [`Look::Descendants`]: before the stop `why`, whether one lives.
    Descendants {
        /// The stop the look was for.
        why: StopReason,
        /// Whether a descendant lives.
        lives: bool,
    },
    /// [`Look::Holder`]: whether the holder `identity` lives.
    Holder {
        /// The holder looked at.
        identity: ProcessIdentity,
        /// Whether it lives.
        alive: bool,
    },
}

impl BotCore {
    /// Before an idle stop (`why`: the idle deadline or memory pressure): looks for a live
    /// descendant when every other sign says idle, else nothing happens.
    pub(super) fn look_before_idle_stop(&mut self, why: StopReason, facts: &dyn Facts) {
        if self.activity(facts).looks_idle() {
            self.emit([Effect::Look(Look::Descendants(why))]);
        } else {
            tracing::debug!(why = why.as_str(), "not idle any more, not stopped");
        }
    }

    /// What a look found: the stop it was for, with fresh facts ([`idle::at_idle_deadline`]:
    /// every sign of idleness again, then no live descendant), or the holder's exit.
    pub(super) fn looked(&mut self, now: Instant, answer: Looked, facts: &dyn Facts) {
        match answer {
            Looked::Descendants { why, lives } => {
                match idle::at_idle_deadline(&self.activity(facts), || lives) {
                    AtIdleDeadline::NotIdle => {
                        tracing::debug!(why = why.as_str(), "not idle any more, not stopped");
                    }
                    AtIdleDeadline::DescendantLives => {
                        tracing::debug!(why = why.as_str(), "idle, but a descendant lives");
                    }
                    AtIdleDeadline::Stop if why == StopReason::MemoryPressure => {
                        self.stop_for_memory_pressure(now)
                    }
                    AtIdleDeadline::Stop => {
                        tracing::info!("idle stop");
                        self.emit([Effect::Stop(StopReason::Idle)]);
                    }
                }
            }
            Looked::Holder { identity, alive } => {
                if let Some(h) = self.held.take_if(|h| !alive && h.identity == identity) {
                    tracing::info!(pid = h.identity.pid, "the other process exited");
                    self.emit(held::released(&h));
                }
            }
        }
    }
}
