//! How Claude Code says a turn ended and what the plan allows: its `result` and
//! `rate_limit_event` lines, and the words in an error that no restart fixes.

use serde_json::{Value, json};

use super::events::str_field;
use crate::runtime::{LimitReport, LimitState, ResultOutcome, RuntimeEvent};

/// The error text of a `result` for a `--resume` whose transcript does not exist.
pub const CONVERSATION_NOT_FOUND: &str = "No conversation found with session ID";

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

/// The share of a plan's window used from which botvisor calls it a warning when the CLI tells
/// only the share (Claude Code 2.1.284), as the budget's warning.
pub const WARNING_UTILIZATION: f64 = 0.8;

/// `{"type":"rate_limit_event","rate_limit_info":{"status":"rejected","resetsAt":<s>,
/// "rateLimitType":"five_hour","unifiedWindows":{"five_hour":{"utilization":1,…}}}}` (2.1.284 to
/// 2.1.332 as a subscription user; `tests/facts/claude.rs`
/// `a_plan_limit_is_a_rate_limit_event_and_an_error_result`). An unknown status is ignored.
pub(super) fn parse_rate_limit(v: &Value) -> RuntimeEvent {
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
    // WARNING_UTILIZATION on (facts::claude::a_plan_near_its_limit_is_an_allowed_warning_with_its_utilization).
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

/// A `result` line: the turn's outcome, its payload for the chat, and the error's words.
pub(super) fn parse_result(v: &Value, session_id: Option<String>) -> RuntimeEvent {
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
    use crate::runtime::claude::events::parse_one as one;

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
    fn a_plan_limit_is_a_limit_report() {
        // As 2.1.328 prints it (tests/facts/claude.rs a_plan_limit_is_a_rate_limit_event_and_an_error_result).
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
        // (tests/facts/claude.rs a_plan_near_its_limit_is_an_allowed_warning_with_its_utilization).
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
    fn words_no_restart_fixes() {
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
}
