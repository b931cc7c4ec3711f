//! Permission prompts with no I/O: the CLI asks, the request is recorded and signalled before
//! any client can answer it (design rule 1), and prompts nobody can answer any more (the agent
//! stopped, the turn ended) are closed as denied by botvisord, each saying why. Who answers first
//! is decided in the [`PromptBook`] itself, under the lock clients answer through.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::effect::{CommitBuilder, Effect, Publish};

/// An open permission request.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Prompt {
    /// The tool, for example `Write`.
    pub tool: String,
    /// The tool's input, as JSON text.
    pub input: String,
    /// The whole request as the CLI sent it (what a wider scope of an allow is made of:
    /// `Runtime::grant`).
    pub request: Value,
}

/// How many answered request ids are remembered to tell "already answered" from "unknown".
pub const ANSWERED_KEPT: usize = 256;

/// The permission requests of a bot: open ones by request id, and who answered the last ones.
#[derive(Debug, Default)]
pub struct PromptBook {
    /// Open requests, by request id.
    pub open: BTreeMap<String, Prompt>,
    /// Recently answered: (request id, who answered, behavior).
    pub answered: std::collections::VecDeque<(String, String, String)>,
}

impl PromptBook {
    /// The request id a client means by `given`: `given` itself when it is open, else the open
    /// request whose id reads `given` once each NUL is U+FFFD, as the bus shows a CLI's id
    /// with a NUL in it (a NUL cannot go on the bus, `dbus::bounds::bus_text`); else `given`.
    /// An answered request is found the same way, so that a second answer is told who gave
    /// the first.
    pub fn id_of(&self, given: &str) -> String {
        if self.open.contains_key(given) {
            return given.to_owned();
        }
        let shown = |id: &&String| id.contains('\0') && id.replace('\0', "\u{FFFD}") == given;
        self.open
            .keys()
            .find(shown)
            .or_else(|| self.answered.iter().map(|(id, _, _)| id).find(shown))
            .cloned()
            .unwrap_or_else(|| given.to_owned())
    }

    /// The open requests as `(request_id, tool, input_json)`, the `PendingPermissions` value.
    pub fn list(&self) -> Vec<(String, String, String)> {
        self.open
            .iter()
            .map(|(id, p)| (id.clone(), p.tool.clone(), p.input.clone()))
            .collect()
    }

    /// Undoes [`PromptBook::answer`] of `request_id` (its answer could not be recorded): open
    /// again, and no longer among the answered.
    pub fn unanswer(&mut self, request_id: &str, prompt: Prompt) {
        if let Some(i) = self
            .answered
            .iter()
            .rposition(|(id, _, _)| id == request_id)
        {
            self.answered.remove(i);
        }
        self.open.insert(request_id.to_owned(), prompt);
    }

    /// Moves a request from open to answered.
    pub fn answer(&mut self, request_id: &str, by: &str, behavior: &str) -> Option<Prompt> {
        let p = self.open.remove(request_id)?;
        if self.answered.len() == ANSWERED_KEPT {
            self.answered.pop_front();
        }
        self.answered
            .push_back((request_id.to_owned(), by.to_owned(), behavior.to_owned()));
        Some(p)
    }
}

/// A permission request of the CLI, as the runtime reported it.
#[derive(Debug, Clone, PartialEq)]
pub struct Asked {
    /// The CLI's request id.
    pub request_id: String,
    /// The tool, for example `Write`.
    pub tool: String,
    /// The tool's input.
    pub input: Value,
    /// The whole request (suggestions, tool use id, …).
    pub request: Value,
    /// The scopes an allow may have (`once`, `session`, `always`, `program`:
    /// `Runtime::scopes`), narrowest first, each with what it reaches in words
    /// (`Runtime::reach`).
    pub scopes: Vec<(String, String)>,
}

/// The CLI asks: the request is open in `book`, recorded as a `permission_request` item of
/// `turn_id`, then signalled (`PermissionRequested`) and listed (`PendingPermissions`).
pub fn opened(book: &mut PromptBook, asked: Asked, turn_id: Option<&str>) -> Vec<Effect> {
    let input_json = asked.input.to_string();
    book.open.insert(
        asked.request_id.clone(),
        Prompt {
            tool: asked.tool.clone(),
            input: input_json.clone(),
            request: asked.request.clone(),
        },
    );
    let payload = json!({
        "request_id": asked.request_id,
        "tool": asked.tool,
        "input": asked.input,
        "suggestions": asked.request.get("permission_suggestions").cloned().unwrap_or(Value::Null),
        "tool_use_id": asked.request.get("tool_use_id").cloned().unwrap_or(Value::Null),
        "scopes": asked.scopes.iter().map(|(s, _)| s).collect::<Vec<_>>(),
        "reach": asked
            .scopes
            .iter()
            .map(|(s, w)| (s.clone(), Value::from(w.as_str())))
            .collect::<serde_json::Map<String, Value>>(),
    })
    .to_string();
    let mut c = CommitBuilder::default();
    c.item("permission_request", turn_id, payload)
        .then(Publish::PermissionRequested {
            request_id: asked.request_id,
            tool: asked.tool,
            input: input_json,
        });
    let mut effects: Vec<Effect> = c.build().into_iter().collect();
    effects.push(Effect::Pending(book.list()));
    effects
}

