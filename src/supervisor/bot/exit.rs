//! A CLI that exits unasked: a lost conversation (rule 4), an id in use, a crash (rule 11) with
//! its backoff and crash-loop limit, or a failure restarting cannot fix.

use super::*;

impl Actor {
    /// The process exited without being asked to.
    pub(super) async fn on_exit(&mut self, info: ExitInfo) {
        let Some(proc) = self.proc.take() else {
            return;
        };
        self.watch.process_gone();
        self.update(vec!["ProcessId"], |v| v.process_id = 0);
        self.deny_open_prompts();
        self.end_streamed_message();
        self.turns.interrupting = None;
        self.adopt_reported_session(&proc);
        let lived = proc.handle.started.elapsed();
        let root_pid = proc.handle.pid;
        let mut proc = proc;
        if !proc.stopping && proc.in_use.is_none() && !proc.turn_began {
            proc.in_use = self.runtime.session_in_use(&proc.handle.stderr_text());
        }
        let plan = exit_plan(&ExitFacts {
            stopping: proc.stopping,
            lost: proc.lost,
            in_use: proc.in_use.clone(),
            in_use_retried: self.in_use_retried,
            exit: info,
            in_flight: self.turns.inflight.is_some(),
        });
        let (settle, clean) = match plan {
            ExitPlan::StoppedLate => {
                // A root that survived SIGKILL (verdict `root-alive`) exited at last: released now.
                self.settle_inflight(
                    TurnOutcome::Interrupted,
                    "stopped",
                    "The agent was stopped before the turn finished.".into(),
                );
                self.clean_up_after_exit(root_pid, "late exit").await;
                self.set_state(State::Stopped);
                return;
            }
            ExitPlan::NotStarted { resume } => {
                tracing::info!(bot_id = %self.id, pid = root_pid, status = %info, "agent exited");
                self.settle_inflight(TurnOutcome::Error, "agent_exited", String::new());
                self.set_state(State::Stopped);
                if let Some(id) = resume {
                    self.in_use_retried = true;
                    self.force_resume = Some(id);
                }
                self.clean_up_after_exit(root_pid, "exit").await;
                return;
            }
            ExitPlan::Ended { settle, clean } => (settle, clean),
        };
        tracing::info!(bot_id = %self.id, pid = root_pid, status = %info, "agent exited");
        let stderr = proc.handle.stderr_text();
        // Published at once (rule 11): the running turn ends, waiting messages stay queued.
        let text = if settle == TurnOutcome::Crashed {
            format!("The agent exited before the turn finished ({info}).")
        } else {
            String::new()
        };
        let settled = self.settle_inflight(settle, "agent_exited", text);
        if let SessionStart::Resume(id) = &proc.start {
            let window = Duration::from_secs_f64(self.config.fresh_start_if_dies_within_s);
            let forget = decide::forget_after_early_exit(
                true,
                proc.turn_began,
                settled == Settled::Taken,
                &info,
                lived,
                window,
            );
            if forget && self.record().session_id.as_deref() == Some(id.as_str()) {
                self.forget_session(
                    id,
                    "died_after_launch",
                    format!(
                        "The agent exited {:.1} s after it was started on conversation {id} without \
                         beginning a turn; the next start begins a new conversation.",
                        lived.as_secs_f64()
                    ),
                );
            }
        }
        if clean {
            self.set_state(State::Stopped);
            self.clean_up_after_exit(root_pid, "exit").await;
            return;
        }
        // Published at once, before the clean-up (rule 11).
        let fatal = self.fatal.take().or_else(|| {
            self.runtime
                .fatal_reason(&stderr)
                .map(|kind| format!("{kind} error: {stderr}"))
        });
        if let Some(reason) = fatal {
            let text = format!(
                "The agent stopped on an error that restarting cannot fix ({reason}). Fix it, then \
                 call Restart."
            );
            self.add_item("error", None, json!({ "text": text, "reason": "fatal" }));
            self.set_last_error(&text);
            self.set_state(State::Failed);
            self.clean_up_after_exit(root_pid, "exit").await;
            return;
        }
        let mut text = format!("The agent exited unexpectedly ({info}).");
        if !stderr.is_empty() {
            text.push_str(" Its last output: ");
            text.push_str(&stderr);
        }
        self.add_item("error", None, json!({ "text": text, "reason": "crash" }));
        self.set_last_error(&text);
        self.set_state(State::Stopped);
        self.clean_up_after_exit(root_pid, "crash").await;
        let needed = !self.turns.queue.is_empty() || self.holders() > 0;
        let after = self.crashes.crashed(
            Instant::now(),
            Duration::from_secs(self.config.crash_loop_window_s),
            self.config.crash_loop_limit,
            needed,
        );
        match after {
            AfterCrash::CrashLoop { count } => {
                let text = format!(
                    "The agent crashed {count} times within {} s; botvisor stopped restarting \
                     it. Call Restart to try again. Last: {text}",
                    self.config.crash_loop_window_s
                );
                self.add_item(
                    "error",
                    None,
                    json!({ "text": text, "reason": "crash_loop" }),
                );
                self.set_last_error(&text);
                self.set_state(State::Failed);
            }
            AfterCrash::Restart { backoff, count } => {
                self.restart_at = Some(tokio::time::Instant::now() + backoff);
                self.restart_pending = true;
                self.add_item(
                    "system",
                    None,
                    json!({
                        "text": format!(
                            "botvisor restarts the agent in {:.2} s (crash {count} of at most {} \
                             within {} s).",
                            backoff.as_secs_f64(),
                            self.config.crash_loop_limit,
                            self.config.crash_loop_window_s
                        ),
                        "reason": "restart_pending",
                        "in_s": backoff.as_secs_f64(),
                    }),
                );
            }
            AfterCrash::Wait => {}
        }
    }

    pub(super) fn holders(&self) -> usize {
        self.shared
            .holders
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .len()
    }
}
