//! The schema and its migrations, versioned by `PRAGMA user_version`.
//!
//! Each entry of [`MIGRATIONS`] takes the database from version `i` to `i + 1`, in one
//! transaction with the version bump.

use rusqlite::Connection;

use super::StoreError;

/// The migrations, in order. Never edit a released one: add a new one.
pub const MIGRATIONS: &[&str] = &[
    // 1: bots, chat items, turns.
    r#"
    CREATE TABLE bots (
        id              TEXT PRIMARY KEY,
        name            TEXT NOT NULL,
        cwd             TEXT NOT NULL,
        runtime         TEXT NOT NULL,
        model           TEXT NOT NULL DEFAULT '',
        permission_mode TEXT NOT NULL DEFAULT '',
        env             TEXT NOT NULL DEFAULT '{}',
        idle_timeout_s  INTEGER,
        session_id      TEXT,
        last_error      TEXT NOT NULL DEFAULT '',
        created_at      TEXT NOT NULL
    );
    CREATE TABLE chat_items (
        bot_id  TEXT NOT NULL REFERENCES bots(id) ON DELETE CASCADE,
        seq     INTEGER NOT NULL,
        kind    TEXT NOT NULL,
        time    TEXT NOT NULL,
        turn_id TEXT,
        payload TEXT NOT NULL,
        PRIMARY KEY (bot_id, seq)
    ) WITHOUT ROWID;
    CREATE TABLE turns (
        pos        INTEGER PRIMARY KEY AUTOINCREMENT,
        id         TEXT NOT NULL UNIQUE,
        bot_id     TEXT NOT NULL REFERENCES bots(id) ON DELETE CASCADE,
        text       TEXT NOT NULL,
        status     TEXT NOT NULL CHECK (status IN ('queued', 'running', 'finished')),
        outcome    TEXT,
        created_at TEXT NOT NULL
    );
    CREATE INDEX turns_open ON turns (bot_id, status) WHERE status != 'finished';
    "#,
    // 2: identities of live agent processes and their known descendants.
    r#"
    CREATE TABLE processes (
        bot_id     TEXT NOT NULL REFERENCES bots(id) ON DELETE CASCADE,
        pid        INTEGER NOT NULL,
        start_time INTEGER NOT NULL,
        boot_id    TEXT NOT NULL,
        role       TEXT NOT NULL CHECK (role IN ('root', 'descendant')),
        PRIMARY KEY (bot_id, pid, start_time)
    ) WITHOUT ROWID;
    "#,
    // 3: the failed state, a client's Stop and the last stop verdict survive daemon restarts.
    r#"
    ALTER TABLE bots ADD COLUMN failed INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE bots ADD COLUMN stop_verdict TEXT NOT NULL DEFAULT '';
    ALTER TABLE bots ADD COLUMN parked INTEGER NOT NULL DEFAULT 0;
    "#,
    // 4: which conversation a queued message was written to, and when (design rule 8 across a
    // daemon crash: start-up recovery asks that conversation's transcript whether it holds it).
    r#"
    CREATE TABLE deliveries (
        bot_id     TEXT NOT NULL REFERENCES bots(id) ON DELETE CASCADE,
        turn_id    TEXT NOT NULL,
        session_id TEXT NOT NULL,
        written_at TEXT NOT NULL,
        PRIMARY KEY (bot_id, turn_id)
    ) WITHOUT ROWID;
    "#,
];

/// Brings the schema up to the newest version. A database from a newer botvisor is refused.
pub fn migrate(conn: &mut Connection) -> Result<(), StoreError> {
    let known = MIGRATIONS.len() as i64;
    let found: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    if found > known {
        return Err(StoreError::TooNew { found, known });
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(found as usize) {
        let tx = conn.transaction()?;
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", (i + 1) as i64)?;
        tx.commit()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrates_once_and_refuses_newer() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let mut conn = Connection::open(&path).unwrap();
        migrate(&mut conn).unwrap();
        migrate(&mut conn).unwrap();
        let v: i64 = conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .unwrap();
        assert_eq!(v, MIGRATIONS.len() as i64);
        conn.pragma_update(None, "user_version", 99).unwrap();
        assert!(matches!(
            migrate(&mut conn),
            Err(StoreError::TooNew { found: 99, .. })
        ));
    }
}
