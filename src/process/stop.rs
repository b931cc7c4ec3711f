//! Signals to a process group.

/// Sends `signal` to the process group `pgid`. Returns false when no process of the group is
/// left (`ESRCH`). A pgid of 0 or 1 is never signalled.
pub fn signal_group(pgid: u32, signal: i32) -> bool {
    if pgid <= 1 {
        return false;
    }
    // SAFETY: kill(2) with a negative pid signals a process group; no memory is touched.
    let rc = unsafe { libc::kill(-(pgid as libc::pid_t), signal) };
    rc == 0
}
