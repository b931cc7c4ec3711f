//! Where Codex keeps a thread (codex-facts.md, "Where conversations live"):
//! `$CODEX_HOME/sessions/YYYY/MM/DD/rollout-YYYY-MM-DDTHH-MM-SS-<thread id>.jsonl`, `CODEX_HOME`
//! defaulting to `$HOME/.codex`. The date folders and the file name use local time, so a thread's
//! rollout is found by its id at any depth under `sessions/`, never by computing the date. The
//! rollout is written at the thread's first turn; it is what a resume needs (the SQLite files
//! beside it are rebuilt).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// How deep below `sessions/` a rollout is looked for (`YYYY/MM/DD/file` is 4).
const MAX_DEPTH: usize = 6;

/// The CLI's home for a process started with `env`: `CODEX_HOME`, else `$HOME/.codex`. `None`
/// when neither is set.
pub fn codex_home(env: &BTreeMap<String, String>) -> Option<PathBuf> {
    if let Some(dir) = env.get("CODEX_HOME").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(dir));
    }
    env.get("HOME")
        .filter(|h| !h.is_empty())
        .map(|home| Path::new(home).join(".codex"))
}

/// The rollout of `thread_id` under `codex_home`, if it exists now.
pub fn find(codex_home: &Path, thread_id: &str) -> Option<PathBuf> {
    if thread_id.is_empty()
        || thread_id.contains(['/', '\0', '*', '?'])
        || thread_id.starts_with('.')
    {
        return None;
    }
    let suffix = format!("-{thread_id}.jsonl");
    find_in(&codex_home.join("sessions"), &suffix, MAX_DEPTH)
}

fn find_in(dir: &Path, suffix: &str, depth: usize) -> Option<PathBuf> {
    if depth == 0 {
        return None;
    }
    let mut dirs = Vec::new();
    for entry in std::fs::read_dir(dir).ok()?.filter_map(Result::ok) {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            dirs.push(entry.path());
        } else if kind.is_file() && name.starts_with("rollout-") && name.ends_with(suffix) {
            return Some(entry.path());
        }
    }
    // Newest date folders first: a recent thread is found sooner.
    dirs.sort_unstable_by(|a, b| b.cmp(a));
    dirs.into_iter()
        .find_map(|d| find_in(&d, suffix, depth - 1))
}

/// Whether the rollout at `path` holds a user message with exactly `text`, written at or after
/// `since` (its `timestamp`, less one second for clock rounding): a `response_item` whose
/// payload is a `message` of role `user` with an `input_text` block of that text. Codex writes it
/// when the turn begins, before the model is asked.
pub fn has_user_message_since(path: &Path, text: &str, since: std::time::SystemTime) -> bool {
    use serde_json::Value;
    crate::runtime::jsonl::holds_since(path, since, |v| {
        if v.get("type").and_then(Value::as_str) != Some("response_item") {
            return false;
        }
        let Some(p) = v.get("payload") else {
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
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codex_home_prefers_the_variable() {
        let mut env = BTreeMap::new();
        assert_eq!(codex_home(&env), None);
        env.insert("HOME".into(), "/h".into());
        assert_eq!(codex_home(&env), Some(PathBuf::from("/h/.codex")));
        env.insert("CODEX_HOME".into(), "/c".into());
        assert_eq!(codex_home(&env), Some(PathBuf::from("/c")));
    }

    #[test]
    fn finds_a_rollout_by_id_in_any_date_folder() {
        let dir = tempfile::tempdir().unwrap();
        let id = "01a22d24-46ba-7eb2-bfc9-beef5534cb13";
        assert_eq!(find(dir.path(), id), None);
        // A folder of another day than today, as a time zone change makes it.
        let day = dir.path().join("sessions/1999/12/31");
        std::fs::create_dir_all(&day).unwrap();
        std::fs::write(day.join("rollout-1999-12-31T23-59-59-other.jsonl"), "{}").unwrap();
        assert_eq!(find(dir.path(), id), None);
        let file = day.join(format!("rollout-1999-12-31T23-59-59-{id}.jsonl"));
        std::fs::write(&file, "{}").unwrap();
        assert_eq!(find(dir.path(), id), Some(file));
        assert_eq!(find(dir.path(), "*"), None);
        assert_eq!(find(dir.path(), "../x"), None);
        assert_eq!(find(dir.path(), ""), None);
    }

    #[test]
    fn finds_the_user_message_written_since() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.jsonl");
        std::fs::write(
            &path,
            concat!(
                r#"{"timestamp":"2026-11-30T15:48:01.890Z","type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"<environment_context>"}]}}"#,
                "\n",
                r#"{"timestamp":"2026-11-30T15:48:01.902Z","type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"hi"}]}}"#,
                "\n",
                r#"{"timestamp":"2026-11-30T15:48:02.021Z","type":"response_item","payload":{"type":"message","role":"assistant","content":[{"type":"output_text","text":"other"}]}}"#,
                "\n"
            ),
        )
        .unwrap();
        let before = humantime::parse_rfc3339("2026-11-30T15:48:00Z").unwrap();
        let after = humantime::parse_rfc3339("2026-11-30T15:49:00Z").unwrap();
        assert!(has_user_message_since(&path, "hi", before));
        assert!(!has_user_message_since(&path, "hi", after));
        assert!(
            !has_user_message_since(&path, "other", before),
            "the assistant's"
        );
        assert!(!has_user_message_since(
            &dir.path().join("none"),
            "hi",
            before
        ));
    }
}
