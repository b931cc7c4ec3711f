//! The supervisor: one actor task per bot, owning that bot's process and state, and the registry
//! that creates, loads and deletes bots.
//!
//! Calls on one bot go through its actor's queue and are applied in order (design rule 7). What
//! an actor changes is committed to the [`Store`] first and then handed to the [`Publication`]
//! channel, from which the D-Bus layer emits signals (rule 1).

pub mod bot;
pub(crate) mod checks;
pub mod core;
mod handle;
pub mod keep;
pub mod memory_max;
mod names;
pub mod view;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};

use tokio::sync::{mpsc, oneshot};

use crate::config::Config;
use crate::runtime::{ControlRequest, PermissionAnswer, Runtime};
use crate::store::{self, BotRecord, Store};

pub use bot::State;
pub use checks::{MAX_NAME_CHARS, budget_nanos, canonical_cwd, check_model, check_permission_mode};
pub use core::prompts::{ANSWERED_KEPT, Prompt, PromptBook};
pub(crate) use handle::Shared;
pub use handle::{Answer, BotHandle};
use names::looks;
pub use names::{check_name, default_name, id_like};
pub use view::{BotView, Property};

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
    /// A message already committed by [`BotHandle::send`], for the queue.
    Queued(core::QueuedTurn),
    /// Stop the process gently.
    Stop,
    /// Stop, then delete the bot with its history; with a removal, its git worktree goes once
    /// the agent is stopped (as [`core::worktree::removal`] allowed at the call).
    Delete(Option<core::worktree::Removal>),
    /// Stop the process for daemon shutdown and end the actor.
    Shutdown(oneshot::Sender<()>),
    /// Apply a setting (already persisted) to the running process, if any.
    ApplyLive(ControlRequest),
    /// Stop and start again, on the conversation, a new one or a copy.
    Restart(core::lifecycle::RestartMode),
    /// The set of clients holding the bot changed.
    HoldersChanged,
    /// A client answered a permission request (already recorded): pass it to the CLI.
    Respond(String, PermissionAnswer),
    /// End the running turn.
    Interrupt,
    /// The CLI's credentials file changed (a bot waiting for its login).
    CredentialsChanged,
    /// A client changed the bot's environment (already recorded): applied at the next launch; a
    /// running agent with no turn in flight is restarted on the same conversation now.
    EnvironmentChanged,
    /// The bot's own budget, nano-dollars (`Some(0)`: none), validated: recorded, and a budget
    /// hold lifted if the cost is now under it.
    SetBudget(Option<u64>),
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

/// The most characters of a conversation's title (its first user message) that
/// [`Supervisor::conversations`] gives.
pub const MAX_TITLE_CHARS: usize = 200;

/// A conversation a CLI keeps for a folder, as `ListConversations` gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// The runtime's name.
    pub runtime: String,
    /// The session (Codex: thread) id.
    pub session_id: String,
    /// When its file was last written, Unix seconds.
    pub modified_s: i64,
    /// Its first user message, escaped ([`crate::text::escape`]) and cut to
    /// [`MAX_TITLE_CHARS`] (then ending with `…`).
    pub title: String,
    /// The bot that owns it (its session is recorded), if any.
    pub bot_id: Option<String>,
    /// A live process outside botvisor that holds it, in words, if any.
    pub held_by: Option<String>,
}

/// The environment a CLI of `record` would have, without a bot's marker: what a listing or an
/// adoption reads the CLIs' folders and holders with (no process is any bot's own here).
fn listing_env(config: &Config, record: &BotRecord) -> BTreeMap<String, String> {
    let mut env = bot::bot_env(config, record);
    env.remove(crate::process::tree::BOT_MARKER);
    env
}

/// A title read from a transcript, made safe to show: escaped, one line, bounded.
fn bounded_title(title: &str) -> String {
    let escaped = crate::text::escape(title.trim(), false);
    match escaped.char_indices().nth(MAX_TITLE_CHARS) {
        Some((at, _)) => format!("{}…", &escaped[..at]),
        None => escaped.into_owned(),
    }
}

