//! What a process's exit means, with no I/O (design rules 4, 8 and 11): the shell gathers the
//! facts (was it being stopped, did it lose its conversation or refuse an id in use, its exit
//! status, whether a message was in flight) and carries out the [`ExitPlan`].
//!
//! As an input of the machine (issue 27, [`BotCore::exited`]): what the end was is decided by
//! [`Lifecycle::exited`]; the clean-up of what is left of the tree is the shell's
//! ([`Effect::CleanUp`]), after which the rest follows ([`super::Input::CleanedUp`]), a crash's
//! backoff or crash loop last ([`Lifecycle::crashed`]).

use std::time::{Duration, Instant};

use super::bot_core::BotCore;
use super::effect::Effect;
use super::lifecycle::{CrashLimits, Lifecycle, Run, cut_refused, settle_stopped};
use super::machine::Facts;
use super::records::{failed, forget, said_error};
use super::state::State;
use super::stop::StopReason;
use super::turns::{Inflight, Settled, Turns};
use crate::process::ExitInfo;
use crate::runtime::{SessionStart, TakenTurn};
use crate::supervisor::core::decide::{self, TurnOutcome};

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

/// What a process's exit asks for, in three steps: effects now, the clean-up of what is left
/// of its process tree (design rule 9), then effects after it.
#[derive(Debug, Clone, PartialEq)]
pub struct ExitSteps {
    /// Before the clean-up, in order: the session adopted, the turn settled, the conversation
    /// forgotten, the error said, the state.
    pub now: Vec<Effect>,
    /// Why the clean-up runs, for the journal and the stop verdict: [`StopReason::Exited`],
    /// [`StopReason::LateExit`] or [`StopReason::Crashed`].
    pub clean_up: StopReason,
    /// After the clean-up, in order.
    pub then: Vec<Effect>,
    /// It was a crash with this text: the shell calls [`Lifecycle::crashed`] after the clean-up.
    pub crashed: Option<String>,
}

/// What the shell knows of a process that exited unasked, beyond its [`Run`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exit<'a> {
    /// Its exit status.
    pub status: ExitInfo,
    /// The tail of its stderr.
    pub stderr: &'a str,
    /// The runtime's reading of that stderr: a failure restarting cannot fix, by kind
    /// (`authentication`, `billing`, …).
    pub stderr_fatal: Option<&'a str>,
    /// The runtime's reading of that stderr: a new conversation refused because this id is in
    /// use.
    pub stderr_in_use: Option<String>,
    /// How long it lived.
    pub lived: Duration,
    /// `fresh_start_if_dies_within_s`: a resumed CLI that exits by its own choice sooner, with no
    /// turn begun, could not resume (design rule 4's fallback).
    pub fresh_window: Duration,
    /// The conversation on record now.
    pub recorded: Option<&'a str>,
    /// A message was in flight.
    pub in_flight: bool,
    /// `redo_limit`: how many times a message taken and unanswered is asked again (issue 25).
    pub redo_limit: u32,
}

