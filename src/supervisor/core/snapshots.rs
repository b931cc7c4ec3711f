//! When to look for an agent's descendants, with no I/O (design rule 9: a stop can only prove
//! gone what botvisor knows of). A foreground tool prints nothing while it runs, so the moment a
//! tool starts or ends is followed by two more looks: after 200 ms (a command that forks at once)
//! and after 1 s (a slower start). Time is an input.

use std::collections::VecDeque;
use std::time::Duration;

/// The looks after a tool's `tool_use` or `tool_result`, counted from it.
pub const AFTER_TOOL: [Duration; 2] = [Duration::from_millis(200), Duration::from_secs(1)];

/// The moments still to come, earliest first.
#[derive(Debug, Clone)]
pub struct Snapshots<T> {
    at: VecDeque<T>,
}

impl<T> Default for Snapshots<T> {
    fn default() -> Self {
        Snapshots {
            at: VecDeque::new(),
        }
    }
}

impl<T> Snapshots<T>
where
    T: Copy + PartialOrd + std::ops::Add<Duration, Output = T>,
{
    /// A tool started or ended at `now`: look now (the caller does) and at each of
    /// [`AFTER_TOOL`] from now.
    pub fn tool(&mut self, now: T) {
        for delay in AFTER_TOOL {
            let t = now + delay;
            // Kept earliest first: a second tool's early look comes before the first's late one.
            let at = self.at.iter().position(|u| *u > t).unwrap_or(self.at.len());
            self.at.insert(at, t);
        }
    }

    /// The next moment to look, if any.
    pub fn next(&self) -> Option<T> {
        self.at.front().copied()
    }

    /// It is `now`: every moment that came is used up. Whether one came (the caller looks once).
    pub fn due(&mut self, now: T) -> bool {
        let mut came = false;
        while self.at.front().is_some_and(|t| *t <= now) {
            self.at.pop_front();
            came = true;
        }
        came
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Milliseconds as a time.
    #[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
    struct Ms(u64);
    impl std::ops::Add<Duration> for Ms {
        type Output = Ms;
        fn add(self, d: Duration) -> Ms {
            Ms(self.0 + d.as_millis() as u64)
        }
    }

    #[test]
    fn rule_9_a_tool_is_followed_by_two_more_looks_for_descendants() {
        let mut s = Snapshots::default();
        assert_eq!(s.next(), None);
        s.tool(Ms(0));
        assert_eq!(s.next(), Some(Ms(200)));
        assert!(!s.due(Ms(199)));
        assert!(s.due(Ms(200)));
        assert_eq!(s.next(), Some(Ms(1000)));
        assert!(s.due(Ms(5000)));
        assert_eq!(s.next(), None);
    }

    #[test]
    fn a_second_tool_keeps_its_early_look() {
        let mut s = Snapshots::default();
        s.tool(Ms(0));
        s.tool(Ms(500));
        assert!(s.due(Ms(200)));
        assert_eq!(
            s.next(),
            Some(Ms(700)),
            "not folded into the first tool's 1 s look"
        );
        assert!(s.due(Ms(700)));
        assert_eq!(s.next(), Some(Ms(1000)));
    }

    #[test]
    fn looks_that_came_together_are_one_look() {
        let mut s = Snapshots::default();
        s.tool(Ms(0));
        s.tool(Ms(100));
        assert!(s.due(Ms(1100)), "four moments, one look");
        assert_eq!(s.next(), None);
    }
}
