//! The supervisor: one actor task per bot, owning that bot's process and state, and the registry
//! that creates, loads and deletes bots.
//!
//! Calls on one bot go through its actor's queue and are applied in order (design rule 7). What
//! an actor changes is committed to the [`Store`] first and then handed to the [`Publication`]
//! channel, from which the D-Bus layer emits signals (rule 1).

pub mod bot;
pub mod decide;
pub mod retry;
pub mod watchdog;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex, RwLock};

use tokio::sync::{mpsc, oneshot};

use crate::config::Config;
use crate::runtime::{ControlRequest, PermissionAnswer, Runtime};
use crate::store::{self, BotRecord, Store};

pub use bot::{BotView, State};

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
        /// D-Bus property names and values.
        changed: Vec<(&'static str, PropertyValue)>,
    },
}

/// A property value as published.
#[derive(Debug, Clone, PartialEq)]
pub enum PropertyValue {
    /// A D-Bus `s`.
    Str(String),
    /// A D-Bus `u`.
    U32(u32),
    /// A D-Bus `a(sss)`.
    Triples(Vec<(String, String, String)>),
}

/// The sending side of the publication channel.
pub type Publisher = mpsc::UnboundedSender<Publication>;

/// A command to a bot actor. Commands are queued by the D-Bus layer in the order the calls
/// arrived, and the actor applies them in that order (design rule 7).
#[derive(Debug)]
pub enum Command {
    /// A message already committed by [`BotHandle::send`], for the queue.
    Queued(store::QueuedTurn),
    /// Stop the process gently.
    Stop,
    /// Stop, then delete the bot with its history.
    Delete,
    /// Stop the process for daemon shutdown and end the actor.
    Shutdown(oneshot::Sender<()>),
    /// Apply a setting (already persisted) to the running process, if any.
    ApplyLive(ControlRequest),
    /// Stop and start again; with `fresh`, forget the conversation first.
    Restart(bool),
    /// The set of clients holding the bot changed.
    HoldersChanged,
    /// A client answered a permission request (already recorded): pass it to the CLI.
    Respond(String, PermissionAnswer),
    /// End the running turn.
    Interrupt,
}

/// What a handle shares with its actor.
pub(crate) struct Shared {
    pub(crate) runtime: Arc<dyn Runtime>,
    pub(crate) store: Arc<Store>,
    pub(crate) publisher: Publisher,
    pub(crate) deleted: std::sync::atomic::AtomicBool,
    /// Unique bus names of the clients holding the bot (design rule 13).
    pub(crate) holders: Mutex<std::collections::BTreeSet<String>>,
    /// Open and recently answered permission requests.
    pub(crate) prompts: Mutex<PromptBook>,
}

/// An open permission request.
#[derive(Debug, Clone, PartialEq)]
pub struct Prompt {
    /// The tool, for example `Write`.
    pub tool: String,
    /// The tool's input, as JSON text.
    pub input: String,
}

/// How many answered request ids are remembered to tell "already answered" from "unknown".
pub const ANSWERED_KEPT: usize = 256;

/// The permission requests of a bot: open ones by request id, and who answered the last ones.
#[derive(Debug, Default)]
pub struct PromptBook {
    /// Open requests, by request id.
    pub open: BTreeMap<String, Prompt>,
    /// Recently answered: (request id, who answered, behavior).
    pub answered: std::collections::VecDeque<(String, String, String)>,
}

impl PromptBook {
    /// The open requests as `(request_id, tool, input_json)`, the `PendingPermissions` value.
    pub fn list(&self) -> Vec<(String, String, String)> {
        self.open
            .iter()
            .map(|(id, p)| (id.clone(), p.tool.clone(), p.input.clone()))
            .collect()
    }

    /// Moves a request from open to answered.
    pub fn answer(&mut self, request_id: &str, by: &str, behavior: &str) -> Option<Prompt> {
        let p = self.open.remove(request_id)?;
        if self.answered.len() == ANSWERED_KEPT {
            self.answered.pop_front();
        }
        self.answered
            .push_back((request_id.to_owned(), by.to_owned(), behavior.to_owned()));
        Some(p)
    }
}

