//! The daemon's D-Bus service: serve the objects, then own the name, then run until told to
//! stop.

use std::sync::Arc;

use tokio::sync::mpsc;
use zbus::Connection;
use zbus::fdo::{RequestNameFlags, RequestNameReply};

use super::audience::Audience;
use super::bot::BotObject;
use super::caller::CallerCheck;
use super::lookup::BusLookup;
use super::manager::Manager;
use super::objects::BotObjects;
use super::paths::bot_path;
use super::{BUS_NAME, ROOT_PATH};
use crate::config::Config;
use crate::runtime::{Runtime, claude::Claude, codex::Codex};
use crate::store::Store;
use crate::supervisor::Supervisor;

/// What every object of the service shares.
pub struct Ctx {
    /// The bots.
    pub supervisor: Arc<Supervisor>,
    /// The caller check of design rule 14: who each connection on the bus is.
    pub caller: Arc<CallerCheck>,
    /// Who hears the signals (design rule 14 for signals).
    pub audience: Audience,
    /// The calls not yet answered whose effects wait for their answer: a deleted bot's object
    /// goes (with `InterfacesRemoved`) only once its `Delete` was answered.
    pub replies: super::replies::Replies,
    /// The answers carrying a file descriptor, until the bus could refuse them.
    pub descriptors: super::descriptors::DescriptorReplies,
}

