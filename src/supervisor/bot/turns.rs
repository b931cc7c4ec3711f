//! A turn's life: it begins (the replay records the session, design rule 3), ends with its
//! result, or is settled when its process is gone (design rule 8); one durable outcome each.

use super::{Actor, bot_env};
use crate::process;
use crate::process::identity::ProcessIdentity;
use crate::runtime::{ResultOutcome, TakenTurn};
use crate::supervisor::core::Inflight;
use crate::supervisor::core::budget;
use crate::supervisor::core::interrupt;
use crate::supervisor::core::limits;
use crate::supervisor::core::spend;
use serde_json::Value;
use std::path::Path;
use std::time::Duration;

impl Actor {
    /// The CLI replayed the message in flight: its turn began ([`Turns::replayed`], rule 3).
    pub(super) fn on_replay(&mut self, session_id: Option<String>) {
        let Some(proc) = self.proc.as_ref() else {
            return;
        };
        let launched = proc.protocol.conversation().unwrap_or_default().to_owned();
        let recorded = self.record().session_id;
        // The transcript is looked at only when the CLI reports another id than the launched.
        let exists = self.transcript_check();
        let Some(replayed) = self.core.turns.replayed(
            &launched,
            session_id.as_deref(),
            recorded.as_deref(),
            exists,
        ) else {
            return;
        };
        // What the turn starts is what appears from now on.
        let before = self.agent_descendants();
        let Some(proc) = self.proc.as_mut() else {
            return;
        };
        proc.before_turn = Some(before);
        if let Some(r) = &replayed.reported_later {
            tracing::info!(bot_id = %self.id, reported = %r, %launched, "the CLI reports another session id; kept until its transcript exists");
        }
        proc.run.began(replayed.reported_later.clone());
        self.apply(replayed.effects);
    }

    /// A session id the CLI reported at a turn's end ([`Run::reported`]) is recorded once its
    /// transcript exists, at once or at the process's end ([`Run::adopt_reported`]).
    pub(super) fn note_reported_session(&mut self, reported: Option<String>) {
        let Some(proc) = self.proc.as_mut() else {
            return;
        };
        proc.run.reported(reported, proc.protocol.conversation());
        let recorded = self.record().session_id;
        let Some(proc) = self.proc.as_ref() else {
            return;
        };
        if let Some((_, effect)) = proc
            .run
            .adopt_reported(recorded.as_deref(), self.transcript_check())
        {
            self.apply(vec![effect]);
        }
    }

    /// Whether the transcript of a session id exists now, for this bot's CLI (its environment
    /// and working directory), as a closure the core can call; the environment is built only if
    /// it is called.
    pub(super) fn transcript_check(&self) -> impl Fn(&str) -> bool + use<> {
        let record = self.record();
        let config = self.shared.config.clone();
        let runtime = self.shared.runtime.clone();
        move |session_id: &str| {
            let env = bot_env(&config, &record);
            runtime.transcript_exists(&env, Path::new(&record.cwd), session_id)
        }
    }

