//! botvisor's own copy of each bot's conversation files (issue 25; design rule 2: resume only
//! what exists, in the CLI's store or in botvisor's copy).
//!
//! The CLI deletes conversations by itself: Claude Code removes transcripts older than its
//! `cleanupPeriodDays` setting (default 30), and users lose whole folders. So at each turn's
//! end botvisor appends what the CLI's files gained to a copy of its own, and before a resume,
//! when the CLI's file is gone and the bot was not restarted fresh, puts the copy back where the
//! CLI looks. Layout, beside the database:
//!
//! ```text
//! conversations/<bot id>/<session id>/<file name>        the copy
//! conversations/<bot id>/<session id>/<file name>.from   where the CLI keeps it (one line)
//! ```
//!
//! Only the bot's current conversation is kept: the copies of an older one go at the next
//! update. A fresh restart and `Delete` remove the bot's folder.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// The folder of a bot's copies: `conversations/<bot_id>` in the folder of `database`.
pub fn folder(database: &Path, bot_id: &str) -> PathBuf {
    database
        .parent()
        .unwrap_or(Path::new("."))
        .join("conversations")
        .join(bot_id)
}

/// A session id that is safe as a folder name: not empty, no `/` or NUL, not starting with `.`.
fn safe(session: &str) -> bool {
    !session.is_empty() && !session.contains(['/', '\0']) && !session.starts_with('.')
}

/// Brings the copy of `session`'s `files` (where the CLI keeps them now) up to date in `folder`:
/// what each file gained since the last update is appended; a file now shorter than its copy
/// (the CLI rewrote it) is copied whole. Copies of other sessions are removed. Returns the bytes
/// written. Errors: the folder cannot be made or a file read or written (the copy is then as
/// the last update left it, or shorter, never longer than the CLI's file).
pub fn update(folder: &Path, session: &str, files: &[PathBuf]) -> io::Result<u64> {
    if !safe(session) || files.is_empty() {
        return Ok(0);
    }
    let dir = folder.join(session);
    fs::create_dir_all(&dir)?;
    if let Ok(entries) = fs::read_dir(folder) {
        for entry in entries.filter_map(Result::ok) {
            if entry.file_name() != session {
                let _ = fs::remove_dir_all(entry.path());
            }
        }
    }
    let mut written = 0;
    for file in files {
        let Some(name) = file.file_name() else {
            continue;
        };
        let copy = dir.join(name);
        let from = dir.join(format!("{}.from", name.to_string_lossy()));
        let origin = file.to_string_lossy();
        if fs::read_to_string(&from).ok().as_deref() != Some(&*origin) {
            fs::write(&from, origin.as_bytes())?;
        }
        written += append_new(file, &copy)?;
    }
    Ok(written)
}

/// Appends to `copy` what `file` holds past the copy's length, or copies it whole when it is
/// shorter than the copy; returns the bytes written.
fn append_new(file: &Path, copy: &Path) -> io::Result<u64> {
    let mut src = File::open(file)?;
    let len = src.metadata()?.len();
    let have = fs::metadata(copy).map_or(0, |m| m.len());
    if len == have {
        return Ok(0);
    }
    if len < have {
        let tmp = copy.with_extension("rewrite");
        let n = io::copy(&mut src, &mut File::create(&tmp)?)?;
        fs::rename(&tmp, copy)?;
        return Ok(n);
    }
    src.seek(SeekFrom::Start(have))?;
    let mut out = OpenOptions::new().create(true).append(true).open(copy)?;
    let n = io::copy(&mut src.take(len - have), &mut out)?;
    out.flush()?;
    Ok(n)
}

/// Whether `folder` holds a copy of `session`.
pub fn holds(folder: &Path, session: &str) -> bool {
    safe(session) && folder.join(session).is_dir()
}

