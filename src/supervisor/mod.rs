//! The supervisor: one actor task per bot, owning that bot's process and state, and the registry
//! that creates, loads and deletes bots.
//!
//! Calls on one bot go through its actor's queue and are applied in order (design rule 7). What
//! an actor changes is committed to the [`Store`] first and then handed to the [`Publication`]
//! channel, from which the D-Bus layer emits signals (rule 1).

pub mod bot;
pub(crate) mod checks;
mod conversations;
pub mod core;
mod create;
mod created_by;
pub mod evict;
mod handle;
mod imported;
pub mod keep;
pub mod memory_max;
mod names;
mod registry;
pub mod schedules;
pub mod view;
mod worktrees;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{mpsc, oneshot};

use crate::config::Config;
use crate::runtime::Runtime;
use crate::store::{self, BotRecord, Store};

pub use bot::State;
pub use checks::{MAX_NAME_CHARS, budget_nanos, canonical_cwd, check_model, check_permission_mode};
pub use conversations::{Listed, MAX_TITLE_CHARS};
pub use core::prompts::{ANSWERED_KEPT, Prompt, PromptBook};
pub use created_by::MAX_CREATED_BY_CHARS;
pub(crate) use handle::Shared;
pub use handle::{Answer, BotHandle};
pub use names::{check_name, default_name, id_like};
pub use view::{BotView, Property, SharedView};

/// Errors of bot operations; the D-Bus layer maps each to `org.botvisor.Botvisor1.Error.<Name>`.
#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum BotError {
    /// No such bot.
    #[error("{0}")]
    NotFound(String),
    /// A call's arguments are wrong; nothing changed.
    #[error("{0}")]
    InvalidArgument(String),
    /// The bot cannot do this now.
    #[error("{0}")]
    Busy(String),
    /// The runtime's CLI cannot be started.
    #[error("{0}")]
    RuntimeUnavailable(String),
    /// The database cannot be written now (design rule 15); nothing changed.
    #[error("{0}")]
    StorageUnavailable(String),
    /// What was asked needs something this daemon was not given (for example `memory_max`
    /// without a delegated memory controller); nothing changed.
    #[error("{0}")]
    NotSupported(String),
    /// A limit of the daemon's configuration refuses it (for example `agent_max_depth`);
    /// nothing changed.
    #[error("{0}")]
    LimitExceeded(String),
    /// Anything else.
    #[error("{0}")]
    Failed(String),
}

impl From<store::StoreError> for BotError {
    fn from(e: store::StoreError) -> Self {
        match e {
            store::StoreError::Unavailable(_) => BotError::StorageUnavailable(e.to_string()),
            e => BotError::Failed(e.to_string()),
        }
    }
}

/// What the D-Bus layer is asked to announce, always after the change is committed.
#[derive(Debug, Clone, PartialEq)]
pub enum Publication {
    /// `ChatItemAdded(t seq, s kind, s payload)` on the bot.
    ChatItemAdded {
        /// The bot.
        bot_id: String,
        /// The item's sequence number.
        seq: u64,
        /// The item's kind.
        kind: String,
        /// The item's JSON payload.
        payload: String,
    },
    /// `TurnFinished(s turn_id, s outcome)` on the bot.
    TurnFinished {
        /// The bot.
        bot_id: String,
        /// The turn `Send` returned.
        turn_id: String,
        /// `success`, `error`, `crashed` or `interrupted`.
        outcome: String,
    },
    /// The bot was deleted: its object goes away.
    BotRemoved {
        /// The bot.
        bot_id: String,
    },
    /// `PermissionRequested(s request_id, s tool, s input_json)` on the bot.
    PermissionRequested {
        /// The bot.
        bot_id: String,
        /// The CLI's request id.
        request_id: String,
        /// The tool.
        tool: String,
        /// Its input, as JSON.
        input: String,
    },
    /// `TextDelta(s turn_id, s text)`: assistant text as it streams, coalesced.
    TextDelta {
        /// The bot.
        bot_id: String,
        /// The turn (empty for a turn the CLI started by itself).
        turn_id: String,
        /// The new text since the last signal.
        text: String,
    },
    /// `PropertiesChanged` for these properties of the bot, with their values at the change.
    PropertiesChanged {
        /// The bot.
        bot_id: String,
        /// The properties and their values.
        changed: Vec<(view::Property, PropertyValue)>,
    },
}

