//! Durable state in SQLite: bots, chat items and turns, and the spend ledger.
//!
//! Rule 1 of the design (persist, then publish) rests here: every change a client may hear of is
//! committed by a function of this module before any signal is sent. The database runs in WAL
//! mode with `synchronous = NORMAL`; its schema is versioned by `PRAGMA user_version`
//! ([`schema`]).

pub mod bots;
pub mod chat;
pub mod deliveries;
pub mod durable;
pub mod fault;
pub mod handovers;
pub mod processes;
pub mod schedules;
pub mod schema;
pub mod spend;
pub mod turns;

use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::Path;
use std::sync::{Arc, Mutex};

pub use bots::{BotRecord, WorktreeRecord};
pub use chat::ChatItem;
pub use durable::Promise;
pub use rusqlite::Connection;
pub use turns::QueuedTurn;

/// A failure of the database. Shown to clients as `org.botvisor.Botvisor1.Error.Failed`.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// SQLite said no.
    #[error("database error: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// The database folder could not be made.
    #[error("cannot create the database folder {path}: {source}")]
    Folder {
        /// The folder.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The database cannot be written now (locked by another process, disk full, I/O): a call
    /// that must write answers this at once instead of waiting; nothing was changed.
    #[error("botvisor cannot write its database now: {0}; nothing was changed, try again")]
    Unavailable(String),
    /// The database was written by a newer botvisor.
    #[error("the database has schema version {found}, newer than this botvisor knows ({known})")]
    TooNew {
        /// `PRAGMA user_version` of the file.
        found: i64,
        /// The newest version this build knows.
        known: i64,
    },
}

/// Commits between two passive WAL checkpoints while writes keep coming.
pub const CHECKPOINT_EVERY: u64 = 1000;

/// How long without a commit counts as quiet: then the WAL is checkpointed and truncated.
pub const QUIET: std::time::Duration = std::time::Duration::from_millis(500);

/// The checkpoint thread: sleeps until commits come, checkpoints passively every
/// [`CHECKPOINT_EVERY`] of them (on a connection of its own: a passive checkpoint never blocks a
/// writer), and truncates the WAL after [`QUIET`] without one. The TRUNCATE runs on the writer's
/// own connection, under its lock: it holds the database's write lock while it copies the WAL, and
/// our own writes then wait for it instead of failing as if another process held the database.
/// Ends with the store.
fn spawn_checkpointer(
    path: &Path,
    commits: Arc<std::sync::atomic::AtomicU64>,
    writer: Arc<Mutex<Connection>>,
) -> Result<std::sync::mpsc::SyncSender<()>, StoreError> {
    use std::sync::mpsc::RecvTimeoutError;
    let conn = Connection::open(path)?;
    // No waiting: a TRUNCATE checkpoint that waits for another process's reader holds the write
    // lock meanwhile, and every write of ours would fail. A busy checkpoint is simply skipped;
    // the next quiet moment tries again.
    conn.busy_timeout(std::time::Duration::ZERO)?;
    let (tx, rx) = std::sync::mpsc::sync_channel::<()>(1);
    let checkpoint = move |conn: &Connection, mode: &str| {
        if let Err(e) = conn.query_row(&format!("PRAGMA wal_checkpoint({mode})"), [], |_| Ok(())) {
            if fault::is_transient(&e) {
                tracing::debug!(error = %e, mode, "WAL checkpoint skipped");
            } else {
                tracing::warn!(error = %e, mode, "WAL checkpoint failed");
            }
        }
    };
    std::thread::Builder::new()
        .name("botvisor-checkpoint".into())
        .spawn(move || {
            let count = || commits.load(std::sync::atomic::Ordering::Relaxed);
            loop {
                // Asleep until a commit.
                if rx.recv().is_err() {
                    return;
                }
                let mut last = count();
                loop {
                    match rx.recv_timeout(QUIET) {
                        Ok(()) => {
                            if count() - last >= CHECKPOINT_EVERY {
                                checkpoint(&conn, "PASSIVE");
                                last = count();
                            }
                        }
                        Err(RecvTimeoutError::Timeout) => break,
                        Err(RecvTimeoutError::Disconnected) => return,
                    }
                }
                let w = writer.lock().unwrap_or_else(|p| p.into_inner());
                if w.busy_timeout(std::time::Duration::ZERO).is_ok() {
                    checkpoint(&w, "TRUNCATE");
                }
                let _ = w.busy_timeout(fault::ATTEMPT_BUSY_WAIT);
            }
        })
        .map_err(|e| StoreError::Folder {
            path: path.display().to_string(),
            source: e,
        })?;
    Ok(tx)
}

