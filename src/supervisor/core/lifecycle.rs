//! The process lifecycle, with no I/O: what one process of a bot showed ([`Run`]), and what the
//! bot keeps from one process to the next ([`Lifecycle`]). Each method takes one input (a
//! process's exit, a conversation reported lost, a stop, a crash, a client's Restart, a turn's
//! result) and returns the [`Effect`]s that say what it means for the turn, the session record,
//! the bot's `State` and its next start (design rules 3, 4, 8, 9 and 11).

use std::time::{Duration, Instant};

use serde_json::json;

use super::crash::{AfterCrash, Crashes};
use super::effect::{CommitBuilder, Effect, Publish, Write};
use super::exit::{ExitFacts, ExitPlan, exit_plan};
use super::turns::{Inflight, Settled, Turns};
use crate::process::ExitInfo;
use crate::runtime::SessionStart;
use crate::supervisor::bot::State;
use crate::supervisor::decide::{self, TurnOutcome};

/// What one process of the bot showed, from its launch to its end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    /// How it was launched: a resume of a recorded conversation, or a new one.
    pub start: SessionStart,
    /// A turn began in it (a message was replayed).
    pub turn_began: bool,
    /// botvisor is stopping it.
    pub stopping: bool,
    /// It reported its conversation lost (design rule 4).
    pub lost: bool,
    /// It refused a new conversation because this id is in use.
    pub in_use: Option<String>,
    /// A session id it reported instead of the launched one, recorded once its transcript exists
    /// (design rule 3).
    pub reported_session: Option<String>,
}

impl Run {
    /// A process just launched with `start`.
    pub fn new(start: SessionStart) -> Run {
        Run {
            start,
            turn_began: false,
            stopping: false,
            lost: false,
            in_use: None,
            reported_session: None,
        }
    }

    /// Whether it may take a message: not being stopped, its conversation neither lost nor
    /// refused.
    pub fn usable(&self) -> bool {
        !self.stopping && !self.lost && self.in_use.is_none()
    }

    /// The CLI reported the conversation `reported` at a turn's end while holding `conversation`
    /// (it may have forked or cleared it). Once a turn began in this process, another id is kept
    /// to be recorded when its transcript exists ([`Run::adopt_reported`]).
    pub fn reported(&mut self, reported: Option<String>, conversation: Option<&str>) {
        if !self.turn_began {
            return;
        }
        if let Some(r) = reported.filter(|r| !r.is_empty() && Some(r.as_str()) != conversation) {
            self.reported_session = Some(r);
        }
    }

    /// The reported session is recorded when it is not already and its transcript exists
    /// (design rule 3, [`decide::session_to_record`]): one commit that says `SessionId`. Returns
    /// the id recorded with its effect.
    pub fn adopt_reported(
        &self,
        recorded: Option<&str>,
        transcript_exists: impl Fn(&str) -> bool,
    ) -> Option<(String, Effect)> {
        let reported = self.reported_session.as_deref()?;
        if recorded == Some(reported) || !transcript_exists(reported) {
            return None;
        }
        let mut c = CommitBuilder::default();
        c.write(Write::Session(Some(reported.to_owned())))
            .then(Publish::SessionId(Some(reported.to_owned())));
        Some((reported.to_owned(), c.build()?))
    }
}

/// The recorded conversation `old` is forgotten (the next start begins a new one), in one commit
/// with a `system` item that says why: `{"text", "reason", "session_id"}`.
pub fn forget(old: &str, reason: &str, text: String) -> Effect {
    let mut c = CommitBuilder::default();
    c.write(Write::Session(None))
        .then(Publish::SessionId(None))
        .item(
            "system",
            None,
            json!({"text": text, "reason": reason, "session_id": old}).to_string(),
        );
    c.build().expect("a forget writes a row")
}

/// The `system` item's text of a fresh Restart that forgets the conversation `old`.
pub fn fresh_restart_text(old: &str) -> String {
    format!("Restarted fresh: the conversation {old} is left for good; a new one begins.")
}

/// An error the user must see: an `error` item `{"text", "reason"?}` and `LastError`, in one
/// commit.
pub fn said_error(text: &str, reason: Option<&str>) -> Effect {
    let payload = match reason {
        Some(r) => json!({"text": text, "reason": r}),
        None => json!({"text": text}),
    };
    let mut c = CommitBuilder::default();
    c.item("error", None, payload.to_string())
        .write(Write::LastError(text.to_owned()))
        .then(Publish::LastError(text.to_owned()));
    c.build().expect("an error writes rows")
}

/// The bot becomes `failed` (it waits for a client's Restart, across daemon restarts too); with
/// `waiting` messages, a `system` item (reason `failed_with_queue`) says they wait for it.
pub fn failed(waiting: u32) -> Vec<Effect> {
    let mut effects = Vec::new();
    if waiting > 0 {
        let mut c = CommitBuilder::default();
        c.item(
            "system",
            None,
            json!({
                "text": format!(
                    "{waiting} message(s) wait; this bot takes them to the agent once a client \
                     calls Restart."
                ),
                "reason": "failed_with_queue",
                "queued": waiting,
            })
            .to_string(),
        );
        effects.extend(c.build());
    }
    effects.push(Effect::State(State::Failed));
    effects
}

