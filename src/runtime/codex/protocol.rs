//! `codex app-server`'s JSON-RPC for one process (codex-facts.md, "app-server messages"; checked
//! on 0.171.0 by tests/codex_facts.rs): one JSON object per line, no `"jsonrpc"` field.
//!
//! The handshake: `initialize` (with `experimentalApi`, which `thread/settings/update` needs),
//! then `initialized` and `thread/start` (a new thread, whose id Codex names in the answer) or
//! `thread/resume`; the process is [`Protocol::ready`] once that is answered. A user message is a
//! `turn/start`; `turn/started` is the sign that a turn began (design rule 3); `turn/completed`
//! ends it. Codex's own requests (approvals) carry Codex's ids, counted from 0 per process; ours
//! are counted here. An interrupt or a setting sent before Codex named the turn or the thread is
//! held and written as soon as it did.

use std::collections::{HashMap, HashSet};

use serde_json::{Value, json};

use super::settings::Permissions;
use crate::runtime::protocol::{Protocol, Read, Sent};
use crate::runtime::{
    ChatPayload, ControlRequest, LaunchSpec, PermissionAnswer, ResultOutcome, RuntimeEvent,
    SessionStart,
};

/// The error text of `thread/resume` for a thread without a rollout (design rule 4).
pub const NO_ROLLOUT: &str = "no rollout found for thread id";
/// The error text of `thread/resume` for an id that is not a UUID.
pub const INVALID_SESSION_ID: &str = "invalid session id";
/// The error text of `thread/resume` for a rollout that exists but cannot be read (empty, or its
/// first line is not the thread's metadata): `failed to read thread: … rollout at <path> is
/// empty` (code -32603). The conversation is as lost as without a rollout.
pub const UNREADABLE_ROLLOUT: &str = "failed to read thread";

/// How far the handshake is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// `initialize` (this id) sent.
    Initializing(u64),
    /// `thread/start` or `thread/resume` (this id) sent.
    Opening(u64),
    /// The thread is open.
    Open,
    /// The thread could not be opened; nothing more is written.
    Failed,
}

/// The protocol object of one `codex app-server` process.
#[derive(Debug, Clone)]
pub struct CodexProtocol {
    start: SessionStart,
    cwd: String,
    model: String,
    /// `config.toml`'s model, what an empty model means.
    default_model: Option<String>,
    permission_mode: String,
    next_id: u64,
    phase: Phase,
    thread: Option<String>,
    turn: Option<String>,
    /// `turn/start` requests not answered yet.
    turn_starts: HashSet<u64>,
    /// Control requests sent and not answered, by JSON-RPC id.
    controls: HashSet<u64>,
    /// Settings asked for before the thread was open: `(id, params without threadId)`.
    held_settings: Vec<(u64, Value)>,
    /// An interrupt asked for before Codex named the turn.
    held_interrupt: Option<u64>,
    /// Codex's requests waiting for our answer: the id the supervisor knows → Codex's id.
    asked: HashMap<String, Value>,
    /// The text of the last user message written (for the replay event).
    last_text: String,
    /// Retries of the model request in the current turn.
    retries: u64,
}

impl CodexProtocol {
    /// For a process launched with `spec`.
    pub fn new(spec: &LaunchSpec<'_>) -> CodexProtocol {
        CodexProtocol {
            start: spec.start.clone(),
            cwd: spec.cwd.to_string_lossy().into_owned(),
            model: spec.model.to_owned(),
            default_model: None,
            permission_mode: spec.permission_mode.to_owned(),
            next_id: 0,
            phase: Phase::Initializing(0),
            thread: None,
            turn: None,
            turn_starts: HashSet::new(),
            controls: HashSet::new(),
            held_settings: Vec::new(),
            held_interrupt: None,
            asked: HashMap::new(),
            last_text: String::new(),
            retries: 0,
        }
    }

    /// `model` from `config.toml`: what an empty model means (at the open, and live).
    pub fn with_default_model(mut self, model: Option<String>) -> CodexProtocol {
        self.default_model = model.filter(|m| !m.is_empty());
        self
    }

    /// The model to name: the bot's, else `config.toml`'s; empty when neither names one.
    fn model_for(&self, model: &str) -> Option<String> {
        if model.is_empty() {
            self.default_model.clone()
        } else {
            Some(model.to_owned())
        }
    }

    fn id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    fn request(id: u64, method: &str, params: Value) -> String {
        json!({"method": method, "id": id, "params": params}).to_string()
    }

