//! `scripts/install.sh` in a temporary HOME (issue 17, point 5): without a systemd user manager
//! it says plainly what to do, installs the binaries it is given (or finds under
//! CARGO_TARGET_DIR), completions, the man page and the activation file with a log file, and
//! records where Claude Code is; with one it reloads systemd and says how to enable the unit.
//! `systemctl` and `claude` are stand-ins on PATH; nothing outside the temporary folder changes.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/install.sh");
const BOTVISORD: &str = env!("CARGO_BIN_EXE_botvisord");

fn executable(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A temporary HOME and a PATH folder holding `claude` and a `systemctl` that exits with
/// `systemctl_code` (and with `reload_code` for `daemon-reload`), logging its arguments.
struct Home {
    _dir: tempfile::TempDir,
    home: PathBuf,
    fakebin: PathBuf,
}

impl Home {
    fn new(systemctl_code: i32, reload_code: i32) -> Home {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        let fakebin = dir.path().join("fakebin");
        std::fs::create_dir_all(&home).unwrap();
        std::fs::create_dir_all(&fakebin).unwrap();
        executable(
            &fakebin.join("claude"),
            "#!/bin/sh\necho '2.1.328 (Claude Code)'\n",
        );
        executable(
            &fakebin.join("systemctl"),
            &format!(
                "#!/bin/sh\necho \"$@\" >> \"$HOME/systemctl.log\"\n\
                 case \"$*\" in *daemon-reload*) exit {reload_code} ;; esac\nexit {systemctl_code}\n"
            ),
        );
        Home {
            _dir: dir,
            home,
            fakebin,
        }
    }

    /// Runs the script with `args` (and `env`): (exit code, stdout, stderr).
    fn run(&self, args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
        let out = Command::new("bash")
            .arg(SCRIPT)
            .args(args)
            .env_clear()
            .env("HOME", &self.home)
            .env("PATH", format!("{}:/usr/bin:/bin", self.fakebin.display()))
            .envs(env.iter().copied())
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.home.join(rel)
    }

    fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.path(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
    }
}

fn bin_dir() -> String {
    Path::new(BOTVISORD)
        .parent()
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned()
}

#[test]
fn help_is_clean() {
    let h = Home::new(1, 0);
    let (code, out, _) = h.run(&["--help"], &[]);
    assert_eq!(code, 0);
    assert!(
        out.starts_with("Usage: scripts/install.sh [OPTIONS]"),
        "{out}"
    );
    assert!(!out.contains("set -euo"), "{out}");
    for flag in [
        "--no-build",
        "--bin-dir",
        "--autostart",
        "--uninstall",
        "CARGO_TARGET_DIR",
    ] {
        assert!(out.contains(flag), "--help lacks {flag}");
    }
    let (code, _, err) = h.run(&["--bogus"], &[]);
    assert_eq!(code, 2);
    assert!(err.contains("unknown argument: --bogus"), "{err}");
}

#[test]
fn without_systemd_it_says_what_to_do_and_installs_everything() {
    let h = Home::new(1, 0);
    // Issue 30, in the way 5: a state folder open to others is made the user's alone.
    let state = h.path(".local/state/botvisor");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (code, out, err) = h.run(&["--bin-dir", &bin_dir(), "--autostart"], &[]);
    assert_eq!(
        std::fs::metadata(&state).unwrap().permissions().mode() & 0o777,
        0o700
    );
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("no systemd user manager here"), "{out}");
    assert!(out.contains("starts by D-Bus activation"), "{out}");
    assert!(out.contains("or run it yourself in a terminal"), "{out}");
    assert!(!out.contains("systemctl --user enable"), "{out}");
    let log = h.path(".local/state/botvisor/botvisord.log");
    assert!(
        out.contains(log.to_str().unwrap()),
        "says where the log goes: {out}"
    );

    for f in [
        ".local/bin/botvisord",
        ".local/bin/botvisorctl",
        ".local/bin/botvisor-notify",
    ] {
        assert!(h.path(f).is_file(), "{f} missing");
    }
    // botvisor-notify: its desktop entry (the notifications' desktop-entry hint) and, without
    // systemd, its autostart entry.
    let notify_exec = format!(
        "Exec=\"{}\" --log-file \"{}\"",
        h.path(".local/bin/botvisor-notify").display(),
        h.path(".local/state/botvisor/botvisor-notify.log")
            .display()
    );
    for f in [
        ".local/share/applications/botvisor-notify.desktop",
        ".config/autostart/botvisor-notify.desktop",
    ] {
        let entry = h.read(f);
        assert!(entry.contains(&notify_exec), "{f}: {entry}");
    }
    assert!(
        h.read(".local/share/man/man1/botvisorctl.1")
            .contains(".TH botvisorctl 1")
    );
    assert!(
        h.read(".local/share/bash-completion/completions/botvisorctl")
            .contains("_botvisorctl")
    );
    assert!(
        h.read(".local/share/zsh/site-functions/_botvisorctl")
            .contains("#compdef botvisorctl")
    );
    assert!(
        h.read(".config/fish/completions/botvisorctl.fish")
            .contains("botvisorctl")
    );
    let activation = h.read(".local/share/dbus-1/services/org.botvisor.Botvisor1.service");
    let exec = format!(
        "Exec=\"{}\" --log-file \"{}\"",
        h.path(".local/bin/botvisord").display(),
        log.display()
    );
    assert!(activation.contains(&exec), "{activation}");
    let desktop = h.read(".config/autostart/botvisord.desktop");
    assert!(desktop.contains(&exec), "{desktop}");
    assert!(!h.path(".config/systemd/user/botvisord.service").exists());

    // Where Claude Code is, for a daemon that does not see this PATH; checked by the daemon.
    let claude = h.fakebin.join("claude");
    let config = h.read(".config/botvisor/config.toml");
    assert!(
        config.contains(&format!("claude_bin = \"{}\"", claude.display())),
        "{config}"
    );
    let check = Command::new(h.path(".local/bin/botvisord"))
        .arg("--check-config")
        .env_clear()
        .env("HOME", &h.home)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&check.stdout);
    assert!(check.status.success(), "{said}");
    assert!(
        said.contains(&format!("runtime claude: {}", claude.display())),
        "{said}"
    );

    // Again: the recorded path is kept, not written twice; then uninstall.
    let (code, out, _) = h.run(&["--bin-dir", &bin_dir()], &[]);
    assert_eq!(code, 0);
    assert!(out.contains("kept claude_bin"), "{out}");
    assert_eq!(
        h.read(".config/botvisor/config.toml")
            .matches("claude_bin")
            .count(),
        1
    );
    let (code, out, _) = h.run(&["--uninstall"], &[]);
    assert_eq!(code, 0, "{out}");
    assert!(!h.path(".local/bin/botvisord").exists());
    assert!(!h.path(".local/share/man/man1/botvisorctl.1").exists());
    assert!(!h.path(".config/autostart/botvisord.desktop").exists());
    assert!(!h.path(".config/autostart/botvisor-notify.desktop").exists());
    assert!(!h.path(".local/bin/botvisor-notify").exists());
    assert!(
        h.path(".config/botvisor/config.toml").exists(),
        "the configuration stays"
    );
}

