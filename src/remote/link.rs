//! The program of a `unixexec:` address (ssh to another machine and `systemd-stdio-bridge`
//! there), run by us rather than by zbus: on one end of a socket pair, with SIGINT ignored (a
//! Ctrl-C at the terminal is ours to handle, and must not cut the link first), its standard
//! error read line by line, ended with its link ([`Link`]) and reaped, so that a link made again
//! and again (a host that comes and goes) leaves no program and no zombie behind.

use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::time::Duration;

use zbus::address::transport::Unixexec;

/// The program of a `unixexec:` address that carries a connection (`ssh` for `--host`): ended
/// with SIGTERM when this is dropped, unless kept ([`Link::keep`]). On Linux it also gets
/// SIGTERM if its process dies first (`PR_SET_PDEATHSIG`), so no link outlives it.
pub struct Link {
    /// The program's pid; `None` for a bus without one.
    pid: Option<u32>,
    /// Whether the program leads a process group of its own (a link of one host of several),
    /// which is ended whole: what it started too.
    group: bool,
    /// Set when it is ended: what it prints from then on is not passed on.
    ended: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

/// The links being ended (their grace running): waited for before the process exits
/// ([`finish_links`]).
static ENDING: std::sync::Mutex<Vec<std::thread::JoinHandle<()>>> =
    std::sync::Mutex::new(Vec::new());

/// Waits until every link being ended has ended (at most [`LINK_GRACE`] each, then killed):
/// called as a program exits, after its tasks (and their links) were dropped.
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
    /// The program lives on until this process ends.
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
        let mut all = ENDING.lock().unwrap_or_else(|p| p.into_inner());
        // Those that ended are let go (a finished thread not joined keeps its stack mapped: a
        // hostile run saw a host coming and going grow the maps without end).
        all.retain(|t| !t.is_finished());
        all.push(ending);
    }
}

/// The program of a `unixexec:` address, running: our end of its socket pair, and what is known
/// of it when connecting failed.
pub struct Program {
    /// Our end of the socket pair.
    pub stream: UnixStream,
    /// Its exit status, sent once it exited.
    status: tokio::sync::oneshot::Receiver<std::io::Result<std::process::ExitStatus>>,
    /// Sent (or dropped) when its standard error reached its end.
    stderr_done: tokio::sync::oneshot::Receiver<()>,
    /// Ends it when dropped.
    pub link: Link,
}

impl Program {
    /// After connecting over it failed: its exit status in words (waited for up to 2 s, without
    /// holding the thread: it ends when it closed the connection). One still running then is
    /// ended; one that ended by itself has what it printed last passed on whole before its
    /// link is let go (ending the link first would silence it; a CI run saw its words lost).
    pub async fn end_after_failure(self) -> String {
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
            let _ = tokio::time::timeout(wait, self.stderr_done).await;
            self.link.keep();
        }
        status
    }
}