/// The database: one connection for writes and one for reads, each behind a mutex.
///
/// Writes come in two kinds (design rule 15, [`fault`]):
/// - [`Store::tx`] and [`Store::tx_then`]: what the bot actors record (chat items, turns,
///   sessions). They are never lost: a transient failure (locked, busy, disk full, I/O) is
///   retried with backoff until the commit succeeds, on a thread the async runtime has handed
///   off (`tokio::task::block_in_place`), so no worker thread of the runtime waits. The actor
///   waits, in order, and so publishes nothing before its commit (rule 1).
/// - [`Store::tx_now`] and [`Store::tx_now_then`]: what a client's call writes (`Send`,
///   `CreateBot`, settings). One attempt of at most [`fault::ATTEMPT_BUSY_WAIT`]; while another
///   write is being retried, none at all: the call answers [`StoreError::Unavailable`] and
///   changes nothing.
///
/// Reads ([`Store::read`]) use their own connection: in WAL mode a reader never waits for a
/// writer, so reads keep answering while writes fail. [`Store::health`] says whether writes fail
/// and why.
///
/// SQLite's automatic WAL checkpoint would run inside whichever commit crosses the threshold and
/// stall that bot for milliseconds (the p99 of event latency went from 3.6 ms to 0.9 ms without
/// it). Instead a thread of the store's own, on a third connection, runs a passive checkpoint
/// every [`CHECKPOINT_EVERY`] commits while writes keep coming, and truncates the WAL once
/// writes have been quiet for [`QUIET`]. With no writes it sleeps: no periodic wake-up.
pub struct Store {
    conn: Arc<Mutex<Connection>>,
    reader: Option<Mutex<Connection>>,
    path: Option<std::path::PathBuf>,
    health: Arc<fault::Health>,
    /// A probe thread checks whether writes work again.
    probing: Arc<std::sync::atomic::AtomicBool>,
    /// Set when the daemon stops: until when writes are retried.
    closing_until: std::sync::OnceLock<std::time::Instant>,
    /// Writes being retried now.
    retrying: std::sync::atomic::AtomicUsize,
    /// Transactions committed ([`Store::commits`]).
    commits: std::sync::atomic::AtomicU64,
    shared_commits: Arc<std::sync::atomic::AtomicU64>,
    checkpoint: Option<std::sync::mpsc::SyncSender<()>>,
    /// Syncs the WAL for the promises waited for ([`durable`]); `None` in memory.
    wal_sync: Option<durable::WalSync>,
}

