//! Design rules 12 and 13 with no I/O: when a bot is idle, and whether an idle deadline stops
//! it. Idle means idle: no message in flight or waiting, no background task, no client holding
//! the bot (a lease, rule 13), no permission prompt open, and no descendant alive.

use std::time::Duration;

/// What the shell knows of a bot's activity without reading `/proc`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Activity {
    /// A process runs and is not being stopped.
    pub running: bool,
    /// A message is in flight.
    pub in_flight: bool,
    /// Messages wait in the queue.
    pub queued: bool,
    /// Background tasks the CLI reports as running.
    pub background_tasks: usize,
    /// Clients holding the bot (leases).
    pub holders: usize,
    /// Permission prompts open.
    pub open_prompts: usize,
}

impl Activity {
    /// Idle by every sign the shell has without reading `/proc`.
    pub fn looks_idle(&self) -> bool {
        self.running
            && !self.in_flight
            && !self.queued
            && self.background_tasks == 0
            && self.holders == 0
            && self.open_prompts == 0
    }
}

/// After every event: the moment an idle bot stops (`now + timeout`), or `None` for a bot that is
/// not idle or has no idle timeout (0 in the configuration: never).
pub fn idle_deadline<T>(activity: &Activity, timeout: Option<Duration>, now: T) -> Option<T>
where
    T: std::ops::Add<Duration, Output = T>,
{
    match timeout {
        Some(t) if activity.looks_idle() => Some(now + t),
        _ => None,
    }
}

/// What an idle deadline that came does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtIdleDeadline {
    /// Something happened since: nothing to do.
    NotIdle,
    /// A descendant of the agent lives (a tool that runs without the CLI saying so): not stopped.
    DescendantLives,
    /// Stop the agent (reason `idle`).
    Stop,
}

/// The idle deadline came: stop the agent unless it is busy after all; `descendant_alive` is
/// asked only when every other sign says idle (it reads `/proc`).
pub fn at_idle_deadline(
    activity: &Activity,
    descendant_alive: impl FnOnce() -> bool,
) -> AtIdleDeadline {
    if !activity.looks_idle() {
        AtIdleDeadline::NotIdle
    } else if descendant_alive() {
        AtIdleDeadline::DescendantLives
    } else {
        AtIdleDeadline::Stop
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Option<Duration> = Some(Duration::from_secs(600));

    fn idle() -> Activity {
        Activity {
            running: true,
            ..Activity::default()
        }
    }

    #[test]
    fn rule_12_an_idle_agent_gets_a_deadline_and_is_stopped_at_it() {
        assert_eq!(idle_deadline(&idle(), T, Duration::ZERO), T);
        assert_eq!(at_idle_deadline(&idle(), || false), AtIdleDeadline::Stop);
    }

    #[test]
    fn rule_12_a_timeout_of_0_never_stops() {
        assert_eq!(idle_deadline(&idle(), None, Duration::ZERO), None);
    }

    #[test]
    fn rule_12_each_sign_of_work_keeps_the_agent() {
        let busy = [
            Activity {
                in_flight: true,
                ..idle()
            },
            Activity {
                queued: true,
                ..idle()
            },
            Activity {
                background_tasks: 1,
                ..idle()
            },
            Activity {
                open_prompts: 1,
                ..idle()
            },
            Activity {
                running: false,
                ..idle()
            },
        ];
        for a in busy {
            assert_eq!(idle_deadline(&a, T, Duration::ZERO), None, "{a:?}");
            assert_eq!(
                at_idle_deadline(&a, || panic!("not asked")),
                AtIdleDeadline::NotIdle,
                "{a:?}"
            );
        }
    }

    #[test]
    fn rule_13_a_held_bot_is_never_stopped_for_idleness() {
        let held = Activity {
            holders: 1,
            ..idle()
        };
        assert_eq!(idle_deadline(&held, T, Duration::ZERO), None);
        assert_eq!(at_idle_deadline(&held, || false), AtIdleDeadline::NotIdle);
    }

    #[test]
    fn rule_12_a_living_descendant_keeps_the_agent() {
        assert_eq!(
            at_idle_deadline(&idle(), || true),
            AtIdleDeadline::DescendantLives
        );
    }
}
