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

    /// A turn ended: the copy of the recorded conversation takes what the CLI wrote since.
    pub(super) fn keep_conversation(&self) {
        let Some(folder) = self.kept_folder() else {
            return;
        };
        let record = self.record();
        let Some(session) = record.session_id.as_deref() else {
            return;
        };
        let env = self.build_env(&record);
        let files = self
            .shared
            .runtime
            .conversation_files(&env, Path::new(&record.cwd), session);
        match keep::update(&folder, session, &files) {
            Ok(n) => {
                tracing::debug!(bot_id = %self.id, session_id = %session, bytes = n, "conversation copy updated")
            }
            Err(e) => {
                tracing::warn!(bot_id = %self.id, session_id = %session, error = %e, "cannot keep a copy of the conversation")
            }
        }
    }

    /// Before the start decision: the recorded conversation, gone from the CLI's store, is put
    /// back from botvisor's copy, and a `system` item (`reason` `conversation_restored`) says so;
    /// the decision then resumes it (design rule 2).
    pub(super) fn restore_conversation(&self, env: &BTreeMap<String, String>, cwd: &Path) {
        let Some(folder) = self.kept_folder() else {
            return;
        };
        let Some(session) = self.record().session_id else {
            return;
        };
        if !keep::holds(&folder, &session)
            || self.shared.runtime.transcript_exists(env, cwd, &session)
        {
            return;
        }
        match keep::restore(&folder, &session) {
            Ok(files) if !files.is_empty() => {
                tracing::warn!(bot_id = %self.id, session_id = %session, "the CLI's conversation was gone; put back from botvisor's copy");
                let names: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
                self.add_item(
                    "system",
                    None,
                    json!({
                        "text": format!(
                            "The conversation {session} was gone from {}'s store (its own clean-up \
                             of old conversations, or a folder removed); botvisor put back its copy \
                             and resumes it.",
                            self.shared.runtime.name()
                        ),
                        "reason": "conversation_restored",
                        "session_id": session,
                        "files": names,
                    }),
                );
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(bot_id = %self.id, session_id = %session, error = %e, "cannot put the conversation's copy back")
            }
        }
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
