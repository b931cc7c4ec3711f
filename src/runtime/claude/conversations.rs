//! The conversations Claude Code keeps for a folder (issue 28), read from the transcripts that
//! exist, as its own picker (`claude --resume`) lists them: every
//! `<config>/projects/<slug>/<session-id>.jsonl` ([`super::transcript`]). Seen on 2.1.328: a
//! transcript's lines are `queue-operation`, `user` (`message.content` a string, or blocks of
//! which `text` is what the user typed and `tool_result` a tool's answer), `attachment`,
//! `assistant` (`message.content` blocks: `text`, `tool_use`, `thinking`) and bookkeeping
//! records; `isMeta` marks lines the CLI wrote for itself and `isSidechain` a subagent's.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::runtime::{ChatPayload, Conversation};

/// The most bytes of a transcript read for its title.
const TITLE_READ_BYTES: u64 = 1024 * 1024;

/// The transcripts of conversations begun in `cwd`, in no order.
fn transcripts(config_dir: &Path, cwd: &Path) -> Vec<PathBuf> {
    let projects = config_dir.join("projects");
    let slug = super::transcript::slug(cwd);
    let folders: Vec<PathBuf> = if slug.len() <= super::transcript::MAX_SLUG_LEN {
        vec![projects.join(&slug)]
    } else {
        let prefix = &slug[..super::transcript::MAX_SLUG_LEN];
        std::fs::read_dir(&projects)
            .map(|d| {
                d.filter_map(Result::ok)
                    .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
                    .map(|e| e.path())
                    .collect()
            })
            .unwrap_or_default()
    };
    folders
        .iter()
        .filter_map(|f| std::fs::read_dir(f).ok())
        .flat_map(|d| d.filter_map(Result::ok))
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl") && p.is_file())
        .collect()
}

/// What the user typed in a `user` line, if it is one (not a tool's answer, not the CLI's own).
fn user_text(v: &Value) -> Option<String> {
    if v["type"] != "user" || v["isMeta"] == true || v["isSidechain"] == true {
        return None;
    }
    match &v["message"]["content"] {
        Value::String(s) => Some(s.clone()),
        Value::Array(blocks) => {
            let texts: Vec<&str> = blocks
                .iter()
                .filter(|b| b["type"] == "text")
                .filter_map(|b| b["text"].as_str())
                .collect();
            (!texts.is_empty()).then(|| texts.join("\n"))
        }
        _ => None,
    }
}

/// The conversations of `cwd` found under the CLI's configuration folder `config_dir`: id, last
/// written, and the first user message as the title (unbounded here; the D-Bus layer bounds
/// and escapes it).
pub fn list(config_dir: &Path, cwd: &Path) -> Vec<Conversation> {
    transcripts(config_dir, cwd)
        .into_iter()
        .filter_map(|path| {
            let id = path.file_stem()?.to_str()?.to_owned();
            let modified = std::fs::metadata(&path).ok()?.modified().ok()?;
            let title = first_user_text(&path)?;
            Some(Conversation {
                session_id: id,
                modified,
                title,
            })
        })
        .collect()
}

/// The first user message of the transcript at `path`; `None` when it holds none (a
/// conversation with no turn cannot be resumed).
fn first_user_text(path: &Path) -> Option<String> {
    use std::io::{BufRead, Read};
    let file = std::fs::File::open(path).ok()?;
    let reader = std::io::BufReader::new(file.take(TITLE_READ_BYTES));
    reader
        .lines()
        .map_while(Result::ok)
        .filter_map(|l| crate::runtime::json_line::parse(l.as_bytes()).ok())
        .find_map(|v| user_text(&v))
}

/// The conversation's earlier turns as chat items, in order along the branch a resume
/// continues: the chain of `parentUuid`s from the newest entry (the last line with a `uuid` off
/// any side chain, where `Runtime::before_resume` makes a resume continue,
/// [`super::leaf`]) back to the first. A dropped attempt left as a branch of its own is not
/// imported. `user` items (what the user typed) and `assistant` items (the model's text), each
/// marked `imported: true`; tool calls, tool answers, the CLI's own lines and subagents' are
/// left out.
pub fn history(path: &Path) -> Vec<ChatPayload> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    chain_items(&text, 0, &[])
}

/// What the transcript at `file` holds past its first `from` bytes along the branch a resume
/// continues, as [`history`] gives it, leaving out each turn whose prompt is one of `own` with
/// its answer (issue 46: what another process added while it held the conversation). Empty when
/// the file cannot be read.
pub fn added_since(file: &Path, from: u64, own: &[String]) -> Vec<ChatPayload> {
    let Ok(text) = std::fs::read_to_string(file) else {
        return Vec::new();
    };
    chain_items(&text, from, own)
}

