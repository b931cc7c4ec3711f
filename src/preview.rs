//! Bounded forms of values too big to send whole: the preview object that stands for a JSON
//! object, and cuts of text on character boundaries.
//!
//! A preview is what a client gets instead of a chat item payload (or a tool input) larger than
//! [`MAX_ITEM_BYTES`](crate::sizes::MAX_ITEM_BYTES). It is a JSON object:
//!
//! ```json
//! {"truncated": true, "size": 12582933, "preview_of": "text", "preview": "The first…",
//!  "turn_id": "…"}
//! ```
//!
//! - `truncated`: always `true`; what marks the object as a preview.
//! - `size`: the size of the whole value in bytes (its JSON text, UTF-8), which is what
//!   `ReadChatItem` serves from offset 0.
//! - `preview_of`: the name of the biggest member of the whole object, which `preview` shows the
//!   beginning of; empty when the whole is not a JSON object (then `preview` shows the beginning
//!   of its JSON text).
//! - `preview`: the beginning of that member: for a string, the string's own first characters;
//!   for any other value, the first characters of its JSON text. Cut on a character boundary;
//!   written as a JSON string it takes at most [`PREVIEW_BYTES`] bytes.
//! - every other member of the whole object that takes at most [`KEPT_MEMBER_BYTES`] bytes
//!   written as JSON (`"name":value`), as it was (`turn_id`, `request_id`, `id`, `tool_use_id`, `is_error`, …), in order,
//!   while they take at most [`KEPT_BYTES`] bytes in all. Members named like the marker members
//!   (`truncated`, `size`, `preview_of`, `preview`, `seq`) are left out: in a preview those names
//!   always have the meaning above.
//!
//! No preview object is longer than [`MAX_PREVIEW_OBJECT_BYTES`].

use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::sizes::{
    KEPT_BYTES, KEPT_MEMBER_BYTES, MAX_PREVIEW_OBJECT_BYTES, MAX_PROPERTY_BYTES, PREVIEW_BYTES,
};

/// The names of the members a preview object defines.
pub const RESERVED: [&str; 5] = ["truncated", "size", "preview_of", "preview", "seq"];

/// True when `v` is a preview object (see the module documentation).
pub fn is_preview(v: &Value) -> bool {
    v.get("truncated") == Some(&Value::Bool(true))
        && v.get("size").is_some_and(Value::is_u64)
        && v.get("preview").is_some_and(Value::is_string)
}

/// The preview object of the JSON text `json` (see the module documentation). `extra` members
/// are added after the marker members (for example `seq`, where the whole can be read).
pub fn preview(json: &str, extra: &[(&str, Value)]) -> String {
    let mut out = Map::new();
    out.insert("truncated".into(), Value::Bool(true));
    out.insert("size".into(), Value::from(json.len() as u64));
    let members = top_members(json).unwrap_or_default();
    // The member that makes the object big is the one worth showing the beginning of.
    let biggest = members
        .iter()
        .enumerate()
        .max_by_key(|(_, (_, raw))| raw.get().len())
        .filter(|(_, (name, _))| json_len(name) <= KEPT_MEMBER_BYTES)
        .map(|(i, _)| i);
    let (of, shown) = match biggest {
        Some(i) => {
            let (name, raw) = &members[i];
            let text = raw.get();
            let shown = if text.starts_with('"') {
                // The string itself, not its escaped form.
                match serde_json::from_str::<String>(text) {
                    Ok(s) => cut_json(&s, PREVIEW_BYTES).to_owned(),
                    Err(_) => cut_json(text, PREVIEW_BYTES).to_owned(),
                }
            } else {
                cut_json(text, PREVIEW_BYTES).to_owned()
            };
            (name.clone(), shown)
        }
        None => (String::new(), cut_json(json, PREVIEW_BYTES).to_owned()),
    };
    out.insert("preview_of".into(), Value::String(of));
    out.insert("preview".into(), Value::String(shown));
    for (name, value) in extra {
        out.insert((*name).to_owned(), value.clone());
    }
    let mut kept = 0;
    for (i, (name, raw)) in members.iter().enumerate() {
        if Some(i) == biggest || RESERVED.contains(&name.as_str()) || out.contains_key(name) {
            continue;
        }
        if raw.get().len() > KEPT_MEMBER_BYTES {
            continue;
        }
        let Ok(value) = serde_json::from_str::<Value>(raw.get()) else {
            continue;
        };
        // Measured as it will be written: the name, its quotes, the colon, the value, a comma.
        let len = json_len(name) + 4 + value.to_string().len();
        if len > KEPT_MEMBER_BYTES || kept + len > KEPT_BYTES {
            continue;
        }
        kept += len;
        out.insert(name.clone(), value);
    }
    let text = Value::Object(out).to_string();
    debug_assert!(text.len() <= MAX_PREVIEW_OBJECT_BYTES);
    text
}

