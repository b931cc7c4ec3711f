//! Streamed assistant text with no I/O: pieces are gathered and let out at most once per
//! interval (`TextDelta` at most every 50 ms per bot, so a fast model cannot flood the bus).
//! Time is an input.

use std::time::Duration;

/// The pacing of one bot's streamed text.
#[derive(Debug, Clone)]
pub struct DeltaPacer<T> {
    interval: Duration,
    buf: String,
    last_sent: Option<T>,
    /// When the gathered text is to be let out, if it waits.
    pub flush_at: Option<T>,
}

impl<T> DeltaPacer<T>
where
    T: Copy + PartialOrd + std::ops::Add<Duration, Output = T>,
{
    /// At most one piece out per `interval`.
    pub fn new(interval: Duration) -> DeltaPacer<T> {
        DeltaPacer {
            interval,
            buf: String::new(),
            last_sent: None,
            flush_at: None,
        }
    }

    /// A piece arrived at `now`: the text to signal now, or `None` while it waits (until
    /// `flush_at`).
    pub fn push(&mut self, text: &str, now: T) -> Option<String> {
        self.buf.push_str(text);
        match self.last_sent {
            Some(last) if now < last + self.interval => {
                if self.flush_at.is_none() {
                    self.flush_at = Some(last + self.interval);
                }
                None
            }
            _ => self.flush(now),
        }
    }

    /// Lets out what was gathered (at `flush_at`, or when the message ends); `None` when nothing
    /// was.
    pub fn flush(&mut self, now: T) -> Option<String> {
        self.flush_at = None;
        if self.buf.is_empty() {
            return None;
        }
        self.last_sent = Some(now);
        Some(std::mem::take(&mut self.buf))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn pacer() -> DeltaPacer<Duration> {
        DeltaPacer::new(50 * MS)
    }

    #[test]
    fn the_first_piece_goes_out_at_once() {
        let mut p = pacer();
        assert_eq!(p.push("a", Duration::ZERO).as_deref(), Some("a"));
        assert_eq!(p.flush_at, None);
    }

    #[test]
    fn pieces_within_the_interval_wait_and_go_out_together_in_order() {
        let mut p = pacer();
        p.push("a", Duration::ZERO);
        assert_eq!(p.push("b", 10 * MS), None);
        assert_eq!(p.push("c", 20 * MS), None);
        assert_eq!(
            p.flush_at,
            Some(50 * MS),
            "once the interval since the last is over"
        );
        assert_eq!(p.flush(50 * MS).as_deref(), Some("bc"));
        assert_eq!(
            p.push("d", 60 * MS),
            None,
            "the interval counts from the flush"
        );
    }

    #[test]
    fn a_piece_after_the_interval_goes_out_at_once() {
        let mut p = pacer();
        p.push("a", Duration::ZERO);
        assert_eq!(p.push("b", 51 * MS).as_deref(), Some("b"));
    }

    #[test]
    fn nothing_gathered_flushes_nothing() {
        let mut p = pacer();
        assert_eq!(p.flush(Duration::ZERO), None);
    }
}
