//! D-Bus addresses of other machines' buses: an address as the user gives it (percent-decoded
//! as the specification says), and the `unixexec:` address that reaches a user's session bus on
//! another machine over ssh and `systemd-stdio-bridge`, as `busctl --host` does for the system
//! bus. Shared by botvisorctl (`--host`, `--address`, `hosts`) and botvisor-notify
//! (`--all-hosts`). See docs/remote.md.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::str::FromStr;

use zbus::Address;
use zbus::address::transport::{Transport, Unixexec};

/// The environment variable naming the ssh program a host is reached with (default `ssh`), as
/// `SYSTEMD_SSH` does for systemd's tools: a wrapper script can add options (`-F FILE`, `-i KEY`).
pub const SSH_ENV: &str = "BOTVISOR_SSH";

/// What the remote user's shell runs behind `--host`: `systemd-stdio-bridge` on that user's
/// session bus, found as sd-bus finds it (`DBUS_SESSION_BUS_ADDRESS`, else
/// `$XDG_RUNTIME_DIR/bus`, else `/run/user/UID/bus`). Not `systemd-stdio-bridge --user`:
/// before systemd 253 that flag only applies with `--machine`, and the bridge connects to the
/// system bus.
pub const REMOTE_BRIDGE: &str = "sh -c 'exec systemd-stdio-bridge \
     --bus-path=\"${DBUS_SESSION_BUS_ADDRESS:-unix:path=${XDG_RUNTIME_DIR:-/run/user/$(id -u)}/bus}\"'";

/// `text` as a D-Bus address. Errors: why it is not one, in words (zbus's, or a bad `%` escape).
///
/// The values of a `unixexec:` address and the path of a `unix:` one are percent-decoded here
/// (`argv1=a%2cb` is `a,b`), as the D-Bus specification says: zbus 6.2 hands them over as
/// written (a hostile run found `unix:path=/run/bu%73` refused where busctl takes it).
pub fn parse(text: &str) -> Result<Address, String> {
    let address = Address::from_str(text).map_err(|e| e.to_string())?;
    if let Transport::Unix(unix) = address.transport() {
        use zbus::address::transport::{Unix, UnixSocket};
        let socket = match unix.path() {
            UnixSocket::File(p) => UnixSocket::File(decode(p.as_os_str())?.into()),
            #[cfg(target_os = "linux")]
            UnixSocket::Abstract(n) => UnixSocket::Abstract(decode(n)?),
            UnixSocket::Dir(p) => UnixSocket::Dir(decode(p.as_os_str())?.into()),
            UnixSocket::TmpDir(p) => UnixSocket::TmpDir(decode(p.as_os_str())?.into()),
            // A kind zbus adds later: as it is.
            _ => return Ok(address),
        };
        return Ok(Address::from(Transport::Unix(Unix::new(socket))));
    }
    let Transport::Unixexec(exec) = address.transport() else {
        return Ok(address);
    };
    let path = decode(exec.path().as_os_str())?;
    let arg0 = exec.arg0().map(|a| decode(a)).transpose()?;
    let args = exec
        .args()
        .iter()
        .map(|a| decode(a))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Address::from(Transport::Unixexec(Unixexec::new(
        path.into(),
        arg0,
        args,
    ))))
}

/// A value of a D-Bus address with its `%XX` escapes decoded.
fn decode(value: &OsStr) -> Result<OsString, String> {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| format!("a `%` not followed by two hex digits in {value:?}"))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Ok(OsString::from_vec(out))
}

/// The ssh program to run: [`SSH_ENV`] in `env`, else `ssh`.
pub fn ssh_program(env: impl Fn(&str) -> Option<OsString>) -> OsString {
    env(SSH_ENV)
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "ssh".into())
}

/// The `unixexec:` address of the user bus of `host` over `ssh`: `ssh -xT -- HOST` and the
/// [`REMOTE_BRIDGE`] command, as `busctl --host` builds it for the system bus. Errors: why
/// `host` is not an ssh destination ([`check_destination`]).
pub fn ssh_address(host: &str, ssh: OsString) -> Result<Address, String> {
    check_destination(host)?;
    let args = ["-xT", "--", host, REMOTE_BRIDGE]
        .map(OsString::from)
        .to_vec();
    Ok(Address::from(Transport::Unixexec(Unixexec::new(
        ssh.into(),
        None,
        args,
    ))))
}

/// Why `dest` is not an ssh destination `[USER@]HOST`, if it is not: ssh splits it at its last
/// `@`; the user is 1 to 64 characters with no blank, control character or `@`; the host is a
/// name of letters, digits, `-`, `_` and `.` (at most 253, not beginning with `-` or `.`), or
/// an IPv6 address in brackets. Anything else (an address mistyped, `host:22`, an option) is
/// refused before ssh runs.
pub fn check_destination(dest: &str) -> Result<(), String> {
    let (user, host) = match dest.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, dest),
    };
    if let Some(u) = user
        && (u.is_empty()
            || u.chars().count() > 64
            || u.starts_with('-')
            || u.chars()
                .any(|c| c.is_whitespace() || c.is_control() || c == '@'))
    {
        return Err("the user before `@` is empty, too long or holds a blank".into());
    }
    let bracketed = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .is_some_and(|h| {
            !h.is_empty()
                && h.chars()
                    .all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.')
        });
    let name = !host.is_empty()
        && host.len() <= 253
        && !host.starts_with(['-', '.'])
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
    if bracketed || name {
        Ok(())
    } else if host.contains(':') {
        Err(
            "a host name holds no `:` (a port goes in ~/.ssh/config; a D-Bus address is given \
             with --address)"
                .into(),
        )
    } else {
        Err("a host is a name of letters, digits, `-`, `_` and `.`, or [IPv6]".into())
    }
}