    /// `thread/start` or `thread/resume` with the launch's settings.
    fn open_request(&mut self, id: u64) -> String {
        let mut params = json!({ "cwd": self.cwd });
        if let Some(model) = self.model_for(&self.model) {
            params["model"] = json!(model);
        }
        if let Some(p) = Permissions::parse(&self.permission_mode) {
            if let Some(policy) = p.approval_policy {
                params["approvalPolicy"] = json!(policy);
            }
            if let Some(sandbox) = p.sandbox {
                params["sandbox"] = json!(sandbox);
            }
        }
        match &self.start {
            SessionStart::Resume(thread) => {
                params["threadId"] = json!(thread);
                CodexProtocol::request(id, "thread/resume", params)
            }
            SessionStart::New(_) | SessionStart::Fresh => {
                CodexProtocol::request(id, "thread/start", params)
            }
        }
    }

    fn settings_line(&self, id: u64, mut params: Value) -> String {
        params["threadId"] = json!(self.thread);
        CodexProtocol::request(id, "thread/settings/update", params)
    }

    fn interrupt_line(&self, id: u64) -> Option<String> {
        let (thread, turn) = (self.thread.as_ref()?, self.turn.as_ref()?);
        Some(CodexProtocol::request(
            id,
            "turn/interrupt",
            json!({"threadId": thread, "turnId": turn}),
        ))
    }

    /// The held interrupt, once the turn is known.
    fn release_interrupt(&mut self) -> Vec<String> {
        match self.held_interrupt {
            Some(id) => match self.interrupt_line(id) {
                Some(line) => {
                    self.held_interrupt = None;
                    vec![line]
                }
                None => Vec::new(),
            },
            None => Vec::new(),
        }
    }

