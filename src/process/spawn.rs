//! Spawning a CLI process and turning its output into [`ProcEvent`]s.

use std::collections::VecDeque;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{ChildStdin, Command};
use tokio::sync::{mpsc, oneshot, watch};

use crate::runtime::LaunchCommand;

/// How long stdout is still read after the root process exited, for lines it wrote just before.
/// A descendant that keeps the pipe open does not hold the exit back longer than this.
pub const STDOUT_DRAIN_AFTER_EXIT: Duration = Duration::from_secs(2);

/// Lines of stderr kept for error messages.
pub const STDERR_TAIL_LINES: usize = 20;

/// How a process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExitInfo {
    /// The exit code, when it exited.
    pub code: Option<i32>,
    /// The signal, when one killed it.
    pub signal: Option<i32>,
}

impl std::fmt::Display for ExitInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.code, self.signal) {
            (Some(c), _) => write!(f, "exit code {c}"),
            (None, Some(s)) => write!(f, "signal {s}"),
            (None, None) => write!(f, "unknown status"),
        }
    }
}

/// What a process's reader sends to its bot, tagged with the process's generation.
#[derive(Debug)]
pub enum ProcEvent {
    /// One stdout line, without its newline, of any length.
    Line(u64, Vec<u8>),
    /// The root process exited and stdout was read to its end (or for
    /// [`STDOUT_DRAIN_AFTER_EXIT`]). Always the last event of a generation.
    Exited(u64, ExitInfo),
}

/// A running (or just exited) CLI process.
pub struct ProcessHandle {
    /// Which process of its bot this is (1, 2, …).
    pub generation: u64,
    /// The root process's pid; also its process group id.
    pub pid: u32,
    /// Its stdin; `None` once closed.
    pub stdin: Option<ChildStdin>,
    /// `Some` once the root process has exited and was reaped.
    pub exit: watch::Receiver<Option<ExitInfo>>,
    /// When it was spawned.
    pub started: Instant,
    /// The last lines of its stderr.
    pub stderr_tail: Arc<Mutex<VecDeque<String>>>,
    /// A pidfd pinning the root process (Linux), for signals to its group.
    pub pidfd: Option<std::os::fd::OwnedFd>,
    /// Where the root process waits before it runs the CLI (see [`Gate`]), when it was
    /// started held.
    pub gate: Option<Gate>,
    /// Ends the reading of stdout and answers what was read and not yet sent as a line
    /// ([`ProcessHandle::hand_over`]).
    pub hand_over: Option<oneshot::Sender<oneshot::Sender<Vec<u8>>>>,
}

/// What holds an agent at its start until botvisord has moved it where it belongs (its own
/// scope, issue 47): the root process is a shell that waits for one line on a pipe, then runs
/// the CLI in its place (same pid, same process group; nothing is started before). Released, or
/// dropped: a dropped gate lets the shell see the end of the pipe, and it exits with code
/// [`GATE_CLOSED`] without running the CLI.
#[derive(Debug)]
pub struct Gate(std::os::fd::OwnedFd);

/// The exit code of an agent whose gate was dropped unreleased (botvisord went away first).
pub const GATE_CLOSED: i32 = 111;

/// The shell at the gate: reads a line from fd 3, closes it, and runs the CLI in its place
/// (`$0` the program, `$@` its arguments).
const GATE_SCRIPT: &str = r#"read -r _ <&3 || exit 111; exec 3<&-; exec "$0" "$@""#;

impl Gate {
    /// Lets the agent run. Errors: the pipe's (the root process is gone).
    pub fn release(self) -> std::io::Result<()> {
        let n = write_once(&self.0, b"go\n");
        if n == 3 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    }
}

fn write_once(fd: &std::os::fd::OwnedFd, bytes: &[u8]) -> isize {
    use std::os::fd::AsRawFd;
    // SAFETY: write(2) on a descriptor this process owns, from a live buffer.
    unsafe { libc::write(fd.as_raw_fd(), bytes.as_ptr().cast(), bytes.len()) }
}

