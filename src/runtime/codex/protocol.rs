//! `codex app-server`'s JSON-RPC for one process (codex-facts.md, "app-server messages"; checked
//! on 0.171.0 by tests/facts/codex.rs): one JSON object per line, no `"jsonrpc"` field.
//!
//! The handshake: `initialize` (with `experimentalApi`, which `thread/settings/update` needs),
//! then `initialized` and `thread/start` (a new thread, whose id Codex names in the answer) or
//! `thread/resume`; the process is [`Protocol::ready`] once that is answered. A resume that is to
//! drop an unanswered attempt ([`Cut::BeforeTurn`], issue 25) sends `thread/revert` first and is
//! ready once that is answered; a refusal is told ([`RuntimeEvent::CutRefused`]) and the thread
//! stays open whole. A user message is a
//! `turn/start`; `turn/started` is the sign that a turn began (design rule 3); `turn/completed`
//! ends it. Codex's own requests (approvals) carry Codex's ids, counted from 0 per process; ours
//! are counted here. An interrupt or a setting sent before Codex named the turn or the thread is
//! held and written as soon as it did.

use std::collections::{HashMap, HashSet};

use serde_json::{Value, json};

use super::settings::Permissions;
use crate::runtime::protocol::{Protocol, Read, Sent};
use crate::runtime::{
    ChatPayload, ControlRequest, Cut, LaunchSpec, LimitReport, LimitState, PermissionAnswer,
    ResultOutcome, RuntimeEvent, SessionStart,
};

/// The error text of `thread/resume` for a thread without a rollout (design rule 4).
pub const NO_ROLLOUT: &str = "no rollout found for thread id";
/// The error text of `thread/resume` for an id that is not a UUID.
pub const INVALID_SESSION_ID: &str = "invalid session id";
/// The error text of `thread/resume` for a rollout that exists but cannot be read (empty, or its
/// first line is not the thread's metadata): `failed to read thread: … rollout at <path> is
/// empty` (code -32603). The conversation is as lost as without a rollout.
pub const UNREADABLE_ROLLOUT: &str = "failed to read thread";

/// Where the request ids of a reopened process start ([`CodexProtocol::reopened`]).
const REOPENED_ID: u64 = 1_000_000_000;

/// How far the handshake is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
enum Phase {
    /// `initialize` (this id) sent.
    Initializing(u64),
    /// `thread/start` or `thread/resume` (this id) sent.
    Opening(u64),
    /// `thread/revert` (this id) sent, to drop the unanswered attempt.
    Reverting(u64),
    /// The thread is open.
    Open,
    /// The thread could not be opened; nothing more is written.
    Failed,
}

/// The protocol object of one `codex app-server` process.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct CodexProtocol {
    start: SessionStart,
    /// With a resume: the turn whose unanswered attempt is dropped before the thread is ready.
    drop_turn: Option<String>,
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
    /// The plan's primary window as `account/rateLimits/updated` last told it.
    limit: Option<LimitReport>,
    /// A resume continues in a copy of the thread (`thread/fork`; a Restart with `fork`).
    fork: bool,
}

impl CodexProtocol {
    /// For a process launched with `spec`.
    pub fn new(spec: &LaunchSpec<'_>) -> CodexProtocol {
        CodexProtocol {
            start: spec.start.clone(),
            drop_turn: match (spec.start, spec.cut, spec.fork) {
                (SessionStart::Resume(_), Some(Cut::BeforeTurn { turn_id }), false) => {
                    Some(turn_id.clone())
                }
                _ => None,
            },
            fork: spec.fork && matches!(spec.start, SessionStart::Resume(_)),
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
            limit: None,
        }
    }

    /// For a process a previous botvisord started on `spec`'s thread `thread` and was killed
    /// before it handed it over (issue 47): the thread open, the turn it answers (`turn`, as its
    /// rollout names it), Codex's requests still waiting for an answer (`open`: ids as
    /// [`CodexProtocol`] exposes them, `<turn id>/<Codex's id>`), and ids of its own that never
    /// meet that botvisord's (answers to those are stepped over).
    pub fn reopened(
        spec: &LaunchSpec<'_>,
        thread: String,
        turn: Option<String>,
        open: &[String],
    ) -> CodexProtocol {
        let mut p = CodexProtocol::new(spec);
        p.phase = Phase::Open;
        p.thread = Some(thread);
        p.turn = turn;
        p.next_id = REOPENED_ID;
        p.drop_turn = None;
        for exposed in open {
            let Some((_, id)) = exposed.rsplit_once('/') else {
                continue;
            };
            let id = id
                .parse::<u64>()
                .map(Value::from)
                .unwrap_or_else(|_| Value::from(id));
            p.asked.insert(exposed.clone(), id);
        }
        p
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
            SessionStart::Resume(thread) if self.fork => {
                // A new thread with the old one's turns; the old one is left as it is and may be
                // held by another process (issue 25).
                params["threadId"] = json!(thread);
                CodexProtocol::request(id, "thread/fork", params)
            }
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

fn chat(kind: &'static str, payload: Value) -> RuntimeEvent {
    RuntimeEvent::Chat(ChatPayload { kind, payload })
}

/// The handshake failed: no turn can run in this process.
fn failed_to_open(text: &str) -> RuntimeEvent {
    RuntimeEvent::OpenFailed {
        error: text.to_owned(),
    }
}

impl Protocol for CodexProtocol {
    fn save(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or_default()
    }

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
            PermissionAnswer::Allow { grant: Some(d), .. } => d.clone(),
            PermissionAnswer::Allow { grant: None, .. } => json!("accept"),
            PermissionAnswer::Deny { .. } => json!("decline"),
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
        let v: Value = match crate::runtime::json_line::parse(line) {
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

mod notifications;
mod responses;
pub(crate) use notifications::{mcp_tool_result, mcp_tool_use};
#[cfg(test)]
mod tests;
