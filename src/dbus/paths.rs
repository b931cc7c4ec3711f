//! Object paths of bots: `/org/botvisor/Botvisor1/<id>`, where the id is 32 hex digits, which
//! fits the D-Bus rule that path elements hold only `[A-Za-z0-9_]`.

use std::sync::Arc;

use arc_swap::ArcSwapOption;
use serde::{Serialize, Serializer};
use zbus::OwnedObjectPath;
use zbus::wire::{Signature, Type};

use super::ROOT_PATH;
use crate::supervisor::BotHandle;

/// The object path of a bot.
pub fn bot_path(id: &str) -> OwnedObjectPath {
    OwnedObjectPath::try_from(format!("{ROOT_PATH}/{id}")).expect("bot ids are valid path elements")
}

/// The bot id of an object path below the root, if it is one.
pub fn bot_id(path: &str) -> Option<&str> {
    let id = path.strip_prefix(ROOT_PATH)?.strip_prefix('/')?;
    (!id.is_empty() && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')).then_some(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let p = bot_path("0123abcd");
        assert_eq!(bot_id(p.as_str()), Some("0123abcd"));
        assert_eq!(bot_id("/org/botvisor/Botvisor1"), None);
        assert_eq!(bot_id("/org/botvisor/Botvisor1/a/b"), None);
    }
}

/// `ListBots`' answer, kept while the supervisor's list is the copy it was made from (issue 50:
/// at 500 bots, a call neither formats 500 paths nor takes a lock a create holds).
#[derive(Default)]
pub struct ListedPaths(ArcSwapOption<(Arc<Vec<BotHandle>>, Paths)>);

/// Bot object paths, shared: `ao` on the bus.
#[derive(Clone)]
pub struct Paths(Arc<Vec<OwnedObjectPath>>);

impl ListedPaths {
    /// The object paths of `listed` (a copy `Supervisor::list` gave), in its order.
    pub fn of(&self, listed: Arc<Vec<BotHandle>>) -> Paths {
        if let Some(kept) = self.0.load_full()
            && Arc::ptr_eq(&kept.0, &listed)
        {
            return kept.1.clone();
        }
        let paths = Paths(Arc::new(listed.iter().map(|h| bot_path(&h.id)).collect()));
        self.0.store(Some(Arc::new((listed, paths.clone()))));
        paths
    }
}

impl Type for Paths {
    const SIGNATURE: &'static Signature = <Vec<OwnedObjectPath>>::SIGNATURE;
}

impl Serialize for Paths {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}
