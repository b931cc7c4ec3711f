//! The daemon's D-Bus service: serve the objects, then own the name, then run until told to
//! stop.

use std::sync::Arc;

use tokio::sync::mpsc;
use zbus::Connection;
use zbus::fdo::{RequestNameFlags, RequestNameReply};

use super::bot::BotObject;
use super::caller::CallerCheck;
use super::manager::Manager;
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
    /// The caller check of design rule 14.
    pub caller: CallerCheck,
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
    let ctx = Arc::new(Ctx {
        supervisor: supervisor.clone(),
        caller: CallerCheck::default(),
    });

    let server = conn.object_server();
    server.at(ROOT_PATH, zbus::fdo::ObjectManager).await?;
    server.at(ROOT_PATH, Manager { ctx: ctx.clone() }).await?;
    let handles = supervisor.load()?;
    let count = handles.len();
    for handle in handles {
        let path = bot_path(&handle.id);
        server
            .at(&path, BotObject::new(handle, ctx.clone()))
            .await?;
    }
    tokio::spawn(super::publisher::run(conn.clone(), pub_rx));

    let flags = RequestNameFlags::DO_NOT_QUEUE;
    match conn.request_name_with_flags(BUS_NAME, flags).await {
        Ok(RequestNameReply::PrimaryOwner | RequestNameReply::AlreadyOwner) => {}
        Ok(RequestNameReply::Exists | RequestNameReply::InQueue) | Err(zbus::Error::NameTaken) => {
            return Err(ServiceError::AlreadyRunning);
        }
        Err(e) => return Err(e.into()),
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
