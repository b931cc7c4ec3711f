//! `botvisorctl list` and `status`: the bots as a table that fits the terminal, and one bot in
//! full, with open permission prompts and how to answer them.

use comfy_table::{ContentArrangement, Table, presets};
use zbus::Connection;

use super::bots::{self, BotInfo};
use super::fail::{FAILED, Failure, OK};
use super::fleet;
use super::show::{self, ASK, DIM, ERROR, paint};

/// `list`: one JSON object per bot and line, or a table.
pub async fn list(conn: &Connection, json: bool) -> Result<u8, Failure> {
    let all = bots::all(conn).await?;
    if json {
        for b in &all {
            json_line!(b.to_json());
        }
        return Ok(OK);
    }
    if all.is_empty() {
        outln!(
            "no bots; create one with `{} create --cwd DIR`",
            super::hint::ctl()
        );
        return Ok(OK);
    }
    print_table(&all);
    prompts(&all, super::hint::ctl());
    Ok(OK)
}

/// `list` over several hosts (issue 51): every host read at once, each bounded
/// ([`fleet::read_all`]); the bots of all in one table, each named with its host
/// (`buildbox:demo`), then each host's state. `--json`: each bot's object with its `host`, then
/// one object per host (`"type": "host"`, `host`, `state` `online` or `offline`, `bots`, and
/// `error` in words when offline). Exits 1 when a host is offline (what the others hold is
/// shown all the same), else 0.
pub async fn fleet(members: &[fleet::Member], json: bool) -> Result<u8, Failure> {
    let read = fleet::read_all(members).await?;
    let offline = read
        .iter()
        .any(|(_, got)| matches!(got, fleet::HostBots::Offline(_)));
    if json {
        for (m, got) in &read {
            if let fleet::HostBots::Online(bots, _) = got {
                for b in bots {
                    let mut v = b.to_json();
                    v["host"] = m.name.clone().into();
                    json_line!(v);
                }
            }
        }
        for (m, got) in &read {
            let v = match got {
                fleet::HostBots::Online(bots, d) => serde_json::json!({
                    "type": "host", "host": m.name, "state": "online", "bots": bots.len(),
                    "boot_id": d.boot_id, "invocation": d.invocation}),
                fleet::HostBots::Offline(why) => serde_json::json!({
                    "type": "host", "host": m.name, "state": "offline", "error": why}),
            };
            json_line!(v);
        }
        return Ok(if offline { FAILED } else { OK });
    }
    // Each bot named with its host (`buildbox:demo`), in the table and in its prompts' lines.
    let named: Vec<(&fleet::Member, Vec<BotInfo>)> = read
        .iter()
        .filter_map(|(m, got)| match got {
            fleet::HostBots::Online(bots, _) => Some((
                m,
                bots.iter()
                    .cloned()
                    .map(|mut b| {
                        b.name = format!("{}:{}", m.name, b.name);
                        b
                    })
                    .collect(),
            )),
            fleet::HostBots::Offline(_) => None,
        })
        .collect();
    let all: Vec<BotInfo> = named.iter().flat_map(|(_, b)| b.iter().cloned()).collect();
    if !all.is_empty() {
        print_table(&all);
    } else if offline {
        outln!("no bots on the hosts that answered");
    } else {
        outln!("no bots on these hosts");
    }
    for (m, bots) in &named {
        prompts(bots, &super::hint::ctl_for(m));
    }
    let rows = read
        .iter()
        .map(|(m, got)| match got {
            fleet::HostBots::Online(bots, d) => vec![
                show::safe(&m.name),
                "online".to_owned(),
                bots.len().to_string(),
                fleet::short(&d.boot_id),
                fleet::short(&d.invocation),
                String::new(),
            ],
            // Plain cells: the table's widths count what is in them.
            fleet::HostBots::Offline(why) => vec![
                show::safe(&m.name),
                "offline".to_owned(),
                "-".to_owned(),
                "-".to_owned(),
                "-".to_owned(),
                show::safe(why),
            ],
        })
        .collect();
    outln!();
    for line in table(&["HOST", "STATE", "BOTS", "BOOT", "BOTVISORD", "WHY"], rows) {
        outln!("{line}");
    }
    Ok(if offline { FAILED } else { OK })
}

