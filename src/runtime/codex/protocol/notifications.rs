//! Codex's notifications (`turn/started`, `item/*`, `turn/completed`, `error`, …) read as runtime
//! events: the half of [`super::CodexProtocol`] that listens.

use super::*;

impl CodexProtocol {
    /// A notification of Codex (a JSON-RPC message without an id).
    pub(super) fn on_notification(&mut self, method: &str, params: &Value) -> Read {
        let item = params.get("item").unwrap_or(&Value::Null);
        let item_type = item.get("type").and_then(Value::as_str).unwrap_or_default();
        let event = match method {
            "turn/started" => {
                if let Some(t) = params.pointer("/turn/id").and_then(Value::as_str) {
                    self.turn = Some(t.to_owned());
                }
                self.retries = 0;
                return Read {
                    events: vec![RuntimeEvent::UserReplay {
                        session_id: self.thread.clone(),
                        text: self.last_text.clone(),
                    }],
                    replies: self.release_interrupt(),
                };
            }
            "item/agentMessage/delta" => match params.get("delta").and_then(Value::as_str) {
                Some(d) => RuntimeEvent::TextDelta(d.to_owned()),
                None => RuntimeEvent::Ignored,
            },
            "item/started" => match item_type {
                "agentMessage" => RuntimeEvent::MessageStart,
                "commandExecution" => chat(
                    "tool_use",
                    json!({"id": item.get("id"), "name": "commandExecution",
                           "input": {"command": item.get("command"), "cwd": item.get("cwd")}}),
                ),
                "fileChange" => chat(
                    "tool_use",
                    json!({"id": item.get("id"), "name": "fileChange",
                           "input": {"changes": item.get("changes")}}),
                ),
                "mcpToolCall" => chat("tool_use", mcp_tool_use(item)),
                _ => RuntimeEvent::Ignored,
            },
            "item/completed" => match item_type {
                "agentMessage" => chat(
                    "assistant",
                    json!({"text": item.get("text").and_then(Value::as_str).unwrap_or_default()}),
                ),
                "commandExecution" | "fileChange" => {
                    let status = item.get("status").and_then(Value::as_str);
                    let failed = status != Some("completed")
                        || item
                            .get("exitCode")
                            .and_then(Value::as_i64)
                            .is_some_and(|c| c != 0);
                    let content = match item_type {
                        "commandExecution" => item.get("aggregatedOutput").cloned(),
                        _ => item.get("changes").cloned(),
                    };
                    chat(
                        "tool_result",
                        json!({"tool_use_id": item.get("id"), "content": content,
                               "is_error": failed, "status": status,
                               "exit_code": item.get("exitCode")}),
                    )
                }
                "mcpToolCall" => chat("tool_result", mcp_tool_result(item)),
                _ => RuntimeEvent::Ignored,
            },
            "turn/completed" => {
                let turn = params.get("turn").unwrap_or(&Value::Null);
                let status = turn
                    .get("status")
                    .and_then(Value::as_str)
                    .unwrap_or("unknown");
                let message = turn
                    .pointer("/error/message")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                let (outcome, error) = match status {
                    "completed" => (ResultOutcome::Success, None),
                    "interrupted" => (
                        ResultOutcome::Error,
                        Some("The turn was interrupted.".to_owned()),
                    ),
                    _ => (
                        ResultOutcome::Error,
                        Some(
                            message
                                .clone()
                                .unwrap_or_else(|| format!("The turn {status}.")),
                        ),
                    ),
                };
                self.turn = None;
                self.held_interrupt = None;
                self.retries = 0;
                RuntimeEvent::TurnResult {
                    outcome,
                    session_id: self.thread.clone(),
                    payload: json!({
                        "subtype": status, "turn_id": turn.get("id"),
                        "is_error": outcome == ResultOutcome::Error, "error": message,
                        "duration_ms": turn.get("durationMs"),
                    }),
                    error,
                }
            }
            "thread/tokenUsage/updated" => match params.pointer("/tokenUsage/last") {
                Some(last) => {
                    let n = |k: &str| last.get(k).and_then(Value::as_u64).unwrap_or(0);
                    RuntimeEvent::Tokens {
                        input: n("inputTokens"),
                        output: n("outputTokens"),
                    }
                }
                None => RuntimeEvent::Ignored,
            },
            "account/rateLimits/updated" => {
                let Some(report) = params
                    .pointer("/rateLimits/primary")
                    .and_then(primary_window)
                else {
                    return Read::events(vec![RuntimeEvent::Ignored]);
                };
                self.limit = Some(report.clone());
                RuntimeEvent::Limit(report)
            }
            "error" => {
                let message = params
                    .pointer("/error/message")
                    .and_then(Value::as_str)
                    .unwrap_or("an error")
                    .to_owned();
                let info = params.pointer("/error/codexErrorInfo");
                let (word, status) = match info {
                    Some(Value::String(s)) => (s.clone(), None),
                    Some(Value::Object(o)) => match o.iter().next() {
                        Some((k, v)) => {
                            (k.clone(), v.get("httpStatusCode").and_then(Value::as_u64))
                        }
                        None => (String::new(), None),
                    },
                    _ => (String::new(), None),
                };
                if params.get("willRetry").and_then(Value::as_bool) == Some(true) {
                    self.retries += 1;
                    // `Reconnecting... N/M`: a stream that broke or stayed idle past the
                    // provider's `stream_idle_timeout_ms`, retried up to `stream_max_retries`
                    // times. Without a count (nothing listening) Codex retries without limit.
                    let (attempt, max_retries) =
                        reconnect_count(&message).unwrap_or((self.retries, 0));
                    let details = params
                        .pointer("/error/additionalDetails")
                        .and_then(Value::as_str)
                        .filter(|d| !d.is_empty())
                        .map(|d| format!(" ({d})"))
                        .unwrap_or_default();
                    RuntimeEvent::ApiRetry {
                        error: if word.is_empty() {
                            format!("{message}{details}")
                        } else {
                            format!("{word}: {message}{details}")
                        },
                        status,
                        attempt,
                        max_retries,
                        delay_ms: None,
                    }
                } else {
                    let said = chat(
                        "error",
                        json!({"text": message, "codex_error_info": info,
                               "details": params.pointer("/error/additionalDetails")}),
                    );
                    if word != "usageLimitExceeded" {
                        said
                    } else {
                        // The reset is only known from the window told just before (0.171.0:
                        // `account/rateLimits/updated`; the error's own words give a local time).
                        let last = self.limit.clone();
                        let reached = RuntimeEvent::Limit(LimitReport {
                            state: LimitState::Reached,
                            kind: last.as_ref().map(|l| l.kind.clone()).unwrap_or_default(),
                            resets_at: last.as_ref().map_or(0, |l| l.resets_at),
                            utilization: last.and_then(|l| l.utilization),
                        });
                        return Read::events(vec![reached, said]);
                    }
                }
            }
            _ => RuntimeEvent::Ignored,
        };
        Read::events(vec![event])
    }
}

