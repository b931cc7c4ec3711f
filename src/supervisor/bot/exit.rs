//! A CLI that exits unasked: the shell gathers what it knows and carries out what the lifecycle
//! core decides ([`Lifecycle::exited`], then [`Lifecycle::crashed`] after a crash's clean-up).

use super::Actor;
use crate::process::ExitInfo;
use crate::supervisor::Property;
use crate::supervisor::core::lifecycle::CrashLimits;
use crate::supervisor::core::lifecycle::Exit;
use std::time::Duration;
use std::time::Instant;

impl Actor {
    /// The process exited without being asked to.
    pub(super) async fn on_exit(&mut self, info: ExitInfo) {
        let Some(proc) = self.proc.take() else {
            return;
        };
        let Some(mut core_proc) = self.core.process.take() else {
            return;
        };
        self.process_gone();
        self.apply(std::mem::take(&mut core_proc.controls).at_exit());
        let root_pid = proc.handle.pid;
        tracing::info!(bot_id = %self.id, pid = root_pid, status = %info, "agent exited");
        let stderr = proc.handle.stderr_text();
        let recorded = self.record().session_id;
        let exit = Exit {
            status: info,
            stderr: &stderr,
            stderr_fatal: self.shared.runtime.fatal_reason(&stderr),
            stderr_in_use: self.shared.runtime.session_in_use(&stderr),
            lived: proc.handle.started.elapsed(),
            fresh_window: Duration::from_secs_f64(self.shared.config.fresh_start_if_dies_within_s),
            recorded: recorded.as_deref(),
            in_flight: self.core.turns.inflight.is_some(),
            redo_limit: self.shared.config.redo_limit,
        };
        let exists = self.transcript_check();
        let look = self.conversation_look();
        let steps = self.core.life.exited(
            &mut core_proc.run,
            &mut self.core.turns,
            &exit,
            exists,
            look,
        );
        self.apply(steps.now);
        self.clean_up_after_exit(root_pid, steps.clean_up).await;
        self.apply(steps.then);
        if let Some(text) = steps.crashed {
            let limits = CrashLimits {
                window: Duration::from_secs(self.shared.config.crash_loop_window_s),
                limit: self.shared.config.crash_loop_limit,
            };
            let holders = self.holders();
            let effects =
                self.core
                    .life
                    .crashed(Instant::now(), limits, &self.core.turns, holders, &text);
            self.apply(effects);
        }
    }

    /// What every end of a process means for the actor, whatever the exit: no watchdog, no
    /// `ProcessId`, no open prompt, no streamed message, no interrupt under way.
    pub(super) fn process_gone(&mut self) {
        self.core.watch.process_gone();
        self.update(vec![Property::ProcessId], |v| v.process_id = 0);
        self.deny_open_prompts();
        self.end_streamed_message();
        self.core.turns.interrupting = None;
        self.core.limit_seen = None;
    }

    pub(super) fn holders(&self) -> usize {
        self.shared
            .holders
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .len()
    }
}