    fn on_response(&mut self, id: u64, v: &Value) -> Read {
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

    fn on_opened(&mut self, result: Value, error: Option<String>) -> Read {
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
        self.phase = Phase::Open;
        self.thread = Some(thread.clone());
        let held = std::mem::take(&mut self.held_settings);
        let replies = held
            .into_iter()
            .map(|(id, params)| self.settings_line(id, params))
            .collect();
        Read {
            events: vec![RuntimeEvent::Opened { session_id: thread }],
            replies,
        }
    }

    fn on_notification(&mut self, method: &str, params: &Value) -> Read {
        let item = params.get("item").unwrap_or(&Value::Null);
        let item_type = item.get("type").and_then(Value::as_str).unwrap_or_default();
        let event = match method {
            "turn/started" => {
                if let Some(t) = params.pointer("/turn/id").and_then(Value::as_str) {
                    self.turn = Some(t.to_owned());
                }
                self.retries = 0;
                return Read {
                    events: vec![RuntimeEvent::UserReplay {
                        session_id: self.thread.clone(),
                        text: self.last_text.clone(),
                    }],
                    replies: self.release_interrupt(),
                };
            }
            "item/agentMessage/delta" => match params.get("delta").and_then(Value::as_str) {
                Some(d) => RuntimeEvent::TextDelta(d.to_owned()),
                None => RuntimeEvent::Ignored,
            },
            "item/started" => match item_type {
                "agentMessage" => RuntimeEvent::MessageStart,
                "commandExecution" => chat(
                    "tool_use",
                    json!({"id": item.get("id"), "name": "commandExecution",
                           "input": {"command": item.get("command"), "cwd": item.get("cwd")}}),
                ),
                "fileChange" => chat(
                    "tool_use",
                    json!({"id": item.get("id"), "name": "fileChange",
                           "input": {"changes": item.get("changes")}}),
                ),
                _ => RuntimeEvent::Ignored,
            },
            "item/completed" => match item_type {
                "agentMessage" => chat(
                    "assistant",
                    json!({"text": item.get("text").and_then(Value::as_str).unwrap_or_default()}),
                ),
                "commandExecution" | "fileChange" => {
                    let status = item.get("status").and_then(Value::as_str);
                    let failed = status != Some("completed")
                        || item
                            .get("exitCode")
                            .and_then(Value::as_i64)
                            .is_some_and(|c| c != 0);
                    let content = match item_type {
                        "commandExecution" => item.get("aggregatedOutput").cloned(),
                        _ => item.get("changes").cloned(),
                    };
                    chat(
                        "tool_result",
                        json!({"tool_use_id": item.get("id"), "content": content,
                               "is_error": failed, "status": status,
                               "exit_code": item.get("exitCode")}),
                    )
                }
                _ => RuntimeEvent::Ignored,
            },
            "turn/completed" => {
                let turn = params.get("turn").unwrap_or(&Value::Null);
                let status = turn
                    .get("status")
                    .and_then(Value::as_str)
                    .unwrap_or("unknown");
                let message = turn
                    .pointer("/error/message")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                let (outcome, error) = match status {
                    "completed" => (ResultOutcome::Success, None),
                    "interrupted" => (
                        ResultOutcome::Error,
                        Some("The turn was interrupted.".to_owned()),
                    ),
                    _ => (
                        ResultOutcome::Error,
                        Some(
                            message
                                .clone()
                                .unwrap_or_else(|| format!("The turn {status}.")),
                        ),
                    ),
                };
                self.turn = None;
                self.held_interrupt = None;
                self.retries = 0;
                RuntimeEvent::TurnResult {
                    outcome,
                    session_id: self.thread.clone(),
                    payload: json!({
                        "subtype": status, "turn_id": turn.get("id"),
                        "is_error": outcome == ResultOutcome::Error, "error": message,
                        "duration_ms": turn.get("durationMs"),
                    }),
                    error,
                }
            }
            "error" => {
                let message = params
                    .pointer("/error/message")
                    .and_then(Value::as_str)
                    .unwrap_or("an error")
                    .to_owned();
                let info = params.pointer("/error/codexErrorInfo");
                let (word, status) = match info {
                    Some(Value::String(s)) => (s.clone(), None),
                    Some(Value::Object(o)) => match o.iter().next() {
                        Some((k, v)) => {
                            (k.clone(), v.get("httpStatusCode").and_then(Value::as_u64))
                        }
                        None => (String::new(), None),
                    },
                    _ => (String::new(), None),
                };
                if params.get("willRetry").and_then(Value::as_bool) == Some(true) {
                    self.retries += 1;
                    // `Reconnecting... N/M`: a stream that broke or stayed idle past the
                    // provider's `stream_idle_timeout_ms`, retried up to `stream_max_retries`
                    // times. Without a count (nothing listening) Codex retries without limit.
                    let (attempt, max_retries) =
                        reconnect_count(&message).unwrap_or((self.retries, 0));
                    let details = params
                        .pointer("/error/additionalDetails")
                        .and_then(Value::as_str)
                        .filter(|d| !d.is_empty())
                        .map(|d| format!(" ({d})"))
                        .unwrap_or_default();
                    RuntimeEvent::ApiRetry {
                        error: if word.is_empty() {
                            format!("{message}{details}")
                        } else {
                            format!("{word}: {message}{details}")
                        },
                        status,
                        attempt,
                        max_retries,
                        delay_ms: None,
                    }
                } else {
                    chat(
                        "error",
                        json!({"text": message, "codex_error_info": info,
                               "details": params.pointer("/error/additionalDetails")}),
                    )
                }
            }
            _ => RuntimeEvent::Ignored,
        };
        Read::events(vec![event])
    }

    fn on_request(&mut self, id: Value, method: &str, params: &Value) -> Read {
        let exposed = format!(
            "{}/{}",
            params
                .get("turnId")
                .and_then(Value::as_str)
                .or(self.turn.as_deref())
                .unwrap_or("codex"),
            id
        );
        self.asked.insert(exposed.clone(), id);
        let event = match method {
            "item/commandExecution/requestApproval" => RuntimeEvent::PermissionRequest {
                request_id: exposed,
                tool: "commandExecution".to_owned(),
                input: json!({"command": params.get("command"), "cwd": params.get("cwd"),
                              "reason": params.get("reason")}),
                request: json!({"tool_use_id": params.get("itemId"), "codex": params}),
            },
            "item/fileChange/requestApproval" => RuntimeEvent::PermissionRequest {
                request_id: exposed,
                tool: "fileChange".to_owned(),
                input: json!({"reason": params.get("reason"), "grant_root": params.get("grantRoot")}),
                request: json!({"tool_use_id": params.get("itemId"), "codex": params}),
            },
            _ => RuntimeEvent::ControlRequest {
                request_id: exposed,
                subtype: method.to_owned(),
                request: params.clone(),
            },
        };
        Read::events(vec![event])
    }
}

/// `(N, M)` of a retry message `Reconnecting... N/M`.
fn reconnect_count(message: &str) -> Option<(u64, u64)> {
    let rest = message.strip_prefix("Reconnecting...")?.trim();
    let (n, m) = rest.split_once('/')?;
    let m: String = m.chars().take_while(char::is_ascii_digit).collect();
    Some((n.trim().parse().ok()?, m.parse().ok()?))
}

fn chat(kind: &'static str, payload: Value) -> RuntimeEvent {
    RuntimeEvent::Chat(ChatPayload { kind, payload })
}

/// The handshake failed: no turn can run in this process. Reported as a failed result, so that
/// `LastError` says why.
fn failed_to_open(text: &str) -> RuntimeEvent {
    RuntimeEvent::TurnResult {
        outcome: ResultOutcome::Error,
        session_id: None,
        payload: json!({"subtype": "open_failed", "is_error": true, "error": text}),
        error: Some(text.to_owned()),
    }
}

impl Protocol for CodexProtocol {
    fn opening(&mut self) -> Vec<String> {
        let id = self.id();
        self.phase = Phase::Initializing(id);
        vec![CodexProtocol::request(
            id,
            "initialize",
            json!({"clientInfo": {"name": "botvisor", "version": env!("CARGO_PKG_VERSION")},
                   "capabilities": {"experimentalApi": true}}),
        )]
    }