/// A handle on one bot. Its methods never wait for the actor: they validate, commit what must
/// be durable at once, and queue a [`Command`]; what follows is published as signals.
#[derive(Clone)]
pub struct BotHandle {
    /// The bot id.
    pub id: String,
    tx: mpsc::UnboundedSender<Command>,
    /// What clients can read without asking the actor.
    pub view: Arc<RwLock<BotView>>,
    pub(crate) shared: Arc<Shared>,
}

impl BotHandle {
    fn gone(&self) -> BotError {
        BotError::NotFound(format!("bot {} has been deleted", self.id))
    }

    /// Ok while the bot exists and its actor runs; a failed call changes nothing.
    pub fn check_alive(&self) -> Result<(), BotError> {
        if self
            .shared
            .deleted
            .load(std::sync::atomic::Ordering::SeqCst)
        {
            Err(self.gone())
        } else if self.tx.is_closed() {
            Err(BotError::Failed(format!(
                "the supervisor of bot {} stopped after an internal error (see the journal); \
                 restart botvisord",
                self.id
            )))
        } else {
            Ok(())
        }
    }

    fn command(&self, c: Command) -> Result<(), BotError> {
        self.check_alive()?;
        self.tx.send(c).map_err(|_| self.gone())
    }

    /// Queues a message: commits the turn and its `user` chat item, publishes the item, and
    /// returns the turn id. Errors: InvalidArgument (empty), Busy (state `failed`; or no process
    /// and the working directory is gone), RuntimeUnavailable (no process and no binary),
    /// NotFound (deleted), Failed (database). An error changes nothing.
    pub fn send(&self, text: String) -> Result<String, BotError> {
        self.check_alive()?;
        if text.trim().is_empty() {
            return Err(BotError::InvalidArgument(
                "the message is empty; send some text".into(),
            ));
        }
        let view = self.snapshot();
        if view.state == State::Failed {
            return Err(BotError::Busy(format!(
                "bot {} is in state failed and takes no message until Restart: {}",
                self.id, view.record.last_error
            )));
        }
        if view.process_id == 0 {
            self.check_can_start(&view)?;
        }
        let turn_id = uuid::Uuid::new_v4().to_string();
        let payload = serde_json::json!({"text": text, "turn_id": turn_id}).to_string();
        self.shared.store.tx_now_then(
            |tx| {
                // The text is stored once, in the user item; the turn points at it.
                let item = store::chat::append(tx, &self.id, "user", Some(&turn_id), &payload)?;
                store::turns::insert(tx, &self.id, &turn_id, item.seq)?;
                Ok(item)
            },
            |item| bot::publish_item(&self.shared.publisher, &self.id, item),
        )?;
        self.command(Command::Queued(store::QueuedTurn {
            id: turn_id.clone(),
            text,
        }))?;
        Ok(turn_id)
    }

    /// Whether an agent could be started now: its working directory is a folder the daemon can
    /// use (else Busy: the bot cannot start until it is back) and the runtime's binary is there
    /// (else RuntimeUnavailable).
    fn check_can_start(&self, view: &BotView) -> Result<(), BotError> {
        if let Some(problem) =
            crate::process::launch_error::working_dir_problem(Path::new(&view.record.cwd))
        {
            return Err(BotError::Busy(format!(
                "bot {} cannot start its agent: {problem}; recreate it (the conversation goes \
                 on there) or delete the bot and create one in another folder",
                self.id
            )));
        }
        self.shared
            .runtime
            .binary()
            .map_err(|e| BotError::RuntimeUnavailable(e.to_string()))?;
        Ok(())
    }

    /// Asks the actor to stop the process gently; `State` shows the progress.
    pub fn stop(&self) -> Result<(), BotError> {
        self.command(Command::Stop)
    }

