//! `top` over several hosts (issue 51): every host read at each refresh on a link kept open
//! ([`crate::fleet::Kept`]), one table of all their bots.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{
    Seen, print_line, quit_while_waiting, row_json, screen_lines, seen_now, stop_asked, terminal,
    with_cpu,
};
use crate::bots::BotInfo;
use crate::fail::{Failure, OK};
use crate::show;

/// `top` over several hosts (issue 51): every host's bots in one table, each named with its
/// host (`buildbox:demo`), refreshed every `interval` seconds on links kept open from one
/// refresh to the next; a host that does not answer within the interval (at least 1 s, at most
/// [`crate::fleet::HOST_BOUND`]) is shown offline with why below the table, and linked again
/// at the next refresh, while the others go on. `--json`: one line per refresh, `{"time",
/// "bots": [… each with "host"], "hosts": [{"host", "state", "error"?}]}`. Ends as `top` does.
pub async fn run_fleet(
    members: &[crate::fleet::Member],
    interval: f64,
    iterations: Option<u64>,
    json: bool,
) -> Result<u8, Failure> {
    use crate::fleet::{HOST_BOUND, HostBots, Kept};
    let ctrl_c = stop_asked();
    tokio::pin!(ctrl_c);
    let (screen, mut keys) = terminal(json, iterations);
    let mut kept: Vec<Kept> = members.iter().cloned().map(Kept::new).collect();
    let bound = Duration::from_secs_f64(interval.max(1.0)).min(HOST_BOUND);
    let mut seen: HashMap<String, Seen> = HashMap::new();
    let mut done = 0u64;
    loop {
        let began = Instant::now();
        let read = futures_util::future::join_all(kept.iter_mut().map(|k| async {
            let got = k.read(bound).await;
            (k.member.name.clone(), got)
        }));
        let read = tokio::select! {
            r = read => r,
            _ = &mut ctrl_c => return Ok(OK),
        };
        let now = Instant::now();
        let mut all = Vec::new();
        let mut hosts = Vec::new();
        for (host, got) in read {
            match got {
                HostBots::Online(bots, _) => {
                    hosts.push(json!({"host": host, "state": "online"}));
                    all.extend(bots.into_iter().map(|mut b| {
                        b.name = format!("{host}:{}", b.name);
                        // CPU% is followed per host: ids are each host's own.
                        b.id = format!("{host}:{}", b.id);
                        (host.clone(), b)
                    }));
                }
                HostBots::Offline(why) => {
                    hosts.push(json!({"host": host, "state": "offline", "error": why}));
                }
            }
        }
        let (hosts_of, infos): (Vec<String>, Vec<BotInfo>) = all.into_iter().unzip();
        let rows = with_cpu(infos, &seen, now);
        seen = seen_now(&rows, now);
        match &screen {
            Some(screen) => {
                let mut lines = screen_lines(&rows, interval);
                for h in hosts.iter().filter(|h| h["state"] == "offline") {
                    lines.push(show::paint(
                        show::ERROR,
                        &format!(
                            "{}: offline: {}",
                            show::safe(h["host"].as_str().unwrap_or_default()),
                            show::safe(h["error"].as_str().unwrap_or_default())
                        ),
                    ));
                }
                screen.draw(&lines);
            }
            None => {
                let bots: Vec<Value> = rows
                    .iter()
                    .zip(&hosts_of)
                    .map(|((b, cpu), host)| {
                        let mut v = row_json(b, *cpu);
                        // The bot as its own host names it.
                        let prefix = format!("{host}:");
                        v["id"] = json!(b.id.strip_prefix(&prefix).unwrap_or(&b.id));
                        v["name"] = json!(b.name.strip_prefix(&prefix).unwrap_or(&b.name));
                        v["host"] = json!(host);
                        v
                    })
                    .collect();
                let line = json!({
                    "time": botvisor::time::now_rfc3339(),
                    "bots": bots,
                    "hosts": hosts,
                });
                if !print_line(&line) {
                    return Ok(OK);
                }
            }
        }
        done += 1;
        if iterations.is_some_and(|n| done >= n) {
            return Ok(OK);
        }
        // Every `interval` from the start of one refresh to the next: a host that took its
        // whole bound does not stretch it.
        let left = Duration::from_secs_f64(interval).saturating_sub(began.elapsed());
        if quit_while_waiting(left, ctrl_c.as_mut(), &mut keys).await {
            return Ok(OK);
        }
    }
}