    fn ready(&self) -> bool {
        self.phase == Phase::Open && self.thread.is_some()
    }

    fn conversation(&self) -> Option<&str> {
        self.thread.as_deref()
    }

    fn user_message(&mut self, text: &str) -> Vec<String> {
        let Some(thread) = self.thread.clone().filter(|_| self.phase == Phase::Open) else {
            return Vec::new();
        };
        let id = self.id();
        self.turn_starts.insert(id);
        self.last_text = text.to_owned();
        vec![CodexProtocol::request(
            id,
            "turn/start",
            json!({"threadId": thread, "input": [{"type": "text", "text": text}]}),
        )]
    }

    fn control(&mut self, request: &ControlRequest) -> Option<Sent> {
        if self.phase == Phase::Failed {
            return None;
        }
        let params = match request {
            ControlRequest::Initialize => return None,
            ControlRequest::SetModel(model) => json!({ "model": self.model_for(model)? }),
            ControlRequest::SetPermissionMode(mode) => {
                let p = Permissions::parse(mode)?;
                let policy = p.approval_policy?;
                let mut params = json!({ "approvalPolicy": policy });
                if let Some(sandbox) = p.sandbox_policy() {
                    params["sandboxPolicy"] = sandbox;
                }
                params
            }
            ControlRequest::Interrupt => {
                let id = self.id();
                self.controls.insert(id);
                let lines = match self.interrupt_line(id) {
                    Some(line) => vec![line],
                    None => {
                        self.held_interrupt = Some(id);
                        Vec::new()
                    }
                };
                return Some(Sent {
                    request_id: id.to_string(),
                    lines,
                });
            }
        };
        let id = self.id();
        self.controls.insert(id);
        let lines = if self.ready() {
            vec![self.settings_line(id, params)]
        } else {
            self.held_settings.push((id, params));
            Vec::new()
        };
        Some(Sent {
            request_id: id.to_string(),
            lines,
        })
    }

    fn answer_permission(&mut self, request_id: &str, answer: &PermissionAnswer) -> Vec<String> {
        let Some(id) = self.asked.remove(request_id) else {
            return Vec::new();
        };
        let decision = match answer {
            PermissionAnswer::Allow { .. } => "accept",
            PermissionAnswer::Deny { .. } => "decline",
        };
        vec![json!({"id": id, "result": {"decision": decision}}).to_string()]
    }

    fn refuse(&mut self, request_id: &str, message: &str) -> Vec<String> {
        let Some(id) = self.asked.remove(request_id) else {
            return Vec::new();
        };
        vec![json!({"id": id, "error": {"code": -32601, "message": message}}).to_string()]
    }

