//! `botvisorctl doctor`: what the first hour trips on, checked in one place. Each check says
//! what it found and, when it fails, the command that fixes it; the exit code is 0 only when
//! every check passes (a warning passes: something optional, such as a CLI not installed).
//!
//! The bus checks ask the bus and botvisord; the file checks (the CLIs, their logins, the
//! configuration, the state folder, the activation file) look at this machine, and are left out
//! over `--host`, whose machine is another.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::json;
use zbus::Connection;

use botvisor::config::{Config, paths};
use botvisor::dbus::BUS_NAME;
use botvisor::runtime::Runtime;

use crate::fail::{FAILED, Failure, OK};
use crate::show::{self, ERROR, GOOD, WARN, paint};

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Status {
    /// Fine.
    Ok,
    /// Not fine, but nothing that must be (an optional CLI missing): does not fail the doctor.
    Warn,
    /// Must be fixed.
    Fail,
}

/// One check: what was looked at, what was found, and how to fix it.
#[derive(Debug, Clone)]
pub struct Check {
    /// What was checked (`botvisord`, `claude`, `login demo`, …).
    pub what: String,
    /// How it came out.
    pub status: Status,
    /// What was found, in words.
    pub found: String,
    /// The command (or step) that fixes it; empty when nothing is to be done.
    pub fix: String,
}

fn check(what: impl Into<String>, status: Status, found: String, fix: impl Into<String>) -> Check {
    Check {
        what: what.into(),
        status,
        found,
        fix: fix.into(),
    }
}

/// The folders the session bus reads activation files from: `$XDG_DATA_HOME/dbus-1/services`
/// and each of `$XDG_DATA_DIRS` (the D-Bus specification's defaults).
fn activation_dirs(env: &dyn Fn(&str) -> Option<String>) -> Vec<PathBuf> {
    let home = env("HOME").unwrap_or_default();
    let data_home = env("XDG_DATA_HOME")
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| format!("{home}/.local/share"));
    let data_dirs = env("XDG_DATA_DIRS")
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| "/usr/local/share:/usr/share".to_owned());
    std::iter::once(data_home)
        .chain(data_dirs.split(':').map(str::to_owned))
        .map(|d| Path::new(&d).join("dbus-1/services"))
        .collect()
}

/// The activation file of `org.botvisor.Botvisor1` and the program it starts (`Exec=`, or the
/// systemd unit of `SystemdService=`), if one is installed.
fn activation_file(dirs: &[PathBuf]) -> Option<(PathBuf, String)> {
    dirs.iter().find_map(|d| {
        let file = d.join("org.botvisor.Botvisor1.service");
        let text = std::fs::read_to_string(&file).ok()?;
        let exec = text
            .lines()
            .find_map(|l| l.strip_prefix("Exec="))
            .unwrap_or_default()
            .to_owned();
        let unit = text
            .lines()
            .find_map(|l| l.strip_prefix("SystemdService="))
            .map(|u| format!(" (systemd unit {u})"))
            .unwrap_or_default();
        Some((file, format!("{exec}{unit}")))
    })
}

/// What is wrong with the program of an activation file's `Exec=` line (split as the bus
/// splits it, by the shell's quoting rules), or `None` when it is an executable file (or a
/// systemd unit's `Exec` is not shown).
fn program_missing(exec: &str) -> Option<&'static str> {
    let line = exec.split(" (systemd unit ").next().unwrap_or_default();
    if line.trim().is_empty() {
        return None;
    }
    let Some(words) = shlex::split(line) else {
        return Some("the bus cannot split (unclosed quotes)");
    };
    let program = PathBuf::from(words.first()?);
    use std::os::unix::fs::PermissionsExt;
    match std::fs::metadata(&program) {
        Ok(m) if m.is_file() && m.permissions().mode() & 0o111 != 0 => None,
        Ok(_) => Some("is not an executable file"),
        Err(_) => Some("does not exist"),
    }
}

