//! Test support: a private `dbus-daemon` per test, the `botvisord` binary on it, the stand-in
//! Messages API, and the real Claude Code CLI found through `BOTVISOR_TEST_CLAUDE_BIN`.
//! Nothing here touches the user's session bus or `~/.claude`.

pub mod cgroup;
pub mod codex;
pub mod desktop;
pub mod git;
pub mod moments;
pub mod other_cli;
pub mod repeats;
pub mod responses_api;
pub mod schedules;
pub mod sshd;
pub mod stand_in_api;
pub mod stand_ins;
pub mod terminal;
pub mod user_manager;
pub mod version;

pub use version::{claude_version, fact};

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Duration;

use futures_util::StreamExt;
use zbus::{Connection, Variant};

use botvisor::dbus::BUS_NAME;
use botvisor::dbus::client::{BotProxy, ManagerProxy};

/// One of botvisor's programs (`botvisord`, `botvisorctl`, `botvisor-notify`) as Cargo built it for
/// the running test or benchmark: beside the `deps/` folder that holds the running executable
/// (`target/debug/deps/real-…` → `target/debug/botvisord`). Cargo builds a package's binaries
/// before its integration tests and benchmarks; this library cannot name them with
/// `CARGO_BIN_EXE_*`, which Cargo sets only for those targets.
pub fn program(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the running test's executable");
    let profile = exe
        .parent()
        .and_then(Path::parent)
        .expect("a test executable inside target/<profile>/deps");
    let path = profile.join(name);
    assert!(
        path.exists(),
        "{} is not built: run the tests with cargo test",
        path.display()
    );
    path
}

/// How long any single awaited event may take before the test fails.
pub const EVENT_TIMEOUT: Duration = Duration::from_secs(90);

/// The real Claude Code binary, or `None` after printing the skip line. A test that needs it is
/// marked `#[cfg_attr(botvisor_skip_claude, ignore = …)]` (build.rs sets the cfg when the variable
/// was not set at build time), so that `cargo test` shows it ignored, not passed. With
/// `BOTVISOR_TEST_REQUIRE_CLAUDE` set, a missing `BOTVISOR_TEST_CLAUDE_BIN` fails the test.
pub fn claude_bin() -> Option<PathBuf> {
    match std::env::var_os("BOTVISOR_TEST_CLAUDE_BIN").filter(|v| !v.is_empty()) {
        Some(p) => Some(PathBuf::from(p)),
        None if std::env::var_os("BOTVISOR_TEST_REQUIRE_CLAUDE").is_some_and(|v| !v.is_empty()) => {
            panic!(
                "BOTVISOR_TEST_CLAUDE_BIN is not set but BOTVISOR_TEST_REQUIRE_CLAUDE is: the \
                 real-CLI tests must run here (scripts/install-test-claude.sh)"
            )
        }
        None => {
            eprintln!("skipped: BOTVISOR_TEST_CLAUDE_BIN not set");
            None
        }
    }
}

/// The real Codex binary (the native one, `scripts/install-test-codex.sh`), or `None` after
/// printing the skip line. With `BOTVISOR_TEST_REQUIRE_CODEX` set (CI sets it), a missing
/// `BOTVISOR_TEST_CODEX_BIN` fails the test instead: CI never skips the Codex tests silently.
pub fn codex_bin() -> Option<PathBuf> {
    match std::env::var_os("BOTVISOR_TEST_CODEX_BIN").filter(|v| !v.is_empty()) {
        Some(p) => {
            let p = PathBuf::from(p);
            assert!(
                botvisor::runtime::is_executable(&p),
                "BOTVISOR_TEST_CODEX_BIN={} is not an executable file",
                p.display()
            );
            Some(p)
        }
        None if std::env::var_os("BOTVISOR_TEST_REQUIRE_CODEX").is_some_and(|v| !v.is_empty()) => {
            panic!(
                "BOTVISOR_TEST_CODEX_BIN is not set but BOTVISOR_TEST_REQUIRE_CODEX is: \
                 the Codex tests must run here (scripts/install-test-codex.sh)"
            )
        }
        None => {
            eprintln!("skipped: BOTVISOR_TEST_CODEX_BIN not set (scripts/install-test-codex.sh)");
            None
        }
    }
}

/// The `<limit>`s of the stock session bus configuration (`/usr/share/dbus-1/session.conf` of
/// dbus 1.14), which differ from dbus-daemon's built-in defaults (those allow a message of
/// 32 MiB, the session bus 1,000,000,000 bytes): a private bus behaves like the user's own.
pub const SESSION_LIMITS: [(&str, u64); 15] = [
    ("max_incoming_bytes", 1_000_000_000),
    ("max_incoming_unix_fds", 250_000_000),
    ("max_outgoing_bytes", 1_000_000_000),
    ("max_outgoing_unix_fds", 250_000_000),
    ("max_message_size", 1_000_000_000),
    ("service_start_timeout", 120_000),
    ("auth_timeout", 240_000),
    ("pending_fd_timeout", 150_000),
    ("max_completed_connections", 100_000),
    ("max_incomplete_connections", 10_000),
    ("max_connections_per_user", 100_000),
    ("max_pending_service_starts", 10_000),
    ("max_names_per_connection", 50_000),
    ("max_match_rules_per_connection", 50_000),
    ("max_replies_per_connection", 50_000),
];

/// The policy of a test bus: only the user who runs it (a session bus's default), who may
/// eavesdrop.
const DEFAULT_POLICY: &str = r#"
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>"#;

/// The policy of a bus that admits every user, who may call and receive but not eavesdrop
/// (nor become a monitor: that takes the bus's own user).
const OPEN_POLICY: &str = r#"
    <allow user="*"/>
    <allow send_destination="*"/>
    <allow receive_sender="*"/>
    <allow own="*"/>"#;

