//! Object paths of bots: `/org/botvisor/Botvisor1/<id>`, where the id is 32 hex digits, which
//! fits the D-Bus rule that path elements hold only `[A-Za-z0-9_]`.

use zbus::OwnedObjectPath;

use super::ROOT_PATH;

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
