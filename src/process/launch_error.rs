//! Why a launch cannot happen or did not happen, in words a person can act on: the working
//! directory is missing, not a folder or not accessible; the binary is missing, not a file or
//! not executable; or something else the system said.
//!
//! `spawn` reports a missing working directory and a missing binary alike as "No such file or
//! directory" (the child's `chdir` and `execve` both fail with `ENOENT`), so the cause is found
//! by looking at both paths after the failure.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Whether the daemon's user may access `path` with `mode` (`libc::R_OK`, `X_OK`, …).
fn may(path: &Path, mode: libc::c_int) -> bool {
    let Ok(c) = CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: `c` is a valid NUL-terminated string that outlives the call.
    unsafe { libc::access(c.as_ptr(), mode) == 0 }
}

fn user() -> u32 {
    // SAFETY: getuid never fails and touches no memory.
    unsafe { libc::getuid() }
}

/// What was found at a path a launch needs.
#[derive(Debug)]
pub enum Found {
    /// Nothing (`ENOENT`, or a path element that is not a folder).
    Missing,
    /// A folder on the way may not be searched (`EACCES`).
    Unreachable,
    /// Something of the wrong kind: a file where a folder is wanted, or the reverse.
    WrongKind,
    /// The daemon's user lacks the permission the launch needs.
    NoPermission,
    /// Another error.
    Error(std::io::Error),
    /// A path the launch can use.
    Usable,
}

/// Looks at `path`: is it a folder (`want_dir`) or a file that the daemon's user may access with
/// `mode`?
pub fn look(path: &Path, want_dir: bool, mode: libc::c_int) -> Found {
    match std::fs::metadata(path) {
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT) | Some(libc::ENOTDIR)) => {
            Found::Missing
        }
        Err(e) if e.raw_os_error() == Some(libc::EACCES) => Found::Unreachable,
        Err(e) => Found::Error(e),
        Ok(m) if m.is_dir() != want_dir || (!want_dir && !m.is_file()) => Found::WrongKind,
        Ok(_) if !may(path, mode) => Found::NoPermission,
        Ok(_) => Found::Usable,
    }
}

/// The words for what was `found` at the working directory `dir`; `None` when usable.
pub fn dir_message(dir: &Path, found: Found) -> Option<String> {
    let shown = dir.display();
    Some(match found {
        Found::Missing => {
            format!("the working directory {shown} does not exist (removed or renamed?)")
        }
        Found::Unreachable => format!(
            "the working directory {shown} cannot be reached by user {}: a folder on its path \
             is not searchable (permission denied)",
            user()
        ),
        Found::WrongKind => format!("the working directory {shown} is no longer a folder"),
        Found::NoPermission => format!(
            "the working directory {shown} is not readable and searchable by user {} \
             (permission denied)",
            user()
        ),
        Found::Error(e) => format!("the working directory {shown} cannot be used: {e}"),
        Found::Usable => return None,
    })
}

/// The words for what was `found` at the binary `program`; `None` when usable.
pub fn binary_message(program: &Path, found: Found) -> Option<String> {
    let shown = program.display();
    Some(match found {
        Found::Missing => {
            format!("the agent's binary {shown} does not exist (uninstalled or moved?)")
        }
        Found::Unreachable => format!(
            "the agent's binary {shown} cannot be reached by user {}: a folder on its path is \
             not searchable (permission denied)",
            user()
        ),
        Found::WrongKind => format!("the agent's binary {shown} is not a file"),
        Found::NoPermission => format!(
            "the agent's binary {shown} is not executable by user {} (permission denied)",
            user()
        ),
        Found::Error(e) => format!("the agent's binary {shown} cannot be used: {e}"),
        Found::Usable => return None,
    })
}

/// What keeps `dir` from being a working directory now, or `None` when it is a folder the
/// daemon's user can enter and read.
pub fn working_dir_problem(dir: &Path) -> Option<String> {
    dir_message(dir, look(dir, true, libc::R_OK | libc::X_OK))
}

