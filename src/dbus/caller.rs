//! Design rule 14: only the user. Who each connection on the bus is (its Unix user id, asked of
//! the bus once and kept while the connection is there), and the check every method call and
//! every property read goes through ([`super::guard`]).

use std::collections::HashMap;
use std::sync::Mutex;

use zbus::Connection;
use zbus::message::Header;

use super::error::Error;

/// The user ids of connections on the bus, by unique name.
pub struct CallerCheck {
    me: u32,
    known: Mutex<HashMap<String, u32>>,
}

impl Default for CallerCheck {
    fn default() -> Self {
        CallerCheck {
            // SAFETY: getuid never fails and touches no memory.
            me: unsafe { libc::getuid() },
            known: Mutex::new(HashMap::new()),
        }
    }
}

impl CallerCheck {
    /// The daemon's user id.
    pub fn me(&self) -> u32 {
        self.me
    }

    /// The Unix user id of the connection `name` (a unique name), from the cache or asked of
    /// the bus (`GetConnectionUnixUser`). Fails when the bus cannot tell, for example because
    /// the connection has left (`NameHasNoOwner`).
    pub async fn uid_of(&self, conn: &Connection, name: &str) -> Result<u32, zbus::fdo::Error> {
        if let Some(uid) = self.lock().get(name).copied() {
            return Ok(uid);
        }
        let dbus = zbus::fdo::DBusProxy::new(conn).await?;
        let bus_name = zbus::names::BusName::try_from(name)
            .map_err(|e| zbus::fdo::Error::InvalidArgs(e.to_string()))?;
        let uid = dbus.get_connection_unix_user(bus_name).await?;
        self.lock().insert(name.to_owned(), uid);
        Ok(uid)
    }

    /// Ok when the sender of `hdr` runs as the daemon's user; `AccessDenied` otherwise, also
    /// when the bus cannot say who the sender is. A peer-to-peer connection (no sender) was
    /// authenticated by its user id and passes.
    pub async fn check(&self, conn: &Connection, hdr: &Header<'_>) -> Result<(), Error> {
        let Some(sender) = hdr.sender() else {
            return Ok(());
        };
        let uid = self
            .uid_of(conn, sender.as_str())
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
        self.lock()
            .iter()
            .filter(|(name, uid)| **uid == self.me && Some(name.as_str()) != except)
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// Forgets a unique name (its client left the bus).
    pub fn forget(&self, unique_name: &str) {
        self.lock().remove(unique_name);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, u32>> {
        self.known.lock().unwrap_or_else(|p| p.into_inner())
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
pub async fn process_name(conn: &Connection, sender: &str) -> String {
    let Ok(name) = zbus::names::BusName::try_from(sender) else {
        return String::new();
    };
    let Ok(dbus) = zbus::fdo::DBusProxy::new(conn).await else {
        return String::new();
    };
    let Ok(pid) = dbus.get_connection_unix_process_id(name).await else {
        return String::new();
    };
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|comm| client_label(comm.trim()))
        .unwrap_or_default()
}
