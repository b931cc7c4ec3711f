//! Lines to the running CLI's stdin: messages, control requests (design rule 6, decided in
//! `crate::supervisor::core::control`) and answers.
//!
//! A line goes straight from the actor to the pipe when nothing waits before it and the pipe
//! takes it whole at once (issue 50: no hand-off to another task on a `Send`'s way to the
//! agent; that hand-off was 73 µs of row 1 at the median). What the pipe does not take at once,
//! and every line after it until it is written, goes to the stdin's writer task, which writes
//! in order and waits for the pipe.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::{Arc, Mutex};

use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;

use super::Actor;

impl Actor {
    /// Writes `lines` to the current process's stdin, each with its newline; whether all went
    /// (false when there is no process or its stdin is closed).
    pub(super) fn write_lines(&self, lines: Vec<String>) -> bool {
        self.to_stdin(lines, false)
    }

    /// Writes the lines of a user message, as [`Actor::write_lines`]; once the last is written
    /// whole, the message's delivery is recorded whole.
    pub(super) fn write_message(&self, lines: Vec<String>) -> bool {
        self.to_stdin(lines, true)
    }

    fn to_stdin(&self, lines: Vec<String>, message: bool) -> bool {
        let Some(stdin) = self.proc.as_ref().and_then(|p| p.stdin.as_ref()) else {
            return lines.is_empty();
        };
        let last = lines.len().saturating_sub(1);
        lines.into_iter().enumerate().all(|(i, line)| {
            let mut bytes = line.into_bytes();
            bytes.push(b'\n');
            stdin.send(ToStdin {
                bytes,
                ends_message: message && i == last,
            })
        })
    }
}

/// What the writer of a process's stdin is given: a line with its newline, and whether it ends
/// a user message.
pub(super) struct ToStdin {
    bytes: Vec<u8>,
    /// The last line of a user message: once it is written whole, the message's delivery is
    /// recorded whole (`store::deliveries::written_whole`), so that a botvisord killed in the
    /// middle of a big message leaves a record that its agent's stdin holds part of a line.
    ends_message: bool,
}

/// The way to a process's stdin ([`spawn_writer`]). Dropping it closes stdin once the writer
/// task wrote what it was given (a stored duplicate of the pipe, issue 47, keeps it open).
pub(super) struct StdinLink {
    tx: mpsc::UnboundedSender<ToStdin>,
    /// The straight way, when the pipe is nonblocking.
    direct: Option<Direct>,
    /// Pieces handed to the writer task and not yet written: the straight way is taken only at
    /// 0, so that lines reach the pipe in the order they were sent.
    queued: Arc<Mutex<usize>>,
    whole: Arc<dyn Fn() + Send + Sync>,
}

/// A duplicate of the pipe's write end, nonblocking (the flag belongs to the pipe, which the
/// writer's end shares); closed with the link.
struct Direct(OwnedFd);

impl StdinLink {
    /// Whether the writer task ended (the pipe broke): nothing more can be written.
    pub(super) fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }

    /// Writes `piece` now if nothing waits before it and the pipe takes it whole, else hands
    /// (the rest of) it to the writer task; false when the writer task ended.
    fn send(&self, mut piece: ToStdin) -> bool {
        if self.tx.is_closed() {
            return false;
        }
        let mut queued = lock(&self.queued);
        if *queued == 0
            && let Some(Direct(fd)) = &self.direct
        {
            match write_now(fd, &piece.bytes) {
                Some(n) if n == piece.bytes.len() => {
                    drop(queued);
                    if piece.ends_message {
                        (self.whole)();
                    }
                    return true;
                }
                Some(n) => {
                    piece.bytes.drain(..n);
                }
                // The pipe is full, or broke: the writer task waits for it, or finds out.
                None => {}
            }
        }
        // Counted and sent under the lock: no straight write can pass it.
        *queued += 1;
        self.tx.send(piece).is_ok()
    }
}

/// One nonblocking write of `bytes` to `fd`: how many were written, `None` when none could
/// be (a full pipe, a broken one).
fn write_now(fd: &OwnedFd, bytes: &[u8]) -> Option<usize> {
    loop {
        // SAFETY: `fd` is open for the call and `bytes` is a valid buffer of its length.
        let n = unsafe { libc::write(fd.as_raw_fd(), bytes.as_ptr().cast(), bytes.len()) };
        if n >= 0 {
            return Some(n as usize);
        }
        if std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return None;
        }
    }
}

