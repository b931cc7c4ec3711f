//! Permission prompts: the CLI asks, any client answers, the first answer wins; prompts
//! nobody can answer any more are closed.

use super::*;

impl Actor {
    /// Writes a permission answer to the process that asked, if it still runs.
    pub(super) fn answer_cli(&mut self, request_id: &str, answer: &PermissionAnswer) {
        if let Some(proc) = self.proc.as_mut() {
            let lines = proc.protocol.answer_permission(request_id, answer);
            self.write_lines(lines);
        }
    }

    pub(super) fn pending_prompts(&self) -> usize {
        self.shared
            .prompts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .open
            .len()
    }

    /// A permission request of the CLI: recorded, signalled, and open until a client answers.
    pub(super) fn on_permission_request(
        &mut self,
        request_id: String,
        tool: String,
        input: Value,
        request: Value,
    ) {
        let input_json = input.to_string();
        let pending = {
            let mut book = self
                .shared
                .prompts
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            book.open.insert(
                request_id.clone(),
                crate::supervisor::Prompt {
                    tool: tool.clone(),
                    input: input_json.clone(),
                },
            );
            book.list()
        };
        let turn = self.current_turn_id();
        let payload = json!({
            "request_id": request_id,
            "tool": tool,
            "input": input,
            "suggestions": request.get("permission_suggestions").cloned().unwrap_or(Value::Null),
            "tool_use_id": request.get("tool_use_id").cloned().unwrap_or(Value::Null),
        })
        .to_string();
        let r = self.store.tx_then(
            |tx| {
                store::chat::append(
                    tx,
                    &self.id,
                    "permission_request",
                    turn.as_deref(),
                    &payload,
                )
            },
            |item| {
                self.publish_item(item);
                let _ = self.publisher.send(Publication::PermissionRequested {
                    bot_id: self.id.clone(),
                    request_id: request_id.clone(),
                    tool: tool.clone(),
                    input: input_json.clone(),
                });
            },
        );
        if let Err(e) = r {
            tracing::error!(bot_id = %self.id, error = %e, "cannot record a permission request");
        }
        self.update(vec!["PendingPermissions"], |v| v.pending = pending);
    }

    /// The process is gone: every open request is denied, and the chat says so.
    pub(super) fn deny_open_prompts(&mut self) {
        self.close_open_prompts("The agent stopped before this request was answered.");
    }

    /// Every open request is closed as denied by botvisord, with `message` in the chat: when the
    /// agent stops, or when its turn ends (an interrupt) while it was asking.
    pub(super) fn close_open_prompts(&mut self, message: &str) {
        let denied: Vec<(String, crate::supervisor::Prompt)> = {
            let mut book = self
                .shared
                .prompts
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            let ids: Vec<String> = book.open.keys().cloned().collect();
            ids.into_iter()
                .filter_map(|id| book.answer(&id, "botvisord", "deny").map(|p| (id, p)))
                .collect()
        };
        if denied.is_empty() {
            return;
        }
        for (request_id, prompt) in denied {
            self.add_item(
                "permission_answer",
                None,
                json!({
                    "request_id": request_id, "tool": prompt.tool, "behavior": "deny",
                    "by": "botvisord",
                    "message": message,
                }),
            );
        }
        self.update(vec!["PendingPermissions"], |v| v.pending.clear());
    }
}