/// Why the service did not run.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// Another process owns `org.botvisor.Botvisor1` on this bus.
    #[error("another botvisord already owns org.botvisor.Botvisor1 on this bus")]
    AlreadyRunning,
    /// No bus to connect to, or it refused us.
    #[error("cannot connect to the session bus ({0}); is DBUS_SESSION_BUS_ADDRESS set?")]
    Connect(zbus::Error),
    /// The bus failed.
    #[error("D-Bus: {0}")]
    Bus(#[from] zbus::Error),
    /// The database could not be opened.
    #[error("{0}")]
    Store(#[from] crate::store::StoreError),
    /// Bots could not be loaded.
    #[error("{0}")]
    Load(#[from] crate::supervisor::BotError),
    /// The bus dropped our connection while it still runs (the bots were stopped first).
    #[error("the bus dropped botvisord's connection while the bus still runs: {0}")]
    Dropped(String),
}

/// A builder of connections to the bus that started us (D-Bus activation sets
/// `DBUS_STARTER_ADDRESS`), else to the session bus.
fn bus() -> zbus::connection::Builder<'static> {
    match std::env::var("DBUS_STARTER_ADDRESS") {
        Ok(addr) if std::env::var("DBUS_STARTER_BUS_TYPE").as_deref() != Ok("system") => {
            zbus::connection::Builder::address(addr.as_str())
        }
        _ => zbus::connection::Builder::session(),
    }
}

/// How long the publisher may take at shutdown to send what the bots published last.
const FLUSH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// How long a new connection may take to tell whether the bus still runs.
const BUS_PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// How long botvisord's own calls to the bus around its name may take (`RequestName`,
/// `ReleaseName`): the bus answers them at once; past this it is stuck,
/// and botvisord says so instead of waiting with it.
const NAME_CALL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(25);

/// A stream that ends with the error that closed the connection. It matches only `NameLost`
/// for our name, which a bus sends just before it drops us or when the name is taken away.
async fn closing_stream(conn: &Connection) -> zbus::Result<zbus::MessageStream> {
    let rule = zbus::MatchRule::builder()
        .msg_type(zbus::message::Type::Signal)
        .sender("org.freedesktop.DBus")
        .interface("org.freedesktop.DBus")
        .member("NameLost")
        .arg(0, BUS_NAME)
        .build()?;
    zbus::MessageStream::for_match_rule(rule, conn, std::num::NonZeroUsize::new(4)).await
}

/// Waits until the connection is lost and says why, as far as the connection can tell.
async fn connection_lost(conn: &Connection, stream: Option<zbus::MessageStream>) -> String {
    use futures_util::StreamExt;
    let Some(mut stream) = stream else {
        conn.closed().await;
        return "the connection closed".into();
    };
    let mut lost_name = false;
    while let Some(m) = stream.next().await {
        match m {
            Ok(_) => lost_name = true,
            Err(e) if lost_name => return format!("{BUS_NAME} was taken away, then: {e}"),
            Err(e) => return e.to_string(),
        }
    }
    conn.closed().await;
    "the connection closed".into()
}

/// Connects to the bus (the one that started us, else the session bus) and runs the service
/// until SIGTERM or SIGINT (or the bus goes away), then stops every bot gently and releases the
/// name. When the connection is lost, the journal says why and
/// whether the bus itself is gone (the session ended: `Ok`) or still runs (it dropped us:
/// [`ServiceError::Dropped`], so that the service manager restarts botvisord).
pub async fn run(config: Config, store: Store) -> Result<(), ServiceError> {
    // First of all: a SIGTERM or SIGINT that arrives while we start up stops us gently too,
    // instead of killing us by the signal's default action.
    use tokio::signal::unix::{SignalKind, signal};
    let mut term =
        signal(SignalKind::terminate()).map_err(|e| zbus::Error::Failure(e.to_string()))?;
    let mut int =
        signal(SignalKind::interrupt()).map_err(|e| zbus::Error::Failure(e.to_string()))?;
    let config = Arc::new(config);
    let runtimes: Vec<Arc<dyn Runtime>> = vec![
        Arc::new(Claude::new(config.claude_bin.clone())),
        Arc::new(Codex::new(config.codex_bin.clone())),
    ];
    for runtime in &runtimes {
        match runtime.binary() {
            Ok(path) => {
                tracing::info!(runtime = runtime.name(), binary = %path.display(), "runtime")
            }
            Err(e) => tracing::warn!(runtime = runtime.name(), "runtime unavailable: {e}"),
        }
    }
    // Containment is settled before anything can read it: the bots' objects and their
    // InterfacesAdded (MemoryMax, StopProof) and the Manager's Containment read it.
    let containment = crate::process::cgroup::init();
    let (pub_tx, pub_rx) = mpsc::unbounded_channel();
    let supervisor = Supervisor::new(Arc::new(store), config, runtimes, pub_tx);
    let lookup = BusLookup::connect(bus())
        .await
        .map_err(ServiceError::Connect)?;
    let caller = Arc::new(CallerCheck::new(lookup.clone()));
    let ctx = Arc::new(Ctx {
        supervisor: supervisor.clone(),
        caller: caller.clone(),
        audience: Audience::new(caller),
        replies: Default::default(),
        descriptors: Default::default(),
    });
    // The root objects are served as the connection is made: zbus then returns it only once
    // its object server reads the calls. An object server started later (`object_server()` on
    // a built connection) subscribes in a task of its own, and zbus drops, unanswered, a call
    // that arrives before that (issue 23: a first call that hung).
    let conn = bus()
        .serve_at(ROOT_PATH, BotObjects::guarded(ctx.clone()))
        .serve_at(ROOT_PATH, Manager::guarded(ctx.clone()))
        .build()
        .await
        .map_err(ServiceError::Connect)?;

    // Who is on the bus is known before the first signal: subscribe to the changes, follow
    // them, then list.
    let dbus = zbus::fdo::DBusProxy::new(&conn).await?;
    let changes = dbus.receive_name_owner_changed().await?;
    super::clients::follow(ctx.clone(), changes);
    super::clients::learn_present(&ctx)
        .await
        .map_err(zbus::Error::from)?;
    // Before any bot object can be called.
    super::descriptors::watch_refusals(&conn, ctx.clone()).await?;

    let server = conn.object_server();
    let handles = supervisor.load()?;
    let count = handles.len();
    for handle in handles {
        let path = bot_path(&handle.id);
        server
            .at(&path, BotObject::guarded(handle, ctx.clone()))
            .await?;
        if let Err(e) = super::objects::announce(&ctx, &conn, &path).await {
            tracing::debug!(error = %e, "InterfacesAdded not sent to the user's connections");
        }
    }
    let (flush_tx, flush_rx) = mpsc::unbounded_channel();
    tokio::spawn(super::publisher::run(
        conn.clone(),
        ctx.clone(),
        pub_rx,
        flush_rx,
    ));

    match crate::process::subreaper::become_subreaper() {
        Ok(true) => tracing::debug!("child subreaper: descendants that escape come back here"),
        Ok(false) => tracing::info!("no child subreaper on this system: best-effort proof"),
        Err(e) => tracing::warn!(error = %e, "cannot become a child subreaper"),
    }
    let records: Vec<_> = supervisor
        .list()
        .iter()
        .map(|h| h.snapshot().record)
        .collect();
    crate::supervisor::memory_max::report_at_start(supervisor.config(), &records, containment);
    tokio::spawn(reap_orphans());
    tokio::spawn(watch_storage(conn.clone(), ctx.clone()));

    let flags = RequestNameFlags::DO_NOT_QUEUE;
    let request = conn.request_name_with_flags(BUS_NAME, flags);
    match tokio::time::timeout(NAME_CALL_TIMEOUT, request).await {
        Ok(Ok(RequestNameReply::PrimaryOwner | RequestNameReply::AlreadyOwner)) => {}
        Ok(Ok(RequestNameReply::Exists | RequestNameReply::InQueue))
        | Ok(Err(zbus::Error::NameTaken)) => {
            return Err(ServiceError::AlreadyRunning);
        }
        Ok(Err(e)) => return Err(e.into()),
        Err(_) => {
            return Err(ServiceError::Bus(zbus::Error::Failure(format!(
                "the bus did not answer RequestName within {NAME_CALL_TIMEOUT:?}"
            ))));
        }
    }
    match supervisor.recover_processes().await {
        Ok(0) => {}
        Ok(n) => tracing::warn!(count = n, "stopped processes left by the previous run"),
        Err(e) => tracing::error!(error = %e, "cannot check processes left by the previous run"),
    }
    supervisor.open();
    tracing::info!(bots = count, "botvisord is serving {BUS_NAME}");

    let closing = closing_stream(&conn)
        .await
        .inspect_err(|e| tracing::warn!(error = %e, "cannot watch the bus connection's end"))
        .ok();
    let mut dropped = None;
    let lost = tokio::select! {
        _ = term.recv() => { tracing::info!("SIGTERM: stopping every bot"); None }
        _ = int.recv() => { tracing::info!("SIGINT: stopping every bot"); None }
        why = connection_lost(&conn, closing) => Some(why),
        // Without it no new caller can be told from another user's.
        _ = lookup.connection().closed() => {
            Some("the bus closed botvisord's connection for questions about its clients".into())
        }
    };
    if let Some(why) = lost {
        // The session's end stops the bots; a bus that is still there dropped us for a reason
        // of ours (a message over its limits, a protocol error), which the journal must name,
        // and the service manager restarts us.
        let bus_runs = matches!(
            tokio::time::timeout(BUS_PROBE_TIMEOUT, bus().build()).await,
            Ok(Ok(_))
        );
        if bus_runs {
            tracing::error!(
                reason = %why,
                "the bus dropped botvisord's connection while the bus still runs (a message \
                 over the bus's limits or a protocol error): stopping every bot, then exiting \
                 with an error"
            );
            dropped = Some(why);
        } else {
            tracing::warn!(
                reason = %why,
                "the session bus went away (the session ended): stopping every bot"
            );
        }
    }
    supervisor.store().closing();
    supervisor.shutdown().await;
    // The bots' last changes (State `stopped`, the turns they ended) are signalled before the
    // name goes: a client sees them, then the owner change.
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    if flush_tx.send(done_tx).is_ok() && tokio::time::timeout(FLUSH_TIMEOUT, done_rx).await.is_err()
    {
        tracing::warn!("the last signals were not all sent within {FLUSH_TIMEOUT:?}");
    }
    if tokio::time::timeout(NAME_CALL_TIMEOUT, conn.release_name(BUS_NAME))
        .await
        .is_err()
    {
        tracing::warn!("the bus did not answer ReleaseName within {NAME_CALL_TIMEOUT:?}");
    }
    tracing::info!("botvisord stopped");
    match dropped {
        Some(why) => Err(ServiceError::Dropped(why)),
        None => Ok(()),
    }
}

/// Reaps orphans adopted as child subreaper whenever a child changes state.
async fn reap_orphans() {
    let Ok(mut sigchld) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child())
    else {
        tracing::warn!("cannot watch SIGCHLD; orphans are reaped at stops only");
        return;
    };
    loop {
        for pid in crate::process::subreaper::reap_orphans() {
            tracing::debug!(pid, "reaped an adopted orphan");
        }
        if sigchld.recv().await.is_none() {
            return;
        }
    }
}

