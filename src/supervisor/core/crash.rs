//! Design rule 11 with no I/O: after an agent crashed, restart it with a growing backoff, or,
//! after too many crashes within a window, stop trying until a client calls `Restart`.
//! Time is an input (`now`), never read here.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Longest wait between two restarts after crashes.
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// The first wait after a crash; each further crash within the window doubles it.
pub const FIRST_BACKOFF: Duration = Duration::from_millis(250);

/// What to do after a crash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterCrash {
    /// `count` crashes within the window reached the limit: the bot is `failed` until a client
    /// calls `Restart`.
    CrashLoop {
        /// Crashes within the window, this one included.
        count: usize,
    },
    /// Restart after `backoff`: messages wait or a client holds the bot.
    Restart {
        /// The wait.
        backoff: Duration,
        /// Crashes within the window, this one included.
        count: usize,
    },
    /// Nobody needs the agent now: it starts again with the next message.
    Wait,
}

/// The crashes of a bot's agent within the crash-loop window.
#[derive(Debug, Clone, Default)]
pub struct Crashes {
    at: VecDeque<Instant>,
}

impl Crashes {
    /// The agent works (a turn succeeded) or a client restarted it: the next crash starts the
    /// backoff from its first step.
    pub fn clear(&mut self) {
        self.at.clear();
    }

    /// How many crashes are remembered.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.at.len()
    }

    /// Whether none is.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.at.is_empty()
    }

    /// A crash at `now`: crashes older than `window` are forgotten; `limit` crashes within it
    /// are a crash loop; otherwise a restart after `FIRST_BACKOFF` doubled per earlier crash (at
    /// most [`MAX_BACKOFF`]) when `needed` (messages wait or a client holds the bot).
    pub fn crashed(
        &mut self,
        now: Instant,
        window: Duration,
        limit: u32,
        needed: bool,
    ) -> AfterCrash {
        self.at.push_back(now);
        while self
            .at
            .front()
            .is_some_and(|t| now.duration_since(*t) > window)
        {
            self.at.pop_front();
        }
        let count = self.at.len();
        if count as u32 >= limit {
            return AfterCrash::CrashLoop { count };
        }
        if !needed {
            return AfterCrash::Wait;
        }
        let backoff = FIRST_BACKOFF
            .saturating_mul(1 << (count.saturating_sub(1)).min(10))
            .min(MAX_BACKOFF);
        AfterCrash::Restart { backoff, count }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WINDOW: Duration = Duration::from_secs(60);

    #[test]
    fn rule_11_a_needed_agent_restarts_after_a_backoff_that_doubles() {
        let mut c = Crashes::default();
        let t0 = Instant::now();
        let waits: Vec<AfterCrash> = (0..3)
            .map(|i| c.crashed(t0 + Duration::from_secs(i), WINDOW, 5, true))
            .collect();
        assert_eq!(
            waits,
            [
                AfterCrash::Restart {
                    backoff: Duration::from_millis(250),
                    count: 1
                },
                AfterCrash::Restart {
                    backoff: Duration::from_millis(500),
                    count: 2
                },
                AfterCrash::Restart {
                    backoff: Duration::from_millis(1000),
                    count: 3
                },
            ]
        );
    }

    #[test]
    fn rule_11_the_backoff_never_exceeds_its_bound() {
        let mut c = Crashes::default();
        let t0 = Instant::now();
        let mut last = AfterCrash::Wait;
        for i in 0..20 {
            last = c.crashed(t0 + Duration::from_millis(i), WINDOW, 100, true);
        }
        assert_eq!(
            last,
            AfterCrash::Restart {
                backoff: MAX_BACKOFF,
                count: 20
            }
        );
    }

    #[test]
    fn rule_11_the_limit_within_the_window_is_a_crash_loop() {
        let mut c = Crashes::default();
        let t0 = Instant::now();
        for i in 0..4 {
            c.crashed(t0 + Duration::from_secs(i), WINDOW, 5, true);
        }
        assert_eq!(
            c.crashed(t0 + Duration::from_secs(4), WINDOW, 5, true),
            AfterCrash::CrashLoop { count: 5 }
        );
    }

    #[test]
    fn rule_11_crashes_older_than_the_window_are_forgotten() {
        let mut c = Crashes::default();
        let t0 = Instant::now();
        for i in 0..4 {
            c.crashed(t0 + Duration::from_secs(i), WINDOW, 5, true);
        }
        let later = t0 + Duration::from_secs(200);
        assert_eq!(
            c.crashed(later, WINDOW, 5, true),
            AfterCrash::Restart {
                backoff: FIRST_BACKOFF,
                count: 1
            }
        );
    }

    #[test]
    fn an_agent_nobody_needs_is_not_restarted_but_its_crash_counts() {
        let mut c = Crashes::default();
        let t0 = Instant::now();
        assert_eq!(c.crashed(t0, WINDOW, 5, false), AfterCrash::Wait);
        assert_eq!(c.len(), 1);
    }

    #[test]
    fn a_success_starts_the_backoff_again() {
        let mut c = Crashes::default();
        let t0 = Instant::now();
        c.crashed(t0, WINDOW, 5, true);
        c.crashed(t0, WINDOW, 5, true);
        c.clear();
        assert_eq!(
            c.crashed(t0, WINDOW, 5, true),
            AfterCrash::Restart {
                backoff: FIRST_BACKOFF,
                count: 1
            }
        );
    }
}