impl Store {
    /// The database file; `None` for a store in memory.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// Opens (creating if needed) the database at `path` and brings its schema up to date.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            // The chats are the user's own: a new folder is private (0700).
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(parent)
                .map_err(|source| StoreError::Folder {
                    path: parent.display().to_string(),
                    source,
                })?;
        }
        let new = !path.exists();
        let conn = Connection::open(path)?;
        if new {
            // SQLite gives its -wal and -shm files the database file's mode.
            let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600));
        }
        let mut store = Store::from_connection(conn)?;
        store.path = Some(path.to_owned());
        let reader = Connection::open(path)?;
        reader.busy_timeout(fault::ATTEMPT_BUSY_WAIT)?;
        store.reader = Some(Mutex::new(reader));
        let store_commits = Arc::new(std::sync::atomic::AtomicU64::new(0));
        store.checkpoint = Some(spawn_checkpointer(
            path,
            store_commits.clone(),
            store.conn.clone(),
        )?);
        // Commits a botvisord before this one made on `NORMAL` are made durable before anything
        // is read from them and promised again.
        durable::sync_now(path);
        store.wal_sync = Some(
            durable::WalSync::start(path, store_commits.clone()).map_err(|source| {
                StoreError::Folder {
                    path: path.display().to_string(),
                    source,
                }
            })?,
        );
        store.shared_commits = store_commits;
        Ok(store)
    }

    /// A database in memory, for tests of the layers above.
    pub fn open_in_memory() -> Result<Store, StoreError> {
        Store::from_connection(Connection::open_in_memory()?)
    }

    fn from_connection(mut conn: Connection) -> Result<Store, StoreError> {
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        conn.pragma_update(None, "wal_autocheckpoint", 0)?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        // A schema upgrade waits for a database another process locks, or a disk that is full,
        // saying so in the journal, rather than giving up the start.
        let mut failures = 0;
        loop {
            match schema::migrate(&mut conn) {
                Ok(()) => break,
                Err(StoreError::Sqlite(e)) if fault::is_transient(&e) => {
                    failures += 1;
                    tracing::warn!(
                        error = %fault::describe(&e),
                        "cannot bring the database's schema up to date yet; trying again"
                    );
                    std::thread::sleep(fault::backoff(failures));
                }
                Err(e) => return Err(e),
            }
        }
        conn.busy_timeout(fault::ATTEMPT_BUSY_WAIT)?;
        Ok(Store {
            conn: Arc::new(Mutex::new(conn)),
            reader: None,
            path: None,
            health: Arc::new(fault::Health::default()),
            probing: Arc::new(std::sync::atomic::AtomicBool::new(false)),
            closing_until: std::sync::OnceLock::new(),
            retrying: std::sync::atomic::AtomicUsize::new(0),
            commits: std::sync::atomic::AtomicU64::new(0),
            shared_commits: Arc::new(std::sync::atomic::AtomicU64::new(0)),
            checkpoint: None,
            wal_sync: None,
        })
    }

    fn committed(&self) {
        self.commits
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // `Release`: the WAL syncer that reads the count syncs this commit's frames
        // (`durable`).
        self.shared_commits
            .fetch_add(1, std::sync::atomic::Ordering::Release);
        if let Some(tx) = &self.checkpoint {
            let _ = tx.try_send(());
        }
    }

    /// The daemon is stopping: from now on, a write that must not be lost is retried for at most
    /// [`fault::CLOSING_WAIT`] more, so that a stop is not held up for as long as the database
    /// cannot be written (what is given up is named in the journal).
    pub fn closing(&self) {
        let until = std::time::Instant::now() + fault::CLOSING_WAIT;
        let _ = self.closing_until.set(until);
    }

    /// Whether the daemon is stopping (or restarting): [`Store::closing`] was called.
    pub fn is_closing(&self) -> bool {
        self.closing_until.get().is_some()
    }

    fn closing_expired(&self) -> bool {
        self.closing_until
            .get()
            .is_some_and(|t| std::time::Instant::now() >= *t)
    }

    /// Whether writes fail now, and why.
    pub fn health(&self) -> &fault::Health {
        &self.health
    }

    /// One attempt: `f` in one IMMEDIATE transaction (it takes the write lock first, so
    /// contention waits in SQLite's busy handler, at most [`fault::ATTEMPT_BUSY_WAIT`], instead of
    /// failing halfway with `SQLITE_BUSY`), the commit, then `then` while the connection is still
    /// held, so that what `then` publishes is published in commit order.
    fn attempt<R>(
        &self,
        f: &mut impl FnMut(&rusqlite::Transaction<'_>) -> Result<R, rusqlite::Error>,
        then: &mut Option<impl FnOnce(&R)>,
    ) -> Result<R, rusqlite::Error> {
        let mut conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        self.attempt_on(&mut conn, false, f, then)
    }

    /// The first attempt of any write, on the calling thread: only when the connection is free
    /// and the database's write lock can be had at once (no waiting at all). `None` when it could
    /// not be done that way (the connection or the lock is taken, or a transient failure): the
    /// caller then waits off the runtime's worker threads. This keeps the common case as cheap
    /// as a plain commit.
    fn fast_attempt<R>(
        &self,
        durable: bool,
        f: &mut impl FnMut(&rusqlite::Transaction<'_>) -> Result<R, rusqlite::Error>,
        then: &mut Option<impl FnOnce(&R)>,
    ) -> Option<Result<R, rusqlite::Error>> {
        let mut conn = match self.conn.try_lock() {
            Ok(c) => c,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return None,
        };
        if conn.busy_timeout(std::time::Duration::ZERO).is_err() {
            return None;
        }
        let r = self.attempt_on(&mut conn, durable, f, then);
        let _ = conn.busy_timeout(fault::ATTEMPT_BUSY_WAIT);
        match r {
            Err(e) if fault::is_transient(&e) => None,
            r => Some(r),
        }
    }

    fn attempt_on<R>(
        &self,
        conn: &mut Connection,
        durable: bool,
        f: &mut impl FnMut(&rusqlite::Transaction<'_>) -> Result<R, rusqlite::Error>,
        then: &mut Option<impl FnOnce(&R)>,
    ) -> Result<R, rusqlite::Error> {
        // A promise to a client is durable before it is made (issue 47): its commit syncs the
        // WAL (`synchronous = FULL` for it alone); the others stay NORMAL, which a power loss
        // may roll back, never corrupt.
        if durable {
            conn.pragma_update(None, "synchronous", "FULL")?;
        }
        let committed = (|| -> Result<R, rusqlite::Error> {
            let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            let r = f(&tx)?;
            tx.commit()?;
            Ok(r)
        })();
        if durable {
            let _ = conn.pragma_update(None, "synchronous", "NORMAL");
        }
        let r = committed?;
        self.health.succeeded();
        if let Some(then) = then.take() {
            then(&r);
        }
        self.committed();
        Ok(r)
    }

    /// Runs `f` in one transaction and commits it, retrying a transient failure (locked, busy,
    /// disk full, I/O) with [`fault::backoff`] until it succeeds: nothing recorded is lost. An
    /// error that is not transient rolls everything back and is returned. `f` may run more than
    /// once; only its committed run counts. For the bot actors, never for a D-Bus call (that
    /// would wait as long as the fault lasts): those use [`Store::tx_now`].
    pub fn tx<R>(
        &self,
        f: impl FnMut(&rusqlite::Transaction<'_>) -> Result<R, rusqlite::Error>,
    ) -> Result<R, StoreError> {
        self.tx_then(f, |_| {})
    }

    /// Design rule 1 (persist, then publish), where it is kept for every commit.
    ///
    /// Like [`Store::tx`], and runs `then` with the result after the commit while still holding
    /// the connection, so that what `then` publishes is published in commit order (rule 1 and a
    /// single order of chat items for every client).
    pub fn tx_then<R>(
        &self,
        mut f: impl FnMut(&rusqlite::Transaction<'_>) -> Result<R, rusqlite::Error>,
        then: impl FnOnce(&R),
    ) -> Result<R, StoreError> {
        let mut then = Some(then);
        if self.retrying.load(std::sync::atomic::Ordering::SeqCst) == 0
            && let Some(r) = self.fast_attempt(false, &mut f, &mut then)
        {
            return r.map_err(StoreError::from);
        }
        tokio::task::block_in_place(|| {
            let mut failures = 0u32;
            loop {
                match self.attempt(&mut f, &mut then) {
                    Ok(r) => {
                        if failures > 0 {
                            self.retrying
                                .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                        }
                        return Ok(r);
                    }
                    Err(e) if fault::is_transient(&e) => {
                        if failures == 0 {
                            self.retrying
                                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        }
                        failures += 1;
                        let why = fault::describe(&e);
                        self.health.failed(why.clone());
                        if self.closing_expired() {
                            // The daemon is asked to stop and the database still cannot be
                            // written: say in the journal what is given up, and let it stop.
                            self.retrying
                                .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                            tracing::error!(error = %why, "botvisord stops before this could be recorded");
                            return Err(StoreError::Unavailable(why));
                        }
                        std::thread::sleep(fault::backoff(failures));
                    }
                    Err(e) => {
                        if failures > 0 {
                            self.retrying
                                .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                        }
                        return Err(e.into());
                    }
                }
            }
        })
    }

    /// For a client's call: runs `f` in one transaction and commits it, in one attempt that
    /// waits at most [`fault::ATTEMPT_BUSY_WAIT`] for a lock, and in none while another write is
    /// being retried. Errors: [`StoreError::Unavailable`] (a transient failure; nothing changed),
    /// [`StoreError::Sqlite`] (anything else; nothing changed).
    pub fn tx_now<R>(
        &self,
        f: impl FnMut(&rusqlite::Transaction<'_>) -> Result<R, rusqlite::Error>,
    ) -> Result<R, StoreError> {
        self.tx_now_then(f, |_| {})
    }

    /// Like [`Store::tx_now`], and runs `then` after the commit as [`Store::tx_then`] does.
    pub fn tx_now_then<R>(
        &self,
        f: impl FnMut(&rusqlite::Transaction<'_>) -> Result<R, rusqlite::Error>,
        then: impl FnOnce(&R),
    ) -> Result<R, StoreError> {
        self.tx_now_then_as(false, f, then)
    }

    /// Like [`Store::tx_now_then`], the commit durable before it returns (`synchronous = FULL`
    /// for it alone: the WAL is synced): for what makes a promise to a client, a message
    /// accepted, a permission answered, a bot created or deleted (issue 47: a power loss never
    /// takes back what a reply said).
    pub fn tx_durable_then<R>(
        &self,
        f: impl FnMut(&rusqlite::Transaction<'_>) -> Result<R, rusqlite::Error>,
        then: impl FnOnce(&R),
    ) -> Result<R, StoreError> {
        self.tx_now_then_as(true, f, then)
    }

    /// Design rule 8 (nothing sent is lost), against a power loss, for many promises at one fsync.
    ///
    /// Like [`Store::tx_now_then`], for a promise to a client kept once [`Store::keep`] (or
    /// [`Store::keep_blocking`]) returns: the commit is an ordinary one, and its [`Promise`] is
    /// kept when the WAL has been synced past it, by one fsync shared with every promise made
    /// meanwhile (issue 50; [`durable`]). `then` runs after the commit, before the promise is
    /// kept, in commit order. Errors: as [`Store::tx_now`].
    pub fn tx_promise_then<R>(
        &self,
        f: impl FnMut(&rusqlite::Transaction<'_>) -> Result<R, rusqlite::Error>,
        then: impl FnOnce(&R),
    ) -> Result<(R, Promise), StoreError> {
        let r = self.tx_now_then_as(false, f, then)?;
        // Read after the commit was counted: at least this commit's own number.
        let made = self
            .shared_commits
            .load(std::sync::atomic::Ordering::Acquire);
        Ok((r, Promise(made)))
    }

    /// Waits, without holding a thread, until `p` is kept: the WAL synced past its commit. At
    /// once for a store in memory, and once the store is being dropped.
    pub async fn keep(&self, p: Promise) {
        if let Some(sync) = &self.wal_sync {
            sync.kept(p).await
        }
    }

    /// How many transactions this store committed since it was opened (the tests count the
    /// commits a turn takes).
    pub fn commits(&self) -> u64 {
        self.commits.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// [`Store::keep`], blocking the calling thread (for a bot's actor, before it writes a
    /// promised message to its agent: about one fsync at most).
    pub fn keep_blocking(&self, p: Promise) {
        if let Some(sync) = &self.wal_sync {
            sync.wait(p)
        }
    }

    /// How many fsyncs of the WAL [`Store::keep`] has done (for the bench and the tests); 0 in
    /// memory.
    pub fn promise_fsyncs(&self) -> u64 {
        self.wal_sync.as_ref().map_or(0, |s| s.fsyncs())
    }

    /// Like [`Store::tx_now`], durable before it returns ([`Store::tx_durable_then`]).
    pub fn tx_durable<R>(
        &self,
        f: impl FnMut(&rusqlite::Transaction<'_>) -> Result<R, rusqlite::Error>,
    ) -> Result<R, StoreError> {
        self.tx_now_then_as(true, f, |_| {})
    }

    fn tx_now_then_as<R>(
        &self,
        durable: bool,
        mut f: impl FnMut(&rusqlite::Transaction<'_>) -> Result<R, rusqlite::Error>,
        then: impl FnOnce(&R),
    ) -> Result<R, StoreError> {
        if let Some(why) = self.health.failing() {
            // Known to fail: no attempt at all (calls on one bot are applied in order, so a
            // waiting call would hold up every later call). The probe says when it works again.
            self.start_probe();
            return Err(StoreError::Unavailable(why));
        }
        let mut then = Some(then);
        if let Some(r) = self.fast_attempt(durable, &mut f, &mut then) {
            return r.map_err(StoreError::from);
        }
        tokio::task::block_in_place(|| {
            let mut conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
            let _ = conn.busy_timeout(fault::CLIENT_BUSY_WAIT);
            let r = self.attempt_on(&mut conn, durable, &mut f, &mut then);
            let _ = conn.busy_timeout(fault::ATTEMPT_BUSY_WAIT);
            drop(conn);
            match r {
                Ok(r) => Ok(r),
                Err(e) if fault::is_transient(&e) => {
                    let why = fault::describe(&e);
                    self.health.failed(why.clone());
                    self.start_probe();
                    Err(StoreError::Unavailable(why))
                }
                Err(e) => Err(e.into()),
            }
        })
    }

    /// While writes fail and no actor is retrying one (that would say when it succeeds), a
    /// thread of its own tries a tiny write (the schema version, rewritten unchanged) with
    /// [`fault::backoff`] on a connection of its own, and clears [`Store::health`] once it
    /// commits. At most one runs.
    fn start_probe(&self) {
        use std::sync::atomic::Ordering;
        let Some(path) = self.path.clone() else {
            return;
        };
        if self.probing.swap(true, Ordering::SeqCst) {
            return;
        }
        let (health, probing) = (self.health.clone(), self.probing.clone());
        let spawned = std::thread::Builder::new()
            .name("botvisor-storage-probe".into())
            .spawn(move || {
                let probe = |conn: &Connection| -> rusqlite::Result<()> {
                    conn.busy_timeout(fault::ATTEMPT_BUSY_WAIT)?;
                    let v: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
                    conn.execute_batch(&format!(
                        "BEGIN IMMEDIATE; PRAGMA user_version = {v}; COMMIT;"
                    ))
                };
                let mut n = 0;
                while health.failing().is_some() {
                    n += 1;
                    std::thread::sleep(fault::backoff(n));
                    match Connection::open(&path).and_then(|c| probe(&c)) {
                        Ok(()) => health.succeeded(),
                        Err(e) if fault::is_transient(&e) => health.failed(fault::describe(&e)),
                        Err(e) => tracing::warn!(error = %e, "the storage probe failed"),
                    }
                }
                probing.store(false, Ordering::SeqCst);
            });
        if spawned.is_err() {
            self.probing.store(false, Ordering::SeqCst);
        }
    }

    /// Runs a read on the reading connection: it never waits for a writer.
    pub fn read<R>(
        &self,
        f: impl FnOnce(&Connection) -> Result<R, rusqlite::Error>,
    ) -> Result<R, StoreError> {
        match &self.reader {
            Some(reader) => {
                let conn = reader.lock().unwrap_or_else(|p| p.into_inner());
                Ok(f(&conn)?)
            }
            None => {
                let conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
                Ok(f(&conn)?)
            }
        }
    }
}

#[cfg(test)]
mod tests;
