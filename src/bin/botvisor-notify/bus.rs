//! The bus: the connection, the match rules, and one task that reads every message the
//! connection receives, in the order received, and moves each at once into an unbounded queue:
//! botvisord's signals to the main loop, the notification server's to the desktop task. Nothing
//! that reads the connection's stream waits for the bus (design rule 15), so no reply waits
//! behind a full stream.
//!
//! One stream for all, not one per match rule: zbus matches a rule naming a well-known sender
//! against every signal it receives (it cannot tell who owns a name), so streams of several such
//! rules would each get every signal; one stream of the whole connection keeps the bus's order,
//! which `Daemon::accepts` relies on.

use std::collections::HashMap;
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::mpsc::UnboundedSender;
use zbus::message::{Sequence, Type};
use zbus::{Connection, MatchRule, OwnedObjectPath, OwnedVariant as OwnedValue};

use botvisor::dbus::{BOT_INTERFACE, BUS_NAME, ROOT_PATH};

use super::model::{Key, Pending, Props, Signal};

/// The notification server's well-known name, path and interface.
pub const NOTIFICATIONS: &str = "org.freedesktop.Notifications";
/// Its object path.
pub const NOTIFICATIONS_PATH: &str = "/org/freedesktop/Notifications";

/// How long `GetManagedObjects` may take: botvisord answers reads at once, even while its
/// database is locked; past this it is stuck, and botvisor-notify waits for it to come back.
const SNAPSHOT_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a question to the bus itself (`GetNameOwner`, `AddMatch`) may take: the bus answers
/// at once unless it is gone.
const BUS_TIMEOUT: Duration = Duration::from_secs(10);

/// What the main loop is told. A host is an index into the hosts followed: 0 is this machine's
/// bus (the one the notification server is on), the others those of `--all-hosts`.
pub enum Input {
    /// A signal of a host's botvisord: where the connection received it, its sender (a unique
    /// name), and what it says.
    Signal(usize, Sequence, String, Signal),
    /// A host's botvisord took the name (its unique name) or left.
    DaemonOwner(usize, Option<String>),
    /// Another host's link is up, subscribed: its connection (answers to it go there).
    Linked(usize, Connection),
    /// An action of a notification was invoked.
    Action {
        /// The notification.
        key: Key,
        /// The action key (`default`, `allow-N`, `deny-N`).
        action: String,
    },
    /// A notification showing `tag` was dismissed by the user or expired.
    Dismissed {
        /// The notification.
        key: Key,
        /// What it showed (`Note::tag`).
        tag: String,
    },
    /// A host's connection ended, and why.
    Lost(usize, String),
    /// What a host's botvisord had when it was read ([`snapshot`]), for the read numbered
    /// `generation` of that host (an older read's is dropped); `None` when it did not answer.
    Snapshot(usize, u64, Option<Snapshot>),
}

/// What the desktop task is told of the notification server.
#[derive(Debug)]
pub enum ServerEvent {
    /// The server's name has a new owner (its unique name), or none.
    Owner(Option<String>),
    /// `ActionInvoked(id, action_key)` from `sender`.
    Action {
        /// The sender's unique name.
        sender: String,
        /// The notification.
        id: u32,
        /// The action key.
        action: String,
    },
    /// `NotificationClosed(id, reason)` from `sender`.
    Closed {
        /// The sender's unique name.
        sender: String,
        /// The notification.
        id: u32,
        /// 1 expired, 2 dismissed by the user, 3 closed by `CloseNotification`, 4 other.
        reason: u32,
    },
}

/// Connects to `address`, else the session bus; the error says which and why.
pub async fn connect(address: Option<&str>) -> Result<Connection, String> {
    match address {
        Some(a) => zbus::connection::Builder::address(a)
            .build()
            .await
            .map_err(|e| format!("cannot connect to the bus at {a:?}: {e}")),
        None => Connection::session().await.map_err(|e| {
            format!(
                "cannot connect to the session bus ({e}); is DBUS_SESSION_BUS_ADDRESS set? \
                 (--address names another bus)"
            )
        }),
    }
}

/// Adds the match rules: every signal of botvisord, the notification server's signals, and the
/// owners of both names.
pub async fn subscribe(conn: &Connection) -> Result<(), String> {
    let dbus = zbus::fdo::DBusProxy::new(conn)
        .await
        .map_err(|e| format!("cannot ask the bus: {e}"))?;
    let rules = [
        MatchRule::builder()
            .msg_type(Type::Signal)
            .sender(BUS_NAME)
            .build(),
        MatchRule::builder()
            .msg_type(Type::Signal)
            .sender(NOTIFICATIONS)
            .interface(NOTIFICATIONS)
            .build(),
        owner_rule(BUS_NAME),
        owner_rule(NOTIFICATIONS),
    ];
    for rule in rules {
        let rule = rule.map_err(|e| format!("a match rule: {e}"))?;
        match tokio::time::timeout(BUS_TIMEOUT, dbus.add_match_rule(rule)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(format!("the bus refused a match rule: {e}")),
            Err(_) => {
                return Err(format!(
                    "the bus did not answer AddMatch within {BUS_TIMEOUT:?}"
                ));
            }
        }
    }
    Ok(())
}

