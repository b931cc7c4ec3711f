//! Durable state in SQLite: bots, chat items and turns.
//!
//! Rule 1 of the design (persist, then publish) rests here: every change a client may hear of is
//! committed by a function of this module before any signal is sent. The database runs in WAL
//! mode with `synchronous = NORMAL`; its schema is versioned by `PRAGMA user_version`
//! ([`schema`]).

pub mod bots;
pub mod chat;
pub mod processes;
pub mod schema;
pub mod turns;

use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::Path;
use std::sync::Mutex;

pub use bots::BotRecord;
pub use chat::ChatItem;
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
    /// The database was written by a newer botvisor.
    #[error("the database has schema version {found}, newer than this botvisor knows ({known})")]
    TooNew {
        /// `PRAGMA user_version` of the file.
        found: i64,
        /// The newest version this build knows.
        known: i64,
    },
}

/// One SQLite connection behind a mutex. Each call holds it for one short transaction.
pub struct Store {
    conn: Mutex<Connection>,
}

impl Store {
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
        Store::from_connection(conn)
    }

    /// A database in memory, for tests of the layers above.
    pub fn open_in_memory() -> Result<Store, StoreError> {
        Store::from_connection(Connection::open_in_memory()?)
    }

    fn from_connection(mut conn: Connection) -> Result<Store, StoreError> {
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        schema::migrate(&mut conn)?;
        Ok(Store {
            conn: Mutex::new(conn),
        })
    }

    /// Runs `f` in one transaction and commits it; an error rolls everything back.
    pub fn tx<R>(
        &self,
        f: impl FnOnce(&rusqlite::Transaction<'_>) -> Result<R, rusqlite::Error>,
    ) -> Result<R, StoreError> {
        let mut conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let tx = conn.transaction()?;
        let r = f(&tx)?;
        tx.commit()?;
        Ok(r)
    }

    /// Like [`Store::tx`], and runs `then` with the result after the commit while still holding
    /// the connection, so that what `then` publishes is published in commit order (rule 1 and a
    /// single order of chat items for every client).
    pub fn tx_then<R>(
        &self,
        f: impl FnOnce(&rusqlite::Transaction<'_>) -> Result<R, rusqlite::Error>,
        then: impl FnOnce(&R),
    ) -> Result<R, StoreError> {
        let mut conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let tx = conn.transaction()?;
        let r = f(&tx)?;
        tx.commit()?;
        then(&r);
        Ok(r)
    }

    /// Runs a read on the connection.
    pub fn read<R>(
        &self,
        f: impl FnOnce(&Connection) -> Result<R, rusqlite::Error>,
    ) -> Result<R, StoreError> {
        let conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        Ok(f(&conn)?)
    }
}
