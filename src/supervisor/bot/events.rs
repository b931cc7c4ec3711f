//! The CLI's stdout, read as runtime events and dispatched.

use super::{Actor, Next};
use crate::process::ProcEvent;
use crate::runtime::RuntimeEvent;
use crate::supervisor::core::lifecycle::Lifecycle;
use crate::supervisor::core::stop::StopReason;
use crate::supervisor::core::timeouts;
use serde_json::json;
use std::time::Instant;

impl Actor {
    pub(super) fn on_proc_event(&mut self, ev: ProcEvent) -> Next {
        let current = self.proc.as_ref().map(|p| p.handle.generation);
        match ev {
            ProcEvent::Line(generation, line) if Some(generation) == current => {
                let Some(proc) = self.proc.as_mut() else {
                    return Next::Nothing;
                };
                let read = proc.protocol.read_line(&line);
                self.write_lines(read.replies);
                let mut next = Next::Nothing;
                for event in read.events {
                    if let stop @ Next::StopProcess(_) = self.on_runtime_event(event) {
                        next = stop;
                    }
                }
                next
            }
            ProcEvent::Exited(generation, info) if Some(generation) == current => {
                Next::Exited(info)
            }
            _ => Next::Nothing,
        }
    }

    pub(super) fn on_runtime_event(&mut self, event: RuntimeEvent) -> Next {
        if event.is_sign_of_life() {
            self.core.watch.sign_of_life();
        }
        match event {
            RuntimeEvent::Init { .. } | RuntimeEvent::Opened { .. } | RuntimeEvent::Ignored => {
                Next::Nothing
            }
            RuntimeEvent::Tokens { input, output } => {
                self.core.turns.meter.tokens(input, output);
                Next::Nothing
            }
            RuntimeEvent::Limit(report) => {
                tracing::info!(
                    bot_id = %self.id,
                    state = ?report.state,
                    kind = %report.kind,
                    resets_at = report.resets_at,
                    utilization = ?report.utilization,
                    "usage limit"
                );
                let before = self
                    .view
                    .read()
                    .unwrap_or_else(|p| p.into_inner())
                    .plan_limit
                    .clone();
                if let Some(effect) =
                    crate::supervisor::core::limit_warning::warned(before.as_ref(), &report)
                {
                    self.apply(vec![effect]);
                }
                let told = report.clone();
                self.update(vec![crate::supervisor::Property::PlanLimit], |v| {
                    v.plan_limit = Some(told)
                });
                // A reached limit while a message is in flight: its error result is the limit's
                // refusal, not a failed turn (`core::limits::refused`).
                if report.state == crate::runtime::LimitState::Reached
                    && let Some(inflight) = &self.core.turns.inflight
                {
                    self.core.limit_seen = Some((inflight.turn.id.clone(), report));
                }
                Next::Nothing
            }
            RuntimeEvent::TextDelta(text) => {
                self.on_text_delta(text);
                Next::Nothing
            }
            RuntimeEvent::MessageStart => {
                self.end_streamed_message();
                Next::Nothing
            }
            RuntimeEvent::PermissionRequest {
                request_id,
                tool,
                input,
                request,
            } => {
                let scopes = self.shared.runtime.scopes(&request);
                self.on_permission_request(crate::supervisor::core::prompts::Asked {
                    request_id,
                    tool,
                    input,
                    request,
                    scopes: scopes.iter().map(|s| s.as_str().to_owned()).collect(),
                });
                Next::Nothing
            }
            RuntimeEvent::ControlResponse { request_id, result } => {
                self.on_control_response(request_id, result);
                Next::Nothing
            }
            RuntimeEvent::ControlRequest {
                request_id,
                subtype,
                ..
            } => {
                tracing::debug!(bot_id = %self.id, %subtype, "control request of the CLI refused");
                let message = format!("botvisor does not serve `{subtype}` requests");
                if let Some(proc) = self.proc.as_mut() {
                    let lines = proc.protocol.refuse(&request_id, &message);
                    self.write_lines(lines);
                }
                Next::Nothing
            }
            RuntimeEvent::UserReplay { session_id, .. } => {
                self.on_replay(session_id);
                Next::Nothing
            }
            RuntimeEvent::Chat(chat) => {
                if chat.kind == "assistant" {
                    self.flush_delta();
                }
                let tool = matches!(chat.kind, "tool_use" | "tool_result");
                let effects = self
                    .core
                    .turns
                    .said_by_cli(chat.kind, chat.payload.to_string());
                self.apply(effects);
                if chat.kind == "assistant" {
                    self.end_streamed_message();
                }
                if tool {
                    self.snapshot_descendants();
                    self.core.snapshots.tool(Instant::now());
                }
                Next::Nothing
            }
            RuntimeEvent::Tasks { running } => {
                if let Some(n) = running {
                    self.background_tasks = n;
                }
                self.snapshot_descendants();
                Next::Nothing
            }
            RuntimeEvent::ApiRetry {
                error,
                status,
                attempt,
                max_retries,
                delay_ms,
            } => {
                let retry = crate::supervisor::core::retry::Retry {
                    error: &error,
                    status,
                    attempt,
                    max_retries,
                    delay_ms,
                    hint: self.shared.runtime.api_hint(),
                };
                self.on_api_retry(&retry);
                Next::Nothing
            }
            RuntimeEvent::TurnResult {
                outcome,
                payload,
                error,
                session_id,
            } => {
                // Before the turn's end is published: a client that reads SessionId after
                // TurnFinished sees the conversation the turn went to.
                self.note_reported_session(session_id);
                self.on_result(outcome, payload, error);
                self.keep_conversation();
                Next::Nothing
            }
            RuntimeEvent::ConversationNotFound { session_id } => {
                let Some(proc) = self.proc.as_mut() else {
                    return Next::Nothing;
                };
                let Some((effects, stop)) =
                    Lifecycle::conversation_lost(&mut proc.run, &mut self.core.turns, &session_id)
                else {
                    return Next::Nothing;
                };
                tracing::info!(bot_id = %self.id, %session_id, "conversation not found; starting a new one");
                self.apply(effects);
                if stop {
                    Next::StopProcess(StopReason::Replaced)
                } else {
                    Next::Nothing
                }
            }
            RuntimeEvent::OpenFailed { error } => {
                // No turn can run in this process: said, the waiting turn fails, the process is
                // stopped, and nothing starts again until a client sends or restarts.
                tracing::warn!(bot_id = %self.id, %error, "the agent could not open its conversation");
                let recorded = self.record().session_id;
                let holds = self.conversation_holds();
                let effects =
                    timeouts::open_failed(&mut self.core.turns, &error, recorded.as_deref(), holds);
                self.apply(effects);
                Next::StopProcess(StopReason::OpenFailed)
            }
            RuntimeEvent::SessionInUse { session_id } => {
                if let Some(proc) = self.proc.as_mut() {
                    tracing::info!(bot_id = %self.id, %session_id, "session id already in use");
                    proc.run.session_in_use(session_id);
                }
                Next::Nothing
            }
            RuntimeEvent::Unparsed { line, reason } => {
                let turn = self.current_turn_id();
                self.add_item(
                    "error",
                    turn.as_deref(),
                    json!({
                        "text": format!("The agent printed a line botvisor could not read ({reason})."),
                        "line": line,
                    }),
                );
                Next::Nothing
            }
        }
    }

    /// The CLI retries a model request: `LastError` says so each time, and a rate-limited
    /// `system` item (`reason` `api_retry`) of the turn waiting for it (see `core::retry`).
    pub(super) fn on_api_retry(&mut self, retry: &crate::supervisor::core::retry::Retry<'_>) {
        let text = match self.shared.runtime.fatal_reason(retry.error) {
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
        tracing::warn!(bot_id = %self.id, attempt = retry.attempt, error = retry.error, "model request retried");
        self.set_last_error(&text);
        if self.core.retry_notes.should_note(retry, Instant::now()) {
            // The CLI retries before it replays the message: the turn is the one written to it.
            let turn = self.core.turns.inflight.as_ref().map(|i| i.turn.id.clone());
            self.add_item(
                "system",
                turn.as_deref(),
                json!({
                    "text": text, "reason": "api_retry", "attempt": retry.attempt,
                    "max_retries": retry.max_retries, "error": retry.error,
                    "error_status": retry.status,
                }),
            );
        }
    }

    pub(super) fn current_turn_id(&self) -> Option<String> {
        self.core.turns.answering().map(str::to_owned)
    }
}