/// The items of the newest branch of the transcript `text` (see [`history`]) whose lines begin
/// at or after byte `from`, without the turns whose prompt is one of `own`.
fn chain_items(text: &str, from: u64, own: &[String]) -> Vec<ChatPayload> {
    let mut at_byte = 0u64;
    let entries: Vec<(u64, Value)> = text
        .split_inclusive('\n')
        .filter_map(|l| {
            let start = at_byte;
            at_byte += l.len() as u64;
            let v = crate::runtime::json_line::parse(l.trim_end().as_bytes()).ok()?;
            (v["uuid"].is_string() && v["isSidechain"] != true).then_some((start, v))
        })
        .collect();
    let by_id: std::collections::HashMap<&str, usize> = entries
        .iter()
        .enumerate()
        .filter_map(|(i, (_, v))| Some((v["uuid"].as_str()?, i)))
        .collect();
    let mut chain = Vec::new();
    let mut at = entries.len().checked_sub(1);
    while let Some(i) = at {
        if chain.len() > entries.len() {
            break; // a loop of parents: never in a file the CLI wrote
        }
        chain.push(i);
        at = entries[i].1["parentUuid"]
            .as_str()
            .and_then(|p| by_id.get(p).copied());
    }
    chain.reverse();
    let mut items = Vec::new();
    // Inside a turn of the bot's own: its answer is left out with it.
    let mut skipping = false;
    for (start, v) in chain.into_iter().map(|i| &entries[i]) {
        if let Some(t) = user_text(v) {
            skipping = own.iter().any(|o| o == &t);
            if *start >= from && !skipping {
                items.push(ChatPayload {
                    kind: "user",
                    payload: json!({"text": t, "imported": true}),
                });
            }
        } else if v["type"] == "assistant"
            && *start >= from
            && !skipping
            && !super::events::is_cli_message(v)
            && let Some(blocks) = v["message"]["content"].as_array()
        {
            for b in blocks.iter().filter(|b| b["type"] == "text") {
                if let Some(t) = b["text"].as_str() {
                    items.push(ChatPayload {
                        kind: "assistant",
                        payload: json!({"text": t, "imported": true}),
                    });
                }
            }
        }
    }
    items
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transcript_gives_its_title_and_history() {
        let dir = tempfile::tempdir().unwrap();
        let cwd = Path::new("/w/p");
        let folder = dir.path().join("projects").join("-w-p");
        std::fs::create_dir_all(&folder).unwrap();
        let lines = [
            json!({"type": "queue-operation"}),
            json!({"type": "user", "uuid": "m", "isMeta": true, "message": {"role": "user", "content": "meta"}}),
            json!({"type": "user", "uuid": "a", "parentUuid": "m", "message": {"role": "user", "content": "first words"}}),
            json!({"type": "assistant", "uuid": "b", "parentUuid": "a", "message": {"content": [{"type": "text", "text": "hi"}, {"type": "tool_use"}]}}),
            json!({"type": "user", "uuid": "c", "parentUuid": "b", "message": {"content": [{"type": "tool_result", "content": "x"}]}}),
            // A dropped attempt, then the same message asked again from `c`.
            json!({"type": "user", "uuid": "d", "parentUuid": "c", "message": {"content": "dropped"}}),
            json!({"type": "user", "uuid": "e", "parentUuid": "c", "message": {"content": "again"}}),
            json!({"type": "assistant", "uuid": "s", "parentUuid": "e", "isSidechain": true, "message": {"content": [{"type": "text", "text": "side"}]}}),
        ];
        let text: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
        std::fs::write(folder.join("s1.jsonl"), text.join("\n")).unwrap();
        std::fs::write(folder.join("empty.jsonl"), "{}\n").unwrap();
        let found = list(dir.path(), cwd);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].session_id, "s1");
        assert_eq!(found[0].title, "first words");
        let items = history(&folder.join("s1.jsonl"));
        let shown: Vec<_> = items
            .iter()
            .map(|i| (i.kind, i.payload["text"].as_str().unwrap()))
            .collect();
        assert_eq!(
            shown,
            [
                ("user", "first words"),
                ("assistant", "hi"),
                ("user", "again")
            ]
        );
        assert_eq!(items[1].payload["imported"], true);
        // Past the first three lines' bytes: the answer of the bot's own `first words` is left
        // out with it; the prompt another process added is imported.
        let path = folder.join("s1.jsonl");
        let from: usize = text[..3].iter().map(|l| l.len() + 1).sum();
        assert_eq!(
            added_since(&path, from as u64, &["first words".into()])
                .iter()
                .map(|i| (i.kind, i.payload["text"].as_str().unwrap()))
                .collect::<Vec<_>>(),
            [("user", "again")]
        );
        assert_eq!(
            added_since(&path, from as u64, &["again".into()])
                .iter()
                .map(|i| i.payload["text"].as_str().unwrap().to_owned())
                .collect::<Vec<_>>(),
            ["hi"],
            "`again` is the bot's own; the answer past the mark to a prompt before it is not"
        );
        let added = added_since(&path, from as u64, &[]);
        assert_eq!(
            added
                .iter()
                .map(|i| (i.kind, i.payload["text"].as_str().unwrap()))
                .collect::<Vec<_>>(),
            [("assistant", "hi"), ("user", "again")],
            "what began past the mark, in order"
        );
    }
}
