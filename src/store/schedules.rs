//! The `schedules` and `schedule_fires` tables (issue 49): the truth about each scheduled prompt,
//! from which the timer units are written, and the claims that make each fire happen once.

use rusqlite::{Connection, OptionalExtension, params};

use crate::schedule::{Conversation, Schedule, WhenBusy};
use crate::time::now_rfc3339;

/// How many fires of a schedule are kept (the newest, by due time).
pub const FIRES_KEPT: i64 = 50;

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Schedule> {
    let when_busy: String = r.get(4)?;
    Ok(Schedule {
        id: r.get(0)?,
        bot_id: r.get(1)?,
        calendar: r.get(2)?,
        prompt: r.get(3)?,
        when_busy: WhenBusy::parse(&when_busy).unwrap_or(WhenBusy::Queue),
        random_delay_s: r.get::<_, i64>(5)?.max(0) as u32,
        paused: r.get(6)?,
        last_due: r.get(7)?,
        last_fired_at: r.get(8)?,
        last_run_now: r.get(9)?,
        conversation: Conversation::parse(&r.get::<_, String>(10)?).unwrap_or(Conversation::Same),
        until: r.get(11)?,
    })
}

const COLUMNS: &str = "id, bot_id, calendar, prompt, when_busy, random_delay_s, paused, \
                       last_due, last_fired_at, last_run_now, conversation, until";

/// Adds `s` (its `last_due` and `last_fired_at` as given: 0 for a new schedule).
pub fn insert(conn: &Connection, s: &Schedule) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT INTO schedules (id, bot_id, calendar, prompt, when_busy, random_delay_s, paused,
                                last_due, last_fired_at, created_at, conversation, until)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
    )?
    .execute(params![
        s.id,
        s.bot_id,
        s.calendar,
        s.prompt,
        s.when_busy.as_str(),
        s.random_delay_s,
        s.paused,
        s.last_due,
        s.last_fired_at,
        now_rfc3339(),
        s.conversation.as_str(),
        s.until
    ])?;
    Ok(())
}

/// Writes what a client may change of `s` (calendar, prompt, `when_busy`, conversation, random
/// delay, paused, its end);
/// false when there is no such schedule.
pub fn update(conn: &Connection, s: &Schedule) -> rusqlite::Result<bool> {
    let n = conn
        .prepare_cached(
            "UPDATE schedules SET calendar = ?2, prompt = ?3, when_busy = ?4, random_delay_s = ?5,
                                  paused = ?6, conversation = ?7, until = ?8
             WHERE id = ?1",
        )?
        .execute(params![
            s.id,
            s.calendar,
            s.prompt,
            s.when_busy.as_str(),
            s.random_delay_s,
            s.paused,
            s.conversation.as_str(),
            s.until
        ])?;
    Ok(n == 1)
}

/// What became of the latest fire of schedule `id` (`schedule_fires.outcome`), if any.
pub fn last_outcome(conn: &Connection, id: &str) -> rusqlite::Result<Option<String>> {
    conn.prepare_cached(
        "SELECT outcome FROM schedule_fires WHERE schedule_id = ?1 ORDER BY due DESC LIMIT 1",
    )?
    .query_row([id], |r| r.get(0))
    .optional()
}

/// Moves the schedule `id`'s last due time claimed to `due` (Unix seconds) when it is earlier:
/// no fire claims a due time up to `due` (a schedule resumed fires nothing it missed while
/// paused).
pub fn skip_to(conn: &Connection, id: &str, due: i64) -> rusqlite::Result<()> {
    conn.prepare_cached("UPDATE schedules SET last_due = MAX(last_due, ?2) WHERE id = ?1")?
        .execute(params![id, due])?;
    Ok(())
}

/// Deletes the schedule `id` and its fires; false when there was none.
pub fn delete(conn: &Connection, id: &str) -> rusqlite::Result<bool> {
    let n = conn
        .prepare_cached("DELETE FROM schedules WHERE id = ?1")?
        .execute([id])?;
    Ok(n == 1)
}

/// Deletes every schedule of bot `bot_id` (with its fires); how many.
pub fn delete_of_bot(conn: &Connection, bot_id: &str) -> rusqlite::Result<usize> {
    conn.prepare_cached("DELETE FROM schedules WHERE bot_id = ?1")?
        .execute([bot_id])
}

/// The schedule `id`, if there is one.
pub fn get(conn: &Connection, id: &str) -> rusqlite::Result<Option<Schedule>> {
    conn.prepare_cached(&format!("SELECT {COLUMNS} FROM schedules WHERE id = ?1"))?
        .query_row([id], row)
        .optional()
}

/// Every schedule, in the order they were created.
pub fn all(conn: &Connection) -> rusqlite::Result<Vec<Schedule>> {
    conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM schedules ORDER BY created_at, id"
    ))?
    .query_map([], row)?
    .collect()
}

/// The turn an earlier fire of schedule `id` queued that has not gone yet (`turns.status`
/// `queued`: waiting behind a turn, a usage limit or a login, or written and not yet replayed),
/// the newest; `None` when none waits.
pub fn waiting_turn(conn: &Connection, id: &str) -> rusqlite::Result<Option<String>> {
    conn.prepare_cached(
        "SELECT f.turn_id FROM schedule_fires f JOIN turns t ON t.id = f.turn_id
         WHERE f.schedule_id = ?1 AND t.status = 'queued' ORDER BY f.due DESC LIMIT 1",
    )?
    .query_row([id], |r| r.get(0))
    .optional()
}