/// A property value as published.
#[derive(Debug, Clone, PartialEq)]
pub enum PropertyValue {
    /// A D-Bus `s`.
    Str(String),
    /// A D-Bus `u`.
    U32(u32),
    /// A D-Bus `t`.
    U64(u64),
    /// A D-Bus `d`.
    F64(f64),
    /// A D-Bus `(ssdt)`.
    PlanLimit((String, String, f64, u64)),
    /// A D-Bus `a(sss)`.
    Triples(Vec<(String, String, String)>),
}

/// The sending side of the publication channel.
pub type Publisher = mpsc::UnboundedSender<Publication>;

/// A command to a bot actor. Commands are queued by the D-Bus layer in the order the calls
/// arrived, and the actor applies them in that order (design rule 7).
#[derive(Debug)]
pub enum Command {
    /// A command for the bot's core, handed to it as it is ([`core::Cmd`]: a message queued, a
    /// Stop, a Restart, a live setting, a permission answer, an interrupt, a budget, something
    /// the agent takes at launch changed); a stop it asks for is carried out at once.
    Core(core::Cmd),
    /// A message queued ([`core::Cmd::Queued`]) whose `Send` was promised in `promise`: no
    /// message is written to the agent before that promise is kept (issue 50: the commit is
    /// synced after it was queued, with others that came together). With `answered`, the
    /// actor takes the message once the `Send`'s reply is sent (or that receiver is dropped;
    /// at most [`ANSWER_WAIT`]): a client hears its turn id before anything of its turn.
    Queued {
        /// The message.
        turn: core::QueuedTurn,
        /// Kept before the message goes to the agent.
        promise: crate::store::Promise,
        /// Told once the `Send`'s reply is sent; `None` for a message no client waits for (a
        /// schedule's).
        answered: Option<oneshot::Receiver<()>>,
    },
    /// Stop, then delete the bot with its history; with a removal, its git worktree goes once
    /// the agent is stopped (as [`core::worktree::removal`] allowed at the call).
    Delete(Option<core::worktree::Removal>),
    /// Stop the process for daemon shutdown and end the actor.
    Shutdown(oneshot::Sender<()>),
    /// botvisord's unit restarts (issue 47): hand the running agent over to the next botvisord
    /// and end the actor (an agent that cannot be handed over is stopped as at a shutdown).
    HandOver(oneshot::Sender<()>),
    /// The set of clients holding the bot changed, or a client holding it asked again; `warm`:
    /// the lease asked for a warm start (issue 31, [`core::Cmd::Leases`], with the count of
    /// holders the actor reads when it handles it).
    HoldersChanged {
        /// A warm start was asked.
        warm: bool,
    },
    /// The CLI's credentials file changed (a bot waiting for its login).
    CredentialsChanged,
    /// A client set the bot's environment (already recorded): applied at the next launch; a
    /// running agent with no turn in flight is restarted on the same conversation now, when it
    /// `changed`. Set again unchanged, it still lets a bot waiting for its login go on (the user
    /// renewed the key where it comes from).
    EnvironmentChanged {
        /// Whether the environment differs from the one recorded before.
        changed: bool,
    },
    /// The machine is under memory pressure and this bot was found the least recently used idle
    /// one: it stops if it still may (`core::evict`), and answers once its stop ended, `true`,
    /// or at once, `false`, when it may not (issue 31).
    MemoryPressure(oneshot::Sender<bool>),
}

