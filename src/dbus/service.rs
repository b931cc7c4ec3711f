//! The daemon's D-Bus service: serve the objects, then own the name, then run until told to
//! stop. The order of these steps, with everything else botvisord does at start-up and
//! shutdown, is `daemon::run`'s.

use std::sync::Arc;

use tokio::sync::mpsc;
use zbus::Connection;
use zbus::fdo::{RequestNameFlags, RequestNameReply};

use super::audience::Audience;
use super::bot::BotObject;
use super::caller::CallerCheck;
use super::ctx::Ctx;
use super::lookup::BusLookup;
use super::manager::Manager;
use super::objects::BotObjects;
use super::paths::bot_path;
use super::{BUS_NAME, ROOT_PATH};
use crate::supervisor::{BotHandle, Supervisor};

/// Why the service could not connect or own its name.
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

/// How long botvisord, leaving the bus, waits for the calls it is running to be answered: a
/// `Send` waits at most for its durable commit (bounded by the store's closing wait).
const ANSWERS_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// How long a new connection may take to tell whether the bus still runs.
const BUS_PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// How long botvisord's own calls to the bus around its name may take (`RequestName`,
/// `ReleaseName`): the bus answers them at once; past this it is stuck,
/// and botvisord says so instead of waiting with it.
const NAME_CALL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(25);

/// How long the bus name held by another connection is waited for to be released (see
/// [`Service::take_name`]): the bus drops a dead process's connection within milliseconds; a
/// live daemon on the same bus is not waited out for longer than a user would notice.
const NAME_RELEASE_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

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

/// The daemon's connection to the bus, with what its objects share. Made by
/// [`Service::connect`]; the steps after it are called in the order `daemon::run` reads.
pub struct Service {
    conn: Connection,
    lookup: BusLookup,
    ctx: Arc<Ctx>,
    flush: Option<mpsc::UnboundedSender<tokio::sync::oneshot::Sender<()>>>,
}

/// How the service's time on the bus ended.
#[derive(Debug)]
pub enum End {
    /// SIGTERM or SIGINT.
    Asked,
    /// The session bus went away (the session ended).
    SessionEnded(String),
    /// The bus dropped botvisord's connection while it still runs: the journal names why and
    /// botvisord exits with an error, so that the service manager restarts it.
    Dropped(String),
}

/// SIGTERM and SIGINT, watched from the start so that a signal that arrives while botvisord
/// starts up stops it gently too, instead of killing it by the signal's default action.
pub struct StopSignals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl StopSignals {
    /// Installs the handlers. Errors: the system refused a signal handler.
    pub fn install() -> std::io::Result<StopSignals> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(StopSignals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }
}

impl Service {
    /// Connects to the bus (the one that started us, else the session bus) with the root
    /// objects (the ObjectManager and the Manager) served as the connection is made, and a
    /// second connection for questions to the bus ([`BusLookup`]). Errors:
    /// [`ServiceError::Connect`].
    pub async fn connect(supervisor: Arc<Supervisor>) -> Result<Service, ServiceError> {
        let lookup = BusLookup::connect(bus())
            .await
            .map_err(ServiceError::Connect)?;
        let caller = Arc::new(CallerCheck::new(lookup.clone()));
        let ctx = Arc::new(Ctx {
            supervisor,
            caller: caller.clone(),
            audience: Audience::new(caller),
            replies: Default::default(),
            descriptors: Default::default(),
            detached: Arc::new(tokio::sync::Semaphore::new(super::guard::MAX_DETACHED)),
            managed: Default::default(),
            listed: Default::default(),
        });
        // The root objects are served as the connection is made: zbus then returns it only
        // once its object server reads the calls. An object server started later
        // (`object_server()` on a built connection) subscribes in a task of its own, and zbus
        // drops, unanswered, a call that arrives before that (issue 23: a first call that
        // hung).
        let conn = bus()
            .serve_at(ROOT_PATH, BotObjects::guarded(ctx.clone()))
            .serve_at(ROOT_PATH, Manager::guarded(ctx.clone()))
            .serve_at(ROOT_PATH, super::schedules::Schedules::guarded(ctx.clone()))
            .build()
            .await
            .map_err(ServiceError::Connect)?;
        Ok(Service {
            conn,
            lookup,
            ctx,
            flush: None,
        })
    }

    /// Who is on the bus is known before the first signal: subscribes to the changes, follows
    /// them, then lists; and a refused descriptor is noticed before any bot object can be
    /// called.
    pub async fn follow_clients(&self) -> Result<(), ServiceError> {
        let dbus = zbus::fdo::DBusProxy::new(&self.conn).await?;
        let changes = dbus.receive_name_owner_changed().await?;
        super::clients::follow(self.ctx.clone(), changes);
        super::clients::learn_present(&self.ctx)
            .await
            .map_err(zbus::Error::from)?;
        super::descriptors::watch_refusals(&self.conn, self.ctx.descriptors.clone()).await?;
        Ok(())
    }

    /// Serves each bot's object and announces it (`InterfacesAdded`).
    pub async fn serve_bots(&self, handles: Vec<BotHandle>) -> Result<(), ServiceError> {
        let server = self.conn.object_server();
        for handle in handles {
            let path = bot_path(&handle.id);
            server
                .at(&path, BotObject::guarded(handle.clone(), self.ctx.clone()))
                .await?;
            self.ctx.managed.served(handle);
            if let Err(e) = super::objects::announce(&self.ctx, &self.conn, &path).await {
                tracing::debug!(error = %e, "InterfacesAdded not sent to the user's connections");
            }
        }
        Ok(())
    }