    /// Persists a permission mode and applies it to the running process.
    pub fn set_permission_mode(&self, mode: String) -> Result<(), BotError> {
        self.check_alive()?;
        check_permission_mode(self.shared.runtime.as_ref(), &mode)?;
        self.shared
            .store
            .tx_now(|tx| store::bots::set_permission_mode(tx, &self.id, &mode))?;
        bot::update_view(
            &self.view,
            &self.shared.publisher,
            &self.id,
            vec!["PermissionMode"],
            |v| v.record.permission_mode = mode.clone(),
        );
        if mode.is_empty() {
            return Ok(());
        }
        self.command(Command::ApplyLive(ControlRequest::SetPermissionMode(mode)))
    }

    /// Persists a model and applies it to the running process (empty: the CLI's default, from
    /// the next start).
    pub fn set_model(&self, model: String) -> Result<(), BotError> {
        self.check_alive()?;
        check_model(&model)?;
        self.shared
            .store
            .tx_now(|tx| store::bots::set_model(tx, &self.id, &model))?;
        bot::update_view(
            &self.view,
            &self.shared.publisher,
            &self.id,
            vec!["Model"],
            |v| v.record.model = model.clone(),
        );
        if model.is_empty() {
            return Ok(());
        }
        self.command(Command::ApplyLive(ControlRequest::SetModel(model)))
    }

    /// Asks for a restart; `fresh` starts a new conversation. Errors: Busy (the working
    /// directory is gone), RuntimeUnavailable; either changes nothing.
    pub fn restart(&self, fresh: bool) -> Result<(), BotError> {
        self.check_alive()?;
        self.check_can_start(&self.snapshot())?;
        if fresh {
            // Durably forgotten before this call returns; the actor forgets again after the stop
            // in case the old process began a turn meanwhile.
            bot::forget_session(self, "fresh_restart")?;
        }
        if self.snapshot().state == State::Failed {
            // Calls apply in order: a Send right after this Restart is taken, not refused.
            self.shared
                .store
                .tx_now(|tx| store::bots::set_failed(tx, &self.id, false))?;
            bot::update_view(
                &self.view,
                &self.shared.publisher,
                &self.id,
                vec!["State"],
                |v| v.state = State::Stopped,
            );
        }
        self.command(Command::Restart(fresh))
    }

    /// Adds a lease for `client` (a unique bus name); holding twice is one lease.
    pub fn hold(&self, client: &str) -> Result<(), BotError> {
        self.check_alive()?;
        self.change_holders(|h| {
            h.insert(client.to_owned());
        });
        Ok(())
    }

    /// Ends the lease of `client`. Errors: NotFound when it holds none.
    pub fn release(&self, client: &str) -> Result<(), BotError> {
        self.check_alive()?;
        let mut had = false;
        self.change_holders(|h| had = h.remove(client));
        if had {
            Ok(())
        } else {
            Err(BotError::NotFound(format!(
                "{client} holds no lease on bot {}",
                self.id
            )))
        }
    }

    /// Ends the lease of a client that left the bus; true if it had one.
    pub fn client_gone(&self, client: &str) -> bool {
        let mut had = false;
        self.change_holders(|h| had = h.remove(client));
        had
    }

    fn change_holders(&self, f: impl FnOnce(&mut std::collections::BTreeSet<String>)) {
        let mut holders = self
            .shared
            .holders
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let before = holders.len();
        f(&mut holders);
        let count = holders.len() as u32;
        if count as usize != before {
            bot::update_view(
                &self.view,
                &self.shared.publisher,
                &self.id,
                vec!["Holders"],
                |v| v.holders = count,
            );
            let _ = self.tx.send(Command::HoldersChanged);
        }
    }

