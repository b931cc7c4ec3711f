//! Issue 51: `botvisorctl hosts add|rm|list`, over the hosts file botvisorctl and
//! botvisor-notify share ([`botvisor::remote::hosts`]: where it is, what it holds, what a
//! valid entry is).

use std::ffi::OsString;

use serde_json::json;

pub use botvisor::remote::hosts::{HostEntry, HostsFile as Config, LOCAL, config_path};
use botvisor::remote::hosts::{HostsError, check_entry};

use super::connect::Bus;
use super::fail::{Failure, OK};
use super::show;

/// `h`'s bus. Errors: a malformed host or address (a usage error naming the entry).
pub fn bus_of(h: &HostEntry, env: impl Fn(&str) -> Option<OsString>) -> Result<Bus, Failure> {
    let bus = match &h.address {
        Some(a) => Bus::from_hosts_file(a),
        None => Bus::choose(None, h.host.as_deref(), env),
    };
    bus.map_err(|f| {
        Failure::usage(format!(
            "host {} in {}: {}",
            h.name,
            config_path().display(),
            f.text
        ))
    })
}

/// The file's hosts ([`botvisor::remote::hosts::read`]). Errors: a file that cannot be read
/// (exit 1), or not valid (a usage error, exit 2), naming the file.
pub fn load() -> Result<Config, Failure> {
    botvisor::remote::hosts::read().map_err(|e| match e {
        HostsError::Unreadable(why) => Failure::failed(why),
        HostsError::Invalid(why) => Failure::usage(why),
    })
}

