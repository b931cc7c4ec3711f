//! A bot whose login expired waits for its CLI's credentials to change (issue 24). While the
//! hold lasts the credentials file is looked at whenever inotify (the `notify` crate) tells of a
//! change in its folder, the folder's parent or, for a symlink, its target's folder, and every
//! [`POLL`] besides, for what inotify on those folders cannot see (the folder replaced by a new
//! one, a folder that did not exist yet). A change of the file itself (what `stat` says of it,
//! through a symlink) comes to the actor as [`Command::CredentialsChanged`]; other files in the
//! folder do not count.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use notify::Watcher as _;
use tokio::sync::mpsc;

use super::Actor;
use crate::supervisor::Command;

/// How often the credentials file is looked at without an inotify event.
pub const POLL: Duration = Duration::from_secs(2);

/// What `stat` says of the credentials file: the link itself and what it leads to. `None` for
/// a file that is not there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Fingerprint {
    link: (u64, u64, i64, i64),
    target: Option<(u64, u64, u64, i64, i64)>,
}

fn fingerprint(file: &Path) -> Option<Fingerprint> {
    let link = std::fs::symlink_metadata(file).ok()?;
    let target = std::fs::metadata(file)
        .ok()
        .map(|m| (m.dev(), m.ino(), m.size(), m.mtime(), m.mtime_nsec()));
    Some(Fingerprint {
        link: (link.dev(), link.ino(), link.mtime(), link.mtime_nsec()),
        target,
    })
}

/// A watch on one credentials file; dropped, it ends.
pub(super) struct Watch {
    _watcher: Option<notify::RecommendedWatcher>,
    poll: tokio::task::JoinHandle<()>,
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.poll.abort();
    }
}

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("credentials::Watch")
    }
}

/// The folders whose inotify events may tell of a change of `file`: its folder, that folder's
/// parent (the folder replaced or made), and a symlink's target's folder. Only those that exist.
fn folders(file: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(dir) = file.parent() {
        out.push(dir.to_path_buf());
        if let Some(up) = dir.parent() {
            out.push(up.to_path_buf());
        }
    }
    if let Ok(target) = std::fs::canonicalize(file)
        && let Some(dir) = target.parent()
    {
        out.push(dir.to_path_buf());
    }
    out.sort();
    out.dedup();
    out.retain(|d| d.is_dir());
    out
}

/// Looks at `file` now and then (see the module) and sends [`Command::CredentialsChanged`] on
/// `commands` each time what `stat` says of it changed since the watch began or since the
/// last change sent: written, made, replaced, removed, or its symlink pointed elsewhere. Needs
/// a tokio runtime; a folder inotify refuses is only looked at every [`POLL`].
pub(super) fn watch(file: &Path, commands: mpsc::UnboundedSender<Command>) -> Watch {
    let last = Arc::new(Mutex::new(fingerprint(file)));
    let check = {
        let file = file.to_path_buf();
        Arc::new(move || {
            let now = fingerprint(&file);
            let mut last = last.lock().unwrap_or_else(|p| p.into_inner());
            if *last != now {
                *last = now;
                let _ = commands.send(Command::CredentialsChanged);
            }
        })
    };
    let on_event = check.clone();
    let watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        if event.is_ok_and(|e| !e.kind.is_access()) {
            on_event();
        }
    });
    let watcher = match watcher {
        Ok(mut w) => {
            for dir in folders(file) {
                if let Err(e) = w.watch(&dir, notify::RecursiveMode::NonRecursive) {
                    tracing::debug!(folder = %dir.display(), error = %e, "inotify refused the folder; it is looked at every POLL");
                }
            }
            Some(w)
        }
        Err(e) => {
            tracing::warn!(error = %e, "no inotify for the credentials; they are looked at every POLL");
            None
        }
    };
    let poll = tokio::spawn(async move {
        let mut tick = tokio::time::interval(POLL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            check();
        }
    });
    Watch {
        _watcher: watcher,
        poll,
    }
}

impl Actor {
    /// The credentials file of the bot's CLI, from the environment it launches with.
    fn credentials_file(&self) -> Option<PathBuf> {
        let env = self.build_env(&self.record());
        self.shared.runtime.credentials_file(&env)
    }

