//! Which due time a fire claims (issue 49: exactly once). A fire's id is its schedule and its
//! due time; the store takes a claim only for a due time after the last one claimed
//! (`store::schedules::claim`, in the transaction that queues the prompt), so whatever this
//! decides, a due time is fired at most once. What is decided here is which due time a fire
//! stands for:
//!
//! - a timer's fire stands for the latest due time at or before now: a timer that fires twice
//!   for one due time, a fire after botvisord restarted, and the one catch-up fire systemd makes
//!   for the due times missed while the machine was off (`Persistent=true`) all claim the same
//!   due time, once;
//! - a `run-now` stands for a due time that came and was not fired yet, if there is one (a
//!   timer firing at the same moment claims the same one); otherwise for now itself, a run of
//!   its own, unless a fire was claimed less than [`RUN_NOW_COALESCE_S`] ago (the two are the
//!   same moment, and the prompt goes once).

/// Seconds within which a `run-now` is the fire just claimed, not a new one.
pub const RUN_NOW_COALESCE_S: i64 = 5;

/// Who asks for a fire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Asker {
    /// The schedule's timer (`botvisorctl fire`).
    Timer,
    /// A person or a program (`botvisorctl schedule run-now`, `FireSchedule` with `now`).
    RunNow,
}

/// What a fire does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// Fire, claiming this due time (Unix seconds).
    Fire(i64),
    /// Nothing: the fire of this due time was claimed already.
    Fired(i64),
    /// Nothing: no due time came since the last fire (a timer that woke early or twice).
    NothingDue,
}

/// The due time a fire by `asker` at `now` claims, from `latest_due` (the calendar's latest due
/// time at or before now and after `last_due`, if any), `last_due` (the last claimed) and
/// `last_fired_at` (when it was claimed). All in Unix seconds.
pub fn decide(
    asker: Asker,
    latest_due: Option<i64>,
    last_due: i64,
    last_fired_at: i64,
    now: i64,
) -> Claim {
    if let Some(due) = latest_due.filter(|d| *d > last_due) {
        return Claim::Fire(due);
    }
    match asker {
        Asker::Timer if last_due > 0 && last_fired_at > 0 => Claim::Fired(last_due),
        Asker::Timer => Claim::NothingDue,
        Asker::RunNow if now - last_fired_at < RUN_NOW_COALESCE_S => Claim::Fired(last_due),
        Asker::RunNow => Claim::Fire(now.max(last_due + 1)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A due time not yet claimed is fired, by either asker.
    #[test]
    fn a_due_time_that_came_is_fired() {
        assert_eq!(
            decide(Asker::Timer, Some(100), 90, 91, 101),
            Claim::Fire(100)
        );
        assert_eq!(
            decide(Asker::RunNow, Some(100), 90, 91, 101),
            Claim::Fire(100)
        );
    }

    /// A timer firing again for a due time claimed is nothing; so is one with no due time.
    #[test]
    fn a_second_timer_fire_is_nothing() {
        assert_eq!(
            decide(Asker::Timer, Some(100), 100, 101, 102),
            Claim::Fired(100)
        );
        assert_eq!(decide(Asker::Timer, None, 100, 101, 102), Claim::Fired(100));
        assert_eq!(decide(Asker::Timer, None, 50, 0, 102), Claim::NothingDue);
    }

    /// A run-now right after a fire is that fire; later, a run of its own at now, after which
    /// the timer's fire of an earlier due time is nothing.
    #[test]
    fn run_now_is_the_fire_of_the_moment_or_one_of_its_own() {
        assert_eq!(
            decide(Asker::RunNow, Some(100), 100, 101, 104),
            Claim::Fired(100)
        );
        assert_eq!(
            decide(Asker::RunNow, Some(100), 100, 101, 106),
            Claim::Fire(106)
        );
        assert_eq!(
            decide(Asker::Timer, Some(100), 106, 106, 107),
            Claim::Fired(106)
        );
        // Two run-nows in the same second are one.
        assert_eq!(
            decide(Asker::RunNow, None, 106, 106, 106),
            Claim::Fired(106)
        );
    }
}
