//! Idle stop (design rules 12 and 13; decided in [`crate::supervisor::core::idle`]).

use super::Actor;
use crate::process::identity::Liveness;
use crate::process::identity::liveness;
use crate::supervisor::core::idle::{self, Activity, AtIdleDeadline};
use crate::supervisor::core::stop::StopReason;
use std::time::Duration;
use std::time::Instant;

impl Actor {
    pub(super) fn idle_timeout(&self) -> Option<Duration> {
        let s = self
            .record()
            .idle_timeout_s
            .unwrap_or(self.shared.config.idle_timeout_s);
        (s > 0).then(|| Duration::from_secs(s))
    }

    /// What the actor knows of the bot's activity without reading `/proc`.
    pub(super) fn activity(&self) -> Activity {
        Activity {
            running: self.core.process.as_ref().is_some_and(|p| !p.run.stopping),
            in_flight: self.core.turns.inflight.is_some(),
            queued: !self.core.turns.queue.is_empty(),
            background_tasks: self.core.background_tasks,
            holders: self.holders(),
            open_prompts: self.pending_prompts(),
        }
    }

    /// After every event: an idle bot gets a fresh deadline, a busy one none
    /// ([`idle::idle_deadline`]).
    pub(super) fn rearm_idle(&mut self) {
        self.core.idle_at =
            idle::idle_deadline(&self.activity(), self.idle_timeout(), Instant::now());
    }

    /// The idle deadline came ([`idle::at_idle_deadline`]).
    pub(super) async fn on_idle_deadline(&mut self) {
        self.core.idle_at = None;
        let activity = self.activity();
        let verdict = idle::at_idle_deadline(&activity, || {
            self.snapshot_descendants();
            self.known.iter().any(|id| liveness(id) == Liveness::Alive)
        });
        match verdict {
            AtIdleDeadline::NotIdle => {}
            AtIdleDeadline::DescendantLives => {
                tracing::debug!(bot_id = %self.id, "idle, but a descendant lives: not stopped");
            }
            AtIdleDeadline::Stop => {
                tracing::info!(bot_id = %self.id, "idle stop");
                self.stop_process(StopReason::Idle).await;
            }
        }
    }
}
