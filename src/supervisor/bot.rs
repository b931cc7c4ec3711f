//! The bot actor: one task per bot that owns its process, its queue of messages and its state.
//!
//! Every input (a client's command, a stdout line, the process's exit, a restart timer) is
//! handled to its end before the next, so calls on one bot apply in order (design rule 7) and
//! there is never more than one live process per bot, hence per conversation.

mod commands;
mod credentials;
mod effects;
mod events;
mod group_commit;
mod handover;
mod keep;
mod launch;
mod recover;
#[cfg(test)]
mod shell_tests;
mod stdin;
mod stop;
mod usage;
mod views;

use crate::supervisor::Property;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

pub use super::core::State;
use super::core::stop::StopReason;
use super::core::{BotCore, Standing};
pub use super::view::{BotView, SharedView, update_view};
use super::{BotError, BotHandle, Command, Publication, Publisher, Shared};
use crate::config::Config;
use crate::process::identity::ProcessIdentity;
use crate::process::verdict::Proof;
use crate::process::{self, ExitInfo, ProcEvent, ProcessHandle, tree};
use crate::runtime::Runtime;
use crate::store::{self, BotRecord, ChatItem, Store};

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

struct Proc {
    handle: ProcessHandle,
    stdin: Option<stdin::StdinLink>,
    /// The task that writes what `stdin` is sent ([`stdin::spawn_writer`]).
    writer: Option<tokio::task::JoinHandle<()>>,
    /// Its protocol: lines in and out, request ids, the conversation it holds.
    protocol: Box<dyn crate::runtime::Protocol>,
    /// Its descendants when the turn in flight began: what an interrupted turn started is what
    /// is new since (`crate::supervisor::core::interrupt`). Looked at as the message is written
    /// to a process that began a turn before (`began_a_turn`), else once the CLI says it took
    /// the message (`Effect::LookBeforeTurn`), else at its replay: what the agent starts at
    /// launch (MCP servers) is not the turn's. `None` until then.
    before_turn: Option<Vec<ProcessIdentity>>,
    /// A turn began on this process: it is past its launch, and what it runs between turns
    /// was started before the next message.
    began_a_turn: bool,
    /// Samples its resource use while the bot is active; dropped with it.
    usage: process::usage::Watch,
    /// The environment it was started with (where its files are, whatever the bot's record
    /// says since).
    env: BTreeMap<String, String>,
    /// The conversation it was launched to fork (`--fork-session`): it continues in a copy, so
    /// another process holding this one is no second writer of it.
    forked_from: Option<String>,
}

/// What handling an event asks the actor to do next.
#[derive(Debug, PartialEq)]
enum Next {
    Nothing,
    /// The core asked for a stop ([`Actor::stop_if_asked`]).
    StopProcess,
    Exited(ExitInfo),
}

