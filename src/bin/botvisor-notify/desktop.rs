//! The notification server (`org.freedesktop.Notifications`), spoken to by one task alone.
//!
//! The main loop says what each notification should show now ([`Desk::set`]: the latest wins,
//! so a burst of changes to one bot is one call); this task shows, replaces (`replaces_id`) and
//! closes them, one call at a time, each bounded by [`CALL_TIMEOUT`]. A server that hangs
//! holds up nothing but notifications, and is left alone for [`RETRY`] after a call it did not
//! answer. A server that leaves takes its notifications with it; one that comes (again) is
//! asked what it can do (`GetCapabilities`) and shown everything anew. `ActionInvoked` and
//! `NotificationClosed` are taken only from the server's owner, and only for notifications this
//! task showed; they go back to the main loop by the notification's [`Key`].

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};
use tokio::time::Instant;
use zbus::Connection;

use super::bus::{Input, NOTIFICATIONS, NOTIFICATIONS_PATH, ServerEvent};
use super::model::Key;
use super::note::{self, Caps, Note};

/// How long one call to the notification server may take. Servers answer at once; one that
/// does not is stuck (or starting by D-Bus activation, which this bounds too).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a server that did not answer (or is not there) is left alone before it is tried
/// again (unless a server takes the name meanwhile).
pub const RETRY: Duration = Duration::from_secs(10);

/// What each notification should show now, shared by the main loop (which sets it) and the
/// desktop task (which carries it out).
#[derive(Default)]
pub struct Desk {
    state: Mutex<DeskState>,
    wake: tokio::sync::Notify,
}

#[derive(Default)]
struct DeskState {
    desired: HashMap<Key, Note>,
    /// Keys whose notification may differ from what is shown, oldest change first.
    dirty: VecDeque<Key>,
    queued: HashSet<Key>,
    stopping: bool,
}

impl DeskState {
    fn mark(&mut self, key: Key) {
        if self.queued.insert(key.clone()) {
            self.dirty.push_back(key);
        }
    }
}

impl Desk {
    fn lock(&self) -> MutexGuard<'_, DeskState> {
        // Nothing panics while holding it; a poisoned lock still holds consistent data.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `key` should show `note` (`None`: nothing).
    pub fn set(&self, key: Key, note: Option<Note>) {
        let mut s = self.lock();
        if s.stopping || s.desired.get(&key) == note.as_ref() {
            return;
        }
        match note {
            Some(n) => s.desired.insert(key.clone(), n),
            None => s.desired.remove(&key),
        };
        s.mark(key);
        drop(s);
        self.wake.notify_one();
    }

    /// Closes every notification, then the desktop task ends.
    pub fn close_all_and_stop(&self) {
        let mut s = self.lock();
        s.stopping = true;
        let keys: Vec<Key> = s.desired.drain().map(|(k, _)| k).collect();
        for k in keys {
            s.mark(k);
        }
        drop(s);
        self.wake.notify_one();
    }

    fn take(&self) -> Option<(Key, Option<Note>)> {
        let mut s = self.lock();
        let key = s.dirty.pop_front()?;
        s.queued.remove(&key);
        let note = s.desired.get(&key).cloned();
        Some((key, note))
    }

    fn mark_all(&self) {
        let mut s = self.lock();
        let keys: Vec<Key> = s.desired.keys().cloned().collect();
        for k in keys {
            s.mark(k);
        }
        drop(s);
        self.wake.notify_one();
    }

    fn stopping_and_done(&self) -> bool {
        let s = self.lock();
        s.stopping && s.dirty.is_empty()
    }

    fn wants_some(&self) -> bool {
        !self.lock().desired.is_empty()
    }
}

struct Desktop {
    conn: Connection,
    to_main: UnboundedSender<Input>,
    /// The server's unique name, once known.
    owner: Option<String>,
    /// What it can do; `None` until asked (again).
    caps: Option<Caps>,
    /// Not asked again before this, after a call it did not answer.
    quiet_until: Option<Instant>,
    shown: HashMap<Key, (u32, Note)>,
    by_id: HashMap<u32, Key>,
    /// Whether a notification server was there when last looked at (`None`: not yet known):
    /// its absence is said as a warning once per change, not at every retry.
    present: Option<bool>,
}

/// What is said when no notification server is on the bus (`why`: how that was found).
fn absent_words(why: &str) -> String {
    format!(
        "no notification server on this bus ({why}): nothing shows on the desktop until one \
         starts (your desktop's, or dunst, mako, …); hooks still run"
    )
}

