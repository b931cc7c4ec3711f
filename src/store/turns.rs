//! The `turns` table: every message a user sent, and what became of it.
//!
//! A turn is `queued` from `Send` until the CLI replays its message (design rule 8: nothing the
//! user sent is lost), `running` until its result, then `finished` with an outcome.
//!
//! The message itself is stored once: in the turn's `user` chat item, which `chat_seq` points
//! at (schema version 4; before it, `turns.text` held a second copy).

use rusqlite::{Connection, params};

pub use crate::queued::QueuedTurn;
use crate::runtime::Cut;
use crate::time::now_rfc3339;

/// Adds a queued turn whose message is the `user` chat item `chat_seq` of the bot (its payload's
/// `text`), committed in the same transaction.
pub fn insert(
    conn: &Connection,
    bot_id: &str,
    turn_id: &str,
    chat_seq: u64,
) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT INTO turns (id, bot_id, chat_seq, status, created_at)
         VALUES (?1, ?2, ?3, 'queued', ?4)",
    )?
    .execute(params![turn_id, bot_id, chat_seq as i64, now_rfc3339()])?;
    Ok(())
}

/// Marks a turn as running: its message was replayed by the CLI (an unanswered attempt a redo
/// was to cut is gone from the conversation by then: the cut is forgotten).
pub fn set_running(conn: &Connection, turn_id: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "UPDATE turns SET status = 'running', redo_cut = NULL WHERE id = ?1 AND status = 'queued'",
    )?
    .execute([turn_id])?;
    Ok(())
}

/// Puts a turn whose message the conversation took and never answered back in the queue, in its
/// place, to be asked again once more (`redos` + 1) by a resume that drops the unanswered
/// attempt as `cut` says (`None`: the whole conversation is resumed; issue 25).
pub fn redo(conn: &Connection, turn_id: &str, cut: Option<&Cut>) -> rusqlite::Result<()> {
    let cut = cut.and_then(|c| serde_json::to_string(c).ok());
    conn.prepare_cached(
        "UPDATE turns SET status = 'queued', redos = redos + 1, redo_cut = ?2
         WHERE id = ?1 AND status != 'finished'",
    )?
    .execute(params![turn_id, cut])?;
    Ok(())
}

/// The redo of a turn goes without its cut: the CLI refused it, or the conversation it was to
/// cut is no longer the one the message goes to.
pub fn uncut(conn: &Connection, turn_id: &str) -> rusqlite::Result<()> {
    conn.prepare_cached("UPDATE turns SET redo_cut = NULL WHERE id = ?1")?
        .execute([turn_id])?;
    Ok(())
}

/// Puts a running turn back in the queue, in its place (the oldest first): a usage limit
/// refused its message before the model answered (issue 24).
pub fn requeue(conn: &Connection, turn_id: &str) -> rusqlite::Result<()> {
    conn.prepare_cached("UPDATE turns SET status = 'queued' WHERE id = ?1 AND status = 'running'")?
        .execute([turn_id])?;
    Ok(())
}

/// Puts a running turn a usage limit cut back in the queue, in its place, to go as `text` (a
/// request to continue) instead of its message (issue 24, `continue_after_limit`).
pub fn requeue_to_continue(conn: &Connection, turn_id: &str, text: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "UPDATE turns SET status = 'queued', resend_text = ?2 WHERE id = ?1 AND status = 'running'",
    )?
    .execute(params![turn_id, text])?;
    Ok(())
}

/// Settles a turn with its outcome.
pub fn finish(conn: &Connection, turn_id: &str, outcome: &str) -> rusqlite::Result<()> {
    conn.prepare_cached("UPDATE turns SET status = 'finished', outcome = ?2 WHERE id = ?1")?
        .execute(params![turn_id, outcome])?;
    Ok(())
}

/// The queued turns of a bot, oldest first, with their text read from their `user` chat items
/// (whole, also when the item is served as a preview).
pub fn queued(conn: &Connection, bot_id: &str) -> rusqlite::Result<Vec<QueuedTurn>> {
    let mut st = conn.prepare_cached(
        "SELECT t.id, COALESCE(t.resend_text, json_extract(COALESCE(w.payload, c.payload), '$.text')),
                t.redos, t.redo_cut
         FROM turns t
         JOIN chat_items c ON c.bot_id = t.bot_id AND c.seq = t.chat_seq
         LEFT JOIN chat_wholes w ON w.bot_id = t.bot_id AND w.seq = t.chat_seq
         WHERE t.bot_id = ?1 AND t.status = 'queued' ORDER BY t.pos",
    )?;
    st.query_map([bot_id], |r| {
        Ok(QueuedTurn {
            id: r.get(0)?,
            text: r.get(1)?,
            redos: r.get::<_, i64>(2)?.max(0) as u32,
            cut: r
                .get::<_, Option<String>>(3)?
                .and_then(|c| serde_json::from_str(&c).ok()),
        })
    })?
    .collect()
}

/// A turn a bot had running (replayed, no result), as start-up recovery reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct RunningTurn {
    /// The turn and the text it was sent as.
    pub turn: QueuedTurn,
    /// When it was sent (`turns.created_at`): its line in the conversation is later.
    pub sent_at: std::time::SystemTime,
    /// How many chat items of its answer (`assistant`, `tool_use`, `tool_result`) are recorded.
    pub answer_items: usize,
    /// Its agent began work: a `tool_use` or `permission_request` item of it is recorded.
    pub worked: bool,
}

/// The turns of a bot that were running (replayed, no result), oldest first.
pub fn running(conn: &Connection, bot_id: &str) -> rusqlite::Result<Vec<RunningTurn>> {
    let mut st = conn.prepare_cached(
        "SELECT t.id, COALESCE(t.resend_text, json_extract(COALESCE(w.payload, c.payload), '$.text')),
                t.created_at,
                (SELECT COUNT(*) FROM chat_items a WHERE a.bot_id = t.bot_id AND a.seq > t.chat_seq AND a.turn_id = t.id
                   AND a.kind IN ('assistant', 'tool_use', 'tool_result')),
                t.redos,
                EXISTS (SELECT 1 FROM chat_items a WHERE a.bot_id = t.bot_id AND a.seq > t.chat_seq AND a.turn_id = t.id
                   AND a.kind IN ('tool_use', 'permission_request'))
         FROM turns t
         LEFT JOIN chat_items c ON c.bot_id = t.bot_id AND c.seq = t.chat_seq
         LEFT JOIN chat_wholes w ON w.bot_id = t.bot_id AND w.seq = t.chat_seq
         WHERE t.bot_id = ?1 AND t.status = 'running' ORDER BY t.pos",
    )?;
    st.query_map([bot_id], |r| {
        let at: String = r.get(2)?;
        Ok(RunningTurn {
            turn: QueuedTurn {
                id: r.get(0)?,
                text: r.get::<_, Option<String>>(1)?.unwrap_or_default(),
                redos: r.get::<_, i64>(4)?.max(0) as u32,
                cut: None,
            },
            sent_at: humantime::parse_rfc3339(&at).unwrap_or(std::time::UNIX_EPOCH),
            answer_items: r.get::<_, i64>(3)? as usize,
            worked: r.get(5)?,
        })
    })?
    .collect()
}