#[test]
fn cargo_target_dir_is_honoured() {
    let h = Home::new(1, 0);
    let target = h.home.join("elsewhere");
    std::fs::create_dir_all(target.join("release")).unwrap();
    for b in ["botvisord", "botvisorctl", "botvisor-notify"] {
        std::fs::copy(
            Path::new(&bin_dir()).join(b),
            target.join("release").join(b),
        )
        .unwrap();
    }
    let (code, out, err) = h.run(
        &["--no-build"],
        &[("CARGO_TARGET_DIR", target.to_str().unwrap())],
    );
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(h.path(".local/bin/botvisorctl").is_file());
    // Without it, ./target/release of the work tree is looked for, and its absence is named.
    let (code, _, err) = h.run(
        &["--no-build"],
        &[("CARGO_TARGET_DIR", h.home.join("nothing").to_str().unwrap())],
    );
    assert_eq!(code, 1);
    assert!(
        err.contains("nothing/release/botvisord") && err.contains("--bin-dir"),
        "{err}"
    );
}

#[test]
fn with_systemd_it_reloads_and_says_how_to_enable() {
    let h = Home::new(0, 0);
    let (code, out, err) = h.run(&["--bin-dir", &bin_dir()], &[]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.contains("systemctl --user enable --now botvisord"),
        "{out}"
    );
    assert!(out.contains("journalctl --user -u botvisord"), "{out}");
    let unit = h.read(".config/systemd/user/botvisord.service");
    assert!(
        unit.contains(&format!(
            "ExecStart=\"{}\"",
            h.path(".local/bin/botvisord").display()
        )),
        "{unit}"
    );
    assert!(h.read("systemctl.log").contains("--user daemon-reload"));
    assert!(
        out.contains("systemctl --user enable --now botvisor-notify"),
        "{out}"
    );
    let unit = h.read(".config/systemd/user/botvisor-notify.service");
    assert!(
        unit.contains(&format!(
            "ExecStart=\"{}\"",
            h.path(".local/bin/botvisor-notify").display()
        )) && unit.contains("WantedBy=graphical-session.target"),
        "{unit}"
    );
    assert!(!h.path(".config/autostart/botvisor-notify.desktop").exists());

    // A failing daemon-reload is said, not hidden.
    let h = Home::new(0, 1);
    let (code, out, err) = h.run(&["--bin-dir", &bin_dir()], &[]);
    assert_eq!(code, 1, "{out}");
    assert!(err.contains("daemon-reload failed"), "{err}");
    assert!(!out.contains("enable --now"), "{out}");
}

