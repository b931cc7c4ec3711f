//! The CLI retrying a model request (`api_retry`): what a person is told, and how often.
//!
//! Every retry sets `LastError`; a `system` chat item with `reason` `api_retry` is added for the
//! first attempt, the last one, and otherwise at most once per [`NOTE_EVERY`] per bot, so that a
//! model API that is down shows in every client at once without flooding the chat.

use std::time::{Duration, Instant};

/// The shortest time between two `api_retry` chat items of one bot (first and last attempts
/// excepted).
pub const NOTE_EVERY: Duration = Duration::from_secs(10);

/// One retry as the CLI reported it.
#[derive(Debug, Clone, PartialEq)]
pub struct Retry<'a> {
    /// The CLI's error word (`unknown` when no HTTP answer came, `rate_limit`,
    /// `authentication_failed`, …).
    pub error: &'a str,
    /// The HTTP status of the failed request, if one came.
    pub status: Option<u64>,
    /// This attempt (1, 2, …).
    pub attempt: u64,
    /// The most attempts the CLI makes.
    pub max_retries: u64,
    /// How long the CLI waits before this attempt, in milliseconds.
    pub delay_ms: Option<u64>,
    /// What to check, in the bot's runtime's terms (`Runtime::api_hint`).
    pub hint: &'a str,
}

impl Retry<'_> {
    /// The sentence a person reads: what failed, which retry this is, and the CLI's error.
    /// Example: "The model API is unreachable (no HTTP answer: the connection was refused, timed
    /// out or found no route): retry 3 of 10 in 2.2 s. Check ANTHROPIC_BASE_URL …"
    pub fn text(&self) -> String {
        let what = match self.status {
            // Claude Code says `unknown` for every failure without an HTTP answer: the
            // connection refused, no route, a timeout, DNS, a proxy.
            None if self.error.is_empty() || self.error == "unknown" => {
                "The model API is unreachable (no HTTP answer: the connection was refused, \
                 timed out or found no route)"
                    .to_owned()
            }
            None => format!(
                "The model API is unreachable (no HTTP answer; the CLI says `{}`)",
                self.error
            ),
            Some(status) => format!(
                "The model API answered HTTP {status} (`{}`)",
                if self.error.is_empty() {
                    "error"
                } else {
                    self.error
                }
            ),
        };
        let delay = self
            .delay_ms
            .map(|ms| format!(" in {:.1} s", ms as f64 / 1000.0))
            .unwrap_or_default();
        if self.max_retries == 0 {
            // Codex retries a model API it cannot reach without end.
            return format!(
                "{what}: retry {}{delay}; the agent retries without limit. {} Interrupt or Stop \
                 ends the turn.",
                self.attempt, self.hint
            );
        }
        format!(
            "{what}: retry {} of {}{delay}. {} The turn ends with an error when the retries run \
             out.",
            self.attempt, self.max_retries, self.hint
        )
    }

    /// The last attempt the CLI will make.
    pub fn is_last(&self) -> bool {
        self.max_retries > 0 && self.attempt >= self.max_retries
    }
}

/// When the last `api_retry` chat item of a bot was added.
#[derive(Debug, Default)]
pub struct RetryNotes {
    last: Option<Instant>,
}

impl RetryNotes {
    /// Whether `retry`, seen at `now`, gets a chat item: the first attempt, the last one, or
    /// [`NOTE_EVERY`] after the previous item. Records the item when it does.
    pub fn should_note(&mut self, retry: &Retry<'_>, now: Instant) -> bool {
        let due = retry.attempt <= 1
            || retry.is_last()
            || self
                .last
                .is_none_or(|t| now.duration_since(t) >= NOTE_EVERY);
        if due {
            self.last = Some(now);
        }
        due
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn retry(attempt: u64) -> Retry<'static> {
        Retry {
            error: "unknown",
            status: None,
            attempt,
            max_retries: 10,
            delay_ms: Some(2200),
            hint: "Check ANTHROPIC_BASE_URL.",
        }
    }

    #[test]
    fn first_last_and_one_per_interval_are_noted() {
        let mut notes = RetryNotes::default();
        let t0 = Instant::now();
        assert!(notes.should_note(&retry(1), t0));
        assert!(!notes.should_note(&retry(2), t0 + Duration::from_secs(1)));
        assert!(!notes.should_note(&retry(3), t0 + Duration::from_secs(9)));
        assert!(notes.should_note(&retry(4), t0 + Duration::from_secs(10)));
        assert!(!notes.should_note(&retry(5), t0 + Duration::from_secs(11)));
        assert!(notes.should_note(&retry(10), t0 + Duration::from_secs(12)));
        // A new request's retries start again at 1.
        assert!(notes.should_note(&retry(1), t0 + Duration::from_secs(13)));
    }

    #[test]
    fn the_text_names_the_retry_and_the_error() {
        let text = retry(3).text();
        assert!(text.contains("unreachable"), "{text}");
        assert!(text.contains("retry 3 of 10 in 2.2 s"), "{text}");
        // Claude Code's `unknown` says nothing: the words say what it may be; the hint is the
        // bot's runtime's only.
        assert!(
            !text.contains("`unknown`") && text.contains("connection was refused"),
            "{text}"
        );
        assert!(
            text.contains("Check ANTHROPIC_BASE_URL.") && !text.contains("CODEX_HOME"),
            "{text}"
        );
        let http = Retry {
            error: "rate_limit",
            status: Some(429),
            ..retry(1)
        }
        .text();
        assert!(http.contains("HTTP 429 (`rate_limit`)"), "{http}");
        let endless = Retry {
            max_retries: 0,
            delay_ms: None,
            ..retry(7)
        }
        .text();
        assert!(
            endless.contains("retry 7; the agent retries without limit"),
            "{endless}"
        );
    }
}
