//! The daemon's own files: its private folders (0700) and its lock files (0600), whatever the
//! umask, and who holds a lock that is taken.

use std::fs::File;
use std::io::{Read, Seek, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Makes `dir` a private folder of the user: creates it (and missing parents) with mode 0700,
/// or, when it exists and belongs to the user, takes group and other permissions away. Returns
/// whether an existing folder's mode was changed. Errors (as text a person can act on): the
/// folder cannot be created, is not a folder, or belongs to another user.
pub fn private_dir(dir: &Path) -> Result<bool, String> {
    match std::fs::metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
            // The mode above is filtered by the umask; this is not.
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
                .map_err(|e| format!("cannot make {} private: {e}", dir.display()))?;
            Ok(false)
        }
        Err(e) => Err(format!("cannot use {}: {e}", dir.display())),
        Ok(m) if !m.is_dir() => Err(format!("{} is not a folder", dir.display())),
        Ok(m) => {
            // SAFETY: getuid never fails and touches no memory.
            let me = unsafe { libc::getuid() };
            if m.uid() != me {
                return Err(format!(
                    "{} belongs to user {}, not to user {me} who runs botvisord; remove it or \
                     give it to user {me}",
                    dir.display(),
                    m.uid()
                ));
            }
            if m.mode() & 0o077 == 0 {
                return Ok(false);
            }
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
                .map_err(|e| format!("cannot make {} private: {e}", dir.display()))?;
            Ok(true)
        }
    }
}

/// Who holds a lock file, as far as can be told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockHolder {
    /// A live process: its pid and command name.
    Process(u32, String),
    /// No live holder could be named; the pid written in the file, if any, is not running (or
    /// cannot be told to be the holder).
    Unknown {
        /// The pid the file names, when it names one.
        written: Option<u32>,
    },
}

impl std::fmt::Display for LockHolder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LockHolder::Process(pid, name) => write!(f, "pid {pid} ({name})"),
            LockHolder::Unknown { written: Some(pid) } => write!(
                f,
                "a process botvisord cannot name (the pid {pid} written in the file is not \
                 the holder)"
            ),
            LockHolder::Unknown { written: None } => {
                write!(f, "a process botvisord cannot name")
            }
        }
    }
}

/// Takes the lock file at `path` (created 0600; an existing one of the user is made 0600) and
/// writes the daemon's pid in it. The file stays locked while the returned `File` is open.
/// Errors (text): the file cannot be opened or locked, or another process holds the lock (named
/// by [`lock_holder`]).
pub fn take_lock(path: &Path) -> Result<File, String> {
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)
        .map_err(|e| format!("cannot open the lock file {}: {e}", path.display()))?;
    if let Ok(m) = file.metadata()
        // SAFETY: getuid never fails and touches no memory.
        && m.uid() == unsafe { libc::getuid() }
        && m.mode() & 0o077 != 0
    {
        file.set_permissions(std::fs::Permissions::from_mode(0o600))
            .map_err(|e| format!("cannot make the lock file {} private: {e}", path.display()))?;
    }
    match file.try_lock() {
        Ok(()) => {
            let _ = file.set_len(0);
            let _ = file.rewind();
            let _ = writeln!(file, "{}", std::process::id());
            Ok(file)
        }
        Err(std::fs::TryLockError::WouldBlock) => {
            let mut written = String::new();
            let _ = file.read_to_string(&mut written);
            let holder = lock_holder(&file, written.trim().parse().ok());
            Err(format!(
                "another botvisord already uses this database: {holder} holds the lock file {}",
                path.display()
            ))
        }
        Err(std::fs::TryLockError::Error(e)) => Err(format!("cannot lock {}: {e}", path.display())),
    }
}

/// A lock (`flock`) on the database file itself, whatever path names it: the lock files are
/// named by path or kept in a runtime folder, and a hard link to the database in another folder,
/// from a daemon with another runtime folder, meets neither. SQLite's own locks are POSIX record
/// locks, which `flock` does not touch on a local file system. Errors name the holder.
pub fn lock_database(path: &Path) -> Result<File, String> {
    let file =
        File::open(path).map_err(|e| format!("cannot open {} to lock it: {e}", path.display()))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(format!(
            "another botvisord already uses this database: {} holds {} (perhaps through another \
             path to the same file)",
            // Not this process: its own locks on the file (SQLite's) hold nobody out.
            holder_but(&file, None, Some(std::process::id())),
            path.display()
        )),
        Err(std::fs::TryLockError::Error(e)) => Err(format!("cannot lock {}: {e}", path.display())),
    }
}

