//! The stop sequence with no I/O (design rule 9: stop gently, prove, then release): SIGTERM to
//! the agent's process group (stdin is closed with it), the grace period, SIGKILL, and a bounded
//! wait for the root to be reaped before the stop is declared failed. Time is an input; the shell
//! signals, waits for the exit event or the next deadline, and reads the verdict.

use std::time::Duration;

/// Why botvisor stops a bot's process: the journal's `why` and the stop's meaning for the bot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// A client's Stop.
    Stop,
    /// A client's Delete.
    Delete,
    /// botvisord shuts down.
    Shutdown,
    /// A client's Restart.
    Restart,
    /// The process lost its conversation and makes way for one that starts a new one.
    Replaced,
    /// The bot was idle past its idle deadline (design rule 12).
    Idle,
    /// The machine is under memory pressure and the bot was the least recently used idle one
    /// (issue 31, [`super::evict`]).
    MemoryPressure,
    /// A process outside botvisor opened the conversation while the agent was idle (design
    /// rule 7): the agent makes way before the next message.
    HeldElsewhere,
    /// The launch showed no sign of life in time (design rule 15).
    StartTimeout,
    /// The turn did not end after an interrupt (design rule 15).
    InterruptTimeout,
    /// The agent could not open its conversation: no turn can run in it.
    OpenFailed,
    /// What is left after the agent exited by itself (a clean end, a conversation that never
    /// started, a failure) is cleaned up.
    Exited,
    /// What is left after the agent exited while being stopped, once its stop had given up.
    LateExit,
    /// What is left after the agent crashed.
    Crashed,
    /// The agent holds a failed attempt of a message in its conversation: it makes way for one
    /// resumed without it (issue 45, [`super::attempt`]).
    Recut,
}

impl StopReason {
    /// Its name in the journal: `stop`, `delete`, `shutdown`, `restart`, `replaced`, `idle`,
    /// `memory pressure`, `held elsewhere`,
    /// `start timeout`, `interrupt timeout`, `open failed`, `exit`, `late exit`, `crash`,
    /// `failed attempt`.
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::Stop => "stop",
            StopReason::Delete => "delete",
            StopReason::Shutdown => "shutdown",
            StopReason::Restart => "restart",
            StopReason::Replaced => "replaced",
            StopReason::Idle => "idle",
            StopReason::MemoryPressure => "memory pressure",
            StopReason::HeldElsewhere => "held elsewhere",
            StopReason::StartTimeout => "start timeout",
            StopReason::InterruptTimeout => "interrupt timeout",
            StopReason::OpenFailed => "open failed",
            StopReason::Exited => "exit",
            StopReason::LateExit => "late exit",
            StopReason::Crashed => "crash",
            StopReason::Recut => "failed attempt",
        }
    }
}

impl StopReason {
    /// Whether the turn in flight goes on after this stop (issue 45): botvisord's own stop
    /// (`Shutdown`: the next botvisord asks it) and a Restart (to apply settings, or a client's)
    /// end nothing a client asked to end, so a message the conversation took is answered (read
    /// back, or asked again without the attempt) as after a crash. A client's Stop or Delete, a
    /// watchdog and the others end it.
    pub fn carries_the_turn(self) -> bool {
        matches!(self, StopReason::Shutdown | StopReason::Restart)
    }
}

/// What the shell does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopStep {
    /// Signal the process group SIGTERM (the gentle ask).
    Term,
    /// Signal the process group SIGKILL (the grace period is over).
    Kill,
    /// The root was not reaped within the kill wait: the stop failed (verdict `root-alive`).
    GiveUp,
}

/// Design rule 9 (stop gently, prove, then release): the steps of one stop.
///
/// One stop of one process.
#[derive(Debug, Clone, Copy)]
pub struct StopPlan<T> {
    grace_at: T,
    hard_at: T,
    killed: bool,
}

impl<T> StopPlan<T>
where
    T: Copy + PartialOrd + std::ops::Add<Duration, Output = T>,
{
    /// A stop begun at `now`: SIGTERM at once unless the root has exited already; SIGKILL at
    /// `now + grace`; given up at `now + grace + kill_wait`.
    pub fn begin(
        now: T,
        grace: Duration,
        kill_wait: Duration,
        exited: bool,
    ) -> (StopPlan<T>, Option<StopStep>) {
        let grace_at = now + grace;
        let plan = StopPlan {
            grace_at,
            hard_at: grace_at + kill_wait,
            killed: false,
        };
        (plan, (!exited).then_some(StopStep::Term))
    }

    /// When the shell is to call [`StopPlan::deadline`] unless the root exits first.
    pub fn next_deadline(&self) -> T {
        if self.killed {
            self.hard_at
        } else {
            self.grace_at
        }
    }

    /// A deadline came at `now`: SIGKILL once the grace is over, then give up once the kill wait
    /// is over too; `None` when `now` is before the next deadline.
    pub fn deadline(&mut self, now: T) -> Option<StopStep> {
        if now < self.next_deadline() {
            return None;
        }
        if self.killed {
            Some(StopStep::GiveUp)
        } else {
            self.killed = true;
            Some(StopStep::Kill)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn rule_9_gently_first_then_kill_after_the_grace_then_give_up() {
        let (mut plan, first) = StopPlan::begin(Duration::ZERO, 10 * S, 5 * S, false);
        assert_eq!(first, Some(StopStep::Term));
        assert_eq!(plan.next_deadline(), 10 * S);
        assert_eq!(plan.deadline(9 * S), None, "not before the grace is over");
        assert_eq!(plan.deadline(10 * S), Some(StopStep::Kill));
        assert_eq!(plan.next_deadline(), 15 * S);
        assert_eq!(plan.deadline(12 * S), None);
        assert_eq!(plan.deadline(15 * S), Some(StopStep::GiveUp));
    }

    #[test]
    fn a_root_that_exited_already_is_not_signalled() {
        let (_, first) = StopPlan::begin(Duration::ZERO, 10 * S, 5 * S, true);
        assert_eq!(first, None);
    }

    #[test]
    fn a_grace_of_0_kills_at_once() {
        let (mut plan, _) = StopPlan::begin(Duration::ZERO, Duration::ZERO, 5 * S, false);
        assert_eq!(plan.deadline(Duration::ZERO), Some(StopStep::Kill));
    }
}