/// Whether `fd` is in nonblocking mode: a write to it never waits.
fn nonblocking(fd: &impl AsFd) -> bool {
    // SAFETY: F_GETFL only reads the flags of an open descriptor.
    let flags = unsafe { libc::fcntl(fd.as_fd().as_raw_fd(), libc::F_GETFL) };
    flags >= 0 && flags & libc::O_NONBLOCK != 0
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A task that owns a process's stdin and writes what it is sent, and the link that sends to
/// it (or writes straight to the pipe, [`StdinLink`]). `whole` is called after the last line of
/// each user message is written whole, by whichever wrote it. The task ends once the link is
/// dropped and every line it was given is written (or the pipe broke).
pub(super) fn spawn_writer<W>(
    mut stdin: W,
    whole: impl Fn() + Send + Sync + 'static,
) -> (StdinLink, tokio::task::JoinHandle<()>)
where
    W: tokio::io::AsyncWrite + AsFd + Unpin + Send + 'static,
{
    let direct = nonblocking(&stdin)
        .then(|| stdin.as_fd().try_clone_to_owned().ok())
        .flatten()
        .map(Direct);
    let whole: Arc<dyn Fn() + Send + Sync> = Arc::new(whole);
    let queued = Arc::new(Mutex::new(0usize));
    let (tx, mut rx) = mpsc::unbounded_channel::<ToStdin>();
    let task = {
        let (whole, queued) = (whole.clone(), queued.clone());
        tokio::spawn(async move {
            while let Some(piece) = rx.recv().await {
                if stdin.write_all(&piece.bytes).await.is_err() || stdin.flush().await.is_err() {
                    break;
                }
                if piece.ends_message {
                    whole();
                }
                *lock(&queued) -= 1;
            }
        })
    };
    let link = StdinLink {
        tx,
        direct,
        queued,
        whole,
    };
    (link, task)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::AsyncReadExt;

    fn piece(text: &str, ends_message: bool) -> ToStdin {
        ToStdin {
            bytes: text.as_bytes().to_vec(),
            ends_message,
        }
    }

    /// Issue 50: lines written straight when the pipe takes them, through the writer task when
    /// it does not (a line bigger than the pipe), arrive whole and in the order sent, and each
    /// message's end is told once, after its last byte went.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn lines_arrive_in_order_whichever_way_they_went() {
        let (tx, mut rx) = tokio::net::unix::pipe::pipe().unwrap();
        // Read all along: the pipe has room again while a big line's rest still waits.
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            rx.read_to_end(&mut got).await.unwrap();
            got
        });
        let wholes = Arc::new(AtomicUsize::new(0));
        let counted = wholes.clone();
        let (link, task) = spawn_writer(tx, move || {
            counted.fetch_add(1, Ordering::SeqCst);
        });
        assert!(link.direct.is_some(), "tokio's pipe is nonblocking");
        let big = format!("{}\n", "x".repeat(1 << 20));
        let mut sent = String::new();
        for i in 0..50 {
            let small = format!("line {i}\n");
            assert!(link.send(piece(&small, i % 10 == 9)));
            sent.push_str(&small);
            if i % 10 == 4 {
                // Bigger than any pipe's buffer: written in part at most, the rest queued; the
                // small lines after it must wait for it.
                assert!(link.send(piece(&big, false)));
                sent.push_str(&big);
            }
            tokio::task::yield_now().await;
        }
        drop(link);
        let got = reader.await.unwrap();
        task.await.unwrap();
        assert!(got == sent.as_bytes(), "the bytes as sent, in order");
        assert_eq!(wholes.load(Ordering::SeqCst), 5, "each message's end, once");
    }

    /// A line the pipe takes at once is written before `send` returns: no task had to run.
    #[tokio::test(flavor = "current_thread")]
    async fn a_line_the_pipe_takes_is_written_before_send_returns() {
        let (tx, rx) = tokio::net::unix::pipe::pipe().unwrap();
        let (link, _task) = spawn_writer(tx, || {});
        assert!(link.send(piece("hello\n", false)));
        let mut buf = [0u8; 16];
        // No await since the send: the writer task has not run on this one thread. Read by
        // the system call itself (tokio's `try_read` trusts readiness it has not seen yet).
        // SAFETY: the descriptor is open and `buf` is a valid buffer of its length.
        let n = unsafe { libc::read(rx.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        assert!(n > 0, "something was written");
        assert_eq!(&buf[..n as usize], b"hello\n");
    }
}