    fn read_line(&mut self, line: &[u8]) -> Read {
        let text = String::from_utf8_lossy(line);
        if text.trim().is_empty() {
            return Read::events(vec![RuntimeEvent::Ignored]);
        }
        let v: Value = match serde_json::from_str(&text) {
            Ok(v @ Value::Object(_)) => v,
            Ok(_) => return unparsed(&text, "not a JSON object"),
            Err(e) => return unparsed(&text, &format!("not JSON: {e}")),
        };
        let method = v.get("method").and_then(Value::as_str);
        let params = v.get("params").unwrap_or(&Value::Null);
        match (method, v.get("id")) {
            (Some(m), Some(id)) => self.on_request(id.clone(), m, params),
            (Some(m), None) => self.on_notification(m, params),
            (None, Some(id)) => match id.as_u64() {
                Some(id) => self.on_response(id, &v),
                None => Read::events(vec![RuntimeEvent::Ignored]),
            },
            (None, None) => unparsed(&text, "neither a request, a notification nor an answer"),
        }
    }
}

/// The most of a line that is not the protocol kept in its `error` chat item, in bytes.
pub const MAX_UNPARSED_KEPT: usize = 2000;

fn unparsed(line: &str, reason: &str) -> Read {
    let mut end = line.len().min(MAX_UNPARSED_KEPT);
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    Read::events(vec![RuntimeEvent::Unparsed {
        line: line[..end].to_owned(),
        reason: reason.to_owned(),
    }])
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::path::Path;

    fn open(start: SessionStart, mode: &str) -> (CodexProtocol, Vec<String>) {
        let env = BTreeMap::new();
        let spec = LaunchSpec {
            cwd: Path::new("/w"),
            model: "m1",
            permission_mode: mode,
            env: &env,
            start: &start,
        };
        let mut p = CodexProtocol::new(&spec);
        let mut lines = p.opening();
        let read = p.read_line(br#"{"id":0,"result":{"codexHome":"/c"}}"#);
        assert!(read.events[0].is_sign_of_life());
        lines.extend(read.replies);
        (p, lines)
    }

    fn parse(line: &str) -> Value {
        serde_json::from_str(line).unwrap()
    }

    /// A protocol with the thread `T` open.
    fn opened() -> CodexProtocol {
        let (mut p, _) = open(SessionStart::Fresh, "");
        let read = p.read_line(br#"{"id":1,"result":{"thread":{"id":"T"}}}"#);
        assert_eq!(
            read.events,
            vec![RuntimeEvent::Opened {
                session_id: "T".into()
            }]
        );
        p
    }

    #[test]
    fn handshake_then_thread_start_with_the_settings() {
        let (p, lines) = open(SessionStart::Fresh, "on-request:workspace-write");
        assert!(!p.ready());
        assert_eq!(p.conversation(), None);
        let init = parse(&lines[0]);
        assert_eq!(init["method"], "initialize");
        assert_eq!(init["params"]["capabilities"]["experimentalApi"], true);
        assert_eq!(parse(&lines[1]), json!({"method": "initialized"}));
        let start = parse(&lines[2]);
        assert_eq!(start["method"], "thread/start");
        assert_eq!(
            start["params"],
            json!({"cwd": "/w", "model": "m1", "approvalPolicy": "on-request", "sandbox": "workspace-write"})
        );
        let p = opened();
        assert!(p.ready());
        assert_eq!(p.conversation(), Some("T"));
    }

    #[test]
    fn resume_names_the_thread_and_a_missing_rollout_is_a_lost_conversation() {
        let (mut p, lines) = open(SessionStart::Resume("old".into()), "");
        let resume = parse(&lines[2]);
        assert_eq!(resume["method"], "thread/resume");
        assert_eq!(resume["params"]["threadId"], "old");
        assert!(resume["params"].get("approvalPolicy").is_none());
        let read = p.read_line(
            br#"{"error":{"code":-32600,"message":"no rollout found for thread id old"},"id":1}"#,
        );
        assert_eq!(
            read.events,
            vec![RuntimeEvent::ConversationNotFound {
                session_id: "old".into()
            }]
        );
        assert!(!p.ready());
    }

    #[test]
    fn an_unreadable_rollout_is_a_lost_conversation_that_says_why() {
        let (mut p, _) = open(SessionStart::Resume("old".into()), "");
        let read = p.read_line(
            br#"{"error":{"code":-32603,"message":"failed to read thread: thread-store internal error: failed to read session metadata /h/r.jsonl: rollout at /h/r.jsonl is empty"},"id":1}"#,
        );
        assert!(
            matches!(
                &read.events[..],
                [RuntimeEvent::Chat(ChatPayload { kind: "system", payload }), RuntimeEvent::ConversationNotFound { session_id }]
                    if payload["reason"] == "rollout_unreadable"
                        && payload["text"].as_str().unwrap().contains("is empty")
                        && session_id == "old"
            ),
            "{:?}",
            read.events
        );
    }

    #[test]
    fn another_open_failure_is_a_failed_result_not_a_lost_conversation() {
        let (mut p, _) = open(SessionStart::Fresh, "");
        let read = p.read_line(br#"{"error":{"code":-32600,"message":"bad cwd"},"id":1}"#);
        assert!(matches!(
            &read.events[..],
            [RuntimeEvent::TurnResult { outcome: ResultOutcome::Error, error: Some(e), .. }] if e.contains("bad cwd")
        ));
        assert!(!p.ready());
        assert!(p.control(&ControlRequest::SetModel("x".into())).is_none());
    }

    #[test]
    fn a_turn_begins_at_turn_started_and_ends_at_turn_completed() {
        let mut p = opened();
        let lines = p.user_message("hi");
        let start = parse(&lines[0]);
        assert_eq!(start["method"], "turn/start");
        assert_eq!(
            start["params"],
            json!({"threadId": "T", "input": [{"type": "text", "text": "hi"}]})
        );
        let id = start["id"].as_u64().unwrap();
        let read =
            p.read_line(format!(r#"{{"id":{id},"result":{{"turn":{{"id":"U"}}}}}}"#).as_bytes());
        assert_eq!(read.events, vec![RuntimeEvent::Ignored]);
        let read = p
            .read_line(br#"{"method":"turn/started","params":{"threadId":"T","turn":{"id":"U"}}}"#);
        assert_eq!(
            read.events,
            vec![RuntimeEvent::UserReplay {
                session_id: Some("T".into()),
                text: "hi".into()
            }]
        );
        let read = p.read_line(
            br#"{"method":"item/started","params":{"item":{"type":"agentMessage","id":"m"}}}"#,
        );
        assert_eq!(read.events, vec![RuntimeEvent::MessageStart]);
        let read = p.read_line(
            br#"{"method":"item/agentMessage/delta","params":{"delta":"Hel","itemId":"m"}}"#,
        );
        assert_eq!(read.events, vec![RuntimeEvent::TextDelta("Hel".into())]);
        let read = p.read_line(
            br#"{"method":"item/completed","params":{"item":{"type":"agentMessage","id":"m","text":"Hello"}}}"#,
        );
        assert_eq!(
            read.events,
            vec![chat("assistant", json!({"text": "Hello"}))]
        );
        let read = p.read_line(
            br#"{"method":"turn/completed","params":{"threadId":"T","turn":{"id":"U","status":"completed","error":null}}}"#,
        );
        assert!(matches!(
            &read.events[..],
            [RuntimeEvent::TurnResult { outcome: ResultOutcome::Success, error: None, session_id: Some(s), payload }]
                if s == "T" && payload["subtype"] == "completed"
        ));
    }

    #[test]
    fn failed_and_interrupted_turns_are_errors_with_a_text() {
        let mut p = opened();
        let read = p.read_line(
            br#"{"method":"turn/completed","params":{"turn":{"id":"U","status":"failed","error":{"message":"boom"}}}}"#,
        );
        assert!(matches!(
            &read.events[..],
            [RuntimeEvent::TurnResult { outcome: ResultOutcome::Error, error: Some(e), .. }] if e == "boom"
        ));
        let read = p.read_line(
            br#"{"method":"turn/completed","params":{"turn":{"id":"U","status":"interrupted","error":null}}}"#,
        );
        assert!(matches!(
            &read.events[..],
            [RuntimeEvent::TurnResult { outcome: ResultOutcome::Error, payload, .. }] if payload["subtype"] == "interrupted"
        ));
    }

    #[test]
    fn a_refused_message_fails_its_turn() {
        let mut p = opened();
        let lines = p.user_message("hi");
        let id = parse(&lines[0])["id"].as_u64().unwrap();
        let read = p.read_line(
            format!(r#"{{"id":{id},"error":{{"code":-32600,"message":"thread not found: T"}}}}"#)
                .as_bytes(),
        );
        assert!(matches!(
            &read.events[..],
            [RuntimeEvent::TurnResult { outcome: ResultOutcome::Error, error: Some(e), .. }] if e.contains("thread not found")
        ));
    }

    #[test]
    fn commands_are_tool_use_and_tool_result() {
        let mut p = opened();
        let read = p.read_line(
            br#"{"method":"item/started","params":{"item":{"type":"commandExecution","id":"c1","command":"ls","cwd":"/w"}}}"#,
        );
        assert_eq!(
            read.events,
            vec![chat(
                "tool_use",
                json!({"id": "c1", "name": "commandExecution", "input": {"command": "ls", "cwd": "/w"}})
            )]
        );
        let read = p.read_line(
            br#"{"method":"item/completed","params":{"item":{"type":"commandExecution","id":"c1","status":"declined","exitCode":null}}}"#,
        );
        assert!(matches!(
            &read.events[..],
            [RuntimeEvent::Chat(ChatPayload { kind: "tool_result", payload })]
                if payload["tool_use_id"] == "c1" && payload["is_error"] == true && payload["status"] == "declined"
        ));
    }

    #[test]
    fn approvals_are_permission_requests_answered_accept_or_decline() {
        let mut p = opened();
        let read = p.read_line(
            br#"{"method":"item/commandExecution/requestApproval","id":0,"params":{"threadId":"T","turnId":"U","itemId":"c1","command":"rm x","cwd":"/w","reason":"why"}}"#,
        );
        let [
            RuntimeEvent::PermissionRequest {
                request_id,
                tool,
                input,
                ..
            },
        ] = &read.events[..]
        else {
            panic!("{:?}", read.events)
        };
        assert_eq!(tool, "commandExecution");
        assert_eq!(input["command"], "rm x");
        let lines = p.answer_permission(
            request_id,
            &PermissionAnswer::Allow {
                updated_input: json!({}),
            },
        );
        assert_eq!(
            parse(&lines[0]),
            json!({"id": 0, "result": {"decision": "accept"}})
        );
        assert!(
            p.answer_permission(
                request_id,
                &PermissionAnswer::Deny {
                    message: "no".into()
                }
            )
            .is_empty(),
            "answered once"
        );
        // Codex counts its requests from 0 in every process: the id a client sees differs.
        let read = p.read_line(
            br#"{"method":"item/fileChange/requestApproval","id":1,"params":{"turnId":"U2","itemId":"f1"}}"#,
        );
        let [RuntimeEvent::PermissionRequest { request_id: r2, .. }] = &read.events[..] else {
            panic!()
        };
        assert_ne!(r2, request_id);
        let lines = p.answer_permission(
            r2,
            &PermissionAnswer::Deny {
                message: "no".into(),
            },
        );
        assert_eq!(
            parse(&lines[0]),
            json!({"id": 1, "result": {"decision": "decline"}})
        );
    }

    #[test]
    fn requests_botvisor_does_not_serve_are_refused() {
        let mut p = opened();
        let read = p.read_line(
            br#"{"method":"item/tool/requestUserInput","id":"x","params":{"turnId":"U"}}"#,
        );
        let [
            RuntimeEvent::ControlRequest {
                request_id,
                subtype,
                ..
            },
        ] = &read.events[..]
        else {
            panic!()
        };
        assert_eq!(subtype, "item/tool/requestUserInput");
        let lines = p.refuse(request_id, "not served");
        let v = parse(&lines[0]);
        assert_eq!(v["id"], "x");
        assert_eq!(v["error"]["message"], "not served");
    }

    #[test]
    fn an_interrupt_waits_for_the_turn_id() {
        let mut p = opened();
        let lines = p.user_message("hi");
        let sent = p.control(&ControlRequest::Interrupt).unwrap();
        assert!(sent.lines.is_empty(), "no turn id yet");
        let read = p
            .read_line(br#"{"method":"turn/started","params":{"threadId":"T","turn":{"id":"U"}}}"#);
        let interrupt = parse(&read.replies[0]);
        assert_eq!(interrupt["method"], "turn/interrupt");
        assert_eq!(interrupt["params"], json!({"threadId": "T", "turnId": "U"}));
        assert_eq!(interrupt["id"].to_string(), sent.request_id);
        // Not sent twice when the turn/start answer comes after.
        let id = parse(&lines[0])["id"].as_u64().unwrap();
        let read =
            p.read_line(format!(r#"{{"id":{id},"result":{{"turn":{{"id":"U"}}}}}}"#).as_bytes());
        assert!(read.replies.is_empty());
        let read = p.read_line(format!(r#"{{"id":{},"result":{{}}}}"#, sent.request_id).as_bytes());
        assert!(matches!(
            &read.events[..],
            [RuntimeEvent::ControlResponse { request_id, result: Ok(_) }] if *request_id == sent.request_id
        ));
        // With the turn known, at once.
        let sent = p.control(&ControlRequest::Interrupt).unwrap();
        assert_eq!(parse(&sent.lines[0])["method"], "turn/interrupt");
    }

    #[test]
    fn an_empty_model_means_config_tomls_at_the_resume_and_live() {
        let env = BTreeMap::new();
        let start = SessionStart::Resume("T".into());
        let spec = LaunchSpec {
            cwd: Path::new("/w"),
            model: "",
            permission_mode: "",
            env: &env,
            start: &start,
        };
        // A resumed thread keeps the model it last ran with: config.toml's is named.
        let mut p = CodexProtocol::new(&spec).with_default_model(Some("cfg".into()));
        p.opening();
        let read = p.read_line(br#"{"id":0,"result":{"codexHome":"/c"}}"#);
        let resume = parse(&read.replies[1]);
        assert_eq!(resume["method"], "thread/resume");
        assert_eq!(resume["params"]["model"], "cfg");
        p.read_line(br#"{"id":1,"result":{"thread":{"id":"T"}}}"#);
        let sent = p.control(&ControlRequest::SetModel(String::new())).unwrap();
        assert_eq!(parse(&sent.lines[0])["params"]["model"], "cfg");
        // Without one in config.toml, nothing can name the default: not sent.
        let mut p = CodexProtocol::new(&spec);
        p.opening();
        let read = p.read_line(br#"{"id":0,"result":{"codexHome":"/c"}}"#);
        assert!(parse(&read.replies[1])["params"].get("model").is_none());
        p.read_line(br#"{"id":1,"result":{"thread":{"id":"T"}}}"#);
        assert!(
            p.control(&ControlRequest::SetModel(String::new()))
                .is_none()
        );
    }

    #[test]
    fn settings_are_thread_settings_updates_held_until_the_thread_is_open() {
        let (mut p, _) = open(SessionStart::Fresh, "");
        let sent = p.control(&ControlRequest::SetModel("m2".into())).unwrap();
        assert!(sent.lines.is_empty());
        let read = p.read_line(br#"{"id":1,"result":{"thread":{"id":"T"}}}"#);
        let update = parse(&read.replies[0]);
        assert_eq!(update["method"], "thread/settings/update");
        assert_eq!(update["params"], json!({"model": "m2", "threadId": "T"}));
        assert_eq!(update["id"].to_string(), sent.request_id);
        let sent = p
            .control(&ControlRequest::SetPermissionMode("never:read-only".into()))
            .unwrap();
        assert_eq!(
            parse(&sent.lines[0])["params"],
            json!({"approvalPolicy": "never", "sandboxPolicy": {"type": "readOnly"}, "threadId": "T"})
        );
        let read = p.read_line(
            format!(
                r#"{{"id":{},"error":{{"code":-32600,"message":"nope"}}}}"#,
                sent.request_id
            )
            .as_bytes(),
        );
        assert!(matches!(
            &read.events[..],
            [RuntimeEvent::ControlResponse { result: Err(e), .. }] if e == "nope"
        ));
        assert!(
            p.control(&ControlRequest::SetPermissionMode("".into()))
                .is_none(),
            "the CLI's default cannot be set live"
        );
    }

    #[test]
    fn a_stream_retry_names_its_count_and_why() {
        let mut p = opened();
        let read = p.read_line(
            br#"{"method":"error","params":{"error":{"message":"Reconnecting... 2/5","codexErrorInfo":{"responseStreamDisconnected":{"httpStatusCode":null}},"additionalDetails":"stream disconnected before completion: idle timeout waiting for SSE"},"willRetry":true}}"#,
        );
        assert!(
            matches!(
                &read.events[..],
                [RuntimeEvent::ApiRetry { attempt: 2, max_retries: 5, status: None, error, .. }]
                    if error.contains("idle timeout waiting for SSE")
            ),
            "{:?}",
            read.events
        );
        assert_eq!(reconnect_count("Reconnecting... waiting for network"), None);
    }

    #[test]
    fn errors_that_will_be_retried_are_api_retries() {
        let mut p = opened();
        let line = br#"{"method":"error","params":{"error":{"message":"Reconnecting... waiting for network","codexErrorInfo":{"responseStreamDisconnected":{"httpStatusCode":null}}},"willRetry":true}}"#;
        let read = p.read_line(line);
        assert!(matches!(
            &read.events[..],
            [RuntimeEvent::ApiRetry { attempt: 1, status: None, error, .. }] if error.starts_with("responseStreamDisconnected")
        ));
        let read = p.read_line(line);
        assert!(matches!(
            &read.events[..],
            [RuntimeEvent::ApiRetry { attempt: 2, .. }]
        ));
        let read = p.read_line(
            br#"{"method":"error","params":{"error":{"message":"high demand","codexErrorInfo":"internalServerError"},"willRetry":false}}"#,
        );
        assert!(matches!(
            &read.events[..],
            [RuntimeEvent::Chat(ChatPayload { kind: "error", payload })] if payload["text"] == "high demand"
        ));
    }

    #[test]
    fn lines_that_are_not_the_protocol_are_unparsed() {
        let mut p = opened();
        assert!(matches!(
            &p.read_line(b"hello").events[..],
            [RuntimeEvent::Unparsed { .. }]
        ));
        assert!(matches!(
            &p.read_line(b"[1]").events[..],
            [RuntimeEvent::Unparsed { .. }]
        ));
        assert_eq!(
            p.read_line(br#"{"method":"thread/tokenUsage/updated","params":{}}"#)
                .events,
            vec![RuntimeEvent::Ignored]
        );
    }
}