/// Says when writes to the database start and stop failing (design rule 15): the Manager's
/// `StorageError` property and every bot's `LastError` change, with `PropertiesChanged`.
async fn watch_storage(conn: Connection, ctx: Arc<Ctx>) {
    let mut changes = ctx.supervisor.store().health().subscribe();
    while changes.changed().await.is_ok() {
        let why = changes.borrow_and_update().clone();
        ctx.supervisor.set_storage_error(why.clone());
        let root = zbus::ObjectPath::from_static_str_unchecked(ROOT_PATH);
        let emitters = match ctx.audience.emitters(&conn, &root) {
            Ok(e) => e,
            Err(e) => {
                tracing::debug!(error = %e, "StorageError change not signalled");
                continue;
            }
        };
        let value = why.unwrap_or_default();
        for emitter in &emitters {
            let changed = std::collections::HashMap::from([(
                "StorageError",
                zbus::Variant::from(value.as_str()),
            )]);
            if let Err(e) = zbus::fdo::Properties::properties_changed(
                emitter,
                zbus::names::InterfaceName::from_static_str_unchecked(super::MANAGER_INTERFACE),
                changed,
                std::borrow::Cow::Borrowed(&[]),
            )
            .await
            {
                tracing::debug!(error = %e, "StorageError change not signalled");
            }
        }
    }
}
