//! What the D-Bus layer serves of values that grow with an agent's output, bounded so that no
//! reply or signal exceeds what the bus accepts (design rule 15; the sizes are in
//! [`crate::sizes`]). Chat item payloads are bounded where they are stored
//! ([`crate::store::chat`]); this file bounds the rest: streamed text, permission inputs and the
//! properties that carry them. Text the CLI wrote is made a D-Bus string on the way out
//! ([`bus_text`]): a NUL in it would make the bus drop botvisord's connection.

use serde_json::Value;

use crate::preview;
use crate::sizes::{MAX_ITEM_BYTES, MAX_PROPERTY_BYTES};
use crate::store::{self, Store};

/// `text` as a D-Bus string may be: each NUL (U+0000), which the wire format cannot carry (the
/// bus drops a connection that sends one), is U+FFFD. Same length in chars; borrowed when there
/// is none.
pub fn bus_text(text: &str) -> std::borrow::Cow<'_, str> {
    if text.contains('\0') {
        std::borrow::Cow::Owned(text.replace('\0', "\u{FFFD}"))
    } else {
        std::borrow::Cow::Borrowed(text)
    }
}

/// `PartialText`: at most the last [`MAX_PROPERTY_BYTES`] of the text streamed so far, so that
/// the `TextDelta`s that follow continue it ([`bus_text`]).
pub fn partial_text(text: &str) -> String {
    bus_text(preview::tail(text, MAX_PROPERTY_BYTES)).into_owned()
}

/// `LastError`: at most [`MAX_PROPERTY_BYTES`]; a longer text is cut and ends with `…`
/// ([`bus_text`]).
pub fn last_error(text: &str) -> String {
    let text = &*bus_text(text);
    if text.len() <= MAX_PROPERTY_BYTES {
        return text.to_owned();
    }
    let mut end = MAX_PROPERTY_BYTES - '…'.len_utf8();
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// One `TextDelta`'s text in pieces of at most [`MAX_ITEM_BYTES`], one signal each.
pub fn text_delta_pieces(text: &str) -> impl Iterator<Item = &str> {
    preview::pieces(text, MAX_ITEM_BYTES)
}

/// A permission request's input as JSON, whole up to `max` bytes, else its preview with `seq`:
/// the `permission_request` chat item whose payload's `input` is the whole input.
fn input(store: &Store, bot_id: &str, request_id: &str, input: &str, max: usize) -> String {
    if input.len() <= max {
        return input.to_owned();
    }
    let seq = store
        .read(|c| store::chat::permission_request_seq(c, bot_id, request_id))
        .unwrap_or_else(|e| {
            tracing::warn!(bot_id, request_id, error = %e, "cannot find a permission request's item");
            None
        });
    let extra: Vec<(&str, Value)> = seq.map(|s| ("seq", Value::from(s))).into_iter().collect();
    preview::preview(input, &extra)
}

/// `PermissionRequested`'s `input_json`: whole up to [`MAX_ITEM_BYTES`], else a preview.
pub fn requested_input(store: &Store, bot_id: &str, request_id: &str, json: &str) -> String {
    input(store, bot_id, request_id, json, MAX_ITEM_BYTES)
}

/// `PendingPermissions`: every entry's input whole up to [`MAX_PROPERTY_BYTES`], else a preview.
pub fn pending(
    store: &Store,
    bot_id: &str,
    open: Vec<(String, String, String)>,
) -> Vec<(String, String, String)> {
    open.into_iter()
        .map(|(id, tool, json)| {
            let json = input(store, bot_id, &id, &json, MAX_PROPERTY_BYTES);
            (
                bus_text(&id).into_owned(),
                bus_text(&tool).into_owned(),
                json,
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{BotRecord, bots, chat};
    use serde_json::json;

    #[test]
    fn a_nul_never_goes_on_the_bus() {
        assert_eq!(bus_text("a\0b\0"), "a\u{FFFD}b\u{FFFD}");
        assert!(matches!(
            bus_text("plain"),
            std::borrow::Cow::Borrowed("plain")
        ));
        assert_eq!(last_error("x\0y"), "x\u{FFFD}y");
        assert_eq!(partial_text("\0"), "\u{FFFD}");
    }

    #[test]
    fn texts_are_cut_to_their_bounds() {
        let long = "é".repeat(MAX_PROPERTY_BYTES);
        let p = partial_text(&long);
        assert!(p.len() <= MAX_PROPERTY_BYTES && long.ends_with(&p));
        let e = last_error(&long);
        assert!(e.len() <= MAX_PROPERTY_BYTES && e.ends_with('…'));
        assert_eq!(last_error("short"), "short");
        let delta = "x".repeat(2 * MAX_ITEM_BYTES + 1);
        let parts: Vec<&str> = text_delta_pieces(&delta).collect();
        assert_eq!(parts.len(), 3);
        assert_eq!(parts.concat(), delta);
    }

    #[test]
    fn a_big_input_is_previewed_with_the_item_that_holds_it_whole() {
        let store = Store::open_in_memory().unwrap();
        store
            .tx(|tx| bots::insert(tx, &BotRecord::new("b", "b", "/", "claude")))
            .unwrap();
        let whole_input = json!({"file_path": "/x", "content": "y".repeat(MAX_ITEM_BYTES)});
        let payload = json!({"request_id": "r1", "tool": "Write", "input": whole_input});
        store
            .tx(|tx| chat::append(tx, "b", "assistant", None, "{}"))
            .unwrap();
        store
            .tx(|tx| chat::append(tx, "b", "permission_request", None, &payload.to_string()))
            .unwrap();
        let input_json = whole_input.to_string();
        let served = pending(
            &store,
            "b",
            vec![("r1".into(), "Write".into(), input_json.clone())],
        );
        let p: Value = serde_json::from_str(&served[0].2).unwrap();
        assert!(preview::is_preview(&p));
        assert_eq!(p["seq"], 2);
        assert_eq!(p["file_path"], "/x");
        assert_eq!(p["size"], input_json.len() as u64);
        let (bytes, _) = store
            .read(|c| chat::read(c, "b", 2, 0, usize::MAX))
            .unwrap()
            .unwrap();
        let whole: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(whole["input"], whole_input);
        let small = json!({"command": "ls"}).to_string();
        assert_eq!(requested_input(&store, "b", "r2", &small), small);
    }
}
