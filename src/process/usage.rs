//! What a bot's processes use, named as systemd names it for units: `MemoryCurrent` (bytes),
//! `CPUUsageNSec` (nanoseconds of CPU time since the agent started) and `TasksCurrent` (tasks,
//! that is threads).
//!
//! From the bot's cgroup where it has one: `memory.current` and `pids.current` where those
//! controllers are enabled, `cpu.stat` `usage_usec` (always there in cgroup v2); a value whose
//! controller is missing is summed over the cgroup's `cgroup.procs` instead. Without a cgroup,
//! summed over the bot's known processes with sysinfo, refreshing those pids only (a full
//! process refresh costs 55–95 ms at 2,000 processes). [`Watch`] samples at a bounded rate, and
//! only while it is told the bot is active.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use sysinfo::{Pid, ProcessRefreshKind, ProcessesToUpdate, System};
use tokio::sync::watch;

/// One sample. `u64::MAX` in a field means "not known" (no process, or unreadable), as systemd
/// shows `[not set]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    /// Memory in use, bytes (`memory.current`, else the sum of the processes' resident sets).
    pub memory_current: u64,
    /// CPU time used since the agent started, nanoseconds (user + system).
    pub cpu_usage_nsec: u64,
    /// Tasks (threads) now.
    pub tasks_current: u64,
}

impl Usage {
    /// Nothing known: no process runs.
    pub const UNKNOWN: Usage = Usage {
        memory_current: u64::MAX,
        cpu_usage_nsec: u64::MAX,
        tasks_current: u64::MAX,
    };
}

impl Default for Usage {
    fn default() -> Self {
        Usage::UNKNOWN
    }
}

/// Where a bot's usage is read.
#[derive(Debug, Clone)]
pub enum Source {
    /// The bot's cgroup folder, with the controllers enabled for it.
    Cgroup {
        /// The folder.
        dir: PathBuf,
        /// `memory.current` is there.
        memory: bool,
        /// `pids.current` is there.
        pids: bool,
    },
    /// The agent's systemd scope (issue 47) once the user manager has made it and `dir` says
    /// its cgroup folder: read as [`Source::Cgroup`], each controller used where its file is
    /// there (the user manager enables `memory` and `pids` for a scope where it has them);
    /// until then, and where the folder is gone, as [`Source::Tree`] of `root`.
    Scope {
        /// The scope's cgroup folder, set by whoever learns it from the manager.
        dir: std::sync::Arc<std::sync::Mutex<Option<PathBuf>>>,
        /// The agent's pid.
        root: u32,
        /// The bot id (the marker).
        bot_id: String,
    },
    /// The processes of the tree rooted at this pid, plus the orphans the daemon adopted that
    /// carry this bot's marker.
    Tree {
        /// The agent's pid.
        root: u32,
        /// The bot id (the marker).
        bot_id: String,
    },
}

/// Samples one agent's usage; keeps the CPU time of processes that ended, so that
/// `cpu_usage_nsec` never goes down while the agent runs.
pub struct Sampler {
    /// `None` where sysinfo cannot read processes here.
    sys: Option<System>,
    /// CPU milliseconds last seen per (pid, start time).
    seen: HashMap<(u32, u64), u64>,
    /// CPU nanoseconds of processes that ended.
    gone_ns: u64,
}

impl Default for Sampler {
    fn default() -> Self {
        Sampler {
            sys: System::new().ok(),
            seen: HashMap::new(),
            gone_ns: 0,
        }
    }
}

impl Sampler {
    /// A sample from `source` now.
    pub fn sample(&mut self, source: &Source) -> Usage {
        match source {
            Source::Cgroup { dir, memory, pids } => self.sample_cgroup(dir, *memory, *pids),
            Source::Scope { dir, root, bot_id } => {
                let dir = dir.lock().unwrap_or_else(|p| p.into_inner()).clone();
                match dir.filter(|d| d.join("cgroup.procs").exists()) {
                    Some(d) => {
                        let (memory, pids) = (
                            d.join("memory.current").exists(),
                            d.join("pids.current").exists(),
                        );
                        self.sample_cgroup(&d, memory, pids)
                    }
                    None => self.sample_pids(&tree_pids(*root, bot_id)),
                }
            }
            Source::Tree { root, bot_id } => {
                let pids = tree_pids(*root, bot_id);
                self.sample_pids(&pids)
            }
        }
    }

