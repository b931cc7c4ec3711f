//! After a daemon crash, before any bot runs: the processes the previous run left are stopped by
//! identity, with their descendants (design rule 9), then whatever is still in the bots' cgroups
//! is killed (rule 10: even what that run never recorded, a tool forked after its last
//! snapshot), and each bot's chat says so. A bot a Delete marked before the crash is stopped
//! with the rest, then deleted.
//!
//! What to stop and what to say are decided by the pure functions at the top ([`targets`],
//! [`add_marked`], [`observation`], [`stopped_text`], [`cgroup_text`]); [`stop_all`] reads the
//! system, carries them out and records.

use std::collections::{BTreeMap, BTreeSet};

use crate::process::identity::{Liveness, ProcessIdentity};
use crate::process::verdict::{StopObservation, StopVerdict, verdict};
use crate::store::{self, processes::ProcessRecord};
use crate::supervisor::{BotError, Supervisor, bot};

/// The processes of one bot to stop: each recorded one that is still `alive` (same identity),
/// followed by its descendants, each once, in that order.
fn targets(
    records: &[ProcessRecord],
    alive: impl Fn(&ProcessIdentity) -> bool,
    descendants: impl Fn(u32) -> Vec<ProcessIdentity>,
) -> Vec<ProcessIdentity> {
    let mut out: Vec<ProcessIdentity> = Vec::new();
    for r in records {
        if out.contains(&r.identity) || !alive(&r.identity) {
            continue;
        }
        out.push(r.identity.clone());
        for d in descendants(r.identity.pid) {
            if !out.contains(&d) {
                out.push(d);
            }
        }
    }
    out
}

/// Adds, as role `marked`, the processes found carrying a bot's marker that its records lack.
fn add_marked(
    by_bot: &mut BTreeMap<String, Vec<ProcessRecord>>,
    marked: BTreeMap<String, Vec<ProcessIdentity>>,
) {
    for (bot_id, found) in marked {
        let recs = by_bot.entry(bot_id.clone()).or_default();
        for identity in found {
            if !recs.iter().any(|r| r.identity == identity) {
                recs.push(ProcessRecord {
                    bot_id: bot_id.clone(),
                    identity,
                    role: "marked".to_owned(),
                });
            }
        }
    }
}

/// What the stop observed, as the verdict reads it: the root (a `roots` identity) exited when
/// none of them is still alive; the rest are the descendants.
fn observation(
    observed: Vec<(ProcessIdentity, Liveness)>,
    roots: &[ProcessIdentity],
) -> StopObservation {
    let root_exited = observed
        .iter()
        .all(|(id, l)| !roots.contains(id) || *l != Liveness::Alive);
    StopObservation {
        root_exited,
        descendants: observed
            .into_iter()
            .filter(|(id, _)| !roots.contains(id))
            .collect(),
        proof: bot::PROOF,
    }
}

/// The bot's `system` item's words for processes stopped by identity: how many, which pids,
/// the verdict, and the verdict's report when it is not clean.
fn stopped_text(targets: &[ProcessIdentity], v: &StopVerdict, root_pid: u32) -> String {
    let pids: Vec<String> = targets.iter().map(|t| t.pid.to_string()).collect();
    let mut text = format!(
        "botvisord restarted and found {} process(es) of this bot left by its previous run \
         (pid {}); it stopped them (verdict: {}).",
        targets.len(),
        pids.join(", "),
        v.name()
    );
    if let Some(report) = v.report(root_pid) {
        text.push(' ');
        text.push_str(&report);
    }
    text
}

/// The bot's `system` item's words for a cgroup emptied: what was killed, and what did not exit.
fn cgroup_text(killed: &[u32], left: &[u32]) -> String {
    let list = |v: &[u32]| v.iter().map(u32::to_string).collect::<Vec<_>>().join(", ");
    let mut text = format!(
        "botvisord restarted and found {} process(es) its previous run left in this bot's \
         cgroup (pid {}); it killed them (cgroup.kill)",
        killed.len(),
        list(killed)
    );
    if left.is_empty() {
        text.push_str(" and the cgroup is empty.");
    } else {
        text.push_str(&format!(", but pid {} did not exit.", list(left)));
    }
    text
}