/// Issue 30, in the way 1: a session bus that started before the activation folder existed
/// lists the name once the script asked it to reload (`ListActivatableNames`), and the script
/// says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_session_bus_is_asked_to_read_the_activation_file() {
    let h = Home::new(1, 0);
    let services = h.path(".local/share/dbus-1/services");
    let bus = support::PrivateBus::start_with(&h.home.join("bus"), Some(&services), &[]);
    let (code, out, err) = h.run(
        &["--bin-dir", &bin_dir()],
        &[("DBUS_SESSION_BUS_ADDRESS", &bus.address)],
    );
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.contains("the session bus lists org.botvisor.Botvisor1 now"),
        "{out}\n{err}"
    );
    let conn = bus.connect().await;
    let names = zbus::fdo::DBusProxy::new(&conn)
        .await
        .unwrap()
        .list_activatable_names()
        .await
        .unwrap();
    assert!(
        names.iter().any(|n| n.as_str() == "org.botvisor.Botvisor1"),
        "{names:?}"
    );
}

/// Issue 30, in the way 8: `--uninstall` stops a botvisord that runs the installed binary outside
/// systemd (it stops its bots first), and says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uninstall_stops_the_botvisord_it_installed() {
    let h = Home::new(1, 0);
    let (code, out, err) = h.run(&["--bin-dir", &bin_dir()], &[]);
    assert_eq!(code, 0, "{out}\n{err}");
    let bus = support::PrivateBus::start(&h.home.join("bus"));
    let mut daemon = Command::new(h.path(".local/bin/botvisord"))
        .arg("--database")
        .arg(h.home.join("db.sqlite"))
        .env_clear()
        .env("HOME", &h.home)
        .env("XDG_RUNTIME_DIR", h.home.join("run"))
        .env("DBUS_SESSION_BUS_ADDRESS", &bus.address)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Serving: the name is owned.
    let conn = bus.connect().await;
    let dbus = zbus::fdo::DBusProxy::new(&conn).await.unwrap();
    let mut owners = dbus
        .receive_name_owner_changed_with_args(&[(0, "org.botvisor.Botvisor1")])
        .await
        .unwrap();
    if !dbus
        .name_has_owner("org.botvisor.Botvisor1".try_into().unwrap())
        .await
        .unwrap()
    {
        tokio::time::timeout(
            support::EVENT_TIMEOUT,
            futures_util::StreamExt::next(&mut owners),
        )
        .await
        .expect("botvisord takes its name");
    }
    let (code, out, err) = h.run(&["--uninstall"], &[]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.contains(&format!(
            "stopped the botvisord that ran (pid {})",
            daemon.id()
        )),
        "{out}"
    );
    let status = daemon.wait().unwrap();
    assert!(status.success(), "it stopped gently: {status:?}");
}

/// A PREFIX with a space and a `'` in it: every file that names the binaries quotes their path,
/// so the bus really starts the installed botvisord by activation (before, `Exec=` was written
/// unquoted and the bus failed, "Failed to execute program", while the script said it would
/// start); `doctor` would say so. A PREFIX the formats cannot quote (`"`) is refused before
/// anything is written (issue 30's hostile run, finding 2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefix_with_a_space_is_quoted_and_activated_and_one_with_a_double_quote_is_refused() {
    let h = Home::new(1, 0);
    let refused = h.path("a\"b");
    let (code, _, err) = h.run(
        &["--bin-dir", &bin_dir()],
        &[("PREFIX", refused.to_str().unwrap())],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("cannot install with the folder"), "{err}");
    assert!(!refused.exists(), "nothing written");

    let prefix = h.path("my dir's");
    let services = h.path(".local/share/dbus-1/services");
    let path = format!("{}:/usr/bin:/bin", h.fakebin.display());
    let home = h.home.to_str().unwrap().to_owned();
    let bus = support::PrivateBus::start_with(
        &h.home.join("bus"),
        Some(&services),
        &[("HOME", &home), ("PATH", &path)],
    );
    let (code, out, err) = h.run(
        &["--bin-dir", &bin_dir()],
        &[
            ("PREFIX", prefix.to_str().unwrap()),
            ("DBUS_SESSION_BUS_ADDRESS", &bus.address),
        ],
    );
    assert_eq!(code, 0, "{out}\n{err}");
    let activation =
        std::fs::read_to_string(services.join("org.botvisor.Botvisor1.service")).unwrap();
    assert!(
        activation.contains(&format!("Exec=\"{}/bin/botvisord\"", prefix.display())),
        "{activation}"
    );
    let conn = bus.connect().await;
    let bots = tokio::time::timeout(
        support::EVENT_TIMEOUT,
        botvisor::dbus::client::ManagerProxy::new(&conn)
            .await
            .unwrap()
            .list_bots(),
    )
    .await
    .expect("activation answers in time");
    assert_eq!(bots.expect("the bus started the installed botvisord"), []);
    // The activated botvisord is stopped as a user would stop it.
    let dbus = zbus::fdo::DBusProxy::new(&conn).await.unwrap();
    let pid = dbus
        .get_connection_unix_process_id("org.botvisor.Botvisor1".try_into().unwrap())
        .await
        .unwrap();
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap();
    assert!(exe.starts_with(&prefix), "{}", exe.display());
    // SAFETY: kill(2) on the botvisord the bus started for this test.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    tokio::time::timeout(support::EVENT_TIMEOUT, async {
        while std::path::Path::new(&format!("/proc/{pid}")).exists() {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("botvisord exits at SIGTERM");
}