/// `json` itself when it is at most `max` bytes, else its preview with `extra` members.
pub fn bounded(json: &str, max: usize, extra: &[(&str, Value)]) -> String {
    if json.len() <= max {
        json.to_owned()
    } else {
        preview(json, extra)
    }
}

/// A tool input for a bot property: whole up to [`MAX_PROPERTY_BYTES`], else its preview.
pub fn property_input(json: &str, extra: &[(&str, Value)]) -> String {
    bounded(json, MAX_PROPERTY_BYTES, extra)
}

/// The top-level members of a JSON object, in order, each as its JSON text; `None` when `json`
/// is not an object. Nothing below the top level is parsed into values.
fn top_members(json: &str) -> Option<Vec<(String, &RawValue)>> {
    struct Members;
    impl<'de> Visitor<'de> for Members {
        type Value = Vec<(String, &'de RawValue)>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut out = Vec::new();
            while let Some((k, v)) = map.next_entry::<String, &'de RawValue>()? {
                out.push((k, v));
            }
            Ok(out)
        }
    }
    let mut de = serde_json::Deserializer::from_str(json);
    let members = (&mut de).deserialize_map(Members).ok()?;
    de.end().ok()?;
    Some(members)
}

/// How many bytes `c` takes written inside a JSON string (as serde_json writes it).
fn char_json_len(c: char) -> usize {
    match c {
        '"' | '\\' | '\u{8}' | '\u{c}' | '\n' | '\r' | '\t' => 2,
        c if (c as u32) < 0x20 => 6,
        c => c.len_utf8(),
    }
}

/// How many bytes `s` takes written as the inside of a JSON string.
pub fn json_len(s: &str) -> usize {
    s.chars().map(char_json_len).sum()
}

/// The longest beginning of `s` that takes at most `max` bytes written inside a JSON string.
pub fn cut_json(s: &str, max: usize) -> &str {
    let mut used = 0;
    for (i, c) in s.char_indices() {
        used += char_json_len(c);
        if used > max {
            return &s[..i];
        }
    }
    s
}

