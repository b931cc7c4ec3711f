//! Claude Code's stream-json stdout, one JSON object per line, turned into [`RuntimeEvent`]s
//! (claude-code-facts.md, "The stream-json protocol").

use serde_json::{Value, json};

use super::results::{parse_rate_limit, parse_result};
use crate::runtime::{ChatPayload, RuntimeEvent};

/// Longest piece of an unparsed line kept in its `error` chat item, in bytes.
pub const MAX_UNPARSED_KEPT: usize = 4096;

pub(super) fn str_field(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(str::to_owned)
}

/// The text of a message's `content`: a string, or the `text` blocks joined.
fn content_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

fn unparsed(line: &[u8], reason: String) -> RuntimeEvent {
    let mut end = line.len().min(MAX_UNPARSED_KEPT);
    while end > 0 && end < line.len() && (line[end] & 0xC0) == 0x80 {
        end -= 1;
    }
    RuntimeEvent::Unparsed {
        line: String::from_utf8_lossy(&line[..end]).into_owned(),
        reason,
    }
}

/// `Error: Session ID X is already in use.` (plain text, exit code 1). claude-code-facts.md says
/// stdout; 2.1.284, 2.1.328 and 2.1.332 print it on stderr (tests/facts/claude.rs): both are read.
pub fn session_in_use(line: &str) -> Option<String> {
    let rest = line.trim().strip_prefix("Error: Session ID ")?;
    let id = rest.strip_suffix(" is already in use.")?;
    (!id.is_empty() && !id.contains(' ')).then(|| id.to_owned())
}

/// Reads one stdout line.
pub fn parse_line(line: &[u8]) -> Vec<RuntimeEvent> {
    let trimmed = line.trim_ascii();
    if trimmed.is_empty() {
        return vec![RuntimeEvent::Ignored];
    }
    let v: Value = match crate::runtime::json_line::parse(trimmed) {
        Ok(v) => v,
        Err(e) => {
            if let Some(id) = std::str::from_utf8(trimmed).ok().and_then(session_in_use) {
                return vec![RuntimeEvent::SessionInUse { session_id: id }];
            }
            return vec![unparsed(line, format!("not JSON: {e}"))];
        }
    };
    if !v.is_object() {
        return vec![unparsed(line, "not a JSON object".into())];
    }
    let session_id = str_field(&v, "session_id");
    match v.get("type").and_then(Value::as_str) {
        Some("system") => parse_system(&v, session_id),
        Some("user") => parse_user(&v, session_id),
        Some("assistant") => parse_assistant(&v),
        Some("result") => vec![parse_result(&v, session_id)],
        Some("control_response") => vec![parse_control_response(&v)],
        Some("control_request") => vec![parse_control_request(&v)],
        Some("stream_event") => vec![parse_stream_event(&v)],
        Some("rate_limit_event") => vec![parse_rate_limit(&v)],
        Some(_) => vec![RuntimeEvent::Ignored],
        None => vec![unparsed(line, "a JSON object without `type`".into())],
    }
}

fn parse_control_request(v: &Value) -> RuntimeEvent {
    let request_id = str_field(v, "request_id").unwrap_or_default();
    let request = v.get("request").cloned().unwrap_or(Value::Null);
    let subtype = str_field(&request, "subtype").unwrap_or_default();
    if subtype == "can_use_tool" {
        return RuntimeEvent::PermissionRequest {
            request_id,
            tool: str_field(&request, "tool_name").unwrap_or_default(),
            input: request.get("input").cloned().unwrap_or(json!({})),
            request,
        };
    }
    RuntimeEvent::ControlRequest {
        request_id,
        subtype,
        request,
    }
}