/// Every open request is closed as denied by `botvisord`, each with a `permission_answer` item
/// that carries `message`; nothing when none is open.
pub fn close_all(book: &mut PromptBook, message: &str) -> Vec<Effect> {
    let ids: Vec<String> = book.open.keys().cloned().collect();
    let denied: Vec<(String, Prompt)> = ids
        .into_iter()
        .filter_map(|id| book.answer(&id, "botvisord", "deny").map(|p| (id, p)))
        .collect();
    if denied.is_empty() {
        return Vec::new();
    }
    let mut c = CommitBuilder::default();
    for (request_id, prompt) in denied {
        c.item(
            "permission_answer",
            None,
            json!({
                "request_id": request_id, "tool": prompt.tool, "behavior": "deny",
                "by": "botvisord", "message": message,
            })
            .to_string(),
        );
    }
    let mut effects: Vec<Effect> = c.build().into_iter().collect();
    effects.push(Effect::Pending(book.list()));
    effects
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::supervisor::core::effect::Write;

    fn asked(id: &str) -> Asked {
        Asked {
            request_id: id.into(),
            tool: "Write".into(),
            input: json!({"file_path": "/x"}),
            request: json!({"tool_use_id": "t1"}),
            scopes: vec![("once".into(), "this request, this time".into())],
        }
    }

    #[test]
    fn rule_1_a_request_is_recorded_before_it_is_signalled_and_listed() {
        let mut book = PromptBook::default();
        let effects = opened(&mut book, asked("r1"), Some("turn"));
        let Effect::Commit { writes, publish } = &effects[0] else {
            panic!("{effects:?}")
        };
        assert!(matches!(&writes[0], Write::Chat { kind, turn_id, .. }
            if kind == "permission_request" && turn_id.as_deref() == Some("turn")));
        assert_eq!(publish[0], Publish::Item(0));
        assert!(
            matches!(&publish[1], Publish::PermissionRequested { request_id, .. } if request_id == "r1")
        );
        assert!(matches!(&effects[1], Effect::Pending(l) if l.len() == 1));
    }

    #[test]
    fn a_request_says_each_scope_and_what_it_lets_run() {
        let mut book = PromptBook::default();
        let mut a = asked("r1");
        a.scopes.push((
            "session".into(),
            "`touch /w/a` again, exactly, while this agent runs".into(),
        ));
        let effects = opened(&mut book, a, None);
        let Effect::Commit { writes, .. } = &effects[0] else {
            panic!("{effects:?}")
        };
        let Write::Chat { payload, .. } = &writes[0] else {
            panic!("{writes:?}")
        };
        let p: Value = serde_json::from_str(payload).unwrap();
        assert_eq!(p["scopes"], json!(["once", "session"]));
        assert_eq!(
            p["reach"],
            json!({"once": "this request, this time",
                   "session": "`touch /w/a` again, exactly, while this agent runs"})
        );
    }

    #[test]
    fn prompts_nobody_can_answer_are_closed_as_denied_by_botvisord_with_the_reason() {
        let mut book = PromptBook::default();
        opened(&mut book, asked("r1"), None);
        opened(&mut book, asked("r2"), None);
        let effects = close_all(&mut book, "The agent stopped.");
        assert!(book.open.is_empty());
        let Effect::Commit { writes, .. } = &effects[0] else {
            panic!("{effects:?}")
        };
        assert_eq!(writes.len(), 2);
        assert!(
            writes
                .iter()
                .all(|w| matches!(w, Write::Chat { payload, .. }
            if payload.contains("\"by\":\"botvisord\"") && payload.contains("The agent stopped.")))
        );
        assert_eq!(effects[1], Effect::Pending(Vec::new()));
        assert!(
            close_all(&mut book, "again").is_empty(),
            "nothing open: nothing said"
        );
    }

    #[test]
    fn a_request_answered_by_a_client_first_is_not_closed_again() {
        let mut book = PromptBook::default();
        opened(&mut book, asked("r1"), None);
        assert!(book.answer("r1", "client", "allow").is_some());
        assert!(close_all(&mut book, "stopped").is_empty());
    }
}
