//! Signals by identity. A signal goes to a process only if its identity still matches; on Linux
//! the check and the signal go through one pidfd (pidfd_open(2), pidfd_send_signal(2)), so the
//! pid cannot be reused in between.

use super::identity::{Liveness, ProcessIdentity, liveness};

/// What became of a signal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Signalled {
    /// Delivered to the process named by the identity.
    Sent,
    /// The process is gone (or the pid names another process now): nothing was sent.
    Gone,
    /// It could not be sent (permission, an unreadable process).
    Failed(String),
}

/// `PIDFD_SIGNAL_PROCESS_GROUP` of linux/pidfd.h (Linux 6.9): signal the target's process group.
#[cfg(target_os = "linux")]
const PIDFD_SIGNAL_PROCESS_GROUP: libc::c_uint = 1 << 2;

/// Sends `signal` to the process group led by the process `pidfd` refers to. The pidfd pins that
/// process's pid (the kernel's `struct pid`, which is also the group's id), so only that group's
/// members can be hit, never a group that later reuses the number. On kernels without group
/// signals through pidfds (before 6.9), falls back to `kill(-pgid)` while the leader is known not
/// to be reaped (`unreaped`). Returns whether a signal was sent.
pub fn signal_group_pinned(
    pidfd: Option<&std::os::fd::OwnedFd>,
    pgid: u32,
    signal: i32,
    unreaped: bool,
) -> bool {
    #[cfg(target_os = "linux")]
    if let Some(fd) = pidfd {
        use std::os::fd::AsRawFd;
        // SAFETY: pidfd_send_signal on a pidfd we own; no siginfo.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                fd.as_raw_fd(),
                signal,
                std::ptr::null::<libc::siginfo_t>(),
                PIDFD_SIGNAL_PROCESS_GROUP,
            )
        };
        if rc == 0 {
            return true;
        }
        if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINVAL) {
            return false;
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = pidfd;
    unreaped && signal_group(pgid, signal)
}

/// Opens a pidfd for `pid` (Linux 5.3+); `None` elsewhere or on failure.
pub fn open_pidfd(pid: u32) -> Option<std::os::fd::OwnedFd> {
    #[cfg(target_os = "linux")]
    {
        pidfd_open(pid)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = pid;
        None
    }
}

#[cfg(target_os = "linux")]
fn pidfd_open(pid: u32) -> Option<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if fd < 0 {
        None
    } else {
        // SAFETY: the kernel just gave us this fd; we own it.
        Some(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) })
    }
}

/// How the process of the pidfd `fd` ended, from the kernel (`PIDFD_GET_INFO` with
/// `PIDFD_INFO_EXIT`, Linux 6.15 and later): also for a process that is not this one's child,
/// such as an agent a previous botvisord started (issue 47). `None` where the kernel does not
/// tell it, or before the process exited.
pub fn pidfd_exit_info(fd: &std::os::fd::OwnedFd) -> Option<super::ExitInfo> {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        /// `struct pidfd_info` as far as `exit_code` (its first published size, 64 bytes).
        #[repr(C)]
        #[derive(Default)]
        struct PidfdInfo {
            mask: u64,
            cgroupid: u64,
            ids: [u32; 11],
            exit_code: i32,
        }
        const PIDFD_INFO_EXIT: u64 = 1 << 3;
        // _IOWR(0xFF, 11, struct pidfd_info) with its 64 bytes.
        const PIDFD_GET_INFO: libc::c_ulong = (3 << 30) | (64 << 16) | (0xFF << 8) | 11;
        let mut info = PidfdInfo {
            mask: PIDFD_INFO_EXIT,
            ..PidfdInfo::default()
        };
        // SAFETY: the ioctl fills a struct of the size its number encodes, given a pointer to one.
        let rc = unsafe { libc::ioctl(fd.as_raw_fd(), PIDFD_GET_INFO as _, &mut info) };
        if rc != 0 || info.mask & PIDFD_INFO_EXIT == 0 {
            return None;
        }
        let status = info.exit_code;
        Some(if libc::WIFEXITED(status) {
            super::ExitInfo {
                code: Some(libc::WEXITSTATUS(status)),
                signal: None,
            }
        } else {
            super::ExitInfo {
                code: None,
                signal: libc::WIFSIGNALED(status).then(|| libc::WTERMSIG(status)),
            }
        })
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = fd;
        None
    }
}

