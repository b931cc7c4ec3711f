//! The bot actor: one task per bot that owns its process, its queue of messages and its state.
//!
//! Every input (a client's command, a stdout line, the process's exit, a restart timer) is
//! handled to its end before the next, so calls on one bot apply in order (design rule 7) and
//! there is never more than one live process per bot, hence per conversation.

use std::collections::{BTreeMap, VecDeque};
use std::path::Path;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;

use super::decide::{self, SessionChoice, TurnOutcome, UnreplayedFate};
use super::watchdog::{Expired, Watchdogs};
use super::{BotError, BotHandle, Command, PropertyValue, Publication, Publisher, Shared};
use crate::config::Config;
use crate::process::identity::{Liveness, ProcessIdentity, identify, liveness};
use crate::process::verdict::{Proof, StopObservation, StopVerdict, verdict};
use crate::process::{
    self, ExitInfo, ProcEvent, ProcessHandle, stop::stop_by_identity, subreaper, tree,
};
use crate::runtime::{
    ControlRequest, ForgetReason, LaunchSpec, PermissionAnswer, ResultOutcome, Runtime,
    RuntimeEvent, SessionStart, StartDecision, decide_start,
};
use crate::store::{self, BotRecord, ChatItem, QueuedTurn, Store};

/// Hard limit after SIGKILL for the root process to be reaped before the stop is declared failed.
pub const KILL_WAIT: Duration = Duration::from_secs(5);

/// How long descendants left after the root exited get between SIGTERM and SIGKILL.
pub const DESCENDANT_GRACE: Duration = Duration::from_secs(1);

/// How "gone" is proven on this system.
#[cfg(target_os = "linux")]
pub const PROOF: Proof = Proof::ProcessTree;
/// How "gone" is proven on this system.
#[cfg(not(target_os = "linux"))]
pub const PROOF: Proof = Proof::BestEffort;

/// At most one `TextDelta` signal per bot in this interval.
pub const TEXT_DELTA_INTERVAL: Duration = Duration::from_millis(50);

/// When descendants are looked for again after a tool starts.
pub const SNAPSHOT_AFTER_TOOL: [Duration; 2] = [Duration::from_millis(200), Duration::from_secs(1)];

/// Longest wait between two restarts after crashes.
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// A bot's state, as the `State` property shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// No process.
    Stopped,
    /// A process is running and no turn is.
    Idle,
    /// A process is running a turn.
    Busy,
    /// The process is being stopped.
    Stopping,
    /// Crash loop or a stop that failed: waits for an explicit restart.
    Failed,
}

impl State {
    /// The property value: `stopped`, `idle`, `busy`, `stopping`, `failed`.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Stopped => "stopped",
            State::Idle => "idle",
            State::Busy => "busy",
            State::Stopping => "stopping",
            State::Failed => "failed",
        }
    }
}

/// What clients may read of a bot without asking its actor.
#[derive(Debug, Clone)]
pub struct BotView {
    /// The stored record (kept in step with the database).
    pub record: BotRecord,
    /// The state.
    pub state: State,
    /// The root process's pid, 0 when none.
    pub process_id: u32,
    /// Messages sent and not yet taken by the CLI (not replayed).
    pub queued: u32,
    /// Clients holding the bot (leases).
    pub holders: u32,
    /// The verdict of the last stop (`clean`, `root-exited`, …); empty before the first.
    pub stop_verdict: String,
    /// Open permission requests: `(request_id, tool, input_json)`.
    pub pending: Vec<(String, String, String)>,
    /// The assistant text streamed so far in the message being written.
    pub partial_text: String,
    /// Why botvisord cannot write its database now (design rule 15); while set, `LastError`
    /// shows it instead of the recorded last error.
    pub storage_error: Option<String>,
}

impl BotView {
    /// The value of the D-Bus property `name` of the Bot interface (names as in the XML).
    pub fn property(&self, name: &str) -> PropertyValue {
        let s = |v: &str| PropertyValue::Str(v.to_owned());
        match name {
            "Id" => s(&self.record.id),
            "Name" => s(&self.record.name),
            "Cwd" => s(&self.record.cwd),
            "Runtime" => s(&self.record.runtime),
            "Model" => s(&self.record.model),
            "PermissionMode" => s(&self.record.permission_mode),
            "State" => s(self.state.as_str()),
            "SessionId" => s(self.record.session_id.as_deref().unwrap_or_default()),
            "ProcessId" => PropertyValue::U32(self.process_id),
            "LastError" => s(self
                .storage_error
                .as_deref()
                .unwrap_or(&self.record.last_error)),
            "QueuedMessages" => PropertyValue::U32(self.queued),
            "Holders" => PropertyValue::U32(self.holders),
            "StopVerdict" => s(&self.stop_verdict),
            "PendingPermissions" => PropertyValue::Triples(self.pending.clone()),
            _ => s(""),
        }
    }
}

struct Inflight {
    turn: QueuedTurn,
    replayed: bool,
    /// The conversation it was written to, and when.
    session: String,
    written: std::time::SystemTime,
}

struct Proc {
    handle: ProcessHandle,
    stdin: Option<mpsc::UnboundedSender<Vec<u8>>>,
    start: SessionStart,
    turn_began: bool,
    stopping: bool,
    lost: bool,
    in_use: Option<String>,
    /// A session id the CLI reported instead of the launched one, adopted once its transcript
    /// exists (design rule 3).
    reported_session: Option<String>,
    /// Control requests sent and not yet answered, by request id.
    pending_control: std::collections::HashMap<String, ControlRequest>,
}

/// What handling an event asks the actor to do next.
#[derive(Debug, PartialEq)]
enum Next {
    Nothing,
    StopProcess,
    Exited(ExitInfo),
}

struct Actor {
    id: String,
    runtime: Arc<dyn Runtime>,
    store: Arc<Store>,
    config: Arc<Config>,
    publisher: Publisher,
    view: Arc<RwLock<BotView>>,
    proc: Option<Proc>,
    generation: u64,
    proc_tx: mpsc::UnboundedSender<ProcEvent>,
    proc_rx: mpsc::UnboundedReceiver<ProcEvent>,
    queue: VecDeque<QueuedTurn>,
    inflight: Option<Inflight>,
    crashes: VecDeque<Instant>,
    restart_at: Option<tokio::time::Instant>,
    force_resume: Option<String>,
    in_use_retried: bool,
    parked: bool,
    control_seq: u64,
    /// Known descendants of the current (or last) process, by identity.
    known: Vec<ProcessIdentity>,
    /// Background tasks the CLI reports as running.
    background_tasks: usize,
    /// When the bot stops for idleness, if it stays idle.
    idle_deadline: Option<tokio::time::Instant>,
    /// A crashed process is to be restarted (messages wait or a client holds the bot).
    restart_pending: bool,
    /// A failure restarting cannot fix (authentication, usage limit), with the CLI's words.
    fatal: Option<String>,
    /// One-shot moments to look for descendants again after a tool started (a foreground tool
    /// prints nothing while it runs).
    snapshot_at: VecDeque<tokio::time::Instant>,
    /// Streamed text not yet signalled, and when it may be.
    delta_buf: String,
    delta_flush_at: Option<tokio::time::Instant>,
    last_delta_sent: Option<tokio::time::Instant>,
    /// The turn an `Interrupt` was sent for.
    interrupting: Option<String>,
    /// What the current process must do by when (design rule 15).
    watch: Watchdogs<tokio::time::Instant>,
    /// When the CLI's model-request retries were last noted in the chat.
    retry_notes: super::retry::RetryNotes,
    shared: Arc<Shared>,
}

/// Updates a bot's view and publishes the named properties with their new values, under the
/// view's lock so that publications follow the order of the updates.
pub(crate) fn update_view(
    view: &RwLock<BotView>,
    publisher: &Publisher,
    bot_id: &str,
    names: Vec<&'static str>,
    f: impl FnOnce(&mut BotView),
) {
    let mut v = view.write().unwrap_or_else(|p| p.into_inner());
    f(&mut v);
    if !names.is_empty() {
        let changed = names.into_iter().map(|n| (n, v.property(n))).collect();
        let _ = publisher.send(Publication::PropertiesChanged {
            bot_id: bot_id.to_owned(),
            changed,
        });
    }
}

/// Publishes a committed chat item.
pub(crate) fn publish_item(publisher: &Publisher, bot_id: &str, item: &ChatItem) {
    let _ = publisher.send(Publication::ChatItemAdded {
        bot_id: bot_id.to_owned(),
        seq: item.seq,
        kind: item.kind.clone(),
        payload: item.payload.clone(),
    });
}

fn fresh_restart_text(old: &str) -> String {
    format!("Restarted fresh: the conversation {old} is left for good; a new one begins.")
}

