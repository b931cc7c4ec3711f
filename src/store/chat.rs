//! The `chat_items` table: what a bot's conversation showed, in order, per bot.
//!
//! A payload of at most [`MAX_ITEM_BYTES`] is stored whole in `chat_items`. A bigger one is
//! stored whole in `chat_wholes` (a rowid table, so that a range of it can be read without
//! loading the rest: SQLite's incremental blob I/O), and `chat_items` holds its preview
//! ([`crate::preview`]): what `GetChat` and `ChatItemAdded` serve is then exactly the
//! `chat_items` row, and reading a page never touches a big payload.

use rusqlite::{Connection, MAIN_DB, OptionalExtension, params};

use crate::sizes::MAX_ITEM_BYTES;
use crate::time::now_rfc3339;

/// One recorded event of a bot's chat, as `GetChat` returns it.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatItem {
    /// 1, 2, 3, … per bot, without gaps.
    pub seq: u64,
    /// `user`, `assistant`, `tool_use`, `tool_result`, `result`, `error` or `system`
    /// (see `docs/dbus-api.md`).
    pub kind: String,
    /// RFC 3339, UTC, milliseconds.
    pub time: String,
    /// The turn the item belongs to, when known.
    pub turn_id: Option<String>,
    /// A JSON object as served: the whole payload, or its preview when the whole is bigger than
    /// [`MAX_ITEM_BYTES`].
    pub payload: String,
}

/// Appends an item at the next sequence number of `bot_id` and returns it as served (a payload
/// over [`MAX_ITEM_BYTES`] is kept whole in `chat_wholes` and served as its preview).
///
/// An item that belongs to a turn says so where every client sees it: its payload (a JSON
/// object) gets a `turn_id` member, also in its preview. The turn is `turn_id`, or for a
/// `permission_answer` given none, the turn of the `permission_request` it answers.
pub fn append(
    conn: &Connection,
    bot_id: &str,
    kind: &str,
    turn_id: Option<&str>,
    payload: &str,
) -> rusqlite::Result<ChatItem> {
    let seq: i64 = conn
        .prepare_cached("SELECT COALESCE(MAX(seq), 0) + 1 FROM chat_items WHERE bot_id = ?1")?
        .query_row([bot_id], |r| r.get(0))?;
    let time = now_rfc3339();
    let asked_in = match (turn_id, kind) {
        (None, "permission_answer") => request_turn(conn, bot_id, payload)?,
        _ => None,
    };
    let turn_id = turn_id.or(asked_in.as_deref());
    let tagged = turn_id.and_then(|t| with_turn_id(payload, t));
    let payload = tagged.as_deref().unwrap_or(payload);
    let timed = match (kind, turn_id) {
        ("turn_finished", Some(t)) => with_duration(conn, bot_id, t, payload, &time)?,
        _ => None,
    };
    let payload = timed.as_deref().unwrap_or(payload);
    let served = if payload.len() > MAX_ITEM_BYTES {
        // The turn id is kept first, whatever else the preview has room for.
        let extra = turn_id.map(|t| ("turn_id", serde_json::Value::from(t)));
        crate::preview::preview(payload, extra.as_slice())
    } else {
        payload.to_owned()
    };
    conn.prepare_cached(
        "INSERT INTO chat_items (bot_id, seq, kind, time, turn_id, payload)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?
    .execute(params![bot_id, seq, kind, time, turn_id, served])?;
    if payload.len() > MAX_ITEM_BYTES {
        conn.prepare_cached("INSERT INTO chat_wholes (bot_id, seq, payload) VALUES (?1, ?2, ?3)")?
            .execute(params![bot_id, seq, payload])?;
    }
    Ok(ChatItem {
        seq: seq as u64,
        kind: kind.to_owned(),
        time,
        turn_id: turn_id.map(str::to_owned),
        payload: served,
    })
}

/// `payload` with a `turn_id` member set to `turn_id`, when it is a JSON object that lacks one
/// (or has another value); `None` when it needs no change or is not an object. The object is
/// scanned, not rebuilt: the member is put first and the rest of the text is kept as it was.
fn with_turn_id(payload: &str, turn_id: &str) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Probe<'a> {
        #[serde(borrow)]
        turn_id: Option<&'a serde_json::value::RawValue>,
    }
    let probe: Probe<'_> = serde_json::from_str(payload).ok()?;
    let quoted = serde_json::Value::from(turn_id).to_string();
    match probe.turn_id {
        Some(raw) if raw.get() == quoted => None,
        Some(_) => {
            // Another turn id (never written by botvisord): rebuilt, with this one.
            let mut map: serde_json::Map<String, serde_json::Value> =
                serde_json::from_str(payload).ok()?;
            map.insert("turn_id".into(), serde_json::Value::from(turn_id));
            Some(serde_json::Value::Object(map).to_string())
        }
        None => {
            let rest = payload.trim_start().strip_prefix('{')?;
            if rest.trim_start().starts_with('}') {
                Some(format!("{{\"turn_id\":{quoted}}}"))
            } else {
                Some(format!("{{\"turn_id\":{quoted},{rest}"))
            }
        }
    }
}