/// A private `dbus-daemon` from a temporary configuration.
pub struct PrivateBus {
    child: Child,
    /// The bus address.
    pub address: String,
    /// The folder holding its configuration and socket.
    pub dir: PathBuf,
}

impl PrivateBus {
    /// Starts a bus in `dir`.
    pub fn start(dir: &Path) -> PrivateBus {
        PrivateBus::start_with(dir, None, &[])
    }

    /// Starts a bus in `dir`, with `services` as its D-Bus activation folder and `env` as the
    /// whole environment it (and what it activates) runs with.
    pub fn start_with(dir: &Path, services: Option<&Path>, env: &[(&str, &str)]) -> PrivateBus {
        PrivateBus::start_configured(dir, services, env, DEFAULT_POLICY, &[])
    }

    /// Like [`PrivateBus::start_with`], with `limits` instead of the stock session ones of the
    /// same names.
    pub fn start_limited(
        dir: &Path,
        services: Option<&Path>,
        env: &[(&str, &str)],
        limits: &[(&str, u64)],
    ) -> PrivateBus {
        PrivateBus::start_configured(dir, services, env, DEFAULT_POLICY, limits)
    }

    /// Starts a bus in `dir` that admits every user (a policy with `<allow user="*"/>`, and no
    /// eavesdropping), its socket and `dir` open to all: for tests of what another user sees.
    /// The folders above `dir` must be searchable by that user.
    pub fn start_open_to_all(dir: &Path) -> PrivateBus {
        use std::os::unix::fs::PermissionsExt;
        let bus = PrivateBus::start_configured(dir, None, &[], OPEN_POLICY, &[]);
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o711)).unwrap();
        std::fs::set_permissions(dir.join("bus.sock"), std::fs::Permissions::from_mode(0o666))
            .unwrap();
        bus
    }

    fn start_configured(
        dir: &Path,
        services: Option<&Path>,
        env: &[(&str, &str)],
        policy: &str,
        limits: &[(&str, u64)],
    ) -> PrivateBus {
        std::fs::create_dir_all(dir).unwrap();
        let limits: String = SESSION_LIMITS
            .iter()
            .map(|(name, stock)| {
                let value = limits
                    .iter()
                    .find(|(n, _)| n == name)
                    .map_or(*stock, |(_, v)| *v);
                format!("\n  <limit name=\"{name}\">{value}</limit>")
            })
            .collect();
        let socket = dir.join("bus.sock");
        let config = dir.join("bus.conf");
        std::fs::write(
            &config,
            format!(
                r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:path={}</listen>
  <auth>EXTERNAL</auth>{}
  <policy context="default">{policy}
  </policy>{}
</busconfig>
"#,
                socket.display(),
                services
                    .map(|d| format!("\n  <servicedir>{}</servicedir>", d.display()))
                    .unwrap_or_default(),
                limits
            ),
        )
        .unwrap();
        let mut cmd = std::process::Command::new("dbus-daemon");
        if !env.is_empty() {
            cmd.env_clear().envs(env.iter().copied());
        }
        let mut child = cmd
            .arg(format!("--config-file={}", config.display()))
            .arg("--nofork")
            .arg("--print-address=1")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("dbus-daemon must be installed");
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        assert!(!line.trim().is_empty(), "dbus-daemon printed no address");
        PrivateBus {
            child,
            address: line.trim().to_owned(),
            dir: dir.to_owned(),
        }
    }

    /// Stops the bus, as when the session ends.
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// A new client connection to this bus. Its method calls time out after 60 s (zbus waits
    /// for ever by default): a call that never returns fails its test instead of the run.
    pub async fn connect(&self) -> Connection {
        zbus::connection::Builder::address(self.address.as_str())
            .method_timeout(Duration::from_secs(60))
            .build()
            .await
            .unwrap()
    }

    /// A connection that does not offer to take file descriptors (no `NEGOTIATE_UNIX_FD` in
    /// its handshake), as dbus-next without its native module or a TCP transport connects.
    pub async fn connect_without_fds(&self) -> Connection {
        let stream = tokio::net::UnixStream::connect(self.dir.join("bus.sock"))
            .await
            .unwrap();
        let (read, write) = stream.into_split();
        let split: zbus::connection::socket::BoxedSplit = zbus::connection::socket::Split::new(
            Box::new(NoFdRead(read)),
            Box::new(NoFdWrite(write)),
        );
        zbus::connection::Builder::socket(split)
            .method_timeout(Duration::from_secs(60))
            .build()
            .await
            .unwrap()
    }
}

impl Drop for TestEnv {
    fn drop(&mut self) {
        // Daemons are dropped (and stopped gently) before the environment they run in.
        if !std::thread::panicking() {
            self.assert_no_leftovers();
        }
    }
}

impl Drop for PrivateBus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One `botvisord` process on a private bus.
pub struct Daemon {
    child: Option<Child>,
    /// Its stderr log.
    pub log: PathBuf,
}

/// How a test's daemon is set up.
#[derive(Clone, Debug)]
pub struct DaemonConfig {
    /// Bus address.
    pub bus: String,
    /// The database file.
    pub database: PathBuf,
    /// `HOME` (and the XDG folders below it).
    pub home: PathBuf,
    /// `BOTVISOR_CLAUDE_BIN`, if any.
    pub claude_bin: Option<PathBuf>,
    /// `BOTVISOR_CODEX_BIN`, if any.
    pub codex_bin: Option<PathBuf>,
    /// A config file, if any.
    pub config: Option<PathBuf>,
    /// The umask the daemon starts with (default: the test's own).
    pub umask: Option<u32>,
    /// A cgroup folder the daemon starts in (it joins it before `exec`), as a service manager
    /// starts a unit in its cgroup.
    pub cgroup: Option<PathBuf>,
    /// The daemon gets a mount namespace of its own in which the cgroup2 hierarchy at this
    /// folder is read-only (a read-only bind mount: even root cannot write it).
    pub read_only_cgroup2: Option<PathBuf>,
}