    /// Starts the task that turns committed changes into signals (design rule 1), the one
    /// that says when the database cannot be written (rule 15), and the one that keeps the
    /// schedules' timers (issue 49).
    pub fn publish(
        &mut self,
        publications: mpsc::UnboundedReceiver<crate::supervisor::Publication>,
    ) {
        let (flush_tx, flush_rx) = mpsc::unbounded_channel();
        tokio::spawn(super::publisher::run(
            self.conn.clone(),
            self.ctx.clone(),
            publications,
            flush_rx,
        ));
        self.flush = Some(flush_tx);
        tokio::spawn(watch_storage(self.conn.clone(), self.ctx.clone()));
        tokio::spawn(super::schedules::keep_timers(
            self.conn.clone(),
            self.ctx.clone(),
        ));
    }

    /// Takes `org.botvisor.Botvisor1` with `DO_NOT_QUEUE` (and neither `ALLOW_REPLACEMENT` nor
    /// `REPLACE_EXISTING`), each call within [`NAME_CALL_TIMEOUT`]. The name held by another
    /// connection is asked for once more if that owner leaves within [`NAME_RELEASE_WAIT`]: this
    /// daemon holds the database's lock, so an owner that is going is the run that crashed just
    /// before this one, whose connection the bus has not dropped yet. Errors:
    /// [`ServiceError::AlreadyRunning`], or the bus's.
    pub async fn take_name(&self) -> Result<(), ServiceError> {
        use futures_util::StreamExt;
        match self.request_name().await {
            Err(ServiceError::AlreadyRunning) => {}
            other => return other,
        }
        tracing::info!(
            wait_s = NAME_RELEASE_WAIT.as_secs_f64(),
            "the bus name is held by another connection: waiting for it to leave"
        );
        let dbus = zbus::fdo::DBusProxy::new(&self.conn).await?;
        let mut changes = dbus
            .receive_name_owner_changed_with_args(&[(0, BUS_NAME)])
            .await?;
        let gone = async {
            if !dbus.name_has_owner(BUS_NAME.try_into()?).await? {
                return Ok::<bool, zbus::Error>(true);
            }
            while let Some(change) = changes.next().await {
                if change.args()?.new_owner().is_none() {
                    return Ok(true);
                }
            }
            Ok(false)
        };
        match tokio::time::timeout(NAME_RELEASE_WAIT, gone).await {
            Ok(Ok(true)) => {
                tracing::info!("the bus name's last owner left; asking for it again");
                self.request_name().await
            }
            _ => Err(ServiceError::AlreadyRunning),
        }
    }

    /// One `RequestName` (see [`Service::take_name`]).
    async fn request_name(&self) -> Result<(), ServiceError> {
        let flags = RequestNameFlags::DO_NOT_QUEUE;
        let request = self.conn.request_name_with_flags(BUS_NAME, flags);
        match tokio::time::timeout(NAME_CALL_TIMEOUT, request).await {
            Ok(Ok(RequestNameReply::PrimaryOwner | RequestNameReply::AlreadyOwner)) => Ok(()),
            Ok(Ok(RequestNameReply::Exists | RequestNameReply::InQueue))
            | Ok(Err(zbus::Error::NameTaken)) => Err(ServiceError::AlreadyRunning),
            Ok(Err(e)) => Err(e.into()),
            Err(_) => Err(ServiceError::Bus(zbus::Error::Failure(format!(
                "the bus did not answer RequestName within {NAME_CALL_TIMEOUT:?}"
            )))),
        }
    }

    /// Runs until SIGTERM or SIGINT, or until the bus goes away or drops us; says which, and,
    /// when the connection was lost, whether the bus itself still runs.
    pub async fn until_end(&self, signals: &mut StopSignals) -> End {
        let closing = closing_stream(&self.conn)
            .await
            .inspect_err(|e| tracing::warn!(error = %e, "cannot watch the bus connection's end"))
            .ok();
        let lost = tokio::select! {
            _ = signals.term.recv() => { tracing::info!("SIGTERM: stopping every bot"); None }
            _ = signals.int.recv() => { tracing::info!("SIGINT: stopping every bot"); None }
            why = connection_lost(&self.conn, closing) => Some(why),
            // Without it no new caller can be told from another user's.
            _ = self.lookup.connection().closed() => {
                Some("the bus closed botvisord's connection for questions about its clients".into())
            }
        };
        let Some(why) = lost else {
            return End::Asked;
        };
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
            End::Dropped(why)
        } else {
            tracing::warn!(
                reason = %why,
                "the session bus went away (the session ended): stopping every bot"
            );
            End::SessionEnded(why)
        }
    }

    /// Sends what the bots published last (within [`FLUSH_TIMEOUT`]), so that a client sees
    /// their last changes before the owner change, then releases the name (within
    /// [`NAME_CALL_TIMEOUT`]).
    pub async fn leave(self) {
        if !self.ctx.replies.all_sent(ANSWERS_TIMEOUT).await {
            tracing::warn!(
                "calls were still running after {ANSWERS_TIMEOUT:?}; their callers get no answer"
            );
        }
        let (done_tx, done_rx) = tokio::sync::oneshot::channel();
        if let Some(flush) = &self.flush
            && flush.send(done_tx).is_ok()
            && tokio::time::timeout(FLUSH_TIMEOUT, done_rx).await.is_err()
        {
            tracing::warn!("the last signals were not all sent within {FLUSH_TIMEOUT:?}");
        }
        if tokio::time::timeout(NAME_CALL_TIMEOUT, self.conn.release_name(BUS_NAME))
            .await
            .is_err()
        {
            tracing::warn!("the bus did not answer ReleaseName within {NAME_CALL_TIMEOUT:?}");
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