    /// The CLI reported a turn's result ([`Turns::result`]).
    pub(super) fn on_result(
        &mut self,
        outcome: ResultOutcome,
        payload: Value,
        error: Option<String>,
    ) {
        self.end_streamed_message();
        let seen = self.core.limit_seen.take();
        if outcome == ResultOutcome::Error
            && let Some((turn, report)) = seen
            && self.current_turn_id().as_deref() == Some(turn.as_str())
        {
            self.on_limit_refused(&report);
            return;
        }
        // The same limit hit again in the same process: Claude Code 2.1.328 prints no new
        // `rate_limit_event` when nothing changed, only its error result's words ("You've hit
        // your 5-hour limit · resets …"). The last report tells the window; its reset, if past,
        // is waited out with the backoff.
        if outcome == ResultOutcome::Error
            && let Some(words) = error.as_deref()
            && self.shared.runtime.fatal_reason(words) == Some("usage limit")
            && self.current_turn_id().is_some()
        {
            let last = self
                .view
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .plan_limit
                .clone();
            let report = match last {
                Some(r) if r.state == crate::runtime::LimitState::Reached => r,
                _ => crate::runtime::LimitReport {
                    state: crate::runtime::LimitState::Reached,
                    kind: String::new(),
                    resets_at: 0,
                    utilization: None,
                },
            };
            self.on_limit_refused(&report);
            return;
        }
        // An expired or refused login is a hold, not a failure: the message waits for new
        // credentials (Claude Code 2.1.328: an error result with api_error_status 401 whose text
        // says so; Codex 0.171.0: a failed turn "unexpected status 401 Unauthorized").
        if outcome == ResultOutcome::Error
            && let Some(words) = error.as_deref()
            && self.shared.runtime.fatal_reason(words) == Some("authentication")
            && self.current_turn_id().is_some()
        {
            self.close_open_prompts("The turn ended before this request was answered.");
            let words = format!("{words}. {}", self.shared.runtime.login_hint());
            if let Some(effects) = limits::login_refused(&mut self.core.turns, &words) {
                tracing::warn!(bot_id = %self.id, error = %words, "login expired or refused; the message waits");
                self.apply(effects);
                self.follow_credentials();
            }
            return;
        }
        // A turn that ended (interrupted, failed) while the agent was asking leaves nobody
        // waiting for the answer.
        self.close_open_prompts("The turn ended before this request was answered.");
        let interrupting = self.core.turns.interrupting.clone();
        let mut ended = self.core.turns.result(outcome, &payload, error);
        if ended.succeeded {
            self.core.limit_strikes = 0;
        }
        if let Some(turn) = ended
            .turn_id
            .clone()
            .filter(|t| interrupting.as_ref() == Some(t))
            && let Some(before) = self.proc.as_mut().and_then(|p| p.before_turn.take())
        {
            // Codex ends the command's shell and leaves the command: an orphan the daemon
            // adopted, found with the descendants.
            let now = self.agent_descendants();
            let left = interrupt::left_by_turn(&before, now);
            if !left.is_empty() {
                self.left_by_interrupt = Some((turn, left));
            }
        }
        let fatal = ended.error.as_deref().and_then(|e| {
            self.shared
                .runtime
                .fatal_reason(e)
                .map(|kind| format!("{kind} error: {e}"))
        });
        let mut effects = std::mem::take(&mut ended.effects);
        if let Some(proc) = self.proc.as_mut() {
            effects.extend(self.core.life.turn_result(
                &mut proc.run,
                &self.core.turns,
                &ended,
                fatal,
            ));
        }
        effects.extend(self.budget_after(&ended.spend));
        self.apply(effects);
    }

    /// What a turn's `spend` did to the budget ([`spend::budget_step`]): a warning item at 80 %,
    /// the budget hold at 100 %.
    fn budget_after(&self, turn: &spend::Spend) -> Vec<crate::supervisor::core::Effect> {
        let (before, budget, held) = {
            let v = self.view.read().unwrap_or_else(|p| p.into_inner());
            (
                v.record.spend.cost_nanos,
                v.budget(),
                v.record.limit.is_some(),
            )
        };
        let after = before.saturating_add(turn.cost_nanos);
        match (spend::budget_step(before, after, budget), budget) {
            (spend::BudgetStep::Warning, Some(b)) => vec![budget::warning(after, b)],
            (spend::BudgetStep::Reached, Some(b)) if !held => budget::reached(after, b),
            _ => Vec::new(),
        }
    }

