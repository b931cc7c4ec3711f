//! botvisor's own copy of each bot's conversation files (issue 25; design rule 2: resume only
//! what exists, in the CLI's store or in botvisor's copy).
//!
//! The CLI deletes conversations by itself: Claude Code removes transcripts older than its
//! `cleanupPeriodDays` setting (default 30), and users lose whole folders. So at each turn's
//! end botvisor appends what the CLI's file gained to a copy of its own, and before a launch puts
//! the copy back where the CLI looks when the CLI's file does not hold the whole conversation:
//! gone, emptied or cut (a crash, a full disk), replaced by another file, or re-created by the
//! running CLI with only what came after its loss. Layout, beside the database:
//!
//! ```text
//! conversations/<bot id>/<session id>/<file name>        the copy, only ever appended to
//! conversations/<bot id>/<session id>/<file name>.json   how far the CLI's file was followed
//! ```
//!
//! The copy never shrinks and never takes a line of another conversation: what the CLI's file
//! holds is appended only when it continues what was copied (the same bytes where the last
//! update stopped) or, re-created, names this session on every line. A fresh restart and
//! `Delete` remove the bot's folder; nothing else does.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Bytes of the CLI's file kept to recognise it at the next update (where the last one stopped).
const TAIL: u64 = 64;

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

/// How far one of the CLI's files was followed (`<file name>.json`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Followed {
    /// Where the CLI kept it when last copied.
    from: PathBuf,
    /// Bytes of the CLI's file copied so far.
    copied: u64,
    /// The copy's length after the last update that finished: what a failed write appended
    /// past it is cut before the next.
    #[serde(default)]
    copy_len: u64,
    /// Its last bytes before `copied` (at most [`TAIL`]), as hex.
    tail: String,
    /// The copy holds lines the CLI's file lost (it was re-created): the next launch puts the
    /// copy back.
    ahead: bool,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn meta_path(copy: &Path) -> PathBuf {
    let mut p = copy.as_os_str().to_owned();
    p.push(".json");
    PathBuf::from(p)
}

fn read_meta(copy: &Path) -> Followed {
    fs::read(meta_path(copy))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}

fn write_meta(copy: &Path, meta: &Followed) -> io::Result<()> {
    let path = meta_path(copy);
    let tmp = path.with_extension("json.tmp");
    fs::write(&tmp, serde_json::to_vec(meta).map_err(io::Error::other)?)?;
    fs::rename(tmp, path)
}

/// The `TAIL` bytes of `file` before `end` (fewer at its start).
fn tail_before(file: &mut File, end: u64) -> io::Result<String> {
    let start = end.saturating_sub(TAIL);
    file.seek(SeekFrom::Start(start))?;
    let mut buf = vec![0; (end - start) as usize];
    file.read_exact(&mut buf)?;
    Ok(hex(&buf))
}

/// Whether `file` (of `len` bytes) continues what `meta` followed: at least as long, and the
/// same bytes where the copy stopped.
fn continues(file: &mut File, len: u64, meta: &Followed) -> io::Result<bool> {
    if len < meta.copied {
        return Ok(false);
    }
    Ok(tail_before(file, meta.copied)? == meta.tail)
}

/// Whether `file` is one the CLI made anew for this conversation after losing the one `copy`
/// follows: every line of it that says which session it belongs to says `session`, one does,
/// and its first line is not a line of the copy (then it is the old file, cut).
fn made_anew(file: &Path, copy: &Path, session: &str) -> bool {
    let Ok(text) = fs::read_to_string(file) else {
        return false;
    };
    let first = text.lines().next().unwrap_or_default();
    let copied = fs::read_to_string(copy).unwrap_or_default();
    if first.is_empty() || copied.lines().any(|l| l == first) {
        return false;
    }
    let mut named = false;
    for line in text.lines() {
        let Ok(v) = crate::runtime::json_line::parse(line.as_bytes()) else {
            continue;
        };
        match v.get("sessionId").and_then(|s| s.as_str()) {
            Some(s) if s == session => named = true,
            Some(_) => return false,
            None => {}
        }
    }
    named
}

