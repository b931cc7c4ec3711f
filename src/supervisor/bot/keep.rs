//! The actor's side of botvisor's copy of a conversation ([`crate::supervisor::keep`]): brought
//! up to date at each turn's end, put back before a resume when the CLI's is gone, removed at a
//! fresh restart and at `Delete`. A copy that cannot be written is said in the journal and
//! changes nothing else: the copy is a second chance, never a reason to fail a turn.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::json;

use super::Actor;
use crate::supervisor::keep;

impl Actor {
    /// The folder of this bot's copies, when `keep_conversations` is on and the store is a file.
    fn kept_folder(&self) -> Option<PathBuf> {
        if !self.shared.config.keep_conversations {
            return None;
        }
        Some(keep::folder(self.shared.store.path()?, &self.id))
    }

    /// A turn ended: the copy of the recorded conversation takes what the CLI wrote since
    /// ([`keep::update`]). A copy that stops being kept is said once in the chat (`system`,
    /// reason `conversation_not_kept`) until it is kept again.
    pub(super) fn keep_conversation(&mut self) {
        let Some(folder) = self.kept_folder() else {
            return;
        };
        let record = self.record();
        let Some(session) = record.session_id.clone() else {
            return;
        };
        // The running CLI writes where its own environment says, even after SetEnvironment.
        let env = match &self.proc {
            Some(p) => p.env.clone(),
            None => self.build_env(&record),
        };
        let files = self
            .shared
            .runtime
            .conversation_files(&env, Path::new(&record.cwd), &session);
        match keep::update(&folder, &session, &files) {
            Ok(done) => {
                tracing::debug!(bot_id = %self.id, session_id = %session, ?done, "conversation copy updated");
                if done.contains(&keep::Updated::Diverged) {
                    tracing::warn!(bot_id = %self.id, session_id = %session, "the CLI's file is no longer this conversation's; botvisor's copy is kept as it was and goes back at the next start");
                }
                self.copy_failing = false;
            }
            Err(e) => {
                tracing::warn!(bot_id = %self.id, session_id = %session, error = %e, "cannot keep a copy of the conversation");
                if !self.copy_failing {
                    self.copy_failing = true;
                    self.add_item(
                        "system",
                        None,
                        json!({
                            "text": format!(
                                "botvisor cannot keep its copy of this conversation ({e}): if the \
                                 CLI loses it, it cannot be put back. Each turn's end tries again."
                            ),
                            "reason": "conversation_not_kept",
                            "session_id": session,
                        }),
                    );
                }
            }
        }
    }

    /// Before the start decision: for each file of the recorded conversation botvisor keeps a
    /// copy of (one for Claude Code; Codex's rollout and its segments), when the CLI's file
    /// does not hold it whole (gone, emptied, cut, replaced, made anew) and the CLI does not keep
    /// it in another form ([`crate::runtime::Runtime::conversation_held_otherwise`]), botvisor's
    /// copy is put where the CLI looks now ([`keep::restore`]); one `system` item says so
    /// (reason `conversation_restored`, or `conversation_not_restored` with the reason when a
    /// file cannot be); the decision then resumes it (design rule 2).
    pub(super) fn restore_conversation(&self, env: &BTreeMap<String, String>, cwd: &Path) {
        let Some(folder) = self.kept_folder() else {
            return;
        };
        let Some(session) = self.record().session_id else {
            return;
        };
        let runtime = &self.shared.runtime;
        let mut put: Vec<(PathBuf, keep::Restored)> = Vec::new();
        let mut failed: Option<(PathBuf, std::io::Error)> = None;
        for name in keep::names(&folder, &session) {
            let Some(target) = runtime
                .conversation_file_target(env, cwd, &session, &name)
                .or_else(|| keep::origin(&folder, &session, &name))
            else {
                continue;
            };
            if let Some(other) = runtime.conversation_held_otherwise(env, &target) {
                tracing::debug!(bot_id = %self.id, session_id = %session, file = %other.display(), "the CLI keeps the file in another form; the copy stays");
                continue;
            }
            match keep::restore(&folder, &session, &name, &target) {
                Ok(keep::Restored::Whole) => {}
                Ok(done) => put.push((target, done)),
                Err(e) => failed = failed.or(Some((target, e))),
            }
        }
        let cli = runtime.name();
        let (text, reason, file) = match (put.first(), failed) {
            (_, Some((target, e))) => (
                format!(
                    "{cli}'s file of the conversation {session} is gone or incomplete, and \
                     botvisor could not put back its copy: {e}."
                ),
                "conversation_not_restored",
                target,
            ),
            (None, None) => return,
            (Some((target, keep::Restored::SetAside(aside))), None) => (
                format!(
                    "{cli}'s file of the conversation {session} did not hold all of it (emptied, \
                     cut, replaced, or made anew without its earlier turns); botvisor put back \
                     its copy and resumes it. The file found there is kept as {}.",
                    aside.display()
                ),
                "conversation_restored",
                target.clone(),
            ),
            (Some((target, _)), None) => (
                format!(
                    "The conversation {session} was gone from {cli}'s store (its own clean-up \
                     of old conversations, or a folder removed); botvisor put back its copy and \
                     resumes it."
                ),
                "conversation_restored",
                target.clone(),
            ),
        };
        tracing::warn!(bot_id = %self.id, session_id = %session, reason, "{text}");
        let mut payload = json!({"text": text, "reason": reason, "session_id": session,
                                 "file": file.display().to_string()});
        if put.len() > 1 {
            payload["files"] = json!(
                put.iter()
                    .map(|(t, _)| t.display().to_string())
                    .collect::<Vec<_>>()
            );
        }
        self.add_item("system", None, payload);
    }

    /// A fresh restart or `Delete`: the copies go with the conversation.
    pub(super) fn forget_kept(&self) {
        if let Some(folder) = self.kept_folder()
            && let Err(e) = keep::remove(&folder)
        {
            tracing::warn!(bot_id = %self.id, error = %e, "cannot remove the conversation's copy");
        }
    }
}
