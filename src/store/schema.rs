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
    // 4: a message is stored once: a turn points at its `user` chat item instead of holding a
    //    copy of the text. A payload too big to serve whole is kept whole in `chat_wholes` (a
    //    rowid table: ranges of it are read without loading the rest), `chat_items` holding its
    //    preview; the Rust step `chat::move_big_payloads` moves what older versions stored.
    r#"
    CREATE TABLE chat_wholes (
        bot_id  TEXT NOT NULL,
        seq     INTEGER NOT NULL,
        payload TEXT NOT NULL,
        UNIQUE (bot_id, seq),
        FOREIGN KEY (bot_id, seq) REFERENCES chat_items (bot_id, seq) ON DELETE CASCADE
    );
    ALTER TABLE turns ADD COLUMN chat_seq INTEGER;
    UPDATE turns SET chat_seq = u.seq
    FROM (SELECT bot_id, turn_id, MIN(seq) AS seq FROM chat_items
          WHERE kind = 'user' AND turn_id IS NOT NULL GROUP BY bot_id, turn_id) AS u
    WHERE u.bot_id = turns.bot_id AND u.turn_id = turns.id;
    -- A turn without its user item (botvisor never wrote one, but a text is never dropped):
    -- the item is added at the end of its bot's chat.
    INSERT INTO chat_items (bot_id, seq, kind, time, turn_id, payload)
    SELECT t.bot_id,
           (SELECT COALESCE(MAX(c.seq), 0) FROM chat_items c WHERE c.bot_id = t.bot_id)
             + ROW_NUMBER() OVER (PARTITION BY t.bot_id ORDER BY t.pos),
           'user', t.created_at, t.id, json_object('text', t.text, 'turn_id', t.id)
    FROM turns t WHERE t.chat_seq IS NULL;
    UPDATE turns SET chat_seq = u.seq
    FROM (SELECT bot_id, turn_id, MIN(seq) AS seq FROM chat_items
          WHERE kind = 'user' AND turn_id IS NOT NULL GROUP BY bot_id, turn_id) AS u
    WHERE u.bot_id = turns.bot_id AND u.turn_id = turns.id AND turns.chat_seq IS NULL;
    ALTER TABLE turns DROP COLUMN text;
    "#,
    // 5: which conversation a queued message was written to, and when (design rule 8 across a
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
    // 6: a bot's own memory limit in bytes (issue 15); NULL takes the daemon's default.
    r#"
    ALTER TABLE bots ADD COLUMN memory_max INTEGER;
    "#,
    // 7: a Delete is durable once answered: the bot is marked, and a daemon that crashed before
    // its actor deleted it stops what is left and deletes it at the next start.
    r#"
    ALTER TABLE bots ADD COLUMN deleting INTEGER NOT NULL DEFAULT 0;
    "#,
    // 8: a plan's usage limit the bot waits for (issue 24): held while `limited` is 1, with the
    // window's kind and its reset in Unix seconds (0: not known).
    r#"
    ALTER TABLE bots ADD COLUMN limited INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE bots ADD COLUMN limit_kind TEXT NOT NULL DEFAULT '';
    ALTER TABLE bots ADD COLUMN limit_resets_at INTEGER NOT NULL DEFAULT 0;
    "#,
    // 9: what a bot costs (issue 24): nano-dollars and tokens summed since its creation, the
    // last conversation total the CLI told (so a restart does not count it again), and the
    // bot's budget in nano-dollars (NULL: the daemon's `budget_usd`, if any).
    r#"
    ALTER TABLE bots ADD COLUMN cost_nanos INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE bots ADD COLUMN input_tokens INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE bots ADD COLUMN output_tokens INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE bots ADD COLUMN cost_session TEXT NOT NULL DEFAULT '';
    ALTER TABLE bots ADD COLUMN cost_session_nanos INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE bots ADD COLUMN budget_nanos INTEGER;
    "#,
    // 10: a turn a usage limit cut, continued at the reset (`continue_after_limit`): the text
    // that goes instead of its message; and the bot's own choice (NULL: the daemon's).
    r#"
    ALTER TABLE turns ADD COLUMN resend_text TEXT;
    ALTER TABLE bots ADD COLUMN continue_after_limit INTEGER;
    "#,
    // 11: a message the conversation took and never answered is asked again (issue 25): how
    // many times it was (`redos`), and where the next resume cuts the conversation to drop the
    // unanswered attempt (`redo_cut`, a `runtime::Cut` as JSON; NULL once the attempt is gone).
    r#"
    ALTER TABLE turns ADD COLUMN redos INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE turns ADD COLUMN redo_cut TEXT;
    "#,
    // 12: a bot in a git worktree botvisor made (issue 28): the repository's main worktree, the
    // branch and the commit it started at (NULL: no worktree; the worktree is the bot's `cwd`).
    r#"
    ALTER TABLE bots ADD COLUMN worktree_repo TEXT;
    ALTER TABLE bots ADD COLUMN worktree_branch TEXT;
    ALTER TABLE bots ADD COLUMN worktree_base TEXT;
    "#,
    // 13: who created a bot (issue 29): the client's name it gave (`created_by`), the bot whose
    // agent made the call (its marker, read by botvisord), and how deep that chain of bots is.
    r#"
    ALTER TABLE bots ADD COLUMN created_by_client TEXT NOT NULL DEFAULT '';
    ALTER TABLE bots ADD COLUMN created_by_bot TEXT NOT NULL DEFAULT '';
    ALTER TABLE bots ADD COLUMN agent_depth INTEGER NOT NULL DEFAULT 0;
    "#,
    // 14: a failed attempt the bot's conversation holds (issue 45): a message the model never
    // answered (a usage limit, an expired login, an API error), which the next start resumes
    // without (`attempt_cut`, a `runtime::Cut` as JSON; NULL: none).
    r#"
    ALTER TABLE bots ADD COLUMN attempt_cut TEXT;
    "#,
    // 15: the spend ledger (issue 46): what each bot spent, one row per bot and UTC day, added
    // to in the transaction that adds a turn's spend to the bot's, and never deleted with the
    // bot (no foreign key): `name` and `runtime` are the bot's at the day's last spend,
    // `cost_told` whether the CLI told a cost for any of its turns (Codex tells tokens only),
    // `pos` the order rows began in, which pages by offset never shift. What bots spent before
    // this version is put on the day each was created.
    r#"
    CREATE TABLE spend_days (
        pos           INTEGER PRIMARY KEY AUTOINCREMENT,
        bot_id        TEXT NOT NULL,
        day           TEXT NOT NULL,
        name          TEXT NOT NULL,
        runtime       TEXT NOT NULL,
        cost_nanos    INTEGER NOT NULL DEFAULT 0,
        cost_told     INTEGER NOT NULL DEFAULT 0,
        input_tokens  INTEGER NOT NULL DEFAULT 0,
        output_tokens INTEGER NOT NULL DEFAULT 0,
        UNIQUE (bot_id, day)
    );
    INSERT INTO spend_days (bot_id, day, name, runtime, cost_nanos, cost_told, input_tokens,
                            output_tokens)
    SELECT id, COALESCE(date(created_at), date('now')), name, runtime, cost_nanos,
           cost_nanos > 0 OR cost_session != '', input_tokens, output_tokens
    FROM bots
    WHERE cost_nanos > 0 OR input_tokens > 0 OR output_tokens > 0 OR cost_session != ''
    ORDER BY created_at, id;
    "#,
    // 16: an agent handed over to the next botvisord (issue 47): its root process by identity,
    // the invocation that handed it over, its protocol's and its process's state (JSON), and
    // what was read of its stdout and not handled; taken (deleted) by the botvisord that takes
    // the agent over, or finds it gone.
    r#"
    CREATE TABLE handovers (
        bot_id      TEXT PRIMARY KEY REFERENCES bots(id) ON DELETE CASCADE,
        pid         INTEGER NOT NULL,
        start_time  INTEGER NOT NULL,
        boot_id     TEXT NOT NULL,
        invocation  TEXT NOT NULL,
        state       TEXT NOT NULL,
        leftover    BLOB NOT NULL
    );
    "#,
    // 17: whether a message's line reached the agent's stdin whole (issue 47): a botvisord
    // killed while it wrote a big message leaves part of the line in the pipe, and the agent,
    // which waits for the rest, cannot be taken over. Rows from before were written whole.
    r#"
    ALTER TABLE deliveries ADD COLUMN whole INTEGER NOT NULL DEFAULT 1;
    "#,
    // 18: scheduled prompts (issue 49): a bot's schedule, a calendar expression in systemd's
    // normalized form, the prompt, what a fire into a busy bot does (`when_busy`), the timer's
    // random delay, whether it is paused; `last_due` (Unix seconds) is the due time of the last
    // fire claimed (a fire claims a due time after it, in one transaction, or none: exactly
    // once), `last_fired_at` when that claim was made, `last_run_now` whether a run-now made it
    // (a timer's due time within seconds of one is taken by it). `schedule_fires` keeps the latest fires
    // of each schedule, by due time: what became of each.
    r#"
    CREATE TABLE schedules (
        id             TEXT PRIMARY KEY,
        bot_id         TEXT NOT NULL REFERENCES bots(id) ON DELETE CASCADE,
        calendar       TEXT NOT NULL,
        prompt         TEXT NOT NULL,
        when_busy      TEXT NOT NULL DEFAULT 'queue' CHECK (when_busy IN ('queue', 'skip')),
        random_delay_s INTEGER NOT NULL DEFAULT 0,
        paused         INTEGER NOT NULL DEFAULT 0,
        last_due       INTEGER NOT NULL DEFAULT 0,
        last_fired_at  INTEGER NOT NULL DEFAULT 0,
        last_run_now   INTEGER NOT NULL DEFAULT 0,
        created_at     TEXT NOT NULL
    );
    CREATE INDEX schedules_of_bot ON schedules (bot_id);
    CREATE TABLE schedule_fires (
        schedule_id TEXT NOT NULL REFERENCES schedules(id) ON DELETE CASCADE,
        due         INTEGER NOT NULL,
        fired_at    INTEGER NOT NULL,
        outcome     TEXT NOT NULL,
        turn_id     TEXT,
        PRIMARY KEY (schedule_id, due)
    ) WITHOUT ROWID;
    "#,
    // 19: which conversation a schedule's fires go to (issue 49): the bot's own (`same`) or a
    // new one each time (`fresh`).
    r#"
    ALTER TABLE schedules ADD COLUMN conversation TEXT NOT NULL DEFAULT 'same'
        CHECK (conversation IN ('same', 'fresh'));
    "#,
    // 20: when a schedule ends (issue 49), in Unix seconds; 0: never.
    r#"
    ALTER TABLE schedules ADD COLUMN until INTEGER NOT NULL DEFAULT 0;
    "#,
];

