//! Who hears the daemon's signals: design rule 14 for what is not a call.
//!
//! A signal with no destination reaches every connection whose match rule fits it, whoever runs
//! it. On a stock session bus only the user can connect, so botvisord broadcasts, as every
//! service does, and `busctl monitor`, `gdbus monitor` and plain match rules all work.
//!
//! botvisord learns the user id of every connection on its bus (`ListNames` at start, then
//! `NameOwnerChanged`; see [`super::clients`] and [`super::caller`]). As soon as it sees a connection of another user,
//! or one whose user the bus cannot tell, it says so once in the journal and, until it exits,
//! sends each signal unicast to every connection of its own user instead: one copy per
//! connection, delivered whatever that connection's match rules (clients pick theirs out as
//! usual), and nothing to the others. Properties in `InterfacesAdded`, which zbus broadcasts
//! itself, are then left out ([`super::guard`]) and sent unicast in a second `InterfacesAdded`
//! ([`super::objects::announce`]).
//!
//! What this cannot do: a connection that joins in the instant before botvisord has learned of
//! it may still get a broadcast signal, and on a bus whose policy lets other users eavesdrop
//! (`eavesdrop="true"`) or monitor, unicast messages, replies included, reach them too.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use zbus::Connection;
use zbus::ObjectPath;
use zbus::names::BusName;
use zbus::object_server::SignalEmitter;

use super::caller::CallerCheck;

/// The signal policy of one bus connection.
pub struct Audience {
    caller: Arc<CallerCheck>,
    restricted: AtomicBool,
}

impl Audience {
    /// Broadcasting until told of a connection of another user.
    pub fn new(caller: Arc<CallerCheck>) -> Self {
        Audience {
            caller,
            restricted: AtomicBool::new(false),
        }
    }

    /// Whether signals go unicast to the user's connections (another user was seen).
    pub fn restricted(&self) -> bool {
        self.restricted.load(Ordering::SeqCst)
    }

    /// Learns the user of the connection `name` (a unique name on the bus, not the daemon's
    /// own); restricts the audience when it is not the daemon's user or cannot be told. A
    /// connection that left before it could be asked about is forgotten: it hears nothing any
    /// more.
    pub async fn learn(&self, name: &str) {
        match self.caller.uid_of(name).await {
            Ok(uid) if uid == self.caller.me() => {}
            Ok(uid) => self.restrict(name, &format!("runs as user {uid}")),
            Err(zbus::fdo::Error::NameHasNoOwner(_)) => self.caller.forget(name),
            Err(e) => self.restrict(name, &format!("runs as a user the bus cannot tell ({e})")),
        }
    }

    fn restrict(&self, name: &str, why: &str) {
        if !self.restricted.swap(true, Ordering::SeqCst) {
            tracing::warn!(
                connection = name,
                "connection {name} on this bus {why}, not as user {}: from now on botvisord \
                 sends its signals only to the connections of user {}, one copy each",
                self.caller.me(),
                self.caller.me()
            );
        }
    }

    /// The emitters for one signal from `path`: one without destination while broadcasting,
    /// else one per connection of the user (none when there is none).
    pub fn emitters(
        &self,
        conn: &Connection,
        path: &ObjectPath<'_>,
    ) -> zbus::Result<Vec<SignalEmitter<'static>>> {
        let base = SignalEmitter::new(conn, path.to_owned())?;
        if !self.restricted() {
            return Ok(vec![base.into_owned()]);
        }
        let own = conn.unique_name().map(|n| n.to_string());
        Ok(self
            .caller
            .connections_of_user(own.as_deref())
            .into_iter()
            .filter_map(|name| BusName::try_from(name).ok())
            .map(|dest| base.clone().set_destination(dest).into_owned())
            .collect())
    }
}