/// The daemon's config file, made to ignore the host's memory pressure unless the test speaks of
/// memory pressure itself: a test daemon stopping an idle bot because the machine running the
/// tests is short of memory adds a `memory_pressure` item no test expects (seen in CI). The line
/// goes first in the file, where it is a top-level key whatever tables follow; a test's config
/// is read once at start, so changing its file is seen by nothing else.
fn host_pressure_off(cfg: &DaemonConfig) -> PathBuf {
    const OFF: &str = "stop_idle_on_memory_pressure = false\n";
    let default = cfg.home.join(".config/botvisor/config.toml");
    let path = match &cfg.config {
        Some(path) => path.clone(),
        None if default.exists() => default,
        None => {
            let path = cfg.home.join("botvisord-test.toml");
            std::fs::write(&path, OFF).unwrap();
            return path;
        }
    };
    // A file that cannot be read is left for the daemon to refuse.
    if let Ok(text) = std::fs::read_to_string(&path)
        && !text.contains("memory_pressure")
    {
        std::fs::write(&path, format!("{OFF}{text}")).unwrap();
    }
    path
}

impl Daemon {
    /// Spawns the daemon without waiting for it.
    pub fn spawn(cfg: &DaemonConfig, log_name: &str) -> Daemon {
        let log = cfg.home.join(log_name);
        let mut cmd = std::process::Command::new(program("botvisord"));
        cmd.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &cfg.home)
            .env("XDG_STATE_HOME", cfg.home.join(".local/state"))
            .env("XDG_CONFIG_HOME", cfg.home.join(".config"))
            .env("XDG_RUNTIME_DIR", cfg.home.join("run"))
            .env("DBUS_SESSION_BUS_ADDRESS", &cfg.bus)
            .env("RUST_LOG", "botvisor=debug,info")
            .arg("--database")
            .arg(&cfg.database)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        if let Some(bin) = &cfg.claude_bin {
            cmd.env("BOTVISOR_CLAUDE_BIN", bin);
        }
        if let Some(bin) = &cfg.codex_bin {
            cmd.env("BOTVISOR_CODEX_BIN", bin);
        }
        cmd.arg("--config").arg(host_pressure_off(cfg));
        if let Some(dir) = &cfg.cgroup {
            botvisor::process::cgroup::join_before_exec(&mut cmd, dir).expect("join the cgroup");
        }
        if let Some(mount) = &cfg.read_only_cgroup2 {
            use std::os::unix::ffi::OsStrExt;
            use std::os::unix::process::CommandExt;
            let target = std::ffi::CString::new(mount.as_os_str().as_bytes()).unwrap();
            // SAFETY: unshare(2) and mount(2) with pointers to NUL-terminated strings that live
            // in the closure; both are plain system calls, fine between fork and exec.
            unsafe {
                cmd.pre_exec(move || {
                    let none: *const libc::c_char = std::ptr::null();
                    let data: *const libc::c_void = std::ptr::null();
                    let root = c"/".as_ptr();
                    if libc::unshare(libc::CLONE_NEWNS) != 0
                        || libc::mount(none, root, none, libc::MS_REC | libc::MS_PRIVATE, data) != 0
                        || libc::mount(
                            none,
                            target.as_ptr(),
                            none,
                            libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY,
                            data,
                        ) != 0
                    {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        if let Some(mask) = cfg.umask {
            use std::os::unix::process::CommandExt;
            // SAFETY: umask(2) is async-signal-safe and touches no memory.
            unsafe {
                cmd.pre_exec(move || {
                    libc::umask(mask as libc::mode_t);
                    Ok(())
                });
            }
        }
        Daemon {
            child: Some(cmd.spawn().expect("spawn botvisord")),
            log,
        }
    }

    /// Spawns the daemon and waits until it owns the bus name.
    pub async fn start(cfg: &DaemonConfig, conn: &Connection) -> Daemon {
        let mut stream = zbus::fdo::DBusProxy::new(conn)
            .await
            .unwrap()
            .receive_name_owner_changed_with_args(&[(0, BUS_NAME)])
            .await
            .unwrap();
        let daemon = Daemon::spawn(cfg, "botvisord.log");
        let dbus = zbus::fdo::DBusProxy::new(conn).await.unwrap();
        // The owner must be this daemon: right after a SIGKILL the bus may still list the
        // killed one's connection for a moment.
        let pid = daemon.pid();
        let owned = || async {
            dbus.get_connection_unix_process_id(BUS_NAME.try_into().unwrap())
                .await
                .ok()
                == Some(pid)
        };
        if owned().await {
            return daemon;
        }
        let got = tokio::time::timeout(Duration::from_secs(30), async {
            while let Some(sig) = stream.next().await {
                let args = sig.args().unwrap();
                if args.new_owner().is_some() && owned().await {
                    return;
                }
            }
        })
        .await;
        if got.is_err() {
            panic!(
                "botvisord did not take the bus name:\n{}",
                daemon.log_text()
            );
        }
        daemon
    }

    /// The daemon's pid.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, |c| c.id())
    }

    /// The daemon's log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Sends SIGTERM and waits for the exit status.
    pub async fn terminate(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("running");
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        tokio::task::spawn_blocking(move || child.wait().unwrap())
            .await
            .unwrap()
    }

    /// Waits for the daemon to exit by itself.
    pub async fn wait(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("running");
        tokio::task::spawn_blocking(move || child.wait().unwrap())
            .await
            .unwrap()
    }

    /// Kills the daemon with SIGKILL (a crash).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // The test failed: its output shows what the daemon said.
            eprintln!(
                "--- botvisord log ({}) ---\n{}",
                self.log.display(),
                self.log_text()
            );
        }
        if let Some(mut child) = self.child.take() {
            // SAFETY: kill(2) on our own child's pid.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            // A daemon that does not exit after SIGTERM is stuck: killed, and the test fails
            // (a daemon stuck on its bus once kept a whole run waiting here).
            let pid = child.id();
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let _ = tx.send(child.wait());
            });
            if rx.recv_timeout(EXIT_AFTER_SIGTERM).is_err() {
                // SAFETY: kill(2) on our own child's pid, not yet reaped.
                unsafe { libc::kill(pid as i32, libc::SIGKILL) };
                let _ = rx.recv();
                if !std::thread::panicking() {
                    panic!(
                        "botvisord did not exit within {EXIT_AFTER_SIGTERM:?} of SIGTERM:\n{}",
                        self.log_text()
                    );
                }
            }
        }
    }
}

