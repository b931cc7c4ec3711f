//! What the running CLI says, as the core reads it (issue 27): each [`RuntimeEvent`] changes the
//! bot's state and queues the effects that say and do it. A turn's result is routed here: a
//! plan's usage limit (the message waits), an expired login (it waits for new credentials), or
//! the turn's end with its cost and budget.

use std::time::Instant;

use serde_json::{Value, json};

use super::bot_core::BotCore;
use super::budget;
use super::effect::{CommitBuilder, Effect, Publish, Request, Streamed, Write};
use super::lifecycle::Lifecycle;
use super::limit_warning;
use super::limits;
use super::machine::{Facts, reached_unknown};
use super::prompts::Asked;
use super::retry::Retry;
use super::spend::{self, Spend};
use super::stop::StopReason;
use super::timeouts;
use crate::runtime::{LimitReport, LimitState, ResultOutcome, RuntimeEvent};

/// What the chat says of a permission request its turn's end left unanswered.
const TURN_ENDED: &str = "The turn ended before this request was answered.";

impl BotCore {
    /// One event of the running CLI: a sign of life for the watchdogs, then what the event says.
    pub(super) fn runtime_event(&mut self, now: Instant, event: RuntimeEvent, facts: &dyn Facts) {
        if event.is_sign_of_life() {
            self.watch.sign_of_life();
            self.crash_spoke(now, facts);
        }
        match event {
            RuntimeEvent::Init { .. } => {
                if self.turns.inflight.as_ref().is_some_and(|i| !i.replayed) {
                    self.emit([Effect::LookBeforeTurn]);
                }
            }
            RuntimeEvent::Opened { .. } | RuntimeEvent::Ignored => {}
            RuntimeEvent::Tokens { input, output } => self.turns.meter.tokens(input, output),
            RuntimeEvent::Limit(report) => self.limit_told(report),
            RuntimeEvent::TextDelta(text) => self.text_delta(now, text),
            RuntimeEvent::MessageStart => self.end_streamed_message(now),
            RuntimeEvent::PermissionRequest {
                request_id,
                tool,
                input,
                request,
            } => self.permission_asked(request_id, tool, input, request),
            RuntimeEvent::ControlResponse { request_id, result } => {
                self.control_answered(&request_id, result)
            }
            RuntimeEvent::ControlRequest {
                request_id,
                subtype,
                ..
            } => self.refuse_control_request(request_id, &subtype),
            RuntimeEvent::UserReplay { session_id, .. } => self.replayed(session_id, facts),
            RuntimeEvent::Chat(chat) => self.chat_line(now, chat.kind, chat.payload.to_string()),
            RuntimeEvent::Tasks { running } => self.tasks_told(running),
            RuntimeEvent::ApiRetry {
                error,
                status,
                attempt,
                max_retries,
                delay_ms,
            } => {
                let retry = Retry {
                    error: &error,
                    status,
                    attempt,
                    max_retries,
                    delay_ms,
                    hint: self.settings.api_hint,
                };
                self.api_retry(now, &retry);
            }
            RuntimeEvent::TurnResult {
                outcome,
                payload,
                error,
                session_id,
            } => {
                // Before the turn's end is published: a client that reads SessionId after
                // TurnFinished sees the conversation the turn went to.
                self.reported_session(session_id, facts);
                self.result(now, outcome, payload, error, facts);
                self.emit([Effect::KeepConversation]);
            }
            RuntimeEvent::ConversationNotFound { session_id } => {
                self.conversation_not_found(&session_id)
            }
            RuntimeEvent::CutRefused { error } => self.cut_refused(&error),
            RuntimeEvent::OpenFailed { error } => self.open_failed(now, &error, facts),
            RuntimeEvent::SessionInUse { session_id } => {
                if let Some(p) = self.process.as_mut() {
                    tracing::info!(%session_id, "session id already in use");
                    p.run.session_in_use(session_id);
                }
            }
            RuntimeEvent::Unparsed { line, reason } => self.unparsed(line, &reason),
        }
    }

