//! The service's file descriptor store (`FileDescriptorStoreMax=`, systemd's
//! `docs/FILE_DESCRIPTOR_STORE.md`): where an agent's pipes wait for the next botvisord.
//!
//! Each agent's descriptors are stored at its launch and removed at its stop, one name each
//! ([`name`]: `<bot id>.<role>`). A stored pipe is sent with `FDPOLL=0`: without it systemd
//! drops a pipe at its first POLLHUP. A stored duplicate of an agent's stdin keeps it from ever
//! seeing the end of its input, so a stop removes it first. The user manager keeps the store
//! across a restart and a crash (`Restart=on-failure`) and empties it at a real stop; a new
//! botvisord takes the stored descriptors from `LISTEN_FDS`/`LISTEN_FDNAMES` ([`take_passed`]),
//! named, in no order to rely on.

use std::collections::BTreeMap;
use std::os::fd::{AsFd, FromRawFd, OwnedFd};

use sd_notify::NotifyState;

/// What a stored descriptor is to an agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// The write end of its stdin.
    Stdin,
    /// The read end of its stdout.
    Stdout,
    /// The read end of its stderr.
    Stderr,
    /// A pidfd of its root process: its exit is seen by whoever holds it.
    Pid,
}

impl Role {
    /// Every role, in the order they are stored.
    pub const ALL: [Role; 4] = [Role::Stdin, Role::Stdout, Role::Stderr, Role::Pid];

    /// `in`, `out`, `err` or `pid`.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Stdin => "in",
            Role::Stdout => "out",
            Role::Stderr => "err",
            Role::Pid => "pid",
        }
    }

    fn parse(s: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|r| r.as_str() == s)
    }
}

/// The store's name of `bot_id`'s descriptor `role`: `<bot id>.<role>` (at most 255 bytes of
/// `[A-Za-z0-9_.:-]`, as systemd takes names; a bot id is 32 hexadecimal digits).
pub fn name(bot_id: &str, role: Role) -> String {
    format!("{bot_id}.{}", role.as_str())
}

/// The bot and role a stored name stands for; `None` for a name botvisord did not give.
pub fn parse_name(name: &str) -> Option<(String, Role)> {
    let (bot, role) = name.rsplit_once('.')?;
    let ok = !bot.is_empty() && bot.bytes().all(|b| b.is_ascii_alphanumeric());
    Some((bot.to_owned(), Role::parse(role)?)).filter(|_| ok)
}

/// Whether there is a store to use: botvisord runs under a service manager that gave it a
/// notification socket.
pub fn available() -> bool {
    std::env::var_os("NOTIFY_SOCKET").is_some()
}

/// Stores `fd` as `name` (`FDSTORE=1`, `FDNAME=`, `FDPOLL=0`). Errors: the notification
/// socket's (a full store is not told back: systemd drops what does not fit, and says so in its
/// journal).
pub fn store(name: &str, fd: impl AsFd) -> std::io::Result<()> {
    sd_notify::notify_with_fds(
        &[
            NotifyState::FdStore,
            NotifyState::FdName(name),
            NotifyState::Custom("FDPOLL=0"),
        ],
        &[fd.as_fd()],
    )
}

/// Removes what is stored as `name` (`FDSTOREREMOVE=1`). Errors: the notification socket's.
pub fn remove(name: &str) -> std::io::Result<()> {
    sd_notify::notify(&[NotifyState::FdStoreRemove, NotifyState::FdName(name)])
}

/// The descriptors the service manager passed this process (`LISTEN_FDS`, named by
/// `LISTEN_FDNAMES`), each owned once: by bot id and role for the names botvisord gave, and the
/// others apart (closed by the caller, and removed from the store). Called once, at start; a
/// second call finds none (the variables are read, not unset: the agents never inherit them,
/// each runs with its own environment).
pub fn take_passed() -> Passed {
    static TAKEN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    let mut passed = Passed::default();
    if TAKEN.swap(true, std::sync::atomic::Ordering::SeqCst) {
        return passed;
    }
    let Ok(fds) = sd_notify::listen_fds_with_names() else {
        return passed;
    };
    for (raw, fd_name) in fds {
        // SAFETY: the service manager passed `raw` to this process for it to own, and this is
        // the only place that takes it (once per process, above).
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        match parse_name(&fd_name) {
            Some((bot, role)) => {
                passed.bots.entry(bot).or_default().insert(role, fd);
            }
            None => passed.other.push((fd_name, fd)),
        }
    }
    passed
}

/// What [`take_passed`] found.
#[derive(Debug, Default)]
pub struct Passed {
    /// By bot id, each role's descriptor.
    pub bots: BTreeMap<String, BTreeMap<Role, OwnedFd>>,
    /// Descriptors of names botvisord did not give.
    pub other: Vec<(String, OwnedFd)>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_its_bot_and_role_and_nothing_else_is() {
        let id = "0123456789abcdef0123456789abcdef";
        for role in Role::ALL {
            assert_eq!(parse_name(&name(id, role)), Some((id.to_owned(), role)));
        }
        assert!(name(id, Role::Stdout).len() <= 255);
        for other in ["", ".in", "x.y", "a/b.in", "stored", "bot.in.out"] {
            assert_eq!(parse_name(other), None, "{other}");
        }
    }
}