/// Puts back each file of `session` that is gone from where the CLI kept it, from the copy in
/// `folder` (written beside it, then renamed into place, so the CLI never reads half a file),
/// making the CLI's folders as needed. Returns the paths put back; a file still where it was is
/// left alone. Errors: the copy cannot be read or the file written.
pub fn restore(folder: &Path, session: &str) -> io::Result<Vec<PathBuf>> {
    let mut restored = Vec::new();
    if !holds(folder, session) {
        return Ok(restored);
    }
    let dir = folder.join(session);
    for entry in fs::read_dir(&dir)?.filter_map(Result::ok) {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(copied) = name.strip_suffix(".from") else {
            continue;
        };
        let origin = PathBuf::from(fs::read_to_string(entry.path())?);
        if origin.as_os_str().is_empty() || origin.exists() {
            continue;
        }
        if let Some(parent) = origin.parent() {
            fs::create_dir_all(parent)?;
        }
        let mut tmp = origin.clone().into_os_string();
        tmp.push(".botvisor-restore");
        let tmp = PathBuf::from(tmp);
        fs::copy(dir.join(copied), &tmp)?;
        fs::rename(&tmp, &origin)?;
        restored.push(origin);
    }
    Ok(restored)
}

/// Removes a bot's copies (a fresh restart, `Delete`). A folder that is not there is no error.
pub fn remove(folder: &Path) -> io::Result<()> {
    match fs::remove_dir_all(folder) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_grows_by_what_is_new_and_comes_back_where_the_cli_kept_it() {
        let root = tempfile::tempdir().unwrap();
        let cli = root.path().join("projects").join("-work");
        fs::create_dir_all(&cli).unwrap();
        let transcript = cli.join("s1.jsonl");
        let kept = folder(&root.path().join("botvisor.db"), "bot");
        fs::write(&transcript, "{\"a\":1}\n").unwrap();
        assert_eq!(
            update(&kept, "s1", std::slice::from_ref(&transcript)).unwrap(),
            8
        );
        assert_eq!(
            update(&kept, "s1", std::slice::from_ref(&transcript)).unwrap(),
            0,
            "nothing new"
        );
        let mut f = OpenOptions::new().append(true).open(&transcript).unwrap();
        f.write_all(b"{\"b\":2}\n").unwrap();
        assert_eq!(
            update(&kept, "s1", std::slice::from_ref(&transcript)).unwrap(),
            8,
            "only what is new is written"
        );
        let whole = fs::read(&transcript).unwrap();

        assert!(
            restore(&kept, "s1").unwrap().is_empty(),
            "still there: left alone"
        );
        fs::remove_dir_all(root.path().join("projects")).unwrap();
        assert_eq!(restore(&kept, "s1").unwrap(), vec![transcript.clone()]);
        assert_eq!(fs::read(&transcript).unwrap(), whole);

        // The CLI rewrote it shorter: copied whole.
        fs::write(&transcript, "{}\n").unwrap();
        assert_eq!(
            update(&kept, "s1", std::slice::from_ref(&transcript)).unwrap(),
            3
        );
        assert_eq!(fs::read(kept.join("s1").join("s1.jsonl")).unwrap(), b"{}\n");

        // A new conversation: the old one's copy goes.
        let t2 = cli.join("s2.jsonl");
        fs::write(&t2, "x\n").unwrap();
        update(&kept, "s2", &[t2]).unwrap();
        assert!(!holds(&kept, "s1") && holds(&kept, "s2"));
        remove(&kept).unwrap();
        assert!(!kept.exists());
        remove(&kept).unwrap();
    }

    #[test]
    fn a_session_id_never_leaves_the_folder() {
        let root = tempfile::tempdir().unwrap();
        let kept = root.path().join("k");
        let file = root.path().join("t.jsonl");
        fs::write(&file, "x").unwrap();
        for bad in ["", "..", "../x", ".hidden", "a/b"] {
            assert_eq!(
                update(&kept, bad, std::slice::from_ref(&file)).unwrap(),
                0,
                "{bad}"
            );
            assert!(!holds(&kept, bad));
            assert!(restore(&kept, bad).unwrap().is_empty());
        }
        assert!(!kept.exists());
    }
}