    /// The CLI asks before it uses a tool: the turn asked for one (a message taken but not
    /// answered is then not asked again), and the prompt opens with the scopes an allow can have.
    fn permission_asked(&mut self, request_id: String, tool: String, input: Value, request: Value) {
        self.turns.asked_for_a_tool();
        let turn_id = self.turns.answering().map(str::to_owned);
        let scopes = self.words.scopes(&request);
        self.emit([Effect::OpenPrompt {
            asked: Asked {
                request_id,
                tool,
                input,
                request,
                scopes,
            },
            turn_id,
        }]);
    }

    /// The CLI answered one of botvisor's control requests (an interrupt, a setting).
    fn control_answered(&mut self, request_id: &str, result: Result<Value, String>) {
        self.watch.control_answered(request_id);
        let Some(p) = self.process.as_mut() else {
            return;
        };
        match p.controls.answered(request_id, result.map(|_| ())) {
            Ok(effects) => self.emit(effects),
            Err((request, e)) => {
                tracing::warn!(?request, error = %e, "control request refused");
            }
        }
    }

    /// A control request of the CLI botvisor does not serve is refused, so the CLI never waits.
    fn refuse_control_request(&mut self, request_id: String, subtype: &str) {
        tracing::debug!(%subtype, "control request of the CLI refused");
        let message = format!("botvisor does not serve `{subtype}` requests");
        self.emit([Effect::Send(Request::Refuse {
            request_id,
            message,
        })]);
    }

    /// A chat line of the CLI (`assistant`, `tool_use`, `tool_result`, …): streamed text before an
    /// assistant message is flushed first, the line becomes a chat item of the turn, and a tool's
    /// line sends the shell looking for descendants.
    fn chat_line(&mut self, now: Instant, kind: &'static str, payload: String) {
        if kind == "assistant" {
            self.flush_text(now);
        }
        let tool = matches!(kind, "tool_use" | "tool_result");
        let effects = self.turns.said_by_cli(kind, payload);
        self.emit(effects);
        if kind == "assistant" {
            self.end_streamed_message(now);
        }
        if tool {
            self.emit([Effect::LookForDescendants]);
            self.snapshots.tool(now);
        }
    }

    /// How many background tasks the CLI says run (`None`: it did not say); either way the shell
    /// looks for descendants.
    fn tasks_told(&mut self, running: Option<usize>) {
        if let Some(n) = running {
            self.background_tasks = n;
        }
        self.emit([Effect::LookForDescendants]);
    }

    /// The CLI could not find the conversation it was asked to resume: a new one starts (design
    /// rule 2), and the process is replaced when the turn cannot go on in it.
    fn conversation_not_found(&mut self, session_id: &str) {
        let Some(p) = self.process.as_mut() else {
            return;
        };
        let Some((effects, stop)) =
            Lifecycle::conversation_lost(&mut p.run, &mut self.turns, session_id)
        else {
            return;
        };
        tracing::info!(%session_id, "conversation not found; starting a new one");
        self.emit(effects);
        if stop {
            self.emit([Effect::Stop(StopReason::Replaced)]);
        }
    }

    /// The CLI refused to resume without the unanswered attempt.
    fn cut_refused(&mut self, error: &str) {
        tracing::warn!(%error, "the agent refused to resume without the unanswered attempt");
        if let Some(p) = self.process.as_mut() {
            let effects = Lifecycle::cut_refused(&mut p.run, &mut self.turns, error);
            self.emit(effects);
        }
    }

    /// The CLI could not open its conversation.
    fn open_failed(&mut self, now: Instant, error: &str, facts: &dyn Facts) {
        if self.words.held_elsewhere(error) {
            // Another process took the conversation between the look for a holder and this
            // open (design rule 7): the message waits, and the next start finds the holder
            // and waits for it (`core::held`). Not before a moment: a holder the look
            // cannot name is not looped on.
            tracing::info!(%error, "the conversation is open in another process");
            self.turns.unwritten();
            let waiting = self.turns.waiting();
            self.restart_at = Some(now + super::held::LOOK_EVERY * 2);
            self.emit([
                Effect::Queued(waiting),
                Effect::Stop(StopReason::OpenFailed),
            ]);
            return;
        }
        // No turn can run in this process: said, the waiting turn fails, the process is
        // stopped, and nothing starts again until a client sends or restarts.
        tracing::warn!(%error, "the agent could not open its conversation");
        let recorded = facts.recorded();
        let effects = timeouts::open_failed(&mut self.turns, error, recorded.as_deref(), |i| {
            facts.taken_turn(i).is_some()
        });
        self.emit(effects);
        self.emit([Effect::Stop(StopReason::OpenFailed)]);
    }

