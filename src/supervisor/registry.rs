//! The bots the daemon serves, by id and oldest first, so that `ListBots` and
//! `GetManagedObjects` read the order kept at each create and delete rather than sorting every
//! bot at every call (issue 31: 500 bots).

use std::collections::HashMap;

use super::BotHandle;

/// The bots, found by id, listed oldest first (by creation time, then id: the order `ListBots`
/// promises).
#[derive(Default)]
pub struct Bots {
    by_id: HashMap<String, BotHandle>,
    /// Sorted by `(created_at, id)`; the same handles as `by_id`.
    oldest_first: Vec<(String, BotHandle)>,
}

impl Bots {
    /// Adds `handle`, created at `created_at` (RFC 3339, as the store keeps it); a handle of the
    /// same id is replaced.
    pub fn insert(&mut self, created_at: String, handle: BotHandle) {
        self.remove(&handle.id);
        let key = (created_at.as_str(), handle.id.as_str());
        let at = self
            .oldest_first
            .partition_point(|(c, h)| (c.as_str(), h.id.as_str()) < key);
        self.oldest_first.insert(at, (created_at, handle.clone()));
        self.by_id.insert(handle.id.clone(), handle);
    }

    /// Removes the bot `id`, returning its handle.
    pub fn remove(&mut self, id: &str) -> Option<BotHandle> {
        let handle = self.by_id.remove(id)?;
        self.oldest_first.retain(|(_, h)| h.id != id);
        Some(handle)
    }

    /// The bot `id`.
    pub fn get(&self, id: &str) -> Option<&BotHandle> {
        self.by_id.get(id)
    }

    /// Every bot, oldest first.
    pub fn oldest_first(&self) -> impl Iterator<Item = &BotHandle> {
        self.oldest_first.iter().map(|(_, h)| h)
    }
}
