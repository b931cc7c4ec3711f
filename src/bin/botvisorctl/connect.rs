//! Which bus botvisorctl talks to, and the connection to it: the session bus, any D-Bus address
//! (`--address`, else `DBUS_SESSION_BUS_ADDRESS`), or the user bus of another machine over ssh
//! and `systemd-stdio-bridge` (`--host`). See docs/remote.md.
//!
//! A `unixexec:` address (which `--host` is) runs a program and speaks D-Bus over its standard
//! input and output. botvisorctl runs that program itself, on one end of a socket pair, with
//! SIGINT ignored: a Ctrl-C at the terminal is botvisorctl's to handle (`send` says how to follow
//! the turn it leaves), and must not cut the link first (ssh ends at SIGINT unless it is ignored).

use std::ffi::{OsStr, OsString};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::str::FromStr;

use zbus::Address;
use zbus::Connection;
use zbus::address::transport::{Transport, Unixexec};

use super::fail::Failure;

/// The environment variable naming the ssh program `--host` runs (default `ssh`), as
/// `SYSTEMD_SSH` does for systemd's tools: a wrapper script can add options (`-F FILE`, `-i KEY`).
pub const SSH_ENV: &str = "BOTVISOR_SSH";

/// What the remote user's shell runs behind `--host`: `systemd-stdio-bridge` on that user's
/// session bus, found as sd-bus finds it (`DBUS_SESSION_BUS_ADDRESS`, else
/// `$XDG_RUNTIME_DIR/bus`, else `/run/user/UID/bus`). Not `systemd-stdio-bridge --user`:
/// before systemd 253 that flag only applies with `--machine`, and the bridge connects to the
/// system bus.
pub const REMOTE_BRIDGE: &str = "sh -c 'exec systemd-stdio-bridge \
     --bus-path=\"${DBUS_SESSION_BUS_ADDRESS:-unix:path=${XDG_RUNTIME_DIR:-/run/user/$(id -u)}/bus}\"'";

/// The bus botvisorctl connects to.
#[derive(Debug, Clone, PartialEq)]
pub enum Bus {
    /// The session bus (no address given anywhere: `$XDG_RUNTIME_DIR/bus`).
    Session,
    /// A D-Bus address, and where it came from (`--address`, `DBUS_SESSION_BUS_ADDRESS`).
    Address(Address, &'static str),
    /// The user bus of `[user@]host` over ssh; the address that runs it.
    Host(String, Address),
}

impl Bus {
    /// The bus chosen by `--address`, `--host` (at most one of them) and the environment
    /// (`DBUS_SESSION_BUS_ADDRESS`, [`SSH_ENV`]). A malformed address or host is a usage error.
    pub fn choose(
        address: Option<&str>,
        host: Option<&str>,
        env: impl Fn(&str) -> Option<OsString>,
    ) -> Result<Bus, Failure> {
        if let Some(host) = host {
            let ssh = env(SSH_ENV)
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| "ssh".into());
            return Ok(Bus::Host(host.to_owned(), host_address(host, ssh)?));
        }
        if let Some(a) = address {
            return parse(a, "--address").map(|a| Bus::Address(a, "--address"));
        }
        match env("DBUS_SESSION_BUS_ADDRESS").filter(|s| !s.is_empty()) {
            Some(a) => {
                let a = a.to_str().ok_or_else(|| {
                    Failure::usage("DBUS_SESSION_BUS_ADDRESS is not a D-Bus address (not UTF-8)")
                })?;
                parse(a, "DBUS_SESSION_BUS_ADDRESS")
                    .map(|a| Bus::Address(a, "DBUS_SESSION_BUS_ADDRESS"))
            }
            None => Ok(Bus::Session),
        }
    }

    /// Connects to the bus; a failure says which bus and what to check. The program of a
    /// `unixexec:` address (`--host`'s ssh) lives until botvisorctl ends.
    pub async fn connect(&self) -> Result<Connection, Failure> {
        self.connect_link(None).await.map(|(conn, link)| {
            link.keep();
            conn
        })
    }

