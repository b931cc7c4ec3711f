//! The threads Codex keeps for a folder (issue 28), read from the rollouts that exist, as its
//! own picker (`codex resume`) lists them: every root rollout under `$CODEX_HOME/sessions/`
//! ([`super::rollout`]) whose first line, `session_meta`, names the folder as its `cwd`. Seen on
//! 0.171.0: what the user typed and what the model answered are `event_msg` `item_completed`
//! records, `item.type` `UserMessage` (`content[]` `{type: "text", text}`) and `AgentMessage`
//! (`content[]` `{type: "Text", text}`); the `response_item` messages also hold the context
//! Codex adds itself (`<environment_context>`, developer instructions), so they are not read.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde_json::{Value, json};

use crate::runtime::{ChatPayload, Conversation};

/// How deep below `sessions/` a rollout is looked for (`YYYY/MM/DD/file` is 4).
const MAX_DEPTH: usize = 6;

/// The most bytes of a rollout read for its title.
const TITLE_READ_BYTES: u64 = 4 * 1024 * 1024;

/// Every root rollout (`rollout-<time>-<id>.jsonl`, no segment, not compressed) under `dir`.
fn roots(dir: &Path, depth: usize, out: &mut Vec<PathBuf>) {
    if depth == 0 {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.filter_map(Result::ok) {
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        let name = entry.file_name().to_string_lossy().into_owned();
        if kind.is_dir() {
            roots(&entry.path(), depth - 1, out);
        } else if kind.is_file() && name.starts_with("rollout-") && name.ends_with(".jsonl") {
            out.push(entry.path());
        }
    }
}

/// The item of an `event_msg` `item_completed` record of type `kind`, if `v` is one.
fn completed<'a>(v: &'a Value, kind: &str) -> Option<&'a Value> {
    (v["type"] == "event_msg" && v["payload"]["type"] == "item_completed")
        .then(|| &v["payload"]["item"])
        .filter(|item| item["type"] == kind)
}

