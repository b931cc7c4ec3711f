//! A turn's life: it begins (the replay records the session, design rule 3), ends with its
//! result, or is settled when its process is gone (design rule 8); one durable outcome each.

use super::Actor;
use crate::process;
use crate::process::identity::ProcessIdentity;
use std::time::Duration;

impl Actor {
    /// Stops what an interrupted turn left running, by identity (SIGTERM, `stop_grace_s`,
    /// SIGKILL), and says in the chat what was stopped and what survived (reason
    /// `interrupted_processes`).
    pub(super) async fn stop_left_by_interrupt(&mut self, turn: &str, left: Vec<ProcessIdentity>) {
        tracing::info!(bot_id = %self.id, turn_id = %turn, count = left.len(), "stopping what the interrupted turn left running");
        let grace = Duration::from_secs_f64(self.shared.config.stop_grace_s);
        let stopped = process::stop::stop_by_identity(&left, grace).await;
        let note = crate::supervisor::core::stopped_note(&stopped);
        if note["survivors"].as_array().is_some_and(|s| !s.is_empty()) {
            tracing::warn!(bot_id = %self.id, turn_id = %turn, "{}", note["text"]);
        }
        self.add_item("system", Some(turn), note);
    }
}

/// Now, in Unix seconds.
pub(super) fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
