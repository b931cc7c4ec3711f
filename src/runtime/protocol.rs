//! The runtime boundary for one running process: a [`Protocol`] object, opened at launch, that
//! turns the supervisor's requests into stdin lines and stdout lines into [`RuntimeEvent`]s.
//!
//! It keeps the correlation state a CLI's protocol needs (request ids in both directions, the
//! conversation and turn the CLI named), so the supervisor never parses or builds a line, and a
//! CLI that needs a handshake before the first message (Codex's `app-server`: `initialize`,
//! `initialized`, then `thread/start` or `thread/resume`) fits the same supervisor as one that
//! takes messages at once (Claude Code's stream-json). A protocol object does no I/O: the
//! supervisor writes what it returns and feeds it what the process prints.

use super::{ControlRequest, PermissionAnswer, RuntimeEvent};

/// What reading one stdout line gave.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Read {
    /// What the CLI said, in runtime-neutral terms, in order.
    pub events: Vec<RuntimeEvent>,
    /// Lines (without the newline) to write to the CLI's stdin at once, before anything else
    /// (the next step of a handshake, a deferred interrupt).
    pub replies: Vec<String>,
}

impl Read {
    /// Events and no reply.
    pub fn events(events: Vec<RuntimeEvent>) -> Read {
        Read {
            events,
            replies: Vec::new(),
        }
    }
}

/// A control request sent: the id its answer will carry ([`RuntimeEvent::ControlResponse`]) and
/// the lines to write (none when the protocol waits for a moment to send it, such as an interrupt
/// before the CLI named the turn).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sent {
    /// The request's id as the supervisor knows it.
    pub request_id: String,
    /// Lines (without the newline) to write now.
    pub lines: Vec<String>,
}

/// One running CLI process's protocol (see the module's documentation).
pub trait Protocol: Send {
    /// The lines to write right after launch (Claude Code: the `initialize` control request).
    fn opening(&mut self) -> Vec<String>;
    /// Whether a user message may be written now: the handshake, if any, is done and the
    /// conversation is open.
    fn ready(&self) -> bool;
    /// The conversation this process holds, once known: the id botvisor launched it with, or the
    /// one the CLI assigned (Codex's `thread/start` answer).
    fn conversation(&self) -> Option<&str>;
    /// The lines that send a user message (a new turn).
    fn user_message(&mut self, text: &str) -> Vec<String>;
    /// A control request; `None` when this runtime cannot carry it.
    fn control(&mut self, request: &ControlRequest) -> Option<Sent>;
    /// The lines that answer the CLI's permission request `request_id` (an id from
    /// [`RuntimeEvent::PermissionRequest`]).
    fn answer_permission(&mut self, request_id: &str, answer: &PermissionAnswer) -> Vec<String>;
    /// The lines that refuse a request of the CLI botvisor does not serve (an id from
    /// [`RuntimeEvent::ControlRequest`]).
    fn refuse(&mut self, request_id: &str, message: &str) -> Vec<String>;
    /// Reads one stdout line (without the newline).
    fn read_line(&mut self, line: &[u8]) -> Read;
    /// Its whole state (request ids both ways, the conversation and turn, a handshake's step),
    /// for the next botvisord to read on with the same process (issue 47,
    /// [`super::Runtime::restore`]).
    fn save(&self) -> serde_json::Value;
}