/// What a signalling syscall's return code means.
fn outcome(rc: i64) -> Signalled {
    if rc == 0 {
        return Signalled::Sent;
    }
    let e = std::io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::ESRCH) {
        Signalled::Gone
    } else {
        Signalled::Failed(e.to_string())
    }
}

/// Sends `signal` to the process named by `id`, only if it is still that process.
pub fn signal_identity(id: &ProcessIdentity, signal: i32) -> Signalled {
    // On Linux the pidfd pins whatever process had the pid when it was opened: check that it is
    // ours, then signal through it, so the pid cannot be reused in between.
    #[cfg(target_os = "linux")]
    let pidfd = pidfd_open(id.pid);
    match liveness(id) {
        Liveness::Alive => {}
        Liveness::Gone => return Signalled::Gone,
        Liveness::Unknown(e) => return Signalled::Failed(e),
    }
    #[cfg(target_os = "linux")]
    if let Some(fd) = pidfd {
        use std::os::fd::AsRawFd;
        // SAFETY: pidfd_send_signal on a pidfd we own; no siginfo.
        return outcome(unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                fd.as_raw_fd(),
                signal,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            )
        });
    }
    // SAFETY: kill(2) on a pid whose identity was just checked.
    outcome(i64::from(unsafe {
        libc::kill(id.pid as libc::pid_t, signal)
    }))
}

/// Sends `signal` to the process group `pgid`. Only for a group whose leader is our own child
/// not yet reaped (its pid, hence the group id, cannot be reused meanwhile). Returns false when
/// no member is left. A pgid of 0 or 1 is never signalled.
pub fn signal_group(pgid: u32, signal: i32) -> bool {
    if pgid <= 1 {
        return false;
    }
    // SAFETY: kill(2) with a negative pid signals a process group; no memory is touched.
    let rc = unsafe { libc::kill(-(pgid as libc::pid_t), signal) };
    rc == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::identity::{Liveness, identify, liveness};

    #[test]
    fn a_group_is_signalled_through_its_leaders_pidfd() {
        use std::os::unix::process::CommandExt;
        let mut leader = std::process::Command::new("sh")
            .args(["-c", "sleep 30 & wait"])
            .process_group(0)
            .spawn()
            .unwrap();
        let fd = open_pidfd(leader.id());
        assert!(fd.is_some());
        let mut member = None;
        for _ in 0..200 {
            member = crate::process::tree::descendants(leader.id()).pop();
            if member.is_some() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let member = member.expect("the group member starts");
        assert!(signal_group_pinned(
            fd.as_ref(),
            leader.id(),
            libc::SIGKILL,
            true
        ));
        leader.wait().unwrap();
        for _ in 0..200 {
            if liveness(&member) != Liveness::Alive {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_ne!(
            liveness(&member),
            Liveness::Alive,
            "the group member got the signal"
        );
    }

    #[test]
    fn a_reused_identity_is_never_signalled() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let id = identify(child.id()).unwrap();
        let stale = ProcessIdentity {
            start_time: id.start_time.wrapping_sub(1),
            ..id.clone()
        };
        assert_eq!(signal_identity(&stale, libc::SIGKILL), Signalled::Gone);
        assert!(
            child.try_wait().unwrap().is_none(),
            "the live process was not touched"
        );
        assert_eq!(signal_identity(&id, libc::SIGKILL), Signalled::Sent);
        child.wait().unwrap();
        assert_eq!(signal_identity(&id, libc::SIGKILL), Signalled::Gone);
    }
}
