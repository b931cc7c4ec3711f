//! Whether botvisord keeps its agents across its own restarts, and the user manager's help with
//! it: the daemon's unit, its queued job at a SIGTERM, the agents' scopes.

use std::path::PathBuf;
use std::time::Duration;

use futures_util::StreamExt;
use zbus::Variant as Value;

use super::api::{JobProxy, ManagerProxy, ScopeProxy, ServiceProxy, UnitProxy};

/// The slice botvisord's agents' scopes go in (`packaging/systemd/botvisor.slice`; a transient
/// one is made when the file is not installed).
pub const SLICE: &str = "botvisor.slice";

/// How long a call to the user manager, or a job of it, may take: it answers in milliseconds;
/// past this it is taken as gone, and the agent runs without a scope of its own (as without a
/// user manager).
pub const MANAGER_WAIT: Duration = Duration::from_secs(10);

/// The scope of bot `bot_id`'s agent.
pub fn scope_name(bot_id: &str) -> String {
    format!("botvisor-bot-{bot_id}.scope")
}

/// The kernel's boot id (`/proc/sys/kernel/random/boot_id`; empty where there is none).
pub fn boot_id() -> &'static str {
    crate::process::identity::boot_id()
}

/// This daemon's invocation: systemd's `INVOCATION_ID` when it runs as a unit's main process
/// (with the unit's `NOTIFY_SOCKET` beside it), else one of its own, made once per process (32
/// hexadecimal digits either way). `INVOCATION_ID` alone is not enough: a shell of a terminal
/// that runs as a service (GNOME's `gnome-terminal-server.service`) passes its unit's on to
/// every program started from it, so two botvisords started there would share it.
pub fn invocation() -> &'static str {
    static ID: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    ID.get_or_init(|| {
        std::env::var("INVOCATION_ID")
            .ok()
            .filter(|_| std::env::var_os("NOTIFY_SOCKET").is_some())
            .filter(|v| v.len() == 32 && v.bytes().all(|b| b.is_ascii_hexdigit()))
            .unwrap_or_else(|| uuid::Uuid::new_v4().simple().to_string())
    })
}

/// Whether the agents outlive botvisord's restarts here.
#[derive(Debug, Clone)]
pub enum Survival {
    /// Yes: botvisord runs as `unit` of the user manager reachable on `conn`, with a file
    /// descriptor store.
    Keep(Keeper),
    /// No, for this reason (in words, for the journal, `doctor` and the Manager's `Survival`).
    Off(String),
}

impl Survival {
    /// What the Manager's `Survival` property says: `keep` or `off: <why>`.
    pub fn describe(&self) -> String {
        match self {
            Survival::Keep(k) => format!("keep ({}, {})", k.unit, SLICE),
            Survival::Off(why) => format!("off: {why}"),
        }
    }

    /// The keeper, when the agents outlive restarts.
    pub fn keeper(&self) -> Option<&Keeper> {
        match self {
            Survival::Keep(k) => Some(k),
            Survival::Off(_) => None,
        }
    }
}

static SURVIVAL: std::sync::OnceLock<Survival> = std::sync::OnceLock::new();

/// Settles this daemon's [`Survival`] once, at start (later calls keep the first).
pub fn settle(survival: Survival) -> &'static Survival {
    SURVIVAL.get_or_init(|| survival)
}

/// This daemon's [`Survival`]: what [`settle`] set, else off ("not set up", as in tests that
/// run the supervisor without a daemon).
pub fn survival() -> &'static Survival {
    static NOT_SET_UP: std::sync::LazyLock<Survival> =
        std::sync::LazyLock::new(|| Survival::Off("not set up in this process".into()));
    SURVIVAL.get().unwrap_or(&NOT_SET_UP)
}

/// The keeper, when this daemon's agents outlive its restarts.
pub fn keeper() -> Option<&'static Keeper> {
    survival().keeper()
}

/// botvisord's unit and the user manager that runs it.
#[derive(Debug, Clone)]
pub struct Keeper {
    conn: zbus::Connection,
    /// The daemon's unit (`botvisord.service`).
    pub unit: String,
    unit_path: zbus::OwnedObjectPath,
}

