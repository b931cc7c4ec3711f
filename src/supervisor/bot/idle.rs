//! Idle stop (design rule 12).

use super::*;

impl Actor {
    pub(super) fn idle_timeout(&self) -> Option<Duration> {
        let s = self
            .record()
            .idle_timeout_s
            .unwrap_or(self.config.idle_timeout_s);
        (s > 0).then(|| Duration::from_secs(s))
    }

    /// Idle by every sign the actor has without reading `/proc`.
    pub(super) fn looks_idle(&self) -> bool {
        self.proc.as_ref().is_some_and(|p| !p.stopping)
            && self.turns.inflight.is_none()
            && self.turns.queue.is_empty()
            && self.background_tasks == 0
            && self.holders() == 0
            && self.pending_prompts() == 0
    }

    /// After every event: an idle bot gets a fresh deadline, a busy one none.
    pub(super) fn rearm_idle(&mut self) {
        self.idle_deadline = match self.idle_timeout() {
            Some(t) if self.looks_idle() => tokio::time::Instant::now().checked_add(t),
            _ => None,
        };
    }

    pub(super) async fn on_idle_deadline(&mut self) {
        self.idle_deadline = None;
        if !self.looks_idle() {
            return;
        }
        self.snapshot_descendants();
        if self.known.iter().any(|id| liveness(id) == Liveness::Alive) {
            tracing::debug!(bot_id = %self.id, "idle, but a descendant lives: not stopped");
            return;
        }
        tracing::info!(bot_id = %self.id, "idle stop");
        self.stop_process("idle").await;
    }
}