/// The longest end of `s` of at most `max` bytes, starting on a character boundary.
pub fn tail(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut start = s.len() - max;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

/// `s` in consecutive pieces of at most `max` bytes (`max` ≥ 4), each cut on a character
/// boundary; their concatenation is `s`. An empty `s` gives no piece.
pub fn pieces(s: &str, max: usize) -> impl Iterator<Item = &str> {
    let max = max.max(4);
    let mut rest = s;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let mut end = rest.len().min(max);
        while !rest.is_char_boundary(end) {
            end -= 1;
        }
        let (head, tail) = rest.split_at(end);
        rest = tail;
        Some(head)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_len_matches_serde_json() {
        let mut chars: Vec<char> = (0u32..0x100).filter_map(char::from_u32).collect();
        chars.extend(['é', '€', '𝄞', '\u{2028}', '\u{7f}', '\u{fffd}']);
        for c in chars {
            let s = c.to_string();
            let written = serde_json::to_string(&s).unwrap();
            assert_eq!(json_len(&s), written.len() - 2, "{c:?}");
        }
    }

    #[test]
    fn a_big_text_is_previewed_with_its_small_members() {
        let text = "é".repeat(3 << 20);
        let whole =
            json!({"text": text, "turn_id": "t-1", "n": 3, "ok": false, "none": null}).to_string();
        let p: Value = serde_json::from_str(&preview(&whole, &[])).unwrap();
        assert!(is_preview(&p));
        assert_eq!(p["size"], whole.len() as u64);
        assert_eq!(p["preview_of"], "text");
        let shown = p["preview"].as_str().unwrap();
        assert!(text.starts_with(shown));
        assert_eq!(
            shown.len(),
            PREVIEW_BYTES,
            "two-byte characters fill it exactly"
        );
        assert_eq!(p["turn_id"], "t-1");
        assert_eq!(p["n"], 3);
        assert_eq!(p["ok"], false);
        assert!(p.get("none").is_some());
        assert!(p.get("text").is_none());
    }

    #[test]
    fn an_object_member_is_previewed_as_json_text() {
        let input = json!({"file_path": "/x", "content": "a".repeat(2 << 20)});
        let whole = json!({"id": "toolu_1", "name": "Write", "input": input}).to_string();
        let p: Value = serde_json::from_str(&preview(&whole, &[("seq", json!(7))])).unwrap();
        assert_eq!(p["preview_of"], "input");
        assert!(
            p["preview"]
                .as_str()
                .unwrap()
                .starts_with(r#"{"content":"aaa"#)
                || p["preview"]
                    .as_str()
                    .unwrap()
                    .starts_with(r#"{"file_path":"/x""#)
        );
        assert_eq!(p["id"], "toolu_1");
        assert_eq!(p["name"], "Write");
        assert_eq!(p["seq"], 7);
    }

    #[test]
    fn previews_stay_bounded_whatever_the_input() {
        let control = "\u{1}".repeat(1 << 20);
        let mut many = Map::new();
        for i in 0..5000 {
            many.insert(format!("k{i}"), Value::String("\u{1}".repeat(100)));
        }
        many.insert("big".into(), Value::String(control.clone()));
        let cases = [
            json!({"text": control}).to_string(),
            Value::Object(many).to_string(),
            json!({ "\u{1}".repeat(5000): "x".repeat(2 << 20) }).to_string(),
            json!({"size": 1, "truncated": false, "preview": "x", "seq": 1, "t": "y".repeat(2 << 20)})
                .to_string(),
            format!("[{}]", "1,".repeat(1 << 20) + "1"),
            "not json at all ".repeat(100_000),
        ];
        for whole in cases {
            let text = preview(&whole, &[("seq", json!(u64::MAX))]);
            assert!(text.len() <= MAX_PREVIEW_OBJECT_BYTES, "{}", text.len());
            let p: Value = serde_json::from_str(&text).unwrap();
            assert!(is_preview(&p));
            assert_eq!(p["size"], whole.len() as u64);
            assert_eq!(p["seq"], u64::MAX, "reserved names keep their meaning");
        }
    }

    #[test]
    fn cuts_fall_on_character_boundaries() {
        let s = "a€b𝄞c";
        assert_eq!(cut_json(s, 3), "a");
        assert_eq!(cut_json(s, 4), "a€");
        assert_eq!(cut_json("\"x", 1), "");
        assert_eq!(tail(s, 5), "𝄞c");
        assert_eq!(tail(s, 4), "c");
        assert_eq!(tail(s, 100), s);
        let parts: Vec<&str> = pieces(s, 4).collect();
        assert_eq!(parts.concat(), s);
        assert!(parts.iter().all(|p| p.len() <= 4 && !p.is_empty()));
        assert_eq!(pieces("", 4).count(), 0);
    }

    #[test]
    fn small_values_stay_whole() {
        let small = json!({"text": "hi"}).to_string();
        assert_eq!(bounded(&small, 100, &[]), small);
        assert_eq!(property_input(&small, &[]), small);
        assert!(is_preview(
            &serde_json::from_str(&bounded(&small, 5, &[])).unwrap()
        ));
    }
}
