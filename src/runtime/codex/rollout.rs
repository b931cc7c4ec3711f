//! Where Codex keeps a thread (codex-facts.md, "Where conversations live", re-measured on
//! 0.171.0 by tests/facts/codex.rs): `$CODEX_HOME/sessions/YYYY/MM/DD/`, `CODEX_HOME` defaulting
//! to `$HOME/.codex`. The date folders and the file names use local time, so a thread's files are
//! found by its id at any depth under `sessions/`, never by computing the date.
//!
//! A thread is one or more files (`a_taken_message_is_asked_again_once_after_thread_revert`):
//! - its root, `rollout-<time>-<thread id>.jsonl`, written at the thread's first turn;
//! - a segment per `thread/revert`, `rollout-<time>-<thread id>_<segment id>.jsonl` (the segment
//!   id a UUIDv7, so later segments sort after earlier ones), whose first line's
//!   `payload.history_base` `{thread_id, end_byte_offset}` names the file it continues (the
//!   thread id: the root; else that segment) and how many of its bytes are the history before
//!   the segment's own lines. Codex resumes the newest segment (the `path` `thread/resume`
//!   answers).
//!
//! Any of them may be held compressed as `<name>.zst` (`rollout/compress` of a rollout not
//! written for about a week; `thread/resume` writes the `.jsonl` back, byte for byte:
//! `codex_clean_up_compresses_cold_rollouts_and_deletes_only_when_asked`), and an archived
//! thread's files sit in `$CODEX_HOME/archived_sessions/`. The SQLite files beside them are an
//! index Codex rebuilds: the rollout is what a resume needs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;
/// How deep below `sessions/` a rollout is looked for (`YYYY/MM/DD/file` is 4).
const MAX_DEPTH: usize = 6;

/// The most files a thread's history is followed through (segments on segments).
const MAX_CHAIN: usize = 1000;

/// The suffix of a compressed rollout.
pub const COMPRESSED: &str = ".zst";

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

/// One file of a thread, found on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadFile {
    /// Where it is.
    pub path: PathBuf,
    /// The segment id (`None`: the thread's root file).
    pub segment: Option<String>,
    /// Held compressed (`.jsonl.zst`).
    pub compressed: bool,
}

/// Whether `thread_id` can name files: not empty, no path separator or glob character, not
/// starting with `.`.
fn usable(thread_id: &str) -> bool {
    !thread_id.is_empty()
        && !thread_id.contains(['/', '\0', '*', '?'])
        && !thread_id.starts_with('.')
}

/// What the file name `name` is of `thread_id`: `Some((segment, compressed))` when it is one of
/// its rollout files, `None` otherwise.
pub fn name_of(name: &str, thread_id: &str) -> Option<(Option<String>, bool)> {
    let rest = name.strip_prefix("rollout-")?;
    let (rest, compressed) = match rest.strip_suffix(COMPRESSED) {
        Some(r) => (r, true),
        None => (rest, false),
    };
    let rest = rest.strip_suffix(".jsonl")?;
    if rest.ends_with(&format!("-{thread_id}")) {
        return Some((None, compressed));
    }
    let (before, segment) = rest.rsplit_once('_')?;
    (before.ends_with(&format!("-{thread_id}")) && usable(segment) && !segment.contains('_'))
        .then(|| (Some(segment.to_owned()), compressed))
}

/// Every file of `thread_id` in `dir` and the folders below it (at most `depth` levels).
fn collect(dir: &Path, thread_id: &str, depth: usize, out: &mut Vec<ThreadFile>) {
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
        if kind.is_dir() {
            collect(&entry.path(), thread_id, depth - 1, out);
        } else if kind.is_file()
            && let Some((segment, compressed)) =
                name_of(&entry.file_name().to_string_lossy(), thread_id)
        {
            out.push(ThreadFile {
                path: entry.path(),
                segment,
                compressed,
            });
        }
    }
}

