//! Containment in a delegated cgroup v2 subtree (design rule 10).
//!
//! Where botvisord runs in a cgroup v2 subtree it may write (a systemd user unit with
//! `Delegate=yes`), it follows the kernel's delegation rules (`Documentation/admin-guide/
//! cgroup-v2.rst`): it moves itself into a leaf of its own, `daemon/`, so that the subtree's root
//! holds no process; enables the controllers it was given (`memory`, `pids`, `cpu`) for the bots;
//! and starts each agent directly in `bots/<bot id>/` (the child joins it before `exec`, see
//! [`crate::process::spawn::spawn_in`]). "Every descendant is gone" is then one read
//! (`cgroup.events` says `populated 0`), and killing them all is one write (`cgroup.kill`).
//!
//! Found from `/proc/self/cgroup` (the `0::` line) and the `cgroup2` mount in
//! `/proc/self/mountinfo`; used only when the service manager marked it delegated
//! ([`delegated`]) and it is writable. Elsewhere (no cgroup v2, the hierarchy's root, a read-only or
//! foreign subtree, macOS) [`Containment::ProcessTree`] says why, and rule 9's proof applies.

mod locate;

pub use locate::{Cgroup2Mount, cgroup2_mounts, locate, own_cgroup};

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

/// The leaf the daemon moves itself into.
pub const DAEMON_LEAF: &str = "daemon";

/// The folder holding one cgroup per bot.
pub const BOTS_DIR: &str = "bots";

/// The controllers botvisor enables for its bots when the subtree has them.
pub const WANTED_CONTROLLERS: &[&str] = &["memory", "pids", "cpu"];

/// How long [`wait_empty`] waits by default after `cgroup.kill`.
pub const KILL_WAIT: Duration = Duration::from_secs(5);

/// The delegated subtree botvisord set up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subtree {
    /// The subtree's folder in the cgroup2 file system, e.g.
    /// `/sys/fs/cgroup/user.slice/user-1000.slice/user@1000.service/app.slice/botvisord.service`.
    pub root: PathBuf,
    /// The controllers enabled for the bots (a subset of [`WANTED_CONTROLLERS`]).
    pub controllers: Vec<String>,
}

impl Subtree {
    /// The folder of `bot_id`'s cgroup (which may not exist).
    pub fn bot_dir(&self, bot_id: &str) -> PathBuf {
        self.root.join(BOTS_DIR).join(bot_id)
    }

    /// Whether `controller` (`memory`, `pids`, `cpu`) is enabled for the bots.
    pub fn has(&self, controller: &str) -> bool {
        self.controllers.iter().any(|c| c == controller)
    }

    /// The bot cgroups that exist now: `(bot id, folder)`.
    pub fn bot_cgroups(&self) -> Vec<(String, PathBuf)> {
        let Ok(entries) = std::fs::read_dir(self.root.join(BOTS_DIR)) else {
            return Vec::new();
        };
        let mut out: Vec<(String, PathBuf)> = entries
            .filter_map(Result::ok)
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
            .collect();
        out.sort();
        out
    }

    /// Creates `bot_id`'s cgroup (kept when it exists) and, with the memory controller, sets its
    /// `memory.max` to `memory_max` (bytes), or to `max` (no limit) for `None` so that a limit
    /// left by an earlier run does not stay. Returns its folder. Errors: the kernel's (for
    /// example `EACCES`, `ENOENT` for a `memory.max` without the memory controller).
    pub fn prepare_bot(&self, bot_id: &str, memory_max: Option<u64>) -> std::io::Result<PathBuf> {
        let dir = self.bot_dir(bot_id);
        match std::fs::create_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                // `bots/` itself was removed while botvisord ran: made again, with the
                // controllers it had, so that containment goes on.
                let bots = self.root.join(BOTS_DIR);
                tracing::warn!(cgroup = %bots.display(), "the bots' cgroup folder was removed; making it again");
                match std::fs::create_dir(&bots) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                    Err(e) => return Err(e),
                }
                for c in &self.controllers {
                    write_file(&bots.join("cgroup.subtree_control"), &format!("+{c}"))?;
                }
                std::fs::create_dir(&dir)?;
            }
            Err(e) => return Err(e),
        }
        match memory_max {
            Some(bytes) => write_file(&dir.join("memory.max"), &bytes.to_string())?,
            None if self.has("memory") => write_file(&dir.join("memory.max"), "max")?,
            None => {}
        }
        Ok(dir)
    }
}

/// How this daemon contains its bots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Containment {
    /// Each bot in its own cgroup of this subtree.
    Cgroup(Subtree),
    /// No delegated subtree: process groups, subreaper and identities (design rule 9).
    ProcessTree {
        /// Why there is no cgroup containment, for the journal.
        reason: String,
    },
}

