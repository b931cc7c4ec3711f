//! Claude Code's stream-json stdout, one JSON object per line, turned into [`RuntimeEvent`]s
//! (claude-code-facts.md, "The stream-json protocol").

use serde_json::{Value, json};

use crate::runtime::{
    ChatPayload, ControlRequest, LimitReport, LimitState, PermissionAnswer, ResultOutcome,
    RuntimeEvent,
};

/// The error text of a `result` for a `--resume` whose transcript does not exist.
pub const CONVERSATION_NOT_FOUND: &str = "No conversation found with session ID";

/// Longest piece of an unparsed line kept in its `error` chat item, in bytes.
pub const MAX_UNPARSED_KEPT: usize = 4096;

/// A stream-json user message for stdin.
pub fn encode_user_message(text: &str) -> String {
    json!({"type": "user", "message": {"role": "user", "content": text}}).to_string()
}

/// Words in an error (a `result`'s errors, an `api_retry` event, stderr) that mean a failure a
/// restart cannot fix. Seen on 2.1.328: a 401 from the API gives `api_retry` events with
/// `"error": "authentication_failed"` while the CLI retries (up to 10 times) without exiting.
pub fn fatal_reason(text: &str) -> Option<&'static str> {
    let t = text.to_ascii_lowercase();
    if [
        "authentication_failed",
        "authentication_error",
        "invalid api key",
        "invalid x-api-key",
        "please run /login",
        "oauth token has expired",
    ]
    .iter()
    .any(|w| t.contains(w))
    {
        Some("authentication")
    } else if ["usage limit", "usage_limit", "credit balance is too low"]
        .iter()
        .any(|w| t.contains(w))
        // The plan's limit in a result's words (2.1.328: "You've hit your 5-hour limit · resets
        // 6:50pm (UTC)"; 2.1.284: "… your session limit …").
        || (t.contains("hit your") && t.contains("limit"))
    {
        Some("usage limit")
    } else {
        None
    }
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