/// The desktop task: runs until [`Desk::close_all_and_stop`] is done, or the bus is gone. With
/// `enabled` false (`[notify] desktop = false`) nothing is ever set, so nothing is called.
pub async fn run(
    conn: Connection,
    desk: std::sync::Arc<Desk>,
    mut server: UnboundedReceiver<ServerEvent>,
    to_main: UnboundedSender<Input>,
    enabled: bool,
) {
    if !enabled {
        tracing::info!("desktop notifications are off ([notify] desktop = false)");
    }
    let mut d = Desktop {
        conn,
        to_main,
        owner: None,
        caps: None,
        quiet_until: None,
        shown: HashMap::new(),
        by_id: HashMap::new(),
        present: None,
    };
    if enabled {
        // Said at start, where the user looks (stderr, or the journal under systemd): not only
        // once a notification is due.
        match server_on_bus(&d.conn).await {
            Ok(true) => {}
            Ok(false) => d.absent(&format!(
                "{NOTIFICATIONS} has no owner and the bus cannot start one"
            )),
            Err(e) => {
                tracing::warn!("cannot ask the bus whether a notification server is on it: {e}")
            }
        }
    }
    loop {
        let retry = d
            .quiet_until
            .filter(|_| d.caps.is_none() && desk.wants_some());
        tokio::select! {
            biased;
            ev = server.recv() => match ev {
                Some(ev) => d.on_server(ev, &desk),
                None => return,
            },
            _ = desk.wake.notified() => {}
            _ = sleep_until(retry) => {
                d.quiet_until = None;
                desk.mark_all();
            }
        }
        while let Some((key, note)) = desk.take() {
            while let Ok(ev) = server.try_recv() {
                d.on_server(ev, &desk);
            }
            d.apply(key, note).await;
        }
        if desk.stopping_and_done() {
            return;
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

impl Desktop {
    fn on_server(&mut self, ev: ServerEvent, desk: &Desk) {
        match ev {
            ServerEvent::Owner(owner) => {
                match &owner {
                    Some(o) => {
                        tracing::info!(owner = %o, "a notification server took {NOTIFICATIONS}; notifications show");
                        self.present = Some(true);
                    }
                    None => self.absent("the notification server left the bus"),
                }
                // Its notifications went with the old one; the new one is shown everything.
                self.owner = owner.clone();
                self.caps = None;
                self.quiet_until = None;
                self.shown.clear();
                self.by_id.clear();
                if owner.is_some() {
                    desk.mark_all();
                }
            }
            ServerEvent::Action { sender, id, action } => {
                if self.owner.as_deref() != Some(sender.as_str()) {
                    return;
                }
                if let Some(key) = self.by_id.get(&id) {
                    tracing::debug!(id, action = %action.escape_debug(), "action invoked");
                    let _ = self.to_main.send(Input::Action {
                        key: key.clone(),
                        action,
                    });
                }
            }
            ServerEvent::Closed { sender, id, reason } => {
                if self.owner.as_deref() != Some(sender.as_str()) {
                    return;
                }
                let Some(key) = self.by_id.remove(&id) else {
                    return;
                };
                let Some((_, note)) = self.shown.remove(&key) else {
                    return;
                };
                // 3: closed by CloseNotification, ours. Otherwise the user (or the server's
                // timeout) took it away: not shown again.
                if reason != 3 {
                    let _ = self.to_main.send(Input::Dismissed { key, tag: note.tag });
                }
            }
        }
    }

    /// Makes `key` show `note` (or nothing).
    async fn apply(&mut self, key: Key, note: Option<Note>) {
        let Some(note) = note else {
            if let Some((id, _)) = self.shown.remove(&key) {
                self.by_id.remove(&id);
                if let Err(e) = self.call("CloseNotification", &(id,)).await {
                    tracing::debug!(id, "CloseNotification: {e}");
                }
            }
            return;
        };
        if self.shown.get(&key).is_some_and(|(_, n)| *n == note) {
            return;
        }
        let Some(caps) = self.caps().await else {
            return;
        };
        let replaces = self.shown.get(&key).map_or(0, |(id, _)| *id);
        let r = note::render(&note, &caps);
        let actions: Vec<&str> = r.actions.iter().map(String::as_str).collect();
        let reply = self
            .call(
                "Notify",
                &(
                    note::APP_NAME,
                    replaces,
                    r.icon.as_str(),
                    r.summary.as_str(),
                    r.body.as_str(),
                    actions,
                    &r.hints,
                    r.expire_ms,
                ),
            )
            .await;
        match reply.and_then(|m| m.body().deserialize::<u32>().map_err(|e| e.to_string())) {
            Ok(id) => {
                if replaces != 0 && replaces != id {
                    self.by_id.remove(&replaces);
                }
                tracing::debug!(id, replaces, bot = %key.bot, kind = ?key.kind, "shown");
                self.by_id.insert(id, key.clone());
                self.shown.insert(key, (id, note));
            }
            Err(e) => {
                tracing::warn!(bot = %key.bot, kind = ?key.kind, "cannot show a notification: {e}")
            }
        }
    }

    /// What the server can do, asked once per server (`GetCapabilities`); `None` while there
    /// is none, or it does not answer ([`RETRY`]).
    async fn caps(&mut self) -> Option<Caps> {
        if let Some(c) = &self.caps {
            return Some(c.clone());
        }
        if self.quiet_until.is_some_and(|t| Instant::now() < t) {
            return None;
        }
        let reply = match self.call("GetCapabilities", &()).await {
            Ok(r) => r,
            Err(e) => {
                tracing::debug!("no notification server answers ({e}); trying again in {RETRY:?}");
                self.absent(&format!(
                    "GetCapabilities: {e}; trying again every {RETRY:?} and when one comes"
                ));
                return None;
            }
        };
        self.present = Some(true);
        let names: Vec<String> = reply.body().deserialize().unwrap_or_default();
        let caps = Caps::from_names(&names);
        self.owner = reply.header().sender().map(|s| s.to_string());
        if let Ok(info) = self.call("GetServerInformation", &()).await {
            let (name, vendor, version, spec) = info
                .body()
                .deserialize::<(String, String, String, String)>()
                .unwrap_or_default();
            tracing::info!(
                server = %name.escape_debug(), vendor = %vendor.escape_debug(),
                version = %version.escape_debug(), spec = %spec.escape_debug(),
                actions = caps.actions, body_markup = caps.body_markup,
                "notification server"
            );
        }
        self.caps = Some(caps.clone());
        Some(caps)
    }

    /// No notification server is there (`why`): a warning when that is news.
    fn absent(&mut self, why: &str) {
        if self.present != Some(false) {
            tracing::warn!("{}", absent_words(why));
        }
        self.present = Some(false);
    }

    /// One call to the server, bounded by [`CALL_TIMEOUT`]; a call it did not answer leaves
    /// it alone for [`RETRY`].
    async fn call<B>(&mut self, method: &str, body: &B) -> Result<zbus::Message, String>
    where
        B: serde::Serialize + zbus::zvariant::DynamicType,
    {
        let call = self.conn.call_method(
            Some(NOTIFICATIONS),
            NOTIFICATIONS_PATH,
            Some(NOTIFICATIONS),
            method,
            body,
        );
        match tokio::time::timeout(CALL_TIMEOUT, call).await {
            Ok(Ok(m)) => Ok(m),
            Ok(Err(e)) => {
                if is_absent(&e) {
                    self.caps = None;
                    self.quiet_until = Some(Instant::now() + RETRY);
                }
                Err(e.to_string())
            }
            Err(_) => {
                self.caps = None;
                self.quiet_until = Some(Instant::now() + RETRY);
                Err(format!("{method} was not answered within {CALL_TIMEOUT:?}"))
            }
        }
    }
}

/// Whether a notification server is on the bus of `conn`, or can be started by it (D-Bus
/// activation); each question bounded by [`CALL_TIMEOUT`].
pub async fn server_on_bus(conn: &Connection) -> Result<bool, String> {
    let dbus = zbus::fdo::DBusProxy::new(conn)
        .await
        .map_err(|e| e.to_string())?;
    let name = zbus::names::BusName::try_from(NOTIFICATIONS).map_err(|e| e.to_string())?;
    let owned = tokio::time::timeout(CALL_TIMEOUT, dbus.name_has_owner(name))
        .await
        .map_err(|_| format!("NameHasOwner was not answered within {CALL_TIMEOUT:?}"))?
        .map_err(|e| e.to_string())?;
    if owned {
        return Ok(true);
    }
    let names = tokio::time::timeout(CALL_TIMEOUT, dbus.list_activatable_names())
        .await
        .map_err(|_| format!("ListActivatableNames was not answered within {CALL_TIMEOUT:?}"))?
        .map_err(|e| e.to_string())?;
    Ok(names.iter().any(|n| n.as_str() == NOTIFICATIONS))
}

/// Whether `e` says no server has the name (nor can be started).
fn is_absent(e: &zbus::Error) -> bool {
    match e {
        zbus::Error::MethodError(name, _, _) => matches!(
            name.as_str(),
            "org.freedesktop.DBus.Error.ServiceUnknown"
                | "org.freedesktop.DBus.Error.NameHasNoOwner"
                | "org.freedesktop.DBus.Error.NoReply"
                | "org.freedesktop.DBus.Error.Spawn.ChildExited"
                | "org.freedesktop.DBus.Error.Spawn.ExecFailed"
        ),
        _ => false,
    }
}