/// At daemon start, before any bot runs: every process the previous run recorded that is still
/// alive (same identity) and, without cgroup containment, every process that carries a bot's
/// marker ([`crate::process::marked`]) is stopped by identity, with its descendants, then the
/// bots' cgroups are emptied; each bot's chat says so. Bots a Delete marked are then deleted
/// (not when this failed: their process records would go with them, and the next start could
/// not find what is left). Returns how many processes were alive.
pub(super) async fn stop_all(
    supervisor: &Supervisor,
    kept: &BTreeSet<String>,
) -> Result<usize, BotError> {
    let result = stop_recorded(supervisor, kept).await;
    if result.is_ok() {
        match supervisor.store().tx(|tx| store::bots::purge_deleting(tx)) {
            Ok(0) => {}
            Ok(n) => tracing::info!(count = n, "deleted the bots a Delete marked before a crash"),
            Err(e) => tracing::error!(error = %e, "cannot delete the bots a Delete marked"),
        }
    }
    result
}

/// Every recorded process but those of the bots in `kept` (agents handed over to this run,
/// issue 47: taken over, not stopped).
async fn stop_recorded(
    supervisor: &Supervisor,
    kept: &BTreeSet<String>,
) -> Result<usize, BotError> {
    let store = supervisor.store();
    let publisher = supervisor.publisher();
    let deleting: BTreeSet<String> = store.read(store::bots::deleting)?.into_iter().collect();
    let mut by_bot: BTreeMap<String, Vec<ProcessRecord>> = BTreeMap::new();
    for r in store.read(store::processes::all)? {
        if kept.contains(&r.bot_id) {
            continue;
        }
        by_bot.entry(r.bot_id.clone()).or_default().push(r);
    }
    // Without cgroups, what the previous run never recorded (a double fork after its last
    // snapshot, adopted by it and orphaned by its crash) is found by the marker it inherited.
    // Only after a crash: a run that stopped its agents cleared their records, and then nothing
    // of it can be left to find (no /proc scan at every start).
    if !by_bot.is_empty() && crate::process::cgroup::subtree().is_none() {
        let mut ids: BTreeSet<String> = supervisor
            .list()
            .iter()
            .map(|h| h.id.clone())
            .filter(|id| !kept.contains(id))
            .collect();
        ids.extend(deleting.iter().cloned());
        add_marked(&mut by_bot, crate::process::marked::marked(&ids));
    }
    let mut alive_total = 0;
    for (bot_id, recs) in by_bot {
        let targets = targets(
            &recs,
            |id| crate::process::identity::liveness(id) == Liveness::Alive,
            crate::process::tree::descendants,
        );
        if targets.is_empty() {
            store.tx(|tx| store::processes::clear(tx, &bot_id))?;
            continue;
        }
        alive_total += targets.len();
        let observed =
            crate::process::stop::stop_by_identity(&targets, supervisor.config().stop_grace())
                .await;
        let roots: Vec<_> = recs
            .iter()
            .filter(|r| r.role == "root")
            .map(|r| r.identity.clone())
            .collect();
        let v = verdict(&observation(observed, &roots));
        let text = stopped_text(&targets, &v, roots.first().map_or(0, |r| r.pid));
        tracing::warn!(bot_id = %bot_id, verdict = v.name(), "{text}");
        if deleting.contains(&bot_id) {
            // Deleted: no chat to tell; the journal said it.
            store.tx(|tx| store::processes::clear(tx, &bot_id))?;
            continue;
        }
        let pids: Vec<u32> = targets.iter().map(|t| t.pid).collect();
        let payload = serde_json::json!({
            "text": text, "reason": "recovered_processes", "verdict": v.name(), "pids": pids
        })
        .to_string();
        store.tx_then(
            |tx| {
                store::processes::clear(tx, &bot_id)?;
                store::chat::append(tx, &bot_id, "system", None, &payload)
            },
            |item| bot::publish_item(publisher, &bot_id, item),
        )?;
    }
    Ok(alive_total + empty_cgroups(supervisor).await?)
}

