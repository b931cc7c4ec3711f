//! Idle stop (design rules 12 and 13; decided in `crate::supervisor::core::idle`, the deadline
//! handled by the core as a timeout).

use super::Actor;
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

    /// After every event: an idle bot gets a fresh deadline, a busy one none
    /// (`idle_deadline`); the view keeps what the bot does and when it was last used,
    /// for the supervisor's order under memory pressure (issue 31, `core::evict`), written only
    /// when it changed.
    ///
    pub(super) fn rearm_idle(&mut self) {
        let activity = self.core.activity(&self.facts());
        self.core
            .rearm_idle(&activity, self.idle_timeout(), Instant::now());
        let last_used = self.core.last_used();
        let shown = {
            let v = self.view.read().unwrap_or_else(|p| p.into_inner());
            (v.activity, v.last_used)
        };
        if shown != (activity, last_used) {
            self.update(vec![], |v| {
                v.activity = activity;
                v.last_used = last_used;
            });
        }
    }
}
