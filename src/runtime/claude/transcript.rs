//! Where Claude Code keeps a conversation's transcript (claude-code-facts.md, "Conversations and
//! transcripts"):
//!
//! `$CLAUDE_CONFIG_DIR/projects/<slug>/<session-id>.jsonl`, where `CLAUDE_CONFIG_DIR` defaults to
//! `$HOME/.claude` and the slug is the working directory with every character outside
//! `[A-Za-z0-9]` replaced by `-`, one `-` per UTF-16 code unit. A slug over 200 characters is cut
//! to 200 and the CLI appends `-` and a hash that changed between versions, so such a folder is
//! found by its 200-character prefix, never by computing the hash.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The longest slug the CLI uses as it is.
pub const MAX_SLUG_LEN: usize = 200;

/// The CLI's configuration folder for a process started with `env`: `CLAUDE_CONFIG_DIR`, else
/// `$HOME/.claude`. `None` when neither is set.
pub fn config_dir(env: &BTreeMap<String, String>) -> Option<PathBuf> {
    if let Some(dir) = env.get("CLAUDE_CONFIG_DIR").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(dir));
    }
    env.get("HOME")
        .filter(|h| !h.is_empty())
        .map(|home| Path::new(home).join(".claude"))
}

/// The slug of a working directory, uncut.
pub fn slug(cwd: &Path) -> String {
    cwd.to_string_lossy()
        .encode_utf16()
        .map(|unit| match u8::try_from(unit) {
            Ok(b) if b.is_ascii_alphanumeric() => b as char,
            _ => '-',
        })
        .collect()
}

/// The transcript of `session_id` for a CLI started in `cwd`, if it exists now.
pub fn find(config_dir: &Path, cwd: &Path, session_id: &str) -> Option<PathBuf> {
    if session_id.is_empty() || session_id.contains(['/', '\0']) || session_id.starts_with('.') {
        return None;
    }
    let projects = config_dir.join("projects");
    let file = format!("{session_id}.jsonl");
    let slug = slug(cwd);
    if slug.len() <= MAX_SLUG_LEN {
        let path = projects.join(&slug).join(&file);
        return path.is_file().then_some(path);
    }
    let prefix = &slug[..MAX_SLUG_LEN];
    std::fs::read_dir(&projects)
        .ok()?
        .filter_map(Result::ok)
        .filter(|entry| entry.file_name().to_string_lossy().starts_with(prefix))
        .map(|entry| entry.path().join(&file))
        .find(|path| path.is_file())
}

/// Where the CLI started in `cwd` looks for the transcript of `session_id`: where it is, or
/// `<config>/projects/<slug>/<session-id>.jsonl` for a slug of at most [`MAX_SLUG_LEN`]; `None`
/// for a longer slug with no folder yet (its hash is the CLI's) or an id that is not a file name.
pub fn target(config_dir: &Path, cwd: &Path, session_id: &str) -> Option<PathBuf> {
    if session_id.is_empty() || session_id.contains(['/', '\0']) || session_id.starts_with('.') {
        return None;
    }
    if let Some(found) = find(config_dir, cwd, session_id) {
        return Some(found);
    }
    let file = format!("{session_id}.jsonl");
    let slug = slug(cwd);
    let projects = config_dir.join("projects");
    if slug.len() <= MAX_SLUG_LEN {
        return Some(projects.join(slug).join(file));
    }
    let prefix = &slug[..MAX_SLUG_LEN];
    std::fs::read_dir(&projects)
        .ok()?
        .filter_map(Result::ok)
        .find(|entry| entry.file_name().to_string_lossy().starts_with(prefix))
        .map(|entry| entry.path().join(file))
}

/// Whether the transcript at `path` holds a user message with exactly `text`, written at or
/// after `since` (its `timestamp`, less one second for clock rounding). Claude Code writes the
/// user's message into the transcript about 0.1 s after `system`/`init`, before it replays it
/// (seen on 2.1.328), so a message can be in the conversation without a replay.
pub fn has_user_message_since(path: &Path, text: &str, since: std::time::SystemTime) -> bool {
    crate::runtime::jsonl::holds_since(path, since, |v| super::taken::is_the_message(v, text))
}

