//! What bots cost, as a user reads it (issue 46): the spend ledger outlives a deleted bot
//! (`botvisorctl cost`, `ListSpend`), `--since` takes a UTC day on, `list` has a COST column,
//! and a cost the CLI never told is `-`, not `$0`. The fake CLI tells a cost with `cost_usd`
//! (each result adds it to the process's running `total_cost_usd`, as Claude Code does).

use std::collections::HashMap;
use std::path::Path;
use std::process::Stdio;
use std::time::SystemTime;

use serde_json::{Value, json};
use zbus::Variant;

use botvisor::dbus::client::BotProxy;
use support::*;

const CTL: &str = env!("CARGO_BIN_EXE_botvisorctl");

/// Runs botvisorctl on `bus`: (exit code, stdout, stderr).
async fn run(bus: &str, args: &[&str]) -> (i32, String, String) {
    let out = tokio::process::Command::new(CTL)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("DBUS_SESSION_BUS_ADDRESS", bus)
        .args(args)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs botvisorctl and expects exit code 0: its stdout.
async fn ok(bus: &str, args: &[&str]) -> String {
    let (code, out, err) = run(bus, args).await;
    assert_eq!(code, 0, "botvisorctl {args:?}: {out}{err}");
    out
}

/// A bot named `name` whose fake CLI follows `plan`.
async fn bot(s: &FakeSetup, name: &str, plan: Value) -> BotProxy<'static> {
    let env = fake_env(&s.env.home, &s.state, plan, &s.env.marker);
    let work = s.env.work.to_str().unwrap().to_owned();
    let mut o = create_options(&work, &env);
    o.insert("name", Variant::from(name));
    let path = bounded("CreateBot", async {
        s.env.manager().await.create_bot(o).await.unwrap()
    })
    .await;
    s.env.bot(&path).await
}

/// A fake CLI that tells `usd` and these tokens for each turn.
fn paying(usd: f64, input: u64, output: u64) -> Value {
    json!([{"mode": "normal", "cost_usd": usd,
            "usage": {"input_tokens": input, "output_tokens": output}}])
}

/// The one line of `text` that contains `what`.
fn line_with<'t>(text: &'t str, what: &str) -> &'t str {
    let lines: Vec<&str> = text.lines().filter(|l| l.contains(what)).collect();
    assert_eq!(lines.len(), 1, "one line with {what:?} in:\n{text}");
    lines[0]
}

/// The cells of a table line (columns are separated by two spaces or more).
fn cells(line: &str) -> Vec<String> {
    line.split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The days of every row `ListSpend` serves, read page by page with `limit`.
async fn ledger_days(s: &FakeSetup, since: Option<&str>, limit: u32) -> Vec<(String, String)> {
    let manager = s.env.manager().await;
    let mut rows = Vec::new();
    loop {
        let mut o: HashMap<&str, Variant<'_>> = HashMap::new();
        if let Some(day) = since {
            o.insert("since", Variant::from(day));
        }
        o.insert("offset", Variant::from(rows.len() as u32));
        o.insert("limit", Variant::from(limit));
        let page = manager.list_spend(o).await.unwrap();
        assert!(page.len() <= limit as usize);
        if page.is_empty() {
            return rows;
        }
        rows.extend(page.into_iter().map(|r| (r.1, r.3)));
    }
}

/// A bot that spent, then was deleted: `cost` still counts it, named as deleted, in the total
/// and in today's; the bot that is left is counted as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_bots_spend_is_still_counted_by_cost() {
    let s = FakeSetup::start("stop_grace_s = 0.5\n").await;
    let bus = s.env.bus.address.clone();
    let keep = bot(&s, "keep", paying(0.25, 10, 2)).await;
    let gone = bot(&s, "gone", paying(0.5, 20, 4)).await;
    assert_eq!(send_and_wait(&keep, "one").await.outcome, "success");
    assert_eq!(send_and_wait(&gone, "one").await.outcome, "success");
    assert_eq!(send_and_wait(&gone, "two").await.outcome, "success");
    let before = ok(&bus, &["cost"]).await;
    assert_eq!(
        cells(line_with(&before, "gone"))[1..4],
        ["gone", "claude", "$1.00"]
    );

    ok(&bus, &["delete", "gone", "--yes"]).await;
    let listed = ok(&bus, &["list"]).await;
    assert!(!listed.contains("gone"), "{listed}");
    let text = ok(&bus, &["cost"]).await;
    let today = botvisor::time::utc_day(SystemTime::now());
    assert_eq!(
        cells(line_with(&text, "gone"))[1..],
        ["gone (deleted)", "claude", "$1.00", "40", "8"],
        "{text}"
    );
    assert_eq!(
        cells(line_with(&text, "keep"))[1..],
        ["keep", "claude", "$0.2500", "10", "2"],
        "{text}"
    );
    assert!(
        text.contains("\ntotal: $1.25 (50 tokens in, 10 out)\n"),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "today ({today}, UTC): $1.25 (50 tokens in, 10 out)"
        )),
        "{text}"
    );

    let json = ok(&bus, &["--json", "cost"]).await;
    let lines: Vec<Value> = json
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let gone_line = lines.iter().find(|l| l["name"] == "gone").expect(&json);
    assert_eq!(gone_line["deleted"], true);
    assert_eq!(gone_line["cost_usd"], 1.0);
    assert_eq!(gone_line["input_tokens"], 40);
    let keep_line = lines.iter().find(|l| l["name"] == "keep").expect(&json);
    assert_eq!(keep_line["deleted"], false);
    let last = lines.last().unwrap();
    assert_eq!(last["total"]["cost_usd"], 1.25, "{json}");
    assert_eq!(last["total"]["bots"], 2, "{json}");
    assert_eq!(last["today"]["day"], today.as_str(), "{json}");
    assert_eq!(last["today"]["cost_usd"], 1.25, "{json}");
}

