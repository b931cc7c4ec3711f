//! After a daemon crash, with cgroup containment (design rule 10): whatever is still in the
//! bots' cgroups is killed before any bot runs, even processes the previous run never recorded
//! (a tool forked after its last snapshot), and each bot's chat says so.

use super::{BotError, Supervisor, bot};
use crate::process::cgroup;
use crate::store;

impl Supervisor {
    /// Empties every cgroup under `bots/` (`cgroup.kill`, then `populated 0`) and removes it.
    /// Returns how many processes were killed. Runs after the recorded processes were stopped
    /// gently by identity, so it finds only what they did not cover.
    pub(super) async fn recover_cgroups(&self) -> Result<usize, BotError> {
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
            let list = |v: &[u32]| v.iter().map(u32::to_string).collect::<Vec<_>>().join(", ");
            let mut text = format!(
                "botvisord restarted and found {} process(es) its previous run left in this \
                 bot's cgroup (pid {}); it killed them (cgroup.kill)",
                emptied.killed.len(),
                list(&emptied.killed)
            );
            if emptied.left.is_empty() {
                text.push_str(" and the cgroup is empty.");
            } else {
                text.push_str(&format!(", but pid {} did not exit.", list(&emptied.left)));
            }
            tracing::warn!(bot_id = %bot_id, "{text}");
            if self.get(&bot_id).is_err() {
                continue;
            }
            let payload = serde_json::json!({
                "text": text, "reason": "recovered_cgroup", "pids": emptied.killed,
                "survivors": emptied.left,
            })
            .to_string();
            let publisher = &self.publisher;
            self.store.tx_then(
                |tx| store::chat::append(tx, &bot_id, "system", None, &payload),
                |item| bot::publish_item(publisher, &bot_id, item),
            )?;
        }
        Ok(total)
    }
}
