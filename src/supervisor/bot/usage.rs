//! The bot's cgroup and resource use (design rule 10, issue 15): where its agent is launched,
//! and the usage watch that samples it only while the bot is active.

use super::{Actor, update_view};
use crate::process;
use crate::supervisor::Property;
use crate::supervisor::core::State;
use std::time::Duration;

/// The bot properties a usage sample changes.
pub const USAGE_PROPERTIES: [Property; 3] = [
    Property::MemoryCurrent,
    Property::CpuUsageNsec,
    Property::TasksCurrent,
];

impl Actor {
    /// The cgroup folder the next agent starts in: `bots/<bot id>/` of the delegated subtree,
    /// created now; `None` without cgroup containment or when it cannot be created (the journal
    /// says why; the agent then runs contained by process tree only).
    pub(super) fn launch_cgroup(&self) -> Option<std::path::PathBuf> {
        let subtree = process::cgroup::subtree()?;
        let limit = crate::supervisor::memory_max::in_force(
            self.record().memory_max,
            self.shared.config.memory_max,
            process::cgroup::containment(),
        );
        match subtree.prepare_bot(&self.id, limit) {
            Ok(dir) => Some(dir),
            Err(e) => {
                tracing::warn!(bot_id = %self.id, error = %e, "cannot create the bot's cgroup; the agent runs without one");
                None
            }
        }
    }

    /// Starts sampling the resource use of the agent `pid` (in `cgroup` when it has one; in its
    /// scope under a user manager, once the scope is known).
    pub(super) fn watch_usage(
        &self,
        pid: u32,
        cgroup: Option<std::path::PathBuf>,
    ) -> process::usage::Watch {
        use process::usage::Source;
        let source = match (cgroup, process::cgroup::subtree()) {
            (Some(dir), Some(s)) => Source::Cgroup {
                dir,
                memory: s.has("memory"),
                pids: s.has("pids"),
            },
            _ if crate::systemd::life::keeper().is_some() => Source::Scope {
                dir: self.scope_dir.clone(),
                root: pid,
                bot_id: self.id.clone(),
            },
            _ => Source::Tree {
                root: pid,
                bot_id: self.id.clone(),
            },
        };
        let (view, publisher, id) = (
            self.view.clone(),
            self.shared.publisher.clone(),
            self.id.clone(),
        );
        let interval = Duration::from_secs_f64(self.shared.config.usage_interval_s);
        process::usage::Watch::start(source, interval, move |u| {
            update_view(&view, &publisher, &id, USAGE_PROPERTIES.to_vec(), |v| {
                v.usage = u
            })
        })
    }

    /// Tells the usage watch whether the bot is active: a process runs and is busy or runs
    /// background tasks. Never sampled otherwise.
    pub(super) fn usage_activity(&self) {
        if let Some(p) = &self.proc {
            let active = self.core.working(self.state() == State::Busy);
            p.usage.set_active(active);
        }
    }
}
