//! `botvisorctl cost`: what every bot ever made spent, read from botvisord's spend ledger
//! (`ListSpend`, page by page), per bot and in all, with today's total. A bot that is no longer
//! among the bots was deleted: it is named so, and still counted.

use std::collections::{BTreeSet, HashMap};
use std::time::SystemTime;

use serde_json::{Value, json};
use zbus::{Connection, Variant};

use botvisor::cost::{nanos, usd};
use botvisor::dbus::client::ManagerProxy;

use super::bots::{self, dollars};
use super::fail::{Failure, OK};
use super::list::table;
use super::show;

/// One row of the ledger as `ListSpend` serves it.
type Row = (String, String, String, String, f64, u64, u64);

/// What one bot spent over the days asked.
#[derive(Debug, Default, Clone, PartialEq)]
struct BotSpend {
    id: String,
    name: String,
    runtime: String,
    deleted: bool,
    /// Nano-dollars, summed over the days whose cost the CLI told.
    cost_nanos: u64,
    /// Whether the CLI told a cost on any of those days (Codex never does).
    cost_told: bool,
    input_tokens: u64,
    output_tokens: u64,
}

/// A sum of spend: nano-dollars told, tokens, and how many bots spent without telling a cost.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
struct Total {
    cost_nanos: u64,
    input_tokens: u64,
    output_tokens: u64,
    not_told: usize,
}

impl Total {
    fn add(&mut self, b: &BotSpend) {
        self.cost_nanos = self.cost_nanos.saturating_add(b.cost_nanos);
        self.input_tokens = self.input_tokens.saturating_add(b.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(b.output_tokens);
        self.not_told += usize::from(!b.cost_told);
    }

    /// `$0.75 (40 tokens in, 12 out)`, and what it leaves out.
    fn words(&self) -> String {
        let mut text = format!(
            "{} ({} tokens in, {} out)",
            dollars(usd(self.cost_nanos)),
            self.input_tokens,
            self.output_tokens
        );
        match self.not_told {
            0 => {}
            1 => text.push_str("; not counting the cost of 1 bot whose CLI tells none (-)"),
            n => text.push_str(&format!(
                "; not counting the cost of {n} bots whose CLI tells none (-)"
            )),
        }
        text
    }

    fn to_json(self) -> Value {
        json!({
            "cost_usd": usd(self.cost_nanos),
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cost_not_told": self.not_told,
        })
    }
}

/// Every row of the ledger from `since` on, read a page at a time until a page is empty.
async fn ledger(conn: &Connection, since: Option<&str>) -> Result<Vec<Row>, Failure> {
    let manager = ManagerProxy::new(conn).await?;
    let mut rows: Vec<Row> = Vec::new();
    loop {
        let mut options: HashMap<&str, Variant<'_>> = HashMap::new();
        if let Some(day) = since {
            options.insert("since", Variant::from(day));
        }
        options.insert("offset", Variant::from(rows.len() as u64));
        let page = manager.list_spend(options).await?;
        if page.is_empty() {
            return Ok(rows);
        }
        rows.extend(page);
    }
}

/// The ledger's `rows` (oldest first) summed per bot: each named as it is now when it still
/// exists (`live`: id to name), else by its newest row's name and marked deleted. The biggest
/// spender first, bots whose CLI tells no cost last.
fn per_bot<'r>(
    rows: impl IntoIterator<Item = &'r Row>,
    live: &HashMap<String, String>,
) -> Vec<BotSpend> {
    let mut order: Vec<String> = Vec::new();
    let mut by_id: HashMap<String, BotSpend> = HashMap::new();
    for (id, name, runtime, _day, cost_usd, input, output) in rows {
        let b = by_id.entry(id.clone()).or_insert_with(|| {
            order.push(id.clone());
            BotSpend {
                id: id.clone(),
                ..BotSpend::default()
            }
        });
        // Rows come oldest first: the last one names the bot as it was last.
        b.name = name.clone();
        b.runtime = runtime.clone();
        if *cost_usd >= 0.0 {
            b.cost_told = true;
            b.cost_nanos = b.cost_nanos.saturating_add(nanos(*cost_usd));
        }
        b.input_tokens = b.input_tokens.saturating_add(*input);
        b.output_tokens = b.output_tokens.saturating_add(*output);
    }
    let mut out: Vec<BotSpend> = order
        .into_iter()
        .filter_map(|id| by_id.remove(&id))
        .map(|mut b| {
            match live.get(&b.id) {
                Some(name) => b.name = name.clone(),
                None => b.deleted = true,
            }
            b
        })
        .collect();
    out.sort_by(|a, b| {
        b.cost_told
            .cmp(&a.cost_told)
            .then(b.cost_nanos.cmp(&a.cost_nanos))
            .then(a.name.cmp(&b.name))
            .then(a.id.cmp(&b.id))
    });
    out
}