struct Actor {
    id: String,
    /// The runtime, the store, the configuration and the publisher, shared with the bot's
    /// handle; and the leases and the prompt book clients change through it.
    shared: Arc<Shared>,
    view: Arc<SharedView>,
    proc: Option<Proc>,
    generation: u64,
    proc_tx: mpsc::UnboundedSender<ProcEvent>,
    proc_rx: mpsc::UnboundedReceiver<ProcEvent>,
    /// The bot's core state and timers: its turns, what it keeps between processes, and every
    /// deadline it has ([`BotCore`]).
    core: BotCore,
    /// Known descendants of the current (or last) process, by identity.
    known: Vec<ProcessIdentity>,
    /// What an interrupted turn left running, to stop once the event is handled: the turn and
    /// the processes.
    left_by_interrupt: Option<(String, Vec<ProcessIdentity>)>,
    /// The watch on the CLI's credentials file while the bot waits for its login.
    credentials: Option<credentials::Watch>,
    /// The environment the last agent was launched with (or taken over with): a login hold that
    /// begins after the bot's login variables changed since goes on at once.
    launched_env: Option<BTreeMap<String, String>>,
    /// The actor's own command queue, for what it hears from outside the bus (the credentials
    /// watch).
    commands: mpsc::UnboundedSender<Command>,
    /// botvisor's copy of the conversation could not be updated at the last turn's end (said
    /// once in the chat until it can again).
    copy_failing: bool,
    /// The core asked to stop the process ([`crate::supervisor::core::Effect::Stop`]): done once
    /// the input's other effects are.
    stop_asked: Option<StopReason>,
    /// Whether the last commit carried out was durable ([`Effect::ReportCommit`] reads it).
    ///
    /// [`Effect::ReportCommit`]: super::core::Effect::ReportCommit
    last_commit_ok: bool,
    /// The latest promise among the messages queued to this bot ([`Command::Queued`]): kept
    /// before any message is written to the agent (issue 50).
    ///
    /// [`Command::Queued`]: super::Command::Queued
    promised: crate::store::Promise,
    /// A commit the core asked for failed: the core is told what stands on record before its
    /// next input ([`crate::supervisor::core::Input::Recorded`]).
    recorded_due: bool,
    /// The core ended the bot's supervision ([`super::core::Effect::End`]): the actor stops.
    ended: bool,
    /// What carrying out effects told (a commit's outcome, a write's), for the core once the
    /// effects before it are carried out: [`Actor::handle`] feeds them, so the core is never
    /// entered from inside [`Actor::apply`].
    told: std::collections::VecDeque<super::core::Input>,
    /// Effects are being carried out ([`Actor::run_effects`]): an input waits in `told`.
    applying: bool,
    /// The binary and environment a launch checked (`Actor::start`), for the spawn the core
    /// asks for next (`Effect::Spawn`).
    checked: Option<(std::path::PathBuf, BTreeMap<String, String>)>,
    /// The cgroup folder of the agent's scope, once the user manager made it (issue 47): the
    /// stop's proof reads it.
    scope_dir: Arc<std::sync::Mutex<Option<std::path::PathBuf>>>,
    /// The core asked to clean up what an exited process left
    /// ([`crate::supervisor::core::Effect::CleanUp`]): done once the input's other effects are.
    clean_up_asked: Option<StopReason>,
    /// Stdout lines that arrived together, read as one group: their chat items are committed
    /// in one transaction ([`group_commit`]).
    group: group_commit::Group,
    /// Turns whose end is committed and not said yet (turn id, outcome): `TurnFinished` goes out
    /// once every other effect of the same input is carried out ([`Actor::say_turn_ends`]).
    turn_ends: Vec<(String, &'static str)>,
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

/// For a fresh restart asked through `handle`: clears the recorded session now, in one
/// transaction with a system chat item, and publishes both.
pub(crate) fn forget_session(handle: &BotHandle, reason: &str) -> Result<(), BotError> {
    let Some(old) = handle.snapshot().record.session_id else {
        return Ok(());
    };
    let payload = super::core::forget_payload(&old, reason, &super::core::fresh_restart_text(&old));
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
                vec![Property::SessionId],
                |v| v.record.session_id = None,
            );
            publish_item(&shared.publisher, &handle.id, item);
        },
    )?;
    Ok(())
}

/// How a bot's actor begins.
#[derive(Debug, Default)]
pub struct Loaded {
    /// The bot was loaded at the daemon's start (not created): what the previous daemon left is
    /// recovered, or its agent taken over.
    pub loaded: bool,
    /// Its agent's descriptors the service manager passed back (issue 47).
    pub passed: Option<BTreeMap<crate::systemd::fdstore::Role, std::os::fd::OwnedFd>>,
}