    /// [`Bus::connect`], with the program of a `unixexec:` address ended (SIGTERM) when the
    /// returned [`Link`] is dropped, and its standard error's lines passed on with `label: `
    /// before each when a label is given (one of several hosts). A program that is still
    /// running when connecting failed is ended at once.
    pub async fn connect_link(&self, label: Option<&str>) -> Result<(Connection, Link), Failure> {
        let address = match self {
            Bus::Session => None,
            Bus::Address(a, _) | Bus::Host(_, a) => Some(a),
        };
        let conn = match address.map(Address::transport) {
            None => Connection::session().await,
            Some(Transport::Unixexec(exec)) => {
                let program = run_program(exec, label).map_err(|e| {
                    let what = match self {
                        Bus::Host(..) => format!(" (the ssh program; {SSH_ENV} names another)"),
                        _ => String::new(),
                    };
                    Failure::failed(format!("cannot run {}{what}: {e}", exec.path().display()))
                })?;
                let stream = program.stream.try_clone().map_err(zbus::Error::from);
                let conn = match stream {
                    Ok(s) => zbus::connection::Builder::unix_stream(s).build().await,
                    Err(e) => Err(e),
                };
                return match conn {
                    Ok(conn) => Ok((conn, program.link)),
                    Err(e) => {
                        let known = program.known().await;
                        Err(Failure::failed(format!(
                            "{}; {known}",
                            self.cannot_connect(&e)
                        )))
                    }
                };
            }
            Some(_) => {
                let a = address.cloned().expect("an address");
                zbus::connection::Builder::address(a).build().await
            }
        };
        conn.map(|c| {
            let link = Link {
                pid: None,
                group: false,
                ended: Default::default(),
            };
            (c, link)
        })
        .map_err(|e| Failure::failed(self.cannot_connect(&e)))
    }

    /// Why connecting failed, in words that name this bus.
    fn cannot_connect(&self, e: &zbus::Error) -> String {
        match self {
            Bus::Session => format!(
                "cannot connect to the session bus ({e}); is DBUS_SESSION_BUS_ADDRESS set? \
                 (--address ADDRESS and --host HOST name another bus)"
            ),
            Bus::Address(a, from) => {
                format!("cannot connect to the bus at {a} (from {from}): {e}")
            }
            Bus::Host(host, _) => format!(
                "cannot reach the user bus of {host} through ssh ({e}). Check that `ssh {host}` \
                 logs in without a question, and that systemd-stdio-bridge is installed there \
                 and the user's session bus runs (see docs/remote.md)"
            ),
        }
    }
}

