//! Memory pressure as the kernel tells it (issue 31): PSI, the kernel's pressure stall
//! information (`Documentation/accounting/psi.rst`). A trigger written to a pressure file,
//! `some <stall µs> <window µs>`, makes that open file signal `POLLPRI` each time tasks stalled
//! on memory for at least the stall within a window, at most once per window. botvisord waits
//! for it through the async runtime's epoll (no thread, no timer): with no pressure nothing wakes
//! it (design rule 12, "idle means idle").
//!
//! Which file ([`candidates`]): the one the configuration names (`memory_pressure_file`), else
//! the `memory.pressure` of the cgroup that holds botvisord and its bots (the delegated subtree's
//! root, or the daemon's own cgroup v2, from the `0::` line of `/proc/self/cgroup`), else the
//! system's `/proc/pressure/memory`. A kernel without PSI (or a container that hides it) gives
//! none: the daemon says so once and stops no bot for memory.
//!
//! A FIFO named by the configuration is read instead as a test hook: each line written to it is
//! one pressure event (the tests cannot make the kernel stall on demand).

use std::io::Write as _;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader, Interest};

use super::cgroup::{cgroup2_mounts, own_cgroup};

/// The system's memory pressure file.
pub const SYSTEM_FILE: &str = "/proc/pressure/memory";

/// The widest window the kernel takes for a trigger.
pub const MAX_WINDOW: Duration = Duration::from_secs(10);

/// The longest line of the FIFO test hook read as one event, in bytes.
pub const MAX_LINE: usize = 4096;

/// A PSI trigger: tasks stalled on memory for `stall` within `window` (the `some` line: at least
/// one task stalled, not all of them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Trigger {
    /// The stall that fires it, at least 1 µs and at most `window`.
    pub stall: Duration,
    /// The window, from 500 ms to 10 s; a user other than root may only use whole multiples of
    /// 2 s (Linux 6.5 and later).
    pub window: Duration,
}

impl Trigger {
    /// What is written to the pressure file: `some <stall µs> <window µs>` and a newline (the
    /// kernel reads one write as one trigger and drops its last byte).
    pub fn line(&self) -> String {
        format!(
            "some {} {}\n",
            self.stall.as_micros(),
            self.window.as_micros()
        )
    }
}

/// The files to try, in order: `given` alone when the configuration names one; else the
/// `memory.pressure` of the bots' delegated subtree (`subtree`, [`super::cgroup::subtree`]),
/// or without one of the daemon's own cgroup v2 (`proc_self_cgroup` and `mountinfo` are the
/// texts of `/proc/self/cgroup` and `/proc/self/mountinfo`; a cgroup no cgroup2 mount shows is
/// left out), then [`SYSTEM_FILE`].
pub fn candidates(
    given: Option<&Path>,
    subtree: Option<&Path>,
    proc_self_cgroup: &str,
    mountinfo: &str,
) -> Vec<PathBuf> {
    if let Some(given) = given {
        return vec![given.to_owned()];
    }
    let mut out = Vec::new();
    if let Some(root) = subtree {
        // The daemon moved itself into a leaf of it: the root holds the daemon and its bots.
        out.push(root.join("memory.pressure"));
    } else if let Some(own) = own_cgroup(proc_self_cgroup) {
        let shown = cgroup2_mounts(mountinfo)
            .into_iter()
            .filter_map(|m| {
                let rel = if m.root == "/" {
                    Some(own)
                } else {
                    own.strip_prefix(m.root.as_str())
                        .filter(|r| r.is_empty() || r.starts_with('/'))
                }?;
                Some((
                    m.root.len(),
                    m.mount_point.join(rel.trim_start_matches('/')),
                ))
            })
            .max_by_key(|(len, _)| *len);
        if let Some((_, dir)) = shown {
            out.push(dir.join("memory.pressure"));
        }
    }
    out.push(PathBuf::from(SYSTEM_FILE));
    out
}

/// An open watch on memory pressure.
#[derive(Debug)]
pub struct Watch {
    path: PathBuf,
    how: How,
}

