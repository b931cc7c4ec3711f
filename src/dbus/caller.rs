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
