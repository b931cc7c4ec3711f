//! The Codex protocol object's requests both ways (approvals answered accept or decline, requests
//! botvisor does not serve, an interrupt), live settings, retries, lines that are not the
//! protocol, token usage and a plan's usage limit.

use super::*;

#[test]
fn approvals_are_permission_requests_answered_accept_or_decline() {
    let mut p = opened();
    let read = p.read_line(
        br#"{"method":"item/commandExecution/requestApproval","id":0,"params":{"threadId":"T","turnId":"U","itemId":"c1","command":"rm x","cwd":"/w","reason":"why"}}"#,
    );
    let [
        RuntimeEvent::PermissionRequest {
            request_id,
            tool,
            input,
            ..
        },
    ] = &read.events[..]
    else {
        panic!("{:?}", read.events)
    };
    assert_eq!(tool, "commandExecution");
    assert_eq!(input["command"], "rm x");
    let lines = p.answer_permission(
        request_id,
        &PermissionAnswer::Allow {
            updated_input: json!({}),
            grant: None,
        },
    );
    assert_eq!(
        parse(&lines[0]),
        json!({"id": 0, "result": {"decision": "accept"}})
    );
    assert!(
        p.answer_permission(
            request_id,
            &PermissionAnswer::Deny {
                message: "no".into()
            }
        )
        .is_empty(),
        "answered once"
    );
    // Codex counts its requests from 0 in every process: the id a client sees differs.
    let read = p.read_line(
        br#"{"method":"item/fileChange/requestApproval","id":1,"params":{"turnId":"U2","itemId":"f1"}}"#,
    );
    let [RuntimeEvent::PermissionRequest { request_id: r2, .. }] = &read.events[..] else {
        panic!()
    };
    assert_ne!(r2, request_id);
    let lines = p.answer_permission(
        r2,
        &PermissionAnswer::Deny {
            message: "no".into(),
        },
    );
    assert_eq!(
        parse(&lines[0]),
        json!({"id": 1, "result": {"decision": "decline"}})
    );
    // A wider scope is the decision its grant names (runtime::codex::scopes).
    let read = p.read_line(
        br#"{"method":"item/fileChange/requestApproval","id":2,"params":{"turnId":"U2","itemId":"f2"}}"#,
    );
    let [RuntimeEvent::PermissionRequest { request_id: r3, .. }] = &read.events[..] else {
        panic!()
    };
    let lines = p.answer_permission(
        r3,
        &PermissionAnswer::Allow {
            updated_input: json!({}),
            grant: Some(json!("acceptForSession")),
        },
    );
    assert_eq!(
        parse(&lines[0]),
        json!({"id": 2, "result": {"decision": "acceptForSession"}})
    );
}

