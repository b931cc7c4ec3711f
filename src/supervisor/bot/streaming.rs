//! Streamed assistant text: `TextDelta` at most every [`super::TEXT_DELTA_INTERVAL`], and
//! the `PartialText` a late client reads.

use super::Actor;
use crate::supervisor::Publication;
use std::time::Instant;

impl Actor {
    /// Streamed text: signalled at most once per [`TEXT_DELTA_INTERVAL`]
    /// ([`crate::supervisor::core::stream::DeltaPacer`]).
    pub(super) fn on_text_delta(&mut self, text: String) {
        {
            let mut v = self.view.write().unwrap_or_else(|p| p.into_inner());
            v.partial_text.push_str(&text);
        }
        if let Some(out) = self.core.deltas.push(&text, Instant::now()) {
            self.signal_delta(out);
        }
    }

    /// Signals what streamed text waits, if any.
    pub(super) fn flush_delta(&mut self) {
        if let Some(out) = self.core.deltas.flush(Instant::now()) {
            self.signal_delta(out);
        }
    }

    fn signal_delta(&self, text: String) {
        let _ = self.shared.publisher.send(Publication::TextDelta {
            bot_id: self.id.clone(),
            turn_id: self.current_turn_id().unwrap_or_default(),
            text,
        });
    }

    /// A message is complete (or a new one starts): signal what is left, start over.
    pub(super) fn end_streamed_message(&mut self) {
        self.flush_delta();
        let mut v = self.view.write().unwrap_or_else(|p| p.into_inner());
        v.partial_text.clear();
    }
}
