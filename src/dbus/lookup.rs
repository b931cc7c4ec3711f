//! Questions botvisord asks the bus about its clients (who a connection is, which process, who
//! is on the bus), on a connection of their own.
//!
//! Why a second connection: zbus reads one connection's socket in one task and hands each message
//! to the streams that want it, waiting while a stream is full (64 messages). The object server
//! reads method calls from such a stream and, to keep calls on one bot in order (design rule 7),
//! runs botvisord's methods in that same task. A method that asked the bus a question on the
//! connection its calls arrive on would wait for an answer queued behind calls nobody reads once
//! 64 of them are waiting: the daemon would answer nothing, ever again (issue 23: a burst of new
//! clients). The answers to these questions arrive here, where no stream can fill: this
//! connection subscribes to nothing and serves nothing.

use std::time::Duration;

use zbus::Connection;
use zbus::fdo::DBusProxy;
use zbus::names::BusName;

/// How long the bus may take to answer one question. The bus answers these from its own tables
/// at once; 25 s is D-Bus's usual method timeout, the bound for a bus that has stopped.
pub const LOOKUP_TIMEOUT: Duration = Duration::from_secs(25);

/// The daemon's connection for questions to the bus.
#[derive(Clone)]
pub struct BusLookup {
    conn: Connection,
    dbus: DBusProxy<'static>,
}

impl BusLookup {
    /// A new connection made by `builder` (to the daemon's bus), every call bounded by
    /// [`LOOKUP_TIMEOUT`].
    pub async fn connect(builder: zbus::connection::Builder<'_>) -> zbus::Result<BusLookup> {
        let conn = builder.method_timeout(LOOKUP_TIMEOUT).build().await?;
        let dbus = DBusProxy::builder(&conn)
            .cache_properties(zbus::proxy::CacheProperties::No)
            .build()
            .await?;
        Ok(BusLookup { conn, dbus })
    }

    /// The lookup connection itself: to watch for its end.
    pub fn connection(&self) -> &Connection {
        &self.conn
    }

    /// The Unix user id of the connection with unique name `name` (`GetConnectionUnixUser`).
    /// Errors: `NameHasNoOwner` when it has left, `InvalidArgs` for a name that is not one.
    pub async fn uid_of(&self, name: &str) -> Result<u32, zbus::fdo::Error> {
        self.dbus.get_connection_unix_user(bus_name(name)?).await
    }

    /// The process id of the connection `name` (`GetConnectionUnixProcessId`).
    pub async fn pid_of(&self, name: &str) -> Result<u32, zbus::fdo::Error> {
        self.dbus
            .get_connection_unix_process_id(bus_name(name)?)
            .await
    }

    /// Whether the connection `name` is on the bus now (`NameHasOwner`). A bus that cannot say
    /// is taken to say yes: a lease then ends when the client leaves, as any other.
    pub async fn on_bus(&self, name: &str) -> bool {
        match bus_name(name) {
            Ok(n) => self.dbus.name_has_owner(n).await.unwrap_or(true),
            Err(_) => false,
        }
    }

    /// The unique names of every connection on the bus now (`ListNames`, names beginning with
    /// `:`).
    pub async fn connections(&self) -> Result<Vec<String>, zbus::fdo::Error> {
        Ok(self
            .dbus
            .list_names()
            .await?
            .into_iter()
            .map(|n| n.to_string())
            .filter(|n| n.starts_with(':'))
            .collect())
    }
}

fn bus_name(name: &str) -> Result<BusName<'_>, zbus::fdo::Error> {
    BusName::try_from(name).map_err(|e| zbus::fdo::Error::InvalidArgs(e.to_string()))
}
