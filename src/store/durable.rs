//! Issue 50: one fsync for the promises that come together.
//!
//! A promise to a client (a `Send`'s message accepted) must survive a power loss before the
//! reply says so (issue 47). A commit with `synchronous = FULL` syncs the WAL inside the commit,
//! under the connection's lock, one fsync a commit: twenty `Send`s that arrive together wait for
//! twenty fsyncs one after the other. Here the promise's commit is an ordinary one
//! (`synchronous = NORMAL`: its frames are written to the WAL, not synced), which hands back a
//! [`Promise`], the number of commits made so far; the promise is kept once the WAL file has been
//! synced after that many commits. One thread of the store's own syncs it for those who wait
//! without a thread (a `Send`'s reply); one who waits blocking (a bot's actor, before it gives
//! the agent the message) syncs itself when no fsync runs. Either way one fsync runs at a time
//! and covers every commit made before it began, so the promises that wait while one runs are
//! all kept by the next.
//!
//! Why a sync of the WAL file makes those commits as durable as `FULL` would: in WAL mode a commit
//! is its frames in the WAL, the last one marked as a commit; `FULL` differs from `NORMAL` only by
//! syncing the WAL at the commit. `fdatasync` on any descriptor of the file syncs all its written
//! pages. A checkpoint moves frames into the database file, which SQLite syncs before the WAL is
//! reset or truncated, so a commit is in one synced file or the other. A WAL file new since the
//! last sync gets its folder synced too, so that its name survives as well.
//!
//! If an fsync fails, the commits stay in the page cache, which the kernel may or may not write
//! later: the failure is logged as an error and the waiters go on (the message is queued and will
//! be delivered once; a reply of error would make a client send it twice).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};

/// A commit that a client was promised: kept once the store has synced its WAL past it
/// ([`super::Store::keep`], [`super::Store::keep_blocking`]). The number of commits made on the
/// store's writer up to and including it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Promise(pub(super) u64);

impl Promise {
    /// A promise with nothing to wait for (an in-memory store, a test).
    pub const KEPT: Promise = Promise(0);
}

#[derive(Default)]
struct Syncs {
    /// The highest promise someone waits for.
    wanted: u64,
    /// Every commit up to this one is synced.
    synced: u64,
    /// An fsync runs now (the thread's or a waiter's own): no second one begins meanwhile.
    syncing: bool,
    /// fsyncs of the WAL done.
    fsyncs: u64,
    /// The inode of the WAL file whose folder was synced.
    folder_synced_for: Option<u64>,
    /// The store is gone: the thread syncs what is wanted and ends.
    closed: bool,
}

struct Shared {
    syncs: Mutex<Syncs>,
    changed: Condvar,
    synced: tokio::sync::watch::Sender<u64>,
    wal: PathBuf,
    /// The writer's count of commits (incremented with `Release` after each commit).
    commits: Arc<AtomicU64>,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Syncs> {
        self.syncs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// One fsync covering every commit counted so far, by the caller, which holds `s` with no
    /// fsync running; `s` is held again when it returns.
    fn sync<'a>(
        &'a self,
        mut s: std::sync::MutexGuard<'a, Syncs>,
    ) -> std::sync::MutexGuard<'a, Syncs> {
        s.syncing = true;
        let mut folder_synced_for = s.folder_synced_for;
        drop(s);
        // Every commit counted here wrote its frames before it was counted (`Release` there,
        // `Acquire` here): the fsync below covers them all.
        let target = self.commits.load(Ordering::Acquire);
        if let Err(e) = sync_wal(&self.wal, &mut folder_synced_for) {
            tracing::error!(
                wal = %self.wal.display(),
                error = %e,
                "cannot sync the database's WAL: messages accepted since the last sync may not \
                 survive a power loss"
            );
        }
        let mut s = self.lock();
        tracing::debug!(
            from = s.synced,
            to = target,
            "synced the WAL for promises: every commit up to `to` is durable"
        );
        s.syncing = false;
        s.folder_synced_for = folder_synced_for;
        s.synced = s.synced.max(target);
        s.fsyncs += 1;
        self.changed.notify_all();
        self.synced.send_replace(s.synced);
        s
    }
}