/// Finds out whether the agents can outlive botvisord's restarts (`wanted`: the configuration's
/// `survive_restarts`): only under a service manager (`INVOCATION_ID`, `NOTIFY_SOCKET`) whose
/// user manager answers on the session bus, as a service unit with a file descriptor store
/// (`FileDescriptorStoreMax=` above 0) that takes this process's notifications
/// (`NotifyAccess=main` or more).
pub async fn detect(wanted: bool) -> Survival {
    if !wanted {
        return Survival::Off("survive_restarts is off in the configuration".into());
    }
    if std::env::var_os("INVOCATION_ID").is_none() || !super::fdstore::available() {
        return Survival::Off(
            "botvisord does not run as a systemd user unit (no INVOCATION_ID or NOTIFY_SOCKET): \
             a restart ends the running turns, and the next botvisord asks each taken message \
             again"
                .into(),
        );
    }
    match tokio::time::timeout(MANAGER_WAIT, find_keeper()).await {
        Ok(Ok(k)) => Survival::Keep(k),
        Ok(Err(why)) => Survival::Off(why),
        Err(_) => Survival::Off(format!(
            "the user manager did not answer within {} s",
            MANAGER_WAIT.as_secs()
        )),
    }
}

async fn find_keeper() -> Result<Keeper, String> {
    let conn = zbus::Connection::session()
        .await
        .map_err(|e| format!("no session bus to reach the user manager on: {e}"))?;
    let manager = ManagerProxy::new(&conn)
        .await
        .map_err(|e| format!("the user manager: {e}"))?;
    let unit_path = manager
        .get_unit_by_pid(std::process::id())
        .await
        .map_err(|e| format!("the user manager does not know botvisord's unit: {e}"))?;
    let unit = UnitProxy::builder(&conn)
        .path(unit_path.clone())
        .build()
        .await
        .map_err(|e| e.to_string())?
        .id()
        .await
        .map_err(|e| format!("botvisord's unit: {e}"))?;
    if !unit.ends_with(".service") {
        return Err(format!("botvisord runs in {unit}, not a service unit"));
    }
    let service = ServiceProxy::builder(&conn)
        .path(unit_path.clone())
        .build()
        .await
        .map_err(|e| e.to_string())?;
    let max = service.file_descriptor_store_max().await.unwrap_or(0);
    if max == 0 {
        return Err(format!(
            "{unit} has no file descriptor store (FileDescriptorStoreMax=0): install the unit of \
             scripts/install.sh"
        ));
    }
    let access = service.notify_access().await.unwrap_or_default();
    if access == "none" {
        return Err(format!(
            "{unit} takes no notification from botvisord (NotifyAccess=none): install the unit \
             of scripts/install.sh"
        ));
    }
    manager
        .subscribe()
        .await
        .map_err(|e| format!("cannot follow the user manager's jobs: {e}"))?;
    Ok(Keeper {
        conn,
        unit,
        unit_path,
    })
}

