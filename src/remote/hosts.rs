//! The hosts a user names (issue 51): the file that lists them, shared by botvisorctl (`hosts
//! add|rm|list`, `--host NAME`, `--all-hosts`) and botvisor-notify (`--all-hosts`).
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

use super::address;

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

    /// The D-Bus address it stands for: its `address`, or its `host` over ssh (the ssh
    /// program from `env`'s [`address::SSH_ENV`]). Errors: why it does not parse, naming the entry and
    /// the file.
    pub fn bus_address(
        &self,
        env: impl Fn(&str) -> Option<OsString>,
    ) -> Result<zbus::Address, String> {
        let got = match (&self.address, &self.host) {
            (Some(a), _) => address::parse(a),
            (None, Some(h)) => address::ssh_address(h, address::ssh_program(env)),
            (None, None) => Err("it names neither a host nor an address".to_owned()),
        };
        got.map_err(|why| format!("host {} in {}: {why}", self.name, config_path().display()))
    }
}

/// The hosts file's content.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostsFile {
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

/// Why the hosts file could not be taken.
#[derive(Debug, Clone, PartialEq)]
pub enum HostsError {
    /// It exists but cannot be read: why, naming the file.
    Unreadable(String),
    /// It is not a valid list of hosts: why, naming the file and the entry.
    Invalid(String),
}

impl std::fmt::Display for HostsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HostsError::Unreadable(s) | HostsError::Invalid(s) => f.write_str(s),
        }
    }
}

/// The file's hosts ([`config_path`]); none when the file does not exist. Errors: a file that
/// cannot be read, or is not such a list, or an entry that is not valid ([`check_entry`]), or a
/// name given twice, naming the file.
pub fn read() -> Result<HostsFile, HostsError> {
    let path = config_path();
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(HostsFile::default()),
        Err(e) => {
            return Err(HostsError::Unreadable(format!(
                "cannot read {}: {e}",
                path.display()
            )));
        }
    };
    let file: HostsFile = toml::from_str(&text)
        .map_err(|e| HostsError::Invalid(format!("{} is not valid: {e}", path.display())))?;
    let mut seen = std::collections::HashSet::new();
    for h in &file.hosts {
        check_entry(h).map_err(|why| HostsError::Invalid(format!("{}: {why}", path.display())))?;
        if !seen.insert(h.name.to_ascii_lowercase()) {
            return Err(HostsError::Invalid(format!(
                "{}: the host name {} is given twice",
                path.display(),
                h.name
            )));
        }
    }
    Ok(file)
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
            "the host name \"{}\" begins with a letter or a digit and holds only letters, \
             digits, '-', '_' and '.'",
            crate::text::escape(&name.chars().take(80).collect::<String>(), false)
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
pub fn check_entry(h: &HostEntry) -> Result<(), String> {
    check_name(&h.name)?;
    if h.host.is_some() == h.address.is_some() {
        return Err(format!(
            "host {} needs exactly one of `host` and `address`",
            h.name
        ));
    }
    let got = match (&h.address, &h.host) {
        (Some(a), _) => address::parse(a).map(|_| ()),
        (None, Some(host)) => address::check_destination(host),
        (None, None) => Ok(()),
    };
    got.map_err(|why| format!("host {}: {why}", h.name))
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