impl Containment {
    /// `cgroup` or `process-tree`: the Manager's `Containment` property.
    pub fn name(&self) -> &'static str {
        match self {
            Containment::Cgroup(_) => "cgroup",
            Containment::ProcessTree { .. } => "process-tree",
        }
    }

    /// The subtree, when contained.
    pub fn subtree(&self) -> Option<&Subtree> {
        match self {
            Containment::Cgroup(s) => Some(s),
            Containment::ProcessTree { .. } => None,
        }
    }
}

static CONTAINMENT: OnceLock<Containment> = OnceLock::new();

/// This daemon's containment: what [`init`] set up, else process-tree ("not set up").
pub fn containment() -> &'static Containment {
    static NOT_SET_UP: std::sync::LazyLock<Containment> =
        std::sync::LazyLock::new(|| Containment::ProcessTree {
            reason: "cgroup containment was not set up in this process".into(),
        });
    // Never settles the answer itself: a read before `init` must not stop `init` from setting
    // containment up.
    CONTAINMENT.get().unwrap_or(&NOT_SET_UP)
}

/// The bots' subtree, when this daemon contains them in cgroups.
pub fn subtree() -> Option<&'static Subtree> {
    containment().subtree()
}

/// Design rule 10 (contain where the system allows it): which containment this daemon has.
///
/// Sets the daemon's containment up once (see the module doc), before any bot runs, and says
/// which one in the journal with the reason for a fallback. Later calls return the first result.
pub fn init() -> &'static Containment {
    CONTAINMENT.get_or_init(|| {
        let c = match set_up() {
            Ok(s) => Containment::Cgroup(s),
            Err(reason) => Containment::ProcessTree { reason },
        };
        match &c {
            Containment::Cgroup(s) => tracing::info!(
                containment = c.name(),
                cgroup = %s.root.display(),
                controllers = %s.controllers.join(" "),
                "each bot runs in its own cgroup under {}/{BOTS_DIR}",
                s.root.display()
            ),
            Containment::ProcessTree { reason } => tracing::info!(
                containment = c.name(),
                "no cgroup containment ({reason}); bots are contained by process group, \
                 subreaper and identity"
            ),
        }
        c
    })
}

/// Finds the daemon's cgroup, checks that it may write it, moves the daemon into
/// [`DAEMON_LEAF`], enables [`WANTED_CONTROLLERS`] that it has for [`BOTS_DIR`], and creates it.
fn set_up() -> Result<Subtree, String> {
    if !cfg!(target_os = "linux") {
        return Err("cgroups exist only on Linux".into());
    }
    let read = |p: &str| std::fs::read_to_string(p).map_err(|e| format!("cannot read {p}: {e}"));
    let mut root = locate(&read("/proc/self/cgroup")?, &read("/proc/self/mountinfo")?)?;
    // A daemon restarted inside its own leaf (not by its service manager) uses the same subtree.
    if root.file_name().is_some_and(|n| n == DAEMON_LEAF) {
        root.pop();
    }
    if !delegated(&root) {
        return Err(format!(
            "the cgroup {} is not delegated to botvisord (it has no `user.delegate` or \
             `trusted.delegate` mark); with systemd, `Delegate=yes` in the unit delegates it",
            root.display()
        ));
    }
    let cant = |what: &str, e: std::io::Error| {
        format!(
            "the cgroup {} is not writable by botvisord ({what}: {e}); with systemd, \
             `Delegate=yes` in the unit gives it one",
            root.display()
        )
    };
    let leaf = root.join(DAEMON_LEAF);
    match std::fs::create_dir(&leaf) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(cant("creating daemon/", e)),
    }
    if let Err(e) = write_file(&leaf.join("cgroup.procs"), "0") {
        let _ = std::fs::remove_dir(&leaf);
        return Err(cant("moving botvisord into daemon/", e));
    }
    let bots = root.join(BOTS_DIR);
    match std::fs::create_dir(&bots) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(cant("creating bots/", e)),
    }
    let given = std::fs::read_to_string(root.join("cgroup.controllers")).unwrap_or_default();
    let mut controllers = Vec::new();
    for c in WANTED_CONTROLLERS {
        if !given.split_whitespace().any(|g| g == *c) {
            continue;
        }
        let line = format!("+{c}");
        let enabled = write_file(&root.join("cgroup.subtree_control"), &line)
            .and_then(|()| write_file(&bots.join("cgroup.subtree_control"), &line));
        match enabled {
            Ok(()) => controllers.push((*c).to_owned()),
            Err(e) => {
                tracing::warn!(controller = c, error = %e, "cannot enable a cgroup controller")
            }
        }
    }
    Ok(Subtree { root, controllers })
}

