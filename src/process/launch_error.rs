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

/// What keeps `dir` from being a working directory now, or `None` when it is a folder the
/// daemon's user can enter and read.
pub fn working_dir_problem(dir: &Path) -> Option<String> {
    let shown = dir.display();
    match std::fs::metadata(dir) {
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT) | Some(libc::ENOTDIR)) => Some(
            format!("the working directory {shown} does not exist (removed or renamed?)"),
        ),
        Err(e) if e.raw_os_error() == Some(libc::EACCES) => Some(format!(
            "the working directory {shown} cannot be reached by user {}: a folder on its path \
             is not searchable (permission denied)",
            user()
        )),
        Err(e) => Some(format!("the working directory {shown} cannot be used: {e}")),
        Ok(m) if !m.is_dir() => Some(format!(
            "the working directory {shown} is no longer a folder"
        )),
        Ok(_) if !may(dir, libc::R_OK | libc::X_OK) => Some(format!(
            "the working directory {shown} is not readable and searchable by user {} \
             (permission denied)",
            user()
        )),
        Ok(_) => None,
    }
}

/// What keeps `program` from being run now, or `None` when it is a file the daemon's user may
/// execute.
pub fn binary_problem(program: &Path) -> Option<String> {
    let shown = program.display();
    match std::fs::metadata(program) {
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT) | Some(libc::ENOTDIR)) => Some(
            format!("the agent's binary {shown} does not exist (uninstalled or moved?)"),
        ),
        Err(e) if e.raw_os_error() == Some(libc::EACCES) => Some(format!(
            "the agent's binary {shown} cannot be reached by user {}: a folder on its path is \
             not searchable (permission denied)",
            user()
        )),
        Err(e) => Some(format!("the agent's binary {shown} cannot be used: {e}")),
        Ok(m) if !m.is_file() => Some(format!("the agent's binary {shown} is not a file")),
        Ok(_) if !may(program, libc::X_OK) => Some(format!(
            "the agent's binary {shown} is not executable by user {} (permission denied)",
            user()
        )),
        Ok(_) => None,
    }
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
}