/// Runs the program of `exec` with its standard input and output on one end of a socket pair.
/// Each line of its standard error goes to `on_line` (without its line end, as read; none once
/// its link was ended by us: its last words then are not news), from a thread. SIGINT is ignored
/// in it, and on Linux it gets SIGTERM when this process dies. `own_group`: it leads a session
/// (and so a process group) of its own, with no controlling terminal, ended whole with its
/// link (not for a program that may ask on the terminal: ssh's host key, a passphrase). A
/// line longer than [`MAX_LINE`] bytes is passed on cut to that, the rest of it dropped. A
/// thread waits for it to exit (it does when the connection closes). Errors: it cannot be
/// started.
pub fn run_program(
    exec: &Unixexec,
    own_group: bool,
    mut on_line: impl FnMut(&str) + Send + 'static,
) -> std::io::Result<Program> {
    let (ours, theirs) = UnixStream::pair()?;
    let mut cmd = std::process::Command::new(exec.path());
    cmd.args(exec.args())
        .stdin(OwnedFd::from(theirs.try_clone()?))
        .stdout(OwnedFd::from(theirs))
        .stderr(std::process::Stdio::piped());
    if let Some(arg0) = exec.arg0() {
        cmd.arg0(arg0);
    }
    // SAFETY: signal(2), setsid(2) and prctl(2) are async-signal-safe and touch no memory of
    // ours.
    unsafe {
        cmd.pre_exec(move || {
            libc::signal(libc::SIGINT, libc::SIG_IGN);
            if own_group {
                // A session of its own: a process group of its own, and no controlling
                // terminal, so that nothing it runs writes over a screen of ours or waits on a
                // question there (ssh then fails at once, saying why).
                libc::setsid();
            }
            #[cfg(target_os = "linux")]
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            Ok(())
        });
    }
    let mut child = cmd.spawn()?;
    let link = Link {
        pid: Some(child.id()),
        group: own_group,
        ended: Default::default(),
    };
    let (done_tx, stderr_done) = tokio::sync::oneshot::channel();
    if let Some(err) = child.stderr.take() {
        let ended = link.ended.clone();
        std::thread::spawn(move || {
            let mut err = std::io::BufReader::new(err);
            let mut pace = Pace::new();
            while let Some(line) = bounded_line(&mut err) {
                if !ended.load(std::sync::atomic::Ordering::SeqCst) {
                    let text = String::from_utf8_lossy(&line);
                    on_line(text.trim_end_matches(['\n', '\r']));
                }
                // Past its burst, a program that writes without end is read at the pace's
                // rate: it waits on its full pipe, and no log or CPU goes with it.
                std::thread::sleep(pace.wait());
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
        stderr_done,
        link,
    })
}

/// The most bytes of one line of a link program's standard error that are kept: a program
/// that writes without a newline is not buffered without end.
pub const MAX_LINE: usize = 4096;

/// How many lines of a link program's standard error are read at once before they are read at
/// [`LINES_PER_SECOND`]: an ssh's banner and its errors fit; a program that floods its
/// standard error (a hostile run saw 17 MB of log a second and a whole core) is slowed to that
/// pace by its own full pipe.
pub const LINES_BURST: f64 = 200.0;

/// The pace at which a link program's lines are read past [`LINES_BURST`].
pub const LINES_PER_SECOND: f64 = 5.0;

/// A token bucket: [`LINES_BURST`] lines at once, then [`LINES_PER_SECOND`].
struct Pace {
    tokens: f64,
    at: std::time::Instant,
}

impl Pace {
    fn new() -> Pace {
        Pace {
            tokens: LINES_BURST,
            at: std::time::Instant::now(),
        }
    }

    /// One line taken: how long to wait before the next may be read.
    fn wait(&mut self) -> Duration {
        let now = std::time::Instant::now();
        let earned = now.duration_since(self.at).as_secs_f64() * LINES_PER_SECOND;
        self.at = now;
        self.tokens = (self.tokens + earned).min(LINES_BURST) - 1.0;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / LINES_PER_SECOND)
        }
    }
}

/// The next line of `from` (its newline included when it has one), at most [`MAX_LINE`] bytes;
/// what a longer line has past that is read and dropped. `None` at the end (or an error).
fn bounded_line(from: &mut impl std::io::BufRead) -> Option<Vec<u8>> {
    let mut line = Vec::new();
    let mut any = false;
    loop {
        let got = match from.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return any.then_some(line),
        };
        if got.is_empty() {
            return any.then_some(line);
        }
        any = true;
        let (take, done) = match got.iter().position(|b| *b == b'\n') {
            Some(i) => (i + 1, true),
            None => (got.len(), false),
        };
        let room = MAX_LINE.saturating_sub(line.len());
        line.extend_from_slice(&got[..take.min(room)]);
        from.consume(take);
        if done {
            return Some(line);
        }
    }
}

impl Link {
    /// A link with no program (a bus reached without one): dropping it does nothing.
    pub fn none() -> Link {
        Link {
            pid: None,
            group: false,
            ended: Default::default(),
        }
    }
}

