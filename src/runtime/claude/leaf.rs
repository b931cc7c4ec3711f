//! Where a resume of a Claude Code transcript continues, and how botvisor keeps that on the
//! conversation's newest branch (issue 25).
//!
//! A transcript is a tree: every entry (a line with a `uuid`) names its `parentUuid`. Claude Code
//! 2.1.328 continues a resumed conversation from the leaf its last `last-prompt` record names
//! (`{"type":"last-prompt","lastPrompt":…,"leafUuid":…}`), which it writes at the first prompt
//! of a conversation and when it exits gently. A truncating resume (`--resume-drops-turn`, which
//! botvisor uses to ask a message again) leaves the dropped attempt in the file as a branch of
//! its own; when that attempt was the leaf a gentle stop recorded, and the process that answered
//! it again dies without a gentle exit, the last record still names the dropped attempt. A plain
//! resume then continues the dropped branch (the turns since are gone from what the model is
//! sent) and a truncating resume is refused ("range does not start with the declared turn
//! prompt"): `facts::claude::where_a_resume_continues_after_a_truncating_resume`. With a record
//! naming the newest entry, both resume the newest branch whole.

use serde_json::{Value, json};

/// The longest `lastPrompt` text a record botvisor writes carries (the CLI shows it in its
/// pickers; the resume reads only `leafUuid`).
const LAST_PROMPT_CHARS: usize = 200;

/// The `last-prompt` record to append to the transcript `content` of `session_id` so that a
/// resume continues its newest branch: when the conversation has branches (an entry with two
/// children) and the last record names another entry than the newest one (the last entry in
/// file order, off any side chain). `None` when nothing needs writing.
pub fn record_to_append(content: &str, session_id: &str) -> Option<String> {
    let mut leaf_named: Option<String> = None;
    let mut entries: Vec<(String, Option<String>, Value)> = Vec::new();
    for line in content.lines() {
        let Ok(v) = crate::runtime::json_line::parse(line.as_bytes()) else {
            continue;
        };
        if v.get("type").and_then(Value::as_str) == Some("last-prompt") {
            leaf_named = v.get("leafUuid").and_then(Value::as_str).map(str::to_owned);
            continue;
        }
        if v.get("isSidechain").and_then(Value::as_bool) == Some(true) {
            continue;
        }
        let Some(uuid) = v.get("uuid").and_then(Value::as_str) else {
            continue;
        };
        let parent = v
            .get("parentUuid")
            .and_then(Value::as_str)
            .map(str::to_owned);
        entries.push((uuid.to_owned(), parent, v));
    }
    let leaf_named = leaf_named?;
    let (newest, _, _) = entries.last()?;
    if *newest == leaf_named {
        return None;
    }
    let mut children = std::collections::HashMap::<&str, usize>::new();
    for (_, parent, _) in &entries {
        if let Some(p) = parent {
            *children.entry(p.as_str()).or_default() += 1;
        }
    }
    if !children.values().any(|n| *n > 1) {
        return None;
    }
    Some(
        json!({
            "type": "last-prompt",
            "lastPrompt": last_prompt(&entries),
            "leafUuid": newest,
            "sessionId": session_id,
        })
        .to_string(),
    )
}

/// The newest user prompt on the newest entry's branch, cut to [`LAST_PROMPT_CHARS`].
fn last_prompt(entries: &[(String, Option<String>, Value)]) -> String {
    let by_id: std::collections::HashMap<&str, &(String, Option<String>, Value)> =
        entries.iter().map(|e| (e.0.as_str(), e)).collect();
    let mut at = entries.last();
    let mut steps = 0;
    while let Some((_, parent, v)) = at {
        if v.get("type").and_then(Value::as_str) == Some("user")
            && v.get("isMeta").and_then(Value::as_bool) != Some(true)
        {
            let text = match v.pointer("/message/content") {
                Some(Value::String(s)) => Some(s.as_str()),
                Some(Value::Array(blocks)) => blocks
                    .iter()
                    .find(|b| b.get("type").and_then(Value::as_str) == Some("text"))
                    .and_then(|b| b.get("text").and_then(Value::as_str)),
                _ => None,
            };
            if let Some(t) = text {
                return t.chars().take(LAST_PROMPT_CHARS).collect();
            }
        }
        // A chain that loops (a damaged file) is not followed for ever.
        steps += 1;
        if steps > entries.len() {
            break;
        }
        at = parent.as_deref().and_then(|p| by_id.get(p).copied());
    }
    String::new()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(uuid: &str, parent: Option<&str>, kind: &str, text: &str) -> String {
        json!({"type": kind, "uuid": uuid, "parentUuid": parent,
               "message": {"role": kind, "content": text}})
        .to_string()
    }

    fn record(leaf: &str) -> String {
        json!({"type": "last-prompt", "lastPrompt": "x", "leafUuid": leaf}).to_string()
    }

    /// first → a1 → doomed (d1, dropped) and doomed again (d2) → a2 → second (s).
    fn branched(last_record: &str) -> String {
        [
            entry("u1", None, "user", "first"),
            entry("a1", Some("u1"), "assistant", "answer"),
            entry("d1", Some("a1"), "user", "doomed"),
            record(last_record),
            entry("d2", Some("a1"), "user", "doomed"),
            entry("a2", Some("d2"), "assistant", "answer again"),
            entry("s", Some("a2"), "user", "second"),
        ]
        .join("\n")
    }

    #[test]
    fn a_record_naming_a_dropped_attempt_is_followed_by_one_naming_the_newest_entry() {
        let added = record_to_append(&branched("d1"), "sid").expect("a record");
        let v: Value = serde_json::from_str(&added).unwrap();
        assert_eq!(v["type"], "last-prompt");
        assert_eq!(v["leafUuid"], "s");
        assert_eq!(v["lastPrompt"], "second");
        assert_eq!(v["sessionId"], "sid");
        // Appended, it is the last record: nothing more to write.
        let after = format!("{}\n{added}", branched("d1"));
        assert_eq!(record_to_append(&after, "sid"), None);
    }

    #[test]
    fn a_conversation_without_branches_or_with_a_record_of_its_newest_entry_is_left_alone() {
        let straight = [
            entry("u1", None, "user", "first"),
            record("u1"),
            entry("a1", Some("u1"), "assistant", "answer"),
            entry("u2", Some("a1"), "user", "second"),
        ]
        .join("\n");
        assert_eq!(record_to_append(&straight, "sid"), None);
        assert_eq!(record_to_append(&branched("s"), "sid"), None);
        // No record at all: the CLI picks its own leaf.
        let none = branched("d1")
            .lines()
            .filter(|l| !l.contains("last-prompt"))
            .collect::<Vec<_>>()
            .join("\n");
        assert_eq!(record_to_append(&none, "sid"), None);
    }

    #[test]
    fn damaged_lines_side_chains_and_a_looping_chain_are_read_safely() {
        let text = [
            "not json".to_owned(),
            entry("u1", Some("u2"), "user", "first"),
            entry("u2", Some("u1"), "assistant", "loop"),
            entry("u3", Some("u1"), "assistant", "branch"),
            record("u1"),
            json!({"type": "assistant", "uuid": "side", "parentUuid": "u3", "isSidechain": true})
                .to_string(),
        ]
        .join("\n");
        let added = record_to_append(&text, "sid").expect("a record");
        assert!(added.contains("\"leafUuid\":\"u3\""), "{added}");
    }
}
