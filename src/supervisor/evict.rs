//! Memory where it matters (issue 31), the shell: while the kernel reports memory pressure
//! (`process::pressure`), idle bots are stopped, the least recently used first, one per event
//! ([`Supervisor::relieve_memory`]), as `core::evict` decides and each bot's actor confirms. An
//! event comes at most once per `memory_pressure_window_s` (the kernel's trigger), so a lasting
//! pressure stops one bot per window, not all at once: each stop gives a CLI's memory back
//! (about 209 MiB for a Claude Code), and the next event says whether that was enough.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::{Command, Supervisor};
use crate::process::pressure;
use crate::process::usage::Usage;
use crate::supervisor::core::evict::{self, Candidate};

/// How long past `stop_grace_s` a bot asked to stop for memory pressure may take to answer: the
/// SIGKILL wait, the clean-up of its descendants and a commit that waits for the database.
pub const ANSWER_PAST_GRACE: Duration = Duration::from_secs(30);

/// A bot stopped to give memory back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Relieved {
    /// The bot.
    pub bot_id: String,
    /// How long it had not been used (`None`: not in this daemon run).
    pub idle_for: Option<Duration>,
    /// Its agent's memory as last sampled, bytes (`None`: not known; sampled while the bot was
    /// busy, so what its last turn left).
    pub memory: Option<u64>,
}

impl Supervisor {
    /// The bots that may be stopped for memory pressure now, least recently used first
    /// ([`evict::order`] over every bot's view).
    pub fn memory_order(&self) -> Vec<String> {
        let candidates: Vec<Candidate<String, Instant>> = self
            .list()
            .iter()
            .map(|h| {
                let v = h.view.read();
                Candidate {
                    bot: h.id.clone(),
                    activity: v.activity,
                    last_used: v.last_used,
                }
            })
            .collect();
        evict::order(&candidates)
    }

    /// One memory pressure event: the bots of [`Supervisor::memory_order`] are asked in that
    /// order to stop ([`Command::MemoryPressure`]) until one does; a bot that is no longer idle
    /// says no at once and the next is asked. Each answer is awaited at most `stop_grace_s` plus
    /// [`ANSWER_PAST_GRACE`]; a bot that does not answer in time ends the attempt (its stop may
    /// still go on). Returns the bot stopped, if any.
    pub async fn relieve_memory(&self) -> Option<Relieved> {
        let bound = self.config.stop_grace() + ANSWER_PAST_GRACE;
        for id in self.memory_order() {
            let Ok(handle) = self.get(&id) else {
                continue;
            };
            let (memory, last_used) = {
                let v = handle.view.read();
                let m = v.usage.memory_current;
                (
                    (m != Usage::UNKNOWN.memory_current).then_some(m),
                    v.last_used,
                )
            };
            let (tx, rx) = oneshot::channel();
            if handle.command(Command::MemoryPressure(tx)).is_err() {
                continue;
            }
            match tokio::time::timeout(bound, rx).await {
                Ok(Ok(true)) => {
                    return Some(Relieved {
                        bot_id: id,
                        idle_for: last_used.map(|t| t.elapsed()),
                        memory,
                    });
                }
                // No longer idle, or its actor ended (deleted meanwhile): the next one.
                Ok(Ok(false) | Err(_)) => {}
                Err(_) => {
                    tracing::warn!(
                        bot_id = %id,
                        bound_s = bound.as_secs(),
                        "a bot asked to stop for memory pressure did not answer in time; no \
                         other bot is stopped for this event"
                    );
                    return None;
                }
            }
        }
        None
    }
}

/// Watches memory pressure for as long as botvisord runs, unless `stop_idle_on_memory_pressure`
/// is off or no pressure file can be watched (a kernel without PSI): the journal says which,
/// once, and `None` is returned. Otherwise each event stops at most one idle bot
/// ([`Supervisor::relieve_memory`]), said in the journal; the task ends with the watch (its
/// file's end, said as a warning). Call it within the async runtime, once the bots run.
pub fn follow(supervisor: Arc<Supervisor>) -> Option<tokio::task::JoinHandle<()>> {
    let config = supervisor.config().clone();
    if !config.stop_idle_on_memory_pressure {
        tracing::info!(
            "stop_idle_on_memory_pressure is off: no bot is stopped for memory pressure"
        );
        return None;
    }
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let files = pressure::candidates(
        config.memory_pressure_file.as_deref(),
        crate::process::cgroup::subtree().map(|s| s.root.as_path()),
        &read("/proc/self/cgroup"),
        &read("/proc/self/mountinfo"),
    );
    let trigger = config.memory_pressure_trigger();
    let mut watch = match pressure::watch(&files, &trigger) {
        Ok(w) => w,
        Err(why) => {
            tracing::info!(
                "no memory pressure to watch ({why}); no bot is stopped for memory pressure"
            );
            return None;
        }
    };
    tracing::info!(
        file = %watch.path().display(),
        stall_ms = config.memory_pressure_stall_ms,
        window_s = config.memory_pressure_window_s,
        "watching memory pressure: idle bots are stopped under it, the least recently used first"
    );
    Some(tokio::spawn(async move {
        // "Nothing to stop" is said at info once, then at debug until a bot is stopped again: a
        // lasting pressure sends an event every window.
        let mut said_nothing = false;
        loop {
            let pressure = match watch.next().await {
                Ok(p) => p,
                Err(e) => {
                    tracing::warn!(
                        file = %watch.path().display(),
                        error = %e,
                        "memory pressure is no longer watched"
                    );
                    return;
                }
            };
            match supervisor.relieve_memory().await {
                Some(r) => {
                    said_nothing = false;
                    tracing::info!(
                        bot_id = %r.bot_id,
                        why = "memory pressure",
                        idle_s = r.idle_for.map(|d| d.as_secs()),
                        memory_bytes = r.memory,
                        %pressure,
                        "stopped the least recently used idle bot to give memory back"
                    );
                }
                None if !said_nothing => {
                    said_nothing = true;
                    tracing::info!(%pressure, "{NOTHING_TO_STOP}");
                }
                None => tracing::debug!(%pressure, "{NOTHING_TO_STOP}"),
            }
        }
    }))
}

/// The journal's words for a pressure event that stopped no bot.
pub const NOTHING_TO_STOP: &str = "memory pressure, but no bot may be stopped: each running agent \
     has a turn, a queued message, a permission prompt, a background task, a live descendant or \
     a holder";