/// The store's WAL syncer: a thread that sleeps until a promise waits, then syncs the WAL once
/// for all the commits made so far. With nothing waited for, no wake-up at all. A thread that
/// waits blocking syncs itself when no fsync runs, sparing a wake-up of the syncer.
pub(super) struct WalSync {
    shared: Arc<Shared>,
}

impl WalSync {
    /// Starts the syncer of the database at `db`, whose writer counts its commits in `commits`
    /// (incremented with `Release` after each commit). Errors: the thread could not be started.
    pub(super) fn start(db: &Path, commits: Arc<AtomicU64>) -> std::io::Result<WalSync> {
        let shared = Arc::new(Shared {
            syncs: Mutex::new(Syncs::default()),
            changed: Condvar::new(),
            synced: tokio::sync::watch::channel(0).0,
            wal: wal_of(db),
            commits,
        });
        let theirs = shared.clone();
        std::thread::Builder::new()
            .name("botvisor-wal-sync".into())
            .spawn(move || run(&theirs))?;
        Ok(WalSync { shared })
    }

    /// Waits, blocking the thread, until `p` is kept: syncs itself when no fsync runs, else
    /// waits for the one that does and, if that one began before `p`'s commit, for the next.
    pub(super) fn wait(&self, p: Promise) {
        let mut s = self.shared.lock();
        while s.synced < p.0 && !s.closed {
            if s.syncing {
                s = self
                    .shared
                    .changed
                    .wait(s)
                    .unwrap_or_else(|e| e.into_inner());
            } else {
                s = self.shared.sync(s);
            }
        }
    }

    /// Waits, without holding a thread, until `p` is kept (the syncer's thread syncs).
    pub(super) async fn kept(&self, p: Promise) {
        let mut synced = self.shared.synced.subscribe();
        if *synced.borrow() >= p.0 {
            return;
        }
        {
            let mut s = self.shared.lock();
            s.wanted = s.wanted.max(p.0);
            self.shared.changed.notify_all();
        }
        // The sender lives as long as `self`: an error cannot come while we borrow it.
        let _ = synced.wait_for(|n| *n >= p.0).await;
    }

    /// fsyncs of the WAL done so far (the bench and the tests count them).
    pub(super) fn fsyncs(&self) -> u64 {
        self.shared.lock().fsyncs
    }
}

impl Drop for WalSync {
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.changed.notify_all();
    }
}

/// The syncer's loop: ends once the store is gone and nothing more is wanted.
fn run(shared: &Shared) {
    let mut s = shared.lock();
    loop {
        while (s.wanted <= s.synced || s.syncing) && !s.closed {
            s = shared.changed.wait(s).unwrap_or_else(|e| e.into_inner());
        }
        if s.wanted <= s.synced {
            if s.closed {
                return;
            }
            continue;
        }
        if s.syncing {
            // Closed while a waiter syncs: its fsync keeps what it can; wait for it.
            s = shared.changed.wait(s).unwrap_or_else(|e| e.into_inner());
            continue;
        }
        s = shared.sync(s);
    }
}

/// Syncs the WAL of the database at `db` once, now: for a store just opened, whose WAL may hold
/// commits an earlier botvisord made without syncing. A failure is logged.
pub(super) fn sync_now(db: &Path) {
    if let Err(e) = sync_wal(&wal_of(db), &mut None) {
        tracing::error!(db = %db.display(), error = %e, "cannot sync the database's WAL");
    }
}

fn wal_of(db: &Path) -> PathBuf {
    let mut wal = db.as_os_str().to_owned();
    wal.push("-wal");
    PathBuf::from(wal)
}

/// `fdatasync` of the WAL file; its folder too the first time this WAL file (by inode) is seen.
/// A WAL file that does not exist has nothing to sync (every commit is in the database file).
fn sync_wal(wal: &Path, folder_synced_for: &mut Option<u64>) -> std::io::Result<()> {
    let file = match std::fs::File::open(wal) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    file.sync_data()?;
    let inode = file.metadata()?.ino();
    if *folder_synced_for != Some(inode) {
        if let Some(folder) = wal.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::File::open(folder)?.sync_all()?;
        }
        *folder_synced_for = Some(inode);
    }
    Ok(())
}
