//! Streamed assistant text: `TextDelta` at most every [`super::TEXT_DELTA_INTERVAL`], and
//! the `PartialText` a late client reads.

use super::*;

impl Actor {
    /// Streamed text: signalled at most once per [`TEXT_DELTA_INTERVAL`].
    pub(super) fn on_text_delta(&mut self, text: String) {
        self.delta_buf.push_str(&text);
        {
            let mut v = self.view.write().unwrap_or_else(|p| p.into_inner());
            v.partial_text.push_str(&text);
        }
        let now = tokio::time::Instant::now();
        match self.last_delta_sent {
            Some(last) if now < last + TEXT_DELTA_INTERVAL => {
                if self.delta_flush_at.is_none() {
                    self.delta_flush_at = Some(last + TEXT_DELTA_INTERVAL);
                }
            }
            _ => self.flush_delta(),
        }
    }

    pub(super) fn flush_delta(&mut self) {
        self.delta_flush_at = None;
        if self.delta_buf.is_empty() {
            return;
        }
        self.last_delta_sent = Some(tokio::time::Instant::now());
        let _ = self.publisher.send(Publication::TextDelta {
            bot_id: self.id.clone(),
            turn_id: self.current_turn_id().unwrap_or_default(),
            text: std::mem::take(&mut self.delta_buf),
        });
    }

    /// A message is complete (or a new one starts): signal what is left, start over.
    pub(super) fn end_streamed_message(&mut self) {
        self.flush_delta();
        let mut v = self.view.write().unwrap_or_else(|p| p.into_inner());
        v.partial_text.clear();
    }
}
