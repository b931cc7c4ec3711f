//! What another process added to a bot's conversation, imported into its chat (issue 46: the
//! chat is the conversation the model answers from).
//!
//! The user may continue a bot's conversation outside botvisor (`claude -p --resume ID` in a
//! terminal, while the bot waits for that process or is stopped); the CLI's file then holds
//! turns the chat lacks, which the model sees at the bot's next turn. Before that turn, what the
//! CLI's files hold past where botvisor's copy followed them at the bot's last turn's end
//! ([`super::keep::followed`], [`crate::runtime::Runtime::added_since`]), without the bot's own
//! turns, is committed as items marked `imported: true` after a `system` item (reason
//! `imported_elsewhere`), in order, once: the copy then follows the files. It is looked for
//! when a message is sent to a bot whose agent does not run or runs between turns (so the items
//! come before the new message; a running agent is then started again on the conversation:
//! `Cmd::LaunchInputsChanged`) and at every resume; one look at a time per bot. It needs botvisor's copy
//! (`keep_conversations`, on by default).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::json;

use super::handle::Shared;
use super::keep;
use crate::store::BotRecord;

/// How many of the bot's newest messages are read to tell its own turns from another process's
/// in what a conversation gained (an agent killed mid-turn leaves its turn past the copy).
const OWN_TEXTS_LOOKED_AT: u32 = 200;

/// Imports what another process added to the recorded conversation of bot `id` (`record`,
/// whose CLI runs with `env`) since its last turn; returns how many chat items it added. A
/// fault is said in the journal and imports nothing (the next look tries again).
pub(crate) fn import_added(
    shared: &Shared,
    id: &str,
    record: &BotRecord,
    env: &BTreeMap<String, String>,
) -> usize {
    let (Some(session), true, Some(db)) = (
        record.session_id.as_deref(),
        shared.config.keep_conversations,
        shared.store.path(),
    ) else {
        return 0;
    };
    let _one_at_a_time = shared.import.lock().unwrap_or_else(|p| p.into_inner());
    let folder = keep::folder(db, id);
    let cwd = Path::new(&record.cwd);
    let files = shared.runtime.conversation_files(env, cwd, session);
    let marks: Vec<(PathBuf, u64)> = files
        .iter()
        .filter_map(|f| keep::followed(&folder, session, f).map(|from| (f.clone(), from)))
        .filter(|(f, from)| std::fs::metadata(f).is_ok_and(|m| m.len() > *from))
        .collect();
    if marks.is_empty() {
        return 0;
    }
    let own = match shared
        .store
        .read(|c| crate::store::chat::own_user_texts(c, id, OWN_TEXTS_LOOKED_AT))
    {
        Ok(own) => own,
        Err(e) => {
            tracing::warn!(bot_id = %id, error = %e, "cannot read the bot's messages; nothing imported");
            return 0;
        }
    };
    let added: Vec<crate::runtime::ChatPayload> = marks
        .iter()
        .flat_map(|(f, from)| shared.runtime.added_since(f, *from, &own))
        .collect();
    if !added.is_empty() {
        let prompts = added.iter().filter(|i| i.kind == "user").count();
        tracing::info!(bot_id = %id, session_id = %session, items = added.len(), "importing what another process added to the conversation");
        let note = json!({
            "text": format!(
                "Another process continued this conversation since the bot's last turn \
                 ({prompts} message(s)); what it added follows, as the model sees it."
            ),
            "reason": "imported_elsewhere",
            "session_id": session,
        })
        .to_string();
        let stored = shared.store.tx_now_then(
            |tx| {
                let mut items = vec![crate::store::chat::append(tx, id, "system", None, &note)?];
                for item in &added {
                    let payload = item.payload.to_string();
                    items.push(crate::store::chat::append(
                        tx, id, item.kind, None, &payload,
                    )?);
                }
                Ok(items)
            },
            |items| {
                for item in items {
                    super::bot::publish_item(&shared.publisher, id, item);
                }
            },
        );
        if let Err(e) = stored {
            tracing::error!(bot_id = %id, error = %e, "cannot record what another process added; the next look tries again");
            return 0;
        }
    }
    if let Err(e) = keep::update(&folder, session, &files) {
        tracing::warn!(bot_id = %id, session_id = %session, error = %e, "cannot keep a copy of the conversation");
    }
    added.len() + usize::from(!added.is_empty())
}
