//! A bot whose login expired waits for its CLI's credentials to change (issue 24): the
//! credentials file's folder is watched with inotify (the `notify` crate) while the hold lasts,
//! and a change of that file comes to the actor as [`Command::CredentialsChanged`].

use std::path::{Path, PathBuf};

use notify::Watcher as _;
use tokio::sync::mpsc;

use super::Actor;
use crate::supervisor::Command;
use crate::supervisor::core::limits;

/// A watch on one credentials file; dropped, it ends.
pub(super) struct Watch {
    _watcher: notify::RecommendedWatcher,
}

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("credentials::Watch")
    }
}

/// Watches `file`'s folder (not recursively; the file may not exist yet) and sends
/// [`Command::CredentialsChanged`] on `commands` each time `file` is written, created,
/// replaced or removed. Errors: the folder does not exist or inotify refuses the watch.
pub(super) fn watch(
    file: &Path,
    commands: mpsc::UnboundedSender<Command>,
) -> notify::Result<Watch> {
    let dir = file.parent().unwrap_or(Path::new("/")).to_path_buf();
    let name = file.file_name().map(|n| n.to_owned());
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        let Ok(event) = event else { return };
        if event.kind.is_access() {
            return;
        }
        if event
            .paths
            .iter()
            .any(|p| p.file_name().map(|n| n.to_owned()) == name)
        {
            let _ = commands.send(Command::CredentialsChanged);
        }
    })?;
    watcher.watch(&dir, notify::RecursiveMode::NonRecursive)?;
    Ok(Watch { _watcher: watcher })
}

impl Actor {
    /// The credentials file of the bot's CLI, from the environment it launches with.
    fn credentials_file(&self) -> Option<PathBuf> {
        let env = self.build_env(&self.record());
        self.shared.runtime.credentials_file(&env)
    }

    /// While the bot holds for its login, watches its CLI's credentials file (once); otherwise
    /// ends the watch. A watch that cannot be set up is said in the journal: `SetEnvironment`
    /// and `Restart` still let the bot go on.
    pub(super) fn follow_credentials(&mut self) {
        let held = self
            .record()
            .limit
            .is_some_and(|(kind, _)| kind == limits::LOGIN);
        if !held {
            self.credentials = None;
            return;
        }
        if self.credentials.is_some() {
            return;
        }
        let Some(file) = self.credentials_file() else {
            tracing::warn!(bot_id = %self.id, "no credentials file to watch for the login");
            return;
        };
        match watch(&file, self.commands.clone()) {
            Ok(w) => {
                tracing::info!(bot_id = %self.id, file = %file.display(), "waiting for the login's credentials to change");
                self.credentials = Some(w);
            }
            Err(e) => {
                tracing::warn!(bot_id = %self.id, file = %file.display(), error = %e, "cannot watch the credentials file")
            }
        }
    }

    /// The credentials changed, or a client changed the bot's environment: a login hold is
    /// over ([`Actor::hold_over`]) and a running agent starts again on the same conversation
    /// with what is now in force, as it read its credentials at launch.
    pub(super) async fn login_back(&mut self) {
        let held = self
            .record()
            .limit
            .is_some_and(|(kind, _)| kind == limits::LOGIN);
        if !held {
            return;
        }
        tracing::info!(bot_id = %self.id, "the credentials changed; the waiting messages go");
        self.credentials = None;
        self.hold_over();
        if self.proc.is_some() {
            self.restart_agent(false).await;
        }
    }
}
