//! What a Claude Code transcript holds of one message botvisor wrote: the line it became, where
//! the conversation can be cut to drop it, and the answer written after it (issue 25: an answer
//! the CLI recorded and botvisor did not; a message taken and never answered).
//!
//! Seen on 2.1.328 (tests/facts/claude.rs `what_a_turn_leaves_in_the_transcript`): lines chain by
//! `uuid` and `parentUuid`; a conversation's first `user` line has `parentUuid: null`; a turn's
//! answer is the chain of `assistant` lines (one per content block; a tool call's has
//! `message.stop_reason` `"tool_use"`) and `user` lines of `tool_result` blocks after it, and a
//! whole turn ends with an `assistant` line whose `stop_reason` is another (`"end_turn"`); a turn
//! killed while the model answers leaves no `assistant` line. Other lines (`attachment`,
//! `system`, …) may sit in the chain and are stepped over. A truncating resume leaves the
//! dropped line where it was and starts a second branch from its parent, so the answer is read
//! along the branch of the newest line that is the message.

use std::collections::HashMap;
use std::path::Path;
use std::time::SystemTime;

use serde_json::Value;

use super::events::parse_line;
use crate::runtime::jsonl::written_since;
use crate::runtime::{ChatPayload, Cut, RuntimeEvent, TakenTurn};

/// Whether `line` is the user's message `text` (not a replay, not a tool result).
pub(super) fn is_the_message(line: &Value, text: &str) -> bool {
    if line.get("type").and_then(Value::as_str) != Some("user")
        || line.get("isMeta").and_then(Value::as_bool) == Some(true)
    {
        return false;
    }
    match line.pointer("/message/content") {
        Some(Value::String(s)) => s == text,
        Some(Value::Array(blocks)) => {
            blocks
                .iter()
                .all(|b| b.get("type").and_then(Value::as_str) == Some("text"))
                && blocks
                    .iter()
                    .any(|b| b.get("text").and_then(Value::as_str) == Some(text))
        }
        _ => false,
    }
}

/// Whether a `user` line is a prompt of its own (the next turn's message), not a tool's result
/// or a line the CLI adds (`isMeta`).
fn is_a_prompt(line: &Value) -> bool {
    if line.get("isMeta").and_then(Value::as_bool) == Some(true) {
        return false;
    }
    match line.pointer("/message/content") {
        Some(Value::String(_)) => true,
        Some(Value::Array(blocks)) => blocks
            .iter()
            .all(|b| b.get("type").and_then(Value::as_str) != Some("tool_result")),
        _ => false,
    }
}

/// Reads the transcript's `lines` (one JSON text each) for the newest user line that is `text`,
/// written at or after `since` (less [`crate::runtime::jsonl::CLOCK_SLACK`]), and what follows it on its branch. `None`
/// when no such line exists. Lines that are not JSON objects are stepped over.
pub fn read_lines<'a>(
    lines: impl Iterator<Item = &'a str>,
    text: &str,
    since: SystemTime,
) -> Option<TakenTurn> {
    let parsed: Vec<(&str, Value)> = lines
        .filter_map(|l| {
            crate::runtime::json_line::parse(l.as_bytes())
                .ok()
                .map(|v| (l, v))
        })
        .filter(|(_, v)| v.is_object())
        .collect();
    let at = parsed
        .iter()
        .rposition(|(_, v)| is_the_message(v, text) && written_since(v, since))?;
    let prompt = &parsed[at].1;
    let uuid = prompt.get("uuid").and_then(Value::as_str);
    let cut = match (uuid, prompt.get("parentUuid")) {
        (Some(u), Some(Value::String(p))) => Some(Cut::At {
            at: p.clone(),
            drops: u.to_owned(),
        }),
        (Some(_), Some(Value::Null) | None) => Some(Cut::Whole),
        _ => None,
    };
    // The newest child of each line, after the message.
    let mut child: HashMap<&str, usize> = HashMap::new();
    for (i, (_, v)) in parsed.iter().enumerate().skip(at + 1) {
        if let Some(p) = v.get("parentUuid").and_then(Value::as_str) {
            child.insert(p, i);
        }
    }
    let mut taken = TakenTurn {
        cut,
        answer: Vec::new(),
        answered: false,
        tool_called: false,
    };
    let mut current = uuid;
    while let Some(i) = current.and_then(|u| child.get(u)).copied() {
        let (raw, v) = &parsed[i];
        match v.get("type").and_then(Value::as_str) {
            // The CLI's own reply to a failed request (a usage limit, an expired login, an API
            // error) never reached the model: it is no answer.
            Some("assistant") if super::events::is_synthetic(v) => {}
            Some("assistant") => {
                let chat = chat_of(raw);
                taken.tool_called |= chat.iter().any(|c| c.kind == "tool_use");
                taken.answered = v
                    .pointer("/message/stop_reason")
                    .and_then(Value::as_str)
                    .is_some_and(|r| r != "tool_use")
                    && !chat.iter().any(|c| c.kind == "tool_use");
                taken.answer.extend(chat);
            }
            Some("user") if is_a_prompt(v) => break,
            Some("user") => {
                let chat = chat_of(raw);
                if !chat.is_empty() {
                    taken.answered = false;
                    taken.tool_called = true;
                }
                taken.answer.extend(chat);
            }
            _ => {}
        }
        current = v.get("uuid").and_then(Value::as_str);
    }
    Some(taken)
}

