//! An agent another botvisord started, taken over (issue 47): its pipes and pidfd come back from
//! the service's file descriptor store, and it is read on from where its stream stands. It is
//! not this process's child (the user manager reaps it): its end is seen through its pidfd.

use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::net::unix::pipe;
use tokio::sync::{mpsc, oneshot, watch};

use super::spawn::{Exit, ProcEvent, ProcessHandle, read_stdout};

/// The descriptors of an agent, as a previous botvisord stored them.
#[derive(Debug)]
pub struct Descriptors {
    /// The write end of its stdin.
    pub stdin: OwnedFd,
    /// The read end of its stdout.
    pub stdout: OwnedFd,
    /// The read end of its stderr, if it was stored.
    pub stderr: Option<OwnedFd>,
    /// A pidfd of its root process, if it was stored (else one is opened by pid).
    pub pidfd: Option<OwnedFd>,
}

/// Takes over the agent `pid` (whose identity the caller checked: same start time, same boot)
/// through `fds`: its stdout is read on after `leftover` (what the previous botvisord had read
/// and not handled; `resync` when that is not known, after a crash: the first partial line is
/// dropped), its lines and end go to `events` as generation `generation`. Returns the handle and
/// its stdin, for a writer. Errors: a descriptor that is not what it should be (not a pipe, the
/// wrong end), or no pidfd for `pid`.
pub fn attach(
    pid: u32,
    fds: Descriptors,
    leftover: Vec<u8>,
    resync: bool,
    generation: u64,
    events: mpsc::UnboundedSender<ProcEvent>,
) -> std::io::Result<(ProcessHandle, pipe::Sender)> {
    let stdin = pipe::Sender::from_owned_fd(fds.stdin)?;
    let stdout = pipe::Receiver::from_owned_fd(fds.stdout)?;
    let pidfd = match fds.pidfd {
        Some(fd) => fd,
        None => super::signal::open_pidfd(pid).ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("no pidfd for process {pid}"),
            )
        })?,
    };
    // SAFETY: an OwnedFd keeps its one descriptor open, unchanged, until the AsyncFd drops it.
    let watch_fd = unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(
            pidfd.try_clone()?,
            tokio::io::Interest::READABLE,
        )
    }?;
    let stderr_tail = Arc::new(Mutex::new(std::collections::VecDeque::new()));
    let mut stderr_read = None;
    if let Some(fd) = fds.stderr {
        match pipe::Receiver::from_owned_fd(fd) {
            Ok(r) => {
                let tail = stderr_tail.clone();
                stderr_read = Some(tokio::spawn(super::spawn::read_stderr(r, pid, tail)));
            }
            Err(e) => tracing::warn!(pid, error = %e, "the agent's stderr cannot be read on"),
        }
    }
    let (exit_tx, exit_rx) = watch::channel(None);
    let (hand_tx, hand_rx) = oneshot::channel();
    tokio::spawn(read_stdout(
        stdout,
        leftover,
        resync,
        Exit::Pidfd(watch_fd),
        stderr_read,
        pid,
        generation,
        events,
        exit_tx,
        hand_rx,
    ));
    Ok((
        ProcessHandle {
            generation,
            pid,
            stdin: None,
            exit: exit_rx,
            started: Instant::now(),
            stderr_tail,
            pidfd: Some(pidfd),
            gate: None,
            hand_over: Some(hand_tx),
        },
        stdin,
    ))
}