    /// While the bot holds for its login, watches its CLI's credentials file (once); otherwise
    /// ends the watch. A runtime that names no credentials file (no `HOME`, no config folder)
    /// is said in the journal: `SetEnvironment` and `Restart` still let the bot go on.
    pub(super) fn follow_credentials(&mut self) {
        let held = self
            .record()
            .limit
            .is_some_and(|(kind, _)| kind == crate::supervisor::core::LOGIN);
        if !held {
            self.credentials = None;
            return;
        }
        if self.credentials.is_some() {
            return;
        }
        if self.login_given_since_refused() {
            // Renewed before the hold began (while the failing turn was still retrying, or
            // while botvisord was not running): nothing more will change, so it goes on now.
            tracing::info!(bot_id = %self.id, "the login was renewed since the agent's login was refused");
            let _ = self.commands.send(Command::CredentialsChanged);
            return;
        }
        let Some(file) = self.credentials_file() else {
            tracing::warn!(bot_id = %self.id, "no credentials file to watch for the login");
            return;
        };
        tracing::info!(bot_id = %self.id, file = %file.display(), "waiting for the login's credentials to change");
        self.credentials = Some(watch(&file, self.commands.clone()));
    }

    /// Whether the bot has a login its refused agent did not: one of the runtime's login
    /// variables (or the credentials file's place) differs from what that agent was launched
    /// with, or the credentials file was written after the refusal was recorded (its
    /// `login_required` item: the one time on record across botvisord's restarts; not the
    /// launch, as the CLI may write the file itself while it runs).
    fn login_given_since_refused(&self) -> bool {
        let record = self.record();
        let now = self.build_env(&record);
        let login = self.shared.runtime.login(&record.env, &now);
        if let Some(then) = &self.launched_env
            && (login.variables.iter().any(|v| then.get(v) != now.get(v))
                || self.shared.runtime.credentials_file(then) != login.file)
        {
            return true;
        }
        let refused = self
            .shared
            .store
            .read(|c| crate::store::chat::last_time_of(c, &self.id, "system", "login_required"))
            .ok()
            .flatten()
            .and_then(|t| humantime::parse_rfc3339(&t).ok());
        let written = login
            .file
            .and_then(|f| std::fs::metadata(f).and_then(|m| m.modified()).ok());
        matches!((refused, written), (Some(r), Some(w)) if w > r)
    }

    /// The credentials changed, or a client changed the bot's environment: a login hold is
    /// over ([`Actor::hold_over`]) and a running agent starts again on the same conversation
    /// with what is now in force, as it read its credentials at launch.
    pub(super) async fn login_back(&mut self) {
        let held = self
            .record()
            .limit
            .is_some_and(|(kind, _)| kind == crate::supervisor::core::LOGIN);
        if !held {
            return;
        }
        tracing::info!(bot_id = %self.id, "the credentials changed; the waiting messages go");
        self.credentials = None;
        self.hold_over();
        if self.proc.is_some() {
            use crate::supervisor::core::{Cmd, Input, RestartMode};
            self.handle(Input::Command(Cmd::Restart {
                mode: RestartMode::Resume,
                by_client: false,
            }));
            self.stop_if_asked().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WAIT: Duration = Duration::from_secs(20);

    async fn changed(rx: &mut mpsc::UnboundedReceiver<Command>, what: &str) {
        match tokio::time::timeout(WAIT, rx.recv()).await {
            Ok(Some(Command::CredentialsChanged)) => {}
            Ok(other) => panic!("{what}: {other:?}"),
            Err(_) => panic!("{what}: not seen"),
        }
    }

    #[tokio::test]
    async fn a_change_is_seen_through_a_symlink_a_replaced_folder_and_a_folder_made_late() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("cc");
        let file = dir.join(".credentials.json");
        let elsewhere = root.path().join("dotfiles");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::create_dir_all(&elsewhere).unwrap();
        std::fs::write(elsewhere.join("creds"), "old").unwrap();
        std::os::unix::fs::symlink(elsewhere.join("creds"), &file).unwrap();
        let (tx, mut rx) = mpsc::unbounded_channel();
        let w = watch(&file, tx);
        std::fs::write(elsewhere.join("creds"), "fresh token").unwrap();
        changed(&mut rx, "the symlink's target written").await;

        std::fs::rename(&dir, root.path().join("cc.old")).unwrap();
        changed(&mut rx, "the folder moved away (the file is gone)").await;
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(&file, "a new login").unwrap();
        changed(&mut rx, "the file in a new folder of the same name").await;
        std::fs::write(&file, "a newer login, longer").unwrap();
        changed(&mut rx, "the file written again").await;
        drop(w);

        let late = root.path().join("not-yet").join(".credentials.json");
        let (tx, mut rx) = mpsc::unbounded_channel();
        let _w = watch(&late, tx);
        std::fs::create_dir(late.parent().unwrap()).unwrap();
        std::fs::write(&late, "x").unwrap();
        changed(&mut rx, "a folder made after the watch began").await;
    }
}