    /// A line of the CLI botvisor could not read is an error item of the turn, with the line.
    fn unparsed(&mut self, line: String, reason: &str) {
        let turn = self.turns.answering().map(str::to_owned);
        let mut c = CommitBuilder::default();
        c.item(
            "error",
            turn.as_deref(),
            json!({
                "text": format!("The agent printed a line botvisor could not read ({reason})."),
                "line": line,
            })
            .to_string(),
        );
        self.emit(c.build());
    }

    /// Where the plan's usage limit stands, as the CLI told it: a warning once per window, the
    /// `PlanLimit` property, and a reached limit noted for the turn in flight (its error result
    /// is then the limit's refusal, [`limits::refused`]).
    fn limit_told(&mut self, report: LimitReport) {
        tracing::info!(
            state = ?report.state,
            kind = %report.kind,
            resets_at = report.resets_at,
            utilization = ?report.utilization,
            "usage limit"
        );
        if let Some(effect) = limit_warning::warned(self.plan_limit.as_ref(), &report) {
            self.emit([effect]);
        }
        self.plan_limit = Some(report.clone());
        self.emit([Effect::PlanLimit(report.clone())]);
        if report.state == LimitState::Reached
            && let Some(inflight) = &self.turns.inflight
        {
            self.limit_seen = Some((inflight.turn.id.clone(), report));
        }
    }

    /// Streamed text: `PartialText` grows; `TextDelta` at most once per interval
    /// ([`super::stream::DeltaPacer`]).
    fn text_delta(&mut self, now: Instant, text: String) {
        self.emit([Effect::Stream(Streamed::Append(text.clone()))]);
        if let Some(out) = self.deltas.push(&text, now) {
            self.signal_text(out);
        }
    }

    /// Lets out the streamed text that waits, if any.
    pub fn flush_text(&mut self, now: Instant) {
        if let Some(out) = self.deltas.flush(now) {
            self.signal_text(out);
        }
    }

    fn signal_text(&mut self, text: String) {
        let turn_id = self.turns.answering().unwrap_or_default().to_owned();
        self.emit([Effect::Stream(Streamed::Signal { turn_id, text })]);
    }

    /// A message is complete (or a new one starts): what is left is let out, and
    /// `PartialText` starts over.
    pub fn end_streamed_message(&mut self, now: Instant) {
        self.flush_text(now);
        self.emit([Effect::Stream(Streamed::Clear)]);
    }

    /// The CLI replayed the message in flight: its turn began (design rule 3,
    /// [`super::turns::Turns::replayed`]).
    pub(super) fn replayed(&mut self, session_id: Option<String>, facts: &dyn Facts) {
        if self.process.is_none() {
            return;
        }
        let launched = facts.conversation().unwrap_or_default();
        let recorded = facts.recorded();
        // The transcript is looked at only when the CLI reports another id than the launched.
        let Some(replayed) = self.turns.replayed(
            &launched,
            session_id.as_deref(),
            recorded.as_deref(),
            |id| facts.transcript_exists(id),
        ) else {
            return;
        };
        // What the turn starts is what appears from now on.
        self.emit([Effect::TurnBegan]);
        if let Some(r) = &replayed.reported_later {
            tracing::info!(reported = %r, %launched, "the CLI reports another session id; kept until its transcript exists");
        }
        if let Some(p) = self.process.as_mut() {
            p.run.began(replayed.reported_later.clone());
        }
        self.emit(replayed.effects);
        let launched = self.process.as_ref().and_then(|p| p.run.cut.clone());
        self.attempt_turn_began(launched.as_ref());
    }