/// What one update did to the copy of a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Updated {
    /// What the CLI's file gained was appended: this many bytes.
    Appended(u64),
    /// The CLI's file was made anew for this conversation (its earlier lines lost): appended
    /// whole to the copy, which the next launch puts back.
    Recreated(u64),
    /// The CLI's file is not this conversation's continuation (cut, or another conversation):
    /// the copy is left as it is, and the next launch puts it back.
    Diverged,
}

/// Brings the copy of `session`'s `files` (where the CLI keeps them now) up to date in `folder`,
/// one [`Updated`] per file. Errors: the folder cannot be made, or a file read or written (the
/// copy is then as the last update left it, or holds part of what was new: never a byte the
/// CLI's file did not hold there).
pub fn update(folder: &Path, session: &str, files: &[PathBuf]) -> io::Result<Vec<Updated>> {
    let mut done = Vec::new();
    if !safe(session) || files.is_empty() {
        return Ok(done);
    }
    let dir = folder.join(session);
    fs::create_dir_all(&dir)?;
    for file in files {
        let Some(name) = file.file_name() else {
            continue;
        };
        let copy = dir.join(name);
        let mut meta = read_meta(&copy);
        let mut src = File::open(file)?;
        let len = src.metadata()?.len();
        let mut have = fs::metadata(&copy).map_or(0, |m| m.len());
        if have != meta.copy_len {
            // A write that failed part way (the record says less) or a copy changed by hand:
            // back to what the record says, or, shorter than that, copied again whole.
            let keep = if have > meta.copy_len {
                meta.copy_len
            } else {
                0
            };
            if keep == 0 {
                meta = Followed::default();
            }
            if have > 0 {
                OpenOptions::new().write(true).open(&copy)?.set_len(keep)?;
            }
            have = keep;
        }
        let (from, recreated) = if have == 0 || continues(&mut src, len, &meta)? {
            (if have == 0 { 0 } else { meta.copied }, false)
        } else if made_anew(file, &copy, session) {
            (0, true)
        } else {
            done.push(Updated::Diverged);
            meta.ahead = true;
            write_meta(&copy, &meta)?;
            continue;
        };
        if recreated {
            cut_to_last_line(&copy)?;
        }
        src.seek(SeekFrom::Start(from))?;
        let mut out = OpenOptions::new().create(true).append(true).open(&copy)?;
        let n = io::copy(&mut (&mut src).take(len - from), &mut out)?;
        out.flush()?;
        meta.from = file.clone();
        meta.copied = from + n;
        meta.copy_len = fs::metadata(&copy)?.len();
        meta.tail = tail_before(&mut src, meta.copied)?;
        meta.ahead |= recreated;
        write_meta(&copy, &meta)?;
        done.push(if recreated {
            Updated::Recreated(n)
        } else {
            Updated::Appended(n)
        });
    }
    Ok(done)
}

/// How far the copy of `session` followed the CLI's `file` (its bytes copied at the last
/// update), while that file still continues what was copied: what it holds past that point was
/// written since the bot's last turn ended (by another process that held the conversation, or
/// by the bot's own agent after that turn). `None`: not followed, or no longer continuing.
pub fn followed(folder: &Path, session: &str, file: &Path) -> Option<u64> {
    if !safe(session) {
        return None;
    }
    let copy = folder.join(session).join(file.file_name()?);
    if !copy.is_file() {
        return None;
    }
    let meta = read_meta(&copy);
    let mut src = File::open(file).ok()?;
    let len = src.metadata().ok()?.len();
    continues(&mut src, len, &meta)
        .ok()
        .filter(|c| *c)
        .map(|_| meta.copied)
}

/// Cuts `copy` after its last newline (a line the CLI was writing when a copy stopped).
fn cut_to_last_line(copy: &Path) -> io::Result<()> {
    let Ok(bytes) = fs::read(copy) else {
        return Ok(());
    };
    let keep = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    if keep < bytes.len() {
        OpenOptions::new()
            .write(true)
            .open(copy)?
            .set_len(keep as u64)?;
    }
    Ok(())
}

/// Whether `folder` holds a copy of `session`.
pub fn holds(folder: &Path, session: &str) -> bool {
    safe(session) && folder.join(session).is_dir()
}

