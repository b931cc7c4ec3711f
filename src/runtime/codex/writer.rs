//! Who holds a Codex thread (issue 25, "another process on the same conversation"; design rule
//! 7). Seen on 0.171.0 (tests/facts/codex.rs
//! `a_second_writer_is_refused_and_the_lock_names_its_holder`): a process that has a thread
//! loaded (`thread/start` or `thread/resume` of an app-server, `codex exec resume`, the
//! terminal's `codex resume`) holds an advisory `flock` write lock on the empty file
//! `$CODEX_HOME/thread-writer-locks/<thread id>.lock` until it exits (a gentle exit removes the
//! file; a killed process leaves it, unlocked). A second process's `thread/resume` of that
//! thread is refused with JSON-RPC error -32600 `thread <id> already has an active writer`
//! (`codex exec resume` exits 1 saying the same); nothing on disk names the holder, but the
//! kernel's lock table (`/proc/locks`) does: `FLOCK ADVISORY WRITE <pid> <major>:<minor>:<inode>`.

use std::path::{Path, PathBuf};

/// What `thread/resume` answers (after `thread <id> `) when another process holds the thread.
pub const ACTIVE_WRITER: &str = "already has an active writer";

/// Whether an error text of Codex says that another process holds the thread.
pub fn held_elsewhere(error: &str) -> bool {
    error.contains(ACTIVE_WRITER)
}

/// The lock file of `thread_id` under `codex_home`.
pub fn lock_file(codex_home: &Path, thread_id: &str) -> PathBuf {
    codex_home
        .join("thread-writer-locks")
        .join(format!("{thread_id}.lock"))
}

/// A process that holds a thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// Its pid.
    pub pid: u32,
    /// Its command line, arguments joined by spaces (empty when it cannot be read).
    pub command: String,
    /// What it is, in words: `Codex's app-server daemon`, `a Codex app-server`, `codex exec`,
    /// or `Codex in a terminal`.
    pub what: &'static str,
}

/// The major and minor numbers of a Linux device number (`st_dev`), as `/proc/locks` prints
/// them.
fn major_minor(dev: u64) -> (u64, u64) {
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & 0xffff_f000);
    let minor = (dev & 0xff) | ((dev >> 12) & 0xffff_ff00);
    (major, minor)
}

/// The pid that holds a `flock` write lock on the file `(dev, inode)`, read from the text of
/// `/proc/locks` (lines `N: FLOCK  ADVISORY  WRITE <pid> <major hex>:<minor hex>:<inode> 0 EOF`;
/// waiters, marked `->`, hold nothing). `None` when no process holds one.
pub fn lock_holder(proc_locks: &str, dev: u64, inode: u64) -> Option<u32> {
    let (major, minor) = major_minor(dev);
    proc_locks.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.get(1) == Some(&"->") {
            return None;
        }
        let [_, kind, _, access, pid, file, ..] = fields.as_slice() else {
            return None;
        };
        if *kind != "FLOCK" || *access != "WRITE" {
            return None;
        }
        let mut parts = file.split(':');
        let (Some(ma), Some(mi), Some(ino), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return None;
        };
        let same = u64::from_str_radix(ma, 16).ok() == Some(major)
            && u64::from_str_radix(mi, 16).ok() == Some(minor)
            && ino.parse::<u64>().ok() == Some(inode);
        same.then(|| pid.parse().ok()).flatten()
    })
}

/// What a process with the arguments `argv` is, in words (see [`Holder::what`]).
pub fn what(argv: &[String]) -> &'static str {
    let words: Vec<&str> = argv
        .iter()
        .skip(1)
        .map(String::as_str)
        .filter(|a| !a.starts_with('-'))
        .collect();
    match words.as_slice() {
        ["app-server", "daemon", ..] => "Codex's app-server daemon",
        ["app-server", ..] => "a Codex app-server",
        ["exec" | "e", ..] => "codex exec",
        _ => "Codex in a terminal",
    }
}

/// The holder of the lock `(dev, inode)` per `proc_locks`, named by `argv_of(pid)` (its
/// arguments, `None` when they cannot be read).
pub fn holder_of(
    proc_locks: &str,
    dev: u64,
    inode: u64,
    argv_of: impl FnOnce(u32) -> Option<Vec<String>>,
) -> Option<Holder> {
    let pid = lock_holder(proc_locks, dev, inode)?;
    let argv = argv_of(pid).unwrap_or_default();
    Some(Holder {
        pid,
        command: argv.join(" "),
        what: what(&argv),
    })
}

