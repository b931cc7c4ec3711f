//! Spawning a CLI process and turning its output into [`ProcEvent`]s.

use std::collections::VecDeque;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{ChildStdin, Command};
use tokio::sync::{mpsc, watch};

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
    let mut command = Command::new(&cmd.program);
    if let Some(dir) = cgroup {
        super::cgroup::join_before_exec(command.as_std_mut(), dir)?;
    }
    command
        .args(&cmd.args)
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
    let stderr_tail = Arc::new(Mutex::new(VecDeque::new()));
    tokio::spawn(read_stderr(stderr, pid, stderr_tail.clone()));

    let (exit_tx, exit_rx) = watch::channel(None);
    tokio::spawn(async move {
        let mut lines = BufReader::new(stdout);
        let mut buf = Vec::new();
        let mut exit: Option<ExitInfo> = None;
        let mut drain_deadline: Option<tokio::time::Instant> = None;
        loop {
            tokio::select! {
                read = lines.read_until(b'\n', &mut buf) => {
                    match read {
                        Ok(0) | Err(_) => break,
                        Ok(_) => {
                            if buf.last() == Some(&b'\n') {
                                buf.pop();
                            }
                            let _ = events.send(ProcEvent::Line(generation, std::mem::take(&mut buf)));
                        }
                    }
                }
                status = child.wait(), if exit.is_none() => {
                    let info = status.map(exit_info).unwrap_or(ExitInfo { code: None, signal: None });
                    exit = Some(info);
                    let _ = exit_tx.send(Some(info));
                    drain_deadline = Some(tokio::time::Instant::now() + STDOUT_DRAIN_AFTER_EXIT);
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
                let info = child.wait().await.map(exit_info).unwrap_or(ExitInfo {
                    code: None,
                    signal: None,
                });
                let _ = exit_tx.send(Some(info));
                info
            }
        };
        super::subreaper::unprotect(pid);
        let _ = events.send(ProcEvent::Exited(generation, info));
    });

    Ok(ProcessHandle {
        generation,
        pid,
        stdin,
        exit: exit_rx,
        started: Instant::now(),
        stderr_tail,
        pidfd,
    })
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

async fn read_stderr(stderr: impl AsyncRead + Unpin, pid: u32, tail: Arc<Mutex<VecDeque<String>>>) {
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