    fn sample_cgroup(&mut self, dir: &Path, memory: bool, pids: bool) -> Usage {
        let read_u64 = |name: &str| {
            std::fs::read_to_string(dir.join(name))
                .ok()
                .and_then(|t| t.trim().parse::<u64>().ok())
        };
        let cpu = std::fs::read_to_string(dir.join("cpu.stat"))
            .ok()
            .and_then(|t| {
                t.lines()
                    .find_map(|l| l.strip_prefix("usage_usec "))
                    .and_then(|v| v.trim().parse::<u64>().ok())
            })
            .map(|us| us.saturating_mul(1000));
        let mem = if memory {
            read_u64("memory.current")
        } else {
            None
        };
        let tasks = if pids {
            read_u64("pids.current")
        } else {
            std::fs::read_to_string(dir.join("cgroup.threads"))
                .ok()
                .map(|t| t.lines().count() as u64)
        };
        let from_pids = if mem.is_none() || cpu.is_none() {
            Some(self.sample_pids(&super::cgroup::procs(dir)))
        } else {
            None
        };
        Usage {
            memory_current: mem
                .or(from_pids.map(|u| u.memory_current))
                .unwrap_or(u64::MAX),
            cpu_usage_nsec: cpu
                .or(from_pids.map(|u| u.cpu_usage_nsec))
                .unwrap_or(u64::MAX),
            tasks_current: tasks.unwrap_or(u64::MAX),
        }
    }

    /// Sums over `pids` with a refresh of those pids only.
    pub fn sample_pids(&mut self, pids: &[u32]) -> Usage {
        let want: Vec<Pid> = pids.iter().map(|p| Pid::from_u32(*p)).collect();
        let Some(sys) = self.sys.as_mut() else {
            return Usage::UNKNOWN;
        };
        sys.refresh_processes_specifics(
            ProcessesToUpdate::Some(&want),
            true,
            ProcessRefreshKind::nothing().with_memory().with_cpu(),
        );
        let mut memory = 0u64;
        let mut tasks = 0u64;
        let mut now: HashMap<(u32, u64), u64> = HashMap::new();
        for pid in &want {
            let Some(p) = sys.process(*pid) else {
                continue;
            };
            if matches!(p.status(), sysinfo::ProcessStatus::Zombie) {
                continue;
            }
            memory = memory.saturating_add(p.memory());
            tasks += threads(pid.as_u32());
            now.insert((pid.as_u32(), p.start_time()), p.accumulated_cpu_time());
        }
        for (key, ms) in &self.seen {
            if !now.contains_key(key) {
                self.gone_ns = self.gone_ns.saturating_add(ms.saturating_mul(1_000_000));
            }
        }
        let live_ns: u64 = now.values().map(|ms| ms.saturating_mul(1_000_000)).sum();
        self.seen = now;
        Usage {
            memory_current: memory,
            cpu_usage_nsec: self.gone_ns.saturating_add(live_ns),
            tasks_current: tasks,
        }
    }
}

/// The threads of a process (Linux: its `/proc/<pid>/task` entries; elsewhere 1).
fn threads(pid: u32) -> u64 {
    #[cfg(target_os = "linux")]
    {
        std::fs::read_dir(format!("/proc/{pid}/task"))
            .map(|d| d.count() as u64)
            .unwrap_or(1)
            .max(1)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = pid;
        1
    }
}

/// The agent, its descendants and the marked orphans the daemon adopted, with theirs.
fn tree_pids(root: u32, bot_id: &str) -> Vec<u32> {
    let mut pids = vec![root];
    let mut roots = vec![root];
    roots.extend(super::subreaper::adopted_orphans(bot_id));
    for r in roots {
        if r != root {
            pids.push(r);
        }
        pids.extend(super::tree::descendants(r).into_iter().map(|id| id.pid));
    }
    pids.sort_unstable();
    pids.dedup();
    pids
}

/// The sending side of a usage watch: tells it whether the bot is active. Dropping it ends the
/// watch, which then publishes [`Usage::UNKNOWN`].
pub struct Watch {
    active: watch::Sender<bool>,
}