/// The checks of the bus and botvisord on it, and the running botvisord's process id.
async fn bus_checks(conn: &Connection, remote: bool) -> (Vec<Check>, Option<u32>) {
    let mut out = Vec::new();
    let mut daemon_pid = None;
    let dbus = match zbus::fdo::DBusProxy::new(conn).await {
        Ok(d) => d,
        Err(e) => {
            out.push(check(
                "bus",
                Status::Fail,
                format!("the bus does not answer ({})", show::safe(&e.to_string())),
                "check DBUS_SESSION_BUS_ADDRESS (or --address, --host)",
            ));
            return (out, None);
        }
    };
    out.push(check(
        "bus",
        Status::Ok,
        crate::hint::link().replace("the connection to ", ""),
        "",
    ));
    let name = zbus::names::BusName::try_from(BUS_NAME).expect("a bus name");
    let running = dbus.name_has_owner(name.clone()).await.unwrap_or(false);
    let activatable = dbus
        .list_activatable_names()
        .await
        .map(|names| names.iter().any(|n| n.as_str() == BUS_NAME))
        .unwrap_or(false);
    if running {
        let pid = dbus.get_connection_unix_process_id(name).await.ok();
        daemon_pid = pid.filter(|_| !remote);
        let exe = pid
            .filter(|_| !remote)
            .and_then(|p| std::fs::read_link(format!("/proc/{p}/exe")).ok())
            .map(|p| format!(", {}", show::safe(&p.display().to_string())))
            .unwrap_or_default();
        let manager = botvisor::dbus::client::ManagerProxy::new(conn).await.ok();
        let (version, survival) = match &manager {
            Some(m) => (
                m.version().await.unwrap_or_default(),
                m.survival().await.ok(),
            ),
            None => (String::new(), None),
        };
        let pid = pid.map_or(String::new(), |p| format!("pid {p}"));
        out.push(check(
            "botvisord",
            Status::Ok,
            format!(
                "running on the bus ({pid}{exe}), API version {}",
                show::safe(&version)
            ),
            "",
        ));
        if let Some(survival) = survival {
            out.push(restarts_check(&survival));
        }
    } else if activatable {
        out.push(check(
            "botvisord",
            Status::Ok,
            "not running; the bus starts it on the first call (D-Bus activation)".into(),
            "",
        ));
    } else {
        out.push(check(
            "botvisord",
            Status::Fail,
            "not running, and the bus cannot start it (ListActivatableNames lacks \
             org.botvisor.Botvisor1)"
                .into(),
            "run `botvisord`, or install it: scripts/install.sh (then `busctl --user call \
             org.freedesktop.DBus /org/freedesktop/DBus org.freedesktop.DBus ReloadConfig` if \
             the bus still does not list it)",
        ));
    }
    out.push(notifications_check(conn, &dbus).await);
    if !remote {
        let env = |k: &str| std::env::var(k).ok();
        match activation_file(&activation_dirs(&env)) {
            Some((file, exec)) if program_missing(&exec).is_some() => out.push(check(
                "activation",
                Status::Fail,
                format!(
                    "{} starts {}, which {}",
                    show::safe(&file.display().to_string()),
                    show::safe(&exec),
                    program_missing(&exec).unwrap_or_default()
                ),
                "scripts/install.sh again (it writes the program's path in quotes)",
            )),
            Some((file, exec)) if activatable => out.push(check(
                "activation",
                Status::Ok,
                format!(
                    "{} starts {}",
                    show::safe(&file.display().to_string()),
                    show::safe(&exec)
                ),
                "",
            )),
            Some((file, exec)) => out.push(check(
                "activation",
                Status::Fail,
                format!(
                    "{} (starting {}) is installed, but the bus has not read it",
                    show::safe(&file.display().to_string()),
                    show::safe(&exec)
                ),
                "busctl --user call org.freedesktop.DBus /org/freedesktop/DBus \
                 org.freedesktop.DBus ReloadConfig",
            )),
            None if activatable => out.push(check(
                "activation",
                Status::Ok,
                "the bus can start botvisord (its activation file is in a folder of its own)"
                    .into(),
                "",
            )),
            None => out.push(check(
                "activation",
                Status::Warn,
                "no activation file: botvisord runs only when started (by you, systemd or \
                 launchd)"
                    .into(),
                "scripts/install.sh installs one",
            )),
        }
    }
    (out, daemon_pid)
}

