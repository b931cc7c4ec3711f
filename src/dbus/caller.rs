//! Design rule 14: only the user. Who each connection on the bus is (its Unix user id, asked of
//! the bus once and kept while the connection is there), and the check every method call and
//! every property read goes through ([`super::guard`]).

use std::collections::HashMap;
use std::sync::Mutex;

use zbus::message::Header;

use super::error::Error;
use super::lookup::BusLookup;

/// The connections on the bus as far as botvisord was told (`ListNames` at start, then
/// `NameOwnerChanged`), each with its user id once it is known. Only a connection that is on
/// the bus has its user id kept: an answer that comes after its connection left is not (unique
/// names are never given twice, so it would be kept for nothing, for ever).
#[derive(Debug, Default)]
pub struct Presence {
    on_bus: HashMap<String, Option<u32>>,
}

impl Presence {
    /// `name` joined the bus; its user is not known yet.
    pub fn joined(&mut self, name: &str) {
        self.on_bus.entry(name.to_owned()).or_insert(None);
    }

    /// `name` left the bus.
    pub fn left(&mut self, name: &str) {
        self.on_bus.remove(name);
    }

    /// The bus said `name` runs as `uid`: kept while `name` is on the bus.
    pub fn learned(&mut self, name: &str, uid: u32) {
        if let Some(slot) = self.on_bus.get_mut(name) {
            *slot = Some(uid);
        }
    }

    /// The user id of `name`, if it is on the bus and known.
    pub fn uid(&self, name: &str) -> Option<u32> {
        self.on_bus.get(name).copied().flatten()
    }

    /// Whether `name` is on the bus and its user not known yet.
    pub fn unknown(&self, name: &str) -> bool {
        matches!(self.on_bus.get(name), Some(None))
    }

    /// The names on the bus known to run as `uid`, but `except`.
    pub fn of_user(&self, uid: u32, except: Option<&str>) -> Vec<String> {
        self.on_bus
            .iter()
            .filter(|(name, u)| **u == Some(uid) && Some(name.as_str()) != except)
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// How many connections are on the bus, as far as botvisord was told.
    pub fn len(&self) -> usize {
        self.on_bus.len()
    }

    /// Whether no connection is on the bus, as far as botvisord was told.
    pub fn is_empty(&self) -> bool {
        self.on_bus.is_empty()
    }
}

/// Who each connection on the bus is, and the check of design rule 14.
pub struct CallerCheck {
    me: u32,
    lookup: BusLookup,
    presence: Mutex<Presence>,
}

impl CallerCheck {
    /// A check that asks the bus through `lookup` (never through the connection whose calls it
    /// checks: [`super::lookup`] says why).
    pub fn new(lookup: BusLookup) -> Self {
        CallerCheck {
            // SAFETY: getuid never fails and touches no memory.
            me: unsafe { libc::getuid() },
            lookup,
            presence: Mutex::new(Presence::default()),
        }
    }

    /// The daemon's user id.
    pub fn me(&self) -> u32 {
        self.me
    }

    /// The connection the questions go through.
    pub fn lookup(&self) -> &BusLookup {
        &self.lookup
    }

    /// The connection `name` joined the bus.
    pub fn joined(&self, name: &str) {
        self.lock().joined(name);
    }

    /// Forgets a unique name (its client left the bus).
    pub fn forget(&self, unique_name: &str) {
        self.lock().left(unique_name);
    }

    /// Whether `name` is on the bus and its user not yet known.
    pub fn unknown(&self, name: &str) -> bool {
        self.lock().unknown(name)
    }

    /// The Unix user id of the connection `name` (a unique name): known, or asked of the bus
    /// (`GetConnectionUnixUser`, bounded by [`super::lookup::LOOKUP_TIMEOUT`]) and kept while
    /// the connection is on the bus. Fails when the bus cannot tell, for example because the
    /// connection has left (`NameHasNoOwner`).
    pub async fn uid_of(&self, name: &str) -> Result<u32, zbus::fdo::Error> {
        if let Some(uid) = self.lock().uid(name) {
            return Ok(uid);
        }
        let uid = self.lookup.uid_of(name).await?;
        self.lock().learned(name, uid);
        Ok(uid)
    }