/// What a process's exit asks for, in three steps: effects now, the clean-up of what is left
/// of its process tree (design rule 9), then effects after it.
#[derive(Debug, Clone, PartialEq)]
pub struct ExitSteps {
    /// Before the clean-up, in order: the session adopted, the turn settled, the conversation
    /// forgotten, the error said, the state.
    pub now: Vec<Effect>,
    /// Why the clean-up runs, for the journal and the stop verdict: `exit`, `late exit` or
    /// `crash`.
    pub clean_up: &'static str,
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
}

/// The crash-loop bounds of the configuration (design rule 11).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CrashLimits {
    /// `crash_loop_window_s`.
    pub window: Duration,
    /// `crash_loop_limit`: this many crashes within the window is a crash loop.
    pub limit: u32,
}

/// What the bot keeps from one process to the next.
#[derive(Debug, Clone, Default)]
pub struct Lifecycle {
    /// Recent crashes (design rule 11).
    pub crashes: Crashes,
    /// The next start resumes this id (a new conversation was refused as in use).
    pub force_resume: Option<String>,
    /// An id in use was resumed once since the last Restart.
    pub in_use_retried: bool,
    /// A crashed agent is to be started again when its backoff ends, though nothing waits (a
    /// client holds the bot).
    pub restart_pending: bool,
    /// A failure restarting cannot fix, with the CLI's words, reported by a turn's result.
    pub fatal: Option<String>,
}

impl Lifecycle {
    /// A turn's result came. A success means the agent works: the crash backoff starts from its
    /// first step again. A result whose error the runtime names a failure restarting cannot fix
    /// (`fatal`, `"<kind> error: <text>"`) makes the process's next exit fail the bot.
    /// With `idle` (no message in flight, the process not being stopped) the bot is `idle`.
    pub fn turn_result(
        &mut self,
        succeeded: bool,
        fatal: Option<String>,
        idle: bool,
    ) -> Vec<Effect> {
        if fatal.is_some() {
            self.fatal = fatal;
        }
        if succeeded {
            self.crashes.clear();
        }
        if idle {
            vec![Effect::State(State::Idle)]
        } else {
            Vec::new()
        }
    }

    /// A process started: no crash restart is pending any more.
    pub fn started(&mut self) {
        self.restart_pending = false;
    }

    /// A client's Restart (after the old process is released): the crash count, a forced resume
    /// and the id-in-use retry are cleared; with `fresh`, the recorded conversation is forgotten
    /// (reason `fresh_restart`). The bot is `stopped`, unparked, and starts next.
    pub fn restart(&mut self, fresh: bool, recorded: Option<&str>) -> Vec<Effect> {
        self.crashes.clear();
        self.force_resume = None;
        self.in_use_retried = false;
        let mut effects = Vec::new();
        if fresh && let Some(old) = recorded {
            effects.push(forget(old, "fresh_restart", fresh_restart_text(old)));
        }
        effects.extend([
            Effect::RestartTimer(None),
            Effect::Park(false),
            Effect::State(State::Stopped),
        ]);
        effects
    }

    /// The CLI could not find the conversation `session_id` it was resumed on (design rule 4): the
    /// process takes no message any more, a message not yet replayed waits again first, the
    /// record is forgotten (reason `conversation_not_found`) so the next start begins a new
    /// conversation. `None` when it was reported already. `stop` says the process is to be
    /// stopped now (unless botvisor is stopping it already).
    pub fn conversation_lost(
        run: &mut Run,
        turns: &mut Turns,
        session_id: &str,
    ) -> Option<(Vec<Effect>, bool)> {
        if run.lost {
            return None;
        }
        run.lost = true;
        let mut effects = vec![forget(
            session_id,
            "conversation_not_found",
            format!(
                "The CLI could not find the conversation {session_id}; a new conversation began."
            ),
        )];
        effects.extend(turns.conversation_lost());
        Some((effects, !run.stopping))
    }

