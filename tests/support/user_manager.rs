//! A real `systemd --user` manager for one test, with its own journal and user bus, into which
//! `scripts/install.sh` installs botvisor as a user would: the unit, D-Bus activation through
//! systemd, `systemctl --user stop`/`restart`/`kill`, `Restart=on-failure`, all for real.
//!
//! How it runs (measured on Debian 12, systemd 252, hybrid cgroups, tests as root, PID 1 not
//! systemd; `/work/shared/systemd-user-in-tests.md` has the recipe it follows):
//!
//! - `unshare -m --propagation private` makes a mount namespace whose first process is a
//!   `systemd-journald` of the test's own. In that namespace only: a tmpfs on `/run/systemd`
//!   holding `/run/systemd/system` (without it systemd 252's `systemd --user` exits 1: "Trying
//!   to run as user instance, but the system has not been booted with systemd."), a tmpfs on
//!   `/run/log` whose `journal/` is the scratch folder's `journal/` (so the test reads it with
//!   `journalctl -D`, from outside), a tmpfs on `/var/log/journal`, and a `journald.conf.d`
//!   drop-in: volatile, no kernel messages, no rate limit. Without a journald, a unit's output
//!   (`StandardOutput=journal`) goes to `/dev/null`; and the manager writes its log to
//!   `/dev/console`, not to its stderr, even with `--log-target=console` (strace: it opens
//!   `/dev/console`), where a test never sees it; so it logs to this journal
//!   (`--log-target=journal --log-level=info`).
//! - `nsenter -t <journald> -m` then starts `/usr/lib/systemd/systemd --user` in that namespace,
//!   after moving itself into `<base>/user@0.service` in each cgroup hierarchy the manager uses
//!   (`name=systemd` and the cgroup2 one on a hybrid machine). `<base>` is
//!   `botvisor-user-manager-<test pid>-<n>.slice`, unique per manager: systemd 252 does not need
//!   the `user.slice/user-0.slice/user@0.service` of a login, and journald still files each
//!   unit's lines under `_SYSTEMD_USER_UNIT` (it skips `*.slice` components, then wants
//!   `user@UID.service`).
//! - `HOME` is the test's home, `XDG_CONFIG_HOME`, `XDG_DATA_HOME`, `XDG_STATE_HOME` and
//!   `XDG_CACHE_HOME` below it, `XDG_RUNTIME_DIR` the scratch folder's `rt/` (0700). The
//!   manager passes its environment to its units (with its own `PATH`), and that environment
//!   has `RUST_LOG=botvisor=debug,info`, so that botvisord's journal says as much as a test
//!   daemon's log.
//! - Ready when `$XDG_RUNTIME_DIR/systemd/private` exists and `systemctl --user
//!   is-system-running --wait` answers; then `dbus.socket` (dbus-user-session) is started and
//!   the user bus is `unix:path=$XDG_RUNTIME_DIR/bus`. Measured: journald is ready after
//!   40–60 ms, the manager's socket after 0.15–0.3 s, and it is running after 0.2–0.35 s; it
//!   stops in about 50 ms when none of its units takes longer.
//!
//! What was found out here:
//!
//! - **Several managers run at once**, in one test binary or several, because each has its own
//!   cgroup base, runtime folder and namespace. Two managers in the *same* cgroup (both in
//!   `user.slice/user-0.slice/user@0.service`, as the recipe has it) do not: their units share
//!   cgroups, and one manager's `systemctl --user stop x` killed the other's `x` too. So there
//!   is no lock here.
//! - `systemctl --user` also works outside the namespace (it only needs `XDG_RUNTIME_DIR`):
//!   `start`, `stop`, `restart`, `kill`, `show`, `show-environment`, `daemon-reload`, `enable
//!   --now` (the enabling done on the files, client-side, because outside the namespace the
//!   machine does not look booted with systemd), but `is-system-running` says `offline` there.
//!   [`UserManager::systemctl`] runs it inside, as a user's shell would, and so does
//!   [`UserManager::install`]; bus clients of the test process reach the user bus from outside
//!   (its socket is in the scratch folder).
//! - systemd 252's user manager (on these hybrid machines) marks no cgroup delegated: a unit
//!   with `Delegate=yes` (shown as `Delegate=yes`, `DelegateControllers=cpu cpuset io memory
//!   pids`) has neither `trusted.delegate` nor `user.delegate` on either hierarchy, so
//!   botvisord's `Containment` is `process-tree` under this manager, and its agents run in the
//!   unit's own cgroup.
//!
//! The binaries to install are the ones Cargo built for the running tests: [`bin_dir`]
//! (`target/debug`, beside [`crate::program`]'s).
//!
//! Each wait is bounded and panics with the manager's journal. Drop stops the manager (SIGTERM:
//! it stops every unit, botvisord's stop included; SIGKILL after [`MANAGER_STOP_TIMEOUT`]),
//! then journald, kills what is left in the base cgroup, and removes the cgroup folders. A base
//! left by a test binary that was killed (its pid gone) is cleaned up by the next start.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crate::{EVENT_TIMEOUT, TestEnv};