/// `text` as a D-Bus address, or a usage error naming where it came from.
///
/// The values of a `unixexec:` address and the path of a `unix:` one are percent-decoded here
/// (`argv1=a%2cb` is `a,b`), as the D-Bus specification says: zbus 6.2 hands them over as
/// written (a hostile run found `unix:path=/run/bu%73` refused where busctl takes it).
fn parse(text: &str, from: &str) -> Result<Address, Failure> {
    let bad = |e: String| Failure::usage(format!("{from} is not a D-Bus address: {text:?} ({e})"));
    let address = Address::from_str(text).map_err(|e| bad(e.to_string()))?;
    if let Transport::Unix(unix) = address.transport() {
        use zbus::address::transport::{Unix, UnixSocket};
        let socket = match unix.path() {
            UnixSocket::File(p) => UnixSocket::File(decode(p.as_os_str()).map_err(&bad)?.into()),
            #[cfg(target_os = "linux")]
            UnixSocket::Abstract(n) => UnixSocket::Abstract(decode(n).map_err(&bad)?),
            UnixSocket::Dir(p) => UnixSocket::Dir(decode(p.as_os_str()).map_err(&bad)?.into()),
            UnixSocket::TmpDir(p) => {
                UnixSocket::TmpDir(decode(p.as_os_str()).map_err(&bad)?.into())
            }
            // A kind zbus adds later: as it is.
            _ => return Ok(address),
        };
        return Ok(Address::from(Transport::Unix(Unix::new(socket))));
    }
    let Transport::Unixexec(exec) = address.transport() else {
        return Ok(address);
    };
    let path = decode(exec.path().as_os_str()).map_err(&bad)?;
    let arg0 = exec.arg0().map(|a| decode(a)).transpose().map_err(&bad)?;
    let args = exec
        .args()
        .iter()
        .map(|a| decode(a))
        .collect::<Result<Vec<_>, _>>()
        .map_err(&bad)?;
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

/// The `unixexec:` address of the user bus of `host` over `ssh`: `ssh -xT -- HOST` and the
/// [`REMOTE_BRIDGE`] command, as `busctl --host` builds it for the system bus.
fn host_address(host: &str, ssh: OsString) -> Result<Address, Failure> {
    if let Err(why) = check_destination(host) {
        return Err(Failure::usage(format!(
            "--host takes [USER@]HOST (an ssh destination), not {:?}: {why}",
            super::show::safe(&super::show::cut(host, 80))
        )));
    }
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
fn check_destination(dest: &str) -> Result<(), String> {
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

/// The program of a `unixexec:` address that carries a connection (`ssh` for `--host`): ended
/// with SIGTERM when this is dropped, unless kept ([`Link::keep`]). On Linux it also gets
/// SIGTERM if botvisorctl dies first (`PR_SET_PDEATHSIG`), so no link outlives botvisorctl.
pub struct Link {
    /// The program's pid; `None` for a bus without one.
    pid: Option<u32>,
    /// Whether the program leads a process group of its own (a link of one host of several),
    /// which is ended whole: what it started too.
    group: bool,
    /// Set when it is ended: what it prints from then on is not passed on.
    ended: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

/// The links being ended (their grace running): botvisorctl waits for them before it exits
/// ([`finish_links`]).
static ENDING: std::sync::Mutex<Vec<std::thread::JoinHandle<()>>> =
    std::sync::Mutex::new(Vec::new());

/// Waits until every link being ended has ended (at most [`LINK_GRACE`] each, then killed):
/// called as botvisorctl exits, after its tasks (and their links) were dropped.
pub fn finish_links() {
    let ending = std::mem::take(&mut *ENDING.lock().unwrap_or_else(|p| p.into_inner()));
    for t in ending {
        let _ = t.join();
    }
}

/// How long a link's program (and its process group) has to end after SIGTERM before SIGKILL.
pub const LINK_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// Whether any process is in process group `pgid` (from `/proc/PID/stat`).
fn group_alive(pgid: i32) -> bool {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .any(|e| {
            std::fs::read_to_string(e.path().join("stat")).is_ok_and(|stat| {
                // After the command's closing parenthesis: state, ppid, pgrp.
                stat.rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().nth(2))
                    .and_then(|g| g.parse::<i32>().ok())
                    == Some(pgid)
            })
        })
}

impl Link {
    /// The program lives on until botvisorctl ends.
    pub fn keep(mut self) {
        self.pid = None;
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        let Some(pid) = self.pid.and_then(|p| i32::try_from(p).ok()) else {
            return;
        };
        self.ended.store(true, std::sync::atomic::Ordering::SeqCst);
        if !self.group {
            // SAFETY: kill(2) touches no memory of ours. The pid is our own child's, which
            // a thread of ours reaps: until then it is not reused.
            unsafe { libc::kill(pid, libc::SIGTERM) };
            return;
        }
        // The whole group: continued (a stopped one cannot end), asked to end, and after the
        // grace killed, whatever in it is still there. A group's id is not given to another
        // process while a process of the group lives, which `group_alive` checks first.
        // SAFETY: killpg(2) touches no memory of ours.
        unsafe {
            libc::killpg(pid, libc::SIGCONT);
            libc::killpg(pid, libc::SIGTERM);
        }
        let ending = std::thread::spawn(move || {
            let until = std::time::Instant::now() + LINK_GRACE;
            while std::time::Instant::now() < until {
                if !group_alive(pid) {
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            if group_alive(pid) {
                // SAFETY: as above.
                unsafe { libc::killpg(pid, libc::SIGKILL) };
            }
        });
        ENDING
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(ending);
    }
}

/// Whether the links' programs' standard error is kept instead of passed on to ours: set while
/// a full-screen dashboard owns the terminal (their words would be written over it). What a
/// program printed is then said in the failure of its link ([`Program::known`]).
static QUIET: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// How many of a quiet program's last lines are kept for its failure.
const KEPT_LINES: usize = 3;

/// From now on, the links' programs' standard error is kept, not printed (see [`QUIET`]).
pub fn quiet_programs() {
    QUIET.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// The program of a `unixexec:` address, running: our end of its socket pair, and what is known
/// of it when connecting failed.
struct Program {
    /// Our end of the socket pair.
    stream: UnixStream,
    /// Its exit status, sent once it exited.
    status: tokio::sync::oneshot::Receiver<std::io::Result<std::process::ExitStatus>>,
    /// Whether it wrote anything on its standard error (passed on to ours).
    printed: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Its last [`KEPT_LINES`] lines of standard error, kept while [`QUIET`] (shown safe).
    kept: std::sync::Arc<std::sync::Mutex<std::collections::VecDeque<String>>>,
    /// Sent (or dropped) when its standard error reached its end.
    stderr_done: tokio::sync::oneshot::Receiver<()>,
    /// Ends it when dropped.
    link: Link,
}

impl Program {
    /// What is known of the program after connecting failed: its exit status (waited for up to
    /// 2 s, without holding the thread: it ends when it closed the connection) and whether it
    /// printed anything (above). One still running then is ended.
    async fn known(self) -> String {
        let wait = std::time::Duration::from_secs(2);
        let (status, ran_on) = match tokio::time::timeout(wait, self.status).await {
            Ok(Ok(Ok(st))) => (format!("the program ended ({st})"), false),
            Ok(Ok(Err(e))) => (format!("the program's end is not known ({e})"), false),
            Ok(Err(_)) => ("the program's end is not known".to_owned(), false),
            Err(_) => ("the program still ran; it was ended".to_owned(), true),
        };
        if ran_on {
            drop(self.link);
            let _ = tokio::time::timeout(wait, self.stderr_done).await;
        } else {
            // It ended by itself: what it printed last is passed on whole before the link is
            // let go (ending the link first would silence it; a CI run saw its words lost).
            let _ = tokio::time::timeout(wait, self.stderr_done).await;
            self.link.keep();
        }
        let kept: Vec<String> = self
            .kept
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .cloned()
            .collect();
        if !kept.is_empty() {
            format!("{status}; it printed: {}", kept.join(" / "))
        } else if self.printed.load(std::sync::atomic::Ordering::SeqCst) {
            format!("{status}; what it printed is above")
        } else {
            format!("{status} and printed nothing on its standard error")
        }
    }
}

/// Runs the program of a `unixexec:` address (see the module's words on SIGINT) with its
/// standard input and output on one end of a socket pair. Its standard error is passed on to
/// ours by a thread (which notes whether it printed anything), each line after `label: ` when
/// a label is given; SIGINT is ignored in it, and on Linux it gets SIGTERM when botvisorctl
/// dies. A thread waits for it to exit (it does when the connection closes).
fn run_program(exec: &Unixexec, label: Option<&str>) -> std::io::Result<Program> {
    let (ours, theirs) = UnixStream::pair()?;
    let mut cmd = std::process::Command::new(exec.path());
    cmd.args(exec.args())
        .stdin(OwnedFd::from(theirs.try_clone()?))
        .stdout(OwnedFd::from(theirs))
        .stderr(std::process::Stdio::piped());
    if let Some(arg0) = exec.arg0() {
        cmd.arg0(arg0);
    }
    // One host of several: a process group of its own, ended whole with its link. (Not for a
    // single `--host`, whose ssh may ask on the terminal: a program outside the terminal's
    // foreground group is stopped when it reads it.)
    let own_group = label.is_some();
    // SAFETY: signal(2), setpgid(2) and prctl(2) are async-signal-safe and touch no memory of
    // ours.
    unsafe {
        cmd.pre_exec(move || {
            libc::signal(libc::SIGINT, libc::SIG_IGN);
            if own_group {
                libc::setpgid(0, 0);
            }
            #[cfg(target_os = "linux")]
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            Ok(())
        });
    }
    let mut child = cmd.spawn()?;
    let link = Link {
        pid: Some(child.id()),
        group: label.is_some(),
        ended: Default::default(),
    };
    let printed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let kept = std::sync::Arc::new(std::sync::Mutex::new(std::collections::VecDeque::new()));
    let (done_tx, stderr_done) = tokio::sync::oneshot::channel();
    if let Some(err) = child.stderr.take() {
        let (printed, ended, keep) = (printed.clone(), link.ended.clone(), kept.clone());
        let label = label.map(|l| format!("{}: ", super::show::safe(l)));
        std::thread::spawn(move || {
            use std::io::{BufRead, Write};
            let mut err = std::io::BufReader::new(err);
            let mut line = Vec::new();
            while let Ok(n) = err.read_until(b'\n', &mut line) {
                if n == 0 {
                    break;
                }
                if ended.load(std::sync::atomic::Ordering::SeqCst) {
                    // Ended by us: its last words are not news.
                    line.clear();
                    continue;
                }
                // What another program printed steers no terminal (escapes shown, one line).
                let text = String::from_utf8_lossy(&line);
                let shown = super::show::safe(text.trim_end_matches(['\n', '\r']));
                if QUIET.load(std::sync::atomic::Ordering::SeqCst) {
                    let mut kept = keep.lock().unwrap_or_else(|p| p.into_inner());
                    kept.push_back(shown);
                    if kept.len() > KEPT_LINES {
                        kept.pop_front();
                    }
                    line.clear();
                    continue;
                }
                printed.store(true, std::sync::atomic::Ordering::SeqCst);
                let mut out = std::io::stderr().lock();
                if let Some(l) = &label {
                    let _ = out.write_all(l.as_bytes());
                }
                let _ = writeln!(out, "{shown}");
                let _ = out.flush();
                line.clear();
            }
            let _ = done_tx.send(());
        });
    }
    let (status_tx, status) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let _ = status_tx.send(child.wait());
    });
    Ok(Program {
        stream: ours,
        status,
        printed,
        kept,
        stderr_done,
        link,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env(_: &str) -> Option<OsString> {
        None
    }

    #[test]
    fn host_is_ssh_and_the_bridge() {
        let Bus::Host(_, a) = Bus::choose(None, Some("me@box"), no_env).unwrap() else {
            panic!("a host");
        };
        let Transport::Unixexec(x) = a.transport() else {
            panic!("unixexec");
        };
        assert_eq!(x.path().to_str(), Some("ssh"));
        assert_eq!(x.args()[..3], ["-xT", "--", "me@box"].map(OsString::from));
        assert!(
            x.args()[3]
                .to_str()
                .unwrap()
                .contains("exec systemd-stdio-bridge --bus-path=")
        );
        // The address round-trips through its text (percent-encoded).
        assert_eq!(parse(&a.to_string(), "--address").unwrap(), a);
        let with_ssh = |k: &str| (k == SSH_ENV).then(|| OsString::from("/opt/my-ssh"));
        let Bus::Host(_, a) = Bus::choose(None, Some("box"), with_ssh).unwrap() else {
            panic!("a host");
        };
        assert!(
            a.to_string()
                .starts_with("unixexec:path=/opt/my-ssh,argv1=-xT,")
        );
    }

    #[test]
    fn unixexec_values_are_percent_decoded_once() {
        let a = parse(
            "unixexec:path=/bin/echo,argv1=a%2cb,argv2=%2541,argv3=x=y:z",
            "t",
        )
        .unwrap();
        let Transport::Unixexec(x) = a.transport() else {
            panic!("unixexec");
        };
        assert_eq!(x.args(), ["a,b", "%41", "x=y:z"].map(OsString::from));
        let e = parse("unixexec:path=/bin/echo,argv1=%zz", "t").unwrap_err();
        assert!(e.text.contains("two hex digits"), "{}", e.text);
    }

    #[test]
    fn a_unix_path_is_percent_decoded() {
        let a = parse("unix:path=/run/bu%73/x%2cy", "t").unwrap();
        let Transport::Unix(u) = a.transport() else {
            panic!("unix");
        };
        let zbus::address::transport::UnixSocket::File(p) = u.path() else {
            panic!("a file");
        };
        assert_eq!(p.to_str(), Some("/run/bus/x,y"));
        assert!(parse("unix:path=/tmp/%zz", "t").is_err());
    }

    #[test]
    fn bad_addresses_and_hosts_are_usage_errors() {
        for bad in ["", "nonsense", "unix:nopath=1", "unixexec:argv1=x"] {
            let e = Bus::choose(Some(bad), None, no_env).unwrap_err();
            assert_eq!(e.code, super::super::fail::USAGE, "{bad}: {}", e.text);
            assert!(
                e.text.starts_with("--address is not a D-Bus address"),
                "{}",
                e.text
            );
        }
        let env = |k: &str| (k == "DBUS_SESSION_BUS_ADDRESS").then(|| OsString::from("junk"));
        let e = Bus::choose(None, None, env).unwrap_err();
        assert!(
            e.text.starts_with("DBUS_SESSION_BUS_ADDRESS is not"),
            "{}",
            e.text
        );
        for bad in ["", "-oProxyCommand=x", "a b", "me@", "@host", "@"] {
            let e = Bus::choose(None, Some(bad), no_env).unwrap_err();
            assert_eq!(e.code, super::super::fail::USAGE, "{bad}");
        }
        // --address wins over the environment.
        let env = |k: &str| (k == "DBUS_SESSION_BUS_ADDRESS").then(|| OsString::from("junk"));
        assert!(matches!(
            Bus::choose(Some("unix:path=/x"), None, env),
            Ok(Bus::Address(_, "--address"))
        ));
        assert_eq!(Bus::choose(None, None, no_env).unwrap(), Bus::Session);
    }
}