/// Whether a cgroup carries the mark a service manager sets on a subtree it delegates: the
/// extended attribute `user.delegate` (a systemd user manager) or `trusted.delegate` (the
/// system manager) with the value `1`. A cgroup that is merely writable is not delegated: under
/// systemd every cgroup of the user's manager is, and must be left to it.
#[cfg(target_os = "linux")]
pub fn delegated(dir: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(path) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    ["user.delegate", "trusted.delegate"].iter().any(|name| {
        let name = std::ffi::CString::new(*name).expect("no NUL");
        let mut value = [0u8; 8];
        // SAFETY: getxattr(2) writes at most `value.len()` bytes into `value`; both strings are
        // NUL-terminated.
        let n = unsafe {
            libc::getxattr(
                path.as_ptr(),
                name.as_ptr(),
                value.as_mut_ptr().cast(),
                value.len(),
            )
        };
        n > 0 && value[..n as usize].starts_with(b"1")
    })
}

/// Whether a cgroup is delegated (no cgroups on this system: never).
#[cfg(not(target_os = "linux"))]
pub fn delegated(_dir: &Path) -> bool {
    false
}

/// Writes `text` to a cgroup file in one `write(2)`, as the kernel wants.
pub fn write_file(path: &Path, text: &str) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new().write(true).open(path)?;
    f.write_all(text.as_bytes())
}