/// `--include-partial-messages`: the API's streaming events wrapped in `stream_event` lines.
fn parse_stream_event(v: &Value) -> RuntimeEvent {
    let event = v.get("event").unwrap_or(&Value::Null);
    match event.get("type").and_then(Value::as_str) {
        Some("message_start") => RuntimeEvent::MessageStart,
        Some("content_block_delta") => {
            let delta = event.get("delta").unwrap_or(&Value::Null);
            match (
                delta.get("type").and_then(Value::as_str),
                delta.get("text").and_then(Value::as_str),
            ) {
                (Some("text_delta"), Some(text)) => RuntimeEvent::TextDelta(text.to_owned()),
                _ => RuntimeEvent::Ignored,
            }
        }
        _ => RuntimeEvent::Ignored,
    }
}

fn parse_control_response(v: &Value) -> RuntimeEvent {
    let response = v.get("response").cloned().unwrap_or(Value::Null);
    let request_id = str_field(&response, "request_id").unwrap_or_default();
    let result = if response.get("subtype").and_then(Value::as_str) == Some("success") {
        Ok(response.get("response").cloned().unwrap_or(Value::Null))
    } else {
        Err(str_field(&response, "error").unwrap_or_else(|| "the CLI refused the request".into()))
    };
    RuntimeEvent::ControlResponse { request_id, result }
}

fn parse_system(v: &Value, session_id: Option<String>) -> Vec<RuntimeEvent> {
    match v.get("subtype").and_then(Value::as_str) {
        Some("init") => vec![RuntimeEvent::Init {
            session_id,
            model: str_field(v, "model"),
            permission_mode: str_field(v, "permissionMode"),
        }],
        Some("background_tasks_changed") => vec![RuntimeEvent::Tasks {
            running: Some(v.get("tasks").and_then(Value::as_array).map_or(0, Vec::len)),
        }],
        Some("task_started" | "task_updated" | "task_notification") => {
            vec![RuntimeEvent::Tasks { running: None }]
        }
        Some("api_retry") => vec![RuntimeEvent::ApiRetry {
            error: str_field(v, "error").unwrap_or_default(),
            status: v.get("error_status").and_then(Value::as_u64),
            attempt: v.get("attempt").and_then(Value::as_u64).unwrap_or(0),
            max_retries: v.get("max_retries").and_then(Value::as_u64).unwrap_or(0),
            delay_ms: v.get("retry_delay_ms").and_then(Value::as_u64),
        }],
        _ => vec![RuntimeEvent::Ignored],
    }
}