/// A `turn_finished` payload with `duration_ms`: how long the turn `turn_id` took, in
/// milliseconds, from its message's `user` item (the `Send`) to `now` (this item's time), every
/// wait included (the queue, a usage limit, a login, the CLI's retries); the CLI's own
/// `duration_ms` counts only its last attempt. `None` when the turn's message is not in the
/// chat, or the payload is not a JSON object.
fn with_duration(
    conn: &Connection,
    bot_id: &str,
    turn_id: &str,
    payload: &str,
    now: &str,
) -> rusqlite::Result<Option<String>> {
    let sent: Option<String> = conn
        .prepare_cached(
            "SELECT c.time FROM turns t JOIN chat_items c ON c.bot_id = t.bot_id AND c.seq = t.chat_seq
             WHERE t.id = ?1 AND t.bot_id = ?2",
        )?
        .query_row(params![turn_id, bot_id], |r| r.get(0))
        .optional()?;
    let (Some(sent), Ok(now)) = (sent, humantime::parse_rfc3339(now)) else {
        return Ok(None);
    };
    let Ok(sent) = humantime::parse_rfc3339(&sent) else {
        return Ok(None);
    };
    let ms = now.duration_since(sent).map_or(0, |d| d.as_millis());
    let Some(head) = payload.trim_end().strip_suffix('}') else {
        return Ok(None);
    };
    if !payload.trim_start().starts_with('{') {
        return Ok(None);
    }
    let sep = if head.trim_end().ends_with('{') {
        ""
    } else {
        ","
    };
    Ok(Some(format!("{head}{sep}\"duration_ms\":{ms}}}")))
}

/// The turn of the `permission_request` that a `permission_answer` payload answers.
fn request_turn(
    conn: &Connection,
    bot_id: &str,
    payload: &str,
) -> rusqlite::Result<Option<String>> {
    let request = serde_json::from_str::<serde_json::Value>(payload)
        .ok()
        .and_then(|v| v.get("request_id")?.as_str().map(str::to_owned));
    let Some(request) = request else {
        return Ok(None);
    };
    conn.prepare_cached(
        "SELECT turn_id FROM chat_items
         WHERE bot_id = ?1 AND kind = 'permission_request'
           AND json_extract(payload, '$.request_id') = ?2
         ORDER BY seq DESC LIMIT 1",
    )?
    .query_row(params![bot_id, request], |r| r.get::<_, Option<String>>(0))
    .optional()
    .map(Option::flatten)
}