/// For a fresh restart asked through `handle`: clears the recorded session now, in one
/// transaction with a system chat item, and publishes both.
pub(crate) fn forget_session(handle: &BotHandle, reason: &str) -> Result<(), BotError> {
    let Some(old) = handle.snapshot().record.session_id else {
        return Ok(());
    };
    let payload =
        json!({"text": fresh_restart_text(&old), "reason": reason, "session_id": old}).to_string();
    let shared = &handle.shared;
    shared.store.tx_now_then(
        |tx| {
            store::bots::set_session(tx, &handle.id, None)?;
            store::chat::append(tx, &handle.id, "system", None, &payload)
        },
        |item| {
            update_view(
                &handle.view,
                &shared.publisher,
                &handle.id,
                vec!["SessionId"],
                |v| v.record.session_id = None,
            );
            publish_item(&shared.publisher, &handle.id, item);
        },
    )?;
    Ok(())
}

/// Starts the actor of a bot. With `loaded` (daemon start), turns the previous daemon left
/// running are settled as `interrupted` and queued messages are delivered.
pub fn spawn_actor(
    record: BotRecord,
    runtime: Arc<dyn Runtime>,
    store: Arc<Store>,
    config: Arc<Config>,
    publisher: Publisher,
    loaded: bool,
    gate: tokio::sync::watch::Receiver<bool>,
) -> BotHandle {
    let (tx, rx) = mpsc::unbounded_channel();
    let (proc_tx, proc_rx) = mpsc::unbounded_channel();
    let id = record.id.clone();
    let state = if record.failed {
        State::Failed
    } else {
        State::Stopped
    };
    let stop_verdict = record.stop_verdict.clone();
    let parked = record.parked;
    // A loaded bot's waiting messages count from the start, while the daemon still recovers.
    let queued = if loaded {
        store
            .read(|c| store::turns::queued(c, &record.id))
            .map_or(0, |q| q.len() as u32)
    } else {
        0
    };
    let view = Arc::new(RwLock::new(BotView {
        record,
        state,
        process_id: 0,
        queued,
        holders: 0,
        stop_verdict,
        pending: Vec::new(),
        partial_text: String::new(),
        storage_error: None,
    }));
    let shared = Arc::new(Shared {
        runtime: runtime.clone(),
        store: store.clone(),
        publisher: publisher.clone(),
        deleted: std::sync::atomic::AtomicBool::new(false),
        holders: Default::default(),
        prompts: Default::default(),
    });
    let actor = Actor {
        id: id.clone(),
        runtime,
        store,
        config,
        publisher,
        view: view.clone(),
        proc: None,
        generation: 0,
        proc_tx,
        proc_rx,
        queue: VecDeque::new(),
        inflight: None,
        crashes: VecDeque::new(),
        restart_at: None,
        force_resume: None,
        in_use_retried: false,
        parked,
        control_seq: 0,
        known: Vec::new(),
        background_tasks: 0,
        idle_deadline: None,
        restart_pending: false,
        fatal: None,
        snapshot_at: VecDeque::new(),
        delta_buf: String::new(),
        delta_flush_at: None,
        last_delta_sent: None,
        interrupting: None,
        watch: Watchdogs::default(),
        retry_notes: Default::default(),
        shared: shared.clone(),
    };
    let span = tracing::info_span!("bot", bot_id = %id);
    let guarded = {
        let view = view.clone();
        let publisher = shared.publisher.clone();
        let id = id.clone();
        async move {
            let run = std::panic::AssertUnwindSafe(actor.run(rx, loaded, gate));
            if let Err(panic) = futures_util::FutureExt::catch_unwind(run).await {
                let what = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                tracing::error!(bot_id = %id, panic = %what, "the bot's supervisor failed");
                update_view(&view, &publisher, &id, vec!["State", "LastError"], |v| {
                    v.state = State::Failed;
                    v.record.last_error = format!(
                        "botvisor's supervisor of this bot failed ({what}); restart botvisord"
                    );
                });
            }
        }
    };
    tokio::spawn(tracing::Instrument::instrument(guarded, span));
    BotHandle {
        id,
        tx,
        view,
        shared,
    }
}

