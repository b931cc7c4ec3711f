//! What a Codex thread's history holds of one message botvisor wrote (issue 25: an answer Codex
//! recorded and botvisor did not; a message taken and never answered): the turn it began, that
//! turn's answer, and where to cut the thread to drop it.
//!
//! Seen on 0.171.0 (tests/facts/codex.rs
//! `a_taken_message_is_asked_again_once_after_thread_revert`): a turn is written as an
//! `event_msg` `task_started` (`turn_id`), a `turn_context`, the message as a `response_item`
//! `message` of role `user` (its `internal_chat_message_metadata_passthrough.turn_id` names the
//! turn), then `event_msg` `item_completed` records (`turn_id`; `item.type` `UserMessage`,
//! `AgentMessage` with `content[].text`, `CommandExecution` with `command`, `cwd`, `status`,
//! `aggregated_output`, `exit_code`, `FileChange`), the model's `response_item`s (a tool call's
//! `type` ends in `_call`), and, once the turn is over, `event_msg` `task_complete` (`error`
//! null when answered, Codex's error otherwise) or `turn_aborted` (stdin closed, an interrupt).
//! A turn killed while the model answers ends after the message (or after a whole
//! `AgentMessage`, when the model's stream had not ended), with neither.

use std::time::SystemTime;

use serde_json::{Value, json};

use crate::runtime::jsonl::written_since;
use crate::runtime::{ChatPayload, Cut, TakenTurn};

/// Whether `line` is the user's message `text`.
fn is_the_message(line: &Value, text: &str) -> bool {
    if line.get("type").and_then(Value::as_str) != Some("response_item") {
        return false;
    }
    let Some(p) = line.get("payload") else {
        return false;
    };
    p.get("type").and_then(Value::as_str) == Some("message")
        && p.get("role").and_then(Value::as_str) == Some("user")
        && p.get("content")
            .and_then(Value::as_array)
            .is_some_and(|blocks| {
                blocks.iter().any(|b| {
                    b.get("type").and_then(Value::as_str) == Some("input_text")
                        && b.get("text").and_then(Value::as_str) == Some(text)
                })
            })
}

/// The `event_msg` kind of `line` and its `payload`, if it is one.
fn event(line: &Value) -> Option<(&str, &Value)> {
    if line.get("type").and_then(Value::as_str) != Some("event_msg") {
        return None;
    }
    let p = line.get("payload")?;
    Some((p.get("type").and_then(Value::as_str)?, p))
}

/// The turn a record names (`turn_id` in its payload).
fn turn_of(line: &Value) -> Option<&str> {
    line.pointer("/payload/turn_id").and_then(Value::as_str)
}

/// The turn that took the message at `at`: named on its own line, else the last turn begun
/// before it.
fn turn_at(lines: &[Value], at: usize) -> Option<String> {
    if let Some(t) = lines[at]
        .pointer("/payload/internal_chat_message_metadata_passthrough/turn_id")
        .and_then(Value::as_str)
    {
        return Some(t.to_owned());
    }
    lines[..at].iter().rev().find_map(|l| {
        let begins = matches!(event(l), Some(("task_started", _)))
            || l.get("type").and_then(Value::as_str) == Some("turn_context");
        begins.then(|| turn_of(l)).flatten().map(str::to_owned)
    })
}

/// The chat items of a completed item, as the live protocol records them
/// (`protocol::notifications`: `assistant`; `tool_use` and `tool_result`).
fn chat_of(item: &Value) -> Vec<ChatPayload> {
    let chat = |kind, payload| ChatPayload { kind, payload };
    let id = item.get("id");
    match item.get("type").and_then(Value::as_str) {
        Some("AgentMessage") => {
            let text: String = item
                .get("content")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|c| c.get("text").and_then(Value::as_str))
                .collect();
            vec![chat("assistant", json!({ "text": text }))]
        }
        Some("CommandExecution") => {
            let command = match item.get("command") {
                Some(Value::Array(words)) => json!(
                    words
                        .iter()
                        .filter_map(Value::as_str)
                        .collect::<Vec<_>>()
                        .join(" ")
                ),
                other => other.cloned().unwrap_or(Value::Null),
            };
            let cwd = item
                .get("cwd")
                .and_then(Value::as_str)
                .map(|c| c.strip_prefix("file://").unwrap_or(c).to_owned());
            let status = item.get("status").and_then(Value::as_str);
            let exit = item.get("exit_code").and_then(Value::as_i64);
            vec![
                chat(
                    "tool_use",
                    json!({"id": id, "name": "commandExecution",
                           "input": {"command": command, "cwd": cwd}}),
                ),
                chat(
                    "tool_result",
                    json!({"tool_use_id": id, "content": item.get("aggregated_output"),
                           "is_error": status != Some("completed") || exit.is_some_and(|c| c != 0),
                           "status": status, "exit_code": exit}),
                ),
            ]
        }
        Some("FileChange") => {
            let status = item.get("status").and_then(Value::as_str);
            vec![
                chat(
                    "tool_use",
                    json!({"id": id, "name": "fileChange",
                           "input": {"changes": item.get("changes")}}),
                ),
                chat(
                    "tool_result",
                    json!({"tool_use_id": id, "content": item.get("changes"),
                           "is_error": status != Some("completed"), "status": status,
                           "exit_code": null}),
                ),
            ]
        }
        // Recorded as the app-server tells it (`status` `completed` or `failed`, `result` with
        // `content` and `isError`), under the rollout's own type name.
        Some("McpToolCall") => vec![
            chat("tool_use", super::protocol::mcp_tool_use(item)),
            chat("tool_result", super::protocol::mcp_tool_result(item)),
        ],
        _ => Vec::new(),
    }
}