/// How an agent is started besides its command (issue 47).
#[derive(Debug, Default, Clone, Copy)]
pub struct Start<'a> {
    /// A cgroup folder the child joins before `exec` (design rule 10), if any.
    pub cgroup: Option<&'a std::path::Path>,
    /// Held at a [`Gate`] until released (the caller moves it into its scope first).
    pub gated: bool,
    /// Its stdin, stdout, stderr and a pidfd are kept in the service's file descriptor store
    /// under this bot id's names ([`crate::systemd::fdstore::name`]) from now until removed.
    pub store_as: Option<&'a str>,
}

impl ProcessHandle {
    /// Sends `signal` to the root's process group, only while the root is not reaped.
    pub fn signal_group(&self, signal: i32) -> bool {
        super::signal::signal_group_pinned(
            self.pidfd.as_ref(),
            self.pid,
            signal,
            self.exited().is_none(),
        )
    }

    /// Whether the root process has exited.
    pub fn exited(&self) -> Option<ExitInfo> {
        *self.exit.borrow()
    }

    /// Ends the reading of its stdout (issue 47: the next botvisord reads on) and returns what
    /// was read and not yet sent as a line; empty when its reader is gone already.
    pub async fn hand_over(&mut self) -> Vec<u8> {
        let Some(ask) = self.hand_over.take() else {
            return Vec::new();
        };
        let (tx, rx) = oneshot::channel();
        if ask.send(tx).is_err() {
            return Vec::new();
        }
        rx.await.unwrap_or_default()
    }

    /// The last stderr lines, joined.
    pub fn stderr_text(&self) -> String {
        let tail = self.stderr_tail.lock().unwrap_or_else(|p| p.into_inner());
        tail.iter().cloned().collect::<Vec<_>>().join("\n")
    }
}

/// Starts `cmd` as the leader of a new process group, with exactly `cmd.env` as environment,
/// piped stdio, in `cmd.cwd`. Its stdout lines and exit go to `events`.
pub fn spawn(
    cmd: &LaunchCommand,
    generation: u64,
    events: mpsc::UnboundedSender<ProcEvent>,
) -> std::io::Result<ProcessHandle> {
    spawn_in(cmd, None, generation, events)
}

/// [`spawn`], the child first joining the cgroup folder `cgroup` (when given), before `exec`:
/// nothing the agent starts can escape it. Errors: the spawn's, or the cgroup's (the child
/// could not join it: `EACCES`, `ENOENT`, …).
pub fn spawn_in(
    cmd: &LaunchCommand,
    cgroup: Option<&std::path::Path>,
    generation: u64,
    events: mpsc::UnboundedSender<ProcEvent>,
) -> std::io::Result<ProcessHandle> {
    spawn_with(
        cmd,
        Start {
            cgroup,
            ..Start::default()
        },
        generation,
        events,
    )
}

/// [`spawn_in`] as `start` says: held at a gate, and its descriptors stored.
pub fn spawn_with(
    cmd: &LaunchCommand,
    start: Start<'_>,
    generation: u64,
    events: mpsc::UnboundedSender<ProcEvent>,
) -> std::io::Result<ProcessHandle> {
    let (mut command, gate) = if start.gated {
        let (read, write) = gate_pipe()?;
        let mut c = Command::new("/bin/sh");
        c.arg("-c")
            .arg(GATE_SCRIPT)
            .arg(&cmd.program)
            .args(&cmd.args);
        gate_at_fd_3(c.as_std_mut(), read);
        (c, Some(Gate(write)))
    } else {
        let mut c = Command::new(&cmd.program);
        c.args(&cmd.args);
        (c, None)
    };
    if let Some(dir) = start.cgroup {
        super::cgroup::join_before_exec(command.as_std_mut(), dir)?;
    }
    command
        .current_dir(&cmd.cwd)
        .env_clear()
        .envs(&cmd.env)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(false);
    let ((mut child, pidfd), pid) = super::subreaper::spawn_protected(|| {
        let child = command.spawn()?;
        let pid = child.id().unwrap_or(0);
        // Opened while the child cannot have been reaped: it pins this very process.
        let pidfd = super::signal::open_pidfd(pid);
        Ok(((child, pidfd), pid))
    })?;
    let stdin = child.stdin.take();
    let stdout = child.stdout.take().expect("stdout is piped");
    let stderr = child.stderr.take().expect("stderr is piped");
    if let Some(bot_id) = start.store_as {
        store_descriptors(bot_id, stdin.as_ref(), &stdout, &stderr, pidfd.as_ref());
    }
    let stderr_tail = Arc::new(Mutex::new(VecDeque::new()));
    let stderr_read = tokio::spawn(read_stderr(stderr, pid, stderr_tail.clone()));

    let (exit_tx, exit_rx) = watch::channel(None);
    let (hand_tx, hand_rx) = oneshot::channel();
    tokio::spawn(read_stdout(
        stdout,
        Vec::new(),
        false,
        Exit::Child(child),
        Some(stderr_read),
        pid,
        generation,
        events,
        exit_tx,
        hand_rx,
    ));
    Ok(ProcessHandle {
        generation,
        pid,
        stdin,
        exit: exit_rx,
        started: Instant::now(),
        stderr_tail,
        pidfd,
        gate,
        hand_over: Some(hand_tx),
    })
}