/// The conversation's cost as its last process recorded it: the `totalCostUSD` (US dollars) of
/// the last `cost-state` line of `session_id` in the transcript `content`.
/// Claude Code 2.1.328 writes one when a process ends and restores its total from it at
/// `--resume`, so a resumed process's first `result` counts from it
/// (tests/facts/claude.rs `a_resumed_process_counts_its_cost_from_the_last_cost_state`).
/// `None` when there is none.
pub fn last_cost(content: &str, session_id: &str) -> Option<f64> {
    content
        .lines()
        .rev()
        .filter(|l| l.contains("\"cost-state\""))
        .filter_map(|l| crate::runtime::json_line::parse(l.as_bytes()).ok())
        .find(|v| {
            v["type"] == "cost-state"
                && v.get("sessionId")
                    .and_then(serde_json::Value::as_str)
                    .is_none_or(|s| s == session_id)
        })
        .and_then(|v| v["totalCostUSD"].as_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slug_replaces_per_utf16_unit() {
        assert_eq!(
            slug(Path::new("/home/u/my proj.v2_x")),
            "-home-u-my-proj-v2-x"
        );
        // é is one UTF-16 unit, the emoji two.
        assert_eq!(slug(Path::new("/a/é/😀")), "-a-----");
    }

    #[test]
    fn config_dir_prefers_claude_config_dir() {
        let mut env = BTreeMap::new();
        assert_eq!(config_dir(&env), None);
        env.insert("HOME".into(), "/h".into());
        assert_eq!(config_dir(&env), Some(PathBuf::from("/h/.claude")));
        env.insert("CLAUDE_CONFIG_DIR".into(), "/c".into());
        assert_eq!(config_dir(&env), Some(PathBuf::from("/c")));
    }

    #[test]
    fn finds_a_user_message_written_since() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.jsonl");
        std::fs::write(
            &path,
            concat!(
                r#"{"type":"queue-operation","content":"hi"}"#,
                "\n",
                r#"{"type":"user","message":{"role":"user","content":"hi"},"timestamp":"2026-11-29T19:51:05.084Z"}"#,
                "\n"
            ),
        )
        .unwrap();
        let before = humantime::parse_rfc3339("2026-11-29T19:51:00Z").unwrap();
        let after = humantime::parse_rfc3339("2026-11-29T19:52:00Z").unwrap();
        assert!(has_user_message_since(&path, "hi", before));
        assert!(
            !has_user_message_since(&path, "hi", after),
            "an older message"
        );
        assert!(!has_user_message_since(&path, "other", before));
        assert!(!has_user_message_since(
            &dir.path().join("none"),
            "hi",
            before
        ));
    }

    #[test]
    fn finds_short_and_long_slugs() {
        let dir = tempfile::tempdir().unwrap();
        let short = Path::new("/w/p");
        std::fs::create_dir_all(dir.path().join("projects/-w-p")).unwrap();
        assert_eq!(find(dir.path(), short, "s1"), None);
        std::fs::write(dir.path().join("projects/-w-p/s1.jsonl"), "{}").unwrap();
        assert!(find(dir.path(), short, "s1").is_some());
        assert_eq!(find(dir.path(), short, "../s1"), None);

        let long = PathBuf::from(format!("/{}", "d".repeat(250)));
        let s = slug(&long);
        let folder = format!("{}-1a2b3c", &s[..MAX_SLUG_LEN]);
        std::fs::create_dir_all(dir.path().join("projects").join(&folder)).unwrap();
        assert_eq!(find(dir.path(), &long, "s2"), None);
        std::fs::write(
            dir.path().join("projects").join(&folder).join("s2.jsonl"),
            "{}",
        )
        .unwrap();
        assert!(find(dir.path(), &long, "s2").is_some());
    }
}