#[test]
fn requests_botvisor_does_not_serve_are_refused() {
    let mut p = opened();
    let read =
        p.read_line(br#"{"method":"item/tool/requestUserInput","id":"x","params":{"turnId":"U"}}"#);
    let [
        RuntimeEvent::ControlRequest {
            request_id,
            subtype,
            ..
        },
    ] = &read.events[..]
    else {
        panic!()
    };
    assert_eq!(subtype, "item/tool/requestUserInput");
    let lines = p.refuse(request_id, "not served");
    let v = parse(&lines[0]);
    assert_eq!(v["id"], "x");
    assert_eq!(v["error"]["message"], "not served");
}

#[test]
fn an_interrupt_waits_for_the_turn_id() {
    let mut p = opened();
    let lines = p.user_message("hi");
    let sent = p.control(&ControlRequest::Interrupt).unwrap();
    assert!(sent.lines.is_empty(), "no turn id yet");
    let read =
        p.read_line(br#"{"method":"turn/started","params":{"threadId":"T","turn":{"id":"U"}}}"#);
    let interrupt = parse(&read.replies[0]);
    assert_eq!(interrupt["method"], "turn/interrupt");
    assert_eq!(interrupt["params"], json!({"threadId": "T", "turnId": "U"}));
    assert_eq!(interrupt["id"].to_string(), sent.request_id);
    // Not sent twice when the turn/start answer comes after.
    let id = parse(&lines[0])["id"].as_u64().unwrap();
    let read = p.read_line(format!(r#"{{"id":{id},"result":{{"turn":{{"id":"U"}}}}}}"#).as_bytes());
    assert!(read.replies.is_empty());
    let read = p.read_line(format!(r#"{{"id":{},"result":{{}}}}"#, sent.request_id).as_bytes());
    assert!(matches!(
        &read.events[..],
        [RuntimeEvent::ControlResponse { request_id, result: Ok(_) }] if *request_id == sent.request_id
    ));
    // With the turn known, at once.
    let sent = p.control(&ControlRequest::Interrupt).unwrap();
    assert_eq!(parse(&sent.lines[0])["method"], "turn/interrupt");
}

#[test]
fn an_empty_model_means_config_tomls_at_the_resume_and_live() {
    let env = BTreeMap::new();
    let start = SessionStart::Resume("T".into());
    let spec = LaunchSpec {
        cwd: Path::new("/w"),
        model: "",
        permission_mode: "",
        env: &env,
        start: &start,
        cut: None,
        fork: false,
    };
    // A resumed thread keeps the model it last ran with: config.toml's is named.
    let mut p = CodexProtocol::new(&spec).with_default_model(Some("cfg".into()));
    p.opening();
    let read = p.read_line(br#"{"id":0,"result":{"codexHome":"/c"}}"#);
    let resume = parse(&read.replies[1]);
    assert_eq!(resume["method"], "thread/resume");
    assert_eq!(resume["params"]["model"], "cfg");
    p.read_line(br#"{"id":1,"result":{"thread":{"id":"T"}}}"#);
    let sent = p.control(&ControlRequest::SetModel(String::new())).unwrap();
    assert_eq!(parse(&sent.lines[0])["params"]["model"], "cfg");
    // Without one in config.toml, nothing can name the default: not sent.
    let mut p = CodexProtocol::new(&spec);
    p.opening();
    let read = p.read_line(br#"{"id":0,"result":{"codexHome":"/c"}}"#);
    assert!(parse(&read.replies[1])["params"].get("model").is_none());
    p.read_line(br#"{"id":1,"result":{"thread":{"id":"T"}}}"#);
    assert!(
        p.control(&ControlRequest::SetModel(String::new()))
            .is_none()
    );
}

#[test]
fn settings_are_thread_settings_updates_held_until_the_thread_is_open() {
    let (mut p, _) = open(SessionStart::Fresh, "");
    let sent = p.control(&ControlRequest::SetModel("m2".into())).unwrap();
    assert!(sent.lines.is_empty());
    let read = p.read_line(br#"{"id":1,"result":{"thread":{"id":"T"}}}"#);
    let update = parse(&read.replies[0]);
    assert_eq!(update["method"], "thread/settings/update");
    assert_eq!(update["params"], json!({"model": "m2", "threadId": "T"}));
    assert_eq!(update["id"].to_string(), sent.request_id);
    let sent = p
        .control(&ControlRequest::SetPermissionMode("never:read-only".into()))
        .unwrap();
    assert_eq!(
        parse(&sent.lines[0])["params"],
        json!({"approvalPolicy": "never", "sandboxPolicy": {"type": "readOnly"}, "threadId": "T"})
    );
    let read = p.read_line(
        format!(
            r#"{{"id":{},"error":{{"code":-32600,"message":"nope"}}}}"#,
            sent.request_id
        )
        .as_bytes(),
    );
    assert!(matches!(
        &read.events[..],
        [RuntimeEvent::ControlResponse { result: Err(e), .. }] if e == "nope"
    ));
    assert!(
        p.control(&ControlRequest::SetPermissionMode("".into()))
            .is_none(),
        "the CLI's default cannot be set live"
    );
}

#[test]
fn a_stream_retry_names_its_count_and_why() {
    let mut p = opened();
    let read = p.read_line(
        br#"{"method":"error","params":{"error":{"message":"Reconnecting... 2/5","codexErrorInfo":{"responseStreamDisconnected":{"httpStatusCode":null}},"additionalDetails":"stream disconnected before completion: idle timeout waiting for SSE"},"willRetry":true}}"#,
    );
    assert!(
        matches!(
            &read.events[..],
            [RuntimeEvent::ApiRetry { attempt: 2, max_retries: 5, status: None, error, .. }]
                if error.contains("idle timeout waiting for SSE")
        ),
        "{:?}",
        read.events
    );
    assert_eq!(reconnect_count("Reconnecting... waiting for network"), None);
}

#[test]
fn errors_that_will_be_retried_are_api_retries() {
    let mut p = opened();
    let line = br#"{"method":"error","params":{"error":{"message":"Reconnecting... waiting for network","codexErrorInfo":{"responseStreamDisconnected":{"httpStatusCode":null}}},"willRetry":true}}"#;
    let read = p.read_line(line);
    assert!(matches!(
        &read.events[..],
        [RuntimeEvent::ApiRetry { attempt: 1, status: None, error, .. }] if error.starts_with("responseStreamDisconnected")
    ));
    let read = p.read_line(line);
    assert!(matches!(
        &read.events[..],
        [RuntimeEvent::ApiRetry { attempt: 2, .. }]
    ));
    let read = p.read_line(
        br#"{"method":"error","params":{"error":{"message":"high demand","codexErrorInfo":"internalServerError"},"willRetry":false}}"#,
    );
    assert!(matches!(
        &read.events[..],
        [RuntimeEvent::Chat(ChatPayload { kind: "error", payload })] if payload["text"] == "high demand"
    ));
}

#[test]
fn lines_that_are_not_the_protocol_are_unparsed() {
    let mut p = opened();
    assert!(matches!(
        &p.read_line(b"hello").events[..],
        [RuntimeEvent::Unparsed { .. }]
    ));
    assert!(matches!(
        &p.read_line(b"[1]").events[..],
        [RuntimeEvent::Unparsed { .. }]
    ));
    assert_eq!(
        p.read_line(br#"{"method":"thread/tokenUsage/updated","params":{}}"#)
            .events,
        vec![RuntimeEvent::Ignored]
    );
}

#[test]
fn a_model_requests_tokens_are_told_as_its_last_usage() {
    let mut p = opened();
    // As Codex 0.171.0 printed it (facts::codex::a_turns_token_usage_is_told_last_and_in_total).
    assert_eq!(
        p.read_line(br#"{"method":"thread/tokenUsage/updated","params":{"threadId":"t","turnId":"u","tokenUsage":{"last":{"cacheWriteInputTokens":0,"cachedInputTokens":0,"inputTokens":12,"outputTokens":7,"reasoningOutputTokens":0,"totalTokens":19},"modelContextWindow":258400,"total":{"inputTokens":24,"outputTokens":14}}}}"#)
            .events,
        vec![RuntimeEvent::Tokens {
            input: 12,
            output: 7
        }]
    );
}

#[test]
fn a_usage_limit_is_reached_with_the_reset_the_window_told() {
    // The lines of Codex 0.171.0 over its limit (facts::codex::a_usage_limit_is_an_error_that_names_its_reset).
    let mut p = opened();
    let read = p.read_line(
        br#"{"method":"account/rateLimits/updated","params":{"rateLimits":{"credits":null,"limitId":"codex","primary":{"resetsAt":1796200138,"usedPercent":100,"windowDurationMins":300},"secondary":null}}}"#,
    );
    let reached = LimitReport {
        state: LimitState::Reached,
        kind: "five_hour".into(),
        resets_at: 1796200138,
        utilization: Some(1.0),
    };
    assert_eq!(read.events, vec![RuntimeEvent::Limit(reached.clone())]);
    let read = p.read_line(
        "{\"method\":\"error\",\"params\":{\"error\":{\"codexErrorInfo\":\"usageLimitExceeded\",\"message\":\"You\u{2019}ve hit your usage limit. \u{2026} try again at 8:28 AM.\"},\"willRetry\":false}}".as_bytes(),
    );
    assert!(
        matches!(&read.events[..],
            [RuntimeEvent::Limit(r), RuntimeEvent::Chat(ChatPayload { kind: "error", .. })] if *r == reached),
        "{:?}",
        read.events
    );
    // A window not at its end is allowed; one without figures says nothing.
    let read = p.read_line(
        br#"{"method":"account/rateLimits/updated","params":{"rateLimits":{"primary":{"resetsAt":5,"usedPercent":42,"windowDurationMins":10080}}}}"#,
    );
    assert!(matches!(&read.events[..],
        [RuntimeEvent::Limit(LimitReport { state: LimitState::Allowed, kind, resets_at: 5, .. })] if kind == "seven_day"));
    let read = p.read_line(
        br#"{"method":"account/rateLimits/updated","params":{"rateLimits":{"primary":null}}}"#,
    );
    assert_eq!(read.events, vec![RuntimeEvent::Ignored]);
}

#[test]
fn a_usage_limit_without_a_window_told_has_no_reset() {
    let mut p = opened();
    let read = p.read_line(
        br#"{"method":"error","params":{"error":{"codexErrorInfo":"usageLimitExceeded","message":"You have hit your usage limit."},"willRetry":false}}"#,
    );
    assert!(
        matches!(
            &read.events[..],
            [
                RuntimeEvent::Limit(LimitReport {
                    state: LimitState::Reached,
                    resets_at: 0,
                    ..
                }),
                RuntimeEvent::Chat(_)
            ]
        ),
        "{:?}",
        read.events
    );
}
