//! What botvisor writes to Claude Code's stdin: stream-json lines (claude-code-facts.md, "The
//! stream-json protocol" and "The control protocol").

use serde_json::json;

use crate::runtime::{ControlRequest, PermissionAnswer};

/// A stream-json user message for stdin.
pub fn encode_user_message(text: &str) -> String {
    json!({"type": "user", "message": {"role": "user", "content": text}}).to_string()
}

/// A control request line (claude-code-facts.md, "The control protocol").
pub fn encode_control(request_id: &str, request: &ControlRequest) -> String {
    let request = match request {
        ControlRequest::Initialize => json!({"subtype": "initialize"}),
        ControlRequest::SetPermissionMode(mode) => {
            json!({"subtype": "set_permission_mode", "mode": mode})
        }
        ControlRequest::SetModel(model) => json!({"subtype": "set_model", "model": model}),
        ControlRequest::Interrupt => json!({"subtype": "interrupt"}),
    };
    json!({"type": "control_request", "request_id": request_id, "request": request}).to_string()
}

/// The answer to a `can_use_tool` request: `{"behavior":"allow","updatedInput":{…}}` (with
/// `"updatedPermissions":[…]` for a wider scope, [`crate::runtime::Grant`]) or
/// `{"behavior":"deny","message":"…"}` (claude-code-facts.md, "The control protocol").
pub fn encode_permission_answer(request_id: &str, answer: &PermissionAnswer) -> String {
    let response = match answer {
        PermissionAnswer::Allow {
            updated_input,
            grant,
        } => {
            let mut allow = json!({"behavior": "allow", "updatedInput": updated_input});
            if let Some(permissions) = grant {
                allow["updatedPermissions"] = permissions.clone();
            }
            allow
        }
        PermissionAnswer::Deny { message } => json!({"behavior": "deny", "message": message}),
    };
    json!({"type": "control_response", "response": {
        "subtype": "success", "request_id": request_id, "response": response}})
    .to_string()
}

/// An error answer to a control request of the CLI.
pub fn encode_control_error(request_id: &str, message: &str) -> String {
    json!({"type": "control_response", "response": {
        "subtype": "error", "request_id": request_id, "error": message}})
    .to_string()
}