/// `cost --since DAY` counts that UTC day and later: a deleted bot's spend of an earlier day is
/// left out of the total but not of an inclusive `--since` on its day; today's total stays. A
/// day that does not exist is refused, by botvisorctl (usage, exit 2) and by `ListSpend`
/// (InvalidArgument); `ListSpend` pages by `offset` and `limit`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cost_since_a_day_counts_that_day_and_later() {
    let env = TestEnv::new().await;
    // Before botvisord starts: a bot that spent $2 on 2020-01-01 and was deleted since.
    write_old_spend(&env.dir.path().join("botvisor.db"));
    let s = FakeSetup::start_in(env, "stop_grace_s = 0.5\n").await;
    let bus = s.env.bus.address.clone();
    let now = bot(&s, "now", paying(0.25, 10, 2)).await;
    assert_eq!(send_and_wait(&now, "one").await.outcome, "success");
    // Today as botvisord counted it (its UTC day).
    let days = ledger_days(&s, None, 1).await;
    assert_eq!(days.len(), 2, "{days:?}");
    assert_eq!(days[0], ("ancient".to_owned(), "2020-01-01".to_owned()));
    let today = days[1].1.clone();

    let all = ok(&bus, &["cost"]).await;
    assert_eq!(
        cells(line_with(&all, "ancient"))[1..4],
        ["ancient (deleted)", "claude", "$2.00"]
    );
    assert!(
        all.contains("\ntotal: $2.25 (15 tokens in, 3 out)\n"),
        "{all}"
    );

    let later = ok(&bus, &["cost", "--since", "2020-01-02"]).await;
    assert!(!later.contains("ancient"), "{later}");
    assert!(
        later.contains("total since 2020-01-02: $0.2500 (10 tokens in, 2 out)"),
        "{later}"
    );
    assert!(
        later.contains(&format!("today ({today}, UTC): $0.2500")),
        "{later}"
    );
    let on_the_day = ok(&bus, &["cost", "--since", "2020-01-01"]).await;
    assert!(
        on_the_day.contains("total since 2020-01-01: $2.25"),
        "{on_the_day}"
    );
    let from_today = ok(&bus, &["cost", "--since", &today]).await;
    assert!(
        from_today.contains(&format!("total since {today}: $0.2500")),
        "{from_today}"
    );
    let to_come = ok(&bus, &["cost", "--since", "2999-01-01"]).await;
    assert!(
        to_come.contains("no bot spent anything on 2999-01-01 or later"),
        "{to_come}"
    );
    assert!(to_come.contains("total since 2999-01-01: $0 "), "{to_come}");
    assert!(
        to_come.contains(&format!("today ({today}, UTC): $0.2500")),
        "{to_come}"
    );

    let (code, _, err) = run(&bus, &["cost", "--since", "2020-02-30"]).await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("YYYY-MM-DD"), "{err}");

    assert_eq!(
        ledger_days(&s, Some("2020-01-02"), 100).await,
        [("now".to_owned(), today)]
    );
    let manager = s.env.manager().await;
    for (key, value) in [
        ("since", Variant::from("2020-1-1")),
        ("since", Variant::from(20200101u32)),
        ("before", Variant::from("2020-01-01")),
    ] {
        let err = manager
            .list_spend(HashMap::from([(key, value)]))
            .await
            .unwrap_err();
        assert_eq!(
            error_name(&err),
            "org.botvisor.Botvisor1.Error.InvalidArgument",
            "{err}"
        );
        assert!(err.to_string().contains(key), "{err}");
    }
}