/// The answer to a `can_use_tool` request: `{"behavior":"allow","updatedInput":{…}}` or
/// `{"behavior":"deny","message":"…"}` (claude-code-facts.md, "The control protocol").
pub fn encode_permission_answer(request_id: &str, answer: &PermissionAnswer) -> String {
    let response = match answer {
        PermissionAnswer::Allow { updated_input } => {
            json!({"behavior": "allow", "updatedInput": updated_input})
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

fn str_field(v: &Value, key: &str) -> Option<String> {
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
/// stdout; 2.1.284, 2.1.328 and 2.1.332 print it on stderr (tests/cli_facts.rs): both are read.
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
    let v: Value = match serde_json::from_slice(trimmed) {
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

/// `{"type":"rate_limit_event","rate_limit_info":{"status":"rejected","resetsAt":<s>,
/// "rateLimitType":"five_hour","unifiedWindows":{"five_hour":{"utilization":1,…}}}}` (2.1.284 to
/// 2.1.332 as a subscription user; `tests/cli_facts.rs`
/// `a_plan_limit_is_a_rate_limit_event_and_an_error_result`). An unknown status is ignored.
/// The share of a plan's window used from which botvisor calls it a warning when the CLI tells
/// only the share (Claude Code 2.1.284), as the budget's warning.
pub const WARNING_UTILIZATION: f64 = 0.8;

fn parse_rate_limit(v: &Value) -> RuntimeEvent {
    let info = v.get("rate_limit_info").unwrap_or(&Value::Null);
    let state = match info.get("status").and_then(Value::as_str) {
        Some("allowed") => LimitState::Allowed,
        Some("allowed_warning") => LimitState::Warning,
        Some("rejected") => LimitState::Reached,
        _ => return RuntimeEvent::Ignored,
    };
    let kind = str_field(info, "rateLimitType").unwrap_or_default();
    let window = info.pointer(&format!("/unifiedWindows/{kind}"));
    let utilization = window
        .and_then(|w| w.get("utilization"))
        .or_else(|| info.get("utilization"))
        .and_then(Value::as_f64);
    // 2.1.328 says `allowed` at the top and `allowed_warning` in the deciding window; 2.1.284
    // gives the window's utilization only, so a window that says nothing is a warning from
    // WARNING_UTILIZATION on (cli_facts::a_plan_near_its_limit_is_an_allowed_warning_with_its_utilization).
    let state = match window.and_then(|w| w.get("status")).and_then(Value::as_str) {
        Some("allowed_warning") if state == LimitState::Allowed => LimitState::Warning,
        None if state == LimitState::Allowed
            && utilization.is_some_and(|u| u >= WARNING_UTILIZATION) =>
        {
            LimitState::Warning
        }
        _ => state,
    };
    RuntimeEvent::Limit(LimitReport {
        state,
        kind,
        resets_at: info.get("resetsAt").and_then(Value::as_u64).unwrap_or(0),
        utilization,
    })
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

fn parse_assistant(v: &Value) -> Vec<RuntimeEvent> {
    let message = v.get("message");
    let parent = v.get("parent_tool_use_id").cloned().unwrap_or(Value::Null);
    let Some(Value::Array(blocks)) = message.and_then(|m| m.get("content")) else {
        return vec![RuntimeEvent::Ignored];
    };
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

fn parse_result(v: &Value, session_id: Option<String>) -> RuntimeEvent {
    let subtype = str_field(v, "subtype").unwrap_or_default();
    let is_error = v.get("is_error").and_then(Value::as_bool).unwrap_or(false);
    let errors: Vec<String> = v
        .get("errors")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|e| e.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    if subtype == "error_during_execution"
        && let Some(e) = errors
            .iter()
            .find(|e| e.starts_with(CONVERSATION_NOT_FOUND))
    {
        let named = e[CONVERSATION_NOT_FOUND.len()..]
            .trim_start_matches(':')
            .trim()
            .trim_end_matches('.')
            .to_owned();
        return RuntimeEvent::ConversationNotFound {
            session_id: if named.is_empty() {
                session_id.unwrap_or_default()
            } else {
                named
            },
        };
    }
    let mut payload = json!({
        "subtype": subtype,
        "is_error": is_error,
    });
    for key in [
        "result",
        "num_turns",
        "duration_ms",
        "duration_api_ms",
        "total_cost_usd",
        "usage",
        "stop_reason",
    ] {
        if let Some(x) = v.get(key) {
            payload[key] = x.clone();
        }
    }
    if !errors.is_empty() {
        payload["errors"] = json!(errors);
    }
    let failed = is_error || subtype != "success";
    let error = failed.then(|| {
        errors
            .first()
            .cloned()
            .or_else(|| str_field(v, "result"))
            .unwrap_or_else(|| format!("the turn ended with `{subtype}`"))
    });
    RuntimeEvent::TurnResult {
        outcome: if failed {
            ResultOutcome::Error
        } else {
            ResultOutcome::Success
        },
        session_id,
        payload,
        error,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(line: &str) -> RuntimeEvent {
        let mut v = parse_line(line.as_bytes());
        assert_eq!(v.len(), 1, "{v:?}");
        v.remove(0)
    }

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
    fn not_found_result_is_recognised() {
        let e = one(
            r#"{"type":"result","subtype":"error_during_execution","is_error":true,"num_turns":0,"session_id":"x","errors":["No conversation found with session ID: 1234"]}"#,
        );
        assert_eq!(
            e,
            RuntimeEvent::ConversationNotFound {
                session_id: "1234".into()
            }
        );
    }

    #[test]
    fn other_error_result_fails_the_turn() {
        let e = one(
            r#"{"type":"result","subtype":"error_during_execution","is_error":true,"errors":["boom"]}"#,
        );
        assert!(matches!(
            e,
            RuntimeEvent::TurnResult { outcome: ResultOutcome::Error, error: Some(ref m), .. } if m == "boom"
        ));
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
    fn a_plan_limit_is_a_limit_report() {
        // As 2.1.328 prints it (tests/cli_facts.rs a_plan_limit_is_a_rate_limit_event_and_an_error_result).
        assert_eq!(
            one(
                r#"{"type":"rate_limit_event","rate_limit_info":{"status":"rejected","resetsAt":1796200214,"rateLimitType":"five_hour","isUsingOverage":false,"unifiedWindows":{"five_hour":{"utilization":1,"resetsAt":1796200214,"status":"rejected"}}},"uuid":"u","session_id":"s"}"#
            ),
            RuntimeEvent::Limit(LimitReport {
                state: LimitState::Reached,
                kind: "five_hour".into(),
                resets_at: 1796200214,
                utilization: Some(1.0),
            })
        );
        assert!(matches!(
            one(
                r#"{"type":"rate_limit_event","rate_limit_info":{"status":"allowed_warning","resetsAt":7,"rateLimitType":"seven_day"}}"#
            ),
            RuntimeEvent::Limit(LimitReport {
                state: LimitState::Warning,
                resets_at: 7,
                utilization: None,
                ..
            })
        ));
        // A warning, as 2.1.328 prints it: `allowed` at the top, `allowed_warning` in the window
        // (tests/cli_facts.rs a_plan_near_its_limit_is_an_allowed_warning_with_its_utilization).
        assert_eq!(
            one(
                r#"{"type":"rate_limit_event","rate_limit_info":{"isUsingOverage":false,"rateLimitType":"five_hour","resetsAt":1796231999,"status":"allowed","unifiedWindows":{"five_hour":{"resetsAt":1796231999,"status":"allowed_warning","utilization":0.91}}},"session_id":"s","uuid":"u"}"#
            ),
            RuntimeEvent::Limit(LimitReport {
                state: LimitState::Warning,
                kind: "five_hour".into(),
                resets_at: 1796231999,
                utilization: Some(0.91),
            })
        );
        // 2.1.284: the window's share only.
        assert!(matches!(
            one(
                r#"{"type":"rate_limit_event","rate_limit_info":{"rateLimitType":"five_hour","resetsAt":5,"status":"allowed","unifiedWindows":{"five_hour":{"resetsAt":5,"utilization":0.91}}}}"#
            ),
            RuntimeEvent::Limit(LimitReport {
                state: LimitState::Warning,
                ..
            })
        ));
        assert!(matches!(
            one(
                r#"{"type":"rate_limit_event","rate_limit_info":{"rateLimitType":"five_hour","status":"allowed","unifiedWindows":{"five_hour":{"utilization":0.5}}}}"#
            ),
            RuntimeEvent::Limit(LimitReport {
                state: LimitState::Allowed,
                ..
            })
        ));
        assert!(matches!(
            one(r#"{"type":"rate_limit_event","rate_limit_info":{"status":"allowed"}}"#),
            RuntimeEvent::Limit(LimitReport {
                state: LimitState::Allowed,
                resets_at: 0,
                ..
            })
        ));
        assert_eq!(
            one(r#"{"type":"rate_limit_event","rate_limit_info":{"status":"what"}}"#),
            RuntimeEvent::Ignored
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
        assert_eq!(
            fatal_reason("authentication_failed"),
            Some("authentication")
        );
        assert_eq!(
            fatal_reason("Claude AI usage limit reached"),
            Some("usage limit")
        );
        assert_eq!(fatal_reason("overloaded"), None);
        // A limit hit again in the same process comes as the result's words only.
        assert_eq!(
            fatal_reason("You've hit your 5-hour limit · resets 6:02pm (UTC)"),
            Some("usage limit")
        );
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