/// What keeps `program` from being run now, or `None` when it is a file the daemon's user may
/// execute.
pub fn binary_problem(program: &Path) -> Option<String> {
    binary_message(program, look(program, false, libc::X_OK))
}

/// The message for a spawn of `program` in `cwd` that failed with `err`: the working
/// directory's problem if it has one, else the binary's, else what the system said, with a hint
/// where the error alone misleads (`ENOENT` for a binary that is there: its `#!` interpreter is
/// missing).
pub fn explain(program: &Path, cwd: &Path, err: &std::io::Error) -> String {
    if let Some(problem) = working_dir_problem(cwd) {
        return format!("cannot start the agent: {problem}");
    }
    if let Some(problem) = binary_problem(program) {
        return format!("cannot start the agent: {problem}");
    }
    let shown = program.display();
    match err.raw_os_error() {
        Some(libc::ENOENT) => format!(
            "cannot start {shown}: {err}, although the binary and the working directory are \
             there: the interpreter named on its `#!` line (or a library it needs) is missing"
        ),
        Some(libc::EACCES) => format!(
            "cannot start {shown}: permission denied (its `#!` interpreter is not executable, \
             or it is on a file system mounted noexec)"
        ),
        Some(libc::ENOEXEC) => {
            format!("cannot start {shown}: it is not a program this system can run ({err})")
        }
        _ => format!("cannot start {shown} in {}: {err}", cwd.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn enoent() -> std::io::Error {
        std::io::Error::from_raw_os_error(libc::ENOENT)
    }

    #[test]
    fn each_cause_has_its_own_message() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("agent");
        std::fs::write(&bin, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        let work = dir.path().join("work");
        std::fs::create_dir(&work).unwrap();

        let gone = dir.path().join("gone");
        let m = explain(&bin, &gone, &enoent());
        assert!(
            m.contains("working directory") && m.contains("does not exist"),
            "{m}"
        );
        assert!(!m.contains("binary"), "{m}");

        let m = explain(
            &bin,
            &bin,
            &std::io::Error::from_raw_os_error(libc::ENOTDIR),
        );
        assert!(m.contains("is no longer a folder"), "{m}");

        let missing = dir.path().join("no-agent");
        let m = explain(&missing, &work, &enoent());
        assert!(m.contains("binary") && m.contains("does not exist"), "{m}");

        let plain = dir.path().join("plain");
        std::fs::write(&plain, "").unwrap();
        std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o644)).unwrap();
        let m = explain(
            &plain,
            &work,
            &std::io::Error::from_raw_os_error(libc::EACCES),
        );
        assert!(
            m.contains("not executable") && m.contains("permission denied"),
            "{m}"
        );

        let m = explain(
            &work,
            &work,
            &std::io::Error::from_raw_os_error(libc::EACCES),
        );
        assert!(m.contains("is not a file"), "{m}");

        let m = explain(&bin, &work, &enoent());
        assert!(m.contains("interpreter"), "{m}");

        assert_eq!(working_dir_problem(&work), None);
        assert_eq!(binary_problem(&bin), None);
    }

    #[test]
    fn every_finding_has_its_own_words() {
        // The permission cases cannot be produced as root (tests run as root): the words are
        // checked here, the probing above.
        let all = || {
            [
                Found::Missing,
                Found::Unreachable,
                Found::WrongKind,
                Found::NoPermission,
                Found::Error(std::io::Error::from_raw_os_error(libc::EIO)),
            ]
        };
        for messages in [
            all().map(|f| dir_message(Path::new("/w"), f).unwrap()),
            all().map(|f| binary_message(Path::new("/b"), f).unwrap()),
        ] {
            let unique: std::collections::BTreeSet<_> = messages.iter().collect();
            assert_eq!(unique.len(), messages.len(), "{messages:?}");
        }
        let m = dir_message(Path::new("/w"), Found::NoPermission).unwrap();
        assert!(
            m.contains("not readable") && m.contains("permission denied"),
            "{m}"
        );
        assert_eq!(dir_message(Path::new("/w"), Found::Usable), None);
    }
}