/// The live process holding the (`flock`) lock on `file`. On Linux it is read from
/// `/proc/locks`, which names the process that took the lock; elsewhere the pid `written` in the
/// file is believed while such a process runs.
pub fn lock_holder(file: &File, written: Option<u32>) -> LockHolder {
    holder_but(file, written, None)
}

/// [`lock_holder`], never naming the process `except`.
fn holder_but(file: &File, written: Option<u32>, except: Option<u32>) -> LockHolder {
    let alive = |pid: u32| std::fs::metadata(format!("/proc/{pid}")).is_ok();
    match std::fs::read_to_string("/proc/locks") {
        Ok(locks) => {
            let Ok(m) = file.metadata() else {
                return LockHolder::Unknown { written };
            };
            holders_in(&locks, m.dev(), m.ino())
                .into_iter()
                .find(|pid| Some(*pid) != except && alive(*pid))
                .map(|pid| LockHolder::Process(pid, command_name(pid)))
                .unwrap_or(LockHolder::Unknown { written })
        }
        Err(_) => match written {
            // SAFETY: kill with signal 0 only checks that the pid exists.
            Some(pid) if pid > 0 && unsafe { libc::kill(pid as i32, 0) } == 0 => {
                LockHolder::Process(pid, "per the lock file".to_owned())
            }
            _ => LockHolder::Unknown { written },
        },
    }
}

/// The pids that hold (not wait for) a lock on the file `(dev, ino)`, from the text of
/// `/proc/locks` (`ID: FLOCK ADVISORY WRITE PID MAJ:MIN:INODE START END`, device numbers in
/// hex; a waiting lock has `->` after the id).
pub fn holders_in(locks: &str, dev: u64, ino: u64) -> Vec<u32> {
    let major = libc::major(dev as libc::dev_t);
    let minor = libc::minor(dev as libc::dev_t);
    locks
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.get(1) == Some(&"->") {
                return None;
            }
            let pid: u32 = fields.get(4)?.parse().ok()?;
            let mut id = fields.get(5)?.split(':');
            let maj = u32::from_str_radix(id.next()?, 16).ok()?;
            let min = u32::from_str_radix(id.next()?, 16).ok()?;
            let inode: u64 = id.next()?.parse().ok()?;
            (maj == major && min == minor && inode == ino && pid > 0).then_some(pid)
        })
        .collect()
}

fn command_name(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| crate::text::escape(s.trim(), false).into_owned())
        .unwrap_or_else(|_| "unknown command".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_locks_lines() {
        let dev = libc::makedev(0x08, 0x21);
        let text = "1: FLOCK  ADVISORY  WRITE 4242 08:21:1234 0 EOF\n\
                    1: -> FLOCK  ADVISORY  WRITE 77 08:21:1234 0 EOF\n\
                    2: POSIX  ADVISORY  WRITE 99 08:21:999 0 EOF\n\
                    3: FLOCK  ADVISORY  WRITE 5 00:2f:1234 0 EOF\n";
        assert_eq!(holders_in(text, dev, 1234), vec![4242]);
        assert_eq!(holders_in(text, dev, 999), vec![99]);
        assert!(holders_in(text, dev, 1).is_empty());
    }

    #[test]
    fn holder_messages() {
        assert_eq!(
            LockHolder::Process(12, "botvisord".into()).to_string(),
            "pid 12 (botvisord)"
        );
        let unknown = LockHolder::Unknown { written: Some(40) }.to_string();
        assert!(unknown.contains("cannot name"), "{unknown}");
        assert!(unknown.contains("40"), "{unknown}");
    }

    #[test]
    fn a_held_lock_names_this_process() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.lock");
        let _held = take_lock(&path).unwrap();
        // A pid left in the file by a daemon long gone is not named: the holder is.
        std::fs::write(&path, "4000000\n").unwrap();
        let err = take_lock(&path).unwrap_err();
        assert!(!err.contains("4000000"), "{err}");
        assert!(
            err.contains(&format!("pid {}", std::process::id())),
            "{err}"
        );
        let mode = std::fs::metadata(&path).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }

    #[test]
    fn private_dirs() {
        let dir = tempfile::tempdir().unwrap();
        let new = dir.path().join("a/b");
        assert!(!private_dir(&new).unwrap());
        assert_eq!(std::fs::metadata(&new).unwrap().mode() & 0o777, 0o700);
        std::fs::set_permissions(&new, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(private_dir(&new).unwrap());
        assert_eq!(std::fs::metadata(&new).unwrap().mode() & 0o777, 0o700);
        let file = dir.path().join("f");
        std::fs::write(&file, "").unwrap();
        assert!(private_dir(&file).unwrap_err().contains("not a folder"));
    }
}