/// The text of a completed item's `content[]`, joined.
fn text_of(item: &Value) -> String {
    item["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["text"].as_str())
        .collect::<Vec<_>>()
        .join("")
}

/// The thread's first user message in the rollout at `path`, read from its start.
fn first_user_text(path: &Path) -> Option<String> {
    use std::io::{BufRead, Read};
    let file = std::fs::File::open(path).ok()?;
    std::io::BufReader::new(file.take(TITLE_READ_BYTES))
        .lines()
        .map_while(Result::ok)
        .filter_map(|l| crate::runtime::json_line::parse(l.as_bytes()).ok())
        .find_map(|v| completed(&v, "UserMessage").map(text_of))
}

/// The thread id and `cwd` of a rollout's first line (`session_meta`).
fn meta(path: &Path) -> Option<(String, String)> {
    use std::io::BufRead;
    let file = std::fs::File::open(path).ok()?;
    let mut first = String::new();
    std::io::BufReader::new(file).read_line(&mut first).ok()?;
    let v: Value = crate::runtime::json_line::parse(first.trim_end().as_bytes()).ok()?;
    if v["type"] != "session_meta" {
        return None;
    }
    Some((
        v["payload"]["id"].as_str()?.to_owned(),
        v["payload"]["cwd"].as_str()?.to_owned(),
    ))
}

/// The threads of `cwd` under `codex_home`: id, when its files were last written, and its
/// first user message (unbounded here). A thread with no user message is left out.
pub fn list(codex_home: &Path, cwd: &Path) -> Vec<Conversation> {
    let mut files = Vec::new();
    roots(&codex_home.join("sessions"), MAX_DEPTH, &mut files);
    let want = cwd.to_string_lossy();
    files
        .into_iter()
        .filter_map(|path| {
            let (id, in_cwd) = meta(&path)?;
            if in_cwd != want {
                return None;
            }
            // A segment's first line is a `session_meta` too: a thread is listed once, by the
            // root file whose name ends with its id.
            let name = path.file_name()?.to_string_lossy().into_owned();
            if !name.ends_with(&format!("-{id}.jsonl")) {
                return None;
            }
            let modified = super::rollout::thread_files(codex_home, &id)
                .iter()
                .filter_map(|f| std::fs::metadata(&f.path).ok()?.modified().ok())
                .max()
                .unwrap_or(SystemTime::UNIX_EPOCH);
            let title = first_user_text(&path)?;
            Some(Conversation {
                session_id: id,
                modified,
                title,
            })
        })
        .collect()
}

/// The thread's earlier turns as chat items, in the order Codex resumes them
/// ([`super::rollout::history`], segments followed): `user` and `assistant` items, each marked
/// `imported: true`.
pub fn history(codex_home: &Path, thread_id: &str) -> Vec<ChatPayload> {
    let Some(text) = super::rollout::history(codex_home, thread_id) else {
        return Vec::new();
    };
    let mut items = Vec::new();
    for line in text.lines() {
        let Ok(v) = crate::runtime::json_line::parse(line.as_bytes()) else {
            continue;
        };
        if let Some(item) = completed(&v, "UserMessage") {
            items.push(ChatPayload {
                kind: "user",
                payload: json!({"text": text_of(item), "imported": true}),
            });
        } else if let Some(item) = completed(&v, "AgentMessage") {
            items.push(ChatPayload {
                kind: "assistant",
                payload: json!({"text": text_of(item), "imported": true}),
            });
        }
    }
    items
}

/// What the rollout file `file` holds past its first `from` bytes, as [`history`] gives it,
/// leaving out each turn whose message is one of `own` with its answer (issue 46: what another
/// process, such as `codex exec resume`, added to the thread). Empty when it cannot be read.
pub fn added_since(file: &Path, from: u64, own: &[String]) -> Vec<ChatPayload> {
    let Ok(bytes) = std::fs::read(file) else {
        return Vec::new();
    };
    let Some(tail) = usize::try_from(from).ok().and_then(|f| bytes.get(f..)) else {
        return Vec::new();
    };
    let mut items = Vec::new();
    let mut skipping = false;
    for line in tail.split(|b| *b == b'\n') {
        let Ok(v) = crate::runtime::json_line::parse(line) else {
            continue;
        };
        if let Some(item) = completed(&v, "UserMessage") {
            let text = text_of(item);
            skipping = own.contains(&text);
            if !skipping {
                items.push(ChatPayload {
                    kind: "user",
                    payload: json!({"text": text, "imported": true}),
                });
            }
        } else if let Some(item) = completed(&v, "AgentMessage")
            && !skipping
        {
            items.push(ChatPayload {
                kind: "assistant",
                payload: json!({"text": text_of(item), "imported": true}),
            });
        }
    }
    items
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rollout_of_the_folder_gives_its_title_and_history() {
        let home = tempfile::tempdir().unwrap();
        let day = home.path().join("sessions/2026/12/04");
        std::fs::create_dir_all(&day).unwrap();
        let id = "01a242f8-4be5-7be1-ae7a-82f68a15ae32";
        let lines = [
            json!({"type": "session_meta", "payload": {"id": id, "cwd": "/w"}}),
            json!({"type": "response_item", "payload": {"type": "message", "role": "user",
                "content": [{"type": "input_text", "text": "<environment_context>"}]}}),
            json!({"type": "event_msg", "payload": {"type": "item_completed",
                "item": {"type": "UserMessage", "content": [{"type": "text", "text": "hi"}]}}}),
            json!({"type": "event_msg", "payload": {"type": "item_completed",
                "item": {"type": "AgentMessage", "content": [{"type": "Text", "text": "yo"}]}}}),
        ];
        let text: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
        std::fs::write(
            day.join(format!("rollout-2026-12-04T21-31-38-{id}.jsonl")),
            text.join("\n") + "\n",
        )
        .unwrap();
        assert!(list(home.path(), Path::new("/other")).is_empty());
        let found = list(home.path(), Path::new("/w"));
        assert_eq!(found.len(), 1);
        assert_eq!(
            (found[0].session_id.as_str(), found[0].title.as_str()),
            (id, "hi")
        );
        let items = history(home.path(), id);
        let shown: Vec<_> = items
            .iter()
            .map(|i| (i.kind, i.payload["text"].as_str().unwrap()))
            .collect();
        assert_eq!(shown, [("user", "hi"), ("assistant", "yo")]);
    }
}