impl Watch {
    /// Starts sampling `source` every `interval` while active (never while inactive; the first
    /// sample as soon as it becomes active, and a last one after it stops being active, so that
    /// an idle bot shows what its turn left, not what its launch had), handing each sample to
    /// `publish`. A zero interval never samples.
    ///
    /// At most one sample per `interval` (issue 50): a bot whose turns come faster (20 bots
    /// answering at once, hundreds of turns a second) has its next sample at the last one's
    /// time plus `interval`, not at each turn's start and end. Each sample walks the agent's
    /// process tree in `/proc` and publishes three properties to every client; two per turn
    /// were most of botvisord's time under a desktop's load. A last sample owed after a turn
    /// is taken once that time comes, even if the bot is idle by then.
    pub fn start(
        source: Source,
        interval: Duration,
        publish: impl Fn(Usage) + Send + 'static,
    ) -> Watch {
        let (tx, mut rx) = watch::channel(false);
        tokio::spawn(async move {
            let mut sampler = Sampler::default();
            if interval.is_zero() {
                while rx.changed().await.is_ok() {}
                publish(Usage::UNKNOWN);
                return;
            }
            let mut last: Option<tokio::time::Instant> = None;
            // A sample owed since the bot stopped being active.
            let mut owed = false;
            loop {
                let active = *rx.borrow_and_update();
                if !active && !owed {
                    // Ends when the sender is dropped (the process is gone).
                    if rx.changed().await.is_err() {
                        break;
                    }
                    continue;
                }
                let due = last.map_or_else(tokio::time::Instant::now, |l| l + interval);
                tokio::select! {
                    _ = tokio::time::sleep_until(due) => {
                        publish(sampler.sample(&source));
                        last = Some(tokio::time::Instant::now());
                        owed = false;
                    }
                    r = rx.changed() => {
                        if r.is_err() {
                            break;
                        }
                        if !*rx.borrow() {
                            owed = true;
                        }
                    }
                }
            }
            publish(Usage::UNKNOWN);
        });
        Watch { active: tx }
    }

    /// Whether the bot is active (busy, or running background tasks): only then is it sampled.
    pub fn set_active(&self, active: bool) {
        self.active
            .send_if_modified(|a| std::mem::replace(a, active) != active);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn samples_when_the_bot_becomes_active_and_once_more_when_it_stops() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let source = Source::Tree {
            root: std::process::id(),
            bot_id: "usage-test".into(),
        };
        let t0 = tokio::time::Instant::now();
        let watch = Watch::start(source, Duration::from_secs(3600), move |u| {
            let _ = tx.send((tokio::time::Instant::now(), u));
        });
        watch.set_active(true);
        let (at, first) = next(&mut rx).await;
        assert!(first.memory_current > 0, "when it becomes active");
        assert_eq!(at, t0, "at once");
        watch.set_active(false);
        let (at, last) = next(&mut rx).await;
        assert!(last.memory_current > 0, "when its turn ends");
        assert_eq!(
            at,
            t0 + Duration::from_secs(3600),
            "an interval after the first"
        );
        drop(watch);
        assert_eq!(
            next(&mut rx).await.1,
            Usage::UNKNOWN,
            "once the process is gone"
        );
    }

    /// Issue 50: turns that come faster than the interval are sampled once per interval, not
    /// at each start and end (a hundred turns here: two samples, not two hundred).
    #[tokio::test(start_paused = true)]
    async fn turns_faster_than_the_interval_are_sampled_once_per_interval() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let source = Source::Tree {
            root: std::process::id(),
            bot_id: "usage-test".into(),
        };
        let t0 = tokio::time::Instant::now();
        let watch = Watch::start(source, Duration::from_secs(2), move |u| {
            let _ = tx.send((tokio::time::Instant::now(), u));
        });
        for _ in 0..100 {
            watch.set_active(true);
            tokio::time::sleep(Duration::from_millis(5)).await;
            watch.set_active(false);
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // 1 s of turns, then idle: the first at once, the owed one 2 s after it, no more.
        tokio::time::sleep(Duration::from_secs(10)).await;
        drop(watch);
        let mut at = Vec::new();
        while let Some((when, u)) = rx.recv().await {
            if u == Usage::UNKNOWN {
                break;
            }
            at.push(when - t0);
        }
        assert_eq!(at, vec![Duration::ZERO, Duration::from_secs(2)]);
    }

    async fn next(
        rx: &mut tokio::sync::mpsc::UnboundedReceiver<(tokio::time::Instant, Usage)>,
    ) -> (tokio::time::Instant, Usage) {
        tokio::time::timeout(Duration::from_secs(7200), rx.recv())
            .await
            .expect("a sample")
            .expect("the watch runs")
    }

    #[test]
    fn sums_a_process_and_keeps_cpu_time_of_ended_ones() {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done"])
            .spawn()
            .unwrap();
        let mut s = Sampler::default();
        let me = std::process::id();
        let first = s.sample_pids(&[me, child.id()]);
        assert!(first.memory_current > 0, "{first:?}");
        assert!(first.tasks_current >= 2, "{first:?}");
        child.wait().unwrap();
        let after = s.sample_pids(&[me]);
        assert!(
            after.cpu_usage_nsec >= first.cpu_usage_nsec,
            "{first:?} {after:?}"
        );
        assert!(after.tasks_current >= 1);
    }
}
