//! The spend ledger (issue 46), table `spend_days`: what each bot spent, one row per bot and UTC
//! day, kept when the bot is deleted. A turn's spend is added to it in the transaction that adds
//! it to the bot's own sum ([`super::bots::add_spend`], through the actor's `Write::Spend`), so
//! the two never disagree about a turn.

use rusqlite::{Connection, params};

use crate::cost::Spend;

/// One bot's spend on one UTC day.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpendDay {
    /// The bot's id (32 hex digits); the bot may have been deleted since.
    pub bot_id: String,
    /// The bot's name at the day's last spend.
    pub name: String,
    /// The bot's runtime (`claude`, `codex`).
    pub runtime: String,
    /// The UTC day, `YYYY-MM-DD`.
    pub day: String,
    /// What the bot spent that day: nano-dollars and tokens, summed over its turns.
    pub spend: Spend,
    /// Whether the CLI told a cost for any of those turns. When it did not (Codex tells tokens
    /// only), `spend.cost_nanos` is 0 and means "not known", not "free".
    pub cost_told: bool,
}

impl SpendDay {
    /// About how many bytes the row takes in a D-Bus reply (`(ssssdtt)`): its strings with
    /// their lengths and NULs, three 8-byte numbers and the structure's padding. A reply is
    /// bounded by the sum ([`since`]).
    pub fn wire_bytes(&self) -> usize {
        self.bot_id.len()
            + self.name.len()
            + self.runtime.len()
            + self.day.len()
            + 4 * 5
            + 3 * 8
            + 8
    }
}

/// Adds a turn's `spend` to bot `bot_id`'s row of `day` (`YYYY-MM-DD`, UTC), making the row if
/// it is the bot's first spend that day, with the bot's name and runtime as its row in `bots`
/// has them now; `cost_told`: whether the CLI told the turn's cost. Nothing when the bot has no
/// row in `bots`. Sums stop at `i64::MAX`.
pub fn add(
    conn: &Connection,
    bot_id: &str,
    day: &str,
    spend: &Spend,
    cost_told: bool,
) -> rusqlite::Result<()> {
    let i = |v: u64| v.min(i64::MAX as u64) as i64;
    conn.prepare_cached(
        "INSERT INTO spend_days (bot_id, day, name, runtime, cost_nanos, cost_told, input_tokens,
                                 output_tokens)
         SELECT id, ?2, name, runtime, ?3, ?4, ?5, ?6 FROM bots WHERE id = ?1
         ON CONFLICT (bot_id, day) DO UPDATE SET
             name = excluded.name,
             runtime = excluded.runtime,
             cost_nanos = MIN(cost_nanos + excluded.cost_nanos, 9223372036854775807),
             cost_told = MAX(cost_told, excluded.cost_told),
             input_tokens = MIN(input_tokens + excluded.input_tokens, 9223372036854775807),
             output_tokens = MIN(output_tokens + excluded.output_tokens, 9223372036854775807)",
    )?
    .execute(params![
        bot_id,
        day,
        i(spend.cost_nanos),
        i64::from(cost_told),
        i(spend.input_tokens),
        i(spend.output_tokens)
    ])?;
    Ok(())
}