    /// Answers an open permission request: `behavior` `allow` (optionally with `updated_input`,
    /// a JSON object) or `deny` (with `message`). The answer and who gave it (`client`, the
    /// unique bus name, and `client_name`, a name for people or empty) are recorded in the chat.
    /// The first answer wins. Errors: InvalidArgument (behavior, JSON), NotFound (unknown or
    /// already answered id).
    pub fn respond_permission(
        &self,
        request_id: &str,
        behavior: &str,
        message: Option<String>,
        updated_input: Option<String>,
        client: &str,
        client_name: &str,
    ) -> Result<(), BotError> {
        self.check_alive()?;
        let updated: Option<serde_json::Value> = match &updated_input {
            None => None,
            Some(text) => match serde_json::from_str::<serde_json::Value>(text) {
                Ok(v) if v.is_object() => Some(v),
                _ => {
                    return Err(BotError::InvalidArgument(
                        "option `updated_input` must be a JSON object (the tool's input)".into(),
                    ));
                }
            },
        };
        if behavior != "allow" && behavior != "deny" {
            return Err(BotError::InvalidArgument(format!(
                "behavior must be `allow` or `deny`, got `{behavior}`"
            )));
        }
        if behavior == "allow" && message.is_some() {
            return Err(BotError::InvalidArgument(
                "option `message` goes with `deny`".into(),
            ));
        }
        if behavior == "deny" && updated.is_some() {
            return Err(BotError::InvalidArgument(
                "option `updated_input` goes with `allow`".into(),
            ));
        }
        let mut book = self
            .shared
            .prompts
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let who = if client_name.is_empty() {
            client.to_owned()
        } else {
            format!("{client_name} ({client})")
        };
        let Some(prompt) = book.answer(request_id, &who, behavior) else {
            let earlier = book.answered.iter().find(|(id, _, _)| id == request_id);
            return Err(BotError::NotFound(match earlier {
                Some((_, by, b)) => {
                    format!("permission request {request_id} was already answered ({b}) by {by}")
                }
                None => format!("no open permission request {request_id} on bot {}", self.id),
            }));
        };
        let answer = if behavior == "allow" {
            PermissionAnswer::Allow {
                updated_input: updated.clone().unwrap_or_else(|| {
                    serde_json::from_str(&prompt.input).unwrap_or(serde_json::json!({}))
                }),
            }
        } else {
            PermissionAnswer::Deny {
                message: message
                    .clone()
                    .unwrap_or_else(|| "The user denied this tool use.".to_owned()),
            }
        };
        let mut payload = serde_json::json!({
            "request_id": request_id, "tool": prompt.tool, "behavior": behavior, "by": client,
        });
        if !client_name.is_empty() {
            payload["client"] = serde_json::json!(client_name);
        }
        match &answer {
            PermissionAnswer::Allow { updated_input } if updated.is_some() => {
                payload["updated_input"] = updated_input.clone();
            }
            PermissionAnswer::Deny { message } => payload["message"] = serde_json::json!(message),
            _ => {}
        }
        let payload = payload.to_string();
        let pending = book.list();
        self.shared.store.tx_now_then(
            |tx| store::chat::append(tx, &self.id, "permission_answer", None, &payload),
            |item| bot::publish_item(&self.shared.publisher, &self.id, item),
        )?;
        bot::update_view(
            &self.view,
            &self.shared.publisher,
            &self.id,
            vec!["PendingPermissions"],
            |v| v.pending = pending,
        );
        drop(book);
        self.command(Command::Respond(request_id.to_owned(), answer))
    }

    /// Ends the running turn (outcome `interrupted`); queued messages stay queued. Returns
    /// whether a turn was running: interrupting an idle bot does nothing and says so.
    pub fn interrupt(&self) -> Result<bool, BotError> {
        self.check_alive()?;
        if self.snapshot().state != State::Busy {
            return Ok(false);
        }
        self.command(Command::Interrupt)?;
        Ok(true)
    }