    /// A session id the CLI reported at a turn's end ([`super::run::Run::reported`]) is recorded
    /// once its transcript exists, at once or at the process's end.
    fn reported_session(&mut self, reported: Option<String>, facts: &dyn Facts) {
        let conversation = facts.conversation();
        let Some(p) = self.process.as_mut() else {
            return;
        };
        p.run.reported(reported, conversation.as_deref());
        let recorded = facts.recorded();
        if let Some((_, effect)) = p
            .run
            .adopt_reported(recorded.as_deref(), |id| facts.transcript_exists(id))
        {
            self.emit([effect]);
        }
    }

    /// The CLI reported a turn's result: a plan's usage limit that refused the message, an
    /// expired login, or the turn's end ([`super::turns::Turns::result`]).
    fn result(
        &mut self,
        now: Instant,
        outcome: ResultOutcome,
        payload: Value,
        error: Option<String>,
        facts: &dyn Facts,
    ) {
        self.end_streamed_message(now);
        let seen = self.limit_seen.take();
        let answering = self.turns.answering().map(str::to_owned);
        // As it was in flight: an attempt that failed is dropped from the conversation before
        // anything more goes (issue 45, [`super::attempt`]).
        let attempt = self.turns.inflight.clone();
        if outcome == ResultOutcome::Error
            && let Some((turn, report)) = seen
            && answering.as_deref() == Some(turn.as_str())
        {
            self.limit_refused(now, &report, facts, attempt);
            return;
        }
        let fatal = error.as_deref().and_then(|w| self.words.fatal_reason(w));
        // The same limit hit again in the same process: Claude Code 2.1.328 prints no new
        // `rate_limit_event` when nothing changed, only its error result's words ("You've hit
        // your 5-hour limit · resets …"). The last report tells the window; its reset, if past,
        // is waited out with the backoff.
        if outcome == ResultOutcome::Error && fatal == Some("usage limit") && answering.is_some() {
            let report = match &self.plan_limit {
                Some(r) if r.state == LimitState::Reached => r.clone(),
                _ => reached_unknown(),
            };
            self.limit_refused(now, &report, facts, attempt);
            return;
        }
        // An expired or refused login is a hold, not a failure: the message waits for new
        // credentials (Claude Code 2.1.328: an error result with api_error_status 401 whose text
        // says so; Codex 0.171.0: a failed turn "unexpected status 401 Unauthorized").
        if outcome == ResultOutcome::Error
            && fatal == Some("authentication")
            && answering.is_some()
            && let Some(words) = error.as_deref()
        {
            self.emit([Effect::ClosePrompts(TURN_ENDED.into())]);
            let hint = facts.login_hint();
            if let Some(effects) = limits::login_refused(&mut self.turns, words, &hint) {
                tracing::warn!(error = %words, "login expired or refused; the message waits");
                self.emit(effects);
                self.emit([Effect::FollowCredentials]);
                if let Some(inf) = attempt {
                    self.drop_attempt(inf, true);
                }
            }
            return;
        }
        // A turn that ended (interrupted, failed) while the agent was asking leaves nobody
        // waiting for the answer.
        self.emit([Effect::ClosePrompts(TURN_ENDED.into())]);
        let interrupting = self.turns.interrupting.clone();
        let mut ended = self.turns.result(outcome, &payload, error);
        if ended.succeeded {
            self.limit_strikes = 0;
        }
        if let Some(turn) = ended
            .turn_id
            .clone()
            .filter(|t| interrupting.as_ref() == Some(t))
        {
            // Codex ends the command's shell and leaves the command: an orphan the daemon
            // adopted, found with the descendants.
            self.emit([Effect::InterruptEnded(turn)]);
        }
        let fatal = ended.error.as_deref().and_then(|e| {
            self.words
                .fatal_reason(e)
                .map(|kind| format!("{kind} error: {e}"))
        });
        let mut effects = std::mem::take(&mut ended.effects);
        if let Some(p) = self.process.as_mut() {
            effects.extend(
                self.life
                    .turn_result(&mut p.run, &self.turns, &ended, fatal),
            );
        }
        effects.extend(self.budget_after(&ended.spend));
        self.emit(effects);
        // A failure, not an interrupt: a message the user interrupted stays as the CLI keeps it.
        let failed = outcome == ResultOutcome::Error && ended.error.is_some();
        if let Some(inf) = attempt.filter(|_| failed) {
            self.drop_attempt(inf, false);
        }
        self.restart_if_idle();
    }