/// The names of the files the copy of `session` holds, sorted (not the `.json` records beside
/// them); empty when there is no copy.
pub fn names(folder: &Path, session: &str) -> Vec<String> {
    if !holds(folder, session) {
        return Vec::new();
    }
    let Ok(entries) = fs::read_dir(folder.join(session)) else {
        return Vec::new();
    };
    let mut out: Vec<String> = entries
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.ends_with(".json") && !n.ends_with(".json.tmp"))
        .collect();
    out.sort();
    out
}

/// Where the CLI kept the copied file `name` of `session` when it was last copied.
pub fn origin(folder: &Path, session: &str, name: &str) -> Option<PathBuf> {
    if !holds(folder, session) {
        return None;
    }
    let meta = read_meta(&folder.join(session).join(name));
    (!meta.from.as_os_str().is_empty()).then_some(meta.from)
}

/// What [`restore`] found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Restored {
    /// The CLI's file holds the whole conversation: nothing done.
    Whole,
    /// The CLI's file was gone: the copy was put there.
    WasGone,
    /// The CLI's file did not hold the whole conversation (emptied, cut, replaced, or made anew
    /// without its earlier lines): it was set aside at this path and the copy put there.
    SetAside(PathBuf),
}

/// Before a launch: puts the copy of `session`'s file `name` at `target` (where the CLI will
/// look for it now) unless the file there holds the whole conversation. The copy goes up to its
/// last complete line, written beside `target` then renamed into place, so the CLI never reads
/// half a file; a file that did not hold it all is renamed to `<target>.botvisor-set-aside`
/// first. Errors: no copy, `target` is not a file (a folder in its place), or the copy cannot
/// be read or written; `target` is then as it was.
pub fn restore(folder: &Path, session: &str, name: &str, target: &Path) -> io::Result<Restored> {
    if !holds(folder, session) {
        return Err(io::Error::new(io::ErrorKind::NotFound, "no copy"));
    }
    let copy = folder.join(session).join(name);
    let meta = read_meta(&copy);
    let whole = match File::open(target) {
        Ok(mut f) if f.metadata()?.is_file() => {
            let len = f.metadata()?.len();
            !meta.ahead && continues(&mut f, len, &meta)?
        }
        Ok(_) => {
            return Err(io::Error::other(format!(
                "{} is not a file",
                target.display()
            )));
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => false,
        Err(e) => return Err(e),
    };
    if whole {
        return Ok(Restored::Whole);
    }
    let bytes = fs::read(&copy)?;
    let end = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    if end < bytes.len() {
        // A line cut when a write failed: not put back, and not followed by what comes next.
        OpenOptions::new()
            .write(true)
            .open(&copy)?
            .set_len(end as u64)?;
    }
    if let Some(parent) = target.parent() {
        fs::create_dir_all(parent)?;
    }
    let with_suffix = |suffix: &str| {
        let mut p = target.as_os_str().to_owned();
        p.push(suffix);
        PathBuf::from(p)
    };
    let tmp = with_suffix(".botvisor-restore");
    if let Err(e) = fs::write(&tmp, &bytes[..end]) {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    let outcome = if target.exists() {
        let aside = (0..)
            .map(|n| match n {
                0 => with_suffix(".botvisor-set-aside"),
                n => with_suffix(&format!(".botvisor-set-aside.{n}")),
            })
            .find(|p| !p.exists())
            .expect("a free name");
        fs::rename(target, &aside)?;
        Restored::SetAside(aside)
    } else {
        Restored::WasGone
    };
    fs::rename(&tmp, target)?;
    let mut put = File::open(target)?;
    write_meta(
        &copy,
        &Followed {
            from: target.to_path_buf(),
            copied: end as u64,
            copy_len: end as u64,
            tail: tail_before(&mut put, end as u64)?,
            ahead: false,
        },
    )?;
    Ok(outcome)
}

/// Removes a bot's copies (a fresh restart, `Delete`). A folder that is not there is no error.
pub fn remove(folder: &Path) -> io::Result<()> {
    match fs::remove_dir_all(folder) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests;
