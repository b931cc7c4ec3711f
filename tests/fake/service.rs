//! The OS service: D-Bus activation, one daemon per database, a graceful SIGTERM, and the
//! packaging files (systemd unit, D-Bus service file, launchd plist, --help, --check-config).

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use futures_util::StreamExt;
use serde_json::json;
use support::*;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const BOTVISORD: &str = env!("CARGO_BIN_EXE_botvisord");
const BOTVISORCTL: &str = env!("CARGO_BIN_EXE_botvisorctl");

fn filled(file: &str, bindir: &Path) -> String {
    std::fs::read_to_string(Path::new(ROOT).join(file))
        .unwrap()
        .replace("@BINDIR@", bindir.to_str().unwrap())
        .replace("@DOCDIR@", "/usr/share/doc/botvisor")
        .replace("@DOCURL@", "/usr/share/doc/botvisor")
        .replace("@LOGDIR@", "/tmp")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_call_starts_the_daemon_through_dbus_activation() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let services = dir.path().join("services");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&services).unwrap();
    let db = dir.path().join("activated.db");
    let log = dir.path().join("logs/botvisord.log");
    // The installed file, pointing at the built binary, with the test's own paths.
    let service = filled(
        "packaging/dbus/org.botvisor.Botvisor1.service",
        Path::new("/unused"),
    )
    .replace(
        "Exec=\"/unused/botvisord\" --log-file \"/tmp/botvisord.log\"",
        &format!(
            "Exec=\"{BOTVISORD}\" --database {} --log-file {}",
            db.display(),
            log.display()
        ),
    );
    std::fs::write(services.join("org.botvisor.Botvisor1.service"), service).unwrap();
    let path = std::env::var("PATH").unwrap_or_default();
    let home_s = home.to_str().unwrap().to_owned();
    let run = home.join("run");
    let bus = PrivateBus::start_with(
        &dir.path().join("bus"),
        Some(&services),
        &[
            ("PATH", path.as_str()),
            ("HOME", home_s.as_str()),
            ("XDG_RUNTIME_DIR", run.to_str().unwrap()),
            ("BOTVISOR_CLAUDE_BIN", "/bin/true"),
        ],
    );
    let conn = bus.connect().await;
    let dbus = zbus::fdo::DBusProxy::new(&conn).await.unwrap();
    let name = || botvisor::dbus::BUS_NAME.try_into().unwrap();
    assert!(
        !dbus.name_has_owner(name()).await.unwrap(),
        "nothing runs yet"
    );
    // The first method call starts it.
    let manager = botvisor::dbus::client::ManagerProxy::new(&conn)
        .await
        .unwrap();
    assert!(manager.list_bots().await.unwrap().is_empty());
    assert_eq!(manager.version().await.unwrap(), "1");
    assert!(db.exists(), "the activated daemon opened its database");
    // The line is written once the name is taken, which may be a moment after the answer the
    // name's owner gave: waited for, bounded.
    let logged = tokio::time::timeout(EVENT_TIMEOUT, async {
        loop {
            let logged = std::fs::read_to_string(&log).unwrap_or_default();
            if logged.contains("botvisord is serving") {
                return logged;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(
        logged.is_ok(),
        "the activated daemon logs to its file: {}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    let pid = dbus
        .get_connection_unix_process_id(botvisor::dbus::BUS_NAME.try_into().unwrap())
        .await
        .unwrap();
    // SAFETY: kill(2) on the daemon the test's bus started.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let mut gone = dbus
        .receive_name_owner_changed_with_args(&[(0, botvisor::dbus::BUS_NAME)])
        .await
        .unwrap();
    if dbus.name_has_owner(name()).await.unwrap() {
        tokio::time::timeout(EVENT_TIMEOUT, gone.next())
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_daemons_never_share_one_database_even_on_two_buses() {
    let env = TestEnv::new().await;
    let cfg = env.daemon_config(Some("/bin/true".into()));
    let _first = Daemon::start(&cfg, &env.conn).await;
    let other_bus = PrivateBus::start(&env.dir.path().join("other-bus"));
    let mut second_cfg = cfg.clone();
    second_cfg.bus = other_bus.address.clone();
    // Another HOME, so another XDG_RUNTIME_DIR: the lock beside the database still holds.
    second_cfg.home = env.dir.path().join("other-home");
    std::fs::create_dir_all(&second_cfg.home).unwrap();
    let mut second = Daemon::spawn(&second_cfg, "second.log");
    let status = tokio::time::timeout(EVENT_TIMEOUT, second.wait())
        .await
        .expect("the second daemon exits");
    assert!(!status.success());
    let log = second.log_text();
    assert!(log.contains("already uses this database"), "{log}");
    assert!(
        log.contains(&format!("pid {} (botvisord)", _first.pid())),
        "the message names the live daemon: {log}"
    );
}

/// A hard link to the database in another folder, from a daemon with another runtime folder and
/// on another bus, meets neither lock file (found by a fresh user: two daemons ran one bot's
/// agent twice); the lock on the file itself holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hard_link_to_the_database_from_another_runtime_folder_is_refused() {
    let env = TestEnv::new().await;
    let cfg = env.daemon_config(Some("/bin/true".into()));
    let first = Daemon::start(&cfg, &env.conn).await;
    let other_bus = PrivateBus::start(&env.dir.path().join("other-bus"));
    let mut second_cfg = cfg.clone();
    second_cfg.bus = other_bus.address.clone();
    second_cfg.home = env.dir.path().join("other-home");
    std::fs::create_dir_all(second_cfg.home.join("elsewhere")).unwrap();
    second_cfg.database = second_cfg.home.join("elsewhere/link.db");
    std::fs::hard_link(&cfg.database, &second_cfg.database).unwrap();
    let mut second = Daemon::spawn(&second_cfg, "second.log");
    let status = tokio::time::timeout(EVENT_TIMEOUT, second.wait())
        .await
        .expect("the second daemon exits");
    assert!(!status.success());
    let log = second.log_text();
    assert!(log.contains("already uses this database"), "{log}");
    assert!(
        log.contains(&format!("pid {} (botvisord)", first.pid())),
        "{log}"
    );
}

fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemons_folders_and_locks_are_private_and_a_held_lock_names_its_holder() {
    use std::os::unix::fs::PermissionsExt;
    let env = TestEnv::new().await;
    let mut cfg = env.daemon_config(Some("/bin/true".into()));
    // The default places (XDG_STATE_HOME and XDG_RUNTIME_DIR below HOME, see Daemon::spawn),
    // both already there and open to everyone; and a umask that takes nothing away.
    let state = env.home.join(".local/state/botvisor");
    let run = env.home.join("run/botvisor");
    for dir in [&state, &run] {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    cfg.database = state.join("botvisor.db");
    cfg.umask = Some(0);
    let mut daemon = Daemon::start(&cfg, &env.conn).await;
    assert_eq!(mode(&state), 0o700);
    assert_eq!(mode(&run), 0o700);
    let locks: Vec<_> = std::fs::read_dir(&run)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    // A database this start created is locked by its path and, once it exists, by its inode.
    assert_eq!(locks.len(), 2, "{locks:?}");
    for lock in &locks {
        assert_eq!(mode(lock), 0o600, "{}", lock.display());
    }
    let db = std::fs::metadata(&cfg.database).unwrap();
    let by_inode = {
        use std::os::unix::fs::MetadataExt;
        run.join(format!("db-{:x}-{:x}.lock", db.dev(), db.ino()))
    };
    assert!(locks.contains(&by_inode), "{locks:?}");
    let beside = state.join("botvisor.db.lock");
    assert_eq!(mode(&beside), 0o600);
    assert_eq!(mode(&cfg.database), 0o600);
    assert!(daemon.terminate().await.success());

    // Someone else holds the lock; the pid written in it is of a process long gone.
    let mut gone = std::process::Command::new("/bin/true").spawn().unwrap();
    let gone_pid = gone.id();
    gone.wait().unwrap();
    let held = std::fs::File::options().write(true).open(&beside).unwrap();
    held.try_lock().unwrap();
    std::fs::write(&beside, format!("{gone_pid}\n")).unwrap();
    let mut second = Daemon::spawn(&cfg, "second.log");
    let status = tokio::time::timeout(EVENT_TIMEOUT, second.wait())
        .await
        .expect("the daemon exits");
    assert!(!status.success());
    let log = second.log_text();
    assert!(
        log.contains(&format!("pid {} (", std::process::id())),
        "the live holder is named: {log}"
    );
    assert!(!log.contains(&format!("pid {gone_pid}")), "{log}");
    drop(held);
}

/// Issue 30, in the way 2: `--database` in a folder that does not exist: the folder is created
/// 0700 (docs/install.md), whatever the umask, and the daemon starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_in_a_missing_folder_gets_a_private_folder() {
    let env = TestEnv::new().await;
    let mut cfg = env.daemon_config(Some("/bin/true".into()));
    let folder = env.dir.path().join("not/yet");
    cfg.database = folder.join("db.sqlite");
    cfg.umask = Some(0);
    let mut daemon = Daemon::start(&cfg, &env.conn).await;
    assert_eq!(mode(&folder), 0o700);
    assert_eq!(mode(&cfg.database), 0o600);
    assert!(daemon.terminate().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_every_bot_before_the_name_is_released() {
    let env = TestEnv::new().await;
    let mut cfg = env.daemon_config(Some(fake_cli()));
    cfg.config = Some(write_config(env.dir.path(), "stop_grace_s = 0.5\n"));
    let mut daemon = Daemon::start(&cfg, &env.conn).await;
    let state = env.dir.path().join("fake-state");
    let work = env.work.to_str().unwrap().to_owned();
    let mut bots = Vec::new();
    for i in 0..3 {
        let plan = json!([{"mode": "normal", "ignore_term": i == 0, "spawn": ["sleep 300"]}]);
        let env_map = fake_env(&env.home, &state, plan, &env.marker);
        let path = env
            .manager()
            .await
            .create_bot(create_options(&work, &env_map))
            .await
            .unwrap();
        let bot = env.bot(&path).await;
        assert_eq!(send_and_wait(&bot, "hi").await.outcome, "success");
        bots.push(bot);
    }
    assert!(env.leftovers().len() >= 6);
    let dbus = zbus::fdo::DBusProxy::new(&env.conn).await.unwrap();
    let mut owner = dbus
        .receive_name_owner_changed_with_args(&[(0, botvisor::dbus::BUS_NAME)])
        .await
        .unwrap();
    let rule = zbus::MatchRule::builder()
        .msg_type(zbus::message::Type::Signal)
        .member("PropertiesChanged")
        .build()
        .unwrap();
    let mut changes = zbus::MessageStream::for_match_rule(rule, &env.conn, None)
        .await
        .unwrap();
    let exit = tokio::spawn(async move { daemon.terminate().await });
    let released = tokio::time::timeout(EVENT_TIMEOUT, owner.next())
        .await
        .unwrap()
        .unwrap();
    assert!(released.args().unwrap().new_owner().is_none());
    let left = env.leftovers();
    assert!(left.is_empty(), "name released while bots ran: {left:?}");
    assert!(exit.await.unwrap().success());
    // In parallel: every bot was stopping before the stubborn one (first in line) was stopped.
    let stubborn = bots[0].inner().path().to_string();
    let mut stopping = Vec::new();
    while let Ok(Some(Ok(msg))) =
        tokio::time::timeout(Duration::from_millis(0), changes.next()).await
    {
        let path = msg.header().path().unwrap().to_string();
        let (_, changed, _): (String, HashMap<String, zbus::OwnedVariant>, Vec<String>) =
            msg.body().deserialize().unwrap();
        let Some(state) = changed.get("State") else {
            continue;
        };
        let state: String = state.try_clone().unwrap().try_into().unwrap();
        if state == "stopping" {
            stopping.push(path);
        } else if state == "stopped" && path == stubborn {
            break;
        }
    }
    assert_eq!(
        stopping.len(),
        3,
        "bots were stopped one after another: {stopping:?}"
    );
}

#[test]
fn the_systemd_user_unit_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let bindir = Path::new(BOTVISORD).parent().unwrap();
    let unit = dir.path().join("botvisord.service");
    let text = filled("packaging/systemd/botvisord.service", bindir);
    for key in [
        "Type=dbus",
        "BusName=org.botvisor.Botvisor1",
        "WantedBy=default.target",
        "KillMode=mixed",
        "Delegate=yes",
    ] {
        assert!(text.contains(key), "the unit lacks {key}");
    }
    let timeout: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("TimeoutStopSec="))
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        timeout as f64 > botvisor::config::Config::default().stop_grace_s + 5.0,
        "TimeoutStopSec must outlast the stop grace period"
    );
    std::fs::write(&unit, text).unwrap();
    let run = dir.path().join("run");
    std::fs::create_dir_all(&run).unwrap();
    let out = std::process::Command::new("systemd-analyze")
        .args(["--user", "verify"])
        .arg(&unit)
        .env("XDG_RUNTIME_DIR", &run)
        .output()
        .expect("systemd-analyze runs");
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "systemd-analyze verify: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_dbus_service_file_names_the_bus_name_and_the_unit() {
    let text = filled(
        "packaging/dbus/org.botvisor.Botvisor1.service",
        Path::new("/usr/bin"),
    );
    let keys: HashMap<&str, &str> = text
        .lines()
        .filter(|l| !l.starts_with('#') && l.contains('='))
        .filter_map(|l| l.split_once('='))
        .collect();
    assert!(text.contains("[D-BUS Service]"));
    assert_eq!(keys["Name"], "org.botvisor.Botvisor1");
    assert_eq!(
        keys["Exec"],
        "\"/usr/bin/botvisord\" --log-file \"/tmp/botvisord.log\""
    );
    assert_eq!(keys["SystemdService"], "botvisord.service");
}

#[test]
fn the_launchd_plist_is_a_well_formed_user_agent() {
    let text = filled(
        "packaging/launchd/org.botvisor.botvisord.plist",
        Path::new("/opt/bin"),
    );
    let doc = roxmltree::Document::parse_with_options(
        &text,
        roxmltree::ParsingOptions {
            allow_dtd: true,
            ..Default::default()
        },
    )
    .expect("the plist is XML");
    let dict = doc.descendants().find(|n| n.has_tag_name("dict")).unwrap();
    let keys: Vec<&str> = dict
        .children()
        .filter(|n| n.has_tag_name("key"))
        .filter_map(|n| n.text())
        .collect();
    for key in [
        "Label",
        "ProgramArguments",
        "RunAtLoad",
        "KeepAlive",
        "StandardOutPath",
        "StandardErrorPath",
        "ExitTimeOut",
    ] {
        assert!(keys.contains(&key), "the plist lacks {key}");
    }
    assert!(text.contains("<string>/opt/bin/botvisord</string>"));
    assert!(text.contains("<key>SuccessfulExit</key>"));
}

/// Runs `botvisord --check-config` with `args` and `env`.
fn check_config(args: &[&std::ffi::OsStr], env: &[(&str, &Path)]) -> std::process::Output {
    let mut cmd = std::process::Command::new(BOTVISORD);
    cmd.arg("--check-config").args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

#[test]
fn help_and_check_config() {
    let out = std::process::Command::new(BOTVISORD)
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    for flag in ["--database", "--config", "--check-config", "--verbose"] {
        assert!(help.contains(flag), "botvisord --help lacks {flag}");
    }
    let out = std::process::Command::new(BOTVISORCTL)
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    for cmd in [
        "create",
        "list",
        "send",
        "chat",
        "stop",
        "delete",
        "watch",
        "answer",
        "interrupt",
        "set",
        "restart",
    ] {
        assert!(help.contains(cmd), "botvisorctl --help lacks {cmd}");
    }
    let dir = tempfile::tempdir().unwrap();
    // No configuration file at all is the defaults, and valid.
    let nothing = dir.path().join("nothing-here");
    let out = check_config(&[], &[("HOME", dir.path()), ("XDG_CONFIG_HOME", &nothing)]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let good = dir.path().join("good.toml");
    std::fs::write(&good, "stop_grace_s = 8\nidle_timeout_s = 0\n").unwrap();
    let out = check_config(&["--config".as_ref(), good.as_os_str()], &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let unknown_mode = dir.path().join("mode.toml");
    std::fs::write(&unknown_mode, "default_permission_mode = \"manual\"\n").unwrap();
    let out = check_config(&["--config".as_ref(), unknown_mode.as_os_str()], &[]);
    assert!(
        !out.status.success(),
        "an unusable default mode passed the check"
    );
    // A configured binary must exist and be executable; the check names it and says so.
    let missing = dir.path().join("missing.toml");
    std::fs::write(&missing, "claude_bin = \"/nope/claude\"\n").unwrap();
    let out = check_config(&["--config".as_ref(), missing.as_os_str()], &[]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "a missing claude_bin passed: {said}");
    assert!(
        said.contains("/nope/claude") && said.contains("does not exist"),
        "{said}"
    );
    let not_exec = dir.path().join("claude-not-executable");
    std::fs::write(&not_exec, "#!/bin/sh\n").unwrap();
    let plain = dir.path().join("plain.toml");
    std::fs::write(&plain, format!("claude_bin = {:?}\n", not_exec)).unwrap();
    let out = check_config(&["--config".as_ref(), plain.as_os_str()], &[]);
    assert!(!out.status.success(), "a non-executable claude_bin passed");
    let exec = dir.path().join("claude-ok");
    std::fs::write(&exec, "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(&exec, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let usable = dir.path().join("usable.toml");
    std::fs::write(&usable, format!("claude_bin = {:?}\n", exec)).unwrap();
    let out = check_config(&["--config".as_ref(), usable.as_os_str()], &[]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{said}");
    assert!(
        said.contains(&format!("runtime claude: {}", exec.display())),
        "{said}"
    );
    // Type errors in words, not the deserializer's.
    let typed = dir.path().join("typed.toml");
    std::fs::write(&typed, "stop_grace_s = \"5\"\n").unwrap();
    let out = check_config(&["--config".as_ref(), typed.as_os_str()], &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("key `stop_grace_s` takes a number of seconds") && !err.contains("f64"),
        "{err}"
    );
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "stop_grace_s = 8\nidle_timeot_s = 5\n").unwrap();
    let out = check_config(&["--config".as_ref(), bad.as_os_str()], &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("idle_timeot_s") && err.contains("line 2"),
        "{err}"
    );
}

/// A daemon started right after one that died (a SIGKILL, a crash and a restart by the service
/// manager) may find the dead one's connection still owning the bus name for a moment: it waits
/// for the name to be released instead of exiting as if another daemon ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bus_name_left_by_a_run_that_just_ended_is_taken_once_released() {
    let env = TestEnv::new().await;
    let squatter = env.bus.connect().await;
    squatter
        .request_name(botvisor::dbus::BUS_NAME)
        .await
        .unwrap();
    let dbus = zbus::fdo::DBusProxy::new(&env.conn).await.unwrap();
    let mut owners = dbus
        .receive_name_owner_changed_with_args(&[(0, botvisor::dbus::BUS_NAME)])
        .await
        .unwrap();
    let daemon = Daemon::spawn(&env.daemon_config(None), "botvisord.log");
    let waiting = "the bus name is held by another connection";
    tokio::time::timeout(EVENT_TIMEOUT, async {
        let mut tick = tokio::time::interval(Duration::from_millis(20));
        while !daemon.log_text().contains(waiting) {
            tick.tick().await;
        }
    })
    .await
    .unwrap_or_else(|_| {
        panic!(
            "the daemon did not wait for the name:\n{}",
            daemon.log_text()
        )
    });
    squatter
        .release_name(botvisor::dbus::BUS_NAME)
        .await
        .unwrap();
    let pid = daemon.pid();
    tokio::time::timeout(EVENT_TIMEOUT, async {
        while let Some(change) = owners.next().await {
            if change.args().unwrap().new_owner().is_some() {
                break;
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the name was not taken:\n{}", daemon.log_text()));
    let owner = dbus
        .get_connection_unix_process_id(botvisor::dbus::BUS_NAME.try_into().unwrap())
        .await
        .unwrap();
    assert_eq!(owner, pid, "{}", daemon.log_text());
}

/// Issue 47: the Manager says the kernel's boot, this botvisord's invocation (a new one at each
/// start) and whether its agents outlive its restarts: run from a terminal (no user manager)
/// they do not, and `Survival` says why. A client tells a restart (same `BootId`, another
/// `Invocation`) from a reboot (another `BootId`) and from a dropped connection (the same
/// both).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_manager_says_its_boot_its_invocation_and_whether_agents_outlive_a_restart() {
    let mut fake = FakeSetup::start("").await;
    let manager = fake.env.manager().await;
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
    assert_eq!(manager.boot_id().await.unwrap(), boot.trim());
    let first = manager.invocation().await.unwrap();
    assert!(
        first.len() == 32 && first.bytes().all(|b| b.is_ascii_hexdigit()),
        "{first}"
    );
    let survival = manager.survival().await.unwrap();
    assert!(
        survival.starts_with("off: botvisord does not run as a systemd user unit"),
        "{survival}"
    );
    assert!(fake.daemon.terminate().await.success());
    let _daemon = Daemon::start(&fake.cfg, &fake.env.conn).await;
    let manager = fake.env.manager().await;
    let second = manager.invocation().await.unwrap();
    assert_ne!(second, first, "a new start is a new invocation");
    assert_eq!(manager.boot_id().await.unwrap(), boot.trim());
}