    /// The usage limit refused the message in flight ([`limits::refused`]): it waits at the head
    /// of the queue and the bot holds until the reset ([`limits::wait`]).
    fn limit_refused(
        &mut self,
        now: Instant,
        report: &LimitReport,
        facts: &dyn Facts,
        attempt: Option<super::turns::Inflight>,
    ) {
        self.emit([Effect::ClosePrompts(TURN_ENDED.into())]);
        let (continue_cut, times) = (
            self.standing
                .record
                .continue_after_limit
                .unwrap_or(self.settings.continue_after_limit),
            self.settings.limit_times,
        );
        let now_unix = facts.unix_now();
        let strikes = self.limit_strikes;
        let Some((hold, effects)) = limits::refused(
            &mut self.turns,
            report,
            continue_cut,
            now_unix,
            strikes,
            times,
        ) else {
            return;
        };
        let wait = limits::wait(&hold, now_unix, strikes, times);
        self.limit_strikes += 1;
        self.limit_until = Some(now + wait);
        tracing::warn!(kind = %hold.kind, resets_at = hold.resets_at, wait_s = wait.as_secs(), "usage limit reached; the message waits");
        self.emit(effects);
        if let Some(inf) = attempt {
            self.drop_attempt(inf, true);
        }
    }

    /// The CLI retries a model request: `LastError` says so each time, and a rate-limited
    /// `system` item (`reason` `api_retry`) of the turn waiting for it ([`super::retry`]).
    fn api_retry(&mut self, now: Instant, retry: &Retry<'_>) {
        let text = match self.words.fatal_reason(retry.error) {
            Some(kind) => format!(
                "The model API refused the request ({kind} error: {}, HTTP {}); the agent \
                 retries ({} of {}). Check the credentials or the plan.",
                retry.error,
                retry.status.map_or("?".to_owned(), |s| s.to_string()),
                retry.attempt,
                retry.max_retries
            ),
            None => retry.text(),
        };
        tracing::warn!(
            attempt = retry.attempt,
            error = retry.error,
            "model request retried"
        );
        let mut c = CommitBuilder::default();
        c.write(Write::LastError(text.clone()))
            .then(Publish::LastError(text.clone()));
        self.emit(c.build());
        if self.retry_notes.should_note(retry, now) {
            // The CLI retries before it replays the message: the turn is the one written to it.
            let turn = self.turns.inflight.as_ref().map(|i| i.turn.id.clone());
            let mut c = CommitBuilder::default();
            c.item(
                "system",
                turn.as_deref(),
                json!({
                    "text": text, "reason": "api_retry", "attempt": retry.attempt,
                    "max_retries": retry.max_retries, "error": retry.error,
                    "error_status": retry.status,
                })
                .to_string(),
            );
            self.emit(c.build());
        }
    }
}

impl BotCore {
    /// What a turn's `spend` did to the budget ([`spend::budget_step`]): a warning item at 80 %,
    /// the budget hold at 100 %. Asked before the turn's spend is committed.
    fn budget_after(&self, turn: &Spend) -> Vec<Effect> {
        let (before, budget) = self.spend();
        let held = self.standing.record.hold.is_some();
        let after = before.saturating_add(turn.cost_nanos);
        match (spend::budget_step(before, after, budget), budget) {
            (spend::BudgetStep::Warning, Some(b)) => vec![budget::warning(after, b)],
            (spend::BudgetStep::Reached, Some(b)) if !held => budget::reached(after, b),
            _ => Vec::new(),
        }
    }

    /// What the bot cost so far (nano-dollars, as recorded) and the budget in force
    /// ([`spend::in_force`]: its own, else the daemon's).
    pub(super) fn spend(&self) -> (u64, Option<u64>) {
        let record = &self.standing.record;
        (
            record.cost_nanos,
            spend::in_force(record.budget, self.settings.budget_default),
        )
    }
}
