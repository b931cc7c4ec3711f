//! The permission requests of a bot: open ones, and who answered the last ones (the first
//! answer wins).

use std::collections::BTreeMap;

/// An open permission request.
#[derive(Debug, Clone, PartialEq)]
pub struct Prompt {
    /// The tool, for example `Write`.
    pub tool: String,
    /// The tool's input, as JSON text.
    pub input: String,
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
