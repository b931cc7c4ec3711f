//! Issue 51: the hosts botvisorctl knows by name, its configuration file, and `botvisorctl hosts
//! add|rm|list`.
//!
//! The file is `$XDG_CONFIG_HOME/botvisor/botvisorctl.toml` (`~/.config/…` without it), or what
//! `BOTVISORCTL_CONFIG` names; a list of tables, each a name and what it stands for, a host for
//! ssh or a D-Bus address:
//!
//! ```toml
//! [[hosts]]
//! name = "buildbox"
//! host = "me@buildbox"
//!
//! [[hosts]]
//! name = "lab"
//! address = "unixexec:path=ssh,argv1=-xT,argv2=--,argv3=lab,argv4=systemd-stdio-bridge"
//! ```
//!
//! The local bus is the host `local` (not in the file, and no entry may take its name).

use std::ffi::OsString;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::json;

use super::connect::Bus;
use super::fail::{Failure, OK};
use super::show;

/// The name of the bus botvisorctl reaches with no `--host` and no `--address`.
pub const LOCAL: &str = "local";

/// The variable naming another configuration file.
pub const CONFIG_ENV: &str = "BOTVISORCTL_CONFIG";

/// The most bytes a host's name may have.
const MAX_NAME: usize = 64;

/// One host of the file: its name and what it stands for (exactly one of `host`, `address`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostEntry {
    /// What rows and commands call it (`buildbox:demo`).
    pub name: String,
    /// `[USER@]HOST` for ssh, as `--host` takes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// A D-Bus address, as `--address` takes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
}

impl HostEntry {
    /// What it stands for, as written.
    pub fn target(&self) -> &str {
        self.host
            .as_deref()
            .or(self.address.as_deref())
            .unwrap_or_default()
    }

    /// Its bus. Errors: a malformed host or address (a usage error naming the entry).
    pub fn bus(&self, env: impl Fn(&str) -> Option<OsString>) -> Result<Bus, Failure> {
        Bus::choose(self.address.as_deref(), self.host.as_deref(), env).map_err(|f| {
            Failure::usage(format!(
                "host {} in {}: {}",
                self.name,
                config_path().display(),
                f.text
            ))
        })
    }
}

/// The configuration file's content.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The hosts, in the order they were added.
    #[serde(default)]
    pub hosts: Vec<HostEntry>,
}

/// Where the configuration file is.
pub fn config_path() -> PathBuf {
    if let Some(p) = std::env::var_os(CONFIG_ENV).filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".config")
        });
    base.join("botvisor").join("botvisorctl.toml")
}

/// The file's hosts; none when the file does not exist. Errors: a file that cannot be read or
/// is not such a list, or an entry that is not valid ([`check_entry`]), naming the file.
pub fn load() -> Result<Config, Failure> {
    let path = config_path();
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Config::default()),
        Err(e) => {
            return Err(Failure::failed(format!(
                "cannot read {}: {e}",
                path.display()
            )));
        }
    };
    let config: Config = toml::from_str(&text)
        .map_err(|e| Failure::usage(format!("{} is not valid: {e}", path.display())))?;
    let mut seen = std::collections::HashSet::new();
    for h in &config.hosts {
        check_entry(h).map_err(|why| Failure::usage(format!("{}: {why}", path.display())))?;
        if !seen.insert(h.name.as_str()) {
            return Err(Failure::usage(format!(
                "{}: the host name {} is given twice",
                path.display(),
                h.name
            )));
        }
    }
    Ok(config)
}

/// Changes the file (the file a link names, when it is a link) with `change` under a lock (an exclusive `flock` of `botvisorctl.toml.lock`
/// beside it: two `hosts add` at once both land), written whole through a file beside it renamed
/// over it (never half written), with the mode the file had (0600 for a new one). The file is
/// written as botvisorctl writes TOML: comments in it are not kept. Errors: the file or the
/// lock cannot be read or written; what `change` refuses (nothing is written then).
fn change(change: impl FnOnce(&mut Config) -> Result<(), Failure>) -> Result<(), Failure> {
    use std::os::unix::fs::PermissionsExt;
    // A file that is a link (dotfiles kept elsewhere) is changed where it is.
    let path = std::fs::canonicalize(config_path()).unwrap_or_else(|_| config_path());
    let failed =
        |e: std::io::Error| Failure::failed(format!("cannot write {}: {e}", path.display()));
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(failed)?;
    }
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path.with_extension("toml.lock"))
        .map_err(failed)?;
    // SAFETY: flock(2) on a descriptor we own; the lock ends when `lock` is closed.
    if unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&lock), libc::LOCK_EX) } != 0 {
        return Err(failed(std::io::Error::last_os_error()));
    }
    let mut config = load()?;
    change(&mut config)?;
    let text = toml::to_string(&config)
        .map_err(|e| Failure::failed(format!("cannot write the hosts: {e}")))?;
    let mode = std::fs::metadata(&path).map_or(0o600, |m| m.permissions().mode() & 0o7777);
    let tmp = path.with_extension(format!("toml.{}.new", std::process::id()));
    std::fs::write(&tmp, text).map_err(failed)?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode)).map_err(failed)?;
    std::fs::rename(&tmp, &path).map_err(failed)
}

