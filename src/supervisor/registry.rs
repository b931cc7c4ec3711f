//! The bots the daemon serves, by id and oldest first, so that `ListBots` and
//! `GetManagedObjects` read the order kept at each create and delete rather than sorting every
//! bot at every call (issue 31: 500 bots); and their names by what they look like, so that a
//! new name is checked against every other in one lookup (issue 50: the thousandth `CreateBot`
//! costs what the tenth does). The list oldest first is also kept as one shared copy
//! ([`Listing`]), which `ListBots` and `GetManagedObjects` read without the registry's lock
//! (issue 50: reads take no lock a create or a delete holds).

use std::collections::HashMap;
use std::sync::Arc;

use arc_swap::ArcSwapOption;

use super::BotHandle;
use super::names::looks;

/// The bots, found by id, listed oldest first (by creation time, then id: the order `ListBots`
/// promises), and found by what their names look like.
#[derive(Default)]
pub struct Bots {
    by_id: HashMap<String, BotHandle>,
    /// Sorted by `(created_at, id)`; the same handles as `by_id`.
    oldest_first: Vec<(String, BotHandle)>,
    names: Names,
    listing: Arc<Listing>,
}

/// Every bot oldest first, as one copy shared by the readers: read without the registry's
/// lock; made again from the registry (under its lock) by the first read after a create or a
/// delete, so that loading a thousand bots copies the list once, not once per bot.
#[derive(Default)]
pub struct Listing(ArcSwapOption<Vec<BotHandle>>);

impl Listing {
    /// The bots oldest first, when no create or delete came since the copy was made; `None`:
    /// make it again ([`Bots::listed`]).
    pub fn current(&self) -> Option<Arc<Vec<BotHandle>>> {
        self.0.load_full()
    }
}

/// The bots' names by what they look like ([`looks`]): a name is checked against every other
/// in one lookup.
#[derive(Default)]
struct Names {
    /// What each bot's name looks like → (the bot's id, its name).
    by_looks: HashMap<String, (String, String)>,
    /// Each bot's entry in `by_looks`, by id.
    looks_of: HashMap<String, String>,
    /// For a default name's base (`work` of `work-7`), the suffix after the highest taken:
    /// where the search for a free one begins.
    next_suffix: HashMap<String, u32>,
}

impl Bots {
    /// Adds `handle`, named `name`, created at `created_at` (RFC 3339, as the store keeps it);
    /// a handle of the same id is replaced.
    pub fn insert(&mut self, created_at: String, name: &str, handle: BotHandle) {
        self.remove(&handle.id);
        let key = (created_at.as_str(), handle.id.as_str());
        let at = self
            .oldest_first
            .partition_point(|(c, h)| (c.as_str(), h.id.as_str()) < key);
        self.oldest_first.insert(at, (created_at, handle.clone()));
        self.names.named(&handle.id, name);
        self.by_id.insert(handle.id.clone(), handle);
        self.listing.0.store(None);
    }

    /// Removes the bot `id`, returning its handle.
    pub fn remove(&mut self, id: &str) -> Option<BotHandle> {
        let handle = self.by_id.remove(id)?;
        self.oldest_first.retain(|(_, h)| h.id != id);
        self.names.unnamed(id);
        self.listing.0.store(None);
        Some(handle)
    }

    /// The bot `id` is named `name` now.
    pub fn renamed(&mut self, id: &str, name: &str) {
        if self.by_id.contains_key(id) {
            self.names.unnamed(id);
            self.names.named(id, name);
        }
    }

    /// The name of a bot other than `except` whose name looks as `name` does ([`looks`]).
    pub fn looking_like(&self, name: &str, except: Option<&str>) -> Option<String> {
        self.names.looking_like(name, except)
    }

    /// `base` when it looks like no bot's name; else the first free of `base-N` from the
    /// suffix after the highest taken of `base` (one lookup each; a suffix in between whose
    /// bot was deleted is not given again).
    pub fn free_name(&self, base: &str) -> String {
        self.names.free_name(base)
    }

    /// The bot `id`.
    pub fn get(&self, id: &str) -> Option<&BotHandle> {
        self.by_id.get(id)
    }

    /// Every bot, oldest first.
    pub fn oldest_first(&self) -> impl Iterator<Item = &BotHandle> {
        self.oldest_first.iter().map(|(_, h)| h)
    }