/// The table of `all` (no line when it is empty).
fn print_table(all: &[BotInfo]) {
    // Under 100 columns, what a person picks a bot by: its usage is `top`'s, its cost `cost`'s.
    let narrow = show::terminal_width().is_some_and(|w| w < 100);
    // A BRANCH column once any bot has a worktree of its own.
    let branches = all.iter().any(|b| !b.branch.is_empty());
    let rows = all
        .iter()
        .map(|b| {
            let mut row = vec![
                show::safe(&b.short),
                show::safe(&b.name),
                show::safe(&b.shown_state()),
                show::safe(&b.runtime),
            ];
            if !narrow {
                row.extend([
                    b.cost_cell(),
                    b.queued_messages.to_string(),
                    bytes(b.memory_current),
                    cpu_time(b.cpu_usage_nsec),
                    count(b.tasks_current),
                ]);
            }
            if branches {
                row.push(show::safe(&b.branch));
            }
            row.push(show::safe(&home_relative(&b.cwd)));
            row
        })
        .collect();
    // The folder fits what is left of the line, cut at its start (its end names it best).
    let mut rows: Vec<Vec<String>> = rows;
    if let Some(width) = show::terminal_width() {
        let cells = rows.first().map_or(0, Vec::len);
        let others: usize = (0..cells.saturating_sub(1))
            .map(|i| {
                rows.iter()
                    .map(|r| unicode_width::UnicodeWidthStr::width(r[i].as_str()))
                    .max()
                    .unwrap_or(0)
                    .max(if narrow { 7 } else { 6 })
                    + 2
            })
            .sum();
        let room = usize::from(width).saturating_sub(others + 2).max(4);
        for r in &mut rows {
            if let Some(cwd) = r.last_mut() {
                *cwd = cut_start(cwd, room);
            }
        }
    }
    let mut header: Vec<&str> = if narrow {
        vec!["ID", "NAME", "STATE", "RUNTIME"]
    } else {
        vec![
            "ID", "NAME", "STATE", "RUNTIME", "COST", "QUEUED", "MEMORY", "CPU", "TASKS",
        ]
    };
    if branches {
        header.push("BRANCH");
    }
    header.push("CWD");
    for line in table(&header, rows) {
        outln!("{line}");
    }
}

/// The lines of a table with `header` and `rows` (cells already made safe to print), fitted to
/// the terminal's width when stdout is one; the columns' padding is its only border.
pub fn table(header: &[&str], rows: Vec<Vec<String>>) -> Vec<String> {
    let mut table = Table::new();
    table.load_style(presets::NOTHING);
    match show::terminal_width() {
        Some(w) => {
            table.set_width(w);
            table.set_content_arrangement(ContentArrangement::Dynamic);
        }
        None => {
            table.set_content_arrangement(ContentArrangement::Disabled);
        }
    }
    table.set_header(header.to_vec());
    for row in rows {
        table.add_row(row);
    }
    for column in table.column_iter_mut() {
        column.set_padding((0, 2));
    }
    table.lines().map(|l| l.trim_end().to_owned()).collect()
}

/// Lines about open permission prompts, with how to answer each with `ctl` (`botvisorctl` and
/// the bot's host).
fn prompts(all: &[BotInfo], ctl: &str) {
    for b in all {
        for (id, tool, input) in &b.pending {
            outln!(
                "{}",
                paint(
                    ASK,
                    &format!(
                        "{} waits for permission: {} {}",
                        show::safe(&b.name),
                        show::safe(tool),
                        show::safe(&show::cut(input, 120))
                    )
                )
            );
            outln!(
                "  answer: {} answer {} {} allow|deny",
                ctl,
                show::safe(&b.short),
                show::safe(id)
            );
        }
    }
}

/// `status`: one bot in full.
pub async fn status(conn: &Connection, spec: &str, json: bool) -> Result<u8, Failure> {
    let path = bots::path_of(conn, spec).await?;
    let b = bots::info(conn, path.as_str()).await?;
    print_status(&b, None, json);
    Ok(OK)
}