impl Keeper {
    /// At a SIGTERM: whether botvisord's unit is being restarted (its queued job is a
    /// `restart`, as `systemctl --user restart` and an upgrade's `try-restart` make), so that
    /// the agents are kept; a stop (`systemctl --user stop`, the session ending), no job at all
    /// (a `kill` from outside) or a manager that does not answer: no.
    pub async fn restarting(&self) -> bool {
        let ask = async {
            let unit = UnitProxy::builder(&self.conn)
                .path(self.unit_path.clone())
                .build()
                .await?;
            let (id, job) = unit.job().await?;
            if id == 0 {
                return Ok::<_, zbus::Error>(String::new());
            }
            let job = JobProxy::builder(&self.conn).path(job).build().await?;
            job.job_type().await
        };
        match tokio::time::timeout(MANAGER_WAIT, ask).await {
            Ok(Ok(kind)) => {
                tracing::info!(unit = %self.unit, job = %kind, "the unit's queued job at SIGTERM");
                kind.contains("restart")
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "cannot read botvisord's queued job; the agents are stopped");
                false
            }
            Err(_) => {
                tracing::warn!(
                    "the user manager did not say botvisord's queued job; the agents are stopped"
                );
                false
            }
        }
    }

    /// Moves the process `pid` (the agent's root, held at its gate: it starts nothing before it
    /// is released) into a new transient scope of bot `bot_id`, under [`SLICE`], with
    /// `memory_max` bytes as its `MemoryMax=` (none: no limit); waits for the start job.
    /// Returns the scope's cgroup (from the hierarchy's root). A scope of the bot that is left
    /// from an earlier agent is stopped first. Errors: in words, the manager's.
    pub async fn scope(
        &self,
        bot_id: &str,
        pid: u32,
        memory_max: Option<u64>,
    ) -> Result<String, String> {
        tokio::time::timeout(MANAGER_WAIT, self.scope_now(bot_id, pid, memory_max))
            .await
            .unwrap_or_else(|_| {
                Err(format!(
                    "the user manager did not start the scope within {} s",
                    MANAGER_WAIT.as_secs()
                ))
            })
    }

    async fn scope_now(
        &self,
        bot_id: &str,
        pid: u32,
        memory_max: Option<u64>,
    ) -> Result<String, String> {
        let name = scope_name(bot_id);
        let manager = ManagerProxy::new(&self.conn)
            .await
            .map_err(|e| e.to_string())?;
        let mut removed = manager
            .receive_job_removed()
            .await
            .map_err(|e| e.to_string())?;
        let description = format!("botvisor bot {bot_id}");
        let mut properties: Vec<(&str, Value<'_>)> = vec![
            ("PIDs", Value::from(vec![pid])),
            ("Slice", Value::from(SLICE)),
            ("Description", Value::from(description.as_str())),
            ("CollectMode", Value::from("inactive-or-failed")),
            // Stopped after botvisord's unit when both are (the session ends): botvisord
            // stops the agent itself, gently and proven, and the manager finds the scope empty.
            ("Before", Value::from(vec![self.unit.as_str()])),
        ];
        if let Some(bytes) = memory_max {
            properties.push(("MemoryMax", Value::from(bytes)));
        }
        let started = match manager
            .start_transient_unit(&name, "fail", &properties, &[])
            .await
        {
            Ok(job) => job,
            Err(zbus::Error::MethodError(n, _, _)) if n.as_str().ends_with("UnitExists") => {
                // A scope of an earlier agent of this bot: it is stopped, then made anew.
                self.stop_scope(bot_id).await;
                manager
                    .start_transient_unit(&name, "fail", &properties, &[])
                    .await
                    .map_err(|e| format!("cannot start {name}: {e}"))?
            }
            Err(e) => return Err(format!("cannot start {name}: {e}")),
        };
        while let Some(signal) = removed.next().await {
            let Ok(args) = signal.args() else { continue };
            if *args.job() == started {
                if args.result() != "done" {
                    return Err(format!("{name}'s start job ended {}", args.result()));
                }
                break;
            }
        }
        let path = manager.get_unit(&name).await.map_err(|e| e.to_string())?;
        ScopeProxy::builder(&self.conn)
            .path(path)
            .build()
            .await
            .map_err(|e| e.to_string())?
            .control_group()
            .await
            .map_err(|e| format!("{name}'s cgroup: {e}"))
    }

    /// The cgroup of bot `bot_id`'s scope, if it is loaded (after a restart: the agent's).
    pub async fn scope_cgroup(&self, bot_id: &str) -> Option<String> {
        let ask = async {
            let manager = ManagerProxy::new(&self.conn).await?;
            let path = manager.get_unit(&scope_name(bot_id)).await?;
            ScopeProxy::builder(&self.conn)
                .path(path)
                .build()
                .await?
                .control_group()
                .await
        };
        tokio::time::timeout(MANAGER_WAIT, ask).await.ok()?.ok()
    }

    /// Stops bot `bot_id`'s scope (what is left in it gets SIGTERM, then SIGKILL, from the user
    /// manager) and waits for the job, bounded. Said in the journal when it fails: a scope whose
    /// processes are gone goes by itself.
    pub async fn stop_scope(&self, bot_id: &str) {
        let name = scope_name(bot_id);
        let stop = async {
            let manager = ManagerProxy::new(&self.conn).await?;
            let mut removed = manager.receive_job_removed().await?;
            let job = manager.stop_unit(&name, "replace").await?;
            while let Some(signal) = removed.next().await {
                if signal.args().is_ok_and(|a| *a.job() == job) {
                    break;
                }
            }
            Ok::<_, zbus::Error>(())
        };
        match tokio::time::timeout(MANAGER_WAIT, stop).await {
            Ok(Ok(())) => {}
            Ok(Err(zbus::Error::MethodError(n, _, _))) if n.as_str().ends_with("NoSuchUnit") => {}
            Ok(Err(e)) => tracing::warn!(scope = %name, error = %e, "cannot stop the scope"),
            Err(_) => tracing::warn!(scope = %name, "the scope's stop did not end in time"),
        }
    }

    /// The folder of a cgroup the manager named (`/user.slice/…`), in the unified (v2)
    /// hierarchy botvisord sees; `None` without one.
    pub fn cgroup_dir(cgroup: &str) -> Option<PathBuf> {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
        let mount = crate::process::cgroup::cgroup2_mounts(&mountinfo)
            .into_iter()
            .next()?;
        Some(mount.mount_point.join(cgroup.trim_start_matches('/')))
    }
}
