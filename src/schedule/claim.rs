//! Which due time a fire claims (issue 49: exactly once). A fire's id is its schedule and its
//! due time; the store takes a claim only for a due time after the last one claimed
//! (`store::schedules::claim`, in the transaction that queues the prompt), so whatever this
//! decides, a due time is fired at most once. What is decided here is which due time a fire
//! stands for:
//!
//! - a timer's fire stands for the latest due time at or before now: a timer that fires twice
//!   for one due time, a fire after botvisord restarted, and the one catch-up fire systemd makes
//!   for the due times missed while the machine was off (`Persistent=true`) all claim the same
//!   due time, once; a due time within [`COALESCE_S`] of a `run-now` is claimed with nothing
//!   sent (the two are one);
//! - a `run-now` stands for a due time that came and was not fired, if there is one (a timer
//!   firing at the same moment claims the same one); otherwise for the moment it was asked, a
//!   run of its own, unless a fire was claimed within [`COALESCE_S`] of it, or it is the same
//!   run-now asked again after its answer was lost.

/// Seconds within which two fires are one: a `run-now` this close to a fire claimed is that
/// fire, and a timer's due time this close to a fire claimed is taken by it.
pub const COALESCE_S: i64 = 5;

/// Who asks for a fire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Asker {
    /// The schedule's timer (`botvisorctl fire`).
    Timer,
    /// A person or a program (`botvisorctl schedule run-now`, `FireSchedule` with `now`), who
    /// asked at `at` (Unix seconds; the same for each time a client asks again after no answer).
    RunNow {
        /// When it was first asked.
        at: i64,
    },
}

/// What a fire does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// Fire, claiming this due time (Unix seconds).
    Fire(i64),
    /// Claim this due time and send nothing: a fire claimed within [`COALESCE_S`] of it
    /// stands for it.
    Coalesce(i64),
    /// Nothing: the fire of this due time was claimed already.
    Fired(i64),
    /// Nothing: no due time came since the last fire (a timer that woke early or twice).
    NothingDue,
}

/// The last fire claimed of a schedule, as [`decide`] weighs it (Unix seconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Last {
    /// Its due time (before the first fire: when the schedule was made).
    pub due: i64,
    /// When it was claimed; 0: no fire yet.
    pub fired_at: i64,
    /// Whether a `run-now` made it.
    pub run_now: bool,
}

/// The due time a fire by `asker` claims, from `latest_due` (the calendar's latest due time at
/// or before now, if any) and the `last` fire claimed. All in Unix seconds.
pub fn decide(asker: Asker, latest_due: Option<i64>, last: Last) -> Claim {
    let fresh = latest_due.filter(|d| *d > last.due);
    let fired = last.fired_at > 0;
    match asker {
        Asker::Timer => match fresh {
            Some(due) if fired && last.run_now && (due - last.fired_at).abs() < COALESCE_S => {
                Claim::Coalesce(due)
            }
            Some(due) => Claim::Fire(due),
            None if fired => Claim::Fired(last.due),
            None => Claim::NothingDue,
        },
        Asker::RunNow { at } => match fresh {
            Some(due) => Claim::Fire(due),
            // This very run-now asked again, or one the fire just claimed stands for.
            None if fired && (at <= last.due || (at - last.fired_at).abs() < COALESCE_S) => {
                Claim::Fired(last.due)
            }
            None => Claim::Fire(at.max(last.due + 1)),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: Asker = Asker::RunNow { at: 101 };

    fn by_timer(due: i64, fired_at: i64) -> Last {
        Last {
            due,
            fired_at,
            run_now: false,
        }
    }

    fn by_run_now(due: i64, fired_at: i64) -> Last {
        Last {
            due,
            fired_at,
            run_now: true,
        }
    }

    /// A due time not yet claimed is fired, by either asker; a run-now of a schedule never
    /// fired fires, whatever its creation's mark.
    #[test]
    fn a_due_time_that_came_is_fired() {
        assert_eq!(
            decide(Asker::Timer, Some(100), by_timer(90, 60)),
            Claim::Fire(100)
        );
        assert_eq!(decide(NOW, Some(100), by_timer(90, 60)), Claim::Fire(100));
        assert_eq!(decide(NOW, None, by_timer(101, 0)), Claim::Fire(102));
    }

    /// A timer firing again for a due time claimed is nothing; so is one with no due time.
    #[test]
    fn a_second_timer_fire_is_nothing() {
        assert_eq!(
            decide(Asker::Timer, Some(100), by_timer(100, 101)),
            Claim::Fired(100)
        );
        assert_eq!(
            decide(Asker::Timer, None, by_timer(100, 101)),
            Claim::Fired(100)
        );
        assert_eq!(
            decide(Asker::Timer, None, by_timer(50, 0)),
            Claim::NothingDue
        );
    }

    /// A schedule every 2 s fires at each due time: the timer's fires are never taken by one
    /// another.
    #[test]
    fn timer_fires_close_together_each_fire() {
        assert_eq!(
            decide(Asker::Timer, Some(102), by_timer(100, 100)),
            Claim::Fire(102)
        );
    }

    /// A run-now right after a fire is that fire; later, a run of its own at the moment it was
    /// asked, after which the timer's fire of an earlier due time is nothing; the same run-now
    /// asked again (its first answer lost) is the fire it made.
    #[test]
    fn run_now_is_the_fire_of_the_moment_or_one_of_its_own() {
        let at = |at| Asker::RunNow { at };
        assert_eq!(
            decide(at(104), Some(100), by_timer(100, 101)),
            Claim::Fired(100)
        );
        assert_eq!(
            decide(at(106), Some(100), by_timer(100, 101)),
            Claim::Fire(106)
        );
        assert_eq!(
            decide(Asker::Timer, Some(100), by_run_now(106, 106)),
            Claim::Fired(106)
        );
        // Asked again 20 s later, after botvisord was killed before it answered.
        assert_eq!(
            decide(at(106), Some(100), by_run_now(106, 106)),
            Claim::Fired(106)
        );
        // Two run-nows in the same second are one.
        assert_eq!(
            decide(at(106), None, by_run_now(106, 106)),
            Claim::Fired(106)
        );
    }

    /// A run-now a moment before a due time takes it: the timer's fire at the due time claims
    /// it and sends nothing (a hostile trial saw two prompts 0.2 s apart).
    #[test]
    fn a_due_time_just_after_a_run_now_is_taken_by_it() {
        assert_eq!(
            decide(Asker::Timer, Some(110), by_run_now(109, 109)),
            Claim::Coalesce(110)
        );
        assert_eq!(
            decide(Asker::Timer, Some(120), by_run_now(109, 109)),
            Claim::Fire(120)
        );
    }
}
