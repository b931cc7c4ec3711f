//! Claude Code's stream-json protocol for one process (claude-code-facts.md, "The stream-json
//! protocol" and "The control protocol"): no handshake is needed before a message, so the
//! process is ready at once; the conversation is the id it was launched with; control requests
//! carry ids `botvisor-N` chosen here.

use super::{events, stdin};
use crate::runtime::protocol::{Protocol, Read, Sent};
use crate::runtime::{ControlRequest, PermissionAnswer, SessionStart};

/// Where the request ids of a reopened process start ([`ClaudeProtocol::reopened`]).
const REOPENED_SEQ: u64 = 1_000_000_000;

/// The protocol object of one Claude Code process.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct ClaudeProtocol {
    session: Option<String>,
    seq: u64,
}

impl ClaudeProtocol {
    /// For a process launched with `start`.
    pub fn new(start: &SessionStart) -> ClaudeProtocol {
        ClaudeProtocol {
            session: start.session_id().map(str::to_owned),
            seq: 0,
        }
    }

    /// For a process a previous botvisord started on `start` and was killed before it handed
    /// it over (issue 47): its own control requests get ids that never meet that botvisord's
    /// (answers to those come with ids this one does not know, and are stepped over).
    pub fn reopened(start: &SessionStart) -> ClaudeProtocol {
        ClaudeProtocol {
            session: start.session_id().map(str::to_owned),
            seq: REOPENED_SEQ,
        }
    }

    fn next_id(&mut self) -> String {
        self.seq += 1;
        format!("botvisor-{}", self.seq)
    }
}

impl Protocol for ClaudeProtocol {
    fn opening(&mut self) -> Vec<String> {
        let id = self.next_id();
        vec![stdin::encode_control(&id, &ControlRequest::Initialize)]
    }

    fn ready(&self) -> bool {
        true
    }

    fn conversation(&self) -> Option<&str> {
        self.session.as_deref()
    }

    fn user_message(&mut self, text: &str) -> Vec<String> {
        vec![stdin::encode_user_message(text)]
    }

    fn control(&mut self, request: &ControlRequest) -> Option<Sent> {
        if matches!(request, ControlRequest::SetModel(m) | ControlRequest::SetPermissionMode(m) if m.is_empty())
        {
            // `set_model` takes a model name, `set_permission_mode` a mode: the CLI's default
            // comes with the next start (no `--model`, no `--permission-mode`).
            return None;
        }
        let request_id = self.next_id();
        let lines = vec![stdin::encode_control(&request_id, request)];
        Some(Sent { request_id, lines })
    }

    fn answer_permission(&mut self, request_id: &str, answer: &PermissionAnswer) -> Vec<String> {
        vec![stdin::encode_permission_answer(request_id, answer)]
    }

    fn refuse(&mut self, request_id: &str, message: &str) -> Vec<String> {
        vec![stdin::encode_control_error(request_id, message)]
    }

    fn read_line(&mut self, line: &[u8]) -> Read {
        Read::events(events::parse_line(line))
    }

    fn save(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::RuntimeEvent;

    #[test]
    fn ready_at_once_on_the_launched_conversation() {
        let p = ClaudeProtocol::new(&SessionStart::New("abc".into()));
        assert!(p.ready());
        assert_eq!(p.conversation(), Some("abc"));
    }

    #[test]
    fn opening_is_the_initialize_request_and_ids_do_not_repeat() {
        let mut p = ClaudeProtocol::new(&SessionStart::Resume("abc".into()));
        let opening = p.opening();
        assert_eq!(opening.len(), 1);
        assert!(
            opening[0].contains(r#""subtype":"initialize""#),
            "{opening:?}"
        );
        let a = p.control(&ControlRequest::SetModel("m".into())).unwrap();
        let b = p.control(&ControlRequest::Interrupt).unwrap();
        assert_ne!(a.request_id, b.request_id);
        assert!(a.lines[0].contains(&a.request_id));
    }

    #[test]
    fn an_answer_reads_back_with_the_id_sent() {
        let mut p = ClaudeProtocol::new(&SessionStart::New("abc".into()));
        let sent = p.control(&ControlRequest::SetModel("m".into())).unwrap();
        let line = format!(
            r#"{{"type":"control_response","response":{{"subtype":"success","request_id":"{}","response":{{}}}}}}"#,
            sent.request_id
        );
        let read = p.read_line(line.as_bytes());
        assert!(read.replies.is_empty());
        assert!(matches!(
            &read.events[..],
            [RuntimeEvent::ControlResponse { request_id, result: Ok(_) }] if *request_id == sent.request_id
        ));
    }
}