fn chat_of(raw: &str) -> Vec<ChatPayload> {
    parse_line(raw.as_bytes())
        .into_iter()
        .filter_map(|e| match e {
            RuntimeEvent::Chat(c) => Some(c),
            _ => None,
        })
        .collect()
}

/// [`read_lines`] of the transcript at `path`; `None` when it cannot be read.
pub fn read(path: &Path, text: &str, since: SystemTime) -> Option<TakenTurn> {
    let content = std::fs::read_to_string(path).ok()?;
    read_lines(content.lines(), text, since)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const T0: &str = "2026-12-03T10:00:00.000Z";
    const T1: &str = "2026-12-03T10:00:05.000Z";

    fn user(uuid: &str, parent: Option<&str>, text: &str, at: &str) -> String {
        json!({"type":"user","uuid":uuid,"parentUuid":parent,"timestamp":at,
               "message":{"role":"user","content":text}})
        .to_string()
    }

    fn assistant(uuid: &str, parent: &str, block: Value, stop: Option<&str>) -> String {
        json!({"type":"assistant","uuid":uuid,"parentUuid":parent,"timestamp":T1,
               "message":{"role":"assistant","content":[block],"stop_reason":stop}})
        .to_string()
    }

    fn result(uuid: &str, parent: &str) -> String {
        json!({"type":"user","uuid":uuid,"parentUuid":parent,"timestamp":T1,
               "message":{"role":"user","content":[
                   {"type":"tool_result","tool_use_id":"t1","content":"ok"}]}})
        .to_string()
    }

    fn since() -> SystemTime {
        humantime::parse_rfc3339("2026-12-03T10:00:04Z").unwrap()
    }

    fn read_all(lines: &[String], text: &str) -> Option<TakenTurn> {
        read_lines(lines.iter().map(String::as_str), text, since())
    }

    #[test]
    fn a_whole_answer_is_read_along_its_chain() {
        let lines = [
            user("u0", None, "first", T0),
            assistant(
                "a0",
                "u0",
                json!({"type":"text","text":"hi"}),
                Some("end_turn"),
            ),
            user("u1", Some("a0"), "write it", T1),
            json!({"type":"attachment","uuid":"x1","parentUuid":"u1"}).to_string(),
            assistant(
                "a1",
                "x1",
                json!({"type":"tool_use","id":"t1","name":"Write","input":{}}),
                Some("tool_use"),
            ),
            result("r1", "a1"),
            assistant(
                "a2",
                "r1",
                json!({"type":"text","text":"done"}),
                Some("end_turn"),
            ),
            "not json".to_owned(),
        ];
        let t = read_all(&lines, "write it").unwrap();
        let first = read_lines(
            lines.iter().map(String::as_str),
            "first",
            SystemTime::UNIX_EPOCH,
        );
        let first = first.unwrap();
        assert_eq!(first.answer.len(), 1, "the next prompt ends the answer");
        assert!(first.answered && !first.tool_called);
        assert!(t.answered && t.tool_called);
        assert_eq!(
            t.cut,
            Some(Cut::At {
                at: "a0".into(),
                drops: "u1".into()
            })
        );
        let kinds: Vec<&str> = t.answer.iter().map(|c| c.kind).collect();
        assert_eq!(kinds, ["tool_use", "tool_result", "assistant"]);
        assert_eq!(t.answer[2].payload["text"], "done");
    }

    #[test]
    fn a_message_killed_before_its_answer_is_taken_and_unanswered() {
        let lines = [user("u0", None, "doomed", T1)];
        let t = read_all(&lines, "doomed").unwrap();
        assert_eq!(t.cut, Some(Cut::Whole), "a first message has no parent");
        assert!(!t.answered && !t.tool_called && t.answer.is_empty());
    }

    #[test]
    fn a_tool_call_without_the_final_answer_is_not_answered() {
        let lines = [
            user("u0", Some("p"), "go", T1),
            assistant(
                "a1",
                "u0",
                json!({"type":"tool_use","id":"t1","name":"Bash","input":{}}),
                Some("tool_use"),
            ),
        ];
        let t = read_all(&lines, "go").unwrap();
        assert!(!t.answered && t.tool_called);
        let lines = [lines[0].clone(), lines[1].clone(), result("r1", "a1")];
        let t = read_all(&lines, "go").unwrap();
        assert!(!t.answered && t.tool_called);
    }

    #[test]
    fn an_older_message_or_another_text_is_not_it() {
        let lines = [user("u0", Some("p"), "same", T0)];
        assert_eq!(
            read_all(&lines, "same"),
            None,
            "written before the delivery"
        );
        let lines = [user("u0", Some("p"), "same", T1)];
        assert_eq!(read_all(&lines, "other"), None);
    }

    #[test]
    fn a_redone_message_is_read_on_its_new_branch() {
        let lines = [
            user("u1", Some("a0"), "again", T1),
            user("u2", Some("a0"), "again", T1),
            assistant(
                "a2",
                "u2",
                json!({"type":"text","text":"yes"}),
                Some("end_turn"),
            ),
        ];
        let t = read_all(&lines, "again").unwrap();
        assert!(t.answered);
        assert_eq!(
            t.cut,
            Some(Cut::At {
                at: "a0".into(),
                drops: "u2".into()
            })
        );
    }
}