    /// The shared copy of the list, read by [`Listing::current`] without this registry's lock.
    pub fn listing(&self) -> Arc<Listing> {
        self.listing.clone()
    }

    /// Every bot oldest first: the shared copy, made again here when a create or a delete came
    /// since. Made and stored under the registry's lock (`&self` is behind it), so a copy is
    /// never stored over a newer change.
    pub fn listed(&self) -> Arc<Vec<BotHandle>> {
        if let Some(list) = self.listing.current() {
            return list;
        }
        let list = Arc::new(self.oldest_first().cloned().collect::<Vec<_>>());
        self.listing.0.store(Some(list.clone()));
        list
    }
}

impl Names {
    fn looking_like(&self, name: &str, except: Option<&str>) -> Option<String> {
        self.by_looks
            .get(&looks(name))
            .filter(|(id, _)| Some(id.as_str()) != except)
            .map(|(_, n)| n.clone())
    }

    /// `base` when it looks like no bot's name; else the first free of `base-N` from the
    /// suffix after the highest taken of `base` (one lookup each; a suffix in between whose
    /// bot was deleted is not given again).
    fn free_name(&self, base: &str) -> String {
        if self.looking_like(base, None).is_none() {
            return base.to_owned();
        }
        let first = self.next_suffix.get(base).copied().unwrap_or(2).max(2);
        (first..)
            .map(|i| format!("{base}-{i}"))
            .find(|n| self.looking_like(n, None).is_none())
            .expect("some suffix is free")
    }

    fn named(&mut self, id: &str, name: &str) {
        let seen = looks(name);
        self.by_looks
            .insert(seen.clone(), (id.to_owned(), name.to_owned()));
        self.looks_of.insert(id.to_owned(), seen);
        let (base, n) = match name.rsplit_once('-') {
            Some((base, n)) if !n.starts_with('0') => match n.parse::<u32>() {
                Ok(n) => (base, n),
                Err(_) => (name, 1),
            },
            _ => (name, 1),
        };
        let next = self.next_suffix.entry(base.to_owned()).or_insert(1);
        *next = (*next).max(n.saturating_add(1));
    }

    fn unnamed(&mut self, id: &str) {
        if let Some(seen) = self.looks_of.remove(id)
            && self.by_looks.get(&seen).is_some_and(|(i, _)| i == id)
        {
            self.by_looks.remove(&seen);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Names;

    #[test]
    fn a_name_is_found_by_what_it_looks_like_and_forgotten_with_its_bot() {
        let mut n = Names::default();
        n.named("a", "crème");
        assert_eq!(n.looking_like("cre\u{300}me", None), Some("crème".into()));
        assert_eq!(n.looking_like("cre\u{300}me", Some("a")), None, "its own");
        assert_eq!(n.looking_like("other", None), None);
        n.unnamed("a");
        assert_eq!(n.looking_like("crème", None), None);
        // A rename: the old name is free, the new one taken.
        n.named("b", "old");
        n.unnamed("b");
        n.named("b", "new");
        assert_eq!(n.looking_like("old", None), None);
        assert_eq!(n.looking_like("new", None), Some("new".into()));
    }

    #[test]
    fn a_default_name_takes_the_base_or_the_suffix_after_the_highest() {
        let mut n = Names::default();
        assert_eq!(n.free_name("work"), "work");
        n.named("1", "work");
        assert_eq!(n.free_name("work"), "work-2");
        n.named("2", "work-2");
        n.named("3", "work-3");
        assert_eq!(n.free_name("work"), "work-4");
        // A suffix in between whose bot went is not given again; the base is.
        n.unnamed("2");
        assert_eq!(n.free_name("work"), "work-4");
        n.unnamed("1");
        assert_eq!(n.free_name("work"), "work");
        // A name given by hand that looks like the next suffix is stepped over.
        n.named("4", "work");
        n.named("5", "w\u{ff4f}rk-4");
        assert_eq!(n.free_name("work"), "work-5");
        // Names that end in no number, or a number with a leading zero, are bases of their own.
        n.named("6", "my-bot");
        n.named("7", "build-07");
        assert_eq!(n.free_name("my-bot"), "my-bot-2");
        assert_eq!(n.free_name("build"), "build");
    }
}