/// Makes the child of `command` join the cgroup folder `dir` between fork and `exec`: its
/// `cgroup.procs` is opened now (close-on-exec) and the child writes `0` (itself) to it. A child
/// that cannot join fails to spawn with the kernel's error.
pub fn join_before_exec(command: &mut std::process::Command, dir: &Path) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;
    let procs = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.join("cgroup.procs"))?;
    // SAFETY: between fork and exec the closure only calls write(2), which is
    // async-signal-safe, on a descriptor the parent keeps open (moved into the closure).
    unsafe {
        command.pre_exec(move || {
            let rc = libc::write(procs.as_raw_fd(), b"0".as_ptr().cast(), 1);
            if rc == 1 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
    Ok(())
}

/// The pids in a cgroup (`cgroup.procs`); empty when it is gone.
pub fn procs(dir: &Path) -> Vec<u32> {
    std::fs::read_to_string(dir.join("cgroup.procs"))
        .map(|t| {
            t.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Whether a cgroup or any cgroup below it holds a process (`populated` of `cgroup.events`).
/// A cgroup that does not exist is empty.
pub fn populated(dir: &Path) -> std::io::Result<bool> {
    let text = match std::fs::read_to_string(dir.join("cgroup.events")) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    text.lines()
        .find_map(|l| l.strip_prefix("populated "))
        .map(|v| v.trim() != "0")
        .ok_or_else(|| std::io::Error::other(format!("no `populated` in {}", dir.display())))
}

/// Design rule 10 (contain where the system allows it): a bot's cgroup is killed whole.
///
/// Kills every process in a cgroup and below at once (`cgroup.kill`, Linux 5.14). On an older
/// kernel, SIGKILLs the pids `cgroup.procs` lists (the cgroup's own processes cannot leave it).
pub fn kill(dir: &Path) -> std::io::Result<()> {
    match write_file(&dir.join("cgroup.kill"), "1") {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && dir.exists() => {
            for pid in procs(dir) {
                // SAFETY: kill(2); a pid in this cgroup is one of the bot's (or already gone).
                unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Waits until a cgroup is empty (`populated 0`), up to `timeout`: polls `cgroup.events` with a
/// growing pause (1 ms to 50 ms). `Ok(true)` once empty, `Ok(false)` at the timeout.
pub async fn wait_empty(dir: &Path, timeout: Duration) -> std::io::Result<bool> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut pause = Duration::from_millis(1);
    loop {
        if !populated(dir)? {
            return Ok(true);
        }
        if tokio::time::Instant::now() >= deadline {
            return Ok(false);
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

/// Removes an empty cgroup (`rmdir`); a cgroup already gone is fine.
pub fn remove(dir: &Path) -> std::io::Result<()> {
    match std::fs::remove_dir(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        r => r,
    }
}

/// What [`empty_out`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Emptied {
    /// The pids that were in the cgroup when it was killed.
    pub killed: Vec<u32>,
    /// Pids still in it after the wait (survivors of SIGKILL).
    pub left: Vec<u32>,
}

/// `cgroup.kill`, then waits for `populated 0` up to `timeout`, then removes the cgroup when
/// empty. Errors: the cgroup could not be killed or read.
pub async fn empty_out(dir: &Path, timeout: Duration) -> std::io::Result<Emptied> {
    let emptied = kill_and_wait(dir, timeout).await?;
    if emptied.left.is_empty()
        && let Err(e) = remove(dir)
    {
        tracing::debug!(cgroup = %dir.display(), error = %e, "cannot remove an empty cgroup");
    }
    Ok(emptied)
}

/// `cgroup.kill`, then waits for `populated 0` up to `timeout`; the cgroup stays. For a cgroup
/// the user manager owns (a bot's scope, issue 47): it removes the folder itself once it reads
/// the scope empty, and a folder removed under it first leaves the scope `running` for good
/// (systemd 252 learns of the emptiness from `cgroup.events`, whose change is lost with the
/// folder: seen for 10 to 23 of 200 scopes).
pub async fn kill_and_wait(dir: &Path, timeout: Duration) -> std::io::Result<Emptied> {
    let killed = procs(dir);
    if populated(dir)? {
        kill(dir)?;
    }
    let empty = wait_empty(dir, timeout).await?;
    let left = if empty { Vec::new() } else { procs(dir) };
    Ok(Emptied { killed, left })
}

/// The cgroup step of a bot's stop (after the process-tree sequence): when `bot_id` has a
/// cgroup, kills what is left in it, waits for `populated 0` up to [`KILL_WAIT`] and removes it.
/// Returns the processes still in it (each as alive; empty when proven empty), to add to the
/// stop observation with [`Proof::Cgroup`](super::verdict::Proof::Cgroup); `None` when the bot
/// has no cgroup or it could not be read (then the process-tree proof stands, and the journal
/// says why).
pub async fn after_stop(
    bot_id: &str,
) -> Option<Vec<(super::identity::ProcessIdentity, super::identity::Liveness)>> {
    let dir = subtree()?.bot_dir(bot_id);
    if !dir.exists() {
        return None;
    }
    proven_empty(bot_id, &dir, empty_out(&dir, KILL_WAIT).await)
}

/// [`after_stop`] for the cgroup folder `dir` of bot `bot_id`'s agent's scope (issue 47): the
/// same proof, but the folder is left to the user manager, which collects the scope once it
/// reads it empty ([`kill_and_wait`]).
pub async fn after_stop_in(
    bot_id: &str,
    dir: &Path,
) -> Option<Vec<(super::identity::ProcessIdentity, super::identity::Liveness)>> {
    if !dir.exists() {
        return None;
    }
    proven_empty(bot_id, dir, kill_and_wait(dir, KILL_WAIT).await)
}

fn proven_empty(
    bot_id: &str,
    dir: &Path,
    emptied: std::io::Result<Emptied>,
) -> Option<Vec<(super::identity::ProcessIdentity, super::identity::Liveness)>> {
    match emptied {
        Ok(e) => {
            if !e.killed.is_empty() {
                tracing::info!(bot_id, pids = ?e.killed, "killed what was left in the bot's cgroup");
            }
            Some(
                e.left
                    .iter()
                    .filter_map(|p| super::identity::identify(*p).ok())
                    .map(|id| (id, super::identity::Liveness::Alive))
                    .collect(),
            )
        }
        Err(e) => {
            tracing::warn!(bot_id, cgroup = %dir.display(), error = %e, "cannot empty the bot's cgroup; the process-tree proof stands");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime shared:9 - cgroup2 cgroup2 rw
";

    #[test]
    fn finds_the_daemons_cgroup_folder() {
        let cg = "9:name=systemd:/\n4:memory:/x\n0::/app.slice/botvisord.service\n";
        assert_eq!(own_cgroup(cg), Some("/app.slice/botvisord.service"));
        assert_eq!(
            locate(cg, MOUNTINFO).unwrap(),
            PathBuf::from("/sys/fs/cgroup/unified/app.slice/botvisord.service")
        );
        let root = locate("0::/\n", MOUNTINFO).unwrap_err();
        assert!(root.contains("root cgroup"), "{root}");
        assert!(
            locate("4:memory:/x\n", MOUNTINFO)
                .unwrap_err()
                .contains("no cgroup v2")
        );
        let ro = MOUNTINFO.replace("unified rw,relatime", "unified ro,relatime");
        assert!(locate(cg, &ro).unwrap_err().contains("read-only"));
        let none = MOUNTINFO.replace("cgroup2 cgroup2", "cgroup cgroup");
        assert!(locate(cg, &none).unwrap_err().contains("not mounted"));
    }

    #[test]
    fn a_namespaced_mount_root_and_escaped_mount_points() {
        let mi = "50 1 0:38 /user.slice /mnt/my\\040cg rw - cgroup2 cgroup2 rw\n";
        assert_eq!(
            locate("0::/user.slice/a\n", mi).unwrap(),
            PathBuf::from("/mnt/my cg/a")
        );
        assert!(
            locate("0::/other/a\n", mi)
                .unwrap_err()
                .contains("no cgroup2 mount")
        );
    }
}