/// Schema as this botvisord makes it, with a deleted bot's spend on 2020-01-01.
fn write_old_spend(db: &Path) {
    use botvisor::store::{BotRecord, bots, schema, spend};
    let mut conn = botvisor::store::Connection::open(db).unwrap();
    schema::migrate(&mut conn).unwrap();
    let id = "0123456789abcdef0123456789abcdef";
    bots::insert(&conn, &BotRecord::new(id, "ancient", "/", "claude")).unwrap();
    let spent = botvisor::cost::Spend {
        cost_nanos: 2_000_000_000,
        input_tokens: 5,
        output_tokens: 1,
    };
    spend::add(&conn, id, "2020-01-01", &spent, true).unwrap();
    bots::delete(&conn, id).unwrap();
}

/// `list` shows each bot's cost in a COST column: dollars for a bot whose CLI tells it (`$0`
/// included), `-` for a Codex bot, which tells none (unknown is not zero); `cost` shows `-` for
/// a bot whose CLI told tokens and no cost, and its total says it leaves that bot's cost out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cost_the_cli_never_told_shows_as_a_dash_not_zero() {
    let env = TestEnv::new().await;
    // A Codex binary that is never run (no message goes to the Codex bot).
    let codex = env.dir.path().join("codex-never-run");
    std::fs::write(&codex, "#!/bin/sh\nexec sleep 1000\n").unwrap();
    std::fs::set_permissions(&codex, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let mut cfg = env.daemon_config(Some(fake_cli()));
    cfg.codex_bin = Some(codex);
    cfg.config = Some(write_config(env.dir.path(), "stop_grace_s = 0.5\n"));
    let daemon = Daemon::start(&cfg, &env.conn).await;
    let s = FakeSetup {
        daemon,
        cfg,
        state: env.dir.path().join("fake-state"),
        env,
    };
    let bus = s.env.bus.address.clone();
    let paid = bot(&s, "paid", paying(0.25, 10, 2)).await;
    bot(&s, "idle", paying(0.25, 10, 2)).await;
    let tokens_only = bot(
        &s,
        "tokens-only",
        json!([{"mode": "normal", "no_cost": true,
                "usage": {"input_tokens": 7, "output_tokens": 3}}]),
    )
    .await;
    let codex_home = s.env.home.join("codex-home");
    std::fs::create_dir_all(&codex_home).unwrap();
    let work = s.env.work.to_str().unwrap().to_owned();
    let codex_env = HashMap::from([(
        "CODEX_HOME".to_owned(),
        codex_home.to_string_lossy().into_owned(),
    )]);
    let mut o = create_options(&work, &codex_env);
    o.insert("runtime", Variant::from("codex"));
    o.insert("name", Variant::from("cx"));
    bounded("CreateBot", async {
        s.env.manager().await.create_bot(o).await.unwrap()
    })
    .await;
    assert_eq!(send_and_wait(&paid, "one").await.outcome, "success");
    assert_eq!(send_and_wait(&tokens_only, "one").await.outcome, "success");

    let listed = ok(&bus, &["list"]).await;
    let header = listed.lines().next().unwrap();
    let at = header
        .find("COST")
        .unwrap_or_else(|| panic!("no COST column:\n{listed}"));
    let cost_of = |name: &str| {
        let line = listed
            .lines()
            .find(|l| l.split_whitespace().nth(1) == Some(name))
            .unwrap_or_else(|| panic!("no {name}:\n{listed}"));
        line[at..].split_whitespace().next().unwrap().to_owned()
    };
    assert_eq!(cost_of("paid"), "$0.2500", "{listed}");
    assert_eq!(cost_of("idle"), "$0", "{listed}");
    assert_eq!(cost_of("cx"), "-", "{listed}");
    let status = ok(&bus, &["status", "cx"]).await;
    assert!(
        status.contains("cost: not told by the CLI (0 tokens in, 0 out)"),
        "{status}"
    );
    assert!(!status.contains("$0"), "{status}");

    let text = ok(&bus, &["cost"]).await;
    assert_eq!(
        cells(line_with(&text, "tokens-only"))[1..],
        ["tokens-only", "claude", "-", "7", "3"],
        "{text}"
    );
    assert!(
        text.contains(
            "total: $0.2500 (17 tokens in, 5 out); not counting the cost of 1 bot whose CLI tells \
             none (-)"
        ),
        "{text}"
    );
    let json = ok(&bus, &["--json", "cost"]).await;
    let tokens_line: Value = json
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|l| l["name"] == "tokens-only")
        .expect(&json);
    assert_eq!(tokens_line["cost_usd"], Value::Null, "{json}");
    // The ledger says so too: -1 dollars, not 0.
    let rows = s
        .env
        .manager()
        .await
        .list_spend(HashMap::new())
        .await
        .unwrap();
    let row = rows.iter().find(|r| r.1 == "tokens-only").unwrap();
    assert_eq!((row.4, row.5, row.6), (-1.0, 7, 3));
}