    /// The usage limit refused the message in flight ([`limits::refused`]): it waits at the head
    /// of the queue and the bot holds until the reset ([`limits::wait`]).
    pub(super) fn on_limit_refused(&mut self, report: &crate::runtime::LimitReport) {
        self.close_open_prompts("The turn ended before this request was answered.");
        let continue_cut = self
            .record()
            .continue_after_limit
            .unwrap_or(self.shared.config.continue_after_limit);
        let now_unix = unix_now();
        let times = self.shared.config.limit_times();
        let strikes = self.core.limit_strikes;
        let Some((hold, effects)) = limits::refused(
            &mut self.core.turns,
            report,
            continue_cut,
            now_unix,
            strikes,
            times,
        ) else {
            return;
        };
        let wait = limits::wait(&hold, now_unix, strikes, times);
        self.core.limit_strikes += 1;
        self.core.limit_until = Some(std::time::Instant::now() + wait);
        tracing::warn!(bot_id = %self.id, kind = %hold.kind, resets_at = hold.resets_at, wait_s = wait.as_secs(), "usage limit reached; the message waits");
        self.apply(effects);
    }

    /// At the actor's start: a usage limit recorded by an earlier run holds again, until its
    /// reset (or a retry when it is not known).
    pub(super) fn resume_limit(&mut self) {
        let Some((kind, resets_at)) = self.record().limit else {
            return;
        };
        let (cost, budget) = {
            let v = self.view.read().unwrap_or_else(|p| p.into_inner());
            (v.record.spend.cost_nanos, v.budget())
        };
        let times = self.shared.config.limit_times();
        match limits::resumed(&kind, resets_at, unix_now(), times, cost, budget) {
            limits::Resumed::Wait(wait) => {
                self.core.limit_until = Some(std::time::Instant::now() + wait);
            }
            limits::Resumed::Credentials | limits::Resumed::Budget => {}
            limits::Resumed::Lift => {
                let running = self.proc.is_some();
                self.apply(limits::lifted(running));
            }
        }
    }

    /// A closure that says whether the conversation a message in flight went to holds it (the
    /// runtime's transcript, written since the message was), for the core's rule-8 decisions.
    pub(super) fn conversation_holds(&self) -> impl FnOnce(&Inflight) -> bool + use<> {
        let record = self.record();
        let config = self.shared.config.clone();
        let runtime = self.shared.runtime.clone();
        move |inf: &Inflight| {
            let env = bot_env(&config, &record);
            runtime.conversation_has_message(
                &env,
                Path::new(&record.cwd),
                &inf.session,
                &inf.turn.text,
                inf.written,
            )
        }
    }

    /// A closure that reads what the conversation a message in flight went to holds of it (the
    /// runtime's transcript since the message was written: the message, its answer, where a
    /// resume cuts it out), for the core's decisions on a process that ended unasked (issue 25).
    pub(super) fn conversation_look(&self) -> impl FnOnce(&Inflight) -> Option<TakenTurn> + use<> {
        let record = self.record();
        let config = self.shared.config.clone();
        let runtime = self.shared.runtime.clone();
        move |inf: &Inflight| {
            let env = bot_env(&config, &record);
            runtime.taken_turn(
                &env,
                Path::new(&record.cwd),
                &inf.session,
                &inf.turn.text,
                inf.written,
            )
        }
    }

    /// Stops what an interrupted turn left running, by identity (SIGTERM, `stop_grace_s`,
    /// SIGKILL), and says in the chat what was stopped and what survived (reason
    /// `interrupted_processes`).
    pub(super) async fn stop_left_by_interrupt(&mut self, turn: &str, left: Vec<ProcessIdentity>) {
        tracing::info!(bot_id = %self.id, turn_id = %turn, count = left.len(), "stopping what the interrupted turn left running");
        let grace = Duration::from_secs_f64(self.shared.config.stop_grace_s);
        let stopped = process::stop::stop_by_identity(&left, grace).await;
        let note = interrupt::stopped_note(&stopped);
        if note["survivors"].as_array().is_some_and(|s| !s.is_empty()) {
            tracing::warn!(bot_id = %self.id, turn_id = %turn, "{}", note["text"]);
        }
        self.add_item("system", Some(turn), note);
    }
}

/// Now, in Unix seconds.
pub(super) fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