/// How long a bot's actor waits for a `Send`'s reply to be sent before it takes the message
/// ([`Command::Queued`]): a connection that stops writing holds its bot no longer.
pub const ANSWER_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// What `CreateBot` asks for, validated by the D-Bus layer.
#[derive(Debug, Clone, Default)]
pub struct NewBot {
    /// Absolute path of an existing directory (canonicalised by [`Supervisor::create`]).
    pub cwd: String,
    /// Name; default: the last element of the canonical `cwd` (unsafe characters, see
    /// [`crate::text`], become `_`). A given name may not hold them (InvalidArgument).
    pub name: Option<String>,
    /// Runtime name; default `claude`.
    pub runtime: Option<String>,
    /// Model; default: config `default_model`.
    pub model: Option<String>,
    /// Permission mode; default: config `default_permission_mode`.
    pub permission_mode: Option<String>,
    /// Extra environment for the CLI.
    pub env: BTreeMap<String, String>,
    /// Idle timeout in seconds.
    pub idle_timeout_s: Option<u64>,
    /// Memory limit in bytes ([`memory_max::NO_LIMIT`]: none); checked by [`memory_max::decide`].
    pub memory_max: Option<u64>,
    /// Budget in nano-dollars (`Some(0)`: none; `None`: config `budget_usd`).
    pub budget: Option<u64>,
    /// Continue a turn a usage limit cut (`None`: config `continue_after_limit`).
    pub continue_after_limit: Option<bool>,
    /// A conversation to adopt (issue 28): its session (Codex: thread) id, among the
    /// conversations [`Supervisor::conversations`] lists for `cwd`.
    pub session_id: Option<String>,
    /// A git worktree to make for the bot from the repository that holds `cwd` (issue 28): the
    /// bot's `cwd` is then the worktree.
    pub worktree: Option<crate::worktree::Ask>,
    /// The name the creating client gave (`created_by`), checked by [`Supervisor::create`].
    pub created_by_client: Option<String>,
    /// The bot whose agent (or a process below it) called, as botvisord read it from the
    /// caller's process; `None` for any other caller.
    pub created_by_bot: Option<String>,
}

/// All bots of the daemon.
pub struct Supervisor {
    store: Arc<Store>,
    config: Arc<Config>,
    runtimes: BTreeMap<&'static str, Arc<dyn Runtime>>,
    bots: Mutex<registry::Bots>,
    /// The registry's list oldest first, read without its lock.
    listing: Arc<registry::Listing>,
    /// Deleted bots whose actors may still be stopping their agents: a shutdown waits for them
    /// too (design rule 9). Pruned of ended actors at each Delete.
    deleting: Mutex<Vec<BotHandle>>,
    publisher: Publisher,
    gate: tokio::sync::watch::Sender<bool>,
    /// One `CreateBot` at a time, from its checks to its record: the name it takes, the
    /// conversation it adopts and the worktree branch it names are free when it looks and still
    /// free when it records them (two creates at once gave two bots one name and two bots one
    /// conversation). Other calls are not held: a create runs in a task of its own
    /// (`dbus::guard::Detached`).
    creating: tokio::sync::Mutex<()>,
    /// The agents' descriptors the service manager passed back at start, by bot id (issue 47):
    /// each bot's actor takes its own over, once.
    passed: Mutex<BTreeMap<String, BTreeMap<crate::systemd::fdstore::Role, std::os::fd::OwnedFd>>>,
    /// One change of the schedules at a time, from the database to the timer units (issue 49):
    /// the units are always written from what the database says last.
    scheduling: tokio::sync::Mutex<()>,
    /// Held by a fire into a fresh conversation from its last look at the claim to its claim,
    /// so that two fires of one due time never both begin a conversation.
    fresh_fires: tokio::sync::Mutex<()>,
    /// Each schedule's next due time (Unix seconds), as systemd's parser last told it:
    /// `Schedules` is read from here, never by running the parser in a client's call.
    next_dues: Mutex<BTreeMap<String, i64>>,
}

impl Supervisor {
    /// A supervisor over `store` with the given runtimes.
    pub fn new(
        store: Arc<Store>,
        config: Arc<Config>,
        runtimes: Vec<Arc<dyn Runtime>>,
        publisher: Publisher,
    ) -> Arc<Supervisor> {
        let bots = registry::Bots::default();
        Arc::new(Supervisor {
            listing: bots.listing(),
            store,
            config,
            runtimes: runtimes.into_iter().map(|r| (r.name(), r)).collect(),
            bots: Mutex::new(bots),
            deleting: Mutex::new(Vec::new()),
            publisher,
            gate: tokio::sync::watch::Sender::new(false),
            creating: tokio::sync::Mutex::new(()),
            passed: Mutex::new(BTreeMap::new()),
            scheduling: tokio::sync::Mutex::new(()),
            fresh_fires: tokio::sync::Mutex::new(()),
            next_dues: Mutex::new(BTreeMap::new()),
        })
    }

    /// Lets the actors run. Until then they queue commands and start no process, so a daemon
    /// that fails to become the bus name's owner never touches an agent.
    pub fn open(&self) {
        self.gate.send_replace(true);
    }

    /// The store.
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// The daemon's configuration.
    pub fn config(&self) -> &Arc<Config> {
        &self.config
    }