    /// A copy of the bot's current view.
    pub fn snapshot(&self) -> BotView {
        self.view.read().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

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
}

/// All bots of the daemon.
pub struct Supervisor {
    store: Arc<Store>,
    config: Arc<Config>,
    runtimes: BTreeMap<&'static str, Arc<dyn Runtime>>,
    bots: Mutex<HashMap<String, BotHandle>>,
    publisher: Publisher,
    gate: tokio::sync::watch::Sender<bool>,
}

impl Supervisor {
    /// A supervisor over `store` with the given runtimes.
    pub fn new(
        store: Arc<Store>,
        config: Arc<Config>,
        runtimes: Vec<Arc<dyn Runtime>>,
        publisher: Publisher,
    ) -> Arc<Supervisor> {
        Arc::new(Supervisor {
            store,
            config,
            runtimes: runtimes.into_iter().map(|r| (r.name(), r)).collect(),
            bots: Mutex::new(HashMap::new()),
            publisher,
            gate: tokio::sync::watch::Sender::new(false),
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

    /// Validates and creates a bot. Nothing is stored when an argument is wrong.
    pub fn create(&self, new: NewBot) -> Result<BotHandle, BotError> {
        let runtime_name = new.runtime.clone().unwrap_or_else(|| "claude".to_owned());
        let runtime = self
            .runtimes
            .get(runtime_name.as_str())
            .cloned()
            .ok_or_else(|| {
                BotError::InvalidArgument(format!(
                    "unknown runtime `{runtime_name}`; known runtimes: {}",
                    self.runtime_names().join(", ")
                ))
            })?;
        let cwd = canonical_cwd(&new.cwd)?;
        let model = new
            .model
            .or_else(|| self.config.default_model.clone())
            .unwrap_or_default();
        let permission_mode = new
            .permission_mode
            .or_else(|| self.config.default_permission_mode.clone())
            .unwrap_or_default();
        check_permission_mode(runtime.as_ref(), &permission_mode)?;
        check_model(&model)?;
        runtime
            .binary()
            .map_err(|e| BotError::RuntimeUnavailable(e.to_string()))?;
        let taken: Vec<String> = self
            .list()
            .iter()
            .map(|h| h.snapshot().record.name)
            .collect();
        let name = match new.name.filter(|n| !n.trim().is_empty()) {
            Some(name) => {
                if name.chars().count() > MAX_NAME_CHARS {
                    return Err(BotError::InvalidArgument(format!(
                        "option `name` is longer than {MAX_NAME_CHARS} characters"
                    )));
                }
                if let Some(c) = crate::text::first_unsafe(&name) {
                    return Err(BotError::InvalidArgument(format!(
                        "option `name` holds U+{:04X}, a control, invisible or text-direction \
                         character that could make a terminal show something else; use \
                         printable characters",
                        u32::from(c)
                    )));
                }
                if taken.contains(&name) {
                    return Err(BotError::InvalidArgument(format!(
                        "a bot named `{name}` exists already; names pick bots out, so choose another"
                    )));
                }
                name
            }
            None => {
                // A folder name may hold what a name may not: those characters become `_`.
                let base: String = Path::new(&cwd)
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_else(|| "bot".to_owned())
                    .chars()
                    .map(|c| if crate::text::is_unsafe(c) { '_' } else { c })
                    .take(MAX_NAME_CHARS - 8)
                    .collect();
                (1..)
                    .map(|i| {
                        if i == 1 {
                            base.clone()
                        } else {
                            format!("{base}-{i}")
                        }
                    })
                    .find(|n| !taken.contains(n))
                    .expect("some suffix is free")
            }
        };
        let id = uuid::Uuid::new_v4().simple().to_string();
        let record = BotRecord {
            model,
            permission_mode,
            env: new.env,
            idle_timeout_s: new.idle_timeout_s,
            ..BotRecord::new(&id, &name, &cwd, &runtime_name)
        };
        self.store.tx_now(|tx| store::bots::insert(tx, &record))?;
        tracing::info!(bot_id = %record.id, cwd = %record.cwd, "bot created");
        Ok(self.start_actor(record, runtime, false))
    }

    fn start_actor(&self, record: BotRecord, runtime: Arc<dyn Runtime>, loaded: bool) -> BotHandle {
        let handle = bot::spawn_actor(
            record,
            runtime,
            self.store.clone(),
            self.config.clone(),
            self.publisher.clone(),
            loaded,
            self.gate.subscribe(),
        );
        self.bots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(handle.id.clone(), handle.clone());
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

    /// All bots, oldest first.
    pub fn list(&self) -> Vec<BotHandle> {
        let mut v: Vec<BotHandle> = self
            .bots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect();
        v.sort_by_cached_key(|h| {
            let view = h.view.read().unwrap_or_else(|p| p.into_inner());
            (view.record.created_at.clone(), h.id.clone())
        });
        v
    }

    /// Deletes a bot: it leaves the list at once; its actor stops the process, deletes it from
    /// the store, and then its object goes away.
    pub fn delete(&self, id: &str) -> Result<(), BotError> {
        let handle = self.get(id)?;
        handle.command(Command::Delete)?;
        handle
            .shared
            .deleted
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.bots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(id);
        Ok(())
    }

    /// At daemon start, before any bot runs: every process the previous run recorded that is
    /// still alive (same identity) is stopped by identity, with its descendants, and each bot's
    /// chat says so. Returns how many were alive.
    pub async fn recover_processes(&self) -> Result<usize, BotError> {
        use crate::process::identity::{Liveness, liveness};
        use crate::process::verdict::{StopObservation, verdict};
        let records = self.store.read(store::processes::all)?;
        if records.is_empty() {
            return Ok(0);
        }
        let mut by_bot: BTreeMap<String, Vec<store::processes::ProcessRecord>> = BTreeMap::new();
        for r in records {
            by_bot.entry(r.bot_id.clone()).or_default().push(r);
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
        Ok(alive_total)
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

    /// A client left the bus: its leases end.
    pub fn client_gone(&self, client: &str) {
        for h in self.list() {
            if h.client_gone(client) {
                tracing::info!(bot_id = %h.id, client, "lease ended: the client left the bus");
            }
        }
    }

    /// Stops every bot gently and in parallel, for daemon shutdown.
    pub async fn shutdown(&self) {
        let handles = self.list();
        let waits = handles.into_iter().map(|h| async move {
            let (tx, rx) = oneshot::channel();
            if h.tx.send(Command::Shutdown(tx)).is_ok() {
                let _ = rx.await;
            }
        });
        futures_util::future::join_all(waits).await;
    }

    /// The runtime of a name.
    pub fn runtime(&self, name: &str) -> Option<Arc<dyn Runtime>> {
        self.runtimes.get(name).cloned()
    }
}

/// Checks a permission mode against the runtime's list; empty means the CLI's default.
pub fn check_permission_mode(runtime: &dyn Runtime, mode: &str) -> Result<(), BotError> {
    if mode.is_empty() || runtime.permission_modes().contains(&mode) {
        Ok(())
    } else {
        Err(BotError::InvalidArgument(format!(
            "unknown permission mode `{mode}`; {} accepts: {}",
            runtime.name(),
            runtime.permission_modes().join(", ")
        )))
    }
}

/// The longest bot name, in characters.
pub const MAX_NAME_CHARS: usize = 200;

/// A model name: empty (the CLI's default) or up to 200 printable characters without spaces.
pub fn check_model(model: &str) -> Result<(), BotError> {
    if model.len() > 200 || model.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(BotError::InvalidArgument(format!(
            "invalid model name `{model}`: use a name such as `sonnet` or `claude-sonnet-4-5`"
        )));
    }
    Ok(())
}

/// `cwd` must be an absolute path of an existing directory; returns its canonical form (symlinks
/// resolved), used for both the spawn and the transcript lookup.
pub fn canonical_cwd(cwd: &str) -> Result<String, BotError> {
    if cwd.is_empty() {
        return Err(BotError::InvalidArgument(
            "option `cwd` is empty; give the absolute path of the bot's working directory".into(),
        ));
    }
    let path = Path::new(cwd);
    if !path.is_absolute() {
        return Err(BotError::InvalidArgument(format!(
            "option `cwd` must be an absolute path, got `{cwd}`"
        )));
    }
    let canonical = std::fs::canonicalize(path)
        .map_err(|e| BotError::InvalidArgument(format!("option `cwd`: cannot use `{cwd}`: {e}")))?;
    if !canonical.is_dir() {
        return Err(BotError::InvalidArgument(format!(
            "option `cwd`: `{cwd}` is not a directory"
        )));
    }
    canonical
        .into_os_string()
        .into_string()
        .map_err(|_| BotError::InvalidArgument(format!("option `cwd`: `{cwd}` is not valid UTF-8")))
}
