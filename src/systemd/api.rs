//! The parts of systemd's D-Bus API (`org.freedesktop.systemd1`, the user manager on the
//! session bus) botvisord uses: transient scopes for its agents, its own unit's queued job,
//! what its service unit was given, and the schedules' timer units (reload, enable, start). See systemd's `org.freedesktop.systemd1(5)`.

use zbus::proxy;
use zbus::{OwnedObjectPath, Variant as Value};

/// `org.freedesktop.systemd1.Manager` at `/org/freedesktop/systemd1`.
#[proxy(
    interface = "org.freedesktop.systemd1.Manager",
    default_service = "org.freedesktop.systemd1",
    default_path = "/org/freedesktop/systemd1"
)]
pub trait Manager {
    /// The unit whose cgroup holds `pid` (0: the caller).
    #[zbus(name = "GetUnitByPID")]
    fn get_unit_by_pid(&self, pid: u32) -> zbus::Result<OwnedObjectPath>;
    /// The loaded unit named `name`. Error `org.freedesktop.systemd1.NoSuchUnit` when none is.
    fn get_unit(&self, name: &str) -> zbus::Result<OwnedObjectPath>;
    /// Creates and starts the transient unit `name` with `properties` (`mode` `fail`: refused
    /// when a job of it is queued); returns the start job's path. Error
    /// `org.freedesktop.systemd1.UnitExists` when it is loaded already.
    #[allow(clippy::type_complexity)]
    fn start_transient_unit(
        &self,
        name: &str,
        mode: &str,
        properties: &[(&str, Value<'_>)],
        aux: &[(&str, &[(&str, Value<'_>)])],
    ) -> zbus::Result<OwnedObjectPath>;
    /// Stops the unit `name` (`mode` `replace`); returns the job's path.
    fn stop_unit(&self, name: &str, mode: &str) -> zbus::Result<OwnedObjectPath>;
    /// Starts the unit `name` (`mode` `replace`); returns the job's path.
    fn start_unit(&self, name: &str, mode: &str) -> zbus::Result<OwnedObjectPath>;
    /// Restarts the unit `name`, starting it when it is not running; returns the job's path.
    fn restart_unit(&self, name: &str, mode: &str) -> zbus::Result<OwnedObjectPath>;
    /// Reads the unit files again (`systemctl --user daemon-reload`); answers once done.
    fn reload(&self) -> zbus::Result<()>;
    /// Forgets that the unit `name` failed (`systemctl --user reset-failed`), so that one whose
    /// file is gone is unloaded.
    fn reset_failed_unit(&self, name: &str) -> zbus::Result<()>;
    /// Enables the unit files `files` (by name) as their `[Install]` says (`runtime` false: for
    /// good; `force`: over symlinks in the way): whether they carry install information, and
    /// the changes made as (type, file, destination).
    #[allow(clippy::type_complexity)]
    fn enable_unit_files(
        &self,
        files: &[&str],
        runtime: bool,
        force: bool,
    ) -> zbus::Result<(bool, Vec<(String, String, String)>)>;
    /// Disables the unit files `files` (by name): the changes made as (type, file, destination).
    fn disable_unit_files(
        &self,
        files: &[&str],
        runtime: bool,
    ) -> zbus::Result<Vec<(String, String, String)>>;
    /// Asks for the manager's signals (`JobRemoved`) on this connection.
    fn subscribe(&self) -> zbus::Result<()>;
    /// A job ended: its id and path, its unit, and how (`done`, `failed`, `canceled`, …).
    #[zbus(signal)]
    fn job_removed(
        &self,
        id: u32,
        job: OwnedObjectPath,
        unit: String,
        result: String,
    ) -> zbus::Result<()>;
}

/// `org.freedesktop.systemd1.Unit` of a unit's object.
#[proxy(
    interface = "org.freedesktop.systemd1.Unit",
    default_service = "org.freedesktop.systemd1"
)]
pub trait Unit {
    /// The unit's name (`botvisord.service`).
    #[zbus(property)]
    fn id(&self) -> zbus::Result<String>;
    /// Its queued job: `(id, path)`, id 0 when none.
    #[zbus(property)]
    fn job(&self) -> zbus::Result<(u32, OwnedObjectPath)>;
    /// `active`, `inactive`, `deactivating`, …
    #[zbus(property)]
    fn active_state(&self) -> zbus::Result<String>;
}

/// `org.freedesktop.systemd1.Job` of a job's object.
#[proxy(
    interface = "org.freedesktop.systemd1.Job",
    default_service = "org.freedesktop.systemd1"
)]
pub trait Job {
    /// `start`, `stop`, `restart`, `try-restart`, `reload`, …
    #[zbus(property)]
    fn job_type(&self) -> zbus::Result<String>;
}

/// `org.freedesktop.systemd1.Service` of a service unit's object.
#[proxy(
    interface = "org.freedesktop.systemd1.Service",
    default_service = "org.freedesktop.systemd1"
)]
pub trait Service {
    /// `FileDescriptorStoreMax=`: how many file descriptors the unit may store (0: none).
    #[zbus(property)]
    fn file_descriptor_store_max(&self) -> zbus::Result<u32>;
    /// How many it stores now.
    #[zbus(property, name = "NFileDescriptorStore")]
    fn n_file_descriptor_store(&self) -> zbus::Result<u32>;
    /// `NotifyAccess=`: `none`, `main`, `exec` or `all`.
    #[zbus(property)]
    fn notify_access(&self) -> zbus::Result<String>;
}

/// `org.freedesktop.systemd1.Scope` of a scope unit's object.
#[proxy(
    interface = "org.freedesktop.systemd1.Scope",
    default_service = "org.freedesktop.systemd1"
)]
pub trait Scope {
    /// Its cgroup, from the hierarchy's root (`/user.slice/…/botvisor-bot-<id>.scope`).
    #[zbus(property)]
    fn control_group(&self) -> zbus::Result<String>;
}
