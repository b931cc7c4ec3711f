//! The supervisor: one actor task per bot, owning that bot's process and state, and the registry
//! that creates, loads and deletes bots.
//!
//! Calls on one bot go through its actor's queue and are applied in order (design rule 7). What
//! an actor changes is committed to the [`Store`] first and then handed to the [`Publication`]
//! channel, from which the D-Bus layer emits signals (rule 1).

pub mod bot;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex, RwLock};

use tokio::sync::{mpsc, oneshot};

use crate::config::Config;
use crate::runtime::Runtime;
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
    /// Anything else.
    #[error("{0}")]
    Failed(String),
}

impl From<store::StoreError> for BotError {
    fn from(e: store::StoreError) -> Self {
        BotError::Failed(e.to_string())
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
}

/// The sending side of the publication channel.
pub type Publisher = mpsc::UnboundedSender<Publication>;

/// A command to a bot actor.
#[derive(Debug)]
pub enum Command {
    /// Queue a user message; answers the turn id.
    Send(String, oneshot::Sender<Result<String, BotError>>),
    /// Stop the process gently.
    Stop(oneshot::Sender<Result<(), BotError>>),
    /// Stop and delete the bot with its history.
    Delete(oneshot::Sender<Result<(), BotError>>),
    /// Stop the process for daemon shutdown and end the actor.
    Shutdown(oneshot::Sender<()>),
    /// Change the permission mode (live when running) and persist it.
    SetPermissionMode(String, oneshot::Sender<Result<(), BotError>>),
    /// Change the model (live when running) and persist it.
    SetModel(String, oneshot::Sender<Result<(), BotError>>),
    /// Stop and start again; with `fresh`, forget the conversation first.
    Restart(bool, oneshot::Sender<Result<(), BotError>>),
}

/// A handle on one bot's actor.
#[derive(Clone)]
pub struct BotHandle {
    /// The bot id.
    pub id: String,
    tx: mpsc::Sender<Command>,
    /// What clients can read without asking the actor.
    pub view: Arc<RwLock<BotView>>,
}

impl BotHandle {
    async fn ask<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<Result<T, BotError>>) -> Command,
    ) -> Result<T, BotError> {
        let (tx, rx) = oneshot::channel();
        self.tx
            .send(make(tx))
            .await
            .map_err(|_| BotError::NotFound(format!("bot {} no longer exists", self.id)))?;
        rx.await
            .map_err(|_| BotError::NotFound(format!("bot {} no longer exists", self.id)))?
    }

    /// Queues a message; returns the turn id at once.
    pub async fn send(&self, text: String) -> Result<String, BotError> {
        self.ask(|tx| Command::Send(text, tx)).await
    }

    /// Stops the bot's process gently.
    pub async fn stop(&self) -> Result<(), BotError> {
        self.ask(Command::Stop).await
    }

    /// Changes the permission mode.
    pub async fn set_permission_mode(&self, mode: String) -> Result<(), BotError> {
        self.ask(|tx| Command::SetPermissionMode(mode, tx)).await
    }

    /// Changes the model.
    pub async fn set_model(&self, model: String) -> Result<(), BotError> {
        self.ask(|tx| Command::SetModel(model, tx)).await
    }

    /// Restarts the agent; `fresh` starts a new conversation.
    pub async fn restart(&self, fresh: bool) -> Result<(), BotError> {
        self.ask(|tx| Command::Restart(fresh, tx)).await
    }

    /// Stops and deletes the bot.
    pub async fn delete(&self) -> Result<(), BotError> {
        self.ask(Command::Delete).await
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
    /// Name; default: the last element of the canonical `cwd`.
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
        let name = new
            .name
            .filter(|n| !n.trim().is_empty())
            .unwrap_or_else(|| {
                Path::new(&cwd)
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_else(|| cwd.clone())
            });
        let record = BotRecord {
            id: uuid::Uuid::new_v4().simple().to_string(),
            name,
            cwd,
            runtime: runtime_name,
            model,
            permission_mode,
            env: new.env,
            idle_timeout_s: new.idle_timeout_s,
            session_id: None,
            last_error: String::new(),
            created_at: crate::time::now_rfc3339(),
        };
        self.store.tx(|tx| store::bots::insert(tx, &record))?;
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
        v.sort_by(|a, b| {
            let (a, b) = (a.snapshot(), b.snapshot());
            (a.record.created_at, a.record.id).cmp(&(b.record.created_at, b.record.id))
        });
        v
    }

    /// Deletes a bot: stops it, removes it and its history from the store.
    pub async fn delete(&self, id: &str) -> Result<(), BotError> {
        let handle = self.get(id)?;
        handle.delete().await?;
        self.bots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(id);
        Ok(())
    }

    /// Stops every bot gently and in parallel, for daemon shutdown.
    pub async fn shutdown(&self) {
        let handles = self.list();
        let waits = handles.into_iter().map(|h| async move {
            let (tx, rx) = oneshot::channel();
            if h.tx.send(Command::Shutdown(tx)).await.is_ok() {
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
