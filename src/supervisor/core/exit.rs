//! What a process's exit means, with no I/O (design rules 4, 8 and 11): the shell gathers the
//! facts (was it being stopped, did it lose its conversation or refuse an id in use, its exit
//! status, whether a message was in flight) and carries out the [`ExitPlan`].

use crate::process::ExitInfo;
use crate::supervisor::core::decide::TurnOutcome;

/// What the shell knows when a process exited.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ExitFacts {
    /// botvisor was stopping it (a root that survived SIGKILL exited at last).
    pub stopping: bool,
    /// It reported its conversation lost (design rule 4).
    pub lost: bool,
    /// It refused a new conversation because this id is in use.
    pub in_use: Option<String>,
    /// The bot already resumed an id in use once since its last start.
    pub in_use_retried: bool,
    /// How it ended.
    pub exit: ExitInfo,
    /// A message was in flight.
    pub in_flight: bool,
    /// It was launched to resume without an unanswered attempt ([`crate::runtime::Cut`]).
    pub cut: bool,
    /// A turn began in it.
    pub turn_began: bool,
}

/// How the turn in flight, if any, is settled, and what comes after.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum ExitPlan {
    /// It was being stopped: the turn ends `interrupted` (reason `stopped`) and the bot is
    /// `stopped`; the process is released now.
    StoppedLate,
    /// It was to resume without an unanswered attempt, and exited by its own choice before any
    /// turn began: the CLI refused the cut (Claude Code 2.1.328: "Resume rejected by
    /// --resume-drops-turn: …" on stderr, exit 1; facts::claude). The message asked again ends
    /// `taken_not_answered` saying so; the bot is `stopped`, no crash counted, and the next start
    /// resumes the whole conversation.
    CutRefused,
    /// It never held a turn of its own: the turn in flight is settled as `error` (reason
    /// `agent_exited`, no text: a message not replayed waits again), the bot is `stopped`, and
    /// with `resume` the next start resumes that id (once); otherwise, after a lost conversation,
    /// the next start begins a new one (its record was cleared when it was reported lost).
    NotStarted {
        /// The id in use to resume.
        resume: Option<String>,
    },
    /// It ended by itself: the turn in flight is settled as `settle` (reason `agent_exited`),
    /// the rule-4 fallback is looked at ([`crate::supervisor::core::decide::forget_after_early_exit`]),
    /// then a clean exit stops the bot and any other is a crash (or a failure restarting cannot
    /// fix) with the backoff of [`super::crash::Crashes`].
    Ended {
        /// The outcome of a turn that began: `crashed`, or `error` after an id in use was
        /// refused a second time.
        settle: TurnOutcome,
        /// Exit code 0 with no message in flight.
        clean: bool,
    },
}

/// The plan for an exit (see [`ExitPlan`]).
pub(super) fn exit_plan(facts: &ExitFacts) -> ExitPlan {
    if facts.stopping {
        return ExitPlan::StoppedLate;
    }
    let clean = facts.exit.code == Some(0) && !facts.in_flight;
    if facts.cut
        && !facts.turn_began
        && !facts.lost
        && facts.in_use.is_none()
        && super::decide::exited_by_choice(&facts.exit)
    {
        return ExitPlan::CutRefused;
    }
    match (&facts.in_use, facts.lost) {
        (Some(id), _) if !facts.in_use_retried => ExitPlan::NotStarted {
            resume: Some(id.clone()),
        },
        (None, true) => ExitPlan::NotStarted { resume: None },
        (Some(_), _) => ExitPlan::Ended {
            settle: TurnOutcome::Error,
            clean: facts.exit.code == Some(0),
        },
        (None, false) => ExitPlan::Ended {
            settle: TurnOutcome::Crashed,
            clean,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(code: Option<i32>, signal: Option<i32>) -> ExitFacts {
        ExitFacts {
            stopping: false,
            lost: false,
            in_use: None,
            in_use_retried: false,
            exit: ExitInfo { code, signal },
            in_flight: false,
            cut: false,
            turn_began: false,
        }
    }

    #[test]
    fn issue_25_a_cut_resume_that_exits_by_choice_before_a_turn_is_a_refusal_not_a_crash() {
        let f = ExitFacts {
            cut: true,
            in_flight: true,
            ..facts(Some(1), None)
        };
        assert_eq!(exit_plan(&f), ExitPlan::CutRefused);
        for f in [
            ExitFacts {
                turn_began: true,
                ..f.clone()
            },
            ExitFacts {
                cut: false,
                ..f.clone()
            },
            facts(None, Some(9)),
            ExitFacts {
                cut: true,
                ..facts(None, Some(9))
            },
        ] {
            assert_ne!(exit_plan(&f), ExitPlan::CutRefused, "{f:?}");
        }
    }

    #[test]
    fn rule_9_a_process_being_stopped_that_exits_is_released_not_a_crash() {
        let f = ExitFacts {
            stopping: true,
            ..facts(None, Some(9))
        };
        assert_eq!(exit_plan(&f), ExitPlan::StoppedLate);
    }

    #[test]
    fn rule_4_a_lost_conversation_is_not_a_crash_and_the_next_start_is_new() {
        let f = ExitFacts {
            lost: true,
            in_flight: true,
            ..facts(Some(1), None)
        };
        assert_eq!(exit_plan(&f), ExitPlan::NotStarted { resume: None });
    }

    #[test]
    fn an_id_in_use_is_resumed_once_then_the_exit_counts() {
        let f = ExitFacts {
            in_use: Some("x".into()),
            ..facts(Some(1), None)
        };
        assert_eq!(
            exit_plan(&f),
            ExitPlan::NotStarted {
                resume: Some("x".into())
            }
        );
        let again = ExitFacts {
            in_use_retried: true,
            ..f
        };
        assert_eq!(
            exit_plan(&again),
            ExitPlan::Ended {
                settle: TurnOutcome::Error,
                clean: false
            }
        );
    }

    #[test]
    fn rule_11_an_exit_with_a_message_in_flight_is_a_crash_even_with_code_0() {
        let f = ExitFacts {
            in_flight: true,
            ..facts(Some(0), None)
        };
        assert_eq!(
            exit_plan(&f),
            ExitPlan::Ended {
                settle: TurnOutcome::Crashed,
                clean: false
            }
        );
    }

    #[test]
    fn an_exit_0_with_nothing_in_flight_is_clean() {
        assert_eq!(
            exit_plan(&facts(Some(0), None)),
            ExitPlan::Ended {
                settle: TurnOutcome::Crashed,
                clean: true
            }
        );
    }

    #[test]
    fn rule_11_a_death_by_a_signal_is_a_crash() {
        assert_eq!(
            exit_plan(&facts(None, Some(9))),
            ExitPlan::Ended {
                settle: TurnOutcome::Crashed,
                clean: false
            }
        );
    }
}