    /// Where committed changes go to be signalled (design rule 1).
    pub(crate) fn publisher(&self) -> &Publisher {
        &self.publisher
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
        for h in self.list().iter() {
            bot::update_view(
                &h.view,
                &self.publisher,
                &h.id,
                vec![Property::LastError],
                |v| v.storage_error = text.clone(),
            );
        }
    }

    /// The names of the runtimes, sorted.
    pub fn runtime_names(&self) -> Vec<String> {
        self.runtimes.keys().map(|s| s.to_string()).collect()
    }

    /// Starts an actor for every bot in the store (at daemon start) and returns their handles.
    pub fn load(&self) -> Result<Vec<BotHandle>, BotError> {
        let records = self.store.read(store::bots::load_all)?;
        let mut handles = Vec::new();
        for record in records {
            let Some(runtime) = self.runtimes.get(record.runtime.as_str()).cloned() else {
                tracing::warn!(bot_id = %record.id, runtime = %record.runtime, "bot of an unknown runtime is not served");
                continue;
            };
            handles.push(self.start_actor(record, runtime, true));
        }
        Ok(handles)
    }

    /// Renames the bot `id` to `name`, checked as `CreateBot` checks a name ([`check_name`])
    /// against the other bots' names; recorded, then `Name` changes. The same name again changes
    /// nothing. Errors: InvalidArgument, NotFound, StorageUnavailable; each changes nothing.
    pub fn rename(&self, id: &str, name: &str) -> Result<(), BotError> {
        let handle = self.get(id)?;
        if handle.snapshot().record.name == name {
            return handle.check_alive();
        }
        check_name("the name", name, |n| self.name_like(n, Some(id)))?;
        handle.set_name(name)?;
        self.bots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .renamed(id, name);
        Ok(())
    }

    /// The name of a bot other than `except` that looks as `name` does (the registry's index).
    fn name_like(&self, name: &str, except: Option<&str>) -> Option<String> {
        self.bots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .looking_like(name, except)
    }

    /// A default name from `base` that no bot's name looks like (the registry's index).
    fn free_name(&self, base: &str) -> String {
        self.bots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .free_name(base)
    }