impl Lifecycle {
    /// A process exited unasked (or, being stopped, after its stop gave up on it): what it means
    /// ([`exit_plan`]), as [`ExitSteps`].
    ///
    /// - Being stopped: the turn ends `interrupted` (reason `stopped`), the bot is `stopped` after
    ///   the clean-up (`late exit`).
    /// - A conversation that never started (lost, or an id in use the first time): the turn in
    ///   flight is settled (`error`, reason `agent_exited`; a message not replayed waits again),
    ///   the bot is `stopped`, and an id in use is resumed by the next start.
    /// - A clean end: the turn is settled, the bot is `stopped`.
    /// - A failure restarting cannot fix (a turn's result said so, or the stderr): an `error`
    ///   item (reason `fatal`), `LastError`, and the bot `failed`.
    /// - Any other: a crash. An `error` item (reason `crash`) with its stderr, `LastError`, the
    ///   bot `stopped`, and [`Lifecycle::crashed`] after the clean-up.
    ///
    /// A resumed CLI that exited by its own choice soon after its launch, with no turn begun and
    /// no message taken, could not resume: its conversation is forgotten (reason
    /// `died_after_launch`, [`decide::forget_after_early_exit`]).
    pub fn exited(
        &mut self,
        run: &mut Run,
        turns: &mut Turns,
        exit: &Exit<'_>,
        transcript_exists: impl Fn(&str) -> bool,
        look: impl FnOnce(&Inflight) -> Option<TakenTurn>,
    ) -> ExitSteps {
        let fatal = run.fatal.take();
        let mut now = Vec::new();
        let mut recorded = exit.recorded.map(str::to_owned);
        if let Some((id, effect)) = run.adopt_reported(recorded.as_deref(), &transcript_exists) {
            now.push(effect);
            recorded = Some(id);
        }
        if !run.stopping && run.in_use.is_none() && !run.turn_began {
            run.in_use = exit.stderr_in_use.clone();
        }
        let plan = exit_plan(&ExitFacts {
            stopping: run.stopping,
            lost: run.lost,
            in_use: run.in_use.clone(),
            in_use_retried: self.in_use_retried,
            exit: exit.status,
            in_flight: exit.in_flight,
            cut: run.cut.is_some(),
            turn_began: run.turn_began,
        });
        let recorded = recorded.as_deref();
        match plan {
            ExitPlan::StoppedLate => {
                now.extend(settle_stopped(
                    turns,
                    StopReason::LateExit,
                    recorded,
                    look,
                    exit.redo_limit,
                ));
                ExitSteps {
                    now,
                    clean_up: StopReason::LateExit,
                    then: vec![Effect::State(State::Stopped)],
                    crashed: None,
                }
            }
            ExitPlan::CutRefused => {
                let why = if exit.stderr.is_empty() {
                    String::new()
                } else {
                    format!("The CLI said: {}", exit.stderr)
                };
                now.extend(cut_refused(turns, &why));
                now.push(Effect::State(State::Stopped));
                ExitSteps::exited(now)
            }
            ExitPlan::NotStarted { resume } => {
                let (_, settled) = turns.settle(
                    TurnOutcome::Error,
                    "agent_exited",
                    String::new(),
                    recorded,
                    |i| look(i).is_some(),
                );
                now.extend(settled);
                now.push(Effect::State(State::Stopped));
                if let Some(id) = resume {
                    self.in_use_retried = true;
                    self.force_resume = Some(id);
                }
                ExitSteps::exited(now)
            }
            ExitPlan::Ended { settle, clean } => {
                let settled = ended_turn(turns, exit, settle, recorded, look, &mut now);
                now.extend(forget_at_early_exit(run, exit, recorded, settled));
                if clean {
                    now.push(Effect::State(State::Stopped));
                    return ExitSteps::exited(now);
                }
                crash_or_failure(turns, exit, fatal, now)
            }
        }
    }
}

impl ExitSteps {
    /// An exit whose effects are all `now`: the clean-up follows for [`StopReason::Exited`].
    fn exited(now: Vec<Effect>) -> ExitSteps {
        ExitSteps {
            now,
            clean_up: StopReason::Exited,
            then: Vec::new(),
            crashed: None,
        }
    }
}

/// The turn in flight when a process ended by itself is settled as `settle` (reason
/// `agent_exited`; its effects go to `now`). After a crash, what the conversation holds decides
/// (issue 25: an answer read back, the message asked again, or ended unanswered); any other end
/// (an id in use refused again) settles it as it is.
fn ended_turn(
    turns: &mut Turns,
    exit: &Exit<'_>,
    settle: TurnOutcome,
    recorded: Option<&str>,
    look: impl FnOnce(&Inflight) -> Option<TakenTurn>,
    now: &mut Vec<Effect>,
) -> Settled {
    // The running turn ends at once, waiting messages stay queued (rule 11).
    let (settled, effects) = if settle == TurnOutcome::Crashed {
        let text = format!(
            "The agent exited before the turn finished ({}).",
            exit.status
        );
        turns.settle_unasked(
            settle,
            "agent_exited",
            text,
            recorded,
            exit.redo_limit,
            look,
        )
    } else {
        turns.settle(settle, "agent_exited", String::new(), recorded, |i| {
            look(i).is_some()
        })
    };
    now.extend(effects);
    settled
}

/// The effect of design rule 4's fallback: a CLI resumed on the recorded conversation that
/// exited by its own choice soon after its launch, without beginning a turn or taking a message,
/// could not resume: the conversation is forgotten (reason `died_after_launch`).
fn forget_at_early_exit(
    run: &Run,
    exit: &Exit<'_>,
    recorded: Option<&str>,
    settled: Settled,
) -> Option<Effect> {
    let SessionStart::Resume(id) = &run.start else {
        return None;
    };
    let taken = matches!(
        settled,
        Settled::Taken | Settled::Redone | Settled::Recovered
    );
    (recorded == Some(id.as_str())
        && decide::forget_after_early_exit(
            true,
            run.refused,
            run.turn_began,
            taken,
            &exit.status,
            exit.lived,
            exit.fresh_window,
        ))
    .then(|| {
        forget(
            id,
            "died_after_launch",
            format!(
                "The agent exited {:.1} s after it was started on conversation {id} without \
                 beginning a turn; the next start begins a new conversation.",
                exit.lived.as_secs_f64()
            ),
        )
    })
}