/// The files of `thread_id` under `codex_home/sessions`, in no particular order; empty for an
/// id that cannot name files.
pub fn thread_files(codex_home: &Path, thread_id: &str) -> Vec<ThreadFile> {
    let mut out = Vec::new();
    if usable(thread_id) {
        collect(&codex_home.join("sessions"), thread_id, MAX_DEPTH, &mut out);
    }
    out
}

/// The file Codex resumes `thread_id` from, among `files`: the newest segment (the greatest
/// segment id), else the root; a plain file before a compressed one of the same name.
pub fn head(files: &[ThreadFile]) -> Option<&ThreadFile> {
    files
        .iter()
        .max_by(|a, b| (&a.segment, !a.compressed).cmp(&(&b.segment, !b.compressed)))
}

/// The rollout of `thread_id` under `codex_home` that Codex resumes from now ([`head`]), plain or
/// compressed; else its archived file in `archived_sessions/` (Codex refuses to resume it until
/// it is unarchived). `None` when it has none.
pub fn find(codex_home: &Path, thread_id: &str) -> Option<PathBuf> {
    if let Some(h) = head(&thread_files(codex_home, thread_id)) {
        return Some(h.path.clone());
    }
    archived(codex_home, thread_id)
}

/// The archived file of `thread_id` (`$CODEX_HOME/archived_sessions/rollout-…-<id>.jsonl`, where
/// `codex archive` and `thread/archive` move it), if any.
pub fn archived(codex_home: &Path, thread_id: &str) -> Option<PathBuf> {
    if !usable(thread_id) {
        return None;
    }
    let mut out = Vec::new();
    collect(
        &codex_home.join("archived_sessions"),
        thread_id,
        2,
        &mut out,
    );
    out.into_iter().map(|f| f.path).max()
}

/// The `history_base` of a segment's first line: the id of the file it continues and how many of
/// that file's bytes come before the segment.
fn history_base(first_line: &str) -> Option<(String, u64)> {
    let v: Value = crate::runtime::json_line::parse(first_line.as_bytes()).ok()?;
    let base = v.pointer("/payload/history_base")?;
    Some((
        base.get("thread_id")?.as_str()?.to_owned(),
        base.get("end_byte_offset")?.as_u64()?,
    ))
}