/// Changes the file (the file a link names, when it is a link) with `change` under a lock (an
/// exclusive `flock` of `botvisorctl.toml.lock` beside it: two `hosts add` at once both land),
/// written whole through a file beside it renamed over it (never half written), with the mode
/// the file had (0600 for a new one). `change` is given the hosts as they are (valid) and the
/// file as a document it edits in place ([`toml_edit`]): what the change does not touch, the
/// user's comments and layout included, is kept. Errors: the file or the lock cannot be read or
/// written; what `change` refuses (nothing is written then).
fn change(
    change: impl FnOnce(&Config, &mut toml_edit::DocumentMut) -> Result<(), Failure>,
) -> Result<(), Failure> {
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
    let config = load()?;
    let was = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(failed(e)),
    };
    let mut doc: toml_edit::DocumentMut = was
        .parse()
        .map_err(|e| Failure::usage(format!("{} is not valid: {e}", path.display())))?;
    change(&config, &mut doc)?;
    let text = doc.to_string();
    let mode = std::fs::metadata(&path).map_or(0o600, |m| m.permissions().mode() & 0o7777);
    let tmp = path.with_extension(format!("toml.{}.new", std::process::id()));
    std::fs::write(&tmp, text).map_err(failed)?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode)).map_err(failed)?;
    std::fs::rename(&tmp, &path).map_err(failed)
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
    change(|config, doc| {
        // Names differ by more than case: `beta` and `BETA` would be one host to a person.
        if let Some(h) = config
            .hosts
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
        {
            return Err(Failure::usage(format!(
                "there is a host named {} already; `hosts rm {}` first",
                h.name, h.name
            )));
        }
        add_to(doc, &entry).map_err(Failure::usage)
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
    change(|config, doc| {
        if !config.hosts.iter().any(|h| h.name == name) {
            return Err(Failure::failed(format!(
                "no host named {}; `hosts list` shows them",
                show::safe(name)
            )));
        }
        remove_from(doc, name);
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

/// Adds `entry` to the hosts of `doc`, last, in the form the file has them in (`[[hosts]]`
/// tables, or an inline `hosts = [...]`). Errors: a `hosts` that is neither (said so).
fn add_to(doc: &mut toml_edit::DocumentMut, entry: &HostEntry) -> Result<(), String> {
    let hosts = doc
        .entry("hosts")
        .or_insert(toml_edit::Item::ArrayOfTables(Default::default()));
    let fields = [
        ("name", Some(&entry.name)),
        ("host", entry.host.as_ref()),
        ("address", entry.address.as_ref()),
    ];
    if let Some(tables) = hosts.as_array_of_tables_mut() {
        let mut t = toml_edit::Table::new();
        for (k, v) in fields {
            if let Some(v) = v {
                t[k] = toml_edit::value(v.as_str());
            }
        }
        tables.push(t);
        return Ok(());
    }
    if let Some(list) = hosts.as_array_mut() {
        let mut t = toml_edit::InlineTable::new();
        for (k, v) in fields {
            if let Some(v) = v {
                t.insert(k, v.as_str().into());
            }
        }
        list.push(t);
        return Ok(());
    }
    Err("`hosts` in the file is not a list of tables".into())
}

/// Removes every host named `name` from `doc` (in either form [`add_to`] takes). The comments
/// and blank lines before a removed `[[hosts]]` table (a file's header, above its first host)
/// go to what follows it, not away.
fn remove_from(doc: &mut toml_edit::DocumentMut, name: &str) {
    let named = |v: Option<&toml_edit::Value>| v.and_then(|v| v.as_str()) == Some(name);
    let prefix = |d: &toml_edit::Decor| {
        d.prefix()
            .and_then(|p| p.as_str())
            .unwrap_or_default()
            .to_owned()
    };
    let Some(hosts) = doc.get_mut("hosts") else {
        return;
    };
    let mut carried = String::new();
    if let Some(tables) = hosts.as_array_of_tables_mut() {
        let mut i = 0;
        while let Some(t) = tables.get_mut(i) {
            if named(t.get("name").and_then(|i| i.as_value())) {
                carried.push_str(&prefix(t.decor()));
                tables.remove(i);
                continue;
            }
            if !carried.is_empty() {
                let own = prefix(t.decor());
                t.decor_mut()
                    .set_prefix(std::mem::take(&mut carried) + &own);
            }
            i += 1;
        }
    } else if let Some(list) = hosts.as_array_mut() {
        list.retain(|v| !named(v.as_inline_table().and_then(|t| t.get("name"))));
    }
    if !carried.is_empty() {
        let trailing = doc.trailing().as_str().unwrap_or_default().to_owned();
        doc.set_trailing(carried + &trailing);
    }
}

fn entry_json(h: &HostEntry) -> serde_json::Value {
    json!({"name": h.name, "host": h.host, "address": h.address, "local": false})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str, host: &str) -> HostEntry {
        HostEntry {
            name: name.into(),
            host: Some(host.into()),
            address: None,
        }
    }

    /// What `hosts add` and `hosts rm` do not touch stays as the user wrote it: comments, the
    /// order, the other hosts; an inline list stays inline.
    #[test]
    fn adding_and_removing_keeps_the_users_comments() {
        let was = "# my machines\n\n[[hosts]]\n# the big one\nname = \"build\"\nhost = \"me@build\" # fast\n";
        let mut doc: toml_edit::DocumentMut = was.parse().unwrap();
        add_to(&mut doc, &entry("lab", "me@lab")).unwrap();
        let text = doc.to_string();
        assert!(text.starts_with(was), "{text}");
        let read: Config = toml::from_str(&text).unwrap();
        assert_eq!(
            read.hosts,
            [entry("build", "me@build"), entry("lab", "me@lab")]
        );
        remove_from(&mut doc, "build");
        let text = doc.to_string();
        assert!(text.starts_with("# my machines\n"), "{text}");
        let read: Config = toml::from_str(&text).unwrap();
        assert_eq!(read.hosts, [entry("lab", "me@lab")]);

        let mut inline: toml_edit::DocumentMut =
            "hosts = [{ name = \"a\", host = \"a\" }] # mine\n"
                .parse()
                .unwrap();
        add_to(&mut inline, &entry("b", "b")).unwrap();
        remove_from(&mut inline, "a");
        let text = inline.to_string();
        assert!(text.contains("# mine"), "{text}");
        let read: Config = toml::from_str(&text).unwrap();
        assert_eq!(read.hosts, [entry("b", "b")]);

        let mut odd: toml_edit::DocumentMut = "hosts = 3\n".parse().unwrap();
        assert!(add_to(&mut odd, &entry("b", "b")).is_err());
    }
}