/// The manager binary.
pub const SYSTEMD: &str = "/usr/lib/systemd/systemd";
/// The journal daemon.
pub const JOURNALD: &str = "/usr/lib/systemd/systemd-journald";
/// The user bus's socket unit (Debian: dbus-user-session).
pub const DBUS_SOCKET_UNIT: &str = "/usr/lib/systemd/user/dbus.socket";
/// How long the manager may take to exit after SIGTERM: it stops every unit first, and
/// botvisord's stop may take its `TimeoutStopSec=30`.
pub const MANAGER_STOP_TIMEOUT: Duration = Duration::from_secs(60);
/// How long journald, and then the last processes of the base cgroup, may take to go.
const CLEANUP_TIMEOUT: Duration = Duration::from_secs(10);
/// How long journald and the manager may take to be ready.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// The prefix of every base cgroup (`botvisor-user-manager-<pid>-<n>.slice`).
const BASE_PREFIX: &str = "botvisor-user-manager-";

/// The folder of the binaries Cargo built for the running tests (`target/debug`): what
/// [`UserManager::install`] is given.
pub fn bin_dir() -> PathBuf {
    crate::program("botvisord")
        .parent()
        .expect("botvisord's folder")
        .to_owned()
}

/// Whether a real user manager can run here. If not, prints `skipped: <why>` to the real stdout
/// (so that `cargo test` shows it beside the test) and returns false; with
/// `BOTVISOR_TEST_REQUIRE_SYSTEMD` set (CI sets it) it panics with the reason instead.
pub fn usable() -> bool {
    let Some(why) = why_not() else { return true };
    if std::env::var_os("BOTVISOR_TEST_REQUIRE_SYSTEMD").is_some_and(|v| !v.is_empty()) {
        panic!(
            "{why}, but BOTVISOR_TEST_REQUIRE_SYSTEMD is set: the user-manager tests must run here"
        );
    }
    let _ = writeln!(std::io::stdout(), "skipped: {why}");
    false
}

/// Why a real user manager cannot run here, or `None`.
fn why_not() -> Option<String> {
    if !cfg!(target_os = "linux") {
        return Some("a real systemd --user needs Linux".into());
    }
    // SAFETY: geteuid(2) has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some(
            "not root: a real systemd --user in a test needs a mount namespace and a cgroup of \
             its own"
                .into(),
        );
    }
    for (path, package) in [
        (SYSTEMD, "systemd"),
        (JOURNALD, "systemd"),
        (DBUS_SOCKET_UNIT, "dbus-user-session"),
    ] {
        if !Path::new(path).exists() {
            return Some(format!("no {path} (Debian: apt-get install {package})"));
        }
    }
    for (program, package) in [
        ("unshare", "util-linux"),
        ("nsenter", "util-linux"),
        ("systemctl", "systemd"),
        ("journalctl", "systemd"),
        ("dbus-daemon", "dbus-daemon"),
    ] {
        if botvisor::config::notify::find_program(program).is_none() {
            return Some(format!(
                "no {program} on PATH (Debian: apt-get install {package})"
            ));
        }
    }
    if Hierarchies::find().is_none() {
        return Some("no writable cgroup2 hierarchy in /proc/self/mountinfo".into());
    }
    match Command::new("unshare")
        .args(["-m", "--propagation", "private", "true"])
        .stdin(Stdio::null())
        .output()
    {
        Ok(o) if o.status.success() => None,
        Ok(o) => Some(format!(
            "cannot make a mount namespace (unshare -m): {}",
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Err(e) => Some(format!("cannot run unshare: {e}")),
    }
}

/// The cgroup hierarchies a manager is placed in: the cgroup2 one, and on a hybrid machine the
/// `name=systemd` v1 one, where systemd 252 tracks units too.
#[derive(Clone, Debug)]
struct Hierarchies {
    /// The cgroup2 mount point (`/sys/fs/cgroup/unified` on a hybrid machine).
    unified: PathBuf,
    /// The `name=systemd` mount point (`/sys/fs/cgroup/systemd`), if any.
    named: Option<PathBuf>,
}

impl Hierarchies {
    fn find() -> Option<Hierarchies> {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
        let unified = botvisor::process::cgroup::cgroup2_mounts(&mountinfo)
            .into_iter()
            .find(|m| m.root == "/" && !m.read_only)?
            .mount_point;
        // proc(5): "… mount-point options … - fstype source super-options".
        let named = mountinfo.lines().find_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let mut right = right.split(' ');
            let fstype = right.next()?;
            let options = right.nth(1)?;
            let named = fstype == "cgroup" && options.split(',').any(|o| o == "name=systemd");
            named.then(|| left.split(' ').nth(4).map(PathBuf::from))?
        });
        Some(Hierarchies { unified, named })
    }

    /// Each mount point, the cgroup2 one first.
    fn all(&self) -> Vec<&Path> {
        std::iter::once(self.unified.as_path())
            .chain(self.named.as_deref())
            .collect()
    }
}