async fn sleep_until_opt(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

impl Actor {
    async fn run(
        mut self,
        mut rx: mpsc::UnboundedReceiver<Command>,
        loaded: bool,
        mut gate: tokio::sync::watch::Receiver<bool>,
    ) {
        if gate.wait_for(|open| *open).await.is_err() {
            return;
        }
        if loaded && let Err(e) = self.recover() {
            tracing::error!(bot_id = %self.id, error = %e, "cannot recover the bot's turns");
        }
        self.pump().await;
        loop {
            let idle_at = self.idle_deadline;
            tokio::select! {
                cmd = rx.recv() => {
                    let Some(cmd) = cmd else { break };
                    if !self.on_command(cmd).await {
                        return;
                    }
                }
                Some(ev) = self.proc_rx.recv() => {
                    match self.on_proc_event(ev) {
                        Next::StopProcess => {
                            self.stop_process("replaced").await;
                        }
                        Next::Exited(info) => self.on_exit(info).await,
                        Next::Nothing => {}
                    }
                }
                _ = sleep_until_opt(self.restart_at) => {
                    self.restart_at = None;
                }
                _ = sleep_until_opt(idle_at) => {
                    self.on_idle_deadline().await;
                }
                _ = sleep_until_opt(self.watch.next()) => {
                    let expired = self.watch.expired(tokio::time::Instant::now());
                    for e in expired {
                        self.on_watchdog(e).await;
                    }
                }
                _ = sleep_until_opt(self.delta_flush_at) => {
                    self.flush_delta();
                    continue;
                }
                _ = sleep_until_opt(self.snapshot_at.front().copied()) => {
                    let now = tokio::time::Instant::now();
                    while self.snapshot_at.front().is_some_and(|t| *t <= now) {
                        self.snapshot_at.pop_front();
                    }
                    self.snapshot_descendants();
                    continue;
                }
            }
            self.pump().await;
            self.rearm_idle();
        }
        self.stop_process("shutdown").await;
    }

    // ----- views and publications -------------------------------------------------------

    fn record(&self) -> BotRecord {
        self.view
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .record
            .clone()
    }

    fn update(&self, names: Vec<&'static str>, f: impl FnOnce(&mut BotView)) {
        update_view(&self.view, &self.publisher, &self.id, names, f);
    }

    fn set_state(&self, state: State) {
        let before = self.view.read().unwrap_or_else(|p| p.into_inner()).state;
        if before == state {
            return;
        }
        tracing::debug!(bot_id = %self.id, state = state.as_str(), "state");
        if state == State::Failed {
            let waiting = self.queue.len()
                + self
                    .inflight
                    .as_ref()
                    .map_or(0, |i| usize::from(!i.replayed));
            if waiting > 0 {
                self.add_item(
                    "system",
                    None,
                    json!({
                        "text": format!(
                            "{waiting} message(s) wait; this bot takes them to the agent once \
                             a client calls Restart."
                        ),
                        "reason": "failed_with_queue",
                        "queued": waiting,
                    }),
                );
            }
        }
        if before == State::Failed || state == State::Failed {
            // `failed` waits for an explicit Restart, across daemon restarts too.
            let failed = state == State::Failed;
            if let Err(e) = self
                .store
                .tx(|tx| store::bots::set_failed(tx, &self.id, failed))
            {
                tracing::error!(bot_id = %self.id, error = %e, "cannot record the failed state");
            }
        }
        self.update(vec!["State"], |v| v.state = state);
    }

    fn state(&self) -> State {
        self.view.read().unwrap_or_else(|p| p.into_inner()).state
    }

    fn publish_queue(&self) {
        let queued =
            self.queue.len() as u32 + self.inflight.as_ref().map_or(0, |i| u32::from(!i.replayed));
        let changed = self.view.read().unwrap_or_else(|p| p.into_inner()).queued != queued;
        if changed {
            self.update(vec!["QueuedMessages"], |v| v.queued = queued);
        }
    }

    fn publish_item(&self, item: &ChatItem) {
        publish_item(&self.publisher, &self.id, item);
    }

    fn publish_turn(&self, turn_id: &str, outcome: &str) {
        let _ = self.publisher.send(Publication::TurnFinished {
            bot_id: self.id.clone(),
            turn_id: turn_id.to_owned(),
            outcome: outcome.to_owned(),
        });
    }

    /// Commits one chat item and publishes it.
    fn add_item(&self, kind: &str, turn_id: Option<&str>, payload: Value) {
        let payload = payload.to_string();
        if let Err(e) = self.store.tx_then(
            |tx| store::chat::append(tx, &self.id, kind, turn_id, &payload),
            |item| self.publish_item(item),
        ) {
            tracing::error!(bot_id = %self.id, error = %e, "cannot record a chat item");
        }
    }

    fn set_last_error(&self, text: &str) {
        if let Err(e) = self
            .store
            .tx(|tx| store::bots::set_last_error(tx, &self.id, text))
        {
            tracing::error!(bot_id = %self.id, error = %e, "cannot record the last error");
            return;
        }
        self.update(vec!["LastError"], |v| v.record.last_error = text.to_owned());
    }

    /// Clears the recorded session in one transaction with a system chat item saying why.
    fn forget_session(&self, old: &str, reason: &str, text: String) {
        let payload = json!({"text": text, "reason": reason, "session_id": old}).to_string();
        let result = self.store.tx_then(
            |tx| {
                store::bots::set_session(tx, &self.id, None)?;
                store::chat::append(tx, &self.id, "system", None, &payload)
            },
            |item| {
                self.update(vec!["SessionId"], |v| v.record.session_id = None);
                self.publish_item(item);
            },
        );
        if let Err(e) = result {
            tracing::error!(bot_id = %self.id, error = %e, "cannot clear the session");
        }
    }

    // ----- commands -----------------------------------------------------------------------

    /// Returns false when the actor must end.
    async fn on_command(&mut self, cmd: Command) -> bool {
        match cmd {
            Command::Queued(turn) => {
                // A message sent before the actor ran `recover()` was loaded from the store
                // already: never queue it twice (rule 8).
                let known = self.queue.iter().any(|t| t.id == turn.id)
                    || self.inflight.as_ref().is_some_and(|i| i.turn.id == turn.id);
                if !known {
                    self.queue.push_back(turn);
                }
                self.park(false);
                self.publish_queue();
                true
            }
            Command::Stop => {
                self.park(true);
                self.restart_at = None;
                self.stop_process("stop").await;
                if self.state() != State::Failed {
                    self.set_state(State::Stopped);
                }
                true
            }
            Command::Delete => {
                self.parked = true;
                self.stop_process("delete").await;
                match self.store.tx(|tx| store::bots::delete(tx, &self.id)) {
                    Ok(_) => {
                        tracing::info!(bot_id = %self.id, "bot deleted");
                        let _ = self.publisher.send(Publication::BotRemoved {
                            bot_id: self.id.clone(),
                        });
                    }
                    Err(e) => {
                        tracing::error!(bot_id = %self.id, error = %e, "cannot delete the bot")
                    }
                }
                false
            }
            Command::Shutdown(reply) => {
                self.parked = true;
                self.stop_process("shutdown").await;
                let _ = reply.send(());
                false
            }
            Command::ApplyLive(request) => {
                self.send_control(request);
                true
            }
            Command::Restart(fresh) => {
                self.on_restart(fresh).await;
                true
            }
            Command::HoldersChanged => true,
            Command::Respond(request_id, answer) => {
                self.answer_cli(&request_id, &answer);
                true
            }
            Command::Interrupt => {
                if let Some(inf) = &self.inflight {
                    let turn = inf.turn.id.clone();
                    if self.send_control(ControlRequest::Interrupt) {
                        tracing::info!(bot_id = %self.id, turn_id = %turn, "interrupting");
                        self.watch
                            .interrupt_sent(&turn, self.deadline(self.config.interrupt_grace_s));
                        self.interrupting = Some(turn);
                    }
                }
                true
            }
        }
    }

    /// Writes a permission answer to the process that asked, if it still runs.
    fn answer_cli(&mut self, request_id: &str, answer: &PermissionAnswer) {
        let Some(line) = self.runtime.encode_permission_answer(request_id, answer) else {
            return;
        };
        if let Some(stdin) = self.proc.as_ref().and_then(|p| p.stdin.as_ref()) {
            let mut bytes = line.into_bytes();
            bytes.push(b'\n');
            let _ = stdin.send(bytes);
        }
    }

    fn pending_prompts(&self) -> usize {
        self.shared
            .prompts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .open
            .len()
    }

    /// A permission request of the CLI: recorded, signalled, and open until a client answers.
    fn on_permission_request(
        &mut self,
        request_id: String,
        tool: String,
        input: Value,
        request: Value,
    ) {
        let input_json = input.to_string();
        let pending = {
            let mut book = self
                .shared
                .prompts
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            book.open.insert(
                request_id.clone(),
                super::Prompt {
                    tool: tool.clone(),
                    input: input_json.clone(),
                },
            );
            book.list()
        };
        let turn = self.current_turn_id();
        let payload = json!({
            "request_id": request_id,
            "tool": tool,
            "input": input,
            "suggestions": request.get("permission_suggestions").cloned().unwrap_or(Value::Null),
            "tool_use_id": request.get("tool_use_id").cloned().unwrap_or(Value::Null),
        })
        .to_string();
        let r = self.store.tx_then(
            |tx| {
                store::chat::append(
                    tx,
                    &self.id,
                    "permission_request",
                    turn.as_deref(),
                    &payload,
                )
            },
            |item| {
                self.publish_item(item);
                let _ = self.publisher.send(Publication::PermissionRequested {
                    bot_id: self.id.clone(),
                    request_id: request_id.clone(),
                    tool: tool.clone(),
                    input: input_json.clone(),
                });
            },
        );
        if let Err(e) = r {
            tracing::error!(bot_id = %self.id, error = %e, "cannot record a permission request");
        }
        self.update(vec!["PendingPermissions"], |v| v.pending = pending);
    }

    /// The process is gone: every open request is denied, and the chat says so.
    fn deny_open_prompts(&mut self) {
        self.close_open_prompts("The agent stopped before this request was answered.");
    }

    /// Every open request is closed as denied by botvisord, with `message` in the chat: when the
    /// agent stops, or when its turn ends (an interrupt) while it was asking.
    fn close_open_prompts(&mut self, message: &str) {
        let denied: Vec<(String, super::Prompt)> = {
            let mut book = self
                .shared
                .prompts
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            let ids: Vec<String> = book.open.keys().cloned().collect();
            ids.into_iter()
                .filter_map(|id| book.answer(&id, "botvisord", "deny").map(|p| (id, p)))
                .collect()
        };
        if denied.is_empty() {
            return;
        }
        for (request_id, prompt) in denied {
            self.add_item(
                "permission_answer",
                None,
                json!({
                    "request_id": request_id, "tool": prompt.tool, "behavior": "deny",
                    "by": "botvisord",
                    "message": message,
                }),
            );
        }
        self.update(vec!["PendingPermissions"], |v| v.pending.clear());
    }

    /// Streamed text: signalled at most once per [`TEXT_DELTA_INTERVAL`].
    fn on_text_delta(&mut self, text: String) {
        self.delta_buf.push_str(&text);
        {
            let mut v = self.view.write().unwrap_or_else(|p| p.into_inner());
            v.partial_text.push_str(&text);
        }
        let now = tokio::time::Instant::now();
        match self.last_delta_sent {
            Some(last) if now < last + TEXT_DELTA_INTERVAL => {
                if self.delta_flush_at.is_none() {
                    self.delta_flush_at = Some(last + TEXT_DELTA_INTERVAL);
                }
            }
            _ => self.flush_delta(),
        }
    }

    fn flush_delta(&mut self) {
        self.delta_flush_at = None;
        if self.delta_buf.is_empty() {
            return;
        }
        self.last_delta_sent = Some(tokio::time::Instant::now());
        let _ = self.publisher.send(Publication::TextDelta {
            bot_id: self.id.clone(),
            turn_id: self.current_turn_id().unwrap_or_default(),
            text: std::mem::take(&mut self.delta_buf),
        });
    }

    /// A message is complete (or a new one starts): signal what is left, start over.
    fn end_streamed_message(&mut self) {
        self.flush_delta();
        let mut v = self.view.write().unwrap_or_else(|p| p.into_inner());
        v.partial_text.clear();
    }

    async fn on_restart(&mut self, fresh: bool) {
        self.restart_at = None;
        if let Some(v) = self.stop_process("restart").await
            && !v.released()
        {
            // The old root survived SIGKILL: never a second process beside it (rule 7).
            return;
        }
        if fresh && let Some(old) = self.record().session_id {
            self.forget_session(&old, "fresh_restart", fresh_restart_text(&old));
        }
        self.crashes.clear();
        self.force_resume = None;
        self.in_use_retried = false;
        self.park(false);
        self.set_state(State::Stopped);
        self.start();
    }

    /// A client's Stop parks the bot (waiting messages wait for its next Send or Restart);
    /// recorded so that a daemon restart keeps it parked.
    fn park(&mut self, parked: bool) {
        if self.record().parked != parked {
            if let Err(e) = self
                .store
                .tx(|tx| store::bots::set_parked(tx, &self.id, parked))
            {
                tracing::error!(bot_id = %self.id, error = %e, "cannot record the stop");
            }
            self.update(vec![], |v| v.record.parked = parked);
        }
        self.parked = parked;
    }

    /// Sends a control request to the running process, if there is one that can take it.
    fn send_control(&mut self, request: ControlRequest) -> bool {
        self.control_seq += 1;
        let request_id = format!("botvisor-{}", self.control_seq);
        let Some(line) = self.runtime.encode_control(&request_id, &request) else {
            return false;
        };
        let Some(proc) = self.proc.as_mut().filter(|p| !p.stopping) else {
            return false;
        };
        let Some(stdin) = proc.stdin.as_ref() else {
            return false;
        };
        let mut bytes = line.into_bytes();
        bytes.push(b'\n');
        if stdin.send(bytes).is_err() {
            return false;
        }
        if matches!(
            request,
            ControlRequest::SetModel(_) | ControlRequest::SetPermissionMode(_)
        ) {
            let deadline = Config::watchdog(self.config.control_timeout_s)
                .map(|d| tokio::time::Instant::now() + d);
            self.watch.control_sent(&request_id, deadline);
        }
        proc.pending_control.insert(request_id, request);
        true
    }

    /// Now plus a watchdog's bound in seconds (`None` for 0: never).
    fn deadline(&self, seconds: f64) -> Option<tokio::time::Instant> {
        Config::watchdog(seconds).map(|d| tokio::time::Instant::now() + d)
    }

    fn on_control_response(&mut self, request_id: String, result: Result<Value, String>) {
        self.watch.control_answered(&request_id);
        let Some(request) = self
            .proc
            .as_mut()
            .and_then(|p| p.pending_control.remove(&request_id))
        else {
            return;
        };
        let what = match &request {
            ControlRequest::Initialize | ControlRequest::Interrupt => {
                if let Err(e) = result {
                    tracing::warn!(bot_id = %self.id, ?request, error = %e, "control request refused");
                }
                return;
            }
            ControlRequest::SetPermissionMode(mode) => format!("the permission mode to `{mode}`"),
            ControlRequest::SetModel(model) => format!("the model to `{model}`"),
        };
        match result {
            Ok(_) => self.add_item(
                "system",
                None,
                json!({"text": format!("The running agent changed {what}."), "reason": "setting_applied"}),
            ),
            Err(e) => {
                let text = format!(
                    "The running agent refused to change {what}: {e}. The setting is kept for its next start."
                );
                self.add_item("error", None, json!({ "text": text }));
                self.set_last_error(&text);
            }
        }
    }

    // ----- process life -------------------------------------------------------------------

    /// Starts a process when messages wait, and feeds it the next message when it is free.
    async fn pump(&mut self) {
        if self.parked || matches!(self.state(), State::Failed | State::Stopping) {
            return;
        }
        match &self.proc {
            None => {
                if (!self.queue.is_empty() || self.restart_pending) && self.restart_at.is_none() {
                    self.start();
                }
            }
            Some(p) if p.stopping || p.lost || p.in_use.is_some() => return,
            Some(_) => {}
        }
        if self.inflight.is_none() {
            self.write_next();
        }
    }

    fn build_env(&self, record: &BotRecord) -> BTreeMap<String, String> {
        let mut env: BTreeMap<String, String> = std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .filter(|(k, _)| self.config.env_allowed(k))
            .collect();
        env.extend(record.env.clone());
        env.insert(tree::BOT_MARKER.to_owned(), record.id.clone());
        env
    }

    fn start(&mut self) {
        let record = self.record();
        let program = match self.runtime.binary() {
            Ok(p) => p,
            Err(e) => {
                let text = format!("cannot start the agent: {e}");
                self.add_item("error", None, json!({ "text": text }));
                self.set_last_error(&text);
                self.parked = true;
                return;
            }
        };
        let env = self.build_env(&record);
        let cwd = Path::new(&record.cwd);
        let decision = match self.force_resume.take() {
            Some(id) => StartDecision {
                start: SessionStart::Resume(id),
                forget: None,
            },
            None => decide_start(
                record.session_id.as_deref(),
                self.runtime.can_resume(),
                |id| self.runtime.transcript_exists(&env, cwd, id),
                || uuid::Uuid::new_v4().to_string(),
            ),
        };
        if let Some((old, reason)) = &decision.forget {
            let (code, why) = match reason {
                ForgetReason::TranscriptMissing => (
                    "transcript_missing",
                    "its transcript is not on disk".to_owned(),
                ),
                ForgetReason::RuntimeCannotResume => (
                    "runtime_cannot_resume",
                    format!("the {} runtime cannot resume", self.runtime.name()),
                ),
            };
            self.forget_session(
                old,
                code,
                format!(
                    "The earlier conversation {old} could not be found ({why}); a new conversation began."
                ),
            );
        }
        let cmd = self.runtime.command(
            program,
            &LaunchSpec {
                cwd,
                model: &record.model,
                permission_mode: &record.permission_mode,
                env: &env,
                start: &decision.start,
            },
        );
        self.generation += 1;
        match process::spawn(&cmd, self.generation, self.proc_tx.clone()) {
            Ok(mut handle) => {
                tracing::info!(
                    bot_id = %self.id,
                    pid = handle.pid,
                    session_id = decision.start.session_id(),
                    resume = matches!(decision.start, SessionStart::Resume(_)),
                    "agent started"
                );
                let stdin = handle.stdin.take().map(spawn_writer);
                let pid = handle.pid;
                self.restart_pending = false;
                self.known.clear();
                self.background_tasks = 0;
                if let Ok(id) = identify(pid)
                    && let Err(e) = self
                        .store
                        .tx(|tx| store::processes::insert(tx, &self.id, &id, "root"))
                {
                    tracing::error!(bot_id = %self.id, error = %e, "cannot record the process");
                }
                self.proc = Some(Proc {
                    handle,
                    stdin,
                    start: decision.start,
                    turn_began: false,
                    stopping: false,
                    lost: false,
                    in_use: None,
                    reported_session: None,
                    pending_control: Default::default(),
                });
                self.update(vec!["ProcessId"], |v| v.process_id = pid);
                self.watch
                    .launched(self.deadline(self.config.start_timeout_s));
                self.set_state(State::Idle);
                self.send_control(ControlRequest::Initialize);
            }
            Err(e) => {
                let text = process::launch_error::explain(&cmd.program, &cmd.cwd, &e);
                tracing::error!(bot_id = %self.id, error = %text, "spawn failed");
                self.add_item("error", None, json!({ "text": text }));
                self.set_last_error(&text);
                self.parked = true;
            }
        }
    }

    fn write_next(&mut self) {
        let Some(proc) = self.proc.as_mut() else {
            return;
        };
        let Some(stdin) = proc.stdin.as_ref() else {
            return;
        };
        if stdin.is_closed() {
            return;
        }
        let Some(turn) = self.queue.pop_front() else {
            return;
        };
        let session = proc.start.session_id().to_owned();
        let stdin = stdin.clone();
        // Persist, then act: which conversation the message goes to, before it goes (rule 8
        // across a daemon crash).
        let written = self
            .store
            .tx(|tx| store::deliveries::record(tx, &self.id, &turn.id, &session))
            .unwrap_or_else(|e| {
                tracing::error!(bot_id = %self.id, error = %e, "cannot record a delivery");
                std::time::SystemTime::now()
            });
        let mut line = self.runtime.encode_user_message(&turn.text).into_bytes();
        line.push(b'\n');
        if stdin.send(line).is_err() {
            self.queue.push_front(turn);
            return;
        }
        self.inflight = Some(Inflight {
            turn,
            replayed: false,
            session,
            written,
        });
        self.set_state(State::Busy);
        self.publish_queue();
    }

    fn on_proc_event(&mut self, ev: ProcEvent) -> Next {
        let current = self.proc.as_ref().map(|p| p.handle.generation);
        match ev {
            ProcEvent::Line(generation, line) if Some(generation) == current => {
                let mut next = Next::Nothing;
                for event in self.runtime.parse_line(&line) {
                    if self.on_runtime_event(event) == Next::StopProcess {
                        next = Next::StopProcess;
                    }
                }
                next
            }
            ProcEvent::Exited(generation, info) if Some(generation) == current => {
                Next::Exited(info)
            }
            _ => Next::Nothing,
        }
    }

    fn on_runtime_event(&mut self, event: RuntimeEvent) -> Next {
        if event.is_sign_of_life() {
            self.watch.sign_of_life();
        }
        match event {
            RuntimeEvent::Init { .. } | RuntimeEvent::Ignored => Next::Nothing,
            RuntimeEvent::TextDelta(text) => {
                self.on_text_delta(text);
                Next::Nothing
            }
            RuntimeEvent::MessageStart => {
                self.end_streamed_message();
                Next::Nothing
            }
            RuntimeEvent::PermissionRequest {
                request_id,
                tool,
                input,
                request,
            } => {
                self.on_permission_request(request_id, tool, input, request);
                Next::Nothing
            }
            RuntimeEvent::ControlResponse { request_id, result } => {
                self.on_control_response(request_id, result);
                Next::Nothing
            }
            RuntimeEvent::ControlRequest {
                request_id,
                subtype,
                ..
            } => {
                tracing::debug!(bot_id = %self.id, %subtype, "control request of the CLI refused");
                if let Some(line) = self.runtime.encode_control_error(
                    &request_id,
                    &format!("botvisor does not serve `{subtype}` requests"),
                ) && let Some(stdin) = self.proc.as_ref().and_then(|p| p.stdin.as_ref())
                {
                    let mut bytes = line.into_bytes();
                    bytes.push(b'\n');
                    let _ = stdin.send(bytes);
                }
                Next::Nothing
            }
            RuntimeEvent::UserReplay { session_id, .. } => {
                self.on_replay(session_id);
                Next::Nothing
            }
            RuntimeEvent::Chat(chat) => {
                if chat.kind == "assistant" {
                    self.flush_delta();
                }
                let turn = self.current_turn_id();
                let tool = matches!(chat.kind, "tool_use" | "tool_result");
                self.add_item(chat.kind, turn.as_deref(), chat.payload);
                if chat.kind == "assistant" {
                    self.end_streamed_message();
                }
                if tool {
                    self.snapshot_descendants();
                    let now = tokio::time::Instant::now();
                    for delay in SNAPSHOT_AFTER_TOOL {
                        self.snapshot_at.push_back(now + delay);
                    }
                }
                Next::Nothing
            }
            RuntimeEvent::Tasks { running } => {
                if let Some(n) = running {
                    self.background_tasks = n;
                }
                self.snapshot_descendants();
                Next::Nothing
            }
            RuntimeEvent::ApiRetry {
                error,
                status,
                attempt,
                max_retries,
                delay_ms,
            } => {
                let retry = super::retry::Retry {
                    error: &error,
                    status,
                    attempt,
                    max_retries,
                    delay_ms,
                };
                self.on_api_retry(&retry);
                Next::Nothing
            }
            RuntimeEvent::TurnResult {
                outcome,
                payload,
                error,
                session_id,
            } => {
                // Before the turn's end is published: a client that reads SessionId after
                // TurnFinished sees the conversation the turn went to.
                self.note_reported_session(session_id);
                self.on_result(outcome, payload, error);
                Next::Nothing
            }
            RuntimeEvent::ConversationNotFound { session_id } => {
                let Some(proc) = self.proc.as_mut() else {
                    return Next::Nothing;
                };
                if proc.lost {
                    return Next::Nothing;
                }
                proc.lost = true;
                let stopping = proc.stopping;
                tracing::info!(bot_id = %self.id, %session_id, "conversation not found; starting a new one");
                if let Some(inf) = self.inflight.take()
                    && !inf.replayed
                {
                    self.queue.push_front(inf.turn);
                }
                self.forget_session(
                    &session_id,
                    "conversation_not_found",
                    format!(
                        "The CLI could not find the conversation {session_id}; a new conversation began."
                    ),
                );
                self.publish_queue();
                if stopping {
                    Next::Nothing
                } else {
                    Next::StopProcess
                }
            }
            RuntimeEvent::SessionInUse { session_id } => {
                if let Some(proc) = self.proc.as_mut() {
                    tracing::info!(bot_id = %self.id, %session_id, "session id already in use");
                    proc.in_use = Some(session_id);
                }
                Next::Nothing
            }
            RuntimeEvent::Unparsed { line, reason } => {
                let turn = self.current_turn_id();
                self.add_item(
                    "error",
                    turn.as_deref(),
                    json!({
                        "text": format!("The agent printed a line botvisor could not read ({reason})."),
                        "line": line,
                    }),
                );
                Next::Nothing
            }
        }
    }

    /// The CLI retries a model request: `LastError` says so each time, and a rate-limited
    /// `system` item (`reason` `api_retry`) of the turn waiting for it (see `super::retry`).
    fn on_api_retry(&mut self, retry: &super::retry::Retry<'_>) {
        let text = match self.runtime.fatal_reason(retry.error) {
            Some(kind) => format!(
                "The model API refused the request ({kind} error: {}, HTTP {}); the agent \
                 retries ({} of {}). Check the credentials or the plan.",
                retry.error,
                retry.status.map_or("?".to_owned(), |s| s.to_string()),
                retry.attempt,
                retry.max_retries
            ),
            None => retry.text(),
        };
        tracing::warn!(bot_id = %self.id, attempt = retry.attempt, error = retry.error, "model request retried");
        self.set_last_error(&text);
        if self
            .retry_notes
            .should_note(retry, tokio::time::Instant::now())
        {
            // The CLI retries before it replays the message: the turn is the one written to it.
            let turn = self.inflight.as_ref().map(|i| i.turn.id.clone());
            self.add_item(
                "system",
                turn.as_deref(),
                json!({
                    "text": text, "reason": "api_retry", "attempt": retry.attempt,
                    "max_retries": retry.max_retries, "error": retry.error,
                    "error_status": retry.status,
                }),
            );
        }
    }

    fn current_turn_id(&self) -> Option<String> {
        self.inflight
            .as_ref()
            .filter(|i| i.replayed)
            .map(|i| i.turn.id.clone())
    }

    fn on_replay(&mut self, session_id: Option<String>) {
        let Some(proc) = self.proc.as_ref() else {
            return;
        };
        if self.inflight.as_ref().is_none_or(|i| i.replayed) {
            return;
        }
        let launched = proc.start.session_id().to_owned();
        let record = self.record();
        let env = self.build_env(&record);
        let choice = decide::session_to_record(&launched, session_id.as_deref(), |r| {
            self.runtime
                .transcript_exists(&env, Path::new(&record.cwd), r)
        });
        let sid = match &choice {
            SessionChoice::Reported(r) => r.clone(),
            SessionChoice::Launched | SessionChoice::LaunchedUntil(_) => launched,
        };
        let Some(proc) = self.proc.as_mut() else {
            return;
        };
        proc.turn_began = true;
        if let SessionChoice::LaunchedUntil(r) = choice {
            tracing::info!(bot_id = %self.id, reported = %r, launched = %sid, "the CLI reports another session id; kept until its transcript exists");
            proc.reported_session = Some(r);
        }
        let Some(inf) = self.inflight.as_mut() else {
            return;
        };
        inf.replayed = true;
        let turn_id = inf.turn.id.clone();
        let changed = record.session_id.as_deref() != Some(sid.as_str());
        let r = self.store.tx(|tx| {
            store::turns::set_running(tx, &turn_id)?;
            store::deliveries::forget(tx, &self.id, &turn_id)?;
            if changed {
                store::bots::set_session(tx, &self.id, Some(&sid))?;
            }
            Ok(())
        });
        if let Err(e) = r {
            tracing::error!(bot_id = %self.id, error = %e, "cannot record the turn start");
            return;
        }
        if changed {
            tracing::info!(bot_id = %self.id, session_id = %sid, "session recorded");
            self.update(vec!["SessionId"], |v| v.record.session_id = Some(sid));
        }
        self.publish_queue();
    }

    /// A session id the CLI reported instead of the launched one is recorded once its transcript
    /// exists (design rule 3, [`decide::session_to_record`]); until then the launched one stays.
    fn adopt_reported_session(&self, proc: &Proc) {
        let Some(reported) = proc.reported_session.as_deref() else {
            return;
        };
        let record = self.record();
        if record.session_id.as_deref() == Some(reported) {
            return;
        }
        let env = self.build_env(&record);
        if !self
            .runtime
            .transcript_exists(&env, Path::new(&record.cwd), reported)
        {
            return;
        }
        match self
            .store
            .tx(|tx| store::bots::set_session(tx, &self.id, Some(reported)))
        {
            Ok(()) => {
                tracing::info!(bot_id = %self.id, session_id = %reported, "session recorded: the reported conversation's transcript exists");
                self.update(vec!["SessionId"], |v| {
                    v.record.session_id = Some(reported.to_owned())
                });
            }
            Err(e) => tracing::error!(bot_id = %self.id, error = %e, "cannot record the session"),
        }
    }

    /// A session id the CLI reported at a turn's end (it may have forked or cleared its
    /// conversation): once a turn began in this process, it is recorded when its transcript
    /// exists, at once or at the process's end.
    fn note_reported_session(&mut self, reported: Option<String>) {
        let Some(proc) = self.proc.as_mut() else {
            return;
        };
        if !proc.turn_began {
            return;
        }
        if let Some(r) = reported.filter(|r| !r.is_empty() && r != proc.start.session_id()) {
            proc.reported_session = Some(r);
        }
        if let Some(proc) = self.proc.take() {
            self.adopt_reported_session(&proc);
            self.proc = Some(proc);
        }
    }

    fn on_result(&mut self, outcome: ResultOutcome, payload: Value, error: Option<String>) {
        // A result belongs to our message once it was replayed; an error result before the
        // replay also settles it (design rule 4's fallback: the turn fails visibly).
        let ours = match &self.inflight {
            Some(i) if i.replayed => true,
            Some(_) => outcome == ResultOutcome::Error,
            None => false,
        };
        let turn = if ours { self.inflight.take() } else { None };
        self.end_streamed_message();
        // A turn that ended (interrupted, failed) while the agent was asking leaves nobody
        // waiting for the answer.
        self.close_open_prompts("The turn ended before this request was answered.");
        let interrupted = turn.is_some()
            && self.interrupting.is_some()
            && self.interrupting.as_deref() == turn.as_ref().map(|t| t.turn.id.as_str());
        if interrupted {
            self.interrupting = None;
        }
        let error = if interrupted { None } else { error };
        if let Some(e) = &error
            && let Some(kind) = self.runtime.fatal_reason(e)
        {
            self.fatal = Some(format!("{kind} error: {e}"));
        }
        let turn_id = turn.as_ref().map(|t| t.turn.id.clone());
        if let Some(t) = &turn_id {
            self.watch.turn_ended(t);
        }
        if outcome == ResultOutcome::Success && turn_id.is_some() {
            // The agent works again: the next crash starts the backoff from its first step.
            self.crashes.clear();
        }
        let outcome = match outcome {
            _ if interrupted => TurnOutcome::Interrupted,
            ResultOutcome::Success => TurnOutcome::Success,
            ResultOutcome::Error => TurnOutcome::Error,
        };
        let reason = if interrupted {
            "interrupt".to_owned()
        } else {
            payload
                .get("subtype")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let finished = turn_id.as_deref().map(|t| {
            turn_finished_payload(t, outcome, &reason, error.as_deref().unwrap_or_default())
        });
        let payload = payload.to_string();
        let r = self.store.tx(|tx| {
            let item = store::chat::append(tx, &self.id, "result", turn_id.as_deref(), &payload)?;
            let mut last = None;
            if let (Some(t), Some(f)) = (&turn_id, &finished) {
                store::turns::finish(tx, t, outcome.as_str())?;
                last = Some(store::chat::append(
                    tx,
                    &self.id,
                    "turn_finished",
                    Some(t),
                    f,
                )?);
            }
            if let Some(e) = &error {
                store::bots::set_last_error(tx, &self.id, e)?;
            }
            Ok((item, last))
        });
        match r {
            Ok((item, last)) => {
                self.publish_item(&item);
                if let Some(e) = error {
                    self.update(vec!["LastError"], |v| v.record.last_error = e);
                }
                if let (Some(t), Some(last)) = (&turn_id, &last) {
                    self.publish_item(last);
                    self.publish_turn(t, outcome.as_str());
                }
            }
            Err(e) => tracing::error!(bot_id = %self.id, error = %e, "cannot record a result"),
        }
        if self.inflight.is_none() && self.proc.as_ref().is_some_and(|p| !p.stopping) {
            self.set_state(State::Idle);
        }
        self.publish_queue();
    }

    /// Ends a turn durably and then says so: its status, an optional chat item (`kind`,
    /// `payload`), its typed `turn_finished` item, and (with `adopt`) the conversation that took
    /// it, in one transaction; then the items, `SessionId` and `TurnFinished` are published
    /// (rules 1 and 8: every turn ends with one durable outcome).
    fn finish_turn(
        &self,
        turn_id: &str,
        outcome: TurnOutcome,
        reason: &str,
        item: Option<(&str, Value)>,
        adopt: Option<&str>,
    ) {
        let text = item
            .as_ref()
            .and_then(|(_, p)| p.get("text").and_then(Value::as_str))
            .unwrap_or_default()
            .to_owned();
        let item = item.map(|(k, p)| (k, p.to_string()));
        let finished = turn_finished_payload(turn_id, outcome, reason, &text);
        let r = self.store.tx(|tx| {
            store::turns::finish(tx, turn_id, outcome.as_str())?;
            store::deliveries::forget(tx, &self.id, turn_id)?;
            if let Some(s) = adopt {
                store::bots::set_session(tx, &self.id, Some(s))?;
            }
            let first = match &item {
                Some((kind, payload)) => Some(store::chat::append(
                    tx,
                    &self.id,
                    kind,
                    Some(turn_id),
                    payload,
                )?),
                None => None,
            };
            let last =
                store::chat::append(tx, &self.id, "turn_finished", Some(turn_id), &finished)?;
            Ok((first, last))
        });
        match r {
            Ok((first, last)) => {
                if let Some(s) = adopt {
                    tracing::info!(bot_id = %self.id, session_id = %s, "session recorded: the conversation took the message");
                    self.update(vec!["SessionId"], |v| {
                        v.record.session_id = Some(s.to_owned())
                    });
                }
                if let Some(i) = &first {
                    self.publish_item(i);
                }
                self.publish_item(&last);
                self.publish_turn(turn_id, outcome.as_str());
            }
            Err(e) => tracing::error!(bot_id = %self.id, error = %e, "cannot settle a turn"),
        }
    }

    /// Settles the turn in flight when its process is gone: a replayed one ends with `outcome`
    /// (and `text` in an `error` or `system` item); one not yet replayed goes back to the head of
    /// the queue, unless its conversation holds it already (design rule 8, decided by
    /// [`decide::unreplayed_message`]).
    fn settle_inflight(&mut self, outcome: TurnOutcome, reason: &str, text: String) -> Settled {
        let Some(inf) = self.inflight.take() else {
            return Settled::Nothing;
        };
        if !inf.replayed {
            // Not replayed, but maybe taken: the CLI writes the message into its transcript
            // before it replays it. Sent again, the conversation would hold it twice.
            let record = self.record();
            let env = self.build_env(&record);
            let holds = self.runtime.conversation_has_message(
                &env,
                Path::new(&record.cwd),
                &inf.session,
                &inf.turn.text,
                inf.written,
            );
            return match decide::unreplayed_message(
                record.session_id.as_deref(),
                &inf.session,
                holds,
            ) {
                UnreplayedFate::Resend => {
                    self.queue.push_front(inf.turn);
                    self.publish_queue();
                    Settled::Requeued
                }
                UnreplayedFate::Taken { adopt } => {
                    self.finish_turn(
                        &inf.turn.id,
                        TurnOutcome::TakenNotAnswered,
                        "taken_not_answered",
                        Some(("system", taken_note())),
                        adopt.as_deref(),
                    );
                    self.publish_queue();
                    Settled::Taken
                }
            };
        }
        let kind = if outcome == TurnOutcome::Crashed {
            "error"
        } else {
            "system"
        };
        let item = (!text.is_empty()).then(|| (kind, json!({ "text": text })));
        self.finish_turn(&inf.turn.id, outcome, reason, item, None);
        Settled::Ended
    }

    /// The process exited without being asked to.
    async fn on_exit(&mut self, info: ExitInfo) {
        let Some(proc) = self.proc.take() else {
            return;
        };
        self.watch.process_gone();
        self.update(vec!["ProcessId"], |v| v.process_id = 0);
        self.deny_open_prompts();
        self.end_streamed_message();
        self.interrupting = None;
        self.adopt_reported_session(&proc);
        if proc.stopping {
            // A root that survived SIGKILL (verdict `root-alive`) exited at last: released now.
            self.settle_inflight(
                TurnOutcome::Interrupted,
                "stopped",
                "The agent was stopped before the turn finished.".into(),
            );
            self.clean_up_after_exit(proc.handle.pid, "late exit").await;
            self.set_state(State::Stopped);
            return;
        }
        let lived = proc.handle.started.elapsed();
        let root_pid = proc.handle.pid;
        tracing::info!(bot_id = %self.id, pid = root_pid, status = %info, "agent exited");
        let mut proc = proc;
        if proc.in_use.is_none() && !proc.turn_began {
            proc.in_use = self.runtime.session_in_use(&proc.handle.stderr_text());
        }
        if proc.lost || proc.in_use.is_some() {
            self.settle_inflight(TurnOutcome::Error, "agent_exited", String::new());
            self.set_state(State::Stopped);
            if let Some(id) = proc.in_use {
                if !self.in_use_retried {
                    self.in_use_retried = true;
                    self.force_resume = Some(id);
                    self.clean_up_after_exit(root_pid, "exit").await;
                    return;
                }
            } else {
                self.clean_up_after_exit(root_pid, "exit").await;
                return;
            }
        }
        let stderr = proc.handle.stderr_text();
        let clean = info.code == Some(0) && self.inflight.is_none();
        // Published at once (rule 11): the running turn ends, waiting messages stay queued.
        let settled = self.settle_inflight(
            TurnOutcome::Crashed,
            "agent_exited",
            format!("The agent exited before the turn finished ({info})."),
        );
        if let SessionStart::Resume(id) = &proc.start {
            let window = Duration::from_secs_f64(self.config.fresh_start_if_dies_within_s);
            let forget = decide::forget_after_early_exit(
                true,
                proc.turn_began,
                settled == Settled::Taken,
                &info,
                lived,
                window,
            );
            if forget && self.record().session_id.as_deref() == Some(id.as_str()) {
                self.forget_session(
                    id,
                    "died_after_launch",
                    format!(
                        "The agent exited {:.1} s after it was started on conversation {id} without \
                         beginning a turn; the next start begins a new conversation.",
                        lived.as_secs_f64()
                    ),
                );
            }
        }
        if clean {
            self.set_state(State::Stopped);
            self.clean_up_after_exit(root_pid, "exit").await;
            return;
        }
        // Published at once, before the clean-up (rule 11).
        let fatal = self.fatal.take().or_else(|| {
            self.runtime
                .fatal_reason(&stderr)
                .map(|kind| format!("{kind} error: {stderr}"))
        });
        if let Some(reason) = fatal {
            let text = format!(
                "The agent stopped on an error that restarting cannot fix ({reason}). Fix it, then \
                 call Restart."
            );
            self.add_item("error", None, json!({ "text": text, "reason": "fatal" }));
            self.set_last_error(&text);
            self.set_state(State::Failed);
            self.clean_up_after_exit(root_pid, "exit").await;
            return;
        }
        let mut text = format!("The agent exited unexpectedly ({info}).");
        if !stderr.is_empty() {
            text.push_str(" Its last output: ");
            text.push_str(&stderr);
        }
        self.add_item("error", None, json!({ "text": text, "reason": "crash" }));
        self.set_last_error(&text);
        self.set_state(State::Stopped);
        self.clean_up_after_exit(root_pid, "crash").await;
        let now = Instant::now();
        let window = Duration::from_secs(self.config.crash_loop_window_s);
        self.crashes.push_back(now);
        while self
            .crashes
            .front()
            .is_some_and(|t| now.duration_since(*t) > window)
        {
            self.crashes.pop_front();
        }
        if self.crashes.len() as u32 >= self.config.crash_loop_limit {
            let text = format!(
                "The agent crashed {} times within {} s; botvisor stopped restarting it. \
                 Call Restart to try again. Last: {text}",
                self.crashes.len(),
                self.config.crash_loop_window_s
            );
            self.add_item(
                "error",
                None,
                json!({ "text": text, "reason": "crash_loop" }),
            );
            self.set_last_error(&text);
            self.set_state(State::Failed);
            return;
        }
        if !self.queue.is_empty() || self.holders() > 0 {
            let backoff = Duration::from_millis(250)
                .saturating_mul(1 << (self.crashes.len().saturating_sub(1)).min(10))
                .min(MAX_BACKOFF);
            self.restart_at = Some(tokio::time::Instant::now() + backoff);
            self.restart_pending = true;
            self.add_item(
                "system",
                None,
                json!({
                    "text": format!(
                        "botvisor restarts the agent in {:.2} s (crash {} of at most {} within \
                         {} s).",
                        backoff.as_secs_f64(),
                        self.crashes.len(),
                        self.config.crash_loop_limit,
                        self.config.crash_loop_window_s
                    ),
                    "reason": "restart_pending",
                    "in_s": backoff.as_secs_f64(),
                }),
            );
        }
    }

    fn holders(&self) -> usize {
        self.shared
            .holders
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .len()
    }

    // ----- descendants and proof --------------------------------------------------------

    /// Walks the current process's descendants (targeted `/proc` reads from its pid) and records
    /// the new ones by identity.
    fn snapshot_descendants(&mut self) {
        let Some(proc) = &self.proc else {
            return;
        };
        let mut found = tree::descendants(proc.handle.pid);
        // Descendants that escaped and lost their parent were adopted by the daemon: theirs too.
        for pid in subreaper::adopted_orphans(&self.id) {
            found.extend(identify(pid).into_iter().chain(tree::descendants(pid)));
        }
        let new: Vec<ProcessIdentity> = found
            .into_iter()
            .filter(|id| !self.known.contains(id))
            .collect();
        if new.is_empty() {
            return;
        }
        tracing::debug!(bot_id = %self.id, count = new.len(), "new descendants");
        let r = self.store.tx(|tx| {
            for id in &new {
                store::processes::insert(tx, &self.id, id, "descendant")?;
            }
            Ok(())
        });
        if let Err(e) = r {
            tracing::error!(bot_id = %self.id, error = %e, "cannot record descendants");
        }
        self.known.extend(new);
    }

    /// Every process still to stop for this bot once its root is gone: known descendants, orphans
    /// the daemon adopted that carry the bot's marker, and what descends from either.
    fn leftovers(&self) -> Vec<ProcessIdentity> {
        let mut out: Vec<ProcessIdentity> = self.known.clone();
        let mut roots: Vec<u32> = subreaper::adopted_orphans(&self.id);
        roots.extend(
            self.known
                .iter()
                .filter(|id| liveness(id) == Liveness::Alive)
                .map(|id| id.pid),
        );
        for pid in roots {
            let found = identify(pid).into_iter().chain(tree::descendants(pid));
            for id in found {
                if !out.contains(&id) {
                    out.push(id);
                }
            }
        }
        out
    }

    /// After the root exited: stops what is left by identity, and reads the verdict.
    async fn clean_up_after_exit(&mut self, root_pid: u32, why: &'static str) -> StopVerdict {
        let leftovers = self.leftovers();
        let observed = stop_by_identity(&leftovers, DESCENDANT_GRACE).await;
        let v = verdict(&StopObservation {
            root_exited: true,
            descendants: observed,
            proof: PROOF,
        });
        self.read_verdict(root_pid, why, &v);
        v
    }

    /// The one place a verdict is read: the journal always; the chat and `LastError` when it is
    /// not clean; the `StopVerdict` property.
    fn read_verdict(&mut self, root_pid: u32, why: &'static str, v: &StopVerdict) {
        tracing::info!(
            bot_id = %self.id,
            pid = root_pid,
            why,
            verdict = v.name(),
            proof = PROOF.as_str(),
            "stop verdict"
        );
        let name = v.name().to_owned();
        if let Err(e) = self
            .store
            .tx(|tx| store::bots::set_stop_verdict(tx, &self.id, &name))
        {
            tracing::error!(bot_id = %self.id, error = %e, "cannot record the verdict");
        }
        self.update(vec!["StopVerdict"], |view| view.stop_verdict = name);
        if let Some(text) = v.report(root_pid) {
            tracing::warn!(bot_id = %self.id, pid = root_pid, "{text}");
            let survivors: Vec<u32> = match v {
                StopVerdict::RootExited { survivors, .. }
                | StopVerdict::RootExitedUnverified { survivors, .. } => {
                    survivors.iter().map(|p| p.pid).collect()
                }
                _ => Vec::new(),
            };
            self.add_item(
                "system",
                None,
                json!({"text": text, "reason": "stop_verdict", "verdict": v.name(), "survivors": survivors}),
            );
            self.set_last_error(&text);
        }
        if v.released() {
            self.known.clear();
            if let Err(e) = self.store.tx(|tx| store::processes::clear(tx, &self.id)) {
                tracing::error!(bot_id = %self.id, error = %e, "cannot clear process records");
            }
        }
    }

    /// Stops the process gently: close stdin, SIGTERM the group, grace, SIGKILL the group, then
    /// every known descendant by identity. Lines the process writes meanwhile are still recorded.
    /// Returns the verdict (`None` when no process ran).
    async fn stop_process(&mut self, why: &'static str) -> Option<StopVerdict> {
        self.snapshot_descendants();
        let proc = self.proc.as_mut()?;
        proc.stopping = true;
        proc.stdin = None;
        let pid = proc.handle.pid;
        let generation = proc.handle.generation;
        let exited = proc.handle.exited().is_some();
        self.set_state(State::Stopping);
        tracing::info!(bot_id = %self.id, pid, why, "stopping agent");
        if !exited && let Some(p) = &self.proc {
            p.handle.signal_group(libc::SIGTERM);
        }
        let grace = tokio::time::Instant::now() + self.config.stop_grace();
        let hard = grace + KILL_WAIT;
        let mut killed = false;
        let exit = loop {
            tokio::select! {
                ev = self.proc_rx.recv() => match ev {
                    Some(ProcEvent::Exited(g, info)) if g == generation => break Some(info),
                    Some(ev) => { let _ = self.on_proc_event(ev); }
                    None => break None,
                },
                _ = tokio::time::sleep_until(grace), if !killed => {
                    killed = true;
                    if let Some(p) = self.proc.as_ref().filter(|p| p.handle.exited().is_none()) {
                        tracing::warn!(bot_id = %self.id, pid, "grace period over; SIGKILL");
                        p.handle.signal_group(libc::SIGKILL);
                    }
                }
                _ = tokio::time::sleep_until(hard) => break None,
            }
        };
        let Some(info) = exit else {
            let v = verdict(&StopObservation {
                root_exited: false,
                descendants: Vec::new(),
                proof: PROOF,
            });
            self.read_verdict(pid, why, &v);
            self.set_state(State::Failed);
            return Some(v);
        };
        tracing::info!(bot_id = %self.id, pid, status = %info, "agent stopped");
        let proc = self.proc.take();
        self.watch.process_gone();
        self.update(vec!["ProcessId"], |v| v.process_id = 0);
        self.deny_open_prompts();
        self.end_streamed_message();
        self.interrupting = None;
        if let Some(p) = &proc {
            self.adopt_reported_session(p);
        }
        self.settle_inflight(
            TurnOutcome::Interrupted,
            "stopped",
            "The agent was stopped before the turn finished.".into(),
        );
        if why == "replaced" && proc.is_some_and(|p| p.lost) {
            // The lost conversation's own stop: its waiting message goes to a new one now.
            self.parked = false;
        }
        let v = self.clean_up_after_exit(pid, why).await;
        self.set_state(State::Stopped);
        Some(v)
    }

    // ----- watchdogs (rule 15) ------------------------------------------------------------

    /// A watchdog caught a CLI that stopped answering: say so (chat item, `LastError`, journal)
    /// and act.
    async fn on_watchdog(&mut self, expired: Expired) {
        match expired {
            Expired::Start => {
                let text = format!(
                    "The agent printed nothing within {} s of its launch (start_timeout_s); \
                     botvisor stopped it. Send again to retry; if it keeps happening, check \
                     the CLI and the bot's environment.",
                    self.config.start_timeout_s
                );
                tracing::warn!(bot_id = %self.id, "{text}");
                self.add_item(
                    "error",
                    None,
                    json!({"text": text, "reason": "start_timeout"}),
                );
                self.set_last_error(&text);
                // The waiting turn fails visibly; what else waits, waits for the next Send or
                // Restart (no restart loop).
                if let Some(inf) = self.inflight.take() {
                    let record = self.record();
                    let env = self.build_env(&record);
                    let holds = self.runtime.conversation_has_message(
                        &env,
                        Path::new(&record.cwd),
                        &inf.session,
                        &inf.turn.text,
                        inf.written,
                    );
                    match decide::unreplayed_message(
                        record.session_id.as_deref(),
                        &inf.session,
                        holds,
                    ) {
                        UnreplayedFate::Taken { adopt } => self.finish_turn(
                            &inf.turn.id,
                            TurnOutcome::TakenNotAnswered,
                            "taken_not_answered",
                            Some(("system", taken_note())),
                            adopt.as_deref(),
                        ),
                        UnreplayedFate::Resend => self.finish_turn(
                            &inf.turn.id,
                            TurnOutcome::Error,
                            "start_timeout",
                            None,
                            None,
                        ),
                    }
                }
                self.park(true);
                self.stop_process("start timeout").await;
                self.publish_queue();
            }
            Expired::Interrupt(turn) => {
                if self.inflight.as_ref().is_none_or(|i| i.turn.id != turn) {
                    return;
                }
                let mut text = format!(
                    "The agent did not end the turn within {} s of the interrupt \
                     (interrupt_grace_s); botvisor stopped it.",
                    self.config.interrupt_grace_s
                );
                if !self.queue.is_empty() {
                    text.push_str(
                        " Waiting messages go to its next start, in the same conversation.",
                    );
                }
                tracing::warn!(bot_id = %self.id, turn_id = %turn, "{text}");
                self.set_last_error(&text);
                if let Some(inf) = self.inflight.take() {
                    self.finish_turn(
                        &inf.turn.id,
                        TurnOutcome::Interrupted,
                        "interrupt_timeout",
                        Some((
                            "system",
                            json!({"text": text, "reason": "interrupt_timeout"}),
                        )),
                        None,
                    );
                }
                self.interrupting = None;
                self.stop_process("interrupt timeout").await;
                self.publish_queue();
            }
            Expired::Control(request_id) => {
                let Some(request) = self
                    .proc
                    .as_mut()
                    .and_then(|p| p.pending_control.remove(&request_id))
                else {
                    return;
                };
                let what = match &request {
                    ControlRequest::SetPermissionMode(mode) => {
                        format!("the permission mode to `{mode}`")
                    }
                    ControlRequest::SetModel(model) => format!("the model to `{model}`"),
                    ControlRequest::Initialize | ControlRequest::Interrupt => return,
                };
                let text = format!(
                    "The running agent did not answer the request to change {what} within {} s \
                     (control_timeout_s); the setting is kept for its next start.",
                    self.config.control_timeout_s
                );
                tracing::warn!(bot_id = %self.id, "{text}");
                self.add_item(
                    "error",
                    None,
                    json!({"text": text, "reason": "control_timeout"}),
                );
                self.set_last_error(&text);
            }
        }
    }

    // ----- idle stop (rule 12) ------------------------------------------------------------

    fn idle_timeout(&self) -> Option<Duration> {
        let s = self
            .record()
            .idle_timeout_s
            .unwrap_or(self.config.idle_timeout_s);
        (s > 0).then(|| Duration::from_secs(s))
    }

    /// Idle by every sign the actor has without reading `/proc`.
    fn looks_idle(&self) -> bool {
        self.proc.as_ref().is_some_and(|p| !p.stopping)
            && self.inflight.is_none()
            && self.queue.is_empty()
            && self.background_tasks == 0
            && self.holders() == 0
            && self.pending_prompts() == 0
    }

    /// After every event: an idle bot gets a fresh deadline, a busy one none.
    fn rearm_idle(&mut self) {
        self.idle_deadline = match self.idle_timeout() {
            Some(t) if self.looks_idle() => tokio::time::Instant::now().checked_add(t),
            _ => None,
        };
    }

    async fn on_idle_deadline(&mut self) {
        self.idle_deadline = None;
        if !self.looks_idle() {
            return;
        }
        self.snapshot_descendants();
        if self.known.iter().any(|id| liveness(id) == Liveness::Alive) {
            tracing::debug!(bot_id = %self.id, "idle, but a descendant lives: not stopped");
            return;
        }
        tracing::info!(bot_id = %self.id, "idle stop");
        self.stop_process("idle").await;
    }

    /// At daemon start, after the previous run's processes were stopped: every turn it left
    /// open is settled or delivered once ([`decide::left_turn`], design rule 8). A turn that had
    /// begun ends `interrupted`; a message written to a process whose conversation holds it ends
    /// `taken_not_answered`; every other queued message is delivered.
    fn recover(&mut self) -> Result<(), BotError> {
        // Permission requests the previous run left open: nobody can answer them now.
        let open = self
            .store
            .read(|c| store::chat::unanswered_permission_requests(c, &self.id))?;
        for (request_id, tool) in open {
            self.add_item(
                "permission_answer",
                None,
                json!({
                    "request_id": request_id, "tool": tool, "behavior": "deny",
                    "by": "botvisord",
                    "message": "botvisord stopped before this request was answered.",
                }),
            );
        }
        let running = self.store.read(|c| store::turns::running(c, &self.id))?;
        for turn_id in running {
            self.finish_turn(
                &turn_id,
                TurnOutcome::Interrupted,
                "daemon_restarted",
                Some((
                    "system",
                    json!({"text": "botvisord stopped before the turn finished."}),
                )),
                None,
            );
        }
        let queued = self.store.read(|c| store::turns::queued(c, &self.id))?;
        let deliveries = self
            .store
            .read(|c| store::deliveries::of_bot(c, &self.id))?;
        let record = self.record();
        let env = self.build_env(&record);
        for turn in queued {
            let delivery = deliveries.get(&turn.id);
            let left = decide::left_turn(
                false,
                record.session_id.as_deref(),
                delivery.map(|d| d.session_id.as_str()),
                |session| {
                    delivery.is_some_and(|d| {
                        self.runtime.conversation_has_message(
                            &env,
                            Path::new(&record.cwd),
                            session,
                            &turn.text,
                            d.written_at,
                        )
                    })
                },
            );
            match left {
                decide::LeftTurn::Unreplayed(UnreplayedFate::Taken { adopt }) => {
                    tracing::info!(bot_id = %self.id, turn_id = %turn.id, "a message the previous run wrote is in the conversation: not sent again");
                    self.finish_turn(
                        &turn.id,
                        TurnOutcome::TakenNotAnswered,
                        "taken_not_answered",
                        Some(("system", taken_note())),
                        adopt.as_deref(),
                    );
                }
                _ => self.queue.push_back(turn),
            }
        }
        self.publish_queue();
        Ok(())
    }
}

/// What [`Actor::settle_inflight`] did with the turn in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Settled {
    /// No turn was in flight.
    Nothing,
    /// Its message goes to the next process.
    Requeued,
    /// Its conversation holds its message: ended `taken_not_answered`.
    Taken,
    /// It had begun and ended with the outcome given.
    Ended,
}

/// The payload of a `turn_finished` chat item: `{"turn_id", "outcome", "reason", "text"}`.
fn turn_finished_payload(turn_id: &str, outcome: TurnOutcome, reason: &str, text: &str) -> String {
    json!({"turn_id": turn_id, "outcome": outcome.as_str(), "reason": reason, "text": text})
        .to_string()
}

/// The `system` item of a turn whose message the conversation holds unanswered.
fn taken_note() -> Value {
    json!({
        "text": "The agent stopped after this message reached the conversation and before it \
                 was answered; it is not sent again.",
        "reason": "taken_not_answered",
    })
}

/// A task that owns a process's stdin and writes what it is sent; dropping the sender closes
/// stdin.
fn spawn_writer(mut stdin: tokio::process::ChildStdin) -> mpsc::UnboundedSender<Vec<u8>> {
    let (tx, mut rx) = mpsc::unbounded_channel::<Vec<u8>>();
    tokio::spawn(async move {
        while let Some(bytes) = rx.recv().await {
            if stdin.write_all(&bytes).await.is_err() || stdin.flush().await.is_err() {
                break;
            }
        }
    });
    tx
}