/// Work in Rust that a migration does after its SQL, in the same transaction: the schema version
/// the migration brings the database to, and the step.
type Step = fn(&rusqlite::Connection) -> rusqlite::Result<()>;

/// The Rust steps, by the version their migration brings the database to.
const STEPS: &[(usize, Step)] = &[(4, super::chat::move_big_payloads)];

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
        for (_, step) in STEPS.iter().filter(|(v, _)| *v == i + 1) {
            step(&tx)?;
        }
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

    /// A database as version 5 left it: its bots keep everything and have no limit of their own;
    /// a limit is stored and read back.
    #[test]
    fn version_6_stores_a_memory_limit_per_bot() {
        use crate::store::{BotRecord, bots};
        let mut conn = Connection::open_in_memory().unwrap();
        for sql in &MIGRATIONS[..5] {
            conn.execute_batch(sql).unwrap();
        }
        conn.pragma_update(None, "user_version", 5).unwrap();
        conn.execute_batch(
            "INSERT INTO bots (id, name, cwd, runtime, created_at) VALUES ('a', 'a', '/', 'claude', 'x');",
        )
        .unwrap();
        migrate(&mut conn).unwrap();
        let old = bots::load(&conn, "a").unwrap().unwrap();
        assert_eq!((old.name.as_str(), old.memory_max), ("a", None));
        let limited = BotRecord {
            memory_max: Some(512 << 20),
            ..BotRecord::new("b", "b", "/", "claude")
        };
        bots::insert(&conn, &limited).unwrap();
        assert_eq!(
            bots::load(&conn, "b").unwrap().unwrap().memory_max,
            Some(512 << 20)
        );
    }

    #[test]
    fn version_8_keeps_the_usage_limit_a_bot_waits_for() {
        use crate::store::{BotRecord, bots};
        let mut conn = Connection::open_in_memory().unwrap();
        for sql in &MIGRATIONS[..7] {
            conn.execute_batch(sql).unwrap();
        }
        conn.pragma_update(None, "user_version", 7).unwrap();
        conn.execute_batch(
            "INSERT INTO bots (id, name, cwd, runtime, created_at) VALUES ('a', 'a', '/', 'claude', 'x');",
        )
        .unwrap();
        migrate(&mut conn).unwrap();
        assert_eq!(bots::load(&conn, "a").unwrap().unwrap().limit, None);
        bots::insert(&conn, &BotRecord::new("b", "b", "/", "claude")).unwrap();
        bots::set_limit(&conn, "b", Some(("five_hour", 1_796_200_214))).unwrap();
        assert_eq!(
            bots::load(&conn, "b").unwrap().unwrap().limit,
            Some(("five_hour".to_owned(), 1_796_200_214))
        );
        bots::set_limit(&conn, "b", None).unwrap();
        assert_eq!(bots::load(&conn, "b").unwrap().unwrap().limit, None);
    }

    #[test]
    fn version_10_sends_a_continued_turn_as_its_request_to_continue() {
        use crate::store::{BotRecord, bots, chat, turns};
        let mut conn = Connection::open_in_memory().unwrap();
        migrate(&mut conn).unwrap();
        let b = BotRecord {
            continue_after_limit: Some(true),
            ..BotRecord::new("b", "b", "/", "claude")
        };
        bots::insert(&conn, &b).unwrap();
        assert_eq!(
            bots::load(&conn, "b")
                .unwrap()
                .unwrap()
                .continue_after_limit,
            Some(true)
        );
        let item = chat::append(&conn, "b", "user", Some("t"), r#"{"text":"do it"}"#).unwrap();
        turns::insert(&conn, "b", "t", item.seq).unwrap();
        turns::set_running(&conn, "t").unwrap();
        turns::requeue_to_continue(&conn, "t", "go on").unwrap();
        let queued = turns::queued(&conn, "b").unwrap();
        assert_eq!(
            (queued[0].id.as_str(), queued[0].text.as_str()),
            ("t", "go on")
        );
    }

    #[test]
    fn version_9_sums_what_a_bot_costs_and_keeps_its_budget() {
        use crate::cost::Spend;
        use crate::store::{BotRecord, bots};
        let mut conn = Connection::open_in_memory().unwrap();
        for sql in &MIGRATIONS[..8] {
            conn.execute_batch(sql).unwrap();
        }
        conn.pragma_update(None, "user_version", 8).unwrap();
        conn.execute_batch(
            "INSERT INTO bots (id, name, cwd, runtime, created_at) VALUES ('a', 'a', '/', 'claude', 'x');",
        )
        .unwrap();
        migrate(&mut conn).unwrap();
        let a = bots::load(&conn, "a").unwrap().unwrap();
        assert_eq!(
            (a.spend, a.conversation_cost, a.budget),
            (Spend::default(), None, None)
        );
        let b = BotRecord {
            budget: Some(5_000_000_000),
            ..BotRecord::new("b", "b", "/", "claude")
        };
        bots::insert(&conn, &b).unwrap();
        let turn = Spend {
            cost_nanos: 188_000,
            input_tokens: 12,
            output_tokens: 7,
        };
        bots::add_spend(&conn, "b", &turn, Some(("s", 188_000))).unwrap();
        bots::add_spend(&conn, "b", &turn, None).unwrap();
        let b = bots::load(&conn, "b").unwrap().unwrap();
        assert_eq!(b.spend, turn.plus(turn));
        assert_eq!(b.conversation_cost, Some(("s".to_owned(), 188_000)));
        assert_eq!(b.budget, Some(5_000_000_000));
        bots::set_budget(&conn, "b", Some(0)).unwrap();
        assert_eq!(bots::load(&conn, "b").unwrap().unwrap().budget, Some(0));
    }

    /// A database as version 14 left it: what its bots spent so far goes to the ledger on the
    /// day each was created (a bot that spent nothing has no row; a bot whose CLI told tokens
    /// and no cost, Codex, has its cost not told), and later spend is added by day.
    #[test]
    fn version_15_puts_what_bots_spent_before_in_the_ledger() {
        use crate::cost::Spend;
        use crate::store::{bots, spend};
        let mut conn = Connection::open_in_memory().unwrap();
        for sql in &MIGRATIONS[..14] {
            conn.execute_batch(sql).unwrap();
        }
        conn.pragma_update(None, "user_version", 14).unwrap();
        conn.execute_batch(
            "INSERT INTO bots (id, name, cwd, runtime, created_at, cost_nanos, input_tokens,
                               output_tokens, cost_session, cost_session_nanos)
             VALUES ('c', 'claude-bot', '/', 'claude', '2026-03-04T23:59:59.999Z', 250, 20, 5,
                     's', 250),
                    ('x', 'codex-bot', '/', 'codex', '2026-03-05T00:00:00.000Z', 0, 9, 4, '', 0),
                    ('z', 'idle-bot', '/', 'claude', '2026-03-06T10:00:00.000Z', 0, 0, 0, '', 0);",
        )
        .unwrap();
        migrate(&mut conn).unwrap();
        let spent = |cost_nanos, input_tokens, output_tokens| Spend {
            cost_nanos,
            input_tokens,
            output_tokens,
        };
        let rows = spend::since(&conn, None, 0, 100, usize::MAX).unwrap();
        let shown: Vec<_> = rows
            .iter()
            .map(|r| (r.bot_id.as_str(), r.day.as_str(), r.spend, r.cost_told))
            .collect();
        assert_eq!(
            shown,
            [
                ("c", "2026-03-04", spent(250, 20, 5), true),
                ("x", "2026-03-05", spent(0, 9, 4), false),
            ]
        );
        spend::add(&conn, "c", "2026-05-01", &spent(1, 1, 1), true).unwrap();
        bots::delete(&conn, "c").unwrap();
        assert_eq!(
            spend::since(&conn, Some("2026-05-01"), 0, 100, usize::MAX)
                .unwrap()
                .len(),
            1
        );
    }

    /// A database as version 3 left it: each message twice (the turn's text and its user item),
    /// and payloads of any size in `chat_items`.
    #[test]
    fn version_4_stores_each_message_once_and_moves_big_payloads_apart() {
        use crate::store::{chat, turns};
        let mut conn = Connection::open_in_memory().unwrap();
        conn.pragma_update(None, "foreign_keys", "ON").unwrap();
        for sql in &MIGRATIONS[..3] {
            conn.execute_batch(sql).unwrap();
        }
        conn.pragma_update(None, "user_version", 3).unwrap();
        let big_text = "€".repeat(2 << 20);
        let big_user = serde_json::json!({"text": big_text, "turn_id": "t2"}).to_string();
        conn.execute_batch(&format!(
            r#"
            INSERT INTO bots (id, name, cwd, runtime, created_at) VALUES ('b', 'b', '/', 'claude', 'x');
            INSERT INTO chat_items VALUES ('b', 1, 'user', 'x', 't1', '{{"text":"one","turn_id":"t1"}}');
            INSERT INTO chat_items VALUES ('b', 2, 'assistant', 'x', 't1', '{{"text":"reply"}}');
            INSERT INTO chat_items VALUES ('b', 3, 'user', 'x', 't2', '{big_user}');
            INSERT INTO turns (id, bot_id, text, status, outcome, created_at)
                VALUES ('t1', 'b', 'one', 'finished', 'success', 'x');
            INSERT INTO turns (id, bot_id, text, status, created_at)
                VALUES ('t2', 'b', '{big_text}', 'queued', 'x');
            INSERT INTO turns (id, bot_id, text, status, created_at)
                VALUES ('t3', 'b', 'orphan "quoted"', 'queued', 'x');
            "#
        ))
        .unwrap();
        migrate(&mut conn).unwrap();

        let columns: Vec<String> = conn
            .prepare("SELECT name FROM pragma_table_info('turns')")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert!(!columns.contains(&"text".to_owned()), "{columns:?}");
        let seqs: Vec<(String, i64)> = conn
            .prepare("SELECT id, chat_seq FROM turns ORDER BY pos")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(
            seqs,
            [("t1".into(), 1), ("t2".into(), 3), ("t3".into(), 4)],
            "the turn without a user item got one at the end"
        );
        let queued = turns::queued(&conn, "b").unwrap();
        assert_eq!(
            queued
                .iter()
                .map(|q| (q.id.as_str(), q.text.as_str()))
                .collect::<Vec<_>>(),
            [("t2", big_text.as_str()), ("t3", "orphan \"quoted\"")]
        );
        let page = chat::after(&conn, "b", 0, 10, usize::MAX).unwrap();
        assert_eq!(page.len(), 4);
        let p: serde_json::Value = serde_json::from_str(&page[2].payload).unwrap();
        assert!(crate::preview::is_preview(&p), "{p}");
        assert_eq!(p["turn_id"], "t2");
        let (bytes, size) = chat::read(&conn, "b", 3, 0, usize::MAX).unwrap().unwrap();
        assert_eq!(size, big_user.len() as u64);
        assert_eq!(bytes, big_user.as_bytes());
        assert_eq!(page[3].turn_id.as_deref(), Some("t3"));
    }
}