/// Starts the actor of a bot. Loaded at the daemon's start, the agent the previous daemon
/// handed over is taken over (issue 47); otherwise the turns it left are settled once or
/// delivered once (`super::core::left_turns`).
pub fn spawn_actor(
    record: BotRecord,
    runtime: Arc<dyn Runtime>,
    store: Arc<Store>,
    config: Arc<Config>,
    publisher: Publisher,
    begin: Loaded,
    gate: tokio::sync::watch::Receiver<bool>,
) -> BotHandle {
    let Loaded { loaded, passed } = begin;
    let (tx, rx) = mpsc::unbounded_channel();
    let (proc_tx, proc_rx) = mpsc::unbounded_channel();
    let id = record.id.clone();
    let standing = Standing::loaded(views::on_record(&record));
    let state = standing.state();
    let stop_verdict = record.stop_verdict.clone();
    // A loaded bot's waiting messages count from the start, while the daemon still recovers.
    let queued = if loaded {
        store
            .read(|c| store::turns::queued(c, &record.id))
            .map_or(0, |q| q.len() as u32)
    } else {
        0
    };
    let view = Arc::new(SharedView::new(BotView {
        record,
        state,
        process_id: 0,
        queued,
        holders: 0,
        stop_verdict,
        pending: Vec::new(),
        partial_text: String::new(),
        storage_error: None,
        stop_proof: String::new(),
        budget_default: budget_default(&config),
        plan_limit: None,
        usage: Default::default(),
        held_by: String::new(),
        activity: Default::default(),
        last_used: None,
    }));
    let shared = Arc::new(Shared {
        runtime: runtime.clone(),
        config: config.clone(),
        store: store.clone(),
        publisher: publisher.clone(),
        deleted: std::sync::atomic::AtomicBool::new(false),
        holders: Default::default(),
        prompts: Default::default(),
        import: Default::default(),
    });
    let actor = Actor {
        id: id.clone(),
        shared: shared.clone(),
        view: view.clone(),
        proc: None,
        generation: 0,
        proc_tx,
        proc_rx,
        core: BotCore::new(
            core_settings(&config, shared.runtime.as_ref()),
            Box::new(RuntimeWords(shared.runtime.clone())),
            standing,
        ),
        known: Vec::new(),
        left_by_interrupt: None,
        credentials: None,
        launched_env: None,
        commands: tx.clone(),
        copy_failing: false,
        stop_asked: None,
        last_commit_ok: true,
        promised: crate::store::Promise::KEPT,
        recorded_due: false,
        ended: false,
        told: Default::default(),
        applying: false,
        checked: None,
        clean_up_asked: None,
        scope_dir: Default::default(),
        group: group_commit::Group::default(),
        turn_ends: Vec::new(),
    };
    let span = tracing::info_span!("bot", bot_id = %id);
    let guarded = {
        let view = view.clone();
        let publisher = shared.publisher.clone();
        let id = id.clone();
        async move {
            let run = std::panic::AssertUnwindSafe(actor.run(rx, loaded, passed, gate));
            if let Err(panic) = futures_util::FutureExt::catch_unwind(run).await {
                let what = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                tracing::error!(bot_id = %id, panic = %what, "the bot's supervisor failed");
                update_view(
                    &view,
                    &publisher,
                    &id,
                    vec![Property::State, Property::LastError],
                    |v| {
                        v.state = State::Failed;
                        v.record.last_error = format!(
                            "botvisor's supervisor of this bot failed ({what}); restart botvisord"
                        );
                    },
                );
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

async fn sleep_until_opt(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d.into()).await,
        None => std::future::pending().await,
    }
}

/// What the core's rules read of the configuration and the runtime ([`core::Settings`]).
///
/// [`core::Settings`]: super::core::Settings
fn core_settings(config: &Config, runtime: &dyn crate::runtime::Runtime) -> super::core::Settings {
    use super::core::{Bounds, CrashLimits, ExitSettings, LimitTimes};
    super::core::Settings {
        text_interval: TEXT_DELTA_INTERVAL,
        bounds: Bounds {
            start_s: config.start_timeout_s,
            interrupt_grace_s: config.interrupt_grace_s,
            control_s: config.control_timeout_s,
        },
        exit: ExitSettings {
            fresh_window: Duration::from_secs_f64(config.fresh_start_if_dies_within_s),
            redo_limit: config.redo_limit,
            crash_limits: CrashLimits {
                window: Duration::from_secs(config.crash_loop_window_s),
                limit: config.crash_loop_limit,
            },
        },
        limit_times: LimitTimes {
            margin: Duration::from_secs_f64(config.limit_margin_s),
            retry: Duration::from_secs_f64(config.limit_retry_s),
        },
        continue_after_limit: config.continue_after_limit,
        budget_default: budget_default(config),
        api_hint: runtime.api_hint(),
    }
}

/// The daemon's budget (`budget_usd`) in nano-dollars; `None` for none or 0.
fn budget_default(config: &Config) -> Option<u64> {
    config.budget_usd.map(crate::cost::nanos).filter(|n| *n > 0)
}

impl Actor {
    /// Handles `first` and the process events that arrived with it (at most
    /// [`group_commit::MAX_GROUP_LINES`]), as one group: their chat items are committed
    /// together. The group ends at the first event that asks for more than chat items and
    /// streamed text, or when no event waits.
    fn read_group(&mut self, first: ProcEvent) -> Next {
        self.group.open = true;
        self.group.ended = false;
        self.group.began = Some(crate::profile::now());
        let mut ev = first;
        let mut read = 0;
        let next = loop {
            let next = self.on_proc_event(ev);
            read += 1;
            if next != Next::Nothing
                || self.group.ended
                || self.left_by_interrupt.is_some()
                || read >= group_commit::MAX_GROUP_LINES
            {
                break next;
            }
            match self.proc_rx.try_recv() {
                Ok(more) => ev = more,
                Err(_) => break next,
            }
        };
        self.group.open = false;
        self.commit_group();
        self.group.began = None;
        self.say_turn_ends();
        next
    }

    /// A plan's limit or the login no longer holds (`Input::HoldLifted`).
    fn hold_over(&mut self) {
        let running = self.proc.is_some();
        self.handle(super::core::Input::HoldLifted { running });
    }

    async fn run(
        mut self,
        mut rx: mpsc::UnboundedReceiver<Command>,
        loaded: bool,
        passed: Option<BTreeMap<crate::systemd::fdstore::Role, std::os::fd::OwnedFd>>,
        mut gate: tokio::sync::watch::Receiver<bool>,
    ) {
        if gate.wait_for(|open| *open).await.is_err() {
            return;
        }
        if loaded
            && !self.take_over(passed).await
            && let Err(e) = self.recover()
        {
            tracing::error!(bot_id = %self.id, error = %e, "cannot recover the bot's turns");
        }
        let record = self.record();
        self.handle(super::core::Input::Began {
            attempt_cut: record.attempt_cut,
            conversation_cost: record.conversation_cost,
            running: self.proc.is_some(),
        });
        self.follow_credentials();
        self.pump().await;
        loop {
            tokio::select! {
                cmd = rx.recv() => {
                    let Some(cmd) = cmd else { break };
                    if !self.on_command(cmd).await {
                        return;
                    }
                }
                Some(ev) = self.proc_rx.recv() => {
                    match self.read_group(ev) {
                        Next::StopProcess => self.stop_if_asked().await,
                        Next::Exited(info) => self.on_exit(info).await,
                        Next::Nothing => {}
                    }
                    if let Some((turn, left)) = self.left_by_interrupt.take() {
                        self.stop_left_by_interrupt(&turn, left).await;
                    }
                }
                _ = sleep_until_opt(self.core.poll_timeout()) => {
                    self.handle(super::core::Input::Timeout);
                    self.stop_if_asked().await;
                }
            }
            self.pump().await;
            self.rearm_idle();
            self.usage_activity();
        }
        self.stop_process(StopReason::Shutdown).await;
    }
}

/// The whole environment of a bot's CLI: the daemon's variables the configuration lets through,
/// the bot's own, and the marker that finds its descendants ([`tree::BOT_MARKER`]).
pub(crate) fn bot_env(config: &Config, record: &BotRecord) -> BTreeMap<String, String> {
    let mut env: BTreeMap<String, String> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .filter(|(k, _)| config.env_allowed(k))
        .collect();
    env.extend(record.env.clone());
    env.insert(tree::BOT_MARKER.to_owned(), record.id.clone());
    env
}

impl Actor {
    /// What the stdin writer calls once a user message's line is written whole: its delivery
    /// recorded whole. A record that cannot be written leaves the delivery "partly written",
    /// which only makes a take-over after a crash stop the agent and send the message again.
    fn message_whole(&self) -> impl Fn() + Send + Sync + 'static {
        let store = self.shared.store.clone();
        let id = self.id.clone();
        move || {
            if let Err(e) = store.tx_now(|tx| store::deliveries::written_whole(tx, &id)) {
                tracing::warn!(bot_id = %id, error = %e, "cannot record that the message was written whole");
            }
        }
    }
}

/// The bot's runtime's reading of what its CLI says, as the core reads it
/// ([`super::core::Words`]).
struct RuntimeWords(Arc<dyn Runtime>);

impl std::fmt::Debug for RuntimeWords {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RuntimeWords")
    }
}

impl super::core::Words for RuntimeWords {
    fn fatal_reason(&self, text: &str) -> Option<&'static str> {
        self.0.fatal_reason(text)
    }

    fn session_in_use(&self, stderr: &str) -> Option<String> {
        self.0.session_in_use(stderr)
    }

    fn held_elsewhere(&self, error: &str) -> bool {
        self.0.held_elsewhere(error)
    }

    fn scopes(&self, request: &serde_json::Value) -> Vec<(String, String)> {
        self.0
            .scopes(request)
            .into_iter()
            .map(|s| (s.as_str().to_owned(), self.0.reach(request, s)))
            .collect()
    }
}
