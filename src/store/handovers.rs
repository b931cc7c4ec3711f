//! The `handovers` table (issue 47): an agent a stopping botvisord left running for the next
//! one, with what that one needs to read on (`supervisor::bot::handover`).

use rusqlite::{Connection, OptionalExtension, params};

use crate::process::ProcessIdentity;

/// One agent handed over.
#[derive(Debug, Clone, PartialEq)]
pub struct Handover {
    /// Its root process, by identity.
    pub identity: ProcessIdentity,
    /// The invocation of the botvisord that handed it over.
    pub invocation: String,
    /// Its protocol's state and its process's, as JSON.
    pub state: serde_json::Value,
    /// What was read of its stdout and not handled.
    pub leftover: Vec<u8>,
}

/// Records bot `bot_id`'s agent as handed over (replacing an earlier record).
pub fn put(conn: &Connection, bot_id: &str, h: &Handover) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT OR REPLACE INTO handovers
           (bot_id, pid, start_time, boot_id, invocation, state, leftover)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?
    .execute(params![
        bot_id,
        h.identity.pid,
        h.identity.start_time as i64,
        h.identity.boot_id,
        h.invocation,
        h.state.to_string(),
        h.leftover,
    ])?;
    Ok(())
}

/// Bot `bot_id`'s handed-over agent, if one was recorded.
pub fn get(conn: &Connection, bot_id: &str) -> rusqlite::Result<Option<Handover>> {
    conn.query_row(
        "SELECT pid, start_time, boot_id, invocation, state, leftover FROM handovers
         WHERE bot_id = ?1",
        [bot_id],
        |r| {
            Ok(Handover {
                identity: ProcessIdentity {
                    pid: r.get(0)?,
                    start_time: r.get::<_, i64>(1)?.max(0) as u64,
                    boot_id: r.get(2)?,
                },
                invocation: r.get(3)?,
                state: serde_json::from_str(&r.get::<_, String>(4)?).unwrap_or_default(),
                leftover: r.get(5)?,
            })
        },
    )
    .optional()
}

/// Forgets bot `bot_id`'s handed-over agent (taken over, or gone).
pub fn take(conn: &Connection, bot_id: &str) -> rusqlite::Result<()> {
    conn.prepare_cached("DELETE FROM handovers WHERE bot_id = ?1")?
        .execute([bot_id])?;
    Ok(())
}