/// `status` over several hosts (issue 51): `spec` looked up on every host at once (each on a
/// link of its own, bounded by [`fleet::HOST_BOUND`]), or on one host when it reads
/// `HOST:BOT` and `HOST` is one of them. The one bot found is shown with its host (JSON: its
/// `host`). Errors: a bot found on several hosts (usage: it is named with its host); one found
/// while a host did not answer (shown all the same, exit 1: that host may have one too); none
/// found (saying which hosts did not answer); `HOST:` with no bot (usage); Ctrl-C.
pub async fn status_fleet(
    members: &[fleet::Member],
    spec: &str,
    json: bool,
) -> Result<u8, Failure> {
    let (members, spec): (Vec<fleet::Member>, &str) = match spec.split_once(':') {
        Some((host, "")) if members.iter().any(|m| m.name == host) => {
            return Err(Failure::usage(format!(
                "`{}` names a host but no bot: give one after the `:` (`{}:demo`)",
                show::safe(spec),
                show::safe(host)
            )));
        }
        Some((host, bot)) if members.iter().any(|m| m.name == host) => (
            members.iter().filter(|m| m.name == host).cloned().collect(),
            bot,
        ),
        _ => (members.to_vec(), spec),
    };
    // `nosuch:demo`: said when nothing is found, in case the host was meant.
    let unknown_host = match spec.split_once(':') {
        Some((host, _)) if !members.iter().any(|m| m.name == host) && members.len() > 1 => {
            format!(
                " (and no host is named `{}`: `hosts list` names them)",
                show::safe(host)
            )
        }
        _ => String::new(),
    };
    let wanted = spec.to_owned();
    let found = fleet::on_each(&members, move |conn| {
        let spec = wanted.clone();
        async move {
            match bots::find(&conn, &spec).await? {
                Some(path) => bots::info(&conn, path.as_str()).await.map(Some),
                None => Ok(None),
            }
        }
    })
    .await?;
    let mut hits = Vec::new();
    let mut silent = Vec::new();
    for (m, got) in found {
        match got {
            Ok(Some(b)) => hits.push((m, b)),
            Ok(None) => {}
            Err(why) => silent.push(format!("{} ({})", m.name, why)),
        }
    }
    let silent = silent.join("; ");
    match hits.as_slice() {
        // Found, but a host that did not answer may have one of that name too: shown, and the
        // exit says it is not sure (1), as `list` does with a host offline.
        [(m, b)] if !silent.is_empty() => {
            print_status(b, Some(m), json);
            Err(Failure::failed(format!(
                "did not answer: {}; `{}` may name a bot there too (`{}:{}` names this one)",
                show::safe(&silent),
                show::safe(spec),
                show::safe(&m.name),
                show::safe(&b.name)
            )))
        }
        [(m, b)] => {
            print_status(b, Some(m), json);
            Ok(OK)
        }
        [] if silent.is_empty() => Err(Failure::failed(format!(
            "no bot has the id, id prefix or name `{}` on {}{unknown_host}",
            show::safe(spec),
            match members.as_slice() {
                [one] => show::safe(&one.name),
                _ => "any of the hosts".to_owned(),
            }
        ))),
        [] => Err(Failure::failed(format!(
            "no bot has the id, id prefix or name `{}` on the hosts that answered{unknown_host}; \
             did not answer: {}",
            show::safe(spec),
            show::safe(&silent)
        ))),
        several => {
            let names: Vec<String> = several
                .iter()
                .map(|(m, b)| format!("{}:{}", m.name, b.name))
                .collect();
            Err(Failure::usage(format!(
                "`{}` names a bot on several hosts ({}); name it with its host, as `{}`",
                show::safe(spec),
                show::safe(&names.join(", ")),
                show::safe(&names[0])
            )))
        }
    }
}

