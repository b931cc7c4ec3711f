//! The composition root of `botvisord`: what starts, in which order, and how it stops. Each step
//! is carried out by the module that owns it; the order, and why, is read here top to bottom.
//!
//! `bin/botvisord.rs` parses the arguments and the configuration, then calls [`run`].

mod left_processes;
mod single_instance;

use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::mpsc;

use crate::config::Config;
use crate::dbus::service::{End, Service, ServiceError, StopSignals};
use crate::runtime::{Runtime, claude::Claude, codex::Codex};
use crate::store::Store;
use crate::supervisor::{BotError, Supervisor};

/// Why botvisord stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// A private folder, a lock or the database could not be had (another botvisord holds the
    /// database, a folder cannot be made private, …); the text says which and why.
    #[error("{0}")]
    Start(String),
    /// The bus could not be connected to, or another botvisord owns the name.
    #[error("{0}")]
    Service(#[from] ServiceError),
    /// The bots could not be loaded from the database.
    #[error("{0}")]
    Load(#[from] BotError),
    /// The bus dropped our connection while it still runs (the bots were stopped first).
    #[error("the bus dropped botvisord's connection while the bus still runs: {0}")]
    Dropped(String),
}

/// Runs botvisord with `config` and the database at `database` until SIGTERM or SIGINT (or
/// until the bus goes away: `Ok`; or drops us while it runs: [`DaemonError::Dropped`], so that
/// the service manager restarts it). Must run inside a tokio runtime with I/O and time.
pub async fn run(config: Config, database: PathBuf) -> Result<(), DaemonError> {
    // 1. One daemon per database (design rule 7), in folders that are the user's alone.
    let before = single_instance::Created::before(&database);
    let locks = single_instance::lock(&database)?;
    let store = Store::open(&database).map_err(|e| {
        DaemonError::Start(format!(
            "cannot open the database {}: {e}",
            database.display()
        ))
    })?;
    let _locks = locks.with_database(&database)?;
    tracing::info!(database = %database.display(), "starting");
    // 2. From here a SIGTERM stops us gently, even while we start up. What the service manager
    //    passed back (the agents a previous run handed over, issue 47) is taken at once.
    let mut signals = StopSignals::install()
        .map_err(|e| ServiceError::Bus(zbus::Error::Failure(e.to_string())))?;
    let passed = crate::systemd::fdstore::take_passed();
    // 3. The runtimes, and containment settled before anything can read it (the bots'
    //    objects and the Manager's Containment property read it).
    let config = Arc::new(config);
    let runtimes = runtimes(&config);
    let containment = crate::process::cgroup::init();
    // 4. The bots, loaded with their actors held at the gate: no agent starts until the name
    //    is ours and what a previous run left is stopped.
    let (publications_tx, publications) = mpsc::unbounded_channel();
    let supervisor = Supervisor::new(Arc::new(store), config, runtimes, publications_tx);
    let mut service = Service::connect(supervisor.clone()).await?;
    service.follow_clients().await?;
    // Whether the agents outlive this daemon's restarts (issue 47): settled before any starts.
    let survival = crate::systemd::life::settle(
        crate::systemd::life::detect(supervisor.config().survive_restarts).await,
    );
    match survival {
        crate::systemd::life::Survival::Keep(k) => tracing::info!(
            unit = %k.unit,
            boot_id = crate::systemd::life::boot_id(),
            invocation = crate::systemd::life::invocation(),
            "the agents outlive botvisord's restarts: each runs in a scope of its own, its pipes in the unit's store"
        ),
        crate::systemd::life::Survival::Off(why) => tracing::info!(
            boot_id = crate::systemd::life::boot_id(),
            invocation = crate::systemd::life::invocation(),
            "the agents end with botvisord: {why}"
        ),
    }
    supervisor.give_passed(passed);
    let taken_over = supervisor.taken_over();
    let handles = supervisor.load()?;
    let count = handles.len();
    service.serve_bots(handles).await?;
    service.publish(publications);
    // 5. What escapes a bot's process group comes back to us (design rule 9).
    match crate::process::subreaper::become_subreaper() {
        Ok(true) => tracing::debug!("child subreaper: descendants that escape come back here"),
        Ok(false) => tracing::info!("no child subreaper on this system: best-effort proof"),
        Err(e) => tracing::warn!(error = %e, "cannot become a child subreaper"),
    }
    tokio::spawn(crate::process::subreaper::reap_on_sigchld());
    let records: Vec<_> = supervisor
        .list()
        .iter()
        .map(|h| h.snapshot().record)
        .collect();
    crate::supervisor::memory_max::report_at_start(supervisor.config(), &records, containment);
    // 6. The name, then what a crashed run left (design rules 9 and 10), then the bots run.
    if let Err(e) = service.take_name().await {
        // Refused the name (another botvisord serves this bus): what this start created goes.
        before.remove_new(&database);
        return Err(e.into());
    }
    match left_processes::stop_all(&supervisor, &taken_over).await {
        Ok(0) => {}
        Ok(n) => tracing::warn!(count = n, "stopped processes left by the previous run"),
        Err(e) => tracing::error!(error = %e, "cannot check processes left by the previous run"),
    }
    supervisor.open();
    // 7. Memory where it matters (issue 31): idle bots stopped under memory pressure, least
    //    recently used first; nothing runs while there is none.
    let pressure = crate::supervisor::evict::follow(supervisor.clone());
    tracing::info!(
        bots = count,
        "botvisord is serving {}",
        crate::dbus::BUS_NAME
    );

    let end = service.until_end(&mut signals).await;

    // 8. Stop every bot gently (rule 9), signal their last changes, then release the name: a
    //    client sees the bots' ends before the owner change. No bot is stopped for memory
    //    pressure meanwhile.
    if let Some(task) = pressure {
        task.abort();
    }
    supervisor.store().closing();
    // A restart of the unit (its queued job, issue 47) hands the agents over to the next
    // botvisord; a stop, the session's end, a bus that went away: every bot stopped.
    let restarting = match (crate::systemd::life::keeper(), &end) {
        (Some(k), End::Asked) => k.restarting().await,
        _ => false,
    };
    if restarting {
        tracing::info!("botvisord's unit restarts: the agents are handed over");
        supervisor.hand_over().await;
    } else {
        supervisor.shutdown().await;
    }
    service.leave().await;
    tracing::info!("botvisord stopped");
    match end {
        End::Dropped(why) => Err(DaemonError::Dropped(why)),
        End::Asked | End::SessionEnded(_) => Ok(()),
    }
}

/// The runtimes botvisord serves, each with the binary the configuration names; the journal
/// says which binary each will run, or why none.
fn runtimes(config: &Config) -> Vec<Arc<dyn Runtime>> {
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
    runtimes
}
