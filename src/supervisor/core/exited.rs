//! The running process's end as an input of the machine (issue 27): what it was, decided by
//! [`Lifecycle::exited`]; the clean-up of what is left of its tree is the shell's
//! ([`Effect::CleanUp`]), after which the rest follows ([`super::Input::CleanedUp`]), a crash's
//! backoff or crash loop last ([`Lifecycle::crashed`](super::lifecycle::Lifecycle::crashed)).
//!
//! [`Lifecycle::exited`]: super::lifecycle::Lifecycle::exited

use std::time::{Duration, Instant};

use super::bot_core::BotCore;
use super::effect::Effect;
use super::exit::Exit;
use super::lifecycle::CrashLimits;
use super::machine::Facts;
use crate::process::ExitInfo;

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
    pub fn process_gone(&mut self, now: Instant) {
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
        let settings = facts.exit_settings();
        let recorded = facts.recorded();
        let exit = Exit {
            status,
            stderr,
            stderr_fatal: facts.fatal_reason(stderr),
            stderr_in_use: facts.session_in_use(stderr),
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
            let limits = facts.exit_settings().crash_limits;
            let effects = self.life.crashed(now, limits, &self.turns, holders, &text);
            self.emit(effects);
        }
    }
}