    /// Ok when the sender of `hdr` runs as the daemon's user; `AccessDenied` otherwise, also
    /// when the bus cannot say who the sender is. A peer-to-peer connection (no sender) was
    /// authenticated by its user id and passes.
    pub async fn check(&self, hdr: &Header<'_>) -> Result<(), Error> {
        let Some(sender) = hdr.sender() else {
            return Ok(());
        };
        let uid = self
            .uid_of(sender.as_str())
            .await
            .map_err(|e| Error::AccessDenied(format!("cannot tell who the caller is: {e}")))?;
        if uid == self.me {
            Ok(())
        } else {
            Err(Error::AccessDenied(format!(
                "botvisord serves only user {}; the caller runs as user {uid}",
                self.me
            )))
        }
    }

    /// The unique names known to belong to the daemon's user, but `except`.
    pub fn connections_of_user(&self, except: Option<&str>) -> Vec<String> {
        self.lock().of_user(self.me, except)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Presence> {
        self.presence.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The longest client name recorded, in characters.
pub const MAX_CLIENT_NAME_CHARS: usize = 64;

/// A client's own name for itself (the `client` option), cut to [`MAX_CLIENT_NAME_CHARS`]
/// printable characters.
pub fn client_label(name: &str) -> String {
    name.chars()
        .filter(|c| !c.is_control())
        .take(MAX_CLIENT_NAME_CHARS)
        .collect()
}

/// The process name of the client with unique bus name `sender` (its `/proc/PID/comm` on Linux),
/// or empty where the bus or the system cannot tell.
pub async fn process_name(lookup: &BusLookup, sender: &str) -> String {
    let Ok(pid) = lookup.pid_of(sender).await else {
        return String::new();
    };
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|comm| client_label(comm.trim()))
        .unwrap_or_default()
}

/// The process behind the client with unique bus name `sender` (`GetConnectionUnixProcessID`)
/// and the bot id it carries as its marker (`process::tree::BOT_MARKER`, inherited by every
/// descendant of a bot's agent), if any. `(0, None)` where the bus cannot tell (a client that
/// left); a client over `--host` is its bridge process, which carries no marker.
pub async fn caller_process(lookup: &BusLookup, sender: &str) -> (u32, Option<String>) {
    match lookup.pid_of(sender).await {
        Ok(pid) => (pid, crate::process::tree::marker_of(pid)),
        Err(_) => (0, None),
    }
}

#[cfg(test)]
mod tests {
    use super::Presence;

    #[test]
    fn a_user_is_kept_only_while_its_connection_is_on_the_bus() {
        let mut p = Presence::default();
        p.joined(":1.7");
        assert!(p.unknown(":1.7"));
        p.learned(":1.7", 1000);
        assert_eq!(p.uid(":1.7"), Some(1000));
        assert!(!p.unknown(":1.7"));
        p.left(":1.7");
        assert_eq!(p.uid(":1.7"), None);
        // An answer that comes after the connection left is not kept.
        p.learned(":1.7", 1000);
        assert_eq!(p.uid(":1.7"), None);
        assert!(p.is_empty());
        // Nor one for a connection botvisord was not told of.
        p.learned(":1.8", 1000);
        assert!(p.is_empty());
    }

    #[test]
    fn a_second_join_keeps_what_is_known() {
        let mut p = Presence::default();
        p.joined(":1.7");
        p.learned(":1.7", 1000);
        p.joined(":1.7");
        assert_eq!(p.uid(":1.7"), Some(1000));
    }

    #[test]
    fn the_users_connections_are_those_known_to_run_as_the_user() {
        let mut p = Presence::default();
        for n in [":1.1", ":1.2", ":1.3", ":1.4"] {
            p.joined(n);
        }
        p.learned(":1.1", 1000);
        p.learned(":1.2", 1000);
        p.learned(":1.3", 0);
        let mut mine = p.of_user(1000, Some(":1.2"));
        mine.sort();
        assert_eq!(mine, vec![":1.1".to_owned()]);
        assert_eq!(p.len(), 4);
    }
}