/// How long a daemon may take to exit after SIGTERM: it stops every bot gently first (a grace
/// period, then SIGKILL), and sends its last signals.
pub const EXIT_AFTER_SIGTERM: Duration = Duration::from_secs(60);

/// Everything one test needs: a temp folder, a bus, a client connection, a home.
pub struct TestEnv {
    /// The temp folder (removed at the end).
    pub dir: tempfile::TempDir,
    /// The private bus.
    pub bus: PrivateBus,
    /// A client connection on it.
    pub conn: Connection,
    /// The daemon's and the CLI's `HOME`.
    pub home: PathBuf,
    /// A working directory for bots.
    pub work: PathBuf,
    /// A value put in every bot's environment (`BOTVISOR_TEST_RUN`), inherited by every process
    /// the bots start: what is left running with it at the end is a leak.
    pub marker: String,
}

impl TestEnv {
    /// A new environment.
    pub async fn new() -> TestEnv {
        TestEnv::with_bus(false, &[]).await
    }

    /// A new environment whose bus has `limits` instead of the stock session ones.
    pub async fn new_limited(limits: &[(&str, u64)]) -> TestEnv {
        TestEnv::with_bus(false, limits).await
    }

    /// A new environment whose bus admits every user ([`PrivateBus::start_open_to_all`]); the
    /// temporary folder is made searchable (0711, not readable) by all to reach it.
    pub async fn open_to_all() -> TestEnv {
        TestEnv::with_bus(true, &[]).await
    }

    async fn with_bus(open: bool, limits: &[(&str, u64)]) -> TestEnv {
        let dir = tempfile::tempdir().unwrap();
        if open {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
        }

        let home = dir.path().join("home");
        let work = dir.path().join("work");
        std::fs::create_dir_all(&home).unwrap();
        std::fs::create_dir_all(&work).unwrap();
        let bus = if open {
            PrivateBus::start_open_to_all(&dir.path().join("bus"))
        } else {
            PrivateBus::start_limited(&dir.path().join("bus"), None, &[], limits)
        };
        let conn = bus.connect().await;
        TestEnv {
            dir,
            bus,
            conn,
            home,
            work,
            marker: uuid::Uuid::new_v4().to_string(),
        }
    }

    /// Live processes (not zombies) that carry this test's marker: `(pid, command line)`. The
    /// test scans `/proc` itself; the daemon never does.
    pub fn leftovers(&self) -> Vec<(u32, String)> {
        let want = format!("BOTVISOR_TEST_RUN={}", self.marker);
        let mut out = Vec::new();
        for entry in std::fs::read_dir("/proc").unwrap().filter_map(Result::ok) {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let Ok(env) = std::fs::read(entry.path().join("environ")) else {
                continue;
            };
            if !env.split(|b| *b == 0).any(|kv| kv == want.as_bytes()) {
                continue;
            }
            let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
            let state = stat.rsplit(')').next().unwrap_or("").trim().chars().next();
            if matches!(state, Some('Z') | Some('X') | None) {
                continue;
            }
            let cmd = std::fs::read(entry.path().join("cmdline"))
                .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
                .unwrap_or_default();
            out.push((pid, cmd));
        }
        out
    }

    /// Fails the test if any process it started is still running.
    pub fn assert_no_leftovers(&self) {
        let left = self.leftovers();
        assert!(left.is_empty(), "processes left running: {left:?}");
    }

    /// A daemon configuration for this environment.
    pub fn daemon_config(&self, claude_bin: Option<PathBuf>) -> DaemonConfig {
        DaemonConfig {
            bus: self.bus.address.clone(),
            database: self.dir.path().join("botvisor.db"),
            home: self.home.clone(),
            claude_bin,
            codex_bin: None,
            config: None,
            umask: None,
            cgroup: None,
            read_only_cgroup2: None,
        }
    }

    /// A Manager proxy.
    pub async fn manager(&self) -> ManagerProxy<'static> {
        ManagerProxy::new(&self.conn).await.unwrap()
    }

    /// A Bot proxy that reads properties from the daemon on every call (no cache).
    pub async fn bot_uncached(&self, path: &zbus::OwnedObjectPath) -> BotProxy<'static> {
        BotProxy::builder(&self.conn)
            .path(path.clone())
            .cache_properties(zbus::proxy::CacheProperties::No)
            .build()
            .await
            .unwrap()
    }

    /// A Bot proxy.
    pub async fn bot(&self, path: &zbus::OwnedObjectPath) -> BotProxy<'static> {
        BotProxy::builder(&self.conn)
            .path(path.clone())
            .build()
            .await
            .unwrap()
    }
}