/// The texts of the bot's own messages (its `user` items not imported from elsewhere) that an
/// agent may have been given, the newest `limit` of them, newest first (whole, also for an
/// item too big for `chat_items`). A message still waiting that no agent was ever given (its
/// turn `queued`, never written, never asked again) cannot be in a conversation and is not
/// counted: hundreds of them waiting would otherwise push the ones in the conversation out of
/// the window, and those would look like another process's (a hostile run of issue 50).
pub fn own_user_texts(
    conn: &Connection,
    bot_id: &str,
    limit: u32,
) -> rusqlite::Result<Vec<String>> {
    let mut st = conn.prepare_cached(
        "SELECT COALESCE(w.payload, c.payload) FROM chat_items c
         LEFT JOIN chat_wholes w ON w.bot_id = c.bot_id AND w.seq = c.seq
         WHERE c.bot_id = ?1 AND c.kind = 'user'
           AND NOT EXISTS (
             SELECT 1 FROM turns t
             WHERE t.id = c.turn_id AND t.bot_id = c.bot_id AND t.status = 'queued'
               AND t.redos = 0
               AND NOT EXISTS (SELECT 1 FROM deliveries d
                               WHERE d.bot_id = t.bot_id AND d.turn_id = t.id))
         ORDER BY c.seq DESC LIMIT ?2",
    )?;
    let rows = st.query_map(params![bot_id, limit], |r| r.get::<_, String>(0))?;
    let mut texts = Vec::new();
    for payload in rows {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&payload?) else {
            continue;
        };
        if v["imported"] != true
            && let Some(t) = v["text"].as_str()
        {
            texts.push(t.to_owned());
        }
    }
    Ok(texts)
}

/// How many bytes an item takes in a `GetChat` reply: its strings, their length words and
/// terminators, the seq and the struct alignment, rounded up.
pub fn wire_size(item: &ChatItem) -> usize {
    32 + item.kind.len() + item.time.len() + item.payload.len()
}

/// Items with `seq > after_seq`, in order: at most `limit`, and while their [`wire_size`]s add
/// up to at most `max_bytes`, but always the first one. Payloads are served as stored (whole, or
/// the preview of a big one).
pub fn after(
    conn: &Connection,
    bot_id: &str,
    after_seq: u64,
    limit: u32,
    max_bytes: usize,
) -> rusqlite::Result<Vec<ChatItem>> {
    let mut st = conn.prepare_cached(
        "SELECT seq, kind, time, turn_id, payload FROM chat_items
         WHERE bot_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3",
    )?;
    let mut rows = st.query(params![
        bot_id,
        after_seq.min(i64::MAX as u64) as i64,
        limit as i64
    ])?;
    let mut items = Vec::new();
    let mut total = 0;
    while let Some(r) = rows.next()? {
        let item = ChatItem {
            seq: r.get::<_, i64>(0)? as u64,
            kind: r.get(1)?,
            time: r.get(2)?,
            turn_id: r.get(3)?,
            payload: r.get(4)?,
        };
        let size = wire_size(&item);
        if !items.is_empty() && total + size > max_bytes {
            break;
        }
        total += size;
        items.push(item);
    }
    Ok(items)
}

/// Where an item's whole payload is.
enum Whole {
    /// In `chat_wholes`, at this rowid.
    Apart(i64),
    /// In `chat_items` itself.
    Inline(String),
}

fn locate(conn: &Connection, bot_id: &str, seq: u64) -> rusqlite::Result<Option<Whole>> {
    let seq = seq.min(i64::MAX as u64) as i64;
    if let Some(rowid) = conn
        .prepare_cached("SELECT rowid FROM chat_wholes WHERE bot_id = ?1 AND seq = ?2")?
        .query_row(params![bot_id, seq], |r| r.get(0))
        .optional()?
    {
        return Ok(Some(Whole::Apart(rowid)));
    }
    conn.prepare_cached("SELECT payload FROM chat_items WHERE bot_id = ?1 AND seq = ?2")?
        .query_row(params![bot_id, seq], |r| r.get(0))
        .optional()
        .map(|p| p.map(Whole::Inline))
}

/// Bytes `offset .. offset + length` of item `seq`'s whole payload (its JSON text, UTF-8), fewer
/// at its end and none from its end on, with the whole payload's size in bytes; `None` when the
/// bot has no item `seq`. Only the range is read from the database.
pub fn read(
    conn: &Connection,
    bot_id: &str,
    seq: u64,
    offset: u64,
    length: usize,
) -> rusqlite::Result<Option<(Vec<u8>, u64)>> {
    let range = |size: usize| {
        let start = offset.min(size as u64) as usize;
        (start, start + length.min(size - start))
    };
    match locate(conn, bot_id, seq)? {
        None => Ok(None),
        Some(Whole::Inline(payload)) => {
            let (start, end) = range(payload.len());
            Ok(Some((
                payload.as_bytes()[start..end].to_vec(),
                payload.len() as u64,
            )))
        }
        Some(Whole::Apart(rowid)) => {
            let blob = conn.blob_open(MAIN_DB, c"chat_wholes", c"payload", rowid, true)?;
            let (start, end) = range(blob.len());
            let mut buf = vec![0; end - start];
            blob.read_at_exact(&mut buf, start)?;
            Ok(Some((buf, blob.len() as u64)))
        }
    }
}

