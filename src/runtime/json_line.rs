//! One JSON line as a CLI writes it (stdout, a transcript, a rollout), read leniently where the
//! CLI is lenient: a lone UTF-16 surrogate escape (`"\ud800"` without its pair) is valid JSON
//! text that serde_json refuses ("unexpected end of hex escape", "lone leading surrogate").
//! The model API can send one (a model's output cut inside a pair), and Claude Code 2.1.328
//! passes it on in its stream-json as it came (seen against the stand-in, issue 30's hostile
//! run: the line was dropped and its turn waited forever). Bytes that are not UTF-8 are read
//! the same way. Each is read as U+FFFD, the replacement character, as a browser's JSON reader
//! does; nothing else of the line changes.

use serde_json::Value;

/// The JSON value of `line`: as serde_json reads it, or, when it refuses, the same text with
/// every lone surrogate escape written `\ufffd` and bytes that are not UTF-8 replaced by
/// U+FFFD. The error is serde_json's first when neither reads.
pub fn parse(line: &[u8]) -> Result<Value, serde_json::Error> {
    let first = match serde_json::from_slice(line) {
        Ok(v) => return Ok(v),
        Err(e) => e,
    };
    let text = String::from_utf8_lossy(line);
    let repaired = without_lone_surrogates(&text);
    serde_json::from_str(&repaired).map_err(|_| first)
}

/// `text` with each `\uXXXX` escape of a surrogate that has no pair written `\ufffd`; an
/// escaped backslash (`\\`) is stepped over, so `\\ud800` (a backslash, then text) is kept.
pub fn without_lone_surrogates(text: &str) -> std::borrow::Cow<'_, str> {
    let b = text.as_bytes();
    let unit = |at: usize| -> Option<u16> {
        if b.get(at) != Some(&b'\\') || b.get(at + 1) != Some(&b'u') {
            return None;
        }
        let hex = std::str::from_utf8(b.get(at + 2..at + 6)?).ok()?;
        u16::from_str_radix(hex, 16).ok()
    };
    let mut out: Option<String> = None;
    let mut copied = 0;
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'\\' {
            i += 1;
            continue;
        }
        let Some(u) = unit(i) else {
            // Another escape (`\\`, `\"`, `\n`, …): both bytes, whatever the second is.
            i += 2;
            continue;
        };
        let lone = match u {
            0xD800..=0xDBFF => match unit(i + 6) {
                Some(0xDC00..=0xDFFF) => {
                    i += 12;
                    continue;
                }
                _ => true,
            },
            0xDC00..=0xDFFF => true,
            _ => false,
        };
        if lone {
            let o = out.get_or_insert_with(|| String::with_capacity(text.len()));
            o.push_str(&text[copied..i]);
            o.push_str("\\ufffd");
            copied = i + 6;
        }
        i += 6;
    }
    match out {
        None => std::borrow::Cow::Borrowed(text),
        Some(mut o) => {
            o.push_str(&text[copied..]);
            std::borrow::Cow::Owned(o)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_lone_surrogate_is_read_as_the_replacement_character() {
        let line = br#"{"text":"a \ud800 b","tail":"\udc00","last":"\ud83d"}"#;
        assert!(
            serde_json::from_slice::<Value>(line).is_err(),
            "serde_json refuses it"
        );
        assert_eq!(
            parse(line).unwrap(),
            json!({"text": "a \u{fffd} b", "tail": "\u{fffd}", "last": "\u{fffd}"})
        );
    }

    #[test]
    fn a_pair_an_escaped_backslash_and_other_escapes_are_kept() {
        let line = r#"{"pair":"\ud83d\ude00","not":"\\ud800","q":"\"\n","x":"\ud800\ud800\udc00"}"#;
        assert_eq!(
            parse(line.as_bytes()).unwrap(),
            json!({"pair": "😀", "not": "\\ud800", "q": "\"\n", "x": "\u{fffd}\u{10000}"})
        );
        assert!(matches!(
            without_lone_surrogates(r#""\ud83d\ude00 \\ud800""#),
            std::borrow::Cow::Borrowed(_)
        ));
    }

    #[test]
    fn bytes_that_are_not_utf8_are_replaced_and_what_is_not_json_stays_refused() {
        assert_eq!(
            parse(b"{\"t\":\"a\xff\"}").unwrap(),
            json!({"t": "a\u{fffd}"})
        );
        assert!(parse(b"{\"t\": \\ud800}").is_err());
        assert!(parse(b"not json").is_err());
        assert!(
            parse(br#"{"t":"\ud8"}"#).is_err(),
            "a cut escape is not repaired"
        );
    }
}