fn owner_rule(name: &'static str) -> zbus::Result<MatchRule<'static>> {
    MatchRule::builder()
        .msg_type(Type::Signal)
        .sender("org.freedesktop.DBus")
        .interface("org.freedesktop.DBus")
        .member("NameOwnerChanged")
        .add_arg(name)
        .build()
}

/// The unique name owning botvisord's name now, if any (no activation: a bot only exists while
/// botvisord runs).
pub async fn daemon_owner(conn: &Connection) -> Option<String> {
    let dbus = zbus::fdo::DBusProxy::new(conn).await.ok()?;
    let name = zbus::names::BusName::try_from(BUS_NAME).ok()?;
    match tokio::time::timeout(BUS_TIMEOUT, dbus.get_name_owner(name)).await {
        Ok(Ok(owner)) => Some(owner.to_string()),
        _ => None,
    }
}

/// Reads every message of `stream`, the whole connection's (`MessageStream::from`, made before
/// the match rules are added: nothing falls between), until the connection ends (see the
/// module). Its inputs are host `host`'s.
pub async fn read(
    host: usize,
    mut stream: zbus::MessageStream,
    tx: UnboundedSender<Input>,
    server: UnboundedSender<ServerEvent>,
) {
    while let Some(m) = stream.next().await {
        let m = match m {
            Ok(m) => m,
            Err(e) => {
                let _ = tx.send(Input::Lost(host, e.to_string()));
                return;
            }
        };
        if m.message_type() != Type::Signal {
            continue;
        }
        let hdr = m.header();
        let (Some(iface), Some(member)) = (hdr.interface(), hdr.member()) else {
            continue;
        };
        let sender = hdr.sender().map(|s| s.to_string()).unwrap_or_default();
        let path = hdr.path().map(|p| p.as_str()).unwrap_or_default();
        let body = m.body();
        match (iface.as_str(), member.as_str()) {
            ("org.freedesktop.DBus", "NameOwnerChanged") if sender == "org.freedesktop.DBus" => {
                let Ok((name, _old, new)) = body.deserialize::<(String, String, String)>() else {
                    continue;
                };
                let new = (!new.is_empty()).then_some(new);
                if name == BUS_NAME {
                    let _ = tx.send(Input::DaemonOwner(host, new));
                } else if name == NOTIFICATIONS {
                    let _ = server.send(ServerEvent::Owner(new));
                }
            }
            (NOTIFICATIONS, "ActionInvoked") if path == NOTIFICATIONS_PATH => {
                if let Ok((id, action)) = body.deserialize::<(u32, String)>() {
                    let _ = server.send(ServerEvent::Action { sender, id, action });
                }
            }
            (NOTIFICATIONS, "NotificationClosed") if path == NOTIFICATIONS_PATH => {
                if let Ok((id, reason)) = body.deserialize::<(u32, u32)>() {
                    let _ = server.send(ServerEvent::Closed { sender, id, reason });
                }
            }
            _ if path == ROOT_PATH || path.starts_with(&format!("{ROOT_PATH}/")) => {
                if let Some(signal) = decode(path, iface.as_str(), member.as_str(), &m) {
                    let _ = tx.send(Input::Signal(host, m.recv_position(), sender, signal));
                }
            }
            _ => {}
        }
    }
    let _ = tx.send(Input::Lost(host, "its stream ended".to_owned()));
}

/// A signal of botvisord, decoded; `None` for those botvisor-notify does not use (`TextDelta`,
/// the Manager's properties) and for a body of another shape.
fn decode(path: &str, iface: &str, member: &str, m: &zbus::Message) -> Option<Signal> {
    let body = m.body();
    match (iface, member) {
        ("org.freedesktop.DBus.ObjectManager", "InterfacesAdded") => {
            let (p, ifaces): (
                OwnedObjectPath,
                HashMap<String, HashMap<String, OwnedValue>>,
            ) = body.deserialize().ok()?;
            let props = ifaces.get(BOT_INTERFACE)?;
            Some(Signal::Added {
                path: p.to_string(),
                props: props_of(props),
            })
        }
        ("org.freedesktop.DBus.ObjectManager", "InterfacesRemoved") => {
            let (p, ifaces): (OwnedObjectPath, Vec<String>) = body.deserialize().ok()?;
            // Another user on the bus makes botvisord name only the path (dbus-api.md).
            (ifaces.is_empty() || ifaces.iter().any(|i| i == BOT_INTERFACE)).then(|| {
                Signal::Removed {
                    path: p.to_string(),
                }
            })
        }
        ("org.freedesktop.DBus.Properties", "PropertiesChanged") => {
            let (i, changed, _): (String, HashMap<String, OwnedValue>, Vec<String>) =
                body.deserialize().ok()?;
            (i == BOT_INTERFACE).then(|| Signal::Changed {
                path: path.to_owned(),
                props: props_of(&changed),
            })
        }
        (BOT_INTERFACE, "PermissionRequested") => {
            let (request_id, tool, input_json): (String, String, String) =
                body.deserialize().ok()?;
            Some(Signal::PermissionRequested {
                path: path.to_owned(),
                request_id,
                tool,
                input_json,
            })
        }
        (BOT_INTERFACE, "ChatItemAdded") => {
            let (_seq, kind, payload): (u64, String, String) = body.deserialize().ok()?;
            Some(Signal::ChatItem {
                path: path.to_owned(),
                kind,
                payload,
            })
        }
        (BOT_INTERFACE, "TurnFinished") => {
            let (turn_id, outcome): (String, String) = body.deserialize().ok()?;
            Some(Signal::TurnFinished {
                path: path.to_owned(),
                turn_id,
                outcome,
            })
        }
        _ => None,
    }
}

/// The properties botvisor-notify uses, from a property map.
pub fn props_of(p: &HashMap<String, OwnedValue>) -> Props {
    fn string(p: &HashMap<String, OwnedValue>, k: &str) -> Option<String> {
        String::try_from(p.get(k)?.try_clone().ok()?).ok()
    }
    Props {
        id: string(p, "Id"),
        name: string(p, "Name"),
        state: string(p, "State"),
        holders: p.get("Holders").and_then(|v| u32::try_from(v).ok()),
        pending: p
            .get("PendingPermissions")
            .and_then(|v| v.try_clone().ok())
            .and_then(|v| Vec::<Pending>::try_from(v).ok()),
        last_error: string(p, "LastError"),
        limit_kind: string(p, "LimitKind"),
        limit_resets_at: p.get("LimitResetsAt").and_then(|v| u64::try_from(v).ok()),
    }
}

/// Who botvisord is now, and from which point of the connection's stream its signals apply
/// (those received before the snapshot they follow are in it already).
#[derive(Default)]
pub struct Daemon {
    owner: Option<String>,
    since: Option<Sequence>,
}

impl Daemon {
    /// Whether a signal of `sender` received at `pos` applies: it comes from botvisord's owner
    /// and after the snapshot.
    pub fn accepts(&self, sender: &str, pos: Sequence) -> bool {
        self.owner.as_deref() == Some(sender) && self.since.is_some_and(|s| pos > s)
    }

    /// botvisord's unique name, while it is on the bus.
    pub fn owner(&self) -> Option<&str> {
        self.owner.as_deref()
    }

    /// botvisord left.
    pub fn left(&mut self) {
        self.owner = None;
        self.since = None;
    }

    /// From now on, the signals of `snapshot`'s owner received after it apply.
    pub fn took(&mut self, snapshot: &Snapshot) {
        self.owner = Some(snapshot.owner.clone());
        self.since = Some(snapshot.since);
    }
}

/// What botvisord had when it was read: its unique name, where the connection received the
/// answer, and every bot with its properties.
pub struct Snapshot {
    /// Its unique name.
    pub owner: String,
    /// Where the connection received the answer.
    pub since: Sequence,
    /// Every bot: its path and properties.
    pub bots: Vec<(String, Props)>,
}

/// Every bot of botvisord (`owner`), with its properties, and where the connection received
/// the answer: `GetManagedObjects`, bounded by [`SNAPSHOT_TIMEOUT`]. `None` when it did not
/// answer (it left, or is stuck: logged), and botvisor-notify waits for it to come back. Made
/// by a task of its own: a botvisord that is stuck holds up nothing else.
pub async fn snapshot(conn: &Connection, owner: String) -> Option<Snapshot> {
    let call = conn.call_method(
        Some(owner.as_str()),
        ROOT_PATH,
        Some("org.freedesktop.DBus.ObjectManager"),
        "GetManagedObjects",
        &(),
    );
    let reply = match tokio::time::timeout(SNAPSHOT_TIMEOUT, call).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => {
            tracing::warn!("cannot list the bots: {e}");
            return None;
        }
        Err(_) => {
            tracing::warn!(
                "botvisord did not answer GetManagedObjects within {SNAPSHOT_TIMEOUT:?}"
            );
            return None;
        }
    };
    type Objects = HashMap<OwnedObjectPath, HashMap<String, HashMap<String, OwnedValue>>>;
    let objects: Objects = match reply.body().deserialize() {
        Ok(o) => o,
        Err(e) => {
            tracing::warn!("GetManagedObjects answered something else: {e}");
            return None;
        }
    };
    let since = reply.recv_position();
    let bots: Vec<(String, Props)> = objects
        .iter()
        .filter_map(|(p, ifaces)| Some((p.to_string(), props_of(ifaces.get(BOT_INTERFACE)?))))
        .collect();
    tracing::info!(bots = bots.len(), "botvisord is on the bus");
    Some(Snapshot { owner, since, bots })
}
