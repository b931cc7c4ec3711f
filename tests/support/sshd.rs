//! A real OpenSSH server on loopback for one test, and an ssh client set up for it, all in a
//! temporary folder: its own host key, its own key pair for the user, its own known hosts and
//! client configuration. Nothing of the user's own ssh setup (`~/.ssh`, the agent) is read or
//! written: the client runs with `-F` (no `~/.ssh/config`, no `~/.ssh` made), one identity, no
//! agent; the server with its own `AuthorizedKeysFile`, no `~/.ssh/rc`.
//!
//! The server runs as the user who runs the test, who logs in as themselves: the remote machine
//! is this one. The host is called [`HOST`] (an alias the client configuration maps to
//! 127.0.0.1 and the server's port).

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// The name the test's ssh client knows the server by.
pub const HOST: &str = "remote-box";

/// A running `sshd -D` and the client side that reaches it.
pub struct Sshd {
    child: Child,
    /// The folder of keys, configuration and the server's log (`sshd.log`).
    pub dir: PathBuf,
    /// An executable that runs `ssh` with the test's client configuration: what `BOTVISOR_SSH`
    /// (or the `path` of a `unixexec:` address) names.
    pub ssh: PathBuf,
    /// The port the server listens on (127.0.0.1).
    pub port: u16,
    /// The user who logs in (the test's own).
    pub user: String,
}

/// The OpenSSH server binary, or `None` when it is not installed.
pub fn sshd_bin() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/usr/local/sbin".into()])
        .map(|d| d.join("sshd"))
        .find(|p| p.is_file())
}

impl Sshd {
    /// Starts a server in `dir` (created) whose login sessions have `session_env` (sshd's
    /// `SetEnv`), or returns `None` after printing why the test is skipped: only when sshd is not
    /// installed (`.ci/run` installs Debian's openssh-server).
    pub fn start(dir: &Path, session_env: &[(&str, &str)]) -> Option<Sshd> {
        let Some(sshd) = sshd_bin() else {
            eprintln!(
                "skipped: sshd (OpenSSH server) is not installed; `apt-get install \
                 openssh-server` (.ci/run installs it)"
            );
            return None;
        };
        std::fs::create_dir_all(dir).unwrap();
        keygen(&dir.join("host_key"));
        keygen(&dir.join("user_key"));
        std::fs::copy(dir.join("user_key.pub"), dir.join("authorized_keys")).unwrap();
        let host_pub = std::fs::read_to_string(dir.join("host_key.pub")).unwrap();
        let mut pub_words = host_pub.split_whitespace();
        let (kind, key) = (pub_words.next().unwrap(), pub_words.next().unwrap());
        std::fs::write(dir.join("known_hosts"), format!("{HOST} {kind} {key}\n")).unwrap();
        // SAFETY: getuid never fails and touches no memory.
        let uid = unsafe { libc::getuid() };
        if uid == 0 {
            // Debian's sshd insists on its privilege separation folder (the package makes it
            // at boot through tmpfiles.d).
            std::fs::create_dir_all("/run/sshd").unwrap();
        }
        let user = user_name(uid);
        let env: String = session_env
            .iter()
            .map(|(k, v)| format!("SetEnv {k}={v}\n"))
            .collect();
        let config = dir.join("sshd_config");
        std::fs::write(
            &config,
            format!(
                "ListenAddress 127.0.0.1\n\
                 HostKey {dir}/host_key\n\
                 PidFile none\n\
                 AuthorizedKeysFile {dir}/authorized_keys\n\
                 PermitRootLogin prohibit-password\n\
                 PubkeyAuthentication yes\n\
                 PasswordAuthentication no\n\
                 KbdInteractiveAuthentication no\n\
                 StrictModes no\n\
                 UsePAM no\n\
                 PermitUserRC no\n\
                 PermitUserEnvironment no\n\
                 X11Forwarding no\n\
                 AllowTcpForwarding no\n\
                 PrintMotd no\n\
                 {env}",
                dir = dir.display()
            ),
        )
        .unwrap();
        let port = free_port();
        let child = serve(&sshd, dir, port);
        std::fs::write(
            dir.join("ssh_config"),
            format!(
                "Host {HOST}\n\
                 \x20 HostName 127.0.0.1\n\
                 \x20 HostKeyAlias {HOST}\n\
                 \x20 Port {port}\n\
                 \x20 User {user}\n\
                 Host *\n\
                 \x20 IdentityFile {dir}/user_key\n\
                 \x20 IdentitiesOnly yes\n\
                 \x20 IdentityAgent none\n\
                 \x20 UserKnownHostsFile {dir}/known_hosts\n\
                 \x20 GlobalKnownHostsFile /dev/null\n\
                 \x20 StrictHostKeyChecking yes\n\
                 \x20 UpdateHostKeys no\n\
                 \x20 BatchMode yes\n\
                 \x20 ControlMaster no\n\
                 \x20 ControlPath none\n\
                 \x20 LogLevel ERROR\n",
                dir = dir.display()
            ),
        )
        .unwrap();
        let ssh = dir.join("ssh");
        std::fs::write(
            &ssh,
            format!(
                "#!/bin/sh\nexec ssh -F {}/ssh_config \"$@\"\n",
                dir.display()
            ),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&ssh, std::fs::Permissions::from_mode(0o755)).unwrap();
        Some(Sshd {
            child,
            dir: dir.to_owned(),
            ssh,
            port,
            user,
        })
    }