/// How the end of an agent's root process is seen.
pub(super) enum Exit {
    /// It is this process's child: waited for, with its status.
    Child(tokio::process::Child),
    /// It is not (an agent a previous botvisord started, issue 47): its pidfd becomes readable
    /// when it exits; the status is read where the kernel tells it (`PIDFD_GET_INFO`), else not
    /// known.
    Pidfd(tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>),
}

impl Exit {
    async fn wait(&mut self) -> ExitInfo {
        match self {
            Exit::Child(child) => child.wait().await.map(exit_info).unwrap_or(ExitInfo {
                code: None,
                signal: None,
            }),
            Exit::Pidfd(fd) => {
                loop {
                    match fd.readable().await {
                        Ok(mut guard) => {
                            guard.retain_ready();
                            break;
                        }
                        Err(_) => std::future::pending::<()>().await,
                    }
                }
                super::signal::pidfd_exit_info(fd.get_ref()).unwrap_or(ExitInfo {
                    code: None,
                    signal: None,
                })
            }
        }
    }
}

/// Whether `first`, what stood before the first newline where another reader stopped (a killed
/// botvisord), is a whole line rather than the end of one it began: every line both CLIs
/// write is one JSON object, and no proper end of a JSON object's text is one (its last `}`
/// closes the object the reader began; a piece of a string holds escaped quotes). A reader
/// killed between two lines, the usual case, so loses nothing (a crash sweep of issue 47 saw
/// the turn's answer dropped when it was that line).
fn a_whole_line(first: &[u8]) -> bool {
    first.first() == Some(&b'{')
        && serde_json::from_slice::<serde_json::Value>(first).is_ok_and(|v| v.is_object())
}