/// A fire as [`claim`] records it: the schedule, the due time claimed (Unix seconds), when
/// (Unix seconds), whether a `run-now` made it, what became of it and the turn it queued.
#[derive(Debug, Clone, Copy)]
pub struct Claimed<'a> {
    /// The schedule's id.
    pub id: &'a str,
    /// The due time claimed.
    pub due: i64,
    /// When the claim is made.
    pub now: i64,
    /// Whether a `run-now` makes it.
    pub run_now: bool,
    /// `queued`, `skipped: …`, `failed: …`, `coalesced: …`, `still waiting: …`.
    pub outcome: &'a str,
    /// The turn it queued, if it did.
    pub turn_id: Option<&'a str>,
}

/// Claims `c`: moves the schedule's `last_due` to `c.due` and records the fire, only when
/// `c.due` is after the last fire claimed. False, and nothing written, when it is not (another
/// fire of the same due time, or of a later one, was claimed first). Call it inside the
/// transaction that does what the fire does, so that both are done once or not at all.
pub fn claim(conn: &Connection, c: Claimed<'_>) -> rusqlite::Result<bool> {
    let Claimed {
        id,
        due,
        now,
        run_now,
        outcome,
        turn_id,
    } = c;
    let moved = conn
        .prepare_cached(
            "UPDATE schedules SET last_due = ?2, last_fired_at = ?3, last_run_now = ?4
             WHERE id = ?1 AND last_due < ?2",
        )?
        .execute(params![id, due, now, run_now])?;
    if moved == 0 {
        return Ok(false);
    }
    conn.prepare_cached(
        "INSERT OR REPLACE INTO schedule_fires (schedule_id, due, fired_at, outcome, turn_id)
         VALUES (?1, ?2, ?3, ?4, ?5)",
    )?
    .execute(params![id, due, now, outcome, turn_id])?;
    conn.prepare_cached(
        "DELETE FROM schedule_fires WHERE schedule_id = ?1 AND due NOT IN
           (SELECT due FROM schedule_fires WHERE schedule_id = ?1 ORDER BY due DESC LIMIT ?2)",
    )?
    .execute(params![id, FIRES_KEPT])?;
    Ok(true)
}

/// One fire as kept: due time and when it was claimed (Unix seconds), its outcome
/// (`queued`, `skipped: …`, `failed: …`) and the turn it queued.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fire {
    /// When it was due, in Unix seconds.
    pub due: i64,
    /// When it was claimed, in Unix seconds.
    pub fired_at: i64,
    /// What became of it.
    pub outcome: String,
    /// The turn it queued, if it did.
    pub turn_id: Option<String>,
}

/// The fires kept of schedule `id`, newest first.
pub fn fires(conn: &Connection, id: &str) -> rusqlite::Result<Vec<Fire>> {
    conn.prepare_cached(
        "SELECT due, fired_at, outcome, turn_id FROM schedule_fires WHERE schedule_id = ?1
         ORDER BY due DESC",
    )?
    .query_map([id], |r| {
        Ok(Fire {
            due: r.get(0)?,
            fired_at: r.get(1)?,
            outcome: r.get(2)?,
            turn_id: r.get(3)?,
        })
    })?
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;

    fn with_bot() -> Store {
        let store = Store::open_in_memory().unwrap();
        store
            .tx(|tx| {
                tx.execute(
                    "INSERT INTO bots (id, name, cwd, runtime, created_at)
                     VALUES ('b', 'demo', '/tmp', 'claude', '')",
                    [],
                )
                .map(|_| ())
            })
            .unwrap();
        store
    }

    fn schedule() -> Schedule {
        Schedule {
            id: "s".into(),
            bot_id: "b".into(),
            calendar: "*-*-* 09:00:00".into(),
            prompt: "check".into(),
            when_busy: WhenBusy::Queue,
            conversation: crate::schedule::Conversation::Same,
            until: 0,
            random_delay_s: 0,
            paused: false,
            last_due: 0,
            last_fired_at: 0,
            last_run_now: false,
        }
    }

    fn claimed(due: i64, now: i64) -> Claimed<'static> {
        Claimed {
            id: "s",
            due,
            now,
            run_now: false,
            outcome: "queued",
            turn_id: Some("t"),
        }
    }

    /// A due time is claimed once: a second claim of it, or of an earlier one, writes nothing.
    #[test]
    fn a_due_time_is_claimed_once() {
        let store = with_bot();
        store.tx(|tx| insert(tx, &schedule())).unwrap();
        let claim_at = |due: i64| store.tx(|tx| claim(tx, claimed(due, due + 1))).unwrap();
        assert!(claim_at(100));
        assert!(!claim_at(100));
        assert!(!claim_at(90));
        assert!(claim_at(110));
        let kept = store.read(|c| fires(c, "s")).unwrap();
        assert_eq!(
            kept.iter().map(|f| f.due).collect::<Vec<_>>(),
            vec![110, 100]
        );
        let s = store.read(|c| get(c, "s")).unwrap().unwrap();
        assert_eq!((s.last_due, s.last_fired_at), (110, 111));
    }

    /// Only the newest [`FIRES_KEPT`] fires stay; the schedule and its fires go with the bot.
    #[test]
    fn fires_are_bounded_and_go_with_the_bot() {
        let store = with_bot();
        store.tx(|tx| insert(tx, &schedule())).unwrap();
        for due in 1..=(FIRES_KEPT + 5) {
            store.tx(|tx| claim(tx, claimed(due, due))).unwrap();
        }
        let kept = store.read(|c| fires(c, "s")).unwrap();
        assert_eq!(kept.len() as i64, FIRES_KEPT);
        assert_eq!(kept[0].due, FIRES_KEPT + 5);
        store
            .tx(|tx| {
                tx.execute("DELETE FROM bots WHERE id = 'b'", [])
                    .map(|_| ())
            })
            .unwrap();
        assert!(store.read(all).unwrap().is_empty());
        assert!(store.read(|c| fires(c, "s")).unwrap().is_empty());
    }
}