    /// A `unixexec:` address that runs `remote_command` (words) on the server's side through
    /// the test's ssh: `ssh -xT -- HOST WORDS…`, percent-encoded.
    pub fn unixexec(&self, remote_command: &[&str]) -> String {
        let mut a = format!(
            "unixexec:path={},argv1=-xT,argv2=--,argv3={HOST}",
            encode(self.ssh.to_str().unwrap())
        );
        for (i, w) in remote_command.iter().enumerate() {
            a.push_str(&format!(",argv{}={}", i + 4, encode(w)));
        }
        a
    }

    /// Sends `signal` to the server and every process it started (its sessions): `SIGSTOP`
    /// makes the host silent as a machine cut off the network is (nothing answers, nothing
    /// closes), `SIGCONT` brings it back.
    pub fn signal_all(&self, signal: i32) {
        let mut pids = vec![self.child.id()];
        let mut i = 0;
        while i < pids.len() {
            pids.extend(children_of(pids[i]));
            i += 1;
        }
        for pid in pids {
            // SAFETY: kill(2) touches no memory of ours.
            unsafe { libc::kill(pid as i32, signal) };
        }
    }

    /// Kills the server and every session it started (as a machine that went down), then
    /// starts it again on the same port with the same keys (as the machine back).
    pub fn restart(&mut self) {
        self.signal_all(libc::SIGKILL);
        let _ = self.child.wait();
        let sshd = sshd_bin().expect("it ran before");
        self.child = serve(&sshd, &self.dir, self.port);
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("sshd.log")).unwrap_or_default()
    }
}

/// Runs `sshd -D` with `dir`'s configuration on `port`, once it says it listens (its log in
/// `dir/sshd.log`, appended to).
fn serve(sshd: &Path, dir: &Path, port: u16) -> Child {
    let mut child = Command::new(sshd)
        .arg("-D")
        .arg("-e")
        .arg("-f")
        .arg(dir.join("sshd_config"))
        .arg("-p")
        .arg(port.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start sshd");
    // The log goes to a file; the test goes on once the server says it listens.
    let (listening, heard) = mpsc::channel();
    let stderr = child.stderr.take().unwrap();
    let log_path = dir.join("sshd.log");
    std::thread::spawn(move || {
        use std::io::Write;
        let mut log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log_path)
            .unwrap();
        for line in std::io::BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            let _ = writeln!(log, "{line}");
            if line.starts_with("Server listening on") {
                let _ = listening.send(());
            }
        }
    });
    if heard.recv_timeout(Duration::from_secs(30)).is_err() {
        let _ = child.kill();
        panic!(
            "sshd did not listen:\n{}",
            std::fs::read_to_string(dir.join("sshd.log")).unwrap_or_default()
        );
    }
    child
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A value of a D-Bus address: bytes other than `[-0-9A-Za-z_/.\*]` as `%XX`.
pub fn encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_/.\\*".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02x}")
            }
        })
        .collect()
}

/// The pids whose parent is `pid` (from `/proc/PID/stat`).
fn children_of(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(child) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{child}/stat")) else {
            continue;
        };
        // The fields after the command's closing parenthesis: state, then the parent's pid.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(pid) {
            out.push(child);
        }
    }
    out
}

/// Makes an ed25519 key pair without a passphrase at `path` (and `path.pub`).
fn keygen(path: &Path) {
    let ok = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "botvisor-test", "-f"])
        .arg(path)
        .stdin(Stdio::null())
        .status()
        .expect("ssh-keygen (openssh-client) must be installed")
        .success();
    assert!(ok, "ssh-keygen failed");
}

/// A TCP port on 127.0.0.1 nobody listens on now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The login name of `uid`.
fn user_name(uid: u32) -> String {
    let out = Command::new("id")
        .args(["-un", &uid.to_string()])
        .output()
        .expect("id");
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}