/// `cost`: per bot (deleted bots included) and in all since `since` (every day when `None`),
/// and today's total; one JSON object per bot and a last one with the totals, or a table.
pub async fn cost(conn: &Connection, since: Option<String>, json: bool) -> Result<u8, Failure> {
    let today = botvisor::time::utc_day(SystemTime::now());
    // One read from the earlier of `since` and today: today's total whatever `since` says.
    let from = since.as_deref().map(|s| s.min(today.as_str()).to_owned());
    let rows = ledger(conn, from.as_deref()).await?;
    let live: HashMap<String, String> = bots::all(conn)
        .await?
        .into_iter()
        .map(|b| (b.id, b.name))
        .collect();
    let spent = per_bot(
        rows.iter()
            .filter(|r| since.as_deref().is_none_or(|s| r.3.as_str() >= s)),
        &live,
    );
    let mut total = Total::default();
    for b in &spent {
        total.add(b);
    }
    let mut today_total = Total::default();
    for b in per_bot(rows.iter().filter(|r| r.3 == today), &live) {
        today_total.add(&b);
    }
    let ids: BTreeSet<&str> = live
        .keys()
        .map(String::as_str)
        .chain(spent.iter().map(|b| b.id.as_str()))
        .collect();
    let ids: Vec<&str> = ids.into_iter().collect();
    let shorts = bots::short_ids(&ids);
    let short = |id: &str| shorts.get(id).cloned().unwrap_or_else(|| id.to_owned());
    if json {
        for b in &spent {
            json_line!(json!({
                "id": b.id,
                "short_id": short(&b.id),
                "name": b.name,
                "runtime": b.runtime,
                "deleted": b.deleted,
                "cost_usd": if b.cost_told { json!(usd(b.cost_nanos)) } else { Value::Null },
                "input_tokens": b.input_tokens,
                "output_tokens": b.output_tokens,
            }));
        }
        let mut all = total.to_json();
        all["since"] = json!(since);
        all["bots"] = json!(spent.len());
        let mut day = today_total.to_json();
        day["day"] = json!(today);
        json_line!(json!({"total": all, "today": day}));
        return Ok(OK);
    }
    if spent.is_empty() {
        match &since {
            Some(day) => outln!("no bot spent anything on {day} or later"),
            None => outln!("no bot spent anything yet"),
        }
    } else {
        let rows = spent
            .iter()
            .map(|b| {
                let name = if b.deleted {
                    format!("{} (deleted)", show::safe(&b.name))
                } else {
                    show::safe(&b.name)
                };
                vec![
                    show::safe(&short(&b.id)),
                    name,
                    show::safe(&b.runtime),
                    if b.cost_told {
                        dollars(usd(b.cost_nanos))
                    } else {
                        "-".to_owned()
                    },
                    b.input_tokens.to_string(),
                    b.output_tokens.to_string(),
                ]
            })
            .collect();
        for line in table(
            &["ID", "NAME", "RUNTIME", "COST", "TOKENS IN", "TOKENS OUT"],
            rows,
        ) {
            outln!("{line}");
        }
    }
    let over = match &since {
        Some(day) => format!("total since {day}"),
        None => "total".to_owned(),
    };
    outln!("{over}: {}", total.words());
    outln!("today ({today}, UTC): {}", today_total.words());
    Ok(OK)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: &str, name: &str, runtime: &str, day: &str, usd: f64, i: u64, o: u64) -> Row {
        (
            id.into(),
            name.into(),
            runtime.into(),
            day.into(),
            usd,
            i,
            o,
        )
    }

    #[test]
    fn each_bot_is_summed_over_its_days_deleted_ones_named_so() {
        let rows = [
            row("a", "old-name", "claude", "2026-05-01", 0.25, 10, 1),
            row("g", "gone", "claude", "2026-05-01", 0.5, 20, 2),
            row("c", "cx", "codex", "2026-05-02", -1.0, 7, 3),
            row("a", "alpha", "claude", "2026-05-02", 0.5, 5, 5),
        ];
        let live = HashMap::from([
            ("a".to_owned(), "alpha-now".to_owned()),
            ("c".to_owned(), "cx".to_owned()),
        ]);
        let all = per_bot(&rows, &live);
        let shown: Vec<_> = all
            .iter()
            .map(|b| {
                (
                    b.name.as_str(),
                    b.deleted,
                    b.cost_told,
                    b.cost_nanos,
                    b.input_tokens,
                )
            })
            .collect();
        assert_eq!(
            shown,
            [
                ("alpha-now", false, true, 750_000_000, 15),
                ("gone", true, true, 500_000_000, 20),
                ("cx", false, false, 0, 7),
            ]
        );
        let mut total = Total::default();
        for b in &all {
            total.add(b);
        }
        assert_eq!(
            total.words(),
            "$1.25 (42 tokens in, 11 out); not counting the cost of 1 bot whose CLI tells none (-)"
        );
        let later = per_bot(rows.iter().filter(|r| r.3.as_str() >= "2026-05-02"), &live);
        assert_eq!(later.len(), 2);
        assert_eq!(later[0].cost_nanos, 500_000_000);
    }
}
