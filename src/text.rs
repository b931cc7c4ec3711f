//! Text that must not steer a terminal: which characters are unsafe to show raw, and how
//! `botvisorctl` escapes them.
//!
//! Unsafe are the control characters (C0, DEL, C1: a terminal may take them as commands, `ESC`
//! and `CSI` start escape sequences), the line and paragraph separators, and the invisible
//! format characters (Unicode category Cf) that reorder or hide text: the bidirectional
//! embeddings, overrides and isolates (U+202A–U+202E, U+2066–U+2069, the marks U+200E, U+200F,
//! U+061C), zero-width and invisible characters (U+200B, U+2060–U+2064, U+FEFF, U+00AD,
//! U+180E), the deprecated format characters U+206A–U+206F, the interlinear annotations
//! U+FFF9–U+FFFB and the tag characters U+E0000–U+E007F (invisible text). The zero-width
//! joiner and non-joiner (U+200C, U+200D) stay allowed: emoji sequences and several scripts
//! need them, and they neither reorder nor hide text.

use std::borrow::Cow;

/// Whether `c` is unsafe to show raw (see the module documentation).
pub fn is_unsafe(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{00AD}'
                | '\u{0600}'..='\u{0605}'
                | '\u{061C}'
                | '\u{06DD}'
                | '\u{070F}'
                | '\u{0890}'..='\u{0891}'
                | '\u{08E2}'
                | '\u{180E}'
                | '\u{200B}'
                | '\u{200E}'..='\u{200F}'
                | '\u{2028}'..='\u{202E}'
                | '\u{2060}'..='\u{2064}'
                | '\u{2066}'..='\u{206F}'
                | '\u{FEFF}'
                | '\u{FFF9}'..='\u{FFFB}'
                | '\u{110BD}'
                | '\u{110CD}'
                | '\u{13430}'..='\u{1343F}'
                | '\u{1BCA0}'..='\u{1BCA3}'
                | '\u{1D173}'..='\u{1D17A}'
                | '\u{E0000}'..='\u{E007F}'
        )
}

/// Whether `c` is one of Unicode's default-ignorable code points, which show as nothing
/// (DerivedCoreProperties.txt, `Default_Ignorable_Code_Point`: soft hyphen, joiners, Hangul
/// fillers, Khmer inherent vowels, variation selectors, tags, …).
pub fn is_ignorable(c: char) -> bool {
    matches!(
        c,
        '\u{00AD}'
            | '\u{034F}'
            | '\u{061C}'
            | '\u{115F}'..='\u{1160}'
            | '\u{17B4}'..='\u{17B5}'
            | '\u{180B}'..='\u{180F}'
            | '\u{200B}'..='\u{200F}'
            | '\u{202A}'..='\u{202E}'
            | '\u{2060}'..='\u{206F}'
            | '\u{3164}'
            | '\u{FE00}'..='\u{FE0F}'
            | '\u{FEFF}'
            | '\u{FFA0}'
            | '\u{FFF0}'..='\u{FFF8}'
            | '\u{1BCA0}'..='\u{1BCA3}'
            | '\u{1D173}'..='\u{1D17A}'
            | '\u{E0000}'..='\u{E0FFF}'
    )
}

/// Whether `c` shows as nothing or as blank space at the end of a name: white space, the blank
/// braille pattern U+2800, and the ignorable code points ([`is_ignorable`]) but the variation
/// selectors and the zero-width (non-)joiner, which end emoji sequences such as `❤️`.
pub fn is_blank(c: char) -> bool {
    c.is_whitespace()
        || c == '\u{2800}'
        || (is_ignorable(c) && !matches!(c, '\u{FE00}'..='\u{FE0F}' | '\u{200C}' | '\u{200D}'))
}

/// `s` as a terminal shows it, for telling names apart: without its ignorable code points.
pub fn visible(s: &str) -> String {
    s.chars().filter(|c| !is_ignorable(*c)).collect()
}

/// `s` without the characters at either end that show blank ([`is_blank`]).
pub fn trim_blank(s: &str) -> &str {
    s.trim_matches(is_blank)
}

/// The first unsafe character of `s`, if any.
pub fn first_unsafe(s: &str) -> Option<char> {
    s.chars().find(|c| is_unsafe(*c))
}

/// `s` with every unsafe character written as an escape: `\n`, `\r`, `\t`, or `\u{…}` with the
/// code point in hex (`\u{1b}`, `\u{202e}`). With `keep_lines`, newlines and tabs stay as they
/// are (multi-line text such as a chat message); everything else unsafe is escaped, carriage
/// returns included (they would let text overwrite a line). Borrows when nothing changes.
pub fn escape(s: &str, keep_lines: bool) -> Cow<'_, str> {
    let keep = |c: char| keep_lines && (c == '\n' || c == '\t');
    if !s.chars().any(|c| is_unsafe(c) && !keep(c)) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if !is_unsafe(c) || keep(c) {
            out.push(c);
            continue;
        }
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c => out.push_str(&format!("\\u{{{:x}}}", u32::from(c))),
        }
    }
    Cow::Owned(out)
}

/// A JSON text (as `serde_json` writes it) with every unsafe character that `serde_json` leaves
/// raw (C1 controls, DEL, the format characters) written as a `\uXXXX` escape (a surrogate pair
/// above U+FFFF). Such characters only occur inside JSON strings, where the escape means the
/// same character, so the value is unchanged.
pub fn escape_json(json: &str) -> Cow<'_, str> {
    if first_unsafe(json).is_none() {
        return Cow::Borrowed(json);
    }
    let mut out = String::with_capacity(json.len() + 8);
    for c in json.chars() {
        if is_unsafe(c) {
            let mut units = [0u16; 2];
            for u in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{u:04x}"));
            }
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsafe_characters() {
        for c in [
            '\u{1b}',
            '\n',
            '\r',
            '\u{7f}',
            '\u{9b}',
            '\u{202e}',
            '\u{2066}',
            '\u{2069}',
            '\u{200b}',
            '\u{feff}',
            '\u{2028}',
            '\u{e0041}',
            '\u{061c}',
        ] {
            assert!(is_unsafe(c), "{:x}", u32::from(c));
        }
        for c in [
            'a', 'é', '日', '😀', '\u{200d}', '\u{200c}', '\u{fe0f}', ' ', '-',
        ] {
            assert!(!is_unsafe(c), "{:x}", u32::from(c));
        }
        assert_eq!(first_unsafe("demo\u{202e}txt"), Some('\u{202e}'));
        assert_eq!(first_unsafe("👩‍💻 demo"), None);
    }

    #[test]
    fn escapes() {
        assert!(matches!(escape("plain text", false), Cow::Borrowed(_)));
        assert_eq!(escape("a\u{1b}[31mb", false), "a\\u{1b}[31mb");
        assert_eq!(escape("x\ny\tz", false), "x\\ny\\tz");
        assert_eq!(escape("x\ny\tz\r", true), "x\ny\tz\\r");
        assert_eq!(escape("evil\u{202e}txt.exe", true), "evil\\u{202e}txt.exe");
    }

    #[test]
    fn json_escapes_keep_the_value() {
        let v = serde_json::json!({"name": "a\u{9b}b\u{202e}c\u{e0041}d\u{1b}"});
        let text = serde_json::to_string(&v).unwrap();
        let escaped = escape_json(&text);
        assert!(first_unsafe(&escaped).is_none(), "{escaped}");
        let back: serde_json::Value = serde_json::from_str(&escaped).unwrap();
        assert_eq!(back, v);
    }
}