/// A running `systemd --user` with its journal and its user bus. Dropped before the
/// [`TestEnv`] it runs in (declare it after), so that the environment's leftover check comes
/// after the manager stopped everything.
pub struct UserManager {
    manager: Option<Child>,
    journald: Option<Child>,
    hierarchies: Hierarchies,
    /// The base cgroup's name, `botvisor-user-manager-<pid>-<n>.slice`.
    base: String,
    /// The scratch folder: `rt/` (`XDG_RUNTIME_DIR`), `journal/`, `manager.out`, `journald.out`.
    pub dir: PathBuf,
    /// `HOME` of the manager, its units and [`UserManager::install`].
    pub home: PathBuf,
    /// `XDG_RUNTIME_DIR`.
    pub runtime_dir: PathBuf,
}

impl UserManager {
    /// Starts a manager for `env`: its scratch folder is `user-manager/` of the test's folder,
    /// `HOME` the test's home. Panics (with the logs) if it is not ready within 30 s; call
    /// [`usable`] first.
    pub fn start(env: &TestEnv) -> UserManager {
        UserManager::start_in(&env.dir.path().join("user-manager"), &env.home)
    }

    /// Starts a manager whose scratch folder is `dir` (created) and whose `HOME` is `home`.
    pub fn start_in(dir: &Path, home: &Path) -> UserManager {
        static STARTED: AtomicU32 = AtomicU32::new(0);
        let hierarchies = Hierarchies::find().expect("a writable cgroup2 hierarchy (usable())");
        sweep_stale(&hierarchies);
        let base = format!(
            "{BASE_PREFIX}{}-{}.slice",
            std::process::id(),
            STARTED.fetch_add(1, Ordering::Relaxed)
        );
        let runtime_dir = dir.join("rt");
        for d in [dir, home, &runtime_dir, &dir.join("journal")] {
            std::fs::create_dir_all(d).unwrap_or_else(|e| panic!("{}: {e}", d.display()));
        }
        std::fs::set_permissions(&runtime_dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        let mut um = UserManager {
            manager: None,
            journald: None,
            hierarchies,
            base,
            dir: dir.to_owned(),
            home: home.to_owned(),
            runtime_dir,
        };
        for h in um.hierarchies.all() {
            for leaf in ["journald", "user@0.service"] {
                let d = h.join(&um.base).join(leaf);
                std::fs::create_dir_all(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display()));
            }
        }
        let started = Instant::now();
        um.start_journald();
        let journald_ready = started.elapsed();
        um.start_manager();
        let manager_ready = started.elapsed();
        let (code, out, err) = um.systemctl(&["is-system-running", "--wait"]);
        if out.trim() != "running" {
            let (_, failed, _) = um.systemctl(&["--failed", "--no-pager"]);
            eprintln!(
                "the user manager is {} ({code}, {}); failed units:\n{failed}",
                out.trim(),
                err.trim()
            );
        }
        um.systemctl_ok(&["start", "dbus.socket"]);
        assert!(
            um.runtime_dir.join("bus").exists(),
            "dbus.socket is active but there is no {}/bus\n{}",
            um.runtime_dir.display(),
            um.log_text()
        );
        eprintln!(
            "user manager {} (pid {}): journald ready after {journald_ready:?}, the manager's \
             socket after {manager_ready:?}, running after {:?}",
            um.base,
            um.pid(),
            started.elapsed()
        );
        um
    }

