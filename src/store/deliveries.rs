//! The `deliveries` table: which conversation a message was written to, and when.
//!
//! A message counts as taken only once the CLI replays it (design rule 8), but the CLI writes it
//! into its transcript before the replay. When the process (or the daemon) dies in between, the
//! next daemon must ask that conversation's transcript whether it holds the message: this table
//! says which conversation, and since when. A row is written before the message is written to
//! the process's stdin (persist, then act) and replaced when the message is written again.

use std::collections::HashMap;
use std::time::SystemTime;

use rusqlite::{Connection, params};

/// Where and when a message was written.
#[derive(Debug, Clone, PartialEq)]
pub struct Delivery {
    /// The session id of the process it was written to.
    pub session_id: String,
    /// When it was written, to the millisecond.
    pub written_at: SystemTime,
}

/// Records that `turn_id`'s message is written to the process of `session_id` at `at` (kept to
/// the millisecond, RFC 3339), not yet whole ([`written_whole`]).
pub fn record(
    conn: &Connection,
    bot_id: &str,
    turn_id: &str,
    session_id: &str,
    at: SystemTime,
) -> rusqlite::Result<()> {
    let at = humantime::format_rfc3339_millis(at).to_string();
    conn.prepare_cached(
        "INSERT OR REPLACE INTO deliveries (bot_id, turn_id, session_id, written_at, whole)
         VALUES (?1, ?2, ?3, ?4, 0)",
    )?
    .execute(params![bot_id, turn_id, session_id, at])?;
    Ok(())
}

/// The line of bot `bot_id`'s message in flight reached its agent's stdin whole (one message is
/// in flight at a time, so every delivery of the bot not yet whole is that one).
pub fn written_whole(conn: &Connection, bot_id: &str) -> rusqlite::Result<()> {
    conn.prepare_cached("UPDATE deliveries SET whole = 1 WHERE bot_id = ?1 AND whole = 0")?
        .execute([bot_id])?;
    Ok(())
}

/// Whether a message of bot `bot_id` was being written to its agent's stdin and is not on
/// record as written whole: a botvisord killed meanwhile may have left part of its line in the
/// pipe (issue 47).
pub fn partly_written(conn: &Connection, bot_id: &str) -> rusqlite::Result<bool> {
    conn.prepare_cached("SELECT EXISTS (SELECT 1 FROM deliveries WHERE bot_id = ?1 AND whole = 0)")?
        .query_row([bot_id], |r| r.get(0))
}

/// Forgets the deliveries of turns that ended.
pub fn forget(conn: &Connection, bot_id: &str, turn_id: &str) -> rusqlite::Result<()> {
    conn.prepare_cached("DELETE FROM deliveries WHERE bot_id = ?1 AND turn_id = ?2")?
        .execute(params![bot_id, turn_id])?;
    Ok(())
}

/// The deliveries of a bot, by turn id.
pub fn of_bot(conn: &Connection, bot_id: &str) -> rusqlite::Result<HashMap<String, Delivery>> {
    let mut st = conn.prepare_cached(
        "SELECT turn_id, session_id, written_at FROM deliveries WHERE bot_id = ?1",
    )?;
    st.query_map([bot_id], |r| {
        let at: String = r.get(2)?;
        Ok((
            r.get::<_, String>(0)?,
            Delivery {
                session_id: r.get(1)?,
                written_at: humantime::parse_rfc3339(&at).unwrap_or(SystemTime::UNIX_EPOCH),
            },
        ))
    })?
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{BotRecord, Store, bots};

    #[test]
    fn a_delivery_is_kept_replaced_and_forgotten() {
        let store = Store::open_in_memory().unwrap();
        store
            .tx(|tx| bots::insert(tx, &BotRecord::new("b", "b", "/", "claude")))
            .unwrap();
        let first = SystemTime::UNIX_EPOCH + std::time::Duration::from_millis(1_764_000_000_123);
        let second = first + std::time::Duration::from_millis(5);
        store.tx(|tx| record(tx, "b", "t1", "s1", first)).unwrap();
        store.tx(|tx| record(tx, "b", "t1", "s2", second)).unwrap();
        let all = store.read(|c| of_bot(c, "b")).unwrap();
        assert_eq!(all.len(), 1);
        assert_eq!(all["t1"].session_id, "s2");
        assert_eq!(all["t1"].written_at, second, "kept to the millisecond");
        store.tx(|tx| forget(tx, "b", "t1")).unwrap();
        assert!(store.read(|c| of_bot(c, "b")).unwrap().is_empty());
    }

    #[test]
    fn a_delivery_is_partly_written_until_its_line_is_whole_and_again_when_redone() {
        let store = Store::open_in_memory().unwrap();
        store
            .tx(|tx| bots::insert(tx, &BotRecord::new("b", "b", "/", "claude")))
            .unwrap();
        let partly = || store.read(|c| partly_written(c, "b")).unwrap();
        assert!(!partly(), "nothing written");
        let at = SystemTime::UNIX_EPOCH;
        store.tx(|tx| record(tx, "b", "t1", "s1", at)).unwrap();
        assert!(partly());
        store.tx(|tx| written_whole(tx, "b")).unwrap();
        assert!(!partly());
        store.tx(|tx| record(tx, "b", "t1", "s1", at)).unwrap();
        assert!(
            partly(),
            "a message written again is partly written until whole again"
        );
    }
}
