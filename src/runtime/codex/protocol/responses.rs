//! Codex's answers to botvisor's own requests (`initialize`, `thread/start`, `thread/resume`,
//! `thread/revert`, `turn/start`, settings, interrupts), read: the handshake's steps until the
//! thread is open, and a refusal told as what it means. The half of [`super::CodexProtocol`]
//! that hears back; [`super::notifications`] is the half that listens.

use super::*;

impl CodexProtocol {
    pub(super) fn on_response(&mut self, id: u64, v: &Value) -> Read {
        let error = v.get("error").map(|e| {
            e.get("message")
                .and_then(Value::as_str)
                .map(str::to_owned)
                .unwrap_or_else(|| e.to_string())
        });
        let result = v.get("result").cloned().unwrap_or(Value::Null);
        match self.phase {
            Phase::Initializing(init) if init == id => {
                if let Some(e) = error {
                    self.phase = Phase::Failed;
                    return Read::events(vec![failed_to_open(&format!(
                        "Codex refused the handshake: {e}"
                    ))]);
                }
                let open = self.id();
                self.phase = Phase::Opening(open);
                let replies = vec![
                    json!({"method": "initialized"}).to_string(),
                    self.open_request(open),
                ];
                return Read {
                    events: vec![RuntimeEvent::Init {
                        session_id: None,
                        model: None,
                        permission_mode: None,
                    }],
                    replies,
                };
            }
            Phase::Opening(open) if open == id => return self.on_opened(result, error),
            Phase::Reverting(revert) if revert == id => {
                let mut read = self.open_done();
                if let Some(e) = error {
                    read.events.insert(
                        0,
                        RuntimeEvent::CutRefused {
                            error: format!("Codex said: thread/revert: {e}"),
                        },
                    );
                }
                return read;
            }
            _ => {}
        }
        if self.turn_starts.remove(&id) {
            if let Some(e) = error {
                return Read::events(vec![RuntimeEvent::TurnResult {
                    outcome: ResultOutcome::Error,
                    session_id: self.thread.clone(),
                    payload: json!({"subtype": "turn_start_failed", "error": e}),
                    error: Some(format!("Codex refused the message: {e}")),
                }]);
            }
            if self.turn.is_none() {
                self.turn = result
                    .pointer("/turn/id")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
            }
            return Read {
                events: vec![RuntimeEvent::Ignored],
                replies: self.release_interrupt(),
            };
        }
        if self.controls.remove(&id) {
            return Read::events(vec![RuntimeEvent::ControlResponse {
                request_id: id.to_string(),
                result: match error {
                    Some(e) => Err(e),
                    None => Ok(result),
                },
            }]);
        }
        Read::events(vec![RuntimeEvent::Ignored])
    }

    pub(super) fn on_opened(&mut self, result: Value, error: Option<String>) -> Read {
        if let Some(e) = error {
            self.phase = Phase::Failed;
            if let SessionStart::Resume(thread) = &self.start {
                if e.contains(NO_ROLLOUT) || e.starts_with(INVALID_SESSION_ID) {
                    return Read::events(vec![RuntimeEvent::ConversationNotFound {
                        session_id: thread.clone(),
                    }]);
                }
                if e.starts_with(UNREADABLE_ROLLOUT) {
                    // Found on disk but refused by Codex: say why before the fallback's own item.
                    return Read::events(vec![
                        chat(
                            "system",
                            json!({"reason": "rollout_unreadable", "session_id": thread,
                                   "text": format!("Codex could not read the conversation {thread}: {e}")}),
                        ),
                        RuntimeEvent::ConversationNotFound {
                            session_id: thread.clone(),
                        },
                    ]);
                }
            }
            return Read::events(vec![failed_to_open(&format!(
                "Codex could not open the conversation: {e}"
            ))]);
        }
        let Some(thread) = result
            .pointer("/thread/id")
            .and_then(Value::as_str)
            .map(str::to_owned)
        else {
            self.phase = Phase::Failed;
            return Read::events(vec![failed_to_open(&format!(
                "Codex opened a conversation without naming it: {result}"
            ))]);
        };
        self.thread = Some(thread);
        let Some(turn) = self.drop_turn.take() else {
            return self.open_done();
        };
        // The thread's turns, oldest first (0.171.0 answers them unless `excludeTurns`): the
        // attempt is dropped only while it is the last turn. Gone already (a revert whose
        // process died before the message was sent again), nothing is dropped.
        let turns: Option<Vec<&str>> = result
            .pointer("/thread/turns")
            .and_then(Value::as_array)
            .map(|t| {
                t.iter()
                    .filter_map(|t| t.get("id").and_then(Value::as_str))
                    .collect()
            });
        match turns {
            Some(ids) if !ids.contains(&turn.as_str()) => self.open_done(),
            Some(ids) if ids.last() != Some(&turn.as_str()) => {
                let mut read = self.open_done();
                read.events.insert(
                    0,
                    RuntimeEvent::CutRefused {
                        error: format!(
                            "botvisor did not ask Codex to drop it: the conversation went on \
                             after the unanswered attempt (turn {turn} is not its last; another \
                             process continued it), and a revert would drop those turns too."
                        ),
                    },
                );
                read
            }
            _ => {
                let id = self.id();
                self.phase = Phase::Reverting(id);
                let thread = self.thread.clone();
                Read {
                    events: vec![RuntimeEvent::Ignored],
                    replies: vec![CodexProtocol::request(
                        id,
                        "thread/revert",
                        json!({"threadId": thread, "beforeTurnId": turn}),
                    )],
                }
            }
        }
    }

    /// The thread is open: held settings are sent and the conversation is named.
    pub(super) fn open_done(&mut self) -> Read {
        self.phase = Phase::Open;
        let held = std::mem::take(&mut self.held_settings);
        let replies = held
            .into_iter()
            .map(|(id, params)| self.settings_line(id, params))
            .collect();
        Read {
            events: vec![RuntimeEvent::Opened {
                session_id: self.thread.clone().unwrap_or_default(),
            }],
            replies,
        }
    }
}