/// `(N, M)` of a retry message `Reconnecting... N/M`.
pub(super) fn reconnect_count(message: &str) -> Option<(u64, u64)> {
    let rest = message.strip_prefix("Reconnecting...")?.trim();
    let (n, m) = rest.split_once('/')?;
    let m: String = m.chars().take_while(char::is_ascii_digit).collect();
    Some((n.trim().parse().ok()?, m.parse().ok()?))
}

/// Codex's `rateLimits.primary` `{usedPercent, windowDurationMins, resetsAt}` (0.171.0; `null`
/// when the API's answer had no `x-codex-primary-*` headers) as a report: reached at 100 %
/// used, the window named by its length (`five_hour` for 300 minutes, `seven_day` for 10080,
/// else `<minutes>m`).
pub(super) fn primary_window(primary: &Value) -> Option<LimitReport> {
    let used = primary.get("usedPercent").and_then(Value::as_f64)?;
    let kind = match primary.get("windowDurationMins").and_then(Value::as_u64) {
        Some(300) => "five_hour".to_owned(),
        Some(10080) => "seven_day".to_owned(),
        Some(m) => format!("{m}m"),
        None => String::new(),
    };
    Some(LimitReport {
        state: if used >= 100.0 {
            LimitState::Reached
        } else {
            LimitState::Allowed
        },
        kind,
        resets_at: primary.get("resetsAt").and_then(Value::as_u64).unwrap_or(0),
        utilization: Some(used / 100.0),
    })
}

/// The `tool_use` payload of an MCP tool call (an `mcpToolCall` item of the app-server, or a
/// rollout's `McpToolCall`): named as the model calls it, `mcp__<server>__<tool>` (Codex 0.171.0
/// offers a server's tools as the namespace `mcp__<server>`), its arguments as the input.
pub(crate) fn mcp_tool_use(item: &Value) -> Value {
    let server = item
        .get("server")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let tool = item.get("tool").and_then(Value::as_str).unwrap_or_default();
    json!({"id": item.get("id"), "name": format!("mcp__{server}__{tool}"),
           "server": server, "tool": tool, "input": item.get("arguments")})
}

/// The `tool_result` payload of a finished MCP tool call: the result's content blocks, or
/// Codex's words when the call got no result (`error.message`: the server could not be
/// reached, the call timed out). An `isError` result is `status` `failed` on Codex 0.171.0.
pub(crate) fn mcp_tool_result(item: &Value) -> Value {
    let status = item.get("status").and_then(Value::as_str);
    let result = item.get("result").filter(|r| !r.is_null());
    let is_error = status != Some("completed")
        || result
            .and_then(|r| r.get("isError"))
            .and_then(Value::as_bool)
            .unwrap_or(false);
    let content = match result {
        Some(r) => r.get("content").cloned().unwrap_or(Value::Null),
        None => item
            .pointer("/error/message")
            .cloned()
            .unwrap_or(Value::Null),
    };
    json!({"tool_use_id": item.get("id"), "content": content, "is_error": is_error,
           "status": status})
}
