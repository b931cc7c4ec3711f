//! The `chat_items` table: what a bot's conversation showed, in order, per bot.

use rusqlite::{Connection, params};

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
    /// A JSON object.
    pub payload: String,
}

/// Appends an item at the next sequence number of `bot_id` and returns it.
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
    conn.prepare_cached(
        "INSERT INTO chat_items (bot_id, seq, kind, time, turn_id, payload)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?
    .execute(params![bot_id, seq, kind, time, turn_id, payload])?;
    Ok(ChatItem {
        seq: seq as u64,
        kind: kind.to_owned(),
        time,
        turn_id: turn_id.map(str::to_owned),
        payload: payload.to_owned(),
    })
}

/// Up to `limit` items with `seq > after_seq`, in order.
pub fn after(
    conn: &Connection,
    bot_id: &str,
    after_seq: u64,
    limit: u32,
) -> rusqlite::Result<Vec<ChatItem>> {
    let mut st = conn.prepare_cached(
        "SELECT seq, kind, time, turn_id, payload FROM chat_items
         WHERE bot_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3",
    )?;
    st.query_map(
        params![bot_id, after_seq.min(i64::MAX as u64) as i64, limit as i64],
        |r| {
            Ok(ChatItem {
                seq: r.get::<_, i64>(0)? as u64,
                kind: r.get(1)?,
                time: r.get(2)?,
                turn_id: r.get(3)?,
                payload: r.get(4)?,
            })
        },
    )?
    .collect()
}