/// How often a followed host's link is checked ([`stops_answering`]: its bus's `GetId`,
/// answered by the bus itself; botvisord leaving is other news, not the link's). With [`PING_BOUND`], a host that
/// is gone (a machine off, a network cut: nothing answers, nothing closes) is `offline` within
/// 4 s.
pub const PING_EVERY: Duration = Duration::from_secs(2);

/// How long a check may take before the link counts as gone.
pub const PING_BOUND: Duration = Duration::from_secs(2);

/// The first wait before a host that is offline is tried again; it doubles to [`BACKOFF_MAX`].
pub const BACKOFF_FIRST: Duration = Duration::from_secs(1);

/// The longest wait between two tries of a host that is offline.
pub const BACKOFF_MAX: Duration = Duration::from_secs(30);

/// The wait before a host that is offline is tried again: [`BACKOFF_FIRST`], doubling at each
/// try to [`BACKOFF_MAX`], and the first again once the host answered ([`Backoff::reset`]).
/// The one rule `ui`, `watch` and `botvisor-notify` keep their links by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff(Duration);

impl Default for Backoff {
    fn default() -> Self {
        Backoff(BACKOFF_FIRST)
    }
}

impl Backoff {
    /// The host answered: the next wait is the first.
    pub fn reset(&mut self) {
        self.0 = BACKOFF_FIRST;
    }

    /// The wait the next [`Backoff::wait`] takes.
    pub fn next(&self) -> Duration {
        self.0
    }

    /// Waits [`Backoff::next`], and doubles it for the try after (at most [`BACKOFF_MAX`]).
    pub async fn wait(&mut self) {
        tokio::time::sleep(self.0).await;
        self.0 = (self.0 * 2).min(BACKOFF_MAX);
    }
}

/// Waits until the link on `conn` stops answering: its bus's `GetId` asked every
/// [`PING_EVERY`], failed or not answered within [`PING_BOUND`]. Why, in words.
pub async fn stops_answering(conn: &zbus::Connection) -> String {
    let bus = match zbus::fdo::DBusProxy::new(conn).await {
        Ok(b) => b,
        Err(e) => return format!("the link failed: {e}"),
    };
    loop {
        tokio::time::sleep(PING_EVERY).await;
        match tokio::time::timeout(PING_BOUND, bus.get_id()).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return format!("the link failed: {e}"),
            Err(_) => {
                return format!(
                    "the link stopped answering (no answer within {} s)",
                    PING_BOUND.as_secs()
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_backoff_doubles_to_its_longest_and_starts_again_once_reset() {
        let mut b = Backoff::default();
        let mut waits = Vec::new();
        for _ in 0..7 {
            let at = tokio::time::Instant::now();
            b.wait().await;
            waits.push(at.elapsed().as_secs());
        }
        assert_eq!(waits, [1, 2, 4, 8, 16, 30, 30]);
        b.reset();
        assert_eq!(b.next(), BACKOFF_FIRST);
    }

    #[test]
    fn a_flood_of_lines_is_read_at_a_pace_past_its_burst() {
        let mut pace = Pace::new();
        let burst = LINES_BURST as usize;
        assert!((0..burst).all(|_| pace.wait() == Duration::ZERO));
        let wait = pace.wait();
        assert!(
            wait > Duration::from_millis(150) && wait <= Duration::from_millis(200),
            "{wait:?}"
        );
    }

    #[test]
    fn a_line_without_end_is_kept_to_its_bound() {
        let mut text = vec![b'x'; MAX_LINE * 3];
        text.extend_from_slice(b"\nnext\nlast");
        let mut from = std::io::BufReader::with_capacity(64, &text[..]);
        let first = bounded_line(&mut from).unwrap();
        assert_eq!(first.len(), MAX_LINE);
        assert_eq!(bounded_line(&mut from).unwrap(), b"next\n");
        assert_eq!(bounded_line(&mut from).unwrap(), b"last");
        assert_eq!(bounded_line(&mut from), None);
    }
}