/// The environment a bot's real CLI needs to run offline against `api_url`.
pub fn claude_env(home: &Path, api_url: &str, marker: &str) -> HashMap<String, String> {
    // The CLI keeps background-task output under $TMPDIR/claude-<uid>/: inside the test's folder.
    let tmp = home.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    [
        ("TMPDIR", tmp.to_string_lossy().into_owned()),
        ("BOTVISOR_TEST_RUN", marker.to_owned()),
        ("HOME", home.to_string_lossy().into_owned()),
        ("ANTHROPIC_BASE_URL", api_url.to_owned()),
        ("ANTHROPIC_API_KEY", "sk-ant-test-stand-in".to_owned()),
        ("DISABLE_TELEMETRY", "1".to_owned()),
        ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".to_owned()),
        ("DISABLE_AUTOUPDATER", "1".to_owned()),
        ("DISABLE_ERROR_REPORTING", "1".to_owned()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

/// CreateBot options: `cwd` and `env`.
pub fn create_options<'a>(
    cwd: &'a str,
    env: &'a HashMap<String, String>,
) -> HashMap<&'static str, Variant<'a>> {
    let mut o = HashMap::new();
    o.insert("cwd", Variant::from(cwd));
    o.insert("env", Variant::from(env.clone()));
    o
}

/// Creates a bot working in `env.work` whose CLI gets `bot_env`.
pub async fn create_bot_in(env: &TestEnv, bot_env: &HashMap<String, String>) -> BotProxy<'static> {
    let work = env.work.to_str().unwrap().to_owned();
    let path = bounded("CreateBot", async {
        env.manager()
            .await
            .create_bot(create_options(&work, bot_env))
            .await
            .unwrap()
    })
    .await;
    bounded("the bot's proxy", env.bot(&path)).await
}

/// The environment of process `pid`, as `/proc/PID/environ` has it.
pub async fn environ(pid: u32) -> HashMap<String, String> {
    // The agent's own program may still be in its exec (the fake CLI is a script that execs its
    // interpreter): its environment reads empty until the exec is done. Read again until it is
    // there.
    bounded("the agent's environment", async {
        loop {
            let env: HashMap<String, String> = std::fs::read(format!("/proc/{pid}/environ"))
                .unwrap_or_default()
                .split(|b| *b == 0)
                .filter_map(|kv| {
                    let kv = String::from_utf8_lossy(kv);
                    kv.split_once('=')
                        .map(|(k, v)| (k.to_owned(), v.to_owned()))
                })
                .collect();
            if !env.is_empty() {
                return env;
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    })
    .await
}

/// `CreateBot` through `busctl` ([`busctl_call`]) with `options` as busctl takes an `a{sv}`:
/// the count, then each key, type and value.
pub async fn busctl_create_bot(
    address: &str,
    timeout_s: u32,
    options: &[&str],
) -> Result<String, String> {
    let mut args = vec!["org.botvisor.Botvisor1.Manager", "CreateBot", "a{sv}"];
    args.extend(options);
    busctl_call(address, timeout_s, "/org/botvisor/Botvisor1", &args).await
}

/// `busctl call` of botvisord's `path` on the bus at `address` with `args` (interface, method,
/// signature, values), bounded by busctl's own `--timeout` of `timeout_s` seconds: `Ok(stdout)`
/// or `Err(stderr)`.
pub async fn busctl_call(
    address: &str,
    timeout_s: u32,
    path: &str,
    args: &[&str],
) -> Result<String, String> {
    let out = tokio::process::Command::new("busctl")
        .arg(format!("--address={address}"))
        .arg(format!("--timeout={timeout_s}"))
        .args(["call", botvisor::dbus::BUS_NAME, path])
        .args(args)
        .output()
        .await
        .map_err(|e| format!("busctl: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// `call`, or a panic that names it after [`EVENT_TIMEOUT`]: a client call that never returns
/// fails its test instead of holding up the whole run (seen once in many runs: a CreateBot that
/// the daemon never received, on a bus that answered every other call).
pub async fn bounded<T>(what: &str, call: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(EVENT_TIMEOUT, call)
        .await
        .unwrap_or_else(|_| panic!("{what} did not return within {EVENT_TIMEOUT:?}"))
}

/// What one turn showed a client.
#[derive(Debug)]
pub struct TurnSeen {
    /// The turn id `Send` returned.
    pub turn_id: String,
    /// `(seq, kind, payload)` of every `ChatItemAdded` until `TurnFinished`.
    pub items: Vec<(u64, String, serde_json::Value)>,
    /// The outcome.
    pub outcome: String,
}

/// Sends `text` and collects the signals until its `TurnFinished`.
pub async fn send_and_wait(bot: &BotProxy<'_>, text: &str) -> TurnSeen {
    let mut items_stream = bot.receive_chat_item_added().await.unwrap();
    let mut finished = bot.receive_turn_finished().await.unwrap();
    let turn_id = bot.send(text, HashMap::new()).await.unwrap();
    let mut items = Vec::new();
    let outcome = tokio::time::timeout(EVENT_TIMEOUT, async {
        loop {
            tokio::select! {
                Some(sig) = items_stream.next() => {
                    let a = sig.args().unwrap();
                    items.push((a.seq, a.kind.clone(), serde_json::from_str(&a.payload).unwrap()));
                }
                Some(sig) = finished.next() => {
                    let a = sig.args().unwrap();
                    if a.turn_id == turn_id {
                        return a.outcome.clone();
                    }
                }
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("turn {turn_id} did not finish; items so far: {items:?}"));
    // Items committed before TurnFinished may still be in flight on the bus: drain what is queued.
    while let Ok(Some(sig)) =
        tokio::time::timeout(Duration::from_millis(0), items_stream.next()).await
    {
        let a = sig.args().unwrap();
        items.push((
            a.seq,
            a.kind.clone(),
            serde_json::from_str(&a.payload).unwrap(),
        ));
    }
    TurnSeen {
        turn_id,
        items,
        outcome,
    }
}

/// A proxy to watch `bot`'s property changes through: `bot` itself when it caches its
/// properties, so that once a wait on it returns, what the test reads next from `bot`'s cache is
/// as new as the change it waited for (a second proxy's cache could lag behind it); otherwise a
/// new caching proxy of the same bot: zbus gives a proxy built without a cache
/// (`TestEnv::bot_uncached`) property streams that end at once.
pub async fn watching<'a>(bot: &BotProxy<'a>) -> BotProxy<'a> {
    let _ = bot.state().await;
    if bot.inner().cached_property_raw("State").is_some() {
        return bot.clone();
    }
    BotProxy::builder(bot.inner().connection())
        .path(bot.inner().path().to_owned())
        .build()
        .await
        .unwrap()
}

/// Calls `Stop` and waits until the bot's `State` is `stopped`.
pub async fn stop_and_wait(bot: &BotProxy<'_>) {
    let bot = watching(bot).await;
    let mut changes = bot.receive_state_changed().await;
    bot.stop().await.unwrap();
    if bot.state().await.unwrap() == "stopped" {
        return;
    }
    tokio::time::timeout(EVENT_TIMEOUT, async {
        while let Some(c) = changes.next().await {
            if c.get().await.unwrap() == "stopped" {
                return;
            }
        }
        panic!("the State stream ended");
    })
    .await
    .expect("the bot stops");
}

/// Waits until the bot's property `State` reads `want` in `bot`'s own cache when it caches (a
/// change signalled to it), so that what the test reads next from that cache is as new as the
/// change it waited for. botvisord's own answer to `Properties.Get` is asked every 100 ms past
/// any cache: a cache that stays behind it for 5 s is given up on and the wait returns (a
/// caching proxy built while the state changed once kept the older value and waited 90 s for a
/// change that had come: CI, `a_busy_agent_takes_a_new_environment_once_its_turn_is_interrupted`).
pub async fn wait_state(bot: &BotProxy<'_>, want: &str) {
    let fresh = BotProxy::builder(bot.inner().connection())
        .path(bot.inner().path().to_owned())
        .cache_properties(zbus::proxy::CacheProperties::No)
        .build()
        .await
        .unwrap();
    let bot = watching(bot).await;
    let mut changes = bot.receive_state_changed().await;
    if bot.state().await.unwrap() == want {
        return;
    }
    tokio::time::timeout(EVENT_TIMEOUT, async {
        let mut every = tokio::time::interval(Duration::from_millis(100));
        let mut fresh_since: Option<tokio::time::Instant> = None;
        loop {
            tokio::select! {
                c = changes.next() => {
                    let c = c.expect("the State stream ended");
                    if c.get().await.unwrap() == want {
                        return;
                    }
                }
                _ = every.tick() => {
                    if bot.state().await.unwrap() == want {
                        return;
                    }
                    if fresh.state().await.unwrap() == want {
                        let since = *fresh_since.get_or_insert_with(tokio::time::Instant::now);
                        if since.elapsed() >= Duration::from_secs(5) {
                            eprintln!("State reads {want:?} at botvisord; the proxy's cache stayed behind");
                            return;
                        }
                    } else {
                        fresh_since = None;
                    }
                }
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("State never read {want:?}"));
}

/// Waits until the bot's agent runs (`ProcessId` not 0); returns its pid.
pub async fn wait_running(bot: &BotProxy<'_>) -> u32 {
    let mut changes = bot.receive_process_id_changed().await;
    let now = bot.process_id().await.unwrap();
    if now != 0 {
        return now;
    }
    tokio::time::timeout(EVENT_TIMEOUT, async {
        loop {
            let pid = changes.next().await.unwrap().get().await.unwrap();
            if pid != 0 {
                return pid;
            }
        }
    })
    .await
    .expect("the agent starts")
}
/// Waits until the bot's property `PermissionMode` reads `want`.
pub async fn wait_permission_mode(bot: &BotProxy<'_>, want: &str) {
    let bot = watching(bot).await;
    let changes = bot.receive_permission_mode_changed().await;
    let now = bot.permission_mode().await.unwrap();
    wait_property(changes, now, &want.to_owned(), "PermissionMode").await;
}

/// Waits until a property whose `changes` were subscribed before it read `now` reads `want`;
/// panics naming `what` after [`EVENT_TIMEOUT`].
pub async fn wait_property<T>(
    mut changes: zbus::proxy::PropertyStream<'_, T>,
    now: T,
    want: &T,
    what: &str,
) where
    T: PartialEq + std::fmt::Debug + serde::de::DeserializeOwned + zbus::zvariant::Type + Unpin,
{
    if now == *want {
        return;
    }
    tokio::time::timeout(EVENT_TIMEOUT, async {
        while let Some(c) = changes.next().await {
            if c.get().await.unwrap() == *want {
                return;
            }
        }
        panic!("the {what} stream ended");
    })
    .await
    .unwrap_or_else(|_| panic!("{what} never read {want:?}"));
}

/// Lets the real Claude Code CLI of `env` run Bash without asking (a user's own settings would):
/// `permissions.allow` in its `settings.json`.
pub fn allow_bash(env: &TestEnv) {
    let dir = env.home.join(".claude");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("settings.json"),
        r#"{"permissions":{"allow":["Bash"]}}"#,
    )
    .unwrap();
}

/// The scripted fake CLI (`tests/fake_cli/fake_claude.py`).
pub fn fake_cli() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../fake_cli/fake_claude.py"
    ))
}

/// The environment of a bot run by the fake CLI with `plan` (see the script's doc).
pub fn fake_env(
    home: &Path,
    state: &Path,
    plan: serde_json::Value,
    marker: &str,
) -> HashMap<String, String> {
    HashMap::from([
        ("BOTVISOR_TEST_RUN".to_owned(), marker.to_owned()),
        ("HOME".to_owned(), home.to_string_lossy().into_owned()),
        (
            "FAKE_CLAUDE_STATE".to_owned(),
            state.to_string_lossy().into_owned(),
        ),
        ("FAKE_CLAUDE_PLAN".to_owned(), plan.to_string()),
    ])
}

/// Reads a JSON-lines file (missing: empty).
pub fn json_lines(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Writes a daemon configuration file and returns its path.
pub fn write_config(dir: &Path, text: &str) -> PathBuf {
    let path = dir.join("config.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// The whole chat of a bot as `(seq, kind, payload)`.
pub async fn chat(bot: &BotProxy<'_>) -> Vec<(u64, String, serde_json::Value)> {
    bot.get_chat(0, 0)
        .await
        .unwrap()
        .into_iter()
        .map(|(s, k, _, p)| (s, k, serde_json::from_str(&p).unwrap()))
        .collect()
}

/// Chat items of one kind.
pub fn of_kind<'a>(
    items: &'a [(u64, String, serde_json::Value)],
    kind: &str,
) -> Vec<&'a serde_json::Value> {
    items
        .iter()
        .filter(|(_, k, _)| k == kind)
        .map(|(_, _, p)| p)
        .collect()
}

/// Waits for the `TurnFinished` of each id in `turn_ids` (a stream subscribed before the
/// sends) and returns the outcomes in the order the turns finished.
pub async fn wait_turns(
    finished: &mut botvisor::dbus::client::TurnFinishedStream,
    turn_ids: &[String],
) -> Vec<(String, String)> {
    let mut done = Vec::new();
    tokio::time::timeout(EVENT_TIMEOUT, async {
        while done.len() < turn_ids.len() {
            let sig = finished.next().await.expect("signal stream");
            let a = sig.args().unwrap();
            if turn_ids.contains(&a.turn_id) {
                done.push((a.turn_id.clone(), a.outcome.clone()));
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("turns did not finish: {turn_ids:?}, done: {done:?}"));
    done
}

/// The `assistant` items signalled on `items` (a stream subscribed before the send), as `(seq,
/// text)` in the order they came, until `finished` says `turn` ended.
pub async fn assistant_items_until_end(
    items: &mut botvisor::dbus::client::ChatItemAddedStream,
    finished: &mut botvisor::dbus::client::TurnFinishedStream,
    turn: &str,
) -> Vec<(u64, String)> {
    let mut got = Vec::new();
    tokio::time::timeout(EVENT_TIMEOUT, async {
        loop {
            tokio::select! {
                biased; // an item signalled before TurnFinished is taken first
                Some(sig) = items.next() => {
                    let a = sig.args().unwrap();
                    if a.kind == "assistant" {
                        let p: serde_json::Value = serde_json::from_str(&a.payload).unwrap();
                        got.push((a.seq, p["text"].as_str().unwrap_or_default().to_owned()));
                    }
                }
                Some(sig) = finished.next() => {
                    if sig.args().unwrap().turn_id == turn {
                        return;
                    }
                }
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("turn {turn} did not end; items so far: {got:?}"));
    got
}

/// The bot's stored `assistant` items as `(seq, text)`, oldest first.
pub async fn stored_assistant_items(bot: &BotProxy<'_>) -> Vec<(u64, String)> {
    chat(bot)
        .await
        .into_iter()
        .filter(|(_, kind, _)| kind == "assistant")
        .map(|(seq, _, p)| (seq, p["text"].as_str().unwrap_or_default().to_owned()))
        .collect()
}

/// The lines of Claude Code's transcript of `session` under `config_dir` (`$CLAUDE_CONFIG_DIR`,
/// `~/.claude` by default) on the conversation's current branch: from its newest line back along
/// `parentUuid`, in order. A resume that dropped an unanswered attempt leaves that attempt in the
/// file on a branch of its own (docs/cli-versions.md): it is not on this one.
pub fn transcript_branch(config_dir: &Path, session: &str) -> Vec<serde_json::Value> {
    let file = std::fs::read_dir(config_dir.join("projects"))
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .map(|d| d.path().join(format!("{session}.jsonl")))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("no transcript of {session} under {}", config_dir.display()));
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&file)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .filter(|l: &serde_json::Value| l.get("uuid").and_then(|u| u.as_str()).is_some())
        .collect();
    let by_id: HashMap<&str, &serde_json::Value> = lines
        .iter()
        .map(|l| (l["uuid"].as_str().unwrap(), l))
        .collect();
    let mut branch = Vec::new();
    let mut at = lines.last();
    while let Some(line) = at {
        branch.push(line.clone());
        at = line["parentUuid"]
            .as_str()
            .and_then(|p| by_id.get(p).copied());
    }
    branch.reverse();
    branch
}

/// Everything a real-CLI test needs: the stand-in API, a running daemon, the bot environment.
pub struct RealSetup {
    /// The stand-in API.
    pub api: stand_in_api::StandInApi,
    /// The daemon.
    pub daemon: Daemon,
    /// The daemon's configuration.
    pub cfg: DaemonConfig,
    /// The env a bot needs to reach the stand-in.
    pub bot_env: HashMap<String, String>,
}

impl RealSetup {
    /// Starts the stand-in with `script` and the daemon with the real CLI.
    pub async fn start(env: &TestEnv, claude: PathBuf, script: stand_in_api::Script) -> RealSetup {
        RealSetup::start_with_config(env, claude, script, "").await
    }

    /// Like [`RealSetup::start`], with a daemon configuration file holding `config` (TOML).
    pub async fn start_with_config(
        env: &TestEnv,
        claude: PathBuf,
        script: stand_in_api::Script,
        config: &str,
    ) -> RealSetup {
        let api = stand_in_api::StandInApi::start(script).await;
        let mut cfg = env.daemon_config(Some(claude));
        if !config.is_empty() {
            cfg.config = Some(write_config(env.dir.path(), config));
        }
        let daemon = Daemon::start(&cfg, &env.conn).await;
        let bot_env = claude_env(&env.home, &api.url, &env.marker);
        RealSetup {
            api,
            daemon,
            cfg,
            bot_env,
        }
    }

    /// Creates a bot in `cwd` with the stand-in environment plus `extra`.
    pub async fn create_bot(
        &self,
        env: &TestEnv,
        cwd: &Path,
        extra: &[(&str, &str)],
    ) -> BotProxy<'static> {
        let mut bot_env = self.bot_env.clone();
        for (k, v) in extra {
            bot_env.insert(k.to_string(), v.to_string());
        }
        let cwd = cwd.to_str().unwrap();
        let path = bounded("CreateBot", async {
            env.manager()
                .await
                .create_bot(create_options(cwd, &bot_env))
                .await
                .unwrap_or_else(|e| panic!("CreateBot {cwd}: {e}"))
        })
        .await;
        bounded("the bot's proxy", env.bot(&path)).await
    }

    /// The user texts the model was asked about, in order (main conversation only).
    pub fn asked(&self) -> Vec<String> {
        self.api
            .requests()
            .into_iter()
            .filter(|r| r.has_tools && !r.has_tool_result)
            .map(|r| r.last_user_text)
            .collect()
    }
}

impl Drop for RealSetup {
    /// Issue 45: no request the model was sent holds one of the test's messages more often than
    /// the test sent it ([`repeats`]).
    fn drop(&mut self) {
        let requests: Vec<Vec<String>> = self
            .api
            .requests()
            .iter()
            .filter(|r| r.has_tools)
            .map(|r| r.user_texts())
            .collect();
        repeats::assert_none(&self.cfg.database, &requests);
    }
}

/// A daemon on a private bus whose bots run the scripted fake CLI.
pub struct FakeSetup {
    /// Dropped first: the daemon stops its bots before the environment checks for leftovers.
    pub daemon: Daemon,
    /// The daemon's configuration.
    pub cfg: DaemonConfig,
    /// The environment.
    pub env: TestEnv,
    /// The fake CLI's state folder (launches.jsonl, messages.jsonl, spawned.jsonl).
    pub state: PathBuf,
}

impl FakeSetup {
    /// Starts a daemon with `config` (TOML) and the fake CLI.
    pub async fn start(config: &str) -> FakeSetup {
        FakeSetup::start_in(TestEnv::new().await, config).await
    }

    /// Starts a daemon with `config` (TOML) and the fake CLI in `env`.
    pub async fn start_in(env: TestEnv, config: &str) -> FakeSetup {
        let mut cfg = env.daemon_config(Some(fake_cli()));
        cfg.config = Some(write_config(env.dir.path(), config));
        let daemon = Daemon::start(&cfg, &env.conn).await;
        let state = env.dir.path().join("fake-state");
        FakeSetup {
            daemon,
            cfg,
            env,
            state,
        }
    }

    /// Creates a bot whose fake CLI follows `plan`.
    pub async fn bot(&self, plan: serde_json::Value) -> BotProxy<'static> {
        let env_map = fake_env(&self.env.home, &self.state, plan, &self.env.marker);
        create_bot_in(&self.env, &env_map).await
    }

    /// The argv of every launch, in order.
    pub fn launches(&self) -> Vec<Vec<String>> {
        json_lines(&self.state.join("launches.jsonl"))
            .into_iter()
            .map(|l| {
                l["argv"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|a| a.as_str().unwrap().to_owned())
                    .collect()
            })
            .collect()
    }

    /// Every user message the fake read: `(launch number, text)`.
    pub fn messages(&self) -> Vec<(u64, String)> {
        json_lines(&self.state.join("messages.jsonl"))
            .into_iter()
            .map(|m| {
                (
                    m["launch"].as_u64().unwrap(),
                    m["text"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    }
}

/// The reading half of [`PrivateBus::connect_without_fds`]: bytes only.
#[derive(Debug)]
struct NoFdRead(tokio::net::unix::OwnedReadHalf);

#[async_trait::async_trait]
impl zbus::connection::socket::ReadHalf for NoFdRead {
    async fn recvmsg(
        &mut self,
        buf: &mut [u8],
    ) -> std::io::Result<(usize, Vec<std::os::fd::OwnedFd>)> {
        use tokio::io::AsyncReadExt;
        Ok((self.0.read(buf).await?, Vec::new()))
    }
}

/// The writing half of [`PrivateBus::connect_without_fds`]: bytes only.
#[derive(Debug)]
struct NoFdWrite(tokio::net::unix::OwnedWriteHalf);

#[async_trait::async_trait]
impl zbus::connection::socket::WriteHalf for NoFdWrite {
    async fn sendmsg(
        &mut self,
        buf: &[u8],
        fds: &[std::os::fd::BorrowedFd<'_>],
    ) -> std::io::Result<usize> {
        use tokio::io::AsyncWriteExt;
        assert!(fds.is_empty(), "a connection without descriptors sent one");
        self.0.write(buf).await
    }

    async fn close(&mut self) -> std::io::Result<()> {
        use tokio::io::AsyncWriteExt;
        self.0.shutdown().await
    }
}

/// The D-Bus error name of a failed call (`org.botvisor.Botvisor1.Error.Busy`), or the error's
/// words when it is no method error.
pub fn error_name(e: &zbus::Error) -> String {
    match e {
        zbus::Error::MethodError(name, _, _) => name.to_string(),
        e => e.to_string(),
    }
}
