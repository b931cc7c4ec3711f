//! Control requests to the running CLI (design rule 6) and their answers.

use super::*;

/// The setting a control request changes, in words (`the model to `opus``); `None` for the
/// requests that change no setting (`initialize`, `interrupt`).
pub(super) fn setting_change(request: &ControlRequest) -> Option<String> {
    match request {
        ControlRequest::SetPermissionMode(mode) => Some(format!("the permission mode to `{mode}`")),
        ControlRequest::SetModel(model) if model.is_empty() => {
            Some("the model to its default (the CLI's configuration)".to_owned())
        }
        ControlRequest::SetModel(model) => Some(format!("the model to `{model}`")),
        ControlRequest::Initialize | ControlRequest::Interrupt => None,
    }
}

impl Actor {
    /// Sends a control request to the running process, if there is one that can take it.
    pub(super) fn send_control(&mut self, request: ControlRequest) -> bool {
        let Some(proc) = self
            .proc
            .as_mut()
            .filter(|p| !p.stopping && p.stdin.is_some())
        else {
            return false;
        };
        let Some(sent) = proc.protocol.control(&request) else {
            return false;
        };
        if !self.write_lines(sent.lines) {
            return false;
        }
        let request_id = sent.request_id;
        if matches!(
            request,
            ControlRequest::SetModel(_) | ControlRequest::SetPermissionMode(_)
        ) {
            let deadline = Config::watchdog(self.config.control_timeout_s)
                .map(|d| tokio::time::Instant::now() + d);
            self.watch.control_sent(&request_id, deadline);
        }
        if let Some(proc) = self.proc.as_mut() {
            proc.pending_control.insert(request_id, request);
        }
        true
    }

    /// Writes `lines` to the current process's stdin, each with its newline; whether all went
    /// (false when there is no process or its stdin is closed).
    pub(super) fn write_lines(&self, lines: Vec<String>) -> bool {
        let Some(stdin) = self.proc.as_ref().and_then(|p| p.stdin.as_ref()) else {
            return lines.is_empty();
        };
        lines.into_iter().all(|line| {
            let mut bytes = line.into_bytes();
            bytes.push(b'\n');
            stdin.send(bytes).is_ok()
        })
    }

    /// Now plus a watchdog's bound in seconds (`None` for 0: never).
    pub(super) fn deadline(&self, seconds: f64) -> Option<tokio::time::Instant> {
        Config::watchdog(seconds).map(|d| tokio::time::Instant::now() + d)
    }

    /// The control request sent with `request_id` and not answered yet, if any, now settled.
    pub(super) fn take_pending_control(&mut self, request_id: &str) -> Option<ControlRequest> {
        self.proc
            .as_mut()
            .and_then(|p| p.pending_control.remove(request_id))
    }

    pub(super) fn on_control_response(
        &mut self,
        request_id: String,
        result: Result<Value, String>,
    ) {
        self.watch.control_answered(&request_id);
        let Some(request) = self.take_pending_control(&request_id) else {
            return;
        };
        let Some(what) = setting_change(&request) else {
            if let Err(e) = result {
                tracing::warn!(bot_id = %self.id, ?request, error = %e, "control request refused");
            }
            return;
        };
        match result {
            Ok(_) => self.add_item(
                "system",
                None,
                json!({"text": format!("The running agent changed {what}."), "reason": "setting_applied"}),
            ),
            Err(e) => {
                let text = format!(
                    "The running agent refused to change {what}: {e}. The setting is kept for its next start."
                );
                self.add_item("error", None, json!({ "text": text }));
                self.set_last_error(&text);
            }
        }
    }
}
