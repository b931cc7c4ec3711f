//! Design rule 14: only the user. Every method asks the bus for its caller's Unix user id and
//! compares it with the daemon's; answers are cached per unique name.

use std::collections::HashMap;
use std::sync::Mutex;

use zbus::Connection;
use zbus::message::Header;

use super::error::Error;

/// The cache of caller user ids, by unique bus name.
#[derive(Default)]
pub struct CallerCheck {
    known: Mutex<HashMap<String, u32>>,
}

impl CallerCheck {
    /// Ok when the sender of `hdr` runs as the daemon's user; `AccessDenied` otherwise.
    pub async fn check(&self, conn: &Connection, hdr: &Header<'_>) -> Result<(), Error> {
        let Some(sender) = hdr.sender() else {
            // A peer-to-peer connection has no sender; its peer was authenticated by uid.
            return Ok(());
        };
        let sender = sender.to_string();
        let cached = self
            .known
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&sender)
            .copied();
        let uid = match cached {
            Some(uid) => uid,
            None => {
                let dbus = zbus::fdo::DBusProxy::new(conn).await?;
                let uid = dbus
                    .get_connection_unix_user(sender.as_str().try_into()?)
                    .await
                    .map_err(|e| {
                        Error::AccessDenied(format!("cannot tell who the caller is: {e}"))
                    })?;
                self.known
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(sender.clone(), uid);
                uid
            }
        };
        // SAFETY: getuid never fails and touches no memory.
        let me = unsafe { libc::getuid() };
        if uid == me {
            Ok(())
        } else {
            Err(Error::AccessDenied(format!(
                "botvisord serves only user {me}; the caller runs as user {uid}"
            )))
        }
    }

    /// Forgets a unique name (its client left the bus).
    pub fn forget(&self, unique_name: &str) {
        self.known
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(unique_name);
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