#[derive(Debug)]
enum How {
    /// A PSI file with a trigger on it.
    Psi {
        fd: AsyncFd<std::fs::File>,
        window: Duration,
        last: Option<tokio::time::Instant>,
    },
    /// A FIFO (the test hook): each line is one event.
    Lines(BufReader<tokio::net::unix::pipe::Receiver>),
}

impl Watch {
    /// Opens `path` for `trigger`: a PSI file gets the trigger; a FIFO is read line by line (the
    /// test hook). Must be called within the async runtime. Errors: the kernel's (`ENOENT` for
    /// no such file, `EOPNOTSUPP` for a kernel without PSI, `EINVAL` for a window it refuses,
    /// `EACCES`, …).
    pub fn open(path: &Path, trigger: &Trigger) -> std::io::Result<Watch> {
        let how = if std::fs::metadata(path)?.file_type().is_fifo() {
            let rx = tokio::net::unix::pipe::OpenOptions::new()
                .read_write(true)
                .open_receiver(path)?;
            How::Lines(BufReader::new(rx))
        } else {
            let file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(path)?;
            let line = trigger.line();
            // One write is one trigger: never split.
            let n = (&file).write(line.as_bytes())?;
            if n != line.len() {
                return Err(std::io::Error::other(format!(
                    "the kernel took {n} of the trigger's {} bytes",
                    line.len()
                )));
            }
            // SAFETY: the `File` owns its descriptor, which stays open and the same until the
            // `AsyncFd` that owns the `File` is dropped.
            let fd = unsafe { AsyncFd::register_with_interest(file, Interest::PRIORITY) }?;
            How::Psi {
                fd,
                window: trigger.window,
                last: None,
            }
        };
        Ok(Watch {
            path: path.to_owned(),
            how,
        })
    }

    /// The file watched.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Waits for the next pressure event and returns what the file says of it: a PSI file's
    /// `some` line now (`some avg10=… avg60=… avg300=… total=…`), or the FIFO's line. Two events
    /// of a PSI file are at least its window apart, whatever the file signals. Errors: the
    /// file's end or a failed wait (the watch is over).
    pub async fn next(&mut self) -> std::io::Result<String> {
        match &mut self.how {
            How::Psi { fd, window, last } => {
                loop {
                    let mut guard = fd.ready(Interest::PRIORITY).await?;
                    let ready = guard.ready();
                    guard.clear_ready();
                    if ready.is_priority() {
                        break;
                    }
                    if ready.is_read_closed() {
                        return Err(std::io::Error::other(
                            "the pressure file was closed (its cgroup removed?)",
                        ));
                    }
                }
                if let Some(at) = *last {
                    tokio::time::sleep_until(at + *window).await;
                }
                *last = Some(tokio::time::Instant::now());
                let text = std::fs::read_to_string(&self.path).unwrap_or_default();
                Ok(text
                    .lines()
                    .find(|l| l.starts_with("some"))
                    .unwrap_or_default()
                    .to_owned())
            }
            How::Lines(reader) => {
                // At most MAX_LINE bytes a line: a longer one is several events.
                let mut line = Vec::new();
                let n = (&mut *reader)
                    .take(MAX_LINE as u64)
                    .read_until(b'\n', &mut line)
                    .await?;
                if n == 0 {
                    return Err(std::io::Error::other("the FIFO was closed"));
                }
                let text = String::from_utf8_lossy(&line);
                Ok(crate::text::escape(text.trim(), false).into_owned())
            }
        }
    }
}