/// The process that holds `thread_id` under `codex_home` now, read from its lock file,
/// `/proc/locks` and `/proc/<pid>/cmdline`; `None` when none does (no lock file, or nobody
/// holds its lock) or `/proc` cannot be read.
pub fn holder(codex_home: &Path, thread_id: &str) -> Option<Holder> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(lock_file(codex_home, thread_id)).ok()?;
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    holder_of(&locks, meta.dev(), meta.ino(), |pid| {
        let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        Some(
            raw.split(|b| *b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect(),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `/proc/locks` as seen with an app-server (pid 7782) holding a thread on device fe:00.
    const LOCKS: &str = "\
1: FLOCK  ADVISORY  WRITE 7782 fe:00:10014997 0 EOF
1: -> FLOCK  ADVISORY  WRITE 7790 fe:00:10014997 0 EOF
2: POSIX  ADVISORY  WRITE 512 fe:00:10014998 0 EOF
3: FLOCK  ADVISORY  READ 600 fe:00:10014999 0 EOF
4: OFDLCK ADVISORY  WRITE -1 fe:00:10015000 0 EOF
";

    /// `st_dev` of major 0xfe, minor 0.
    const DEV: u64 = 0xfe00;

    #[test]
    fn the_write_flock_on_the_lock_file_names_its_pid() {
        assert_eq!(major_minor(DEV), (0xfe, 0));
        assert_eq!(major_minor(0x1000_5672_3489), (0x1234, 0x56789));
        assert_eq!(major_minor(0x0801), (8, 1));
        assert_eq!(lock_holder(LOCKS, DEV, 10014997), Some(7782));
        assert_eq!(lock_holder(LOCKS, DEV, 1), None, "another file");
        assert_eq!(lock_holder(LOCKS, 0x0801, 10014997), None, "another device");
        assert_eq!(
            lock_holder(LOCKS, DEV, 10014998),
            None,
            "a POSIX lock is not Codex's"
        );
        assert_eq!(lock_holder(LOCKS, DEV, 10014999), None, "a read lock");
        assert_eq!(lock_holder(LOCKS, DEV, 10015000), None, "no pid");
        assert_eq!(lock_holder("", DEV, 10014997), None);
        assert_eq!(lock_holder("garbage\n1: FLOCK", DEV, 10014997), None);
    }

    #[test]
    fn the_holder_is_named_by_its_command_line() {
        let argv = |s: &str| -> Vec<String> { s.split(' ').map(str::to_owned).collect() };
        let h = holder_of(LOCKS, DEV, 10014997, |pid| {
            assert_eq!(pid, 7782);
            Some(argv("/opt/codex app-server"))
        })
        .unwrap();
        assert_eq!(
            h,
            Holder {
                pid: 7782,
                command: "/opt/codex app-server".into(),
                what: "a Codex app-server"
            }
        );
        assert_eq!(
            what(&argv("codex app-server daemon start")),
            "Codex's app-server daemon"
        );
        assert_eq!(
            what(&argv("codex exec --skip-git-repo-check resume 01a2 go")),
            "codex exec"
        );
        assert_eq!(what(&argv("codex resume 01a2")), "Codex in a terminal");
        assert_eq!(what(&argv("codex")), "Codex in a terminal");
        let unnamed = holder_of(LOCKS, DEV, 10014997, |_| None).unwrap();
        assert_eq!((unnamed.pid, unnamed.command.as_str()), (7782, ""));
        assert_eq!(holder_of(LOCKS, DEV, 1, |_| None), None);
    }

    #[test]
    fn an_active_writer_refusal_is_recognised() {
        assert!(held_elsewhere(
            "thread 01a24236-1efb-7591-86cf-8fe6117d3c53 already has an active writer"
        ));
        assert!(!held_elsewhere("no rollout found for thread id x"));
        assert_eq!(
            lock_file(Path::new("/c"), "t"),
            PathBuf::from("/c/thread-writer-locks/t.lock")
        );
    }
}