/// One bot in full, on `host` when over several hosts (its first row, and its hints).
fn print_status(b: &BotInfo, host: Option<&fleet::Member>, json: bool) {
    if json {
        let mut v = b.to_json();
        if let Some(m) = host {
            v["host"] = m.name.clone().into();
        }
        json_line!(v);
        return;
    }
    if let Some(m) = host {
        outln!(
            "{}{}",
            paint(DIM, &format!("{:>16}: ", "host")),
            show::safe(&m.name)
        );
    }
    let or = |s: &str, empty: &str| {
        if s.is_empty() {
            empty.to_owned()
        } else {
            s.to_owned()
        }
    };
    let rows = [
        ("name", b.name.clone()),
        ("id", format!("{} (short: {})", b.id, b.short)),
        ("state", b.shown_state()),
        ("cwd", b.cwd.clone()),
        (
            "worktree",
            if b.branch.is_empty() {
                "none (a folder of the user's)".to_owned()
            } else {
                format!(
                    "branch {} from {}",
                    b.branch,
                    b.base_commit.get(..12).unwrap_or(&b.base_commit)
                )
            },
        ),
        ("runtime", b.runtime.clone()),
        ("model", or(&b.model, "the CLI's default")),
        (
            "permission mode",
            or(&b.permission_mode, "the CLI's default"),
        ),
        ("session", or(&b.session_id, "none yet")),
        (
            "process",
            if b.process_id == 0 {
                "none".to_owned()
            } else {
                b.process_id.to_string()
            },
        ),
        ("queued messages", b.queued_messages.to_string()),
        ("conversation", or(&b.held_by, "not open elsewhere")),
        ("held by", format!("{} client(s)", b.holders)),
        ("cost", b.cost_words()),
        ("plan limit", b.plan_limit_words()),
        (
            "last stop",
            match (b.stop_verdict.as_str(), b.stop_proof.as_str()) {
                ("", _) => "none yet".to_owned(),
                (v, "") => v.to_owned(),
                (v, p) => format!("{v} (proven by {p})"),
            },
        ),
        ("memory", bytes(b.memory_current)),
        ("cpu time", cpu_time(b.cpu_usage_nsec)),
        ("tasks", count(b.tasks_current)),
        (
            "memory limit",
            if b.memory_max == u64::MAX {
                "none".to_owned()
            } else {
                bytes(b.memory_max)
            },
        ),
    ];
    for (k, v) in rows {
        outln!("{}{}", paint(DIM, &format!("{k:>16}: ")), show::safe(&v));
    }
    if !b.last_error.is_empty() {
        outln!(
            "{}{}",
            paint(DIM, &format!("{:>16}: ", "last error")),
            paint(ERROR, &show::safe(&b.last_error))
        );
    }
    let ctl = host.map(super::hint::ctl_for);
    prompts(
        std::slice::from_ref(b),
        ctl.as_deref().unwrap_or(super::hint::ctl()),
    );
}