    /// journald as the namespace's first process; waits for its stdout socket.
    fn start_journald(&mut self) {
        const SCRIPT: &str = r#"set -eu
dir=$1; shift
mount -t tmpfs -o mode=0755 tmpfs /run/systemd
mkdir -p /run/systemd/system /run/systemd/journald.conf.d
printf '%s\n' '[Journal]' Storage=volatile ReadKMsg=no ForwardToSyslog=no ForwardToKMsg=no \
  ForwardToConsole=no ForwardToWall=no RateLimitBurst=0 > /run/systemd/journald.conf.d/test.conf
mount -t tmpfs -o mode=0755 tmpfs /run/log
mkdir /run/log/journal
mount --bind "$dir/journal" /run/log/journal
if [ -d /var/log/journal ]; then mount -t tmpfs tmpfs /var/log/journal; fi
for procs in "$@"; do echo $$ > "$procs"; done
exec "$JOURNALD"
"#;
        let out = std::fs::File::create(self.dir.join("journald.out")).unwrap();
        let child = Command::new("unshare")
            .args(["-m", "--propagation", "private", "sh", "-c", SCRIPT, "sh"])
            .arg(&self.dir)
            .args(self.procs_files("journald"))
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .env("JOURNALD", JOURNALD)
            .current_dir("/")
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("spawn unshare");
        let socket = PathBuf::from(format!(
            "/proc/{}/root/run/systemd/journal/stdout",
            child.id()
        ));
        self.journald = Some(child);
        self.poll_ready("journald's stdout socket", || socket.exists());
    }

