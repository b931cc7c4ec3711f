//! The Codex protocol object, case by case, with no process.

use super::notifications::reconnect_count;
use super::*;
use std::collections::BTreeMap;
use std::path::Path;

fn open(start: SessionStart, mode: &str) -> (CodexProtocol, Vec<String>) {
    open_cut(start, mode, None)
}

fn open_cut(start: SessionStart, mode: &str, cut: Option<&Cut>) -> (CodexProtocol, Vec<String>) {
    let env = BTreeMap::new();
    let spec = LaunchSpec {
        cwd: Path::new("/w"),
        model: "m1",
        permission_mode: mode,
        env: &env,
        start: &start,
        cut,
        fork: false,
    };
    let mut p = CodexProtocol::new(&spec);
    let mut lines = p.opening();
    let read = p.read_line(br#"{"id":0,"result":{"codexHome":"/c"}}"#);
    assert!(read.events[0].is_sign_of_life());
    lines.extend(read.replies);
    (p, lines)
}

fn parse(line: &str) -> Value {
    serde_json::from_str(line).unwrap()
}

/// A protocol with the thread `T` open.
fn opened() -> CodexProtocol {
    let (mut p, _) = open(SessionStart::Fresh, "");
    let read = p.read_line(br#"{"id":1,"result":{"thread":{"id":"T"}}}"#);
    assert_eq!(
        read.events,
        vec![RuntimeEvent::Opened {
            session_id: "T".into()
        }]
    );
    p
}

#[test]
fn handshake_then_thread_start_with_the_settings() {
    let (p, lines) = open(SessionStart::Fresh, "on-request:workspace-write");
    assert!(!p.ready());
    assert_eq!(p.conversation(), None);
    let init = parse(&lines[0]);
    assert_eq!(init["method"], "initialize");
    assert_eq!(init["params"]["capabilities"]["experimentalApi"], true);
    assert_eq!(parse(&lines[1]), json!({"method": "initialized"}));
    let start = parse(&lines[2]);
    assert_eq!(start["method"], "thread/start");
    assert_eq!(
        start["params"],
        json!({"cwd": "/w", "model": "m1", "approvalPolicy": "on-request", "sandbox": "workspace-write"})
    );
    let p = opened();
    assert!(p.ready());
    assert_eq!(p.conversation(), Some("T"));
}

#[test]
fn resume_names_the_thread_and_a_missing_rollout_is_a_lost_conversation() {
    let (mut p, lines) = open(SessionStart::Resume("old".into()), "");
    let resume = parse(&lines[2]);
    assert_eq!(resume["method"], "thread/resume");
    assert_eq!(resume["params"]["threadId"], "old");
    assert!(resume["params"].get("approvalPolicy").is_none());
    let read = p.read_line(
        br#"{"error":{"code":-32600,"message":"no rollout found for thread id old"},"id":1}"#,
    );
    assert_eq!(
        read.events,
        vec![RuntimeEvent::ConversationNotFound {
            session_id: "old".into()
        }]
    );
    assert!(!p.ready());
}

/// A resume of `T` that is to drop the attempt `X`, answered with these turns.
fn resumed_with_cut(turns: &str) -> (CodexProtocol, Read) {
    let cut = Cut::BeforeTurn {
        turn_id: "X".into(),
    };
    let (mut p, _) = open_cut(SessionStart::Resume("T".into()), "", Some(&cut));
    let line = format!(r#"{{"id":1,"result":{{"thread":{{"id":"T","turns":{turns}}}}}}}"#);
    let read = p.read_line(line.as_bytes());
    (p, read)
}

#[test]
fn issue_25_a_resume_drops_the_unanswered_attempt_before_it_is_ready() {
    let (mut p, read) = resumed_with_cut(r#"[{"id":"A"},{"id":"X"}]"#);
    assert_eq!(read.events, vec![RuntimeEvent::Ignored]);
    assert!(!p.ready(), "no message before the attempt is dropped");
    let revert = parse(&read.replies[0]);
    assert_eq!(revert["method"], "thread/revert");
    assert_eq!(
        revert["params"],
        json!({"threadId": "T", "beforeTurnId": "X"})
    );
    // A setting asked for meanwhile waits for the thread to be ready.
    let sent = p.control(&ControlRequest::SetModel("m2".into())).unwrap();
    assert!(sent.lines.is_empty());
    let id = revert["id"].as_u64().unwrap();
    let read =
        p.read_line(format!(r#"{{"id":{id},"result":{{"thread":{{"id":"T"}}}}}}"#).as_bytes());
    assert_eq!(
        read.events,
        vec![RuntimeEvent::Opened {
            session_id: "T".into()
        }]
    );
    assert_eq!(parse(&read.replies[0])["method"], "thread/settings/update");
    assert!(p.ready());
}

#[test]
fn issue_25_a_refused_revert_is_told_and_the_thread_stays_open_whole() {
    let (mut p, read) = resumed_with_cut(r#"[{"id":"X"}]"#);
    let id = parse(&read.replies[0])["id"].as_u64().unwrap();
    let refusal = format!(
        r#"{{"error":{{"code":-32600,"message":"thread/revert only supports paginated threads"}},"id":{id}}}"#
    );
    let read = p.read_line(refusal.as_bytes());
    assert!(
        matches!(&read.events[..],
            [RuntimeEvent::CutRefused { error }, RuntimeEvent::Opened { session_id }]
                if error.contains("only supports paginated threads") && session_id == "T"),
        "{:?}",
        read.events
    );
    assert!(p.ready());
}

#[test]
fn issue_25_an_attempt_already_dropped_or_followed_by_another_turn_is_not_reverted() {
    let (p, read) = resumed_with_cut(r#"[{"id":"A"}]"#);
    assert!(read.replies.is_empty(), "gone already: nothing to drop");
    assert_eq!(
        read.events,
        vec![RuntimeEvent::Opened {
            session_id: "T".into()
        }]
    );
    assert!(p.ready());
    let (p, read) = resumed_with_cut(r#"[{"id":"X"},{"id":"B"}]"#);
    assert!(read.replies.is_empty(), "turn B would be dropped too");
    assert!(
        matches!(&read.events[..],
            [RuntimeEvent::CutRefused { error }, RuntimeEvent::Opened { .. }]
                if error.contains("went on after")),
        "{:?}",
        read.events
    );
    assert!(p.ready());
    // Another runtime's cut, or a new thread, sends nothing more.
    let at = Cut::At {
        at: "a".into(),
        drops: "d".into(),
    };
    let (mut p, _) = open_cut(SessionStart::Resume("T".into()), "", Some(&at));
    let read = p.read_line(br#"{"id":1,"result":{"thread":{"id":"T","turns":[{"id":"X"}]}}}"#);
    assert!(read.replies.is_empty() && p.ready());
}

#[test]
fn an_unreadable_rollout_is_a_lost_conversation_that_says_why() {
    let (mut p, _) = open(SessionStart::Resume("old".into()), "");
    let read = p.read_line(
        br#"{"error":{"code":-32603,"message":"failed to read thread: thread-store internal error: failed to read session metadata /h/r.jsonl: rollout at /h/r.jsonl is empty"},"id":1}"#,
    );
    assert!(
        matches!(
            &read.events[..],
            [RuntimeEvent::Chat(ChatPayload { kind: "system", payload }), RuntimeEvent::ConversationNotFound { session_id }]
                if payload["reason"] == "rollout_unreadable"
                    && payload["text"].as_str().unwrap().contains("is empty")
                    && session_id == "old"
        ),
        "{:?}",
        read.events
    );
}

#[test]
fn another_open_failure_is_a_failed_result_not_a_lost_conversation() {
    let (mut p, _) = open(SessionStart::Fresh, "");
    let read = p.read_line(br#"{"error":{"code":-32600,"message":"bad cwd"},"id":1}"#);
    assert!(matches!(
        &read.events[..],
        [RuntimeEvent::OpenFailed { error }] if error.contains("bad cwd")
    ));
    assert!(!p.ready());
    assert!(p.control(&ControlRequest::SetModel("x".into())).is_none());
}

#[test]
fn a_turn_begins_at_turn_started_and_ends_at_turn_completed() {
    let mut p = opened();
    let lines = p.user_message("hi");
    let start = parse(&lines[0]);
    assert_eq!(start["method"], "turn/start");
    assert_eq!(
        start["params"],
        json!({"threadId": "T", "input": [{"type": "text", "text": "hi"}]})
    );
    let id = start["id"].as_u64().unwrap();
    let read = p.read_line(format!(r#"{{"id":{id},"result":{{"turn":{{"id":"U"}}}}}}"#).as_bytes());
    assert_eq!(read.events, vec![RuntimeEvent::Ignored]);
    let read =
        p.read_line(br#"{"method":"turn/started","params":{"threadId":"T","turn":{"id":"U"}}}"#);
    assert_eq!(
        read.events,
        vec![RuntimeEvent::UserReplay {
            session_id: Some("T".into()),
            text: "hi".into()
        }]
    );
    let read = p.read_line(
        br#"{"method":"item/started","params":{"item":{"type":"agentMessage","id":"m"}}}"#,
    );
    assert_eq!(read.events, vec![RuntimeEvent::MessageStart]);
    let read = p.read_line(
        br#"{"method":"item/agentMessage/delta","params":{"delta":"Hel","itemId":"m"}}"#,
    );
    assert_eq!(read.events, vec![RuntimeEvent::TextDelta("Hel".into())]);
    let read = p.read_line(
        br#"{"method":"item/completed","params":{"item":{"type":"agentMessage","id":"m","text":"Hello"}}}"#,
    );
    assert_eq!(
        read.events,
        vec![chat("assistant", json!({"text": "Hello"}))]
    );
    let read = p.read_line(
        br#"{"method":"turn/completed","params":{"threadId":"T","turn":{"id":"U","status":"completed","error":null}}}"#,
    );
    assert!(matches!(
        &read.events[..],
        [RuntimeEvent::TurnResult { outcome: ResultOutcome::Success, error: None, session_id: Some(s), payload }]
            if s == "T" && payload["subtype"] == "completed"
    ));
}

#[test]
fn failed_and_interrupted_turns_are_errors_with_a_text() {
    let mut p = opened();
    let read = p.read_line(
        br#"{"method":"turn/completed","params":{"turn":{"id":"U","status":"failed","error":{"message":"boom"}}}}"#,
    );
    assert!(matches!(
        &read.events[..],
        [RuntimeEvent::TurnResult { outcome: ResultOutcome::Error, error: Some(e), .. }] if e == "boom"
    ));
    let read = p.read_line(
        br#"{"method":"turn/completed","params":{"turn":{"id":"U","status":"interrupted","error":null}}}"#,
    );
    assert!(matches!(
        &read.events[..],
        [RuntimeEvent::TurnResult { outcome: ResultOutcome::Error, payload, .. }] if payload["subtype"] == "interrupted"
    ));
}

#[test]
fn a_refused_message_fails_its_turn() {
    let mut p = opened();
    let lines = p.user_message("hi");
    let id = parse(&lines[0])["id"].as_u64().unwrap();
    let read = p.read_line(
        format!(r#"{{"id":{id},"error":{{"code":-32600,"message":"thread not found: T"}}}}"#)
            .as_bytes(),
    );
    assert!(matches!(
        &read.events[..],
        [RuntimeEvent::TurnResult { outcome: ResultOutcome::Error, error: Some(e), .. }] if e.contains("thread not found")
    ));
}

#[test]
fn commands_are_tool_use_and_tool_result() {
    let mut p = opened();
    let read = p.read_line(
        br#"{"method":"item/started","params":{"item":{"type":"commandExecution","id":"c1","command":"ls","cwd":"/w"}}}"#,
    );
    assert_eq!(
        read.events,
        vec![chat(
            "tool_use",
            json!({"id": "c1", "name": "commandExecution", "input": {"command": "ls", "cwd": "/w"}})
        )]
    );
    let read = p.read_line(
        br#"{"method":"item/completed","params":{"item":{"type":"commandExecution","id":"c1","status":"declined","exitCode":null}}}"#,
    );
    assert!(matches!(
        &read.events[..],
        [RuntimeEvent::Chat(ChatPayload { kind: "tool_result", payload })]
            if payload["tool_use_id"] == "c1" && payload["is_error"] == true && payload["status"] == "declined"
    ));
}

/// Issue 29: an MCP tool call (tests/real/codex/mcp.rs on the real 0.171.0) is a `tool_use`
/// named as the model calls it and a `tool_result` of the result's content; an `isError`
/// result (`status` `failed`) or a call without a result (Codex's `error`) is an error.
#[test]
fn mcp_tool_calls_are_tool_use_and_tool_result() {
    let mut p = opened();
    let read = p.read_line(
        br#"{"method":"item/started","params":{"item":{"type":"mcpToolCall","id":"m1","server":"botvisor","tool":"list_bots","arguments":{},"status":"inProgress"}}}"#,
    );
    assert_eq!(
        read.events,
        vec![chat(
            "tool_use",
            json!({"id": "m1", "name": "mcp__botvisor__list_bots", "server": "botvisor",
                   "tool": "list_bots", "input": {}})
        )]
    );
    for (item, content, is_error) in [
        (
            r#"{"type":"mcpToolCall","id":"m1","server":"botvisor","tool":"list_bots","arguments":{},"status":"completed","result":{"content":[{"type":"text","text":"ok"}],"isError":false}}"#,
            json!([{"type": "text", "text": "ok"}]),
            false,
        ),
        (
            r#"{"type":"mcpToolCall","id":"m1","server":"botvisor","tool":"delete_bot","arguments":{},"status":"failed","result":{"content":[{"type":"text","text":"not allowed"}],"isError":true}}"#,
            json!([{"type": "text", "text": "not allowed"}]),
            true,
        ),
        (
            r#"{"type":"mcpToolCall","id":"m1","server":"botvisor","tool":"list_bots","arguments":{},"status":"failed","result":null,"error":{"message":"timed out"}}"#,
            json!("timed out"),
            true,
        ),
    ] {
        let line = format!(r#"{{"method":"item/completed","params":{{"item":{item}}}}}"#);
        let read = p.read_line(line.as_bytes());
        assert!(
            matches!(
                &read.events[..],
                [RuntimeEvent::Chat(ChatPayload { kind: "tool_result", payload })]
                    if payload["tool_use_id"] == "m1" && payload["content"] == content
                        && payload["is_error"] == is_error
            ),
            "{item}: {:?}",
            read.events
        );
    }
}

/// Requests both ways (approvals, refusals, an interrupt), live settings, retries, unreadable
/// lines, token usage and a plan's limit.
mod requests;
