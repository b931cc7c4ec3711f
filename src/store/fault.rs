//! Storage faults (design rule 15: a storage fault loses nothing, stalls no unrelated call and
//! is visible).
//!
//! A commit that fails because the database is locked or busy (another process holds its write
//! lock), full (`SQLITE_FULL`: the disk), or cannot be written (I/O, a read-only remount) may
//! succeed later: such a failure is *transient*. The store keeps the work and tries again with
//! [`backoff`], and [`Health`] says, while it lasts, that the service is degraded and why. Any
//! other failure (a constraint, a bug) is final and returned at once.

use std::sync::Mutex;
use std::time::Duration;

use rusqlite::ErrorCode;

/// How long one attempt waits for a lock held by another connection before it counts as failed.
pub const ATTEMPT_BUSY_WAIT: Duration = Duration::from_millis(200);

/// How long a client's call (a D-Bus method, dispatched in order) waits for a lock in its one
/// attempt: every later call waits as long.
pub const CLIENT_BUSY_WAIT: Duration = Duration::from_millis(50);

/// How long writes are still retried once the daemon is asked to stop.
pub const CLOSING_WAIT: Duration = Duration::from_secs(5);

/// The first pause between two attempts of a commit that must not be lost.
pub const FIRST_RETRY: Duration = Duration::from_millis(100);

/// The longest pause between two attempts.
pub const MAX_RETRY: Duration = Duration::from_secs(2);

/// Whether an error may go away by itself: busy, locked, disk full, I/O failure, cannot open,
/// read-only (SQLite result codes `SQLITE_BUSY`, `SQLITE_LOCKED`, `SQLITE_FULL`, `SQLITE_IOERR`,
/// `SQLITE_CANTOPEN`, `SQLITE_READONLY`, `SQLITE_PROTOCOL`).
pub fn is_transient(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(
            ErrorCode::DatabaseBusy
                | ErrorCode::DatabaseLocked
                | ErrorCode::DiskFull
                | ErrorCode::SystemIoFailure
                | ErrorCode::CannotOpen
                | ErrorCode::ReadOnly
                | ErrorCode::FileLockingProtocolFailed
        )
    )
}

/// What a person is told about a transient failure: the cause in words, then SQLite's own.
pub fn describe(e: &rusqlite::Error) -> String {
    let cause = match e.sqlite_error_code() {
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => {
            "the database is locked by another process"
        }
        Some(ErrorCode::DiskFull) => "the disk holding the database is full",
        Some(ErrorCode::ReadOnly) => "the database is read-only",
        Some(ErrorCode::CannotOpen) => "the database file cannot be opened",
        _ => "the database cannot be written (I/O error)",
    };
    format!("{cause} ({e})")
}

/// The pause after `attempt` failed attempts (1, 2, …): [`FIRST_RETRY`], doubling, at most
/// [`MAX_RETRY`].
pub fn backoff(attempt: u32) -> Duration {
    FIRST_RETRY
        .saturating_mul(1 << attempt.saturating_sub(1).min(16))
        .min(MAX_RETRY)
}

/// Whether writes currently fail, and why; observers learn of every change.
pub struct Health {
    failing: Mutex<Option<String>>,
    changes: tokio::sync::watch::Sender<Option<String>>,
}

impl Default for Health {
    fn default() -> Self {
        Health {
            failing: Mutex::new(None),
            changes: tokio::sync::watch::Sender::new(None),
        }
    }
}

impl Health {
    /// Why writes fail now; `None` while they succeed.
    pub fn failing(&self) -> Option<String> {
        self.failing
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// A write failed transiently with `why`.
    pub fn failed(&self, why: String) {
        let mut f = self.failing.lock().unwrap_or_else(|p| p.into_inner());
        if f.as_deref() != Some(why.as_str()) {
            if f.is_none() {
                tracing::error!(error = %why, "cannot write the database: writes are kept and retried");
            }
            *f = Some(why.clone());
            self.changes.send_replace(Some(why));
        }
    }

    /// A write succeeded.
    pub fn succeeded(&self) {
        let mut f = self.failing.lock().unwrap_or_else(|p| p.into_inner());
        if f.take().is_some() {
            tracing::info!("the database can be written again: the kept writes are done");
            self.changes.send_replace(None);
        }
    }

    /// A receiver of every change (`Some(why)` while writes fail).
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<Option<String>> {
        self.changes.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sqlite(code: i32) -> rusqlite::Error {
        rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(code), None)
    }

    #[test]
    fn busy_locked_full_and_io_are_transient_a_constraint_is_not() {
        for code in [
            rusqlite::ffi::SQLITE_BUSY,
            rusqlite::ffi::SQLITE_LOCKED,
            rusqlite::ffi::SQLITE_FULL,
            rusqlite::ffi::SQLITE_IOERR,
        ] {
            assert!(is_transient(&sqlite(code)), "{code}");
        }
        assert!(!is_transient(&sqlite(rusqlite::ffi::SQLITE_CONSTRAINT)));
        assert!(!is_transient(&rusqlite::Error::QueryReturnedNoRows));
        assert!(describe(&sqlite(rusqlite::ffi::SQLITE_FULL)).contains("disk"));
    }

    #[test]
    fn backoff_doubles_up_to_its_bound() {
        assert_eq!(backoff(1), FIRST_RETRY);
        assert_eq!(backoff(2), FIRST_RETRY * 2);
        assert_eq!(backoff(100), MAX_RETRY);
    }

    #[test]
    fn health_reports_each_change_once() {
        let h = Health::default();
        let mut rx = h.subscribe();
        h.failed("locked".into());
        h.failed("locked".into());
        assert!(rx.has_changed().unwrap());
        assert_eq!(*rx.borrow_and_update(), Some("locked".into()));
        assert!(!rx.has_changed().unwrap());
        h.succeeded();
        assert_eq!(*rx.borrow_and_update(), None);
        assert_eq!(h.failing(), None);
    }
}