/// Reads a thread's history `lines` (one JSON text each, oldest first: [`super::rollout::history`])
/// for the newest user message that is `text`, written at or after `since` (less
/// [`crate::runtime::jsonl::CLOCK_SLACK`]), and its turn: the answer's chat items, whether the
/// turn ended answered (`task_complete` without an error), whether a tool was called, and the
/// cut that drops the turn ([`Cut::BeforeTurn`]; `None` when no turn is named). `None` when no
/// such message is there. Lines that are not JSON objects are stepped over.
pub fn read_lines<'a>(
    lines: impl Iterator<Item = &'a str>,
    text: &str,
    since: SystemTime,
) -> Option<TakenTurn> {
    let parsed: Vec<Value> = lines
        .filter_map(|l| crate::runtime::json_line::parse(l.as_bytes()).ok())
        .filter(Value::is_object)
        .collect();
    let at = parsed
        .iter()
        .rposition(|v| is_the_message(v, text) && written_since(v, since))?;
    let turn = turn_at(&parsed, at);
    let mut taken = TakenTurn {
        cut: turn.clone().map(|turn_id| Cut::BeforeTurn { turn_id }),
        answer: Vec::new(),
        answered: false,
        tool_called: false,
    };
    let ours = |v: &Value| turn.is_none() || turn_of(v) == turn.as_deref();
    for v in &parsed[at + 1..] {
        match event(v) {
            Some(("task_started", _)) if !ours(v) => break,
            Some(("item_completed", p)) if ours(v) => {
                let item = p.get("item").unwrap_or(&Value::Null);
                let chat = chat_of(item);
                taken.tool_called |= chat.iter().any(|c| c.kind == "tool_use");
                taken.answer.extend(chat);
            }
            Some(("task_complete", p)) if ours(v) => {
                taken.answered = p.get("error").is_none_or(Value::is_null);
                break;
            }
            Some(("turn_aborted", _)) if ours(v) => break,
            Some(_) => {}
            None => {
                let call = v.get("type").and_then(Value::as_str) == Some("response_item")
                    && v.pointer("/payload/type")
                        .and_then(Value::as_str)
                        .is_some_and(|t| t.ends_with("_call"));
                taken.tool_called |= call;
            }
        }
    }
    Some(taken)
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: &str = "2026-12-04T17:55:15.000Z";
    const T1: &str = "2026-12-04T17:55:20.000Z";

    fn since() -> SystemTime {
        humantime::parse_rfc3339("2026-12-04T17:55:19Z").unwrap()
    }

    fn started(turn: &str, at: &str) -> String {
        json!({"timestamp": at, "type": "event_msg",
               "payload": {"type": "task_started", "turn_id": turn}})
        .to_string()
    }

    fn user(turn: &str, text: &str, at: &str) -> String {
        json!({"timestamp": at, "type": "response_item", "payload": {
            "type": "message", "role": "user",
            "content": [{"type": "input_text", "text": text}],
            "internal_chat_message_metadata_passthrough": {"turn_id": turn}}})
        .to_string()
    }

    fn completed(turn: &str, item: Value) -> String {
        json!({"timestamp": T1, "type": "event_msg",
               "payload": {"type": "item_completed", "turn_id": turn, "item": item}})
        .to_string()
    }

    fn agent(turn: &str, text: &str) -> String {
        completed(
            turn,
            json!({"type": "AgentMessage", "id": "m", "content": [{"type": "Text", "text": text}]}),
        )
    }

    fn done(turn: &str, error: Value) -> String {
        json!({"timestamp": T1, "type": "event_msg",
               "payload": {"type": "task_complete", "turn_id": turn, "error": error}})
        .to_string()
    }

    fn read_all(lines: &[String], text: &str) -> Option<TakenTurn> {
        read_lines(lines.iter().map(String::as_str), text, since())
    }

    fn before(turn: &str) -> Option<Cut> {
        Some(Cut::BeforeTurn {
            turn_id: turn.into(),
        })
    }

    #[test]
    fn a_whole_answer_is_read_with_its_turn() {
        let lines = [
            started("a", T0),
            user("a", "hello", T0),
            agent("a", "hi"),
            done("a", Value::Null),
            started("b", T1),
            user("b", "run it", T1),
            json!({"timestamp": T1, "type": "response_item",
                   "payload": {"type": "function_call", "name": "exec_command"}})
            .to_string(),
            completed(
                "b",
                json!({"type": "CommandExecution", "id": "call_6",
                       "command": ["/bin/bash", "-lc", "echo hi"], "cwd": "file:///w",
                       "status": "completed", "aggregated_output": "hi\n", "exit_code": 0}),
            ),
            agent("b", "Command finished."),
            done("b", Value::Null),
            "not json".to_owned(),
        ];
        let t = read_all(&lines, "run it").unwrap();
        assert!(t.answered && t.tool_called);
        assert_eq!(t.cut, before("b"));
        let kinds: Vec<&str> = t.answer.iter().map(|c| c.kind).collect();
        assert_eq!(kinds, ["tool_use", "tool_result", "assistant"]);
        assert_eq!(
            t.answer[0].payload["input"]["command"],
            "/bin/bash -lc echo hi"
        );
        assert_eq!(t.answer[0].payload["input"]["cwd"], "/w");
        assert_eq!(t.answer[1].payload["content"], "hi\n");
        assert_eq!(t.answer[1].payload["is_error"], false);
        assert_eq!(t.answer[2].payload["text"], "Command finished.");
        let first = read_lines(
            lines.iter().map(String::as_str),
            "hello",
            SystemTime::UNIX_EPOCH,
        );
        let first = first.unwrap();
        assert!(first.answered && !first.tool_called);
        assert_eq!(first.answer.len(), 1, "the next turn is not its answer");
    }

    #[test]
    fn a_turn_killed_while_the_model_answers_is_taken_and_unanswered() {
        let lines = [started("k", T1), user("k", "doomed", T1)];
        let t = read_all(&lines, "doomed").unwrap();
        assert_eq!(t.cut, before("k"));
        assert!(!t.answered && !t.tool_called && t.answer.is_empty());
        // A whole message of the model, its stream not ended: read, but not an answer.
        let lines = [lines[0].clone(), lines[1].clone(), agent("k", "partly")];
        let t = read_all(&lines, "doomed").unwrap();
        assert!(!t.answered);
        assert_eq!(t.answer.len(), 1);
    }

    #[test]
    fn an_aborted_or_failed_turn_is_not_answered() {
        let aborted = json!({"timestamp": T1, "type": "event_msg",
                             "payload": {"type": "turn_aborted", "turn_id": "k"}})
        .to_string();
        let lines = [started("k", T1), user("k", "x", T1), aborted];
        assert!(!read_all(&lines, "x").unwrap().answered);
        let lines = [
            started("k", T1),
            user("k", "x", T1),
            done("k", json!({"message": "high demand"})),
        ];
        assert!(!read_all(&lines, "x").unwrap().answered);
    }

    #[test]
    fn the_turn_is_the_last_one_begun_when_the_message_does_not_name_it() {
        let bare = json!({"timestamp": T1, "type": "response_item", "payload": {
            "type": "message", "role": "user",
            "content": [{"type": "input_text", "text": "x"}]}})
        .to_string();
        let lines = [started("k", T1), bare.clone()];
        assert_eq!(read_all(&lines, "x").unwrap().cut, before("k"));
        assert_eq!(read_all(&[bare], "x").unwrap().cut, None);
    }

    #[test]
    fn an_older_message_or_another_text_is_not_it_and_the_newest_is() {
        let lines = [started("a", T0), user("a", "same", T0)];
        assert_eq!(
            read_all(&lines, "same"),
            None,
            "written before the delivery"
        );
        assert_eq!(read_all(&lines, "other"), None);
        let lines = [
            started("a", T1),
            user("a", "again", T1),
            started("b", T1),
            user("b", "again", T1),
            agent("b", "yes"),
            done("b", Value::Null),
        ];
        let t = read_all(&lines, "again").unwrap();
        assert!(t.answered);
        assert_eq!(t.cut, before("b"));
    }

    #[test]
    fn the_cut_is_stored_beside_the_others_in_turns_redo_cut() {
        let cut = before("01a24232-339d").unwrap();
        let stored = serde_json::to_string(&cut).unwrap();
        assert_eq!(stored, r#"{"before_turn":{"turn_id":"01a24232-339d"}}"#);
        assert_eq!(serde_json::from_str::<Cut>(&stored).unwrap(), cut);
        let older: Cut = serde_json::from_str(r#"{"at":{"at":"p","drops":"u"}}"#).unwrap();
        assert_eq!(
            older,
            Cut::At {
                at: "p".into(),
                drops: "u".into()
            }
        );
        assert_eq!(
            serde_json::from_str::<Cut>(r#""whole""#).unwrap(),
            Cut::Whole
        );
    }
}