/// Reads the agent's stdout (after `leftover`, bytes read before from it by another reader:
/// a previous botvisord's) line by line into `events` until the root process `exit`s and
/// stdout ends (or [`STDOUT_DRAIN_AFTER_EXIT`] passes), then, once `stderr_read` (its stderr's
/// reader) has read to the end too, within the same bound, sends [`ProcEvent::Exited`]: the
/// exit is judged on every word the agent wrote (an `Invalid API key` on stderr makes it
/// `failed`, not a crash to restart; CI saw the exit come first once).
/// `resync`: the stream may begin within a line another reader took the start of: what comes
/// before the first newline is dropped, unless it is a whole line ([`a_whole_line`]). A request on `hand_over` ends the reading at once, with
/// no `Exited`, and is answered with what was read and not yet sent as a line (issue 47: the
/// next botvisord reads on from there).
#[allow(clippy::too_many_arguments)]
pub(super) async fn read_stdout(
    stdout: impl AsyncRead + Unpin,
    leftover: Vec<u8>,
    resync: bool,
    mut exit_source: Exit,
    stderr_read: Option<tokio::task::JoinHandle<()>>,
    pid: u32,
    generation: u64,
    events: mpsc::UnboundedSender<ProcEvent>,
    exit_tx: watch::Sender<Option<ExitInfo>>,
    mut hand_over: oneshot::Receiver<oneshot::Sender<Vec<u8>>>,
) {
    let mut lines = BufReader::new(tokio::io::AsyncReadExt::chain(
        std::io::Cursor::new(leftover),
        stdout,
    ));
    let mut buf = Vec::new();
    let mut skipping = resync;
    let mut exit: Option<ExitInfo> = None;
    let mut drain_deadline: Option<tokio::time::Instant> = None;
    // False once the handle that could ask for a hand-over is gone.
    let mut can_hand_over = true;
    loop {
        tokio::select! {
            read = lines.read_until(b'\n', &mut buf) => {
                match read {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        let whole = buf.last() == Some(&b'\n');
                        if whole {
                            buf.pop();
                        }
                        if std::mem::take(&mut skipping) && whole && !a_whole_line(&buf) {
                            tracing::debug!(pid, bytes = buf.len(), "dropped the part of a line another reader began");
                            buf.clear();
                            continue;
                        }
                        let _ = events.send(ProcEvent::Line(generation, std::mem::take(&mut buf)));
                    }
                }
            }
            status = exit_source.wait(), if exit.is_none() => {
                exit = Some(status);
                let _ = exit_tx.send(Some(status));
                drain_deadline = Some(tokio::time::Instant::now() + STDOUT_DRAIN_AFTER_EXIT);
            }
            asked = &mut hand_over, if can_hand_over => {
                if let Ok(answer) = asked {
                    let mut rest = std::mem::take(&mut buf);
                    rest.extend_from_slice(lines.buffer());
                    let _ = answer.send(rest);
                    return;
                }
                // The handle was dropped without asking: read on.
                can_hand_over = false;
            }
            _ = sleep_until_opt(drain_deadline) => break,
        }
    }
    if !buf.is_empty() {
        let _ = events.send(ProcEvent::Line(generation, std::mem::take(&mut buf)));
    }
    let info = match exit {
        Some(info) => info,
        None => {
            let info = exit_source.wait().await;
            let _ = exit_tx.send(Some(info));
            info
        }
    };
    if let Some(read) = stderr_read {
        // Bounded as stdout's drain is: a descendant that keeps stderr open holds nothing up.
        let deadline =
            drain_deadline.unwrap_or_else(|| tokio::time::Instant::now() + STDOUT_DRAIN_AFTER_EXIT);
        let _ = tokio::time::timeout_at(deadline, read).await;
    }
    super::subreaper::unprotect(pid);
    let _ = events.send(ProcEvent::Exited(generation, info));
}

/// A pipe for a [`Gate`]: (read end for the child, write end kept), both close-on-exec.
fn gate_pipe() -> std::io::Result<(std::os::fd::OwnedFd, std::os::fd::OwnedFd)> {
    use std::os::fd::FromRawFd;
    let mut fds = [0; 2];
    // SAFETY: pipe2(2) fills the two-element array it is given.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just made by pipe2 and are owned here alone.
    Ok(unsafe {
        (
            std::os::fd::OwnedFd::from_raw_fd(fds[0]),
            std::os::fd::OwnedFd::from_raw_fd(fds[1]),
        )
    })
}