fn parse_user(v: &Value, session_id: Option<String>) -> Vec<RuntimeEvent> {
    let message = v.get("message");
    let content = message.and_then(|m| m.get("content"));
    if v.get("isReplay").and_then(Value::as_bool) == Some(true) {
        return vec![RuntimeEvent::UserReplay {
            session_id,
            text: content_text(content),
        }];
    }
    let Some(Value::Array(blocks)) = content else {
        return vec![RuntimeEvent::Ignored];
    };
    let events: Vec<RuntimeEvent> = blocks
        .iter()
        .filter(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"))
        .map(|b| {
            RuntimeEvent::Chat(ChatPayload {
                kind: "tool_result",
                payload: json!({
                    "tool_use_id": b.get("tool_use_id").cloned().unwrap_or(Value::Null),
                    "content": b.get("content").cloned().unwrap_or(Value::Null),
                    "is_error": b.get("is_error").and_then(Value::as_bool).unwrap_or(false),
                }),
            })
        })
        .collect();
    if events.is_empty() {
        vec![RuntimeEvent::Ignored]
    } else {
        events
    }
}

/// Whether an `assistant` line is the CLI's own reply to a failed model request, not the
/// model's: "You've hit your 5-hour limit · resets 6:50pm (UTC)", "Failed to authenticate. API
/// Error: 401 …", which Claude Code never sends to the model. Seen on 2.1.328:
/// `is_api_error_message: true` on stdout (`isApiErrorMessage` in the transcript), the error's
/// word in `error`, `message.model` `<synthetic>`.
pub(super) fn is_cli_message(v: &Value) -> bool {
    v.get("is_api_error_message").and_then(Value::as_bool) == Some(true)
        || v.get("isApiErrorMessage").and_then(Value::as_bool) == Some(true)
}

/// Whether an `assistant` line was made by the CLI, not the model (`message.model`
/// `<synthetic>`): a failed request's reply ([`is_cli_message`]), a slash command's output
/// (`/cost`), or a filler such as "No response requested.". None of them answers a message the
/// model was sent.
pub(super) fn is_synthetic(v: &Value) -> bool {
    is_cli_message(v) || v.pointer("/message/model").and_then(Value::as_str) == Some("<synthetic>")
}

fn parse_assistant(v: &Value) -> Vec<RuntimeEvent> {
    let message = v.get("message");
    let parent = v.get("parent_tool_use_id").cloned().unwrap_or(Value::Null);
    let Some(Value::Array(blocks)) = message.and_then(|m| m.get("content")) else {
        return vec![RuntimeEvent::Ignored];
    };
    if is_cli_message(v) {
        // A note of the CLI's, shown as one (issue 46): not an answer of the model's.
        let text = content_text(message.and_then(|m| m.get("content")));
        if text.is_empty() {
            return vec![RuntimeEvent::Ignored];
        }
        let mut payload = json!({"text": text, "reason": "cli_message"});
        if let Some(error) = v.get("error").and_then(Value::as_str) {
            payload["error"] = json!(error);
        }
        return vec![RuntimeEvent::Chat(ChatPayload {
            kind: "system",
            payload,
        })];
    }
    let mut events = Vec::new();
    for b in blocks {
        match b.get("type").and_then(Value::as_str) {
            Some("text") => {
                let text = b.get("text").and_then(Value::as_str).unwrap_or_default();
                let mut payload = json!({ "text": text });
                if !parent.is_null() {
                    payload["parent_tool_use_id"] = parent.clone();
                }
                events.push(RuntimeEvent::Chat(ChatPayload {
                    kind: "assistant",
                    payload,
                }));
            }
            Some("tool_use") => events.push(RuntimeEvent::Chat(ChatPayload {
                kind: "tool_use",
                payload: json!({
                    "id": b.get("id").cloned().unwrap_or(Value::Null),
                    "name": b.get("name").cloned().unwrap_or(Value::Null),
                    "input": b.get("input").cloned().unwrap_or(Value::Null),
                }),
            })),
            _ => {}
        }
    }
    if events.is_empty() {
        events.push(RuntimeEvent::Ignored);
    }
    events
}

/// The one event `line` reads as, for the tests of this folder; panics on none or several.
#[cfg(test)]
pub(super) fn parse_one(line: &str) -> RuntimeEvent {
    let mut v = parse_line(line.as_bytes());
    assert_eq!(v.len(), 1, "{v:?}");
    v.remove(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::claude::stdin::{encode_control, encode_permission_answer};
    use crate::runtime::{ControlRequest, PermissionAnswer};

    use crate::runtime::claude::events::parse_one as one;

    #[test]
    fn replay_is_a_turn_start() {
        let e = one(
            r#"{"type":"user","isReplay":true,"session_id":"s","message":{"role":"user","content":"hi"}}"#,
        );
        assert_eq!(
            e,
            RuntimeEvent::UserReplay {
                session_id: Some("s".into()),
                text: "hi".into()
            }
        );
    }

    #[test]
    fn session_in_use_plain_text() {
        let e = one("Error: Session ID 1b2c is already in use.");
        assert_eq!(
            e,
            RuntimeEvent::SessionInUse {
                session_id: "1b2c".into()
            }
        );
    }

    #[test]
    fn garbage_is_unparsed_and_bounded() {
        let long = "é".repeat(10_000);
        match one(&long) {
            RuntimeEvent::Unparsed { line, .. } => assert!(line.len() <= MAX_UNPARSED_KEPT),
            e => panic!("{e:?}"),
        }
        assert!(matches!(one("[1,2]"), RuntimeEvent::Unparsed { .. }));
        assert!(matches!(one("{\"x\":1}"), RuntimeEvent::Unparsed { .. }));
    }

    #[test]
    fn control_lines() {
        let line = encode_control("r1", &ControlRequest::SetPermissionMode("plan".into()));
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["request"]["mode"], "plan");
        assert_eq!(
            one(
                r#"{"type":"control_response","response":{"subtype":"success","request_id":"r2","response":{"mode":"plan"}}}"#
            ),
            RuntimeEvent::ControlResponse {
                request_id: "r2".into(),
                result: Ok(json!({"mode":"plan"}))
            }
        );
        assert_eq!(
            one(
                r#"{"type":"control_response","response":{"subtype":"error","request_id":"r4","error":"Cannot set"}}"#
            ),
            RuntimeEvent::ControlResponse {
                request_id: "r4".into(),
                result: Err("Cannot set".into())
            }
        );
    }

    #[test]
    fn task_and_retry_events() {
        assert_eq!(
            one(
                r#"{"type":"system","subtype":"background_tasks_changed","tasks":[{"task_id":"a"}]}"#
            ),
            RuntimeEvent::Tasks { running: Some(1) }
        );
        assert_eq!(
            one(r#"{"type":"system","subtype":"task_started","task_id":"a"}"#),
            RuntimeEvent::Tasks { running: None }
        );
        assert!(matches!(
            one(r#"{"type":"system","subtype":"api_retry","attempt":2,"max_retries":10,"error_status":401,"error":"authentication_failed"}"#),
            RuntimeEvent::ApiRetry { ref error, status: Some(401), attempt: 2, max_retries: 10, .. } if error == "authentication_failed"
        ));
    }

    #[test]
    fn permission_requests_and_streamed_text() {
        match one(
            r#"{"type":"control_request","request_id":"b8","request":{"subtype":"can_use_tool","tool_name":"Write","input":{"file_path":"/t/x"},"tool_use_id":"toolu_1"}}"#,
        ) {
            RuntimeEvent::PermissionRequest {
                request_id,
                tool,
                input,
                ..
            } => {
                assert_eq!((request_id.as_str(), tool.as_str()), ("b8", "Write"));
                assert_eq!(input["file_path"], "/t/x");
            }
            e => panic!("{e:?}"),
        }
        assert_eq!(
            one(
                r#"{"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"wor"}}}"#
            ),
            RuntimeEvent::TextDelta("wor".into())
        );
        assert_eq!(
            one(r#"{"type":"stream_event","event":{"type":"message_start","message":{}}}"#),
            RuntimeEvent::MessageStart
        );
        let line = encode_permission_answer(
            "b8",
            &PermissionAnswer::Deny {
                message: "no".into(),
            },
        );
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["response"]["response"]["behavior"], "deny");
        assert_eq!(v["response"]["request_id"], "b8");
        let rules = json!([{"type": "addRules", "destination": "session"}]);
        let line = encode_permission_answer(
            "b9",
            &PermissionAnswer::Allow {
                updated_input: json!({"a": 1}),
                grant: Some(rules.clone()),
            },
        );
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["response"]["response"]["updatedPermissions"], rules);
        let line = encode_permission_answer(
            "b10",
            &PermissionAnswer::Allow {
                updated_input: json!({}),
                grant: None,
            },
        );
        let v: Value = serde_json::from_str(&line).unwrap();
        assert!(
            v["response"]["response"]
                .get("updatedPermissions")
                .is_none()
        );
    }

    #[test]
    fn assistant_blocks() {
        let v = parse_line(
            br#"{"type":"assistant","message":{"content":[{"type":"text","text":"a"},{"type":"tool_use","id":"t1","name":"Bash","input":{"command":"ls"}}]}}"#,
        );
        assert_eq!(v.len(), 2);
        assert!(matches!(&v[0], RuntimeEvent::Chat(c) if c.kind == "assistant"));
        assert!(matches!(&v[1], RuntimeEvent::Chat(c) if c.kind == "tool_use"));
    }
}
