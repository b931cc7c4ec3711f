//! The `processes` table: the identities of every live agent process and known descendant, so
//! that a daemon restarted after a crash can stop what its previous run left (design rule 9).

use rusqlite::{Connection, params};

use crate::process::ProcessIdentity;

/// A recorded process.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcessRecord {
    /// Its bot.
    pub bot_id: String,
    /// Its identity.
    pub identity: ProcessIdentity,
    /// `root` (the CLI) or `descendant`.
    pub role: String,
}

/// Records a process (again: no change).
pub fn insert(
    conn: &Connection,
    bot_id: &str,
    id: &ProcessIdentity,
    role: &str,
) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT OR IGNORE INTO processes (bot_id, pid, start_time, boot_id, role)
         VALUES (?1, ?2, ?3, ?4, ?5)",
    )?
    .execute(params![
        bot_id,
        id.pid,
        id.start_time as i64,
        id.boot_id,
        role
    ])?;
    Ok(())
}

/// Forgets every process of a bot.
pub fn clear(conn: &Connection, bot_id: &str) -> rusqlite::Result<()> {
    conn.prepare_cached("DELETE FROM processes WHERE bot_id = ?1")?
        .execute([bot_id])?;
    Ok(())
}

/// Every recorded process.
pub fn all(conn: &Connection) -> rusqlite::Result<Vec<ProcessRecord>> {
    let mut st = conn.prepare(
        "SELECT bot_id, pid, start_time, boot_id, role FROM processes ORDER BY bot_id, role DESC",
    )?;
    st.query_map([], |r| {
        Ok(ProcessRecord {
            bot_id: r.get(0)?,
            identity: ProcessIdentity {
                pid: r.get(1)?,
                start_time: r.get::<_, i64>(2)? as u64,
                boot_id: r.get(3)?,
            },
            role: r.get(4)?,
        })
    })?
    .collect()
}