    /// The manager, entered into journald's namespace; waits for its private socket.
    fn start_manager(&mut self) {
        const SCRIPT: &str = r#"set -eu
for procs in "$@"; do echo $$ > "$procs"; done
exec "$SYSTEMD" --user --log-target=journal --log-level=info
"#;
        let journald = self.journald.as_ref().unwrap().id();
        let out = std::fs::File::create(self.dir.join("manager.out")).unwrap();
        let mut cmd = Command::new("nsenter");
        cmd.args([
            "-t",
            &journald.to_string(),
            "-m",
            "--",
            "sh",
            "-c",
            SCRIPT,
            "sh",
        ])
        .args(self.procs_files("user@0.service"))
        .env_clear()
        .envs(self.manager_env())
        .env("SYSTEMD", SYSTEMD)
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out);
        self.manager = Some(cmd.spawn().expect("spawn nsenter"));
        let private = self.runtime_dir.join("systemd/private");
        self.poll_ready("the manager's private socket", || private.exists());
    }

    /// Polls `ready` every 10 ms; panics with the logs if journald or the manager exits first
    /// or after [`START_TIMEOUT`].
    fn poll_ready(&mut self, what: &str, ready: impl Fn() -> bool) {
        let deadline = Instant::now() + START_TIMEOUT;
        while !ready() {
            let mut exited = None;
            for (name, child) in [
                ("journald", &mut self.journald),
                ("manager", &mut self.manager),
            ] {
                if let Some(status) = child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                    child.take();
                    exited = Some(format!("the test's {name} exited ({status})"));
                }
            }
            if let Some(exited) = exited {
                panic!("{exited} before {what} was there\n{}", self.log_text());
            }
            if Instant::now() > deadline {
                panic!(
                    "{what} was not there within {START_TIMEOUT:?}\n{}",
                    self.log_text()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// `cgroup.procs` of `leaf` below the base, in each hierarchy.
    fn procs_files(&self, leaf: &str) -> Vec<PathBuf> {
        self.hierarchies
            .all()
            .into_iter()
            .map(|h| h.join(&self.base).join(leaf).join("cgroup.procs"))
            .collect()
    }

    /// The manager's environment (which it passes on to its units).
    fn manager_env(&self) -> Vec<(String, String)> {
        let mut env = self.xdg_env();
        env.push((
            "PATH".into(),
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into(),
        ));
        env.push(("LANG".into(), "C.UTF-8".into()));
        env.push(("RUST_LOG".into(), "botvisor=debug,info".into()));
        env
    }

    fn xdg_env(&self) -> Vec<(String, String)> {
        let s = |p: PathBuf| p.to_string_lossy().into_owned();
        vec![
            ("HOME".into(), s(self.home.clone())),
            ("XDG_CONFIG_HOME".into(), s(self.home.join(".config"))),
            ("XDG_DATA_HOME".into(), s(self.home.join(".local/share"))),
            ("XDG_STATE_HOME".into(), s(self.home.join(".local/state"))),
            ("XDG_CACHE_HOME".into(), s(self.home.join(".cache"))),
            ("XDG_RUNTIME_DIR".into(), s(self.runtime_dir.clone())),
        ]
    }

    /// The environment of a program of this user's session: `HOME`, the `XDG_*` folders,
    /// `XDG_RUNTIME_DIR`, `DBUS_SESSION_BUS_ADDRESS`, and the test's `PATH`.
    pub fn client_env(&self) -> Vec<(String, String)> {
        let mut env = self.xdg_env();
        env.push(("DBUS_SESSION_BUS_ADDRESS".into(), self.bus_address()));
        env.push((
            "PATH".into(),
            std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into()),
        ));
        env.push(("LANG".into(), "C.UTF-8".into()));
        env
    }

    /// The manager's pid (`systemd --user`).
    pub fn pid(&self) -> u32 {
        self.manager.as_ref().expect("the manager runs").id()
    }

    /// The user bus's address, `unix:path=$XDG_RUNTIME_DIR/bus`: reachable from the test
    /// process too.
    pub fn bus_address(&self) -> String {
        format!("unix:path={}", self.runtime_dir.join("bus").display())
    }

    /// A new client connection to the user bus, whose method calls time out after 60 s.
    pub async fn connect(&self) -> zbus::Connection {
        zbus::connection::Builder::address(self.bus_address().as_str())
            .method_timeout(Duration::from_secs(60))
            .build()
            .await
            .unwrap_or_else(|e| panic!("connect to the user bus: {e}\n{}", self.log_text()))
    }

    /// `program args…` inside the manager's mount namespace, with [`UserManager::client_env`]
    /// and `extra_env`, as a program of the user's session: `(exit code, stdout, stderr)`; the
    /// code is -1 when a signal ended it. Panics if it takes longer than [`EVENT_TIMEOUT`].
    pub fn run(
        &self,
        program: &str,
        args: &[&str],
        extra_env: &[(&str, &str)],
    ) -> (i32, String, String) {
        let mut cmd = Command::new("nsenter");
        cmd.args(["-t", &self.pid().to_string(), "-m", "--", program])
            .args(args)
            .env_clear()
            .envs(self.client_env())
            .envs(extra_env.iter().copied())
            .current_dir(&self.home);
        let what = format!("{program} {}", args.join(" "));
        match run_bounded(cmd, EVENT_TIMEOUT) {
            Ok(o) => (
                o.status.code().unwrap_or(-1),
                String::from_utf8_lossy(&o.stdout).into_owned(),
                String::from_utf8_lossy(&o.stderr).into_owned(),
            ),
            Err(e) => panic!("{what}: {e}\n{}", self.log_text()),
        }
    }

    /// `systemctl --user args…` inside the manager's namespace: `(exit code, stdout, stderr)`.
    /// It blocks the calling thread until systemctl returns (a `restart` waits for the stop
    /// and the start), at most [`EVENT_TIMEOUT`].
    pub fn systemctl(&self, args: &[&str]) -> (i32, String, String) {
        let mut all = vec!["--user"];
        all.extend_from_slice(args);
        self.run("systemctl", &all, &[])
    }

    /// [`UserManager::systemctl`] that must succeed: its stdout, or a panic with what it said
    /// and the journal.
    pub fn systemctl_ok(&self, args: &[&str]) -> String {
        let (code, out, err) = self.systemctl(args);
        if code != 0 {
            panic!(
                "systemctl --user {} exited {code}:\n{out}{err}\n{}",
                args.join(" "),
                self.log_text()
            );
        }
        out
    }

    /// One property of `unit` as `systemctl --user show -p PROP --value` prints it (trimmed):
    /// `unit_property("botvisord.service", "ActiveState")` is `"active"`.
    pub fn unit_property(&self, unit: &str, prop: &str) -> String {
        self.systemctl_ok(&["show", "-p", prop, "--value", unit])
            .trim()
            .to_owned()
    }

    /// The unit's main pid (`MainPID`), 0 when it has none.
    pub fn main_pid(&self, unit: &str) -> u32 {
        let pid = self.unit_property(unit, "MainPID");
        pid.parse()
            .unwrap_or_else(|_| panic!("MainPID of {unit} is {pid:?}"))
    }

    /// Polls `systemctl --user show` every 50 ms until `props` of `unit` (`["ActiveState",
    /// "MainPID"]`) satisfy `done` (their values in the same order); returns them. Panics with
    /// the last values and the journal after [`EVENT_TIMEOUT`].
    pub fn wait_unit(
        &self,
        unit: &str,
        props: &[&str],
        what: &str,
        done: impl Fn(&[String]) -> bool,
    ) -> Vec<String> {
        let deadline = Instant::now() + EVENT_TIMEOUT;
        loop {
            let values: Vec<String> = props.iter().map(|p| self.unit_property(unit, p)).collect();
            if done(&values) {
                return values;
            }
            if Instant::now() > deadline {
                panic!(
                    "{what}: {unit} did not get there within {EVENT_TIMEOUT:?}; {props:?} are \
                     {values:?}\n{}",
                    self.log_text()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The loaded units whose names match `pattern` (`botvisor-bot-*`), whatever their state, as
    /// `systemctl --user list-units --all` lists them: `name load active sub` each.
    pub fn units(&self, pattern: &str) -> Vec<String> {
        self.systemctl_ok(&[
            "list-units",
            "--all",
            "--plain",
            "--no-legend",
            "--no-pager",
            pattern,
        ])
        .lines()
        .map(|l| l.split_whitespace().take(4).collect::<Vec<_>>().join(" "))
        .filter(|l| !l.is_empty())
        .collect()
    }

    /// For each of `units` (as [`UserManager::units`] lists them: the name first), its state and
    /// its cgroup (`ControlGroup`) in each hierarchy: the folder's processes, or that the folder
    /// is gone. One line per unit, for a failure's message.
    pub fn describe_units(&self, units: &[String]) -> String {
        let mut text = String::new();
        for line in units {
            let unit = line.split_whitespace().next().unwrap_or_default();
            let cgroup = self.unit_property(unit, "ControlGroup");
            let state = self.unit_property(unit, "SubState");
            let folders: Vec<String> = self
                .hierarchies
                .all()
                .into_iter()
                .map(|h| {
                    let dir = h.join(cgroup.trim_start_matches('/'));
                    match std::fs::read_to_string(dir.join("cgroup.procs")) {
                        Ok(procs) => format!(
                            "{}: processes {:?}",
                            h.display(),
                            procs.split_whitespace().collect::<Vec<_>>()
                        ),
                        Err(_) if !dir.exists() => format!("{}: folder gone", h.display()),
                        Err(e) => format!("{}: {e}", h.display()),
                    }
                })
                .collect();
            text.push_str(&format!(
                "{unit} ({state}), ControlGroup {cgroup}: {}\n",
                folders.join("; ")
            ));
        }
        text
    }

    /// Runs `scripts/install.sh --bin-dir bin_dir` (usually [`bin_dir`]) in the manager's
    /// namespace with the session's environment plus `extra_env` (`CLAUDE_BIN` to record, for
    /// instance): it finds the manager (`systemctl --user show-environment`), installs into
    /// `HOME` and reloads it (`daemon-reload`) and the user bus. Returns its stdout; panics with
    /// its output and the journal if it fails.
    pub fn install(&self, bin_dir: &Path, extra_env: &[(&str, &str)]) -> String {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/install.sh");
        let bin_dir = bin_dir.to_str().expect("a UTF-8 bin folder");
        let (code, out, err) = self.run("bash", &[script, "--bin-dir", bin_dir], extra_env);
        if code != 0 {
            panic!(
                "scripts/install.sh exited {code}:\n{out}\n{err}\n{}",
                self.log_text()
            );
        }
        out
    }

    /// `journalctl` of this manager's journal with `args` (`["--user-unit",
    /// "botvisord.service"]`, `["-o", "json"]`), read from the scratch folder; the default
    /// output is `short-monotonic`.
    pub fn journal(&self, args: &[&str]) -> String {
        let mut cmd = Command::new("journalctl");
        cmd.arg("-D")
            .arg(self.dir.join("journal"))
            .args(["--no-pager", "-o", "short-monotonic"])
            .args(args)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("LANG", "C.UTF-8");
        match run_bounded(cmd, CLEANUP_TIMEOUT) {
            Ok(o) => {
                String::from_utf8_lossy(&o.stdout).into_owned()
                    + &String::from_utf8_lossy(&o.stderr)
            }
            Err(e) => format!("(journalctl: {e})"),
        }
    }

    /// The journal, one line per entry: `[monotonic s] identifier[pid]: message` and then the
    /// entry's own fields (botvisord's `F_BOT_ID`, `F_STATE`, `TARGET`, …; not journald's `_…`
    /// ones), which `journalctl`'s short formats leave out.
    pub fn journal_text(&self) -> String {
        const NOISE: [&str; 13] = [
            "MESSAGE",
            "SPAN_CODE_FILE",
            "SPAN_CODE_LINE",
            "SPAN_TARGET",
            "SYSLOG_IDENTIFIER",
            "SYSLOG_FACILITY",
            "PRIORITY",
            "CODE_FILE",
            "CODE_LINE",
            "CODE_FUNC",
            "TID",
            "INVOCATION_ID",
            "USER_INVOCATION_ID",
        ];
        let json = self.journal(&["-o", "json"]);
        let mut text = String::new();
        for line in json.lines() {
            let Ok(serde_json::Value::Object(entry)) = serde_json::from_str(line) else {
                text.push_str(line);
                text.push('\n');
                continue;
            };
            let field = |k: &str| entry.get(k).and_then(|v| v.as_str()).unwrap_or("");
            let monotonic = field("__MONOTONIC_TIMESTAMP").parse::<u64>().unwrap_or(0);
            text.push_str(&format!(
                "[{:.6}] {}[{}]: {}",
                monotonic as f64 / 1e6,
                field("SYSLOG_IDENTIFIER"),
                field("_PID"),
                field("MESSAGE")
            ));
            for (k, v) in &entry {
                if k.starts_with('_') || NOISE.contains(&k.as_str()) {
                    continue;
                }
                match v.as_str() {
                    Some(v) => text.push_str(&format!(" {k}={v}")),
                    None => text.push_str(&format!(" {k}={v}")), // a binary field: its bytes
                }
            }
            text.push('\n');
        }
        text
    }

    /// Everything the manager and its units said: the whole journal
    /// ([`UserManager::journal_text`]), then what the manager and journald printed outside it.
    pub fn log_text(&self) -> String {
        let file = |name: &str| std::fs::read_to_string(self.dir.join(name)).unwrap_or_default();
        format!(
            "--- the user manager's journal (journalctl -D {}) ---\n{}\
             --- the manager's output ---\n{}--- journald's output ---\n{}--- end ---",
            self.dir.join("journal").display(),
            self.journal_text(),
            file("manager.out"),
            file("journald.out"),
        )
    }

    /// Ends the session as a logout does: SIGTERM to the manager, which stops every unit and
    /// exits. Returns whether it exited within [`MANAGER_STOP_TIMEOUT`] (else it was killed).
    /// The journal stays readable.
    pub fn end_session(&mut self) -> bool {
        self.manager
            .take()
            .is_none_or(|child| stop(child, MANAGER_STOP_TIMEOUT))
    }

    /// The pids in the manager's cgroup subtree (`user@0.service` and below).
    pub fn processes(&self) -> Vec<u32> {
        let mut pids = Vec::new();
        let root = self
            .hierarchies
            .unified
            .join(&self.base)
            .join("user@0.service");
        collect_procs(&root, &mut pids);
        pids
    }
}

impl Drop for UserManager {
    fn drop(&mut self) {
        let panicking = std::thread::panicking();
        if panicking {
            eprintln!("{}", self.log_text());
        }
        let mut problems = Vec::new();
        if let Some(child) = self.manager.take()
            && !stop(child, MANAGER_STOP_TIMEOUT)
        {
            problems.push(format!(
                "the user manager did not exit within {MANAGER_STOP_TIMEOUT:?} of SIGTERM \
                 (killed)"
            ));
        }
        let left: Vec<String> = self
            .processes()
            .into_iter()
            .map(|pid| format!("{pid} {}", cmdline(pid)))
            .collect();
        if !left.is_empty() {
            problems.push(format!(
                "processes left in the manager's cgroup after it exited: {left:?}"
            ));
        }
        if let Some(child) = self.journald.take()
            && !stop(child, CLEANUP_TIMEOUT)
        {
            problems.push(format!(
                "journald did not exit within {CLEANUP_TIMEOUT:?} of SIGTERM (killed)"
            ));
        }
        if let Err(e) = remove_base(&self.hierarchies, &self.base) {
            problems.push(e);
        }
        if !problems.is_empty() {
            let text = format!("{}\n{}", problems.join("\n"), self.log_text());
            if panicking {
                eprintln!("{text}");
            } else {
                panic!("{text}");
            }
        }
    }
}

/// Runs `cmd` (stdin empty, output captured) for at most `timeout`; then SIGKILL and an error
/// holding what it printed.
fn run_bounded(mut cmd: Command, timeout: Duration) -> Result<Output, String> {
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run it: {e}"))?;
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(timeout) {
        Ok(out) => out.map_err(|e| e.to_string()),
        Err(_) => {
            // SAFETY: kill(2) on our own child, not yet reaped (the thread waits for it).
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            let printed = rx
                .recv()
                .ok()
                .and_then(Result::ok)
                .map(|o| {
                    String::from_utf8_lossy(&o.stdout).into_owned()
                        + &String::from_utf8_lossy(&o.stderr)
                })
                .unwrap_or_default();
            Err(format!(
                "did not finish within {timeout:?} (killed); it printed:\n{printed}"
            ))
        }
    }
}

/// SIGTERM to `child`, then waits up to `timeout` for it to exit; SIGKILL after that. Returns
/// whether it exited by itself.
fn stop(mut child: Child, timeout: Duration) -> bool {
    let pid = child.id();
    // SAFETY: kill(2) on our own child, not yet reaped.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait());
    });
    if rx.recv_timeout(timeout).is_ok() {
        return true;
    }
    // SAFETY: as above; the thread has not reaped it.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    let _ = rx.recv();
    false
}

fn collect_procs(dir: &Path, pids: &mut Vec<u32>) {
    pids.extend(
        std::fs::read_to_string(dir.join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse::<u32>().ok()),
    );
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            collect_procs(&e.path(), pids);
        }
    }
}

fn cmdline(pid: u32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .unwrap_or_default()
}

/// Kills whatever is left below `base` (`cgroup.kill` of cgroup2), waits for it to be empty,
/// and removes its folders, depth first, in every hierarchy.
fn remove_base(hierarchies: &Hierarchies, base: &str) -> Result<(), String> {
    let top = hierarchies.unified.join(base);
    if top.exists() {
        let _ = std::fs::write(top.join("cgroup.kill"), "1");
        let deadline = Instant::now() + CLEANUP_TIMEOUT;
        loop {
            let events = std::fs::read_to_string(top.join("cgroup.events")).unwrap_or_default();
            if !events.contains("populated 1") {
                break;
            }
            if Instant::now() > deadline {
                let mut pids = Vec::new();
                collect_procs(&top, &mut pids);
                return Err(format!(
                    "{} still holds processes {pids:?} {CLEANUP_TIMEOUT:?} after cgroup.kill",
                    top.display()
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    let mut errors = Vec::new();
    for h in hierarchies.all() {
        remove_tree(&h.join(base), &mut errors);
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(format!("cannot remove the cgroups: {}", errors.join("; ")))
    }
}

fn remove_tree(dir: &Path, errors: &mut Vec<String>) {
    if !dir.exists() {
        return;
    }
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            remove_tree(&e.path(), errors);
        }
    }
    if let Err(e) = std::fs::remove_dir(dir) {
        errors.push(format!("{}: {e}", dir.display()));
    }
}

/// Removes the base cgroups of test processes that are gone (a test binary killed before its
/// managers were dropped), killing what still runs in them.
fn sweep_stale(hierarchies: &Hierarchies) {
    let stale: Vec<String> = std::fs::read_dir(&hierarchies.unified)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|name| {
            name.strip_prefix(BASE_PREFIX)
                .and_then(|rest| rest.split('-').next())
                .and_then(|pid| pid.parse::<u32>().ok())
                .is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists())
        })
        .collect();
    for base in stale {
        if let Err(e) = remove_base(hierarchies, &base) {
            eprintln!("a stale user manager's cgroup: {e}");
        }
    }
}