/// Whether the running turns outlive a restart of botvisord (an upgrade, a crash), from the
/// Manager's `Survival` (issue 47): `keep (…)` is fine; `off: <why>` is a warning whose fix says
/// how to get it.
fn restarts_check(survival: &str) -> Check {
    match survival.strip_prefix("off: ") {
        None => check(
            "restarts",
            Status::Ok,
            format!(
                "a restart, an upgrade or a crash of botvisord leaves the running turns going on \
                 {}",
                show::safe(survival.trim_start_matches("keep "))
            ),
            "",
        ),
        Some(why) => check(
            "restarts",
            Status::Warn,
            format!(
                "a restart of botvisord ends the running turns (each taken message is answered \
                 once by the next one): {}",
                show::safe(why)
            ),
            if why.contains("survive_restarts") {
                "survive_restarts = true in the configuration, then systemctl --user restart \
                 botvisord"
            } else {
                "run botvisord as the systemd user unit (scripts/install.sh), where a user \
                 manager runs"
            },
        ),
    }
}

/// The desktop's notification server (`org.freedesktop.Notifications`), which `botvisor-notify`
/// tells of bots that need their user (design rule 17): on the bus (its name and version, from
/// `GetServerInformation`), or startable by it, else a warning (optional: hooks work without it).
async fn notifications_check(conn: &Connection, dbus: &zbus::fdo::DBusProxy<'_>) -> Check {
    const NOTIFICATIONS: &str = "org.freedesktop.Notifications";
    const BOUND: std::time::Duration = std::time::Duration::from_secs(5);
    let name = zbus::names::BusName::try_from(NOTIFICATIONS).expect("a bus name");
    let owned = tokio::time::timeout(BOUND, dbus.name_has_owner(name))
        .await
        .is_ok_and(|r| r.unwrap_or(false));
    if owned {
        let info = tokio::time::timeout(
            BOUND,
            conn.call_method(
                Some(NOTIFICATIONS),
                "/org/freedesktop/Notifications",
                Some(NOTIFICATIONS),
                "GetServerInformation",
                &(),
            ),
        )
        .await;
        let found = match info {
            Ok(Ok(m)) => match m.body().deserialize::<(String, String, String, String)>() {
                Ok((server, vendor, version, _)) => format!(
                    "{} {} ({}) shows botvisor-notify's notifications",
                    show::safe(&server),
                    show::safe(&version),
                    show::safe(&vendor)
                ),
                Err(_) => "a notification server is on the bus".to_owned(),
            },
            Ok(Err(e)) => {
                return check(
                    "notifications",
                    Status::Warn,
                    format!(
                        "a notification server is on the bus but refuses GetServerInformation ({})",
                        show::safe(&e.to_string())
                    ),
                    "restart your desktop's notification server",
                );
            }
            Err(_) => {
                return check(
                    "notifications",
                    Status::Warn,
                    format!(
                        "a notification server is on the bus but did not answer within {}s: \
                         botvisor-notify's notifications wait for it",
                        BOUND.as_secs()
                    ),
                    "restart your desktop's notification server",
                );
            }
        };
        return check("notifications", Status::Ok, found, "");
    }
    let activatable = tokio::time::timeout(BOUND, dbus.list_activatable_names())
        .await
        .is_ok_and(|r| r.is_ok_and(|names| names.iter().any(|n| n.as_str() == NOTIFICATIONS)));
    if activatable {
        return check(
            "notifications",
            Status::Ok,
            "no notification server runs; the bus starts one at the first notification".into(),
            "",
        );
    }
    check(
        "notifications",
        Status::Warn,
        "no notification server on this bus: botvisor-notify shows nothing on the desktop (its \
         hooks still run)"
            .into(),
        "start your desktop's notification server (or dunst, mako, …) in this session; to use \
         hooks alone, `[notify] desktop = false` in config.toml",
    )
}

/// The botvisord whose view the CLI checks take: the one running on the bus (its binary, its
/// environment and its `--config`, read from `/proc`), else this shell's (the environment a
/// botvisord started here would have).
pub struct DaemonView {
    /// Its binary (`botvisord` on `PATH` when none runs).
    pub exe: PathBuf,
    /// Its environment.
    pub env: BTreeMap<String, String>,
    /// Its configuration file.
    pub config: PathBuf,
    /// Whether it is the running daemon's.
    pub running: bool,
    /// Its state folder: its database's (`--database`), else `$XDG_STATE_HOME/botvisor`.
    pub state: PathBuf,
    /// Whether the state folder was given (`--database`): used as it is, so only a warning.
    pub state_given: bool,
}

