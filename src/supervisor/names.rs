//! A bot's name: the one a bot created without one gets from its folder, and what a name given
//! may be (printable, not blank at either end, not an id, not a path, not confusable with another
//! bot's).

use std::path::Path;

use super::BotError;
use super::checks::MAX_NAME_CHARS;

/// The name a bot created without one gets, before a suffix (`-2`, `-3`, …) makes it unique: its
/// folder's name (`bot` for `/` or a blank one), whose characters a name may not hold
/// ([`crate::text::is_unsafe`]) become `_` and whose white space at either end goes, cut to
/// leave room for the suffix; a folder name that
/// could be a bot id ([`id_like`]) gets `-bot` after it.
pub fn default_name(cwd: &Path) -> String {
    let name: String = cwd
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "bot".to_owned())
        .chars()
        .map(|c| if crate::text::is_unsafe(c) { '_' } else { c })
        .take(MAX_NAME_CHARS - 8)
        .collect();
    // White space at either end is refused in a name given: taken off a folder's.
    let name = match crate::text::trim_blank(&name) {
        "" => "bot".to_owned(),
        trimmed => trimmed.to_owned(),
    };
    if id_like(&name) {
        format!("{name}-bot")
    } else {
        name
    }
}

/// What `name` looks like: its visible characters ([`crate::text::visible`]) mapped to
/// Unicode's confusable skeleton (UTS #39).
pub(super) fn looks(name: &str) -> String {
    unicode_security::confusable_detection::skeleton(&crate::text::visible(name)).collect()
}

/// Whether `name` could be a bot's id or the id prefix that picks a bot out (`GetBot`,
/// `botvisorctl`): 4 to 32 lowercase hexadecimal digits. Such a name would make that id
/// ambiguous, now or for a bot created later, so no bot may have it.
pub fn id_like(name: &str) -> bool {
    (4..=32).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Whether `name` may be a bot's name beside the other bots (`what` names it in the error:
/// "option `name`"): at most [`MAX_NAME_CHARS`] characters, none that could steer a terminal
/// ([`crate::text::first_unsafe`]), no blank at either end, nothing that could be a bot id
/// ([`id_like`]), and not one that looks the same as another bot's: `alike` answers, for a
/// name, the name of another bot that looks as it does ([`looks`], the registry's one lookup:
/// `registry::Bots::looking_like`). Errors: InvalidArgument saying which and why.
pub fn check_name(
    what: &str,
    name: &str,
    alike: impl FnOnce(&str) -> Option<String>,
) -> Result<(), BotError> {
    if name.is_empty() {
        return Err(BotError::InvalidArgument(format!(
            "{what} is empty; give a name"
        )));
    }
    if name.chars().count() > MAX_NAME_CHARS {
        return Err(BotError::InvalidArgument(format!(
            "{what} is longer than {MAX_NAME_CHARS} characters"
        )));
    }
    if let Some(c) = crate::text::first_unsafe(name) {
        return Err(BotError::InvalidArgument(format!(
            "{what} holds U+{:04X}, a control, invisible or text-direction character that could \
             make a terminal show something else; use printable characters",
            u32::from(c)
        )));
    }
    let ends = [name.chars().next(), name.chars().last()];
    if let Some(c) = ends
        .into_iter()
        .flatten()
        .find(|c| crate::text::is_blank(*c))
    {
        return Err(BotError::InvalidArgument(format!(
            "{what} begins or ends with U+{:04X}, white space or a character that shows blank: \
             two names would look the same in a terminal; remove it",
            u32::from(c)
        )));
    }
    if id_like(name) {
        return Err(BotError::InvalidArgument(format!(
            "{what} `{name}` could be a bot id or the start of one (4 to 32 hexadecimal digits), \
             which picks bots out; choose a name with another character in it"
        )));
    }
    if name.starts_with('/') {
        return Err(BotError::InvalidArgument(format!(
            "{what} `{}` begins with `/`, which is read as a bot's object path (and could name \
             another bot's); choose a name that does not",
            crate::text::escape(name, false)
        )));
    }
    // Told apart as a terminal shows them: `x` and `x` with a variation selector are one name,
    // and so are names whose characters are confusable (Unicode's skeleton, UTS #39: `é` and
    // `e` with a combining accent, a Cyrillic `о` and a Latin `o`, fullwidth letters).
    if let Some(same) = alike(name) {
        return Err(BotError::InvalidArgument(format!(
            "a bot named `{}` exists already and looks the same; names pick bots out, so \
             choose another",
            crate::text::escape(&same, false)
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{check_name, default_name, id_like};
    use std::path::Path;

    #[test]
    fn a_name_that_looks_like_another_or_like_a_path_is_refused() {
        let taken = ["crème".to_owned(), "other".to_owned()];
        let alike = |n: &str| {
            taken
                .iter()
                .find(|t| super::looks(t) == super::looks(n))
                .cloned()
        };
        for name in [
            "cre\u{300}me",
            "\u{43e}ther",
            "\u{ff4f}\u{ff54}\u{ff48}\u{ff45}\u{ff52}",
            "/org/botvisor/Botvisor1/0123456789abcdef0123456789abcdef",
            "/mybot",
        ] {
            assert!(check_name("name", name, alike).is_err(), "{name}");
        }
        for name in ["creme", "others", "a/b", "Other"] {
            assert!(check_name("name", name, alike).is_ok(), "{name}");
        }
    }

    #[test]
    fn a_name_that_could_pick_out_a_bot_by_id_is_id_like() {
        for name in [
            "dead",
            "deadbeef",
            "2024",
            "0123456789abcdef0123456789abcdef",
        ] {
            assert!(id_like(name), "{name}");
        }
        for name in [
            "abc",
            "DEAD",
            "deadbeefx",
            "dead-beef",
            "0123456789abcdef0123456789abcdef0",
        ] {
            assert!(!id_like(name), "{name}");
        }
    }

    #[test]
    fn a_folder_named_like_an_id_gives_a_name_that_is_not() {
        assert_eq!(default_name(Path::new("/home/me/2024")), "2024-bot");
        assert_eq!(default_name(Path::new("/home/me/project")), "project");
        assert!(!id_like(&default_name(Path::new("/srv/cafe"))));
        assert_eq!(default_name(Path::new("/srv/ my work ")), "my work");
        assert_eq!(default_name(Path::new("/srv/  ")), "bot");
        assert_eq!(default_name(Path::new("/srv/x\u{17b4}")), "x");
    }
}