/// The ledger's rows of `since` (`YYYY-MM-DD`, inclusive; `None`: every day) and later, in the
/// order they began (by day, oldest first: a row begins with its bot's first spend that day),
/// from the `offset`th on: at most `limit` rows and at most `max_bytes` of them by
/// [`SpendDay::wire_bytes`], but always at least one when there is one. Rows are never deleted
/// and a new one comes after every other, so a client that pages with the number of rows it
/// received neither skips nor repeats one.
pub fn since(
    conn: &Connection,
    since: Option<&str>,
    offset: u64,
    limit: u32,
    max_bytes: usize,
) -> rusqlite::Result<Vec<SpendDay>> {
    let mut st = conn.prepare_cached(
        "SELECT bot_id, name, runtime, day, cost_nanos, cost_told, input_tokens, output_tokens
         FROM spend_days WHERE ?1 IS NULL OR day >= ?1
         ORDER BY pos LIMIT ?2 OFFSET ?3",
    )?;
    let rows = st.query_map(
        params![since, i64::from(limit), offset.min(i64::MAX as u64) as i64],
        |r| {
            let n = |i: usize| -> rusqlite::Result<u64> { Ok(r.get::<_, i64>(i)?.max(0) as u64) };
            Ok(SpendDay {
                bot_id: r.get(0)?,
                name: r.get(1)?,
                runtime: r.get(2)?,
                day: r.get(3)?,
                spend: Spend {
                    cost_nanos: n(4)?,
                    input_tokens: n(6)?,
                    output_tokens: n(7)?,
                },
                cost_told: r.get::<_, i64>(5)? != 0,
            })
        },
    )?;
    let mut out = Vec::new();
    let mut bytes = 0;
    for row in rows {
        let row = row?;
        bytes += row.wire_bytes();
        if bytes > max_bytes && !out.is_empty() {
            break;
        }
        out.push(row);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{BotRecord, bots, schema};

    fn db() -> Connection {
        let mut conn = Connection::open_in_memory().unwrap();
        schema::migrate(&mut conn).unwrap();
        conn
    }

    fn spent(cost_nanos: u64, input_tokens: u64, output_tokens: u64) -> Spend {
        Spend {
            cost_nanos,
            input_tokens,
            output_tokens,
        }
    }

    #[test]
    fn a_day_is_one_row_per_bot_that_adds_up_and_outlives_the_bot() {
        let conn = db();
        bots::insert(&conn, &BotRecord::new("a", "alpha", "/", "claude")).unwrap();
        bots::insert(&conn, &BotRecord::new("c", "gamma", "/", "codex")).unwrap();
        add(&conn, "a", "2026-05-01", &spent(100, 10, 1), true).unwrap();
        add(&conn, "c", "2026-05-01", &spent(0, 7, 3), false).unwrap();
        bots::set_name(&conn, "a", "renamed").unwrap();
        add(&conn, "a", "2026-05-01", &spent(50, 5, 2), true).unwrap();
        add(&conn, "a", "2026-05-02", &spent(1, 1, 1), true).unwrap();
        bots::delete(&conn, "a").unwrap();
        // A bot with no row (deleted before its last turn's write) adds nothing.
        add(&conn, "a", "2026-05-03", &spent(9, 9, 9), true).unwrap();
        let rows = since(&conn, None, 0, 100, usize::MAX).unwrap();
        let shown: Vec<_> = rows
            .iter()
            .map(|r| {
                (
                    r.bot_id.as_str(),
                    r.name.as_str(),
                    r.runtime.as_str(),
                    r.day.as_str(),
                    r.spend,
                    r.cost_told,
                )
            })
            .collect();
        assert_eq!(
            shown,
            [
                (
                    "a",
                    "renamed",
                    "claude",
                    "2026-05-01",
                    spent(150, 15, 3),
                    true
                ),
                ("c", "gamma", "codex", "2026-05-01", spent(0, 7, 3), false),
                ("a", "renamed", "claude", "2026-05-02", spent(1, 1, 1), true),
            ]
        );
    }

    #[test]
    fn since_takes_that_day_on_and_pages_by_rows_and_bytes() {
        let conn = db();
        for (id, day) in [
            ("a", "2026-04-30"),
            ("b", "2026-05-01"),
            ("c", "2026-05-02"),
        ] {
            bots::insert(&conn, &BotRecord::new(id, id, "/", "claude")).unwrap();
            add(&conn, id, day, &spent(1, 1, 1), true).unwrap();
        }
        let ids = |rows: Vec<SpendDay>| rows.into_iter().map(|r| r.bot_id).collect::<Vec<_>>();
        assert_eq!(
            ids(since(&conn, Some("2026-05-01"), 0, 100, usize::MAX).unwrap()),
            ["b", "c"]
        );
        assert_eq!(
            ids(since(&conn, Some("2026-05-03"), 0, 100, usize::MAX).unwrap()),
            Vec::<String>::new()
        );
        assert_eq!(ids(since(&conn, None, 1, 1, usize::MAX).unwrap()), ["b"]);
        // Over the byte budget: one row still comes, so paging progresses.
        assert_eq!(ids(since(&conn, None, 0, 100, 1).unwrap()), ["a"]);
        let one = since(&conn, None, 0, 1, usize::MAX).unwrap()[0].wire_bytes();
        assert_eq!(
            ids(since(&conn, None, 0, 100, 2 * one).unwrap()),
            ["a", "b"]
        );
    }
}