/// Opens the first of `files` ([`candidates`]) that takes `trigger`; otherwise why none did, one
/// reason per file, for the journal.
pub fn watch(files: &[PathBuf], trigger: &Trigger) -> Result<Watch, String> {
    let mut why = Vec::new();
    for file in files {
        match Watch::open(file, trigger) {
            Ok(w) => return Ok(w),
            Err(e) => why.push(format!("{}: {e}", file.display())),
        }
    }
    Err(why.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO_S: Trigger = Trigger {
        stall: Duration::from_millis(150),
        window: Duration::from_secs(2),
    };

    #[test]
    fn the_trigger_is_one_line_in_microseconds() {
        assert_eq!(TWO_S.line(), "some 150000 2000000\n");
    }

    const MOUNTINFO: &str = "24 1 0:22 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw\n";

    #[test]
    fn the_bots_subtree_then_the_daemons_cgroup_then_the_system() {
        let subtree = Path::new("/sys/fs/cgroup/app.slice/botvisord.service");
        assert_eq!(
            candidates(
                None,
                Some(subtree),
                "0::/app.slice/botvisord.service/daemon\n",
                MOUNTINFO
            ),
            [
                PathBuf::from("/sys/fs/cgroup/app.slice/botvisord.service/memory.pressure"),
                PathBuf::from(SYSTEM_FILE),
            ],
            "the subtree's root holds the bots; the daemon's leaf only the daemon"
        );
        assert_eq!(
            candidates(None, None, "0::/user.slice/session-2.scope\n", MOUNTINFO),
            [
                PathBuf::from("/sys/fs/cgroup/user.slice/session-2.scope/memory.pressure"),
                PathBuf::from(SYSTEM_FILE),
            ]
        );
    }

    #[test]
    fn without_cgroup_v2_the_system_file_alone() {
        // This machine's kind: a `0::/` line, but only cgroup v1 mounted.
        let v1 = "30 24 0:26 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n";
        assert_eq!(
            candidates(None, None, "4:memory:/x\n0::/\n", v1),
            [PathBuf::from(SYSTEM_FILE)]
        );
        assert_eq!(candidates(None, None, "", ""), [PathBuf::from(SYSTEM_FILE)]);
    }

    #[test]
    fn a_file_named_in_the_configuration_is_the_only_one() {
        let given = Path::new("/run/user/1000/pressure");
        assert_eq!(
            candidates(Some(given), None, "0::/a\n", MOUNTINFO),
            [given.to_owned()]
        );
    }

    #[tokio::test]
    async fn a_fifo_gives_one_event_per_line() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("pressure");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo(3) with a NUL-terminated path that outlives the call.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let mut watch = Watch::open(&fifo, &TWO_S).unwrap();
        let mut next = async || {
            tokio::time::timeout(Duration::from_secs(10), watch.next())
                .await
                .expect("an event within 10 s")
                .unwrap()
        };
        std::fs::OpenOptions::new()
            .write(true)
            .open(&fifo)
            .unwrap()
            .write_all(b"one\ntwo\n")
            .unwrap();
        assert_eq!(next().await, "one");
        assert_eq!(next().await, "two");
        // A longer line is read in bounded pieces, each an event; nothing is said raw.
        let long = format!("\u{1b}{}\n", "x".repeat(MAX_LINE + 10));
        std::fs::OpenOptions::new()
            .write(true)
            .open(&fifo)
            .unwrap()
            .write_all(long.as_bytes())
            .unwrap();
        let first = next().await;
        assert!(first.starts_with("\\u{1b}x"), "{first:.20}");
        assert_eq!(next().await, "x".repeat(11));
    }

    #[test]
    fn no_file_is_a_reason_not_a_panic() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _in = rt.enter();
        let why = watch(&[PathBuf::from("/nonexistent/memory.pressure")], &TWO_S).unwrap_err();
        assert!(why.contains("/nonexistent/memory.pressure"), "{why}");
    }

    /// On a kernel with PSI (this one's `/proc/pressure/memory`): the kernel takes the trigger
    /// line botvisord writes, and refuses one it cannot take (a stall longer than its window),
    /// so the line is read by the kernel, not just written somewhere. Passes without a check on
    /// a kernel without PSI (before Linux 4.20), where botvisord runs without the watch.
    #[tokio::test]
    async fn the_kernel_takes_the_trigger_and_refuses_a_malformed_one() {
        if !Path::new(SYSTEM_FILE).exists() {
            eprintln!("not checked: no {SYSTEM_FILE} (a kernel without PSI)");
            return;
        }
        if let Err(e) = Watch::open(Path::new(SYSTEM_FILE), &TWO_S) {
            panic!("{SYSTEM_FILE} refused the trigger {:?}: {e}", TWO_S.line());
        }
        let malformed = Trigger {
            stall: Duration::from_secs(3),
            window: Duration::from_secs(2),
        };
        let refused = Watch::open(Path::new(SYSTEM_FILE), &malformed)
            .expect_err("a stall longer than its window is refused");
        assert_eq!(refused.raw_os_error(), Some(libc::EINVAL), "{refused}");
    }
}
