//! Stopping processes by identity and waiting for them without polling where the OS allows it
//! (a pidfd becomes readable when its process exits).

use std::time::Duration;

use tokio::time::Instant;

use super::identity::{Liveness, ProcessIdentity, liveness};
use super::signal::{Signalled, signal_identity};

/// After SIGKILL, how long a descendant may take to be gone before it counts as a survivor.
pub const DESCENDANT_KILL_WAIT: Duration = Duration::from_secs(2);

/// Waits until every process in `ids` has exited, or `deadline`.
pub async fn wait_gone(ids: &[ProcessIdentity], deadline: Instant) {
    #[cfg(target_os = "linux")]
    {
        let mut waits = Vec::new();
        let mut fallback = Vec::new();
        for id in ids {
            match pidfd_watch(id) {
                Watch::Gone => {}
                Watch::Fd(fd) => waits.push(async move {
                    let _ = fd.readable().await;
                }),
                Watch::Unsupported => fallback.push(id.clone()),
            }
        }
        let all = futures_util::future::join_all(waits);
        let _ = tokio::time::timeout_at(deadline, all).await;
        poll_gone(&fallback, deadline).await;
    }
    #[cfg(not(target_os = "linux"))]
    poll_gone(ids, deadline).await;
}

/// Bounded polling, for systems without pidfds.
async fn poll_gone(ids: &[ProcessIdentity], deadline: Instant) {
    while Instant::now() < deadline && ids.iter().any(|id| liveness(id) == Liveness::Alive) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[cfg(target_os = "linux")]
enum Watch {
    Gone,
    Fd(tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>),
    Unsupported,
}

#[cfg(target_os = "linux")]
fn pidfd_watch(id: &ProcessIdentity) -> Watch {
    use std::os::fd::FromRawFd;
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, id.pid as libc::pid_t, 0) };
    if fd < 0 {
        let e = std::io::Error::last_os_error();
        return if e.raw_os_error() == Some(libc::ESRCH) {
            Watch::Gone
        } else {
            Watch::Unsupported
        };
    }
    // SAFETY: the kernel just gave us this fd; we own it.
    let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) };
    if liveness(id) != Liveness::Alive {
        return Watch::Gone;
    }
    // SAFETY: an OwnedFd keeps its one descriptor open, unchanged, until the AsyncFd drops it.
    let registered = unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE)
    };
    match registered {
        Ok(afd) => Watch::Fd(afd),
        Err(_) => Watch::Unsupported,
    }
}

/// Stops processes by identity: SIGTERM, up to `grace`, SIGKILL, up to
/// [`DESCENDANT_KILL_WAIT`]. Returns each one's liveness afterwards.
pub async fn stop_by_identity(
    ids: &[ProcessIdentity],
    grace: Duration,
) -> Vec<(ProcessIdentity, Liveness)> {
    let mut alive = Vec::new();
    let mut out = Vec::new();
    for id in ids {
        match signal_identity(id, libc::SIGTERM) {
            Signalled::Sent => alive.push(id.clone()),
            Signalled::Gone => out.push((id.clone(), Liveness::Gone)),
            Signalled::Failed(e) => out.push((id.clone(), Liveness::Unknown(e))),
        }
    }
    if alive.is_empty() {
        return out;
    }
    wait_gone(&alive, Instant::now() + grace).await;
    let mut killed = Vec::new();
    for id in &alive {
        if liveness(id) == Liveness::Alive {
            tracing::warn!(pid = id.pid, "descendant ignored SIGTERM; SIGKILL");
            if signal_identity(id, libc::SIGKILL) == Signalled::Sent {
                killed.push(id.clone());
            }
        }
    }
    wait_gone(&killed, Instant::now() + DESCENDANT_KILL_WAIT).await;
    for id in alive {
        let l = liveness(&id);
        out.push((id, l));
    }
    out
}