/// Bytes as people read them (`1.5G`, `230M`, `12K`); `-` when not known (`u64::MAX`).
pub fn bytes(v: u64) -> String {
    const UNITS: [(&str, u64); 3] = [("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)];
    if v == u64::MAX {
        return "-".into();
    }
    for (unit, size) in UNITS {
        if v >= size {
            let x = v as f64 / size as f64;
            return if x < 10.0 {
                format!("{x:.1}{unit}")
            } else {
                format!("{x:.0}{unit}")
            };
        }
    }
    format!("{v}B")
}

/// Nanoseconds of CPU time as `4.2s`, `3m05s`, `2h07m`; `-` when not known.
pub fn cpu_time(ns: u64) -> String {
    if ns == u64::MAX {
        return "-".into();
    }
    let s = ns as f64 / 1e9;
    let whole = ns / 1_000_000_000;
    if s < 60.0 {
        format!("{s:.1}s")
    } else if whole < 3600 {
        format!("{}m{:02}s", whole / 60, whole % 60)
    } else {
        format!("{}h{:02}m", whole / 3600, whole % 3600 / 60)
    }
}

/// A count; `-` when not known.
pub fn count(v: u64) -> String {
    if v == u64::MAX {
        "-".into()
    } else {
        v.to_string()
    }
}

/// The longest end of `s` that is at most `max` columns wide, with `…` before it when cut.
fn cut_start(s: &str, max: usize) -> String {
    use unicode_width::UnicodeWidthChar;
    let mut width = 0;
    let mut start = s.len();
    for (i, c) in s.char_indices().rev() {
        let w = c.width().unwrap_or(0);
        if width + w + 1 > max {
            return format!("…{}", &s[start..]);
        }
        width += w;
        start = i;
    }
    s.to_owned()
}

/// `/home/me/x` as `~/x`.
fn home_relative(path: &str) -> String {
    match std::env::var("HOME") {
        Ok(home) if !home.is_empty() && home != "/" => match path.strip_prefix(&home) {
            Some("") => "~".to_owned(),
            Some(rest) if rest.starts_with('/') => format!("~{rest}"),
            _ => path.to_owned(),
        },
        _ => path.to_owned(),
    }
}

/// `conversations`: the conversations the CLIs keep for a folder, newest first, one JSON object
/// per line or a table; a title is the conversation's first message, as botvisord escaped it.
pub async fn conversations(
    conn: &Connection,
    cwd: &std::path::Path,
    runtime: Option<String>,
    env: &[String],
    limit: u32,
    json: bool,
) -> Result<u8, Failure> {
    use std::collections::HashMap;
    use zbus::Variant;
    let cwd = std::path::absolute(cwd)
        .map_err(|e| Failure::usage(format!("cannot make the folder absolute: {e}")))?;
    let cwd = cwd
        .to_str()
        .ok_or_else(|| Failure::usage("the folder is not valid UTF-8"))?
        .to_owned();
    let mut options: HashMap<&str, Variant<'_>> = HashMap::new();
    if let Some(r) = &runtime {
        options.insert("runtime", Variant::from(r.as_str()));
    }
    let env = super::commands::env_pairs(env)?;
    if !env.is_empty() {
        options.insert("env", Variant::from(env));
    }
    options.insert("limit", Variant::from(limit));
    let manager = botvisor::dbus::client::ManagerProxy::new(conn).await?;
    let found = manager.list_conversations(&cwd, options).await?;
    let text = |v: Option<&zbus::OwnedVariant>| -> String {
        v.and_then(|v| v.try_clone().ok())
            .and_then(|v| String::try_from(v).ok())
            .unwrap_or_default()
    };
    let owner = |v: Option<&zbus::OwnedVariant>| -> String {
        v.and_then(|v| v.try_clone().ok())
            .and_then(|v| zbus::OwnedObjectPath::try_from(v).ok())
            .map(|p| p.as_str().rsplit('/').next().unwrap_or_default().to_owned())
            .unwrap_or_default()
    };
    if json {
        for (runtime, id, written, title, details) in &found {
            json_line!(serde_json::json!({
                "runtime": runtime, "session_id": id, "written": written, "title": title,
                "bot": owner(details.get("bot")), "held_by": text(details.get("held_by")),
            }));
        }
        return Ok(OK);
    }
    if found.is_empty() {
        outln!("no conversations for {}", show::safe(&cwd));
        return Ok(OK);
    }
    let rows = found
        .iter()
        .map(|(runtime, id, written, title, details)| {
            let bot = owner(details.get("bot"));
            let held = text(details.get("held_by"));
            let who = if !bot.is_empty() {
                format!("bot {}", &bot[..bot.len().min(8)])
            } else if !held.is_empty() {
                format!("held: {held}")
            } else {
                String::new()
            };
            vec![
                show::safe(runtime),
                show::safe(id),
                show::safe(&botvisor::time::local_time(
                    u64::try_from(*written).unwrap_or(0),
                )),
                show::safe(&who),
                show::safe(title),
            ]
        })
        .collect();
    for line in table(
        &["RUNTIME", "SESSION", "WRITTEN", "OWNER", "FIRST MESSAGE"],
        rows,
    ) {
        outln!("{line}");
    }
    Ok(OK)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_as_people_read_it() {
        assert_eq!(bytes(u64::MAX), "-");
        assert_eq!(bytes(512), "512B");
        assert_eq!(bytes(1536), "1.5K");
        assert_eq!(bytes(230 << 20), "230M");
        assert_eq!(cpu_time(4_200_000_000), "4.2s");
        assert_eq!(cpu_time(185_000_000_000), "3m05s");
        assert_eq!(cpu_time(7_620_000_000_000), "2h07m");
        assert_eq!(cpu_time(u64::MAX), "-");
        assert_eq!(count(3), "3");
    }

    #[test]
    fn a_folder_is_cut_at_its_start() {
        assert_eq!(cut_start("/a/b/c", 10), "/a/b/c");
        assert_eq!(cut_start("/tmp/work/下の階層", 10), "…/下の階層");
        assert_eq!(cut_start("/tmp/work/下の階層", 8), "…の階層");
    }
}