impl DaemonView {
    /// The view of the botvisord with process id `pid` (this machine, this user), if `/proc`
    /// tells it.
    fn of_process(pid: u32) -> Option<DaemonView> {
        let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok()?;
        let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
        let env = environ
            .split(|b| *b == 0)
            .filter_map(|kv| std::str::from_utf8(kv).ok()?.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect::<BTreeMap<_, _>>();
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let args: Vec<String> = cmdline
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let config = args
            .iter()
            .position(|a| a == "--config")
            .and_then(|i| args.get(i + 1).map(PathBuf::from))
            .or_else(|| {
                args.iter()
                    .find_map(|a| a.strip_prefix("--config=").map(PathBuf::from))
            })
            .unwrap_or_else(|| config_for(&env));
        let given = args
            .iter()
            .position(|a| a == "--database")
            .and_then(|i| args.get(i + 1))
            .and_then(|db| Path::new(db).parent().map(Path::to_path_buf));
        let state_given = given.is_some();
        let state =
            given.unwrap_or_else(
                || match env.get("XDG_STATE_HOME").filter(|v| !v.is_empty()) {
                    Some(d) => Path::new(d).join("botvisor"),
                    None => Path::new(env.get("HOME").map_or("", String::as_str))
                        .join(".local/state/botvisor"),
                },
            );
        Some(DaemonView {
            exe,
            env,
            config,
            running: true,
            state,
            state_given,
        })
    }

    /// The view of a botvisord started from this shell.
    fn here() -> DaemonView {
        let env: BTreeMap<String, String> = std::env::vars().collect();
        let exe = std::env::current_exe()
            .ok()
            .and_then(|me| me.parent().map(|d| d.join("botvisord")))
            .filter(|p| p.is_file())
            .or_else(|| {
                botvisor::runtime::find_on_path("botvisord", std::env::var_os("PATH").as_deref())
            })
            .unwrap_or_else(|| PathBuf::from("botvisord"));
        DaemonView {
            exe,
            config: paths::default_config(),
            env,
            running: false,
            state: paths::state_dir(),
            state_given: false,
        }
    }
}

/// The default configuration file of a botvisord with environment `env`.
fn config_for(env: &BTreeMap<String, String>) -> PathBuf {
    match env.get("XDG_CONFIG_HOME").filter(|v| !v.is_empty()) {
        Some(d) => Path::new(d).join("botvisor/config.toml"),
        None => Path::new(env.get("HOME").map_or("", String::as_str))
            .join(".config/botvisor/config.toml"),
    }
}

/// What `--check-config` says of one runtime: its binary, or `(is_error, words)`.
type Seen = Result<String, (bool, String)>;

/// What `botvisord --check-config` says of each runtime, run as `view`'s botvisord (its
/// binary, environment and configuration): `(runtime, Ok(binary) | Err((is_error, words)))`.
fn runtimes_seen(view: &DaemonView) -> Vec<(String, Seen)> {
    let mut cmd = std::process::Command::new(&view.exe);
    cmd.arg("--check-config");
    // A file named with --config must exist; the default one may be missing.
    if view.config.exists() {
        cmd.arg("--config").arg(&view.config);
    }
    let out = cmd
        .env_clear()
        .envs(&view.env)
        .stdin(std::process::Stdio::null())
        .output();
    let text = match out {
        Ok(o) => String::from_utf8_lossy(&o.stdout).into_owned(),
        Err(_) => String::new(),
    };
    text.lines()
        .filter_map(|l| l.strip_prefix("runtime "))
        .filter_map(|l| l.split_once(": "))
        .map(|(name, said)| {
            let seen = if let Some(w) = said.strip_prefix("error: ") {
                Err((true, w.to_owned()))
            } else if let Some(w) = said.strip_prefix("warning: ") {
                Err((false, w.to_owned()))
            } else {
                Ok(said.to_owned())
            };
            (name.to_owned(), seen)
        })
        .collect()
}

/// The checks of this machine's files, as `view`'s botvisord sees them: its configuration, the
/// state folder, each CLI and its login.
fn file_checks(view: &DaemonView) -> Vec<Check> {
    let mut out = Vec::new();
    let whose = if view.running {
        "the running botvisord"
    } else {
        "a botvisord started here"
    };
    let config_path = view.config.clone();
    let config = match Config::load(&config_path, false) {
        Ok(c) => {
            let found = if config_path.exists() {
                format!("{} is valid", config_path.display())
            } else {
                format!("no {}: every default applies", config_path.display())
            };
            out.push(check("config", Status::Ok, show::safe(&found), ""));
            c
        }
        Err(e) => {
            out.push(check(
                "config",
                Status::Fail,
                show::safe(&e.to_string()),
                format!(
                    "edit {} (docs/configuration.md; `botvisord --check-config` checks it)",
                    config_path.display()
                ),
            ));
            Config::default()
        }
    };
    let state = view.state.clone();
    match std::fs::metadata(&state) {
        Ok(m) if !m.is_dir() => out.push(check(
            "state folder",
            Status::Fail,
            format!(
                "{} is a file, not a folder: botvisord cannot keep its database there",
                show::safe(&state.display().to_string())
            ),
            format!(
                "move it away: mv {0} {0}.old",
                crate::shell_word(&state.display().to_string())
            ),
        )),
        Ok(m) => {
            use std::os::unix::fs::PermissionsExt;
            let mode = m.permissions().mode() & 0o777;
            if mode & 0o077 == 0 {
                out.push(check(
                    "state folder",
                    Status::Ok,
                    format!(
                        "{} is private ({mode:o})",
                        show::safe(&state.display().to_string())
                    ),
                    "",
                ));
            } else {
                out.push(check(
                    "state folder",
                    // The default folder is botvisord's to keep private; one given with
                    // --database is used as it is.
                    if view.state_given {
                        Status::Warn
                    } else {
                        Status::Fail
                    },
                    format!(
                        "{} is open to other users ({mode:o}): it holds every conversation",
                        show::safe(&state.display().to_string())
                    ),
                    format!(
                        "chmod 700 {}",
                        crate::shell_word(&state.display().to_string())
                    ),
                ));
            }
        }
        Err(_) => out.push(check(
            "state folder",
            Status::Ok,
            format!(
                "{} is not there yet; botvisord creates it private (700)",
                show::safe(&state.display().to_string())
            ),
            "",
        )),
    }
    let env = &view.env;
    let key = |name: &str| env.get(name).is_some_and(|v| !v.is_empty());
    // What of it a bot's agent inherits (config `env_allowlist`).
    let inherited: BTreeMap<String, String> = env
        .iter()
        .filter(|(k, _)| config.env_allowed(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let seen = runtimes_seen(view);
    let binary = |name: &str| seen.iter().find(|(n, _)| n == name).map(|(_, s)| s.clone());
    let mut usable = 0;
    // Claude Code: found, and logged in or given a key.
    match binary("claude") {
        Some(Ok(bin)) => {
            usable += 1;
            out.push(check(
                "claude",
                Status::Ok,
                format!("{whose} runs {}", show::safe(&bin)),
                "",
            ));
            let claude = botvisor::runtime::claude::Claude::new(None);
            // botvisord's own login, which a bot without one of its own inherits: a warning
            // when missing (bots with a key of their own answer all the same: each bot's line
            // below judges it, issue 46).
            let login = claude.login(&BTreeMap::new(), &inherited);
            if login.found() {
                out.push(check(
                    "claude login",
                    Status::Ok,
                    format!("{whose}'s bots inherit: {}", show::safe(&login.words())),
                    "",
                ));
            } else {
                out.push(check(
                    "claude login",
                    Status::Warn,
                    format!(
                        "{whose} gives its bots {}: a Claude Code bot needs a key in its own \
                         environment, or it waits in login_required",
                        show::safe(&login.words())
                    ),
                    "claude /login (or give each bot a key: botvisorctl create --env \
                     ANTHROPIC_API_KEY=…)",
                ));
            }
        }
        Some(Err((error, words))) => out.push(check(
            "claude",
            if error { Status::Fail } else { Status::Warn },
            show::safe(&words),
            "npm install -g @anthropic-ai/claude-code, then claude_bin in config.toml (a \
             service does not see your shell's PATH)",
        )),
        None => out.push(check(
            "claude",
            Status::Fail,
            format!(
                "cannot ask {} --check-config which binary it runs",
                show::safe(&view.exe.display().to_string())
            ),
            "fix what `botvisord --check-config` names in the configuration (see the config \
             line above); if it runs at all, reinstall botvisor (scripts/install.sh)",
        )),
    }
    // Codex: found (the native binary, not npm's Node wrapper), and logged in or given a key.
    match binary("codex") {
        Some(Ok(native)) => {
            usable += 1;
            let on_path =
                botvisor::runtime::find_on_path("codex", env.get("PATH").map(std::ffi::OsStr::new));
            let wrapper = config.codex_bin.is_none()
                && !key(botvisor::runtime::codex::BIN_ENV)
                && on_path.as_ref().is_some_and(|p| {
                    std::fs::canonicalize(p).ok() != std::fs::canonicalize(&native).ok()
                });
            match (wrapper, view.running) {
                (true, false) => out.push(check(
                    "codex",
                    Status::Warn,
                    format!(
                        "`codex` on PATH is npm's Node wrapper; botvisord runs the native binary \
                         it runs, {}, but a service started by the bus or systemd does not see \
                         this PATH",
                        show::safe(&native)
                    ),
                    format!("add to {}: codex_bin = \"{native}\"", config_path.display()),
                )),
                (true, true) => out.push(check(
                    "codex",
                    Status::Ok,
                    format!(
                        "`codex` on its PATH is npm's Node wrapper; {whose} runs the native binary \
                         it runs, {}",
                        show::safe(&native)
                    ),
                    "",
                )),
                _ => out.push(check(
                    "codex",
                    Status::Ok,
                    format!("{whose} runs {}", show::safe(&native)),
                    "",
                )),
            }
            // The login of a Codex bot without a CODEX_HOME of its own (each bot's line below
            // judges its own): only a warning, for Codex bots only.
            let codex = botvisor::runtime::codex::Codex::new(None);
            let login = codex.login(&BTreeMap::new(), &inherited);
            if login.found() {
                out.push(check(
                    "codex login",
                    Status::Ok,
                    format!("{whose}'s bots inherit: {}", show::safe(&login.words())),
                    "",
                ));
            } else {
                out.push(check(
                    "codex login",
                    Status::Warn,
                    format!(
                        "{whose} gives its Codex bots {}",
                        show::safe(&login.words())
                    ),
                    "codex login (or give each Codex bot a CODEX_HOME of its own that is logged \
                     in, or the key its model provider's env_key names)",
                ));
            }
        }
        Some(Err((error, words))) => out.push(check(
            "codex",
            if error { Status::Fail } else { Status::Warn },
            show::safe(&words),
            "npm install -g @openai/codex, then codex_bin in config.toml (docs/install.md#codex)",
        )),
        None => {}
    }
    if usable == 0 {
        out.push(check(
            "runtimes",
            Status::Fail,
            format!("{whose} can run neither Claude Code nor Codex: no bot can start"),
            "install one (see the claude and codex lines above)",
        ));
    }
    out
}

/// Each bot's login, as the running botvisord judges it (`GetLogin`): a bot without one fails,
/// naming what it lacks and how to give it one; none when botvisord is not running (or too old
/// to tell).
async fn bot_logins(conn: &Connection) -> Vec<Check> {
    let Ok(bots) = crate::bots::all(conn).await else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for b in bots {
        let Ok(path) = zbus::OwnedObjectPath::try_from(b.path.as_str()) else {
            continue;
        };
        let Ok(proxy) = crate::bots::proxy(conn, path).await else {
            continue;
        };
        let Ok(login) = proxy.get_login(std::collections::HashMap::new()).await else {
            continue;
        };
        let what = format!("login {}", show::safe(&b.name));
        let words = show::safe(login.get("words").map_or("", String::as_str));
        let found = format!("{} ({}): {words}", b.short, b.runtime);
        let bot = crate::shell_word(&b.name);
        let ctl = crate::hint::ctl();
        let source = login.get("source").map_or("none", String::as_str);
        if b.state == "login_required" && source != "none" {
            // A login there is, and the model's API refused it: the bot waits for a new one.
            let waiting = match b.queued_messages {
                0 => String::new(),
                1 => "; 1 message waits for it".to_owned(),
                n => format!("; {n} messages wait for it"),
            };
            let variable = login.get("variable").map_or("", String::as_str);
            let fix = match (source, b.runtime.as_str()) {
                ("environment", _) => {
                    format!(
                        "`{ctl} set {bot} --env {variable}=…` with a new value (its other variables are kept)"
                    )
                }
                ("botvisord", _) => format!(
                    "a new {variable} in botvisord's environment, or `{ctl} set {bot} --env {variable}=…`"
                ),
                (_, "claude") => "claude /login as botvisord's user".to_owned(),
                (_, "codex") => "codex login with the bot's CODEX_HOME".to_owned(),
                _ => format!("`{ctl} restart {bot}` once its login is renewed"),
            };
            out.push(check(
                what,
                Status::Fail,
                format!(
                    "{} ({}): the model's API refused its login ({words}){waiting}",
                    b.short, b.runtime
                ),
                fix,
            ));
            continue;
        }
        if source != "none" {
            out.push(check(what, Status::Ok, found, ""));
            continue;
        }
        let variables: Vec<&str> = login
            .get("variables")
            .map(|v| v.split(',').filter(|v| !v.is_empty()).collect())
            .unwrap_or_default();
        let key = match (b.runtime.as_str(), variables.as_slice()) {
            ("claude", _) => "ANTHROPIC_API_KEY".to_owned(),
            (_, [first, ..]) => (*first).to_owned(),
            _ => String::new(),
        };
        let login_first = match b.runtime.as_str() {
            "claude" => "claude /login as botvisord's user, or ".to_owned(),
            "codex" if key.is_empty() => "codex login with the bot's CODEX_HOME".to_owned(),
            _ => String::new(),
        };
        let give = if key.is_empty() {
            String::new()
        } else {
            format!("`{ctl} set {bot} --env {key}=…` (its other variables are kept)")
        };
        out.push(check(
            what,
            Status::Fail,
            found,
            format!("{login_first}{give}"),
        ));
    }
    out
}

/// `doctor`: every check, then exit 0 when none failed, else 1.
pub async fn run(
    conn: Result<Connection, Failure>,
    remote: bool,
    json: bool,
) -> Result<u8, Failure> {
    let (mut checks, pid) = match &conn {
        Ok(conn) => bus_checks(conn, remote).await,
        Err(f) => (
            vec![check(
                "bus",
                Status::Fail,
                f.text.clone(),
                "start a session bus (a desktop login has one; `dbus-run-session -- $SHELL` in \
                 a terminal), or name one with --address",
            )],
            None,
        ),
    };
    if !remote {
        let view = pid
            .and_then(DaemonView::of_process)
            .unwrap_or_else(DaemonView::here);
        checks.extend(file_checks(&view));
    }
    if let Ok(conn) = &conn {
        checks.extend(bot_logins(conn).await);
    }
    for c in &checks {
        if json {
            json_line!(json!({
                "check": c.what,
                "status": match c.status { Status::Ok => "ok", Status::Warn => "warn", Status::Fail => "fail" },
                "found": c.found,
                "fix": c.fix,
            }));
            continue;
        }
        let mark = match c.status {
            Status::Ok => paint(GOOD, "ok  "),
            Status::Warn => paint(WARN, "warn"),
            Status::Fail => paint(ERROR, "FAIL"),
        };
        outln!("{mark} {}: {}", c.what, c.found);
        if !c.fix.is_empty() && c.status != Status::Ok {
            outln!("     fix: {}", c.fix);
        }
    }
    let failed = checks.iter().filter(|c| c.status == Status::Fail).count();
    if !json {
        if remote {
            outln!("(this machine's files are not checked over --host: run doctor there)");
        }
        match failed {
            0 => outln!("{}", paint(GOOD, "all checks passed")),
            n => outln!("{}", paint(ERROR, &format!("{n} check(s) failed"))),
        }
    }
    Ok(if failed == 0 { OK } else { FAILED })
}

#[cfg(test)]
mod tests {
    use super::program_missing;

    #[test]
    fn an_activation_files_program_is_split_as_the_bus_splits_it() {
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().join("my dir's");
        std::fs::create_dir_all(&folder).unwrap();
        let program = folder.join("botvisord");
        std::fs::write(&program, "#!/bin/sh\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
        let p = program.display();
        assert_eq!(
            program_missing(&format!("\"{p}\" --log-file \"/x y\"")),
            None
        );
        // What install.sh wrote before it quoted: the bus cannot split it.
        assert!(program_missing(&format!("{p} --log-file /x")).is_some());
        assert_eq!(
            program_missing("/nonexistent/botvisord"),
            Some("does not exist")
        );
        assert_eq!(program_missing(" (systemd unit botvisord.service)"), None);
    }
}