/// The child gets the gate's read end as fd 3 (not close-on-exec), whatever number it had.
fn gate_at_fd_3(command: &mut std::process::Command, read: std::os::fd::OwnedFd) {
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;
    // SAFETY: between fork and exec the closure calls only dup2(2) and fcntl(2), which are
    // async-signal-safe, on a descriptor the closure owns.
    unsafe {
        command.pre_exec(move || {
            let fd = read.as_raw_fd();
            if fd != 3 && libc::dup2(fd, 3) != 3 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::fcntl(3, libc::F_SETFD, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Puts the agent's descriptors in the service's store (issue 47); a failure is said in the
/// journal: the agent then runs as without a store (a restart ends it).
fn store_descriptors(
    bot_id: &str,
    stdin: Option<&ChildStdin>,
    stdout: &tokio::process::ChildStdout,
    stderr: &tokio::process::ChildStderr,
    pidfd: Option<&std::os::fd::OwnedFd>,
) {
    use crate::systemd::fdstore::{Role, name, store};
    use std::os::fd::AsFd;
    let mut done = Vec::new();
    if let Some(fd) = stdin {
        done.push((Role::Stdin, store(&name(bot_id, Role::Stdin), fd.as_fd())));
    }
    done.push((
        Role::Stdout,
        store(&name(bot_id, Role::Stdout), stdout.as_fd()),
    ));
    done.push((
        Role::Stderr,
        store(&name(bot_id, Role::Stderr), stderr.as_fd()),
    ));
    if let Some(fd) = pidfd {
        done.push((Role::Pid, store(&name(bot_id, Role::Pid), fd.as_fd())));
    }
    for (role, r) in done {
        if let Err(e) = r {
            tracing::warn!(bot_id, role = role.as_str(), error = %e, "cannot keep the agent's descriptor in the service's store");
        }
    }
}

/// Takes bot `bot_id`'s descriptors out of the service's store (before its stop: a stored
/// stdin would keep the agent from seeing the end of its input).
pub fn unstore_descriptors(bot_id: &str) {
    use crate::systemd::fdstore::{Role, name, remove};
    for role in Role::ALL {
        if let Err(e) = remove(&name(bot_id, role)) {
            tracing::warn!(bot_id, role = role.as_str(), error = %e, "cannot take the agent's descriptor out of the service's store");
        }
    }
}

async fn sleep_until_opt(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

fn exit_info(status: std::process::ExitStatus) -> ExitInfo {
    use std::os::unix::process::ExitStatusExt;
    ExitInfo {
        code: status.code(),
        signal: status.signal(),
    }
}

pub(super) async fn read_stderr(
    stderr: impl AsyncRead + Unpin,
    pid: u32,
    tail: Arc<Mutex<VecDeque<String>>>,
) {
    let mut lines = BufReader::new(stderr);
    let mut buf = Vec::new();
    while let Ok(n) = lines.read_until(b'\n', &mut buf).await {
        if n == 0 {
            break;
        }
        let line = String::from_utf8_lossy(&buf).trim_end().to_owned();
        buf.clear();
        if line.is_empty() {
            continue;
        }
        tracing::debug!(pid, stderr = %line, "agent stderr");
        let mut t = tail.lock().unwrap_or_else(|p| p.into_inner());
        if t.len() == STDERR_TAIL_LINES {
            t.pop_front();
        }
        t.push_back(line.chars().take(2000).collect());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The exit is told only once stderr was read to its end: here the root exits at once and
    /// closes stdout, and a descendant writes the stderr line a moment later (the order in which
    /// CI once saw an `Invalid API key` arrive after the exit, and the bot restart instead of
    /// failing).
    #[tokio::test]
    async fn the_exit_is_told_after_the_last_stderr_line() {
        let cmd = LaunchCommand {
            program: "/bin/sh".into(),
            args: vec![
                "-c".into(),
                "exec >/dev/null; (sleep 0.3; echo 'Invalid API key' >&2) & exit 1".into(),
            ],
            cwd: std::env::temp_dir(),
            env: [("PATH".to_owned(), "/usr/bin:/bin".to_owned())].into(),
        };
        let (tx, mut rx) = mpsc::unbounded_channel();
        let handle = spawn(&cmd, 1, tx).unwrap();
        let exited = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                match rx.recv().await {
                    Some(ProcEvent::Exited(_, info)) => break info,
                    Some(ProcEvent::Line(..)) => continue,
                    None => panic!("the reader ended without an exit"),
                }
            }
        })
        .await
        .expect("the exit is told within its bound");
        assert_eq!(exited.code, Some(1));
        assert_eq!(handle.stderr_text(), "Invalid API key");
    }

    /// After a crash the first piece is kept only when it is a whole line: a JSON object, which
    /// no proper end of one is.
    #[test]
    fn only_a_whole_json_line_is_kept_after_a_crash() {
        let line = br#"{"type":"assistant","message":{"content":[{"type":"text","text":"a {\"b\":1} c"}]}}"#;
        assert!(a_whole_line(line));
        for cut in 1..line.len() {
            assert!(
                !a_whole_line(&line[cut..]),
                "{}",
                String::from_utf8_lossy(&line[cut..])
            );
        }
        assert!(!a_whole_line(b""));
        assert!(!a_whole_line(b"[1]"));
        assert!(!a_whole_line(b"not json"));
    }
}