/// A process that ended by itself, not cleanly: a failure restarting cannot fix (`fatal`, from
/// its turn's result or its stderr) fails the bot; any other is a crash, said with the stderr's
/// tail, and [`Lifecycle::crashed`] decides after the clean-up.
fn crash_or_failure(
    turns: &Turns,
    exit: &Exit<'_>,
    fatal: Option<String>,
    mut now: Vec<Effect>,
) -> ExitSteps {
    let fatal = fatal.or_else(|| {
        exit.stderr_fatal
            .map(|kind| format!("{kind} error: {}", exit.stderr))
    });
    if let Some(reason) = fatal {
        let text = format!(
            "The agent stopped on an error that restarting cannot fix ({reason}). Fix it, then \
             call Restart."
        );
        now.push(said_error(&text, Some("fatal")));
        now.extend(failed(turns.waiting()));
        return ExitSteps::exited(now);
    }
    let mut text = format!("The agent exited unexpectedly ({}).", exit.status);
    if !exit.stderr.is_empty() {
        text.push_str(" Its last output: ");
        text.push_str(exit.stderr);
    }
    now.push(said_error(&text, Some("crash")));
    now.push(Effect::State(State::Stopped));
    ExitSteps {
        now,
        clean_up: StopReason::Crashed,
        then: Vec::new(),
        crashed: Some(text),
    }
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

/// What an exit asks of the core, from the configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExitSettings {
    /// `fresh_start_if_dies_within_s` (design rule 4's fallback).
    pub fresh_window: Duration,
    /// `redo_limit` (issue 25).
    pub redo_limit: u32,
    /// The crash loop's bounds (design rule 11).
    pub crash_limits: CrashLimits,
}

/// What the chat says of a permission request the agent's end left unanswered.
const AGENT_STOPPED: &str = "The agent stopped before this request was answered.";

impl BotCore {
    /// What every end of a process means, whatever the exit: no watchdog, no `ProcessId`, no open
    /// prompt, no streamed message, no interrupt under way, no limit seen.
    pub(super) fn process_gone(&mut self, now: Instant) {
        self.watch.process_gone();
        self.emit([
            Effect::ProcessGone,
            Effect::ClosePrompts(AGENT_STOPPED.into()),
        ]);
        self.end_streamed_message(now);
        self.turns.interrupting = None;
        self.limit_seen = None;
    }

    /// The process exited without being asked to: `status`, the tail of its `stderr`, after
    /// `lived`.
    pub(super) fn exited(
        &mut self,
        now: Instant,
        status: ExitInfo,
        stderr: &str,
        lived: Duration,
        facts: &dyn Facts,
    ) {
        let Some(mut p) = self.process.take() else {
            return;
        };
        self.process_gone(now);
        self.emit(std::mem::take(&mut p.controls).at_exit());
        tracing::info!(%status, "agent exited");
        let settings = self.settings.exit;
        let recorded = facts.recorded();
        let exit = Exit {
            status,
            stderr,
            stderr_fatal: self.words.fatal_reason(stderr),
            stderr_in_use: self.words.session_in_use(stderr),
            lived,
            fresh_window: settings.fresh_window,
            recorded: recorded.as_deref(),
            in_flight: self.turns.inflight.is_some(),
            redo_limit: settings.redo_limit,
        };
        self.attempt_not_taken(p.run.cut.as_ref(), p.run.turn_began);
        let steps = self.life.exited(
            &mut p.run,
            &mut self.turns,
            &exit,
            |id| facts.transcript_exists(id),
            |i| facts.taken_turn(i),
        );
        self.emit(steps.now);
        self.emit([Effect::CleanUp(steps.clean_up)]);
        self.after_clean_up = Some((steps.then, steps.crashed));
    }

    /// The clean-up after an exit is done: what follows it, then, after a crash, the backoff or
    /// the crash loop (design rule 11).
    pub(super) fn cleaned_up(&mut self, now: Instant, facts: &dyn Facts) {
        let Some((then, crashed)) = self.after_clean_up.take() else {
            return;
        };
        self.emit(then);
        if let Some(text) = crashed {
            let (holders, _) = facts.watchers();
            let limits = self.settings.exit.crash_limits;
            let crashed = self.life.crashed(now, limits, &self.turns, holders, &text);
            if let Some(after) = crashed.backoff {
                self.restart_at = Some(now + after);
            }
            self.emit(crashed.effects);
        }
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
