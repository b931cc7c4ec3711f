//! One botvisord per database (design rule 7: one owner per conversation on the whole machine),
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
    } else if let Some(folder) = database.parent().filter(|p| !p.as_os_str().is_empty())
        && !folder.exists()
    {
        // A folder given with `--database` or `database` that is missing is created 0700
        // (docs/install.md); one that exists is used as it is.
        private.push(folder.to_owned());
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

/// The files and folders a start creates for a database, and which of them were there before
/// it: a start that does not become the bus name's owner removes what it created.
pub(super) struct Created {
    /// Each path and whether it existed before the start.
    paths: Vec<(PathBuf, bool)>,
    /// The lock by the database's inode: a database this start created gets one too.
    database_existed: bool,
}

impl Created {
    /// Notes what exists now of `database`'s files: the database with its `-wal`, `-shm` and
    /// `-journal`, the lock beside it, the lock by its path, and its folders.
    pub(super) fn before(database: &Path) -> Created {
        let with = |suffix: &str| {
            let mut p = database.to_owned().into_os_string();
            p.push(suffix);
            PathBuf::from(p)
        };
        let mut paths = vec![
            database.to_owned(),
            with("-wal"),
            with("-shm"),
            with("-journal"),
            with(".lock"),
            paths::lock_file(database),
        ];
        // Its folder and every folder above it that a start would create, deepest first.
        let mut folder = database.parent();
        while let Some(f) = folder.filter(|p| !p.as_os_str().is_empty()) {
            paths.push(f.to_owned());
            if f.exists() {
                break;
            }
            folder = f.parent();
        }
        Created {
            paths: paths
                .into_iter()
                .map(|p| {
                    let there = p.symlink_metadata().is_ok();
                    (p, there)
                })
                .collect(),
            database_existed: database.exists(),
        }
    }

    /// Removes what was not there before (the folder only when nothing else is in it); says
    /// each in the journal.
    pub(super) fn remove_new(&self, database: &Path) {
        let mut new: Vec<&PathBuf> = self
            .paths
            .iter()
            .filter(|(_, there)| !there)
            .map(|(p, _)| p)
            .collect();
        let by_inode = (!self.database_existed).then(|| paths::lock_file(database));
        if let Some(p) = &by_inode {
            new.insert(0, p);
        }
        for path in new {
            let removed = if path.is_dir() {
                std::fs::remove_dir(path)
            } else {
                std::fs::remove_file(path)
            };
            match removed {
                Ok(()) => tracing::info!(path = %path.display(), "removed what this start created"),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    tracing::warn!(path = %path.display(), "cannot remove what this start created: {e}")
                }
            }
        }
    }
}