/// Empties every cgroup under `bots/` (`cgroup.kill`, then `populated 0`) and removes it.
/// Returns how many processes were killed. Runs after the recorded processes were stopped
/// gently by identity, so it finds only what they did not cover.
async fn empty_cgroups(supervisor: &Supervisor) -> Result<usize, BotError> {
    use crate::process::cgroup;
    let Some(subtree) = cgroup::subtree() else {
        return Ok(0);
    };
    let mut total = 0;
    for (bot_id, dir) in subtree.bot_cgroups() {
        let emptied = match cgroup::empty_out(&dir, cgroup::KILL_WAIT).await {
            Ok(e) => e,
            Err(e) => {
                tracing::error!(bot_id = %bot_id, cgroup = %dir.display(), error = %e, "cannot empty a bot's cgroup left by the previous run");
                continue;
            }
        };
        if emptied.killed.is_empty() {
            continue;
        }
        total += emptied.killed.len();
        let text = cgroup_text(&emptied.killed, &emptied.left);
        tracing::warn!(bot_id = %bot_id, "{text}");
        if supervisor.get(&bot_id).is_err() {
            continue;
        }
        let payload = serde_json::json!({
            "text": text, "reason": "recovered_cgroup", "pids": emptied.killed,
            "survivors": emptied.left,
        })
        .to_string();
        let publisher = supervisor.publisher();
        supervisor.store().tx_then(
            |tx| store::chat::append(tx, &bot_id, "system", None, &payload),
            |item| bot::publish_item(publisher, &bot_id, item),
        )?;
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(pid: u32) -> ProcessIdentity {
        ProcessIdentity {
            pid,
            start_time: u64::from(pid) * 10,
            boot_id: "boot".to_owned(),
        }
    }

    fn record(pid: u32, role: &str) -> ProcessRecord {
        ProcessRecord {
            bot_id: "b".to_owned(),
            identity: id(pid),
            role: role.to_owned(),
        }
    }

    #[test]
    fn rule_9_only_live_recorded_processes_are_stopped_with_their_descendants_once() {
        // Descendants are the whole tree below a pid (`process::tree::descendants`).
        let records = [
            record(1, "root"),
            record(2, "descendant"),
            record(3, "descendant"),
            record(6, "descendant"),
        ];
        let got = targets(
            &records,
            |p| p.pid != 3,
            |pid| match pid {
                1 => vec![id(2), id(4), id(5)],
                2 => vec![id(4)],
                6 => vec![id(5), id(7)],
                _ => Vec::new(),
            },
        );
        assert_eq!(got, vec![id(1), id(2), id(4), id(5), id(6), id(7)]);
    }

    #[test]
    fn rule_9_a_pid_reused_by_another_process_is_not_a_target() {
        // The same pid with another start time is another process: dead to the record.
        let records = [record(7, "root")];
        let got = targets(&records, |p| *p != id(7), |_| vec![id(8)]);
        assert!(got.is_empty(), "{got:?}");
    }

    #[test]
    fn marked_processes_join_the_records_once() {
        let mut by_bot = BTreeMap::from([("b".to_owned(), vec![record(1, "root")])]);
        add_marked(
            &mut by_bot,
            BTreeMap::from([
                ("b".to_owned(), vec![id(1), id(9)]),
                ("gone".to_owned(), vec![id(11)]),
            ]),
        );
        let roles: Vec<(u32, &str)> = by_bot["b"]
            .iter()
            .map(|r| (r.identity.pid, r.role.as_str()))
            .collect();
        assert_eq!(roles, vec![(1, "root"), (9, "marked")]);
        assert_eq!(by_bot["gone"][0].identity, id(11));
    }

    #[test]
    fn the_root_exited_unless_a_root_is_still_alive() {
        let roots = [id(1)];
        let o = observation(
            vec![(id(1), Liveness::Gone), (id(2), Liveness::Alive)],
            &roots,
        );
        assert!(o.root_exited);
        assert_eq!(o.descendants, vec![(id(2), Liveness::Alive)]);
        let o = observation(vec![(id(1), Liveness::Alive)], &roots);
        assert!(!o.root_exited);
        assert!(o.descendants.is_empty());
    }

    #[test]
    fn the_chat_names_the_pids_and_the_verdict() {
        let v = verdict(&observation(vec![(id(1), Liveness::Gone)], &[id(1)]));
        let text = stopped_text(&[id(1), id(2)], &v, 1);
        assert!(text.contains("found 2 process(es)"), "{text}");
        assert!(text.contains("(pid 1, 2)"), "{text}");
        assert!(text.contains(&format!("verdict: {}", v.name())), "{text}");
        assert!(cgroup_text(&[5, 6], &[]).ends_with("(cgroup.kill) and the cgroup is empty."));
        assert!(cgroup_text(&[5, 6], &[6]).ends_with(", but pid 6 did not exit."));
    }
}