/// The size in bytes of item `seq`'s whole payload; `None` when the bot has no item `seq`.
pub fn whole_size(conn: &Connection, bot_id: &str, seq: u64) -> rusqlite::Result<Option<u64>> {
    Ok(read(conn, bot_id, seq, 0, 0)?.map(|(_, size)| size))
}

/// The seq of the newest `permission_request` item of the bot for `request_id`, whose payload's
/// `input` is that request's whole input. Scans from the newest item back.
pub fn permission_request_seq(
    conn: &Connection,
    bot_id: &str,
    request_id: &str,
) -> rusqlite::Result<Option<u64>> {
    conn.prepare_cached(
        "SELECT seq FROM chat_items
         WHERE bot_id = ?1 AND kind = 'permission_request'
           AND json_extract(payload, '$.request_id') = ?2
         ORDER BY seq DESC LIMIT 1",
    )?
    .query_row(params![bot_id, request_id], |r| r.get::<_, i64>(0))
    .optional()
    .map(|s| s.map(|s| s as u64))
}

/// Migration step (schema version 4): every payload over [`MAX_ITEM_BYTES`] that an older
/// botvisor stored whole in `chat_items` moves to `chat_wholes`, and `chat_items` gets its
/// preview. One item in memory at a time.
pub(crate) fn move_big_payloads(conn: &Connection) -> rusqlite::Result<()> {
    // octet_length() of a column reads the size without loading the value.
    let big: Vec<(String, i64)> = conn
        .prepare("SELECT bot_id, seq FROM chat_items WHERE octet_length(payload) > ?1")?
        .query_map([MAX_ITEM_BYTES as i64], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    for (bot_id, seq) in big {
        let payload: String = conn.query_row(
            "SELECT payload FROM chat_items WHERE bot_id = ?1 AND seq = ?2",
            params![bot_id, seq],
            |r| r.get(0),
        )?;
        conn.execute(
            "INSERT INTO chat_wholes (bot_id, seq, payload) VALUES (?1, ?2, ?3)",
            params![bot_id, seq, payload],
        )?;
        conn.execute(
            "UPDATE chat_items SET payload = ?3 WHERE bot_id = ?1 AND seq = ?2",
            params![bot_id, seq, crate::preview::preview(&payload, &[])],
        )?;
    }
    Ok(())
}

/// The payloads of the permission requests of `bot_id` no answer followed, oldest first (as
/// [`unanswered_permission_requests`]).
pub fn unanswered_permission_payloads(
    conn: &Connection,
    bot_id: &str,
) -> rusqlite::Result<Vec<serde_json::Value>> {
    let mut st = conn.prepare_cached(
        "SELECT q.payload FROM chat_items q
         WHERE q.bot_id = ?1 AND q.kind = 'permission_request'
           AND NOT EXISTS (
             SELECT 1 FROM chat_items a
             WHERE a.bot_id = ?1 AND a.kind = 'permission_answer' AND a.seq > q.seq
               AND json_extract(a.payload, '$.request_id') = json_extract(q.payload, '$.request_id'))
         ORDER BY q.seq",
    )?;
    st.query_map([bot_id], |r| r.get::<_, String>(0))?
        .map(|p| Ok(serde_json::from_str(&p?).unwrap_or_default()))
        .collect()
}

/// The permission requests of a bot that were never answered: `(request_id, tool)`, oldest
/// first (a daemon that died while the agent asked leaves them so).
pub fn unanswered_permission_requests(
    conn: &Connection,
    bot_id: &str,
) -> rusqlite::Result<Vec<(String, String)>> {
    let text = |p: &serde_json::Value, k: &str| p[k].as_str().unwrap_or_default().to_owned();
    Ok(unanswered_permission_payloads(conn, bot_id)?
        .iter()
        .map(|p| (text(p, "request_id"), text(p, "tool")))
        .collect())
}

/// The time (RFC 3339) of bot `bot_id`'s last chat item of `kind` whose payload's `reason` is
/// `reason`; `None` when there is none.
pub fn last_time_of(
    conn: &Connection,
    bot_id: &str,
    kind: &str,
    reason: &str,
) -> rusqlite::Result<Option<String>> {
    conn.prepare_cached(
        "SELECT time FROM chat_items
         WHERE bot_id = ?1 AND kind = ?2 AND json_extract(payload, '$.reason') = ?3
         ORDER BY seq DESC LIMIT 1",
    )?
    .query_row(params![bot_id, kind, reason], |r| r.get(0))
    .optional()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{BotRecord, Store, bots};
    use serde_json::{Value, json};

    fn store_with_bot() -> Store {
        let store = Store::open_in_memory().unwrap();
        let rec = BotRecord::new("b", "b", "/", "claude");
        store.tx(|tx| bots::insert(tx, &rec)).unwrap();
        store
    }

    #[test]
    fn a_big_payload_is_served_as_a_preview_and_read_whole_in_ranges() {
        let store = store_with_bot();
        let text: String = (0..(3 << 20)).map(|i| ['a', 'é', '€'][i % 3]).collect();
        let whole = json!({"text": text, "turn_id": "t"}).to_string();
        let small = json!({"text": "hi"}).to_string();
        let big = store
            .tx(|tx| append(tx, "b", "assistant", Some("t"), &whole))
            .unwrap();
        store
            .tx(|tx| append(tx, "b", "assistant", None, &small))
            .unwrap();
        let p: Value = serde_json::from_str(&big.payload).unwrap();
        assert!(crate::preview::is_preview(&p));
        assert_eq!(p["size"], whole.len() as u64);
        assert_eq!(p["turn_id"], "t");
        let served = store.read(|c| after(c, "b", 0, 10, usize::MAX)).unwrap();
        assert_eq!(served.len(), 2);
        assert_eq!(served[0].payload, big.payload);
        assert_eq!(served[1].payload, small);

        let mut got = Vec::new();
        loop {
            let (bytes, size) = store
                .read(|c| read(c, "b", 1, got.len() as u64, 1_000_003))
                .unwrap()
                .unwrap();
            assert_eq!(size, whole.len() as u64);
            if bytes.is_empty() {
                break;
            }
            got.extend(bytes);
        }
        assert_eq!(String::from_utf8(got).unwrap(), whole);
        let (bytes, size) = store.read(|c| read(c, "b", 2, 1, 4)).unwrap().unwrap();
        assert_eq!((bytes.as_slice(), size), (&small.as_bytes()[1..5], 13));
        assert!(store.read(|c| read(c, "b", 3, 0, 4)).unwrap().is_none());
        assert_eq!(
            store.read(|c| read(c, "b", 1, u64::MAX, 4)).unwrap(),
            Some((vec![], whole.len() as u64))
        );
    }

    #[test]
    fn a_turns_end_says_how_long_it_took_since_its_message() {
        let store = store_with_bot();
        let user = store
            .tx(|tx| {
                let item = append(tx, "b", "user", Some("t1"), r#"{"text":"hi"}"#)?;
                crate::store::turns::insert(tx, "b", "t1", item.seq)?;
                Ok(item)
            })
            .unwrap();
        let end = store
            .tx(|tx| {
                append(
                    tx,
                    "b",
                    "turn_finished",
                    Some("t1"),
                    r#"{"outcome":"success","reason":"success","text":""}"#,
                )
            })
            .unwrap();
        let p: Value = serde_json::from_str(&end.payload).unwrap();
        let at = |t: &str| humantime::parse_rfc3339(t).unwrap();
        let took = at(&end.time).duration_since(at(&user.time)).unwrap();
        assert_eq!(p["duration_ms"], took.as_millis() as u64, "{p}");
        assert_eq!(p["outcome"], "success");
        // A turn whose message is not in the chat says nothing of its time.
        let other = store
            .tx(|tx| {
                append(
                    tx,
                    "b",
                    "turn_finished",
                    Some("t9"),
                    r#"{"outcome":"error"}"#,
                )
            })
            .unwrap();
        let p: Value = serde_json::from_str(&other.payload).unwrap();
        assert!(p.get("duration_ms").is_none(), "{p}");
    }

    #[test]
    fn every_item_of_a_turn_carries_its_turn_id() {
        let store = store_with_bot();
        let result = json!({"subtype": "success", "is_error": false}).to_string();
        let item = store
            .tx(|tx| append(tx, "b", "result", Some("t1"), &result))
            .unwrap();
        let p: Value = serde_json::from_str(&item.payload).unwrap();
        assert_eq!(p["turn_id"], "t1");
        assert_eq!(p["subtype"], "success");
        // An answer takes the turn of the request it answers.
        let asked = json!({"request_id": "r1", "tool": "Write"}).to_string();
        store
            .tx(|tx| append(tx, "b", "permission_request", Some("t2"), &asked))
            .unwrap();
        let answer = json!({"request_id": "r1", "behavior": "allow", "by": ":1.5"}).to_string();
        let item = store
            .tx(|tx| append(tx, "b", "permission_answer", None, &answer))
            .unwrap();
        assert_eq!(item.turn_id.as_deref(), Some("t2"));
        let p: Value = serde_json::from_str(&item.payload).unwrap();
        assert_eq!(p["turn_id"], "t2");
        // A note about no turn stays as it was; a preview keeps the turn id.
        let empty = store
            .tx(|tx| append(tx, "b", "system", Some("t4"), "{ }"))
            .unwrap();
        assert_eq!(empty.payload, r#"{"turn_id":"t4"}"#);
        let other = json!({"turn_id": "old", "text": "x"}).to_string();
        let item = store
            .tx(|tx| append(tx, "b", "system", Some("t5"), &other))
            .unwrap();
        let p: Value = serde_json::from_str(&item.payload).unwrap();
        assert_eq!(
            (p["turn_id"].as_str(), p["text"].as_str()),
            (Some("t5"), Some("x"))
        );
        let note = json!({"text": "setting applied"}).to_string();
        let item = store
            .tx(|tx| append(tx, "b", "system", None, &note))
            .unwrap();
        assert_eq!(item.payload, note);
        let big = json!({"text": "x".repeat(MAX_ITEM_BYTES + 1)}).to_string();
        let item = store
            .tx(|tx| append(tx, "b", "assistant", Some("t3"), &big))
            .unwrap();
        let p: Value = serde_json::from_str(&item.payload).unwrap();
        assert!(crate::preview::is_preview(&p));
        assert_eq!(p["turn_id"], "t3");
    }

    #[test]
    fn a_page_keeps_to_its_byte_budget_and_always_holds_one_item() {
        let store = store_with_bot();
        let payload = json!({"text": "x".repeat(1000)}).to_string();
        for _ in 0..10 {
            store
                .tx(|tx| append(tx, "b", "assistant", None, &payload))
                .unwrap();
        }
        let one = store.read(|c| after(c, "b", 0, 100, 1)).unwrap();
        assert_eq!(one.len(), 1, "at least one item, whatever the budget");
        let size = wire_size(&one[0]);
        let three = store.read(|c| after(c, "b", 0, 100, 3 * size)).unwrap();
        assert_eq!(three.iter().map(|i| i.seq).collect::<Vec<_>>(), [1, 2, 3]);
        let counted = store.read(|c| after(c, "b", 4, 2, usize::MAX)).unwrap();
        assert_eq!(counted.iter().map(|i| i.seq).collect::<Vec<_>>(), [5, 6]);
    }

    #[test]
    fn deleting_a_bot_deletes_its_whole_payloads() {
        let store = store_with_bot();
        let whole = json!({"text": "x".repeat(MAX_ITEM_BYTES)}).to_string();
        store
            .tx(|tx| append(tx, "b", "assistant", None, &whole))
            .unwrap();
        store.tx(|tx| bots::delete(tx, "b")).unwrap();
        let left: i64 = store
            .read(|c| c.query_row("SELECT COUNT(*) FROM chat_wholes", [], |r| r.get(0)))
            .unwrap();
        assert_eq!(left, 0);
    }
}
