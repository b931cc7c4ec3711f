//! A bot's git worktree at its deletion (issue 28): whether it may be removed, and the deletion
//! that removes it.

use std::path::Path;

use super::{BotError, Command, Supervisor, core};
use crate::store;

impl Supervisor {
    /// Whether the worktree of the bot `id` may be removed now, with `force` or not, from what
    /// git shows of it ([`crate::worktree::decide`]). Errors: NotFound; InvalidArgument (the bot
    /// has no worktree); Busy (something uncommitted or unmerged, named; nothing changes);
    /// Failed (git failed: its words).
    pub async fn worktree_removal(
        &self,
        id: &str,
        force: bool,
    ) -> Result<core::worktree::Removal, BotError> {
        let record = self.get(id)?.snapshot().record;
        let Some(w) = record.worktree else {
            return Err(BotError::InvalidArgument(format!(
                "option `remove_worktree`: the bot `{}` has no worktree botvisor made",
                crate::text::escape(&record.name, false)
            )));
        };
        match crate::worktree::decide(Path::new(&w.repo), Path::new(&record.cwd), &w.branch, force)
            .await
        {
            Ok(core::worktree::Removal::Refuse(why)) => Err(BotError::Busy(why)),
            Ok(removal) => Ok(removal),
            Err(e) => Err(BotError::Failed(e)),
        }
    }

    /// [`Supervisor::delete`], and with `removal` the bot's worktree removed once its agent is
    /// stopped ([`Supervisor::worktree_removal`] decides it first).
    pub fn delete_with(
        &self,
        id: &str,
        removal: Option<core::worktree::Removal>,
    ) -> Result<(), BotError> {
        let handle = self.get(id)?;
        // Its schedules go at once (their timers at the next check of the units, issue 49).
        self.store.tx_durable(|tx| {
            store::schedules::delete_of_bot(tx, id)?;
            store::bots::mark_deleting(tx, id)
        })?;
        handle.command(Command::Delete(removal))?;
        handle
            .shared
            .deleted
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let removed = self
            .bots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(id);
        let mut deleting = self.deleting.lock().unwrap_or_else(|p| p.into_inner());
        deleting.retain(|h| !h.tx.is_closed());
        deleting.extend(removed);
        Ok(())
    }
}
