//! After a daemon crash: the processes the previous run left are stopped by identity before
//! any bot runs (design rule 9), then what is left in the bots' cgroups (rule 10, cgroups.rs),
//! and each bot's chat says so.

use std::collections::BTreeMap;

use super::{BotError, Supervisor, bot};
use crate::store;

impl Supervisor {
    /// At daemon start, before any bot runs: every process the previous run recorded that is
    /// still alive (same identity) and, without cgroup containment, every process that carries a
    /// bot's marker ([`crate::process::marked`]) is stopped by identity, with its descendants,
    /// and each bot's chat says so. Returns how many were alive.
    /// A bot a Delete marked (the daemon crashed before its actor deleted it) is stopped with
    /// the rest, then deleted.
    pub async fn recover_processes(&self) -> Result<usize, BotError> {
        let result = self.recover_left_processes().await;
        // Bots a Delete marked before a crash: their processes were stopped with the rest. Not
        // when that failed: their process records would go with them, and the next start could
        // not find what is left.
        if result.is_ok() {
            match self.store.tx(|tx| store::bots::purge_deleting(tx)) {
                Ok(0) => {}
                Ok(n) => {
                    tracing::info!(count = n, "deleted the bots a Delete marked before a crash")
                }
                Err(e) => tracing::error!(error = %e, "cannot delete the bots a Delete marked"),
            }
        }
        result
    }

    async fn recover_left_processes(&self) -> Result<usize, BotError> {
        use crate::process::identity::{Liveness, liveness};
        use crate::process::verdict::{StopObservation, verdict};
        let deleting: std::collections::BTreeSet<String> = self
            .store
            .read(store::bots::deleting)?
            .into_iter()
            .collect();
        let records = self.store.read(store::processes::all)?;
        let mut by_bot: BTreeMap<String, Vec<store::processes::ProcessRecord>> = BTreeMap::new();
        for r in records {
            by_bot.entry(r.bot_id.clone()).or_default().push(r);
        }
        // Without cgroups, what the previous run never recorded (a double fork after its last
        // snapshot, adopted by it and orphaned by its crash) is found by the marker it inherited.
        // Only after a crash: a run that stopped its agents cleared their records, and then
        // nothing of it can be left to find (no /proc scan at every start).
        if !by_bot.is_empty() && crate::process::cgroup::subtree().is_none() {
            let mut ids: std::collections::BTreeSet<String> =
                self.list().iter().map(|h| h.id.clone()).collect();
            ids.extend(deleting.iter().cloned());
            for (bot_id, found) in crate::process::marked::marked(&ids) {
                let recs = by_bot.entry(bot_id.clone()).or_default();
                for identity in found {
                    if !recs.iter().any(|r| r.identity == identity) {
                        recs.push(store::processes::ProcessRecord {
                            bot_id: bot_id.clone(),
                            identity,
                            role: "marked".to_owned(),
                        });
                    }
                }
            }
        }
        if by_bot.is_empty() {
            return self.recover_cgroups().await;
        }
        let mut alive_total = 0;
        for (bot_id, recs) in by_bot {
            let mut targets = Vec::new();
            for r in &recs {
                if liveness(&r.identity) == Liveness::Alive && !targets.contains(&r.identity) {
                    targets.push(r.identity.clone());
                    for d in crate::process::tree::descendants(r.identity.pid) {
                        if !targets.contains(&d) {
                            targets.push(d);
                        }
                    }
                }
            }
            if !targets.is_empty() {
                alive_total += targets.len();
                let observed =
                    crate::process::stop::stop_by_identity(&targets, self.config.stop_grace())
                        .await;
                let roots: Vec<_> = recs
                    .iter()
                    .filter(|r| r.role == "root")
                    .map(|r| r.identity.clone())
                    .collect();
                let root_exited = observed
                    .iter()
                    .all(|(id, l)| !roots.contains(id) || *l != Liveness::Alive);
                let v = verdict(&StopObservation {
                    root_exited,
                    descendants: observed
                        .into_iter()
                        .filter(|(id, _)| !roots.contains(id))
                        .collect(),
                    proof: bot::PROOF,
                });
                let pids: Vec<u32> = targets.iter().map(|t| t.pid).collect();
                let mut text = format!(
                    "botvisord restarted and found {} process(es) of this bot left by its \
                     previous run (pid {}); it stopped them (verdict: {}).",
                    targets.len(),
                    pids.iter()
                        .map(u32::to_string)
                        .collect::<Vec<_>>()
                        .join(", "),
                    v.name()
                );
                if let Some(report) = v.report(roots.first().map_or(0, |r| r.pid)) {
                    text.push(' ');
                    text.push_str(&report);
                }
                tracing::warn!(bot_id = %bot_id, verdict = v.name(), "{text}");
                let payload = serde_json::json!({
                    "text": text, "reason": "recovered_processes", "verdict": v.name(), "pids": pids
                })
                .to_string();
                let publisher = &self.publisher;
                if deleting.contains(&bot_id) {
                    // Deleted: no chat to tell; the journal said it.
                    self.store.tx(|tx| store::processes::clear(tx, &bot_id))?;
                    continue;
                }
                self.store.tx_then(
                    |tx| {
                        store::processes::clear(tx, &bot_id)?;
                        store::chat::append(tx, &bot_id, "system", None, &payload)
                    },
                    |item| bot::publish_item(publisher, &bot_id, item),
                )?;
            } else {
                self.store.tx(|tx| store::processes::clear(tx, &bot_id))?;
            }
        }
        Ok(alive_total + self.recover_cgroups().await?)
    }

    /// Writes to the database fail (`Some(why)`) or succeed again (`None`): every bot's
    /// `LastError` says so while it lasts (design rule 15).
    pub fn set_storage_error(&self, why: Option<String>) {
        let text = why.map(|w| {
            format!(
                "botvisord cannot write its database: {w}. What the agents say is kept and \
                 written once it can; calls that must write answer StorageUnavailable meanwhile."
            )
        });
        for h in self.list() {
            bot::update_view(&h.view, &self.publisher, &h.id, vec!["LastError"], |v| {
                v.storage_error = text.clone()
            });
        }
    }
}
