//! The `[[hooks]]`: for each, a task that runs its command once per event it asked for, one at a
//! time, with the event as one JSON object (and a newline) on its standard input.
//!
//! Each hook has a queue of its own (`queue` events, default 64): while it runs, events wait
//! there; when it is full, an event is dropped and the log says so (the first drop at once, then
//! how many once the hook runs again), so a slow hook never holds up the others, the desktop or
//! botvisor-notify. A run is bounded by `timeout_s`: past it the hook's process group is killed.
//! Its standard output is discarded; its standard error is read as it comes (so it never blocks
//! on a full pipe) and its first [`KEPT_STDERR`] bytes are logged when it fails. Its environment
//! is botvisor-notify's with `BOTVISOR_EVENT`, `BOTVISOR_BOT_ID`, `BOTVISOR_BOT_NAME`,
//! `BOTVISOR_SUMMARY` and `BOTVISOR_BODY` added (escaped and bounded as a notification's words),
//! so a shell hook can use them without parsing JSON.

use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

use botvisor::config::notify::HookConfig;

use super::model::Happening;
use super::note;

/// The bytes of a hook's standard error kept for the log.
pub const KEPT_STDERR: usize = 1024;

/// How long a hook's standard error is read after it exited: a process it left running may
/// hold the pipe open, and is not waited for.
const STDERR_AFTER_EXIT: Duration = Duration::from_secs(1);

/// The hooks' tasks.
pub struct Hooks {
    workers: Vec<Worker>,
}

struct Worker {
    config: Arc<HookConfig>,
    tx: mpsc::Sender<Arc<Happening>>,
    /// Events dropped since the log last said so.
    dropped: Arc<AtomicU64>,
}

impl Hooks {
    /// Starts one task per hook.
    pub fn start(configs: &[HookConfig]) -> Hooks {
        let workers = configs
            .iter()
            .map(|c| {
                let config = Arc::new(c.clone());
                let (tx, rx) = mpsc::channel(c.queue);
                let dropped = Arc::new(AtomicU64::new(0));
                tokio::spawn(work(config.clone(), rx, dropped.clone()));
                Worker {
                    config,
                    tx,
                    dropped,
                }
            })
            .collect();
        Hooks { workers }
    }

    /// Queues each of `events` for the hooks that asked for it (and, for a bot a client holds,
    /// only for those with `when_held`); never waits.
    pub fn send(&self, events: &[Happening]) {
        for e in events {
            let mut shared = None;
            for w in &self.workers {
                if !w.config.wants(&e.event) || (e.held && !w.config.when_held) {
                    continue;
                }
                let ev = shared.get_or_insert_with(|| Arc::new(e.clone())).clone();
                match w.tx.try_send(ev) {
                    Ok(()) => {}
                    Err(mpsc::error::TrySendError::Full(_)) => {
                        if w.dropped.fetch_add(1, Ordering::SeqCst) == 0 {
                            tracing::warn!(
                                hook = %w.config.label(), event = %e.event,
                                "the hook's queue is full ({} events): events are dropped until it catches up",
                                w.config.queue
                            );
                        }
                    }
                    Err(mpsc::error::TrySendError::Closed(_)) => {}
                }
            }
        }
    }
}

async fn work(
    config: Arc<HookConfig>,
    mut rx: mpsc::Receiver<Arc<Happening>>,
    dropped: Arc<AtomicU64>,
) {
    while let Some(ev) = rx.recv().await {
        run(&config, &ev).await;
        let n = dropped.swap(0, Ordering::SeqCst);
        if n > 0 {
            tracing::warn!(hook = %config.label(), dropped = n, "events dropped while the hook's queue was full");
        }
    }
}

/// Runs the hook once for `ev`, bounded by its `timeout_s`; logs how it ended.
pub async fn run(config: &HookConfig, ev: &Happening) {
    let label = config.label();
    let text = format!("{}\n", botvisor::text::escape_json(&ev.json.to_string()));
    let s = |k: &str| ev.json[k].as_str().unwrap_or_default().to_owned();
    let bot = &ev.json["bot"];
    let mut cmd = tokio::process::Command::new(&config.command[0]);
    cmd.args(&config.command[1..])
        .env("BOTVISOR_EVENT", &ev.event)
        .env("BOTVISOR_BOT_ID", bot["id"].as_str().unwrap_or_default())
        .env(
            "BOTVISOR_BOT_NAME",
            note::line(bot["name"].as_str().unwrap_or_default(), 200),
        )
        .env("BOTVISOR_SUMMARY", s("summary"))
        .env("BOTVISOR_BODY", s("body"))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(hook = %label, event = %ev.event, "cannot run {}: {e}", config.command[0].escape_debug());
            return;
        }
    };
    let pgid = child.id();
    // Written by a task: a hook that never reads its input must not hold this one up.
    if let Some(mut stdin) = child.stdin.take() {
        tokio::spawn(async move {
            let _ = stdin.write_all(text.as_bytes()).await;
        });
    }
    // What the hook said is kept as it comes: a process it left behind that holds the pipe open
    // keeps the reader from its end, and what was read by then is still told.
    let kept = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let stderr = child.stderr.take().map(|mut err| {
        let kept = kept.clone();
        tokio::spawn(async move {
            let mut buf = [0u8; 8192];
            while let Ok(n) = err.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                let mut kept = kept.lock().unwrap_or_else(|p| p.into_inner());
                let room = KEPT_STDERR.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
            }
        })
    });
    let limit = Duration::from_secs_f64(config.timeout_s);
    let status = match tokio::time::timeout(limit, child.wait()).await {
        Ok(s) => s.map_err(|e| e.to_string()),
        Err(_) => {
            if let Some(pgid) = pgid {
                // SAFETY: kill(2) on the process group this hook was started in.
                unsafe { libc::kill(-(pgid as i32), libc::SIGKILL) };
            }
            let _ = child.wait().await;
            Err(format!(
                "killed after its timeout of {} s",
                config.timeout_s
            ))
        }
    };
    if let Some(mut task) = stderr {
        let _ = tokio::time::timeout(STDERR_AFTER_EXIT, &mut task).await;
        task.abort();
    }
    let said =
        String::from_utf8_lossy(&kept.lock().unwrap_or_else(|p| p.into_inner())).into_owned();
    let said = note::line(said.trim(), KEPT_STDERR);
    match status {
        Ok(s) if s.success() => tracing::debug!(hook = %label, event = %ev.event, "hook ran"),
        Ok(s) => {
            tracing::warn!(hook = %label, event = %ev.event, stderr = %said, "hook failed ({s})")
        }
        Err(e) => {
            tracing::warn!(hook = %label, event = %ev.event, stderr = %said, "hook failed: {e}")
        }
    }
}
