//! The daemon's D-Bus service: serve the objects, then own the name, then run until told to
//! stop.

use std::sync::Arc;

use tokio::sync::mpsc;
use zbus::Connection;
use zbus::fdo::{RequestNameFlags, RequestNameReply};

use super::audience::Audience;
use super::bot::BotObject;
use super::caller::CallerCheck;
use super::manager::Manager;
use super::objects::BotObjects;
use super::paths::bot_path;
use super::{BUS_NAME, ROOT_PATH};
use crate::config::Config;
use crate::runtime::{Runtime, claude::Claude};
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
}

/// Why the service did not run.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// Another process owns `org.botvisor.Botvisor1` on this bus.
    #[error("another botvisord already owns org.botvisor.Botvisor1 on this bus")]
    AlreadyRunning,
    /// No session bus, or the bus failed.
    #[error("D-Bus: {0}")]
    Bus(#[from] zbus::Error),
    /// The database could not be opened.
    #[error("{0}")]
    Store(#[from] crate::store::StoreError),
    /// Bots could not be loaded.
    #[error("{0}")]
    Load(#[from] crate::supervisor::BotError),
}

/// Runs the service on `conn` until SIGTERM or SIGINT (or the bus goes away), then stops every
/// bot gently and releases the name.
pub async fn run(conn: Connection, config: Config, store: Store) -> Result<(), ServiceError> {
    let config = Arc::new(config);
    let runtimes: Vec<Arc<dyn Runtime>> = vec![Arc::new(Claude::new(config.claude_bin.clone()))];
    let (pub_tx, pub_rx) = mpsc::unbounded_channel();
    let supervisor = Supervisor::new(Arc::new(store), config, runtimes, pub_tx);
    let caller = Arc::new(CallerCheck::default());
    let ctx = Arc::new(Ctx {
        supervisor: supervisor.clone(),
        caller: caller.clone(),
        audience: Audience::new(caller),
    });

    // Who is on the bus is known before the first signal: subscribe to the changes, then list.
    let dbus = zbus::fdo::DBusProxy::new(&conn).await?;
    let changes = dbus.receive_name_owner_changed().await?;
    ctx.audience.learn_all(&conn).await?;

    let server = conn.object_server();
    server
        .at(ROOT_PATH, BotObjects::guarded(ctx.clone()))
        .await?;
    server.at(ROOT_PATH, Manager::guarded(ctx.clone())).await?;
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
    tokio::spawn(super::publisher::run(conn.clone(), ctx.clone(), pub_rx));

    match crate::process::subreaper::become_subreaper() {
        Ok(true) => tracing::debug!("child subreaper: descendants that escape come back here"),
        Ok(false) => tracing::info!("no child subreaper on this system: best-effort proof"),
        Err(e) => tracing::warn!(error = %e, "cannot become a child subreaper"),
    }
    tokio::spawn(reap_orphans());
    tokio::spawn(watch_clients(conn.clone(), ctx.clone(), changes));

    let flags = RequestNameFlags::DO_NOT_QUEUE;
    match conn.request_name_with_flags(BUS_NAME, flags).await {
        Ok(RequestNameReply::PrimaryOwner | RequestNameReply::AlreadyOwner) => {}
        Ok(RequestNameReply::Exists | RequestNameReply::InQueue) | Err(zbus::Error::NameTaken) => {
            return Err(ServiceError::AlreadyRunning);
        }
        Err(e) => return Err(e.into()),
    }
    match supervisor.recover_processes().await {
        Ok(0) => {}
        Ok(n) => tracing::warn!(count = n, "stopped processes left by the previous run"),
        Err(e) => tracing::error!(error = %e, "cannot check processes left by the previous run"),
    }
    supervisor.open();
    tracing::info!(bots = count, "botvisord is serving {BUS_NAME}");

    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| zbus::Error::Failure(e.to_string()))?;
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: stopping every bot"),
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT: stopping every bot"),
        _ = conn.closed() => tracing::warn!("the bus connection closed: stopping every bot"),
    }
    supervisor.shutdown().await;
    let _ = conn.release_name(BUS_NAME).await;
    tracing::info!("botvisord stopped");
    Ok(())
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

/// Follows connections joining and leaving the bus: a new one's user is learned (the signal
/// audience); one that leaves is forgotten and its leases end.
async fn watch_clients(
    conn: Connection,
    ctx: Arc<Ctx>,
    mut changes: zbus::fdo::NameOwnerChangedStream,
) {
    use futures_util::StreamExt;
    while let Some(signal) = changes.next().await {
        let Ok(args) = signal.args() else { continue };
        let name = args.name().to_string();
        if !name.starts_with(':') {
            continue;
        }
        if args.new_owner().is_some() {
            ctx.audience.learn(&conn, &name).await;
        } else {
            ctx.caller.forget(&name);
            ctx.supervisor.client_gone(&name);
        }
    }
    tracing::warn!("no longer told of clients leaving the bus; leases end only with Release");
}