/// Why `name` cannot name a host, if it cannot: empty, longer than 64 bytes, not beginning with
/// an ASCII letter or digit, holding anything but ASCII letters, digits, `-`, `_` and `.`, or
/// `local` in any case.
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_NAME {
        return Err(format!("a host's name has 1 to {MAX_NAME} characters"));
    }
    if !name.starts_with(|c: char| c.is_ascii_alphanumeric())
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
    {
        return Err(format!(
            "the host name {:?} begins with a letter or a digit and holds only letters, \
             digits, '-', '_' and '.'",
            show::safe(&show::cut(name, 80))
        ));
    }
    if name.eq_ignore_ascii_case(LOCAL) {
        return Err(format!(
            "{LOCAL} is the local bus's name and cannot be given to another host"
        ));
    }
    Ok(())
}

/// Why `h` is not a valid entry, if it is not: its name ([`check_name`]), not exactly one of
/// `host` and `address`, or one that does not parse.
fn check_entry(h: &HostEntry) -> Result<(), String> {
    check_name(&h.name)?;
    if h.host.is_some() == h.address.is_some() {
        return Err(format!(
            "host {} needs exactly one of `host` and `address`",
            h.name
        ));
    }
    Bus::choose(h.address.as_deref(), h.host.as_deref(), |k| {
        std::env::var_os(k)
    })
    .map(|_| ())
    .map_err(|f| format!("host {}: {}", h.name, f.text))
}

/// `hosts add NAME TARGET`: TARGET is a D-Bus address when it begins with a transport's name
/// and a colon (`unix:`, `unixexec:`, `tcp:`, …), else `[USER@]HOST` for ssh. Errors: a name
/// taken or not valid, a target that does not parse; nothing is written then.
pub fn add(name: &str, target: &str, json: bool) -> Result<u8, Failure> {
    let is_address = [
        "unix:",
        "unixexec:",
        "tcp:",
        "nonce-tcp:",
        "launchd:",
        "vsock:",
    ]
    .iter()
    .any(|t| target.starts_with(t));
    let entry = HostEntry {
        name: name.to_owned(),
        host: (!is_address).then(|| target.to_owned()),
        address: is_address.then(|| target.to_owned()),
    };
    check_entry(&entry).map_err(Failure::usage)?;
    change(|config| {
        if config.hosts.iter().any(|h| h.name == name) {
            return Err(Failure::usage(format!(
                "there is a host named {name} already; `hosts rm {name}` first"
            )));
        }
        config.hosts.push(entry.clone());
        Ok(())
    })?;
    if json {
        json_line!(entry_json(&entry));
    } else {
        outln!(
            "added host {name}: {} (in {})",
            show::safe(target),
            config_path().display()
        );
    }
    Ok(OK)
}

/// `hosts rm NAME`. Errors: no such host (nothing is written).
pub fn remove(name: &str, json: bool) -> Result<u8, Failure> {
    if name == LOCAL {
        return Err(Failure::usage(format!(
            "{LOCAL} is this machine's bus, not a named host: it cannot be removed"
        )));
    }
    change(|config| {
        let before = config.hosts.len();
        config.hosts.retain(|h| h.name != name);
        if config.hosts.len() == before {
            return Err(Failure::failed(format!(
                "no host named {}; `hosts list` shows them",
                show::safe(name)
            )));
        }
        Ok(())
    })?;
    if json {
        json_line!(json!({"removed": name}));
    } else {
        outln!("removed host {name}");
    }
    Ok(OK)
}

/// `hosts list`: `local` first, then the file's hosts in order.
pub fn list(json: bool) -> Result<u8, Failure> {
    let config = load()?;
    if json {
        json_line!(json!({"name": LOCAL, "host": null, "address": null, "local": true}));
        for h in &config.hosts {
            json_line!(entry_json(h));
        }
        return Ok(OK);
    }
    let mut rows = vec![vec![
        LOCAL.to_owned(),
        "this machine's session bus".to_owned(),
    ]];
    rows.extend(config.hosts.iter().map(|h| {
        let what = match &h.host {
            Some(host) => format!("ssh {host}"),
            None => h.target().to_owned(),
        };
        vec![h.name.clone(), show::safe(&what)]
    }));
    for line in super::list::table(&["HOST", "STANDS FOR"], rows) {
        outln!("{line}");
    }
    Ok(OK)
}

fn entry_json(h: &HostEntry) -> serde_json::Value {
    json!({"name": h.name, "host": h.host, "address": h.address, "local": false})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_letters_digits_and_three_marks_and_never_local() {
        assert!(check_name("build-box_2.lan").is_ok());
        for bad in [
            "",
            "local",
            "LOCAL",
            "-",
            "..",
            ".hidden",
            "a b",
            "a:b",
            "é",
            &"x".repeat(65),
        ] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn an_entry_stands_for_exactly_one_thing() {
        let e = |host: Option<&str>, address: Option<&str>| HostEntry {
            name: "b".into(),
            host: host.map(Into::into),
            address: address.map(Into::into),
        };
        assert!(check_entry(&e(Some("me@box"), None)).is_ok());
        assert!(check_entry(&e(None, Some("unix:path=/run/x"))).is_ok());
        assert!(check_entry(&e(None, None)).is_err());
        assert!(check_entry(&e(Some("box"), Some("unix:path=/x"))).is_err());
        assert!(check_entry(&e(None, Some("not an address"))).is_err());
        for bad in [
            "-oProxyCommand=x",
            "me@-oX",
            "host:22",
            "unixexe:path=/bin/sh",
            "a b",
        ] {
            assert!(check_entry(&e(Some(bad), None)).is_err(), "{bad}");
        }
        assert!(check_entry(&e(Some(&"h".repeat(254)), None)).is_err());
        assert!(check_entry(&e(Some("me@[::1]"), None)).is_ok());
    }
}