    /// A process botvisor stopped (`why`: `stop`, `restart`, `replaced`, `idle`, …) exited: the
    /// reported session is adopted, the turn in flight ends `interrupted` (reason `stopped`) or
    /// its message waits again (design rule 8). The bot is `stopped` after the clean-up. Returns
    /// the effects now and whether the bot is unparked: the stop of a process that lost its
    /// conversation lets its waiting message go to a new one at once.
    pub fn stopped(
        run: &Run,
        turns: &mut Turns,
        why: &str,
        recorded: Option<&str>,
        transcript_exists: impl Fn(&str) -> bool,
        holds: impl FnOnce(&Inflight) -> bool,
    ) -> (Vec<Effect>, bool) {
        let mut effects = Vec::new();
        let mut recorded = recorded.map(str::to_owned);
        if let Some((id, effect)) = run.adopt_reported(recorded.as_deref(), &transcript_exists) {
            effects.push(effect);
            recorded = Some(id);
        }
        let (_, settled) = turns.settle(
            TurnOutcome::Interrupted,
            "stopped",
            "The agent was stopped before the turn finished.".into(),
            recorded.as_deref(),
            holds,
        );
        effects.extend(settled);
        (effects, why == "replaced" && run.lost)
    }

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
        holds: impl FnOnce(&Inflight) -> bool,
    ) -> ExitSteps {
        // The failure a turn's result named belongs to this process only.
        let fatal = self.fatal.take();
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
        });
        let (settle, clean) = match plan {
            ExitPlan::StoppedLate => {
                let (_, settled) = turns.settle(
                    TurnOutcome::Interrupted,
                    "stopped",
                    "The agent was stopped before the turn finished.".into(),
                    recorded.as_deref(),
                    holds,
                );
                now.extend(settled);
                return ExitSteps {
                    now,
                    clean_up: "late exit",
                    then: vec![Effect::State(State::Stopped)],
                    crashed: None,
                };
            }
            ExitPlan::NotStarted { resume } => {
                let (_, settled) = turns.settle(
                    TurnOutcome::Error,
                    "agent_exited",
                    String::new(),
                    recorded.as_deref(),
                    holds,
                );
                now.extend(settled);
                now.push(Effect::State(State::Stopped));
                if let Some(id) = resume {
                    self.in_use_retried = true;
                    self.force_resume = Some(id);
                }
                return ExitSteps {
                    now,
                    clean_up: "exit",
                    then: Vec::new(),
                    crashed: None,
                };
            }
            ExitPlan::Ended { settle, clean } => (settle, clean),
        };
        // The running turn ends at once, waiting messages stay queued (rule 11).
        let text = if settle == TurnOutcome::Crashed {
            format!(
                "The agent exited before the turn finished ({}).",
                exit.status
            )
        } else {
            String::new()
        };
        let (settled, effects) =
            turns.settle(settle, "agent_exited", text, recorded.as_deref(), holds);
        now.extend(effects);
        if let SessionStart::Resume(id) = &run.start
            && recorded.as_deref() == Some(id.as_str())
            && decide::forget_after_early_exit(
                true,
                run.turn_began,
                settled == Settled::Taken,
                &exit.status,
                exit.lived,
                exit.fresh_window,
            )
        {
            now.push(forget(
                id,
                "died_after_launch",
                format!(
                    "The agent exited {:.1} s after it was started on conversation {id} without \
                     beginning a turn; the next start begins a new conversation.",
                    exit.lived.as_secs_f64()
                ),
            ));
        }
        if clean {
            now.push(Effect::State(State::Stopped));
            return ExitSteps {
                now,
                clean_up: "exit",
                then: Vec::new(),
                crashed: None,
            };
        }
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
            return ExitSteps {
                now,
                clean_up: "exit",
                then: Vec::new(),
                crashed: None,
            };
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
            clean_up: "crash",
            then: Vec::new(),
            crashed: Some(text),
        }
    }

    /// After a crash's clean-up (design rule 11): within the crash-loop limit the agent is
    /// started again after a backoff when it is `needed` (messages wait or a client holds the
    /// bot), with a `system` item (reason `restart_pending`, `in_s`); at the limit the bot is
    /// `failed` with an `error` item (reason `crash_loop`) that quotes the crash's `text`.
    pub fn crashed(
        &mut self,
        now: Instant,
        limits: CrashLimits,
        needed: bool,
        waiting: u32,
        text: &str,
    ) -> Vec<Effect> {
        match self
            .crashes
            .crashed(now, limits.window, limits.limit, needed)
        {
            AfterCrash::CrashLoop { count } => {
                let text = format!(
                    "The agent crashed {count} times within {} s; botvisor stopped restarting \
                     it. Call Restart to try again. Last: {text}",
                    limits.window.as_secs()
                );
                let mut effects = vec![said_error(&text, Some("crash_loop"))];
                effects.extend(failed(waiting));
                effects
            }
            AfterCrash::Restart { backoff, count } => {
                self.restart_pending = true;
                let mut c = CommitBuilder::default();
                c.item(
                    "system",
                    None,
                    json!({
                        "text": format!(
                            "botvisor restarts the agent in {:.2} s (crash {count} of at most {} \
                             within {} s).",
                            backoff.as_secs_f64(),
                            limits.limit,
                            limits.window.as_secs()
                        ),
                        "reason": "restart_pending",
                        "in_s": backoff.as_secs_f64(),
                    })
                    .to_string(),
                );
                let mut effects = vec![Effect::RestartTimer(Some(backoff))];
                effects.extend(c.build());
                effects
            }
            AfterCrash::Wait => Vec::new(),
        }
    }
}

#[cfg(test)]
#[path = "lifecycle_tests.rs"]
mod tests;
