//! Which bus botvisorctl talks to, and the connection to it: the session bus, any D-Bus address
//! (`--address`, else `DBUS_SESSION_BUS_ADDRESS`), or the user bus of another machine over ssh
//! and `systemd-stdio-bridge` (`--host`). See docs/remote.md.
//!
//! A `unixexec:` address (which `--host` is) runs a program and speaks D-Bus over its standard
//! input and output. botvisorctl runs that program itself, on one end of a socket pair, with
//! SIGINT ignored: a Ctrl-C at the terminal is botvisorctl's to handle (`send` says how to follow
//! the turn it leaves), and must not cut the link first (ssh ends at SIGINT unless it is ignored).

use std::ffi::OsString;

use zbus::Address;
use zbus::Connection;
use zbus::address::transport::{Transport, Unixexec};

use super::fail::Failure;

pub use botvisor::remote::address::SSH_ENV;

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
            let ssh = botvisor::remote::address::ssh_program(env);
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

    /// The bus of a host the hosts file gives by its D-Bus address (what failures name it by).
    /// Errors: an address that does not parse (a usage error).
    pub fn from_hosts_file(address: &str) -> Result<Bus, Failure> {
        parse(address, "the hosts file").map(|a| Bus::Address(a, "the hosts file"))
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
                let stream = program.inner.stream.try_clone().map_err(zbus::Error::from);
                let conn = match stream {
                    Ok(s) => zbus::connection::Builder::unix_stream(s).build().await,
                    Err(e) => Err(e),
                };
                return match conn {
                    Ok(conn) => Ok((conn, program.inner.link)),
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
        conn.map(|c| (c, Link::none()))
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

/// `text` as a D-Bus address (percent-decoded: [`botvisor::remote::address::parse`]), or a
/// usage error naming where it came from.
fn parse(text: &str, from: &str) -> Result<Address, Failure> {
    botvisor::remote::address::parse(text)
        .map_err(|e| Failure::usage(format!("{from} is not a D-Bus address: {text:?} ({e})")))
}

/// The `unixexec:` address of the user bus of `host` over `ssh`
/// ([`botvisor::remote::address::ssh_address`]), or a usage error saying why `host` is not an
/// ssh destination.
fn host_address(host: &str, ssh: OsString) -> Result<Address, Failure> {
    botvisor::remote::address::ssh_address(host, ssh).map_err(|why| {
        Failure::usage(format!(
            "--host takes [USER@]HOST (an ssh destination), not {:?}: {why}",
            super::show::safe(&super::show::cut(host, 80))
        ))
    })
}

pub use botvisor::remote::link::{Link, finish_links};

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

/// The program of a `unixexec:` address, running ([`botvisor::remote::link::Program`]), and
/// what it printed on its standard error.
struct Program {
    inner: botvisor::remote::link::Program,
    /// Whether it wrote anything on its standard error (passed on to ours).
    printed: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Its last [`KEPT_LINES`] lines of standard error, kept while [`QUIET`] (shown safe).
    kept: std::sync::Arc<std::sync::Mutex<std::collections::VecDeque<String>>>,
}

impl Program {
    /// What is known of the program after connecting failed: how it ended
    /// ([`botvisor::remote::link::Program::end_after_failure`]) and what it printed (above, or
    /// said here while [`QUIET`]).
    async fn known(self) -> String {
        let status = self.inner.end_after_failure().await;
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

/// Runs the program of a `unixexec:` address ([`botvisor::remote::link::run_program`]; see the
/// module's words on SIGINT). Its standard error is passed on to ours, each line after
/// `label: ` when a label is given (one host of several, whose program leads a process group
/// of its own, ended whole), escaped, or kept while [`QUIET`].
fn run_program(exec: &Unixexec, label: Option<&str>) -> std::io::Result<Program> {
    let printed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let kept = std::sync::Arc::new(std::sync::Mutex::new(std::collections::VecDeque::new()));
    let (said, keep) = (printed.clone(), kept.clone());
    let label = label.map(|l| format!("{}: ", super::show::safe(l)));
    // One host of several: a process group of its own. (Not for a single `--host`, whose ssh
    // may ask on the terminal: a program outside the terminal's foreground group is stopped
    // when it reads it.)
    let own_group = label.is_some();
    let inner = botvisor::remote::link::run_program(exec, own_group, move |line| {
        use std::io::Write;
        // What another program printed steers no terminal (escapes shown, one line).
        let shown = super::show::safe(line);
        if QUIET.load(std::sync::atomic::Ordering::SeqCst) {
            let mut kept = keep.lock().unwrap_or_else(|p| p.into_inner());
            kept.push_back(shown);
            if kept.len() > KEPT_LINES {
                kept.pop_front();
            }
            return;
        }
        said.store(true, std::sync::atomic::Ordering::SeqCst);
        let mut out = std::io::stderr().lock();
        if let Some(l) = &label {
            let _ = out.write_all(l.as_bytes());
        }
        let _ = writeln!(out, "{shown}");
        let _ = out.flush();
    })?;
    Ok(Program {
        inner,
        printed,
        kept,
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
