//! One botvisord per database (design rule 5: one owner per conversation on the whole machine),
//! whatever bus it is on: a lock under `$XDG_RUNTIME_DIR` by the database's path, one beside
//! the database, and, once the database is open, one on the file itself and one by its inode.
//! The state and runtime folders are the user's alone (0700), the lock files too (0600).

use std::fs::File;
use std::path::{Path, PathBuf};

use super::DaemonError;
use crate::config::paths;

/// The locks held so far; dropped, they are released.
pub(super) struct Locks {
    held: Vec<File>,
    first: PathBuf,
}

/// Makes the runtime folder (and the default state folder) private and takes the locks by the
/// database's path. Errors: [`DaemonError::Start`] with the folder's or the lock's words
/// (another botvisord holds the database).
pub(super) fn lock(database: &Path) -> Result<Locks, DaemonError> {
    let mut private = vec![paths::runtime_dir()];
    if database.parent() == Some(paths::state_dir().as_path()) {
        private.push(paths::state_dir());
    }
    for dir in private {
        match crate::files::private_dir(&dir) {
            Ok(true) => tracing::warn!(
                folder = %dir.display(),
                "the folder was open to other users: it is now private (0700)"
            ),
            Ok(false) => {}
            Err(e) => return Err(DaemonError::Start(e)),
        }
    }
    let mut beside = database.to_owned().into_os_string();
    beside.push(".lock");
    let first = paths::lock_file(database);
    let mut held = Vec::new();
    for path in [first.clone(), PathBuf::from(beside)] {
        held.push(crate::files::take_lock(&path).map_err(DaemonError::Start)?);
    }
    Ok(Locks { held, first })
}

impl Locks {
    /// Once the database is open: locks the file itself, whatever path and runtime folder
    /// another daemon has, and, for a database this start created (locked by its path so far),
    /// its inode too, as a daemon given a hard link to it will lock it.
    pub(super) fn with_database(mut self, database: &Path) -> Result<Locks, DaemonError> {
        let start = DaemonError::Start;
        self.held
            .push(crate::files::lock_database(database).map_err(start)?);
        let by_inode = paths::lock_file(database);
        if by_inode != self.first {
            self.held
                .push(crate::files::take_lock(&by_inode).map_err(start)?);
        }
        Ok(self)
    }
}