/// The most characters `CreateBot`'s `created_by` may hold.
pub const MAX_CREATED_BY_CHARS: usize = 128;

/// All bots of the daemon.
pub struct Supervisor {
    store: Arc<Store>,
    config: Arc<Config>,
    runtimes: BTreeMap<&'static str, Arc<dyn Runtime>>,
    bots: Mutex<HashMap<String, BotHandle>>,
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
            deleting: Mutex::new(Vec::new()),
            publisher,
            gate: tokio::sync::watch::Sender::new(false),
            creating: tokio::sync::Mutex::new(()),
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
        for h in self.list() {
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

    /// Validates and creates a bot. Nothing is stored when an argument is wrong. With
    /// `new.worktree`, git makes the worktree last, after every other check (its refusal is
    /// InvalidArgument with git's words); a worktree made for a bot that then cannot be stored
    /// is removed again.
    pub async fn create(&self, new: NewBot) -> Result<BotHandle, BotError> {
        let _one_at_a_time = self.creating.lock().await;
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
        let memory_max = memory_max::decide(new.memory_max, crate::process::cgroup::containment())?;
        let model = new
            .model
            .or_else(|| self.config.default_model.clone())
            .unwrap_or_default();
        // The configured default goes to the runtimes that accept it.
        let permission_mode = new
            .permission_mode
            .or_else(|| {
                self.config
                    .default_permission_mode
                    .clone()
                    .filter(|m| runtime.permission_modes().contains(&m.as_str()))
            })
            .unwrap_or_default();
        check_permission_mode(runtime.as_ref(), &permission_mode)?;
        check_model(runtime.as_ref(), &model)?;
        runtime
            .binary()
            .map_err(|e| BotError::RuntimeUnavailable(e.to_string()))?;
        let taken: Vec<String> = self
            .list()
            .iter()
            .map(|h| h.snapshot().record.name)
            .collect();
        let name = match new.name.filter(|n| !n.is_empty()) {
            Some(name) => {
                check_name("option `name`", &name, &taken)?;
                name
            }
            None => {
                let base = default_name(Path::new(&cwd));
                (1..)
                    .map(|i| {
                        if i == 1 {
                            base.clone()
                        } else {
                            format!("{base}-{i}")
                        }
                    })
                    .find(|n| {
                        let shown = looks(n);
                        !taken.iter().any(|t| looks(t) == shown)
                    })
                    .expect("some suffix is free")
            }
        };
        let created_by = self.created_by(new.created_by_client, new.created_by_bot)?;
        let id = uuid::Uuid::new_v4().simple().to_string();
        let imported = match &new.session_id {
            None => Vec::new(),
            Some(session) => {
                if new.worktree.is_some() {
                    return Err(BotError::InvalidArgument(
                        "options `session_id` and `worktree` together: a conversation is adopted \
                         in the folder it was begun in, a worktree is a new folder"
                            .into(),
                    ));
                }
                let listed = self.conversations(&cwd, Some(&runtime_name), &new.env)?;
                let found = listed.iter().find(|c| c.session_id == *session);
                let held_by = match found {
                    Some(_) => self.held_by(&runtime_name, &cwd, session, &new.env),
                    None => None,
                };
                core::adopt::adopt(&core::adopt::Found {
                    runtime: &runtime_name,
                    cwd: &cwd,
                    session_id: &crate::text::escape(session, false),
                    exists: found.is_some(),
                    owner: found.and_then(|c| c.bot_id.as_deref()),
                    held_by: held_by.as_deref(),
                })
                .map_err(|r| match r {
                    core::adopt::Refusal::Missing(why) => BotError::InvalidArgument(why),
                    core::adopt::Refusal::Held(why) => BotError::Busy(why),
                })?;
                let record = BotRecord {
                    env: new.env.clone(),
                    ..BotRecord::new(&id, &name, &cwd, &runtime_name)
                };
                runtime.history(
                    &bot::bot_env(&self.config, &record),
                    Path::new(&cwd),
                    session,
                )
            }
        };
        let (cwd, made) = match &new.worktree {
            None => (cwd, None),
            Some(ask) => {
                let made = crate::worktree::add(
                    Path::new(&cwd),
                    &name,
                    ask,
                    self.config.worktrees_dir.as_deref(),
                    self.store.path().and_then(Path::parent),
                )
                .await
                .map_err(|e| BotError::InvalidArgument(format!("option `worktree`: {e}")))?;
                (made.path.clone(), Some(made))
            }
        };
        let record = BotRecord {
            created_by,
            model,
            permission_mode,
            env: new.env,
            idle_timeout_s: new.idle_timeout_s,
            memory_max,
            budget: new.budget,
            continue_after_limit: new.continue_after_limit,
            worktree: made.as_ref().map(|m| store::WorktreeRecord {
                repo: m.repo.clone(),
                branch: m.branch.clone(),
                base_commit: m.base_commit.clone(),
            }),
            session_id: new.session_id.clone(),
            ..BotRecord::new(&id, &name, &cwd, &runtime_name)
        };
        // The adopted conversation's earlier turns are committed with the bot, before anything
        // new, in order (design rule 1: nothing is said of them before).
        let stored = self.store.tx_now(|tx| {
            store::bots::insert(tx, &record)?;
            for item in &imported {
                store::chat::append(tx, &id, item.kind, None, &item.payload.to_string())?;
            }
            Ok(())
        });
        if let Err(e) = stored {
            if let Some(m) = &made {
                let undo = crate::supervisor::core::worktree::Removal::Remove {
                    force: true,
                    delete_branch: true,
                };
                if let Err(g) = crate::worktree::remove(
                    Path::new(&m.repo),
                    Path::new(&m.path),
                    &m.branch,
                    &undo,
                )
                .await
                {
                    tracing::warn!(path = %m.path, error = %g, "a worktree made for a bot that was not stored is left");
                }
            }
            return Err(e.into());
        }
        tracing::info!(bot_id = %record.id, cwd = %record.cwd, "bot created");
        Ok(self.start_actor(record, runtime, false))
    }

    /// The conversations the CLIs keep for the folder `cwd` (canonicalised), read from their
    /// files as a CLI started with the daemon's environment plus `env` finds them, of the runtime
    /// `runtime` only when given; newest first, then by id. Errors: InvalidArgument (a `cwd`
    /// `CreateBot` would refuse, an unknown runtime).
    pub fn conversations(
        &self,
        cwd: &str,
        runtime: Option<&str>,
        env: &BTreeMap<String, String>,
    ) -> Result<Vec<Listed>, BotError> {
        let cwd = canonical_cwd(cwd)?;
        if let Some(r) = runtime
            && !self.runtimes.contains_key(r)
        {
            return Err(BotError::InvalidArgument(format!(
                "unknown runtime `{}`; known runtimes: {}",
                crate::text::escape(r, false),
                self.runtime_names().join(", ")
            )));
        }
        let bots = self.list();
        let mut out = Vec::new();
        for (name, rt) in &self.runtimes {
            if runtime.is_some_and(|r| r != *name) {
                continue;
            }
            let record = BotRecord {
                env: env.clone(),
                ..BotRecord::new("", "", &cwd, name)
            };
            let full_env = listing_env(&self.config, &record);
            for c in rt.conversations(&full_env, Path::new(&cwd)) {
                let bot_id = bots
                    .iter()
                    .find(|h| {
                        let r = h.snapshot().record;
                        r.runtime == *name && r.session_id.as_deref() == Some(&c.session_id)
                    })
                    .map(|h| h.id.clone());
                out.push(Listed {
                    runtime: name.to_string(),
                    modified_s: c
                        .modified
                        .duration_since(std::time::UNIX_EPOCH)
                        .map(|d| d.as_secs() as i64)
                        .unwrap_or(0),
                    title: bounded_title(&c.title),
                    bot_id,
                    held_by: None,
                    session_id: c.session_id,
                });
            }
        }
        out.sort_by(|a, b| {
            b.modified_s
                .cmp(&a.modified_s)
                .then_with(|| a.session_id.cmp(&b.session_id))
        });
        Ok(out)
    }

    /// Who outside botvisor holds the conversation `session_id` of `runtime` in `cwd` now, in
    /// words (`pid N: what`); `None` when nobody does.
    pub fn held_by(
        &self,
        runtime: &str,
        cwd: &str,
        session_id: &str,
        env: &BTreeMap<String, String>,
    ) -> Option<String> {
        let rt = self.runtimes.get(runtime)?;
        let record = BotRecord {
            env: env.clone(),
            ..BotRecord::new("", "", cwd, runtime)
        };
        let full_env = listing_env(&self.config, &record);
        rt.holders(&full_env, Path::new(cwd), session_id)
            .first()
            .map(|h| format!("pid {}: {}", h.identity.pid, h.what))
    }

    /// The bot process `pid` belongs to (issue 29): the bot whose running agent it descends
    /// from, else the bot its `marker` names (`process::tree::BOT_MARKER`; a process that
    /// escaped its agent's tree) when that bot exists, else a marker of a bot id's shape (32 hex
    /// digits: a deleted bot's); `None` for any other process.
    pub fn bot_of_process(&self, pid: u32, marker: Option<&str>) -> Option<String> {
        let bots = self.list();
        // Descent first: a process under a bot's running agent is that bot's, whatever marker it
        // sets (a bot at the depth limit could otherwise name a top-level bot and go deeper).
        if pid != 0
            && let Some(h) = bots
                .iter()
                .find(|h| crate::process::tree::descends_from(pid, h.snapshot().process_id))
        {
            return Some(h.id.clone());
        }
        if let Some(m) = marker
            && bots.iter().any(|h| h.id == m)
        {
            return Some(m.to_owned());
        }
        marker
            .filter(|m| m.len() == 32 && m.bytes().all(|b| b.is_ascii_hexdigit()))
            .map(str::to_owned)
    }

    /// Who creates a bot, checked against the limits on bots created by bots (issue 29): a
    /// chain of creators longer than config `agent_max_depth`, or more than `agent_max_bots`
    /// bots created by bots at once, is `LimitExceeded`; a client name over
    /// [`MAX_CREATED_BY_CHARS`] characters or holding control characters is `InvalidArgument`.
    /// A creator bot that is gone counts as a bot no bot created (depth 0).
    fn created_by(
        &self,
        client: Option<String>,
        bot: Option<String>,
    ) -> Result<store::bots::CreatedBy, BotError> {
        let client = client.unwrap_or_default();
        // As a name: nothing that could steer a terminal (controls, invisible and text-direction
        // characters such as U+202E), since clients show it beside the bot's name.
        if client.chars().count() > MAX_CREATED_BY_CHARS
            || crate::text::first_unsafe(&client).is_some()
        {
            return Err(BotError::InvalidArgument(format!(
                "CreateBot: option `created_by` must be at most {MAX_CREATED_BY_CHARS} characters \
                 without control, invisible or text-direction characters, got `{}`",
                crate::text::escape(&client.chars().take(64).collect::<String>(), false)
            )));
        }
        let Some(bot) = bot else {
            return Ok(store::bots::CreatedBy {
                client,
                bot: String::new(),
                depth: 0,
            });
        };
        let bots = self.list();
        let creator_depth = bots
            .iter()
            .find(|h| h.id == bot)
            .map_or(0, |h| h.snapshot().record.created_by.depth);
        let depth = creator_depth.saturating_add(1);
        let max_depth = self.config.agent_max_depth;
        if depth > max_depth {
            return Err(BotError::LimitExceeded(format!(
                "CreateBot: bot {bot} is itself {creator_depth} bot(s) deep in a chain of bots \
                 creating bots; a bot it creates would be {depth} deep, over the daemon's \
                 `agent_max_depth` of {max_depth}"
            )));
        }
        let by_bots = bots
            .iter()
            .filter(|h| !h.snapshot().record.created_by.bot.is_empty())
            .count();
        let max_bots = self.config.agent_max_bots as usize;
        if by_bots >= max_bots {
            return Err(BotError::LimitExceeded(format!(
                "CreateBot: {by_bots} bot(s) created by bots exist, the daemon's \
                 `agent_max_bots` is {max_bots}; delete one first"
            )));
        }
        Ok(store::bots::CreatedBy { client, bot, depth })
    }

    /// Renames the bot `id` to `name`, checked as `CreateBot` checks a name ([`check_name`])
    /// against the other bots' names; recorded, then `Name` changes. The same name again changes
    /// nothing. Errors: InvalidArgument, NotFound, StorageUnavailable; each changes nothing.
    pub fn rename(&self, id: &str, name: &str) -> Result<(), BotError> {
        let handle = self.get(id)?;
        if handle.snapshot().record.name == name {
            return handle.check_alive();
        }
        let taken: Vec<String> = self
            .list()
            .iter()
            .filter(|h| h.id != id)
            .map(|h| h.snapshot().record.name)
            .collect();
        check_name("the name", name, &taken)?;
        handle.set_name(name)
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

    /// Deletes a bot: marked deleted in the store before this call returns (a daemon that crashes
    /// before the actor is done deletes it at its next start, `daemon::left_processes::stop_all`),
    /// it leaves the list at once; its actor stops the process, deletes it from the store, and
    /// then its object goes away. Errors: NotFound, StorageUnavailable (nothing changed).
    pub fn delete(&self, id: &str) -> Result<(), BotError> {
        self.delete_with(id, None)
    }

    /// Whether the worktree of the bot `id` may be removed now, with `force` or not, from what
    /// git shows of it ([`crate::worktree::decide`]). Errors: NotFound; InvalidArgument (the bot
    /// has no worktree); Busy (something uncommitted or unmerged, named; nothing changes);
    /// Failed (git failed: its words).
    pub async fn worktree_removal(
        &self,
        id: &str,
        force: bool,
    ) -> Result<core::worktree::Removal, BotError> {
        let record = self.get(id)?.snapshot().record;
        let Some(w) = record.worktree else {
            return Err(BotError::InvalidArgument(format!(
                "option `remove_worktree`: the bot `{}` has no worktree botvisor made",
                crate::text::escape(&record.name, false)
            )));
        };
        match crate::worktree::decide(Path::new(&w.repo), Path::new(&record.cwd), &w.branch, force)
            .await
        {
            Ok(core::worktree::Removal::Refuse(why)) => Err(BotError::Busy(why)),
            Ok(removal) => Ok(removal),
            Err(e) => Err(BotError::Failed(e)),
        }
    }

    /// [`Supervisor::delete`], and with `removal` the bot's worktree removed once its agent is
    /// stopped ([`Supervisor::worktree_removal`] decides it first).
    pub fn delete_with(
        &self,
        id: &str,
        removal: Option<core::worktree::Removal>,
    ) -> Result<(), BotError> {
        let handle = self.get(id)?;
        self.store.tx_now(|tx| store::bots::mark_deleting(tx, id))?;
        handle.command(Command::Delete(removal))?;
        handle
            .shared
            .deleted
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let removed = self
            .bots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(id);
        let mut deleting = self.deleting.lock().unwrap_or_else(|p| p.into_inner());
        deleting.retain(|h| !h.tx.is_closed());
        deleting.extend(removed);
        Ok(())
    }

    /// A client left the bus: its leases end.
    pub fn client_gone(&self, client: &str) {
        for h in self.list() {
            if h.client_gone(client) {
                tracing::info!(bot_id = %h.id, client, "lease ended: the client left the bus");
            }
        }
    }

    /// Stops every bot gently and in parallel, for daemon shutdown; waits too for the actors of
    /// deleted bots still stopping their agents (each ends when its stop is done, which drops
    /// the reply channel).
    pub async fn shutdown(&self) {
        let mut handles = self.list();
        handles.extend(
            self.deleting
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .drain(..),
        );
        let waits = handles.into_iter().map(|h| async move {
            let (tx, rx) = oneshot::channel();
            if h.tx.send(Command::Shutdown(tx)).is_ok() {
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