    fn start_actor(&self, record: BotRecord, runtime: Arc<dyn Runtime>, loaded: bool) -> BotHandle {
        let passed = loaded
            .then(|| {
                self.passed
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&record.id)
            })
            .flatten();
        let handle = bot::spawn_actor(
            record,
            runtime,
            self.store.clone(),
            self.config.clone(),
            self.publisher.clone(),
            bot::Loaded { loaded, passed },
            self.gate.subscribe(),
        );
        let (created_at, name) = {
            let view = handle.view_guard();
            (view.record.created_at.clone(), view.record.name.clone())
        };
        self.bots.lock().unwrap_or_else(|p| p.into_inner()).insert(
            created_at,
            &name,
            handle.clone(),
        );
        handle
    }

    /// The bot with this id.
    pub fn get(&self, id: &str) -> Result<BotHandle, BotError> {
        self.bots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(id)
            .cloned()
            .ok_or_else(|| BotError::NotFound(format!("no bot with id `{id}`")))
    }

    /// The id of a bot for which `pred` holds, looked at in place (no bot's handle copied: a
    /// create or a call's check costs the same at a thousand bots).
    fn find_bot(&self, pred: impl Fn(&BotHandle) -> bool) -> Option<String> {
        self.bots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .oldest_first()
            .find(|h| pred(h))
            .map(|h| h.id.clone())
    }

    /// How many bots `pred` holds for, looked at in place.
    fn count_bots(&self, pred: impl Fn(&BotHandle) -> bool) -> usize {
        self.bots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .oldest_first()
            .filter(|h| pred(h))
            .count()
    }

    /// All bots, oldest first: one copy shared by every reader, read without the lock a create
    /// or a delete holds (issue 50), except by the first read after one.
    pub fn list(&self) -> Arc<Vec<BotHandle>> {
        if let Some(list) = self.listing.current() {
            return list;
        }
        self.bots.lock().unwrap_or_else(|p| p.into_inner()).listed()
    }

    /// Deletes a bot: marked deleted in the store before this call returns (a daemon that crashes
    /// before the actor is done deletes it at its next start, `daemon::left_processes::stop_all`),
    /// it leaves the list at once; its actor stops the process, deletes it from the store, and
    /// then its object goes away. Errors: NotFound, StorageUnavailable (nothing changed).
    pub fn delete(&self, id: &str) -> Result<(), BotError> {
        self.delete_with(id, None)
    }

    /// A client left the bus: its leases end.
    pub fn client_gone(&self, client: &str) {
        for h in self.list().iter() {
            if h.client_gone(client) {
                tracing::info!(bot_id = %h.id, client, "lease ended: the client left the bus");
            }
        }
    }

    /// The descriptors the service manager passed back at start (issue 47), before [`load`]:
    /// each bot's are its actor's; those of no bot are closed and taken out of the store.
    ///
    /// [`load`]: Supervisor::load
    pub fn give_passed(&self, passed: crate::systemd::fdstore::Passed) {
        let known: std::collections::BTreeSet<String> = self
            .store
            .read(store::bots::load_all)
            .map(|all| all.into_iter().map(|r| r.id).collect())
            .unwrap_or_default();
        let mut mine = self.passed.lock().unwrap_or_else(|p| p.into_inner());
        for (bot, fds) in passed.bots {
            if known.contains(&bot) {
                mine.insert(bot, fds);
            } else {
                drop(fds);
                crate::process::spawn::unstore_descriptors(&bot);
            }
        }
        for (name, fd) in passed.other {
            drop(fd);
            if let Err(e) = crate::systemd::fdstore::remove(&name) {
                tracing::warn!(name, error = %e, "cannot take a stored descriptor out of the store");
            }
        }
    }

    /// The bots whose agent the previous botvisord left running and that this one will take
    /// over (issue 47): its descriptors passed back, and the process it handed over, or else
    /// the root recorded at its launch (a killed botvisord), alive. Their recorded processes are
    /// not stopped at start.
    pub fn taken_over(&self) -> std::collections::BTreeSet<String> {
        use crate::process::identity::{Liveness, liveness};
        let roots = self.store.read(store::processes::all).unwrap_or_default();
        let passed = self.passed.lock().unwrap_or_else(|p| p.into_inner());
        passed
            .keys()
            .filter(|id| {
                let handed = self
                    .store
                    .read(|c| store::handovers::get(c, id))
                    .ok()
                    .flatten()
                    .map(|h| h.identity);
                let root = roots
                    .iter()
                    .find(|r| &r.bot_id == *id && r.role == "root")
                    .map(|r| r.identity.clone());
                handed
                    .or(root)
                    .is_some_and(|identity| liveness(&identity) == Liveness::Alive)
            })
            .cloned()
            .collect()
    }

    /// botvisord's unit restarts (issue 47): every running agent is handed over to the next
    /// botvisord; what cannot be is stopped as at a [`shutdown`](Supervisor::shutdown).
    pub async fn hand_over(&self) {
        self.to_every_actor(Command::HandOver).await;
    }

    /// Stops every bot gently and in parallel, for daemon shutdown; waits too for the actors of
    /// deleted bots still stopping their agents (each ends when its stop is done, which drops
    /// the reply channel).
    pub async fn shutdown(&self) {
        self.to_every_actor(Command::Shutdown).await;
    }

    /// Sends `command` (with its answer's channel) to every bot's actor, those of deleted bots
    /// still stopping their agents included, in parallel, and waits until each answered or
    /// ended (an actor that ends drops the channel).
    async fn to_every_actor(&self, command: fn(oneshot::Sender<()>) -> Command) {
        let mut handles = self.list().to_vec();
        handles.extend(
            self.deleting
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .drain(..),
        );
        let waits = handles.into_iter().map(|h| async move {
            let (tx, rx) = oneshot::channel();
            if h.tx.send(command(tx)).is_ok() {
                let _ = rx.await;
            }
        });
        futures_util::future::join_all(waits).await;
    }

    /// The permission modes each runtime accepts, by runtime name.
    pub fn permission_modes(&self) -> std::collections::HashMap<String, Vec<String>> {
        self.runtimes
            .iter()
            .map(|(name, r)| {
                let modes = r.permission_modes().iter().map(|m| m.to_string()).collect();
                (name.to_string(), modes)
            })
            .collect()
    }

    /// The runtime of a name.
    pub fn runtime(&self, name: &str) -> Option<Arc<dyn Runtime>> {
        self.runtimes.get(name).cloned()
    }
}
