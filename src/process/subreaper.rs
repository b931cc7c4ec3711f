//! The daemon as child subreaper (Linux `PR_SET_CHILD_SUBREAPER`, prctl(2)): descendants of a bot
//! that leave its process group and lose their parent (setsid, double fork, a CLI killed with
//! SIGKILL) are reparented to the daemon instead of init, so they can still be found and stopped.
//!
//! The daemon must then reap them, without stealing the exit statuses tokio waits for: every pid
//! botvisor spawns through tokio is registered here ([`spawn_protected`]) until tokio has waited
//! for it, and [`reap_orphans`] only reaps zombie children that are not registered.

use std::collections::HashMap;
use std::sync::Mutex;

use super::identity::stat;
use super::tree::{children, has_marker};

/// Pids tokio waits for, counted: a pid reused by a new agent before the old one's
/// [`unprotect`] ran stays protected.
static PROTECTED: Mutex<Option<HashMap<u32, usize>>> = Mutex::new(None);

fn with_protected<R>(f: impl FnOnce(&mut HashMap<u32, usize>) -> R) -> R {
    let mut guard = PROTECTED.lock().unwrap_or_else(|p| p.into_inner());
    f(guard.get_or_insert_with(HashMap::new))
}

/// Makes the calling process a child subreaper. Linux only; elsewhere a no-op that says so.
pub fn become_subreaper() -> std::io::Result<bool> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: prctl with PR_SET_CHILD_SUBREAPER takes an integer flag.
        let rc = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(true)
    }
    #[cfg(not(target_os = "linux"))]
    {
        Ok(false)
    }
}

/// Spawns with `spawn` while the registry is locked and registers the pid it returns, so that
/// [`reap_orphans`] can never reap it in between.
pub fn spawn_protected<T>(
    spawn: impl FnOnce() -> std::io::Result<(T, u32)>,
) -> std::io::Result<(T, u32)> {
    with_protected(|set| {
        let (t, pid) = spawn()?;
        *set.entry(pid).or_insert(0) += 1;
        Ok((t, pid))
    })
}

/// Unregisters a pid once tokio has waited for it.
pub fn unprotect(pid: u32) {
    with_protected(|set| {
        if let Some(n) = set.get_mut(&pid) {
            *n -= 1;
            if *n == 0 {
                set.remove(&pid);
            }
        }
    });
}

/// Reaps every zombie child of the daemon that tokio does not wait for. Returns their pids.
pub fn reap_orphans() -> Vec<u32> {
    with_protected(|set| {
        let mut reaped = Vec::new();
        for pid in children(std::process::id()) {
            if set.contains_key(&pid) {
                continue;
            }
            if stat(pid).is_ok_and(|s| s.is_dead()) {
                let mut status = 0;
                // SAFETY: waitpid on one specific child of ours, without blocking.
                let rc = unsafe { libc::waitpid(pid as libc::pid_t, &mut status, libc::WNOHANG) };
                if rc == pid as libc::pid_t {
                    reaped.push(pid);
                }
            }
        }
        reaped
    })
}

/// Live children of the daemon that tokio did not spawn (adopted orphans) and that carry the
/// marker of `bot_id`.
pub fn adopted_orphans(bot_id: &str) -> Vec<u32> {
    let own: Vec<u32> = with_protected(|set| set.keys().copied().collect());
    children(std::process::id())
        .into_iter()
        .filter(|pid| !own.contains(pid))
        .filter(|pid| stat(*pid).is_ok_and(|s| !s.is_dead()))
        .filter(|pid| has_marker(*pid, bot_id))
        .collect()
}

/// Reaps orphans adopted as child subreaper whenever a child changes state (SIGCHLD), for as
/// long as the daemon runs.
pub async fn reap_on_sigchld() {
    let Ok(mut sigchld) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child())
    else {
        tracing::warn!("cannot watch SIGCHLD; orphans are reaped at stops only");
        return;
    };
    loop {
        for pid in reap_orphans() {
            tracing::debug!(pid, "reaped an adopted orphan");
        }
        if sigchld.recv().await.is_none() {
            return;
        }
    }
}