/// The thread's history as Codex resumes it, oldest line first: the head file's lines after the
/// bytes of the files it continues, each cut at its `end_byte_offset`. `None` when the head or a
/// file it continues is missing, compressed or unreadable, or the chain is longer than
/// [`MAX_CHAIN`] or loops.
pub fn history(codex_home: &Path, thread_id: &str) -> Option<String> {
    let files = thread_files(codex_home, thread_id);
    let mut current = head(&files)?.clone();
    let mut parts: Vec<String> = Vec::new();
    let mut end: Option<u64> = None;
    for _ in 0..MAX_CHAIN {
        if current.compressed {
            return None;
        }
        let bytes = std::fs::read(&current.path).ok()?;
        let upto = end.map_or(bytes.len(), |e| (e as usize).min(bytes.len()));
        let text = String::from_utf8_lossy(&bytes[..upto]).into_owned();
        let base = current
            .segment
            .as_ref()
            .and_then(|_| history_base(text.lines().next().unwrap_or_default()));
        parts.push(text);
        let Some((base_id, base_end)) = base else {
            parts.reverse();
            return Some(parts.concat());
        };
        let next = if base_id == thread_id {
            files
                .iter()
                .filter(|f| f.segment.is_none())
                .min_by_key(|f| f.compressed)
        } else {
            files
                .iter()
                .filter(|f| f.segment.as_deref() == Some(base_id.as_str()))
                .min_by_key(|f| f.compressed)
        };
        current = next?.clone();
        end = Some(base_end);
    }
    None
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

    const ID: &str = "01a24232-32c9-7083-9e2b-f1d31f7ad15e";
    const SEG1: &str = "01a24232-35b6-72b1-9e0a-1e4fb7ef0f7a";
    const SEG2: &str = "01a24233-243e-78a0-80eb-33dc16b7f701";

    fn segment_line(base: &str, end: usize) -> String {
        format!(
            r#"{{"type":"session_meta","payload":{{"id":"{ID}","history_base":{{"thread_id":"{base}","end_ordinal_exclusive":1,"end_byte_offset":{end}}}}}}}"#
        ) + "\n"
    }

    #[test]
    fn the_newest_segment_is_the_head_and_a_compressed_file_counts() {
        let dir = tempfile::tempdir().unwrap();
        let day = dir.path().join("sessions/2026/12/04");
        std::fs::create_dir_all(&day).unwrap();
        let root = day.join(format!("rollout-2026-12-04T17-55-15-{ID}.jsonl.zst"));
        std::fs::write(&root, "z").unwrap();
        assert_eq!(find(dir.path(), ID), Some(root.clone()), "compressed");
        let seg1 = day.join(format!("rollout-2026-12-04T17-55-16-{ID}_{SEG1}.jsonl"));
        let seg2 = day.join(format!("rollout-2026-12-04T17-55-17-{ID}_{SEG2}.jsonl"));
        std::fs::write(&seg2, "{}").unwrap();
        std::fs::write(&seg1, "{}").unwrap();
        assert_eq!(find(dir.path(), ID), Some(seg2.clone()));
        assert_eq!(thread_files(dir.path(), ID).len(), 3);
        assert_eq!(name_of(&format!("rollout-x-{ID}_a_b.jsonl"), ID), None);
        assert_eq!(name_of(&format!("rollout-x-{ID}.json"), ID), None);
        assert_eq!(name_of(&format!("rollout-x-other_{ID}.jsonl"), ID), None);
    }

    #[test]
    fn an_archived_thread_is_found_where_codex_moved_it() {
        let dir = tempfile::tempdir().unwrap();
        let archive = dir.path().join("archived_sessions");
        std::fs::create_dir_all(&archive).unwrap();
        let file = archive.join(format!("rollout-2026-12-04T17-58-25-{ID}.jsonl"));
        std::fs::write(&file, "{}").unwrap();
        assert_eq!(find(dir.path(), ID), Some(file.clone()));
        assert_eq!(archived(dir.path(), ID), Some(file));
        assert!(thread_files(dir.path(), ID).is_empty());
    }

    #[test]
    fn the_history_follows_each_segment_to_the_bytes_it_continues() {
        let dir = tempfile::tempdir().unwrap();
        let day = dir.path().join("sessions/2026/12/04");
        std::fs::create_dir_all(&day).unwrap();
        let root = "{\"n\":1}\n{\"n\":2}\n{\"n\":3}\n";
        std::fs::write(day.join(format!("rollout-t-{ID}.jsonl")), root).unwrap();
        assert_eq!(history(dir.path(), ID).as_deref(), Some(root));
        // Reverted before line 3, then before the segment's own second line.
        let seg1 = segment_line(ID, 16) + "{\"n\":4}\n{\"n\":5}\n";
        let keep1 = segment_line(ID, 16).len() + 8;
        std::fs::write(day.join(format!("rollout-t-{ID}_{SEG1}.jsonl")), &seg1).unwrap();
        let seg2 = segment_line(SEG1, keep1) + "{\"n\":6}\n";
        std::fs::write(day.join(format!("rollout-t-{ID}_{SEG2}.jsonl")), &seg2).unwrap();
        let h = history(dir.path(), ID).unwrap();
        let ns: Vec<i64> = h
            .lines()
            .filter_map(|l| crate::runtime::json_line::parse(l.as_bytes()).ok())
            .filter_map(|v| v.get("n").and_then(Value::as_i64))
            .collect();
        assert_eq!(ns, [1, 2, 4, 6]);
        // A file it continues is gone: the history cannot be told.
        std::fs::remove_file(day.join(format!("rollout-t-{ID}_{SEG1}.jsonl"))).unwrap();
        assert_eq!(history(dir.path(), ID), None);
    }
}
