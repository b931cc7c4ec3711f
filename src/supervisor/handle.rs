//! A handle on one bot, for the D-Bus layer: validate, commit what must be durable at once
//! (design rule 1), and queue a command for the bot's actor, which applies them in order
//! (rule 7). Its methods never wait for the actor.

use super::core::{Cmd, RestartMode};
use crate::supervisor::Property;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;

use std::path::Path;

use super::{
    BotError, BotView, Command, PromptBook, Publisher, SharedView, State, bot, check_model,
    check_permission_mode,
};
use crate::runtime::{ControlRequest, Grant, PermissionAnswer, Runtime, Scope};
use crate::store::{self, Store};

mod send;

/// What a handle shares with its actor.
pub(crate) struct Shared {
    pub(crate) runtime: Arc<dyn Runtime>,
    /// The daemon's configuration (the environment a bot's CLI gets).
    pub(crate) config: Arc<crate::config::Config>,
    pub(crate) store: Arc<Store>,
    pub(crate) publisher: Publisher,
    pub(crate) deleted: std::sync::atomic::AtomicBool,
    /// Unique bus names of the clients holding the bot (design rule 13).
    pub(crate) holders: Mutex<std::collections::BTreeSet<String>>,
    /// Open and recently answered permission requests.
    pub(crate) prompts: Mutex<PromptBook>,
    /// Held while what another process added to the conversation is imported
    /// ([`super::imported`]): one look at a time, so nothing is imported twice.
    pub(crate) import: Mutex<()>,
}

impl Shared {
    /// How many clients hold the bot now.
    pub(crate) fn holder_count(&self) -> usize {
        self.holders.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

/// A client's answer to a permission request, as `RespondPermission` gives it.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// Run the tool; with `updated_input` (a JSON object), with that input instead of the one
    /// it asked for.
    Allow {
        /// The input the tool runs with, when the client changed it.
        updated_input: Option<serde_json::Value>,
        /// How far the allow reaches: this request, or those like it for the session or from
        /// now on, as the runtime offers it for this request (`Runtime::scopes`).
        scope: Scope,
    },
    /// Do not run it; `message` is what the model is told (default: "The user denied this
    /// tool use.").
    Deny {
        /// What the model is told.
        message: Option<String>,
    },
}

impl Answer {
    /// `allow` or `deny`, as the chat's `permission_answer` item says.
    pub fn behavior(&self) -> &'static str {
        match self {
            Answer::Allow { .. } => "allow",
            Answer::Deny { .. } => "deny",
        }
    }
}

/// A handle on one bot. Its methods never wait for the actor: they validate, commit what must
/// be durable at once, and queue a [`Command`]; what follows is published as signals.
#[derive(Clone)]
pub struct BotHandle {
    /// The bot id.
    pub id: String,
    pub(super) tx: mpsc::UnboundedSender<Command>,
    /// What clients can read without asking the actor.
    pub view: Arc<SharedView>,
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
        } else if self.tx.is_closed() && self.shared.store.is_closing() {
            // The bot's actor ended because botvisord stops, or restarts and handed its agent
            // over (issue 47): nothing was done, and the next botvisord takes the call.
            Err(BotError::Busy(
                "botvisord is stopping or restarting: nothing was done; call again once it is \
                 back"
                    .to_owned(),
            ))
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

    pub(super) fn command(&self, c: Command) -> Result<(), BotError> {
        self.check_alive()?;
        self.tx.send(c).map_err(|_| self.gone())
    }

    /// Whether an agent could be started now: its working directory is a folder the daemon can
    /// use (else Busy: the bot cannot start until it is back), and the runtime's binary is there
    /// and its environment and launch checks pass (else RuntimeUnavailable: Codex's home folder,
    /// bubblewrap for a sandboxed mode). Nothing is queued that could not be delivered.
    fn check_can_start(&self, view: &BotView) -> Result<(), BotError> {
        if let Some(problem) =
            crate::process::launch_error::working_dir_problem(Path::new(&view.record.cwd))
        {
            // A worktree removed by hand is a folder that is gone (issue 28): git can put it
            // back at the same path, where the conversation goes on.
            let again = match &view.record.worktree {
                Some(w) => format!(
                    "put the worktree back (`git -C {} worktree prune && git -C {} worktree add \
                     {} {}`; the conversation goes on there) or delete the bot (DeleteWith \
                     `remove_worktree` prunes it)",
                    crate::text::escape(&w.repo, false),
                    crate::text::escape(&w.repo, false),
                    crate::text::escape(&view.record.cwd, false),
                    crate::text::escape(&w.branch, false)
                ),
                None => "recreate it (the conversation goes on there) or delete the bot and \
                         create one in another folder"
                    .to_owned(),
            };
            return Err(BotError::Busy(format!(
                "bot {} cannot start its agent: {problem}; {again}",
                self.id
            )));
        }
        let runtime = &self.shared.runtime;
        let program = runtime
            .binary()
            .map_err(|e| BotError::RuntimeUnavailable(e.to_string()))?;
        let env = bot::bot_env(&self.shared.config, &view.record);
        runtime
            .check_environment(&env)
            .map_err(|e| BotError::RuntimeUnavailable(e.to_string()))?;
        runtime
            .check_launch(&program, &view.record.permission_mode, &env)
            .map_err(|(_, e)| BotError::RuntimeUnavailable(e))?;
        Ok(())
    }

    /// Asks the actor to stop the process gently; `State` shows the progress.
    pub fn stop(&self) -> Result<(), BotError> {
        self.command(Command::Core(Cmd::Stop))
    }

    /// Asks for a permission mode: the running agent is asked to take it (control protocol),
    /// and it is recorded and shown (`PermissionMode`) once it did; with no agent running it is
    /// recorded at once, for the next start. A refusal or no answer changes nothing and says why
    /// (an `error` item, `LastError`). Errors: InvalidArgument (a mode the runtime does not
    /// know), NotFound (the bot was deleted), StorageUnavailable.
    pub fn set_permission_mode(&self, mode: String) -> Result<(), BotError> {
        self.check_alive()?;
        check_permission_mode(self.shared.runtime.as_ref(), &mode)?;
        self.check_writable()?;
        self.command(Command::Core(Cmd::ApplyLive(
            ControlRequest::SetPermissionMode(mode),
        )))
    }

    /// Asks for a model, as [`BotHandle::set_permission_mode`] asks for a mode. Empty is the
    /// CLI's default: Claude Code's from the next start (recorded at once); Codex's
    /// `config.toml` model, live (see `Protocol::control`). Errors: InvalidArgument, NotFound,
    /// StorageUnavailable.
    pub fn set_model(&self, model: String) -> Result<(), BotError> {
        self.check_alive()?;
        check_model(self.shared.runtime.as_ref(), &model)?;
        self.check_writable()?;
        self.command(Command::Core(Cmd::ApplyLive(ControlRequest::SetModel(
            model,
        ))))
    }

    /// Replaces the bot's extra environment (validated by the caller), recorded before this
    /// returns and taken at the next launch; the actor lets a bot waiting for its login go on,
    /// and restarts a running agent with no turn in flight on the same conversation. Errors:
    /// NotFound (deleted), StorageUnavailable; either changes nothing.
    pub fn set_environment(&self, env: BTreeMap<String, String>) -> Result<(), BotError> {
        self.check_alive()?;
        let changed = self.snapshot().record.env != env;
        self.shared.store.tx_now_then(
            |tx| store::bots::set_env(tx, &self.id, &env),
            |_| {
                bot::update_view(&self.view, &self.shared.publisher, &self.id, vec![], |v| {
                    v.record.env = env.clone()
                })
            },
        )?;
        self.command(Command::EnvironmentChanged { changed })
    }

    /// Records `name` (checked by `Supervisor::rename`) and publishes `Name`. Errors: NotFound
    /// (deleted), StorageUnavailable; either changes nothing.
    pub(super) fn set_name(&self, name: &str) -> Result<(), BotError> {
        self.check_alive()?;
        self.shared.store.tx_now_then(
            |tx| store::bots::set_name(tx, &self.id, name),
            |_| {
                bot::update_view(
                    &self.view,
                    &self.shared.publisher,
                    &self.id,
                    vec![Property::Name],
                    |v| v.record.name = name.to_owned(),
                )
            },
        )?;
        Ok(())
    }

    /// Sets the bot's own budget in US dollars (0: no budget, whatever the daemon's). Errors:
    /// InvalidArgument (negative, not finite, over [`crate::config::MAX_BUDGET_USD`]),
    /// StorageUnavailable; either changes nothing.
    pub fn set_budget(&self, budget_usd: f64) -> Result<(), BotError> {
        self.check_alive()?;
        let budget = super::checks::budget_nanos(budget_usd)?;
        self.check_writable()?;
        self.command(Command::Core(Cmd::SetBudget(Some(budget))))
    }

    /// StorageUnavailable while the database is known not to take writes: a setting the actor
    /// records later would otherwise be refused out of the caller's sight.
    fn check_writable(&self) -> Result<(), BotError> {
        match self.shared.store.health().failing() {
            Some(why) => Err(store::StoreError::Unavailable(why).into()),
            None => Ok(()),
        }
    }

    /// Asks for a restart on the conversation, a new one ([`RestartMode::Fresh`]) or a copy
    /// ([`RestartMode::Fork`]). Errors: Busy (the working directory is gone),
    /// RuntimeUnavailable; either changes nothing.
    pub fn restart(&self, mode: RestartMode) -> Result<(), BotError> {
        self.check_alive()?;
        if mode == RestartMode::Fork && !self.shared.runtime.can_fork() {
            return Err(BotError::NotSupported(format!(
                "Restart: the {} runtime cannot continue in a copy of a conversation (fork); \
                 Restart without it resumes the conversation, with fresh begins a new one",
                self.shared.runtime.name()
            )));
        }
        self.check_can_start(&self.snapshot())?;
        if mode == RestartMode::Fresh {
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
                vec![Property::State],
                |v| v.state = State::Stopped,
            );
        }
        self.command(Command::Core(Cmd::Restart {
            mode,
            by_client: true,
        }))
    }

    /// Adds a lease for `client` (a unique bus name); holding twice is one lease. `warm`: start
    /// the agent now if it is stopped and may start (issue 31, a warm start), asked again at
    /// each hold.
    pub fn hold(&self, client: &str, warm: bool) -> Result<(), BotError> {
        self.check_alive()?;
        let changed = self.change_holders(
            |h| {
                h.insert(client.to_owned());
            },
            warm,
        );
        if warm && !changed {
            let _ = self.tx.send(Command::HoldersChanged { warm });
        }
        Ok(())
    }

    /// Ends the lease of `client`. Errors: NotFound when it holds none.
    pub fn release(&self, client: &str) -> Result<(), BotError> {
        self.check_alive()?;
        let mut had = false;
        self.change_holders(|h| had = h.remove(client), false);
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
        self.change_holders(|h| had = h.remove(client), false);
        had
    }

    /// Changes the set of clients holding the bot, and tells the actor when it changed (true).
    fn change_holders(
        &self,
        f: impl FnOnce(&mut std::collections::BTreeSet<String>),
        warm: bool,
    ) -> bool {
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
                vec![Property::Holders],
                |v| v.holders = count,
            );
            let _ = self.tx.send(Command::HoldersChanged { warm });
        }
        count as usize != before
    }

    /// Answers an open permission request with `answer`. The answer, its scope and who gave it
    /// (`client`, the unique bus name, and `client_name`, a name for people or empty) are
    /// recorded in the chat. The first answer wins. An allow with a wider scope tells the CLI
    /// what the runtime makes of it (`Runtime::grant`); a permission mode in it becomes the bot's,
    /// as [`BotHandle::set_permission_mode`] sets it. Errors: InvalidArgument (a changed input the
    /// runtime cannot take, a scope this request does not offer), NotFound (unknown or already
    /// answered id), StorageUnavailable; each changes nothing.
    pub fn respond_permission(
        &self,
        request_id: &str,
        answer: Answer,
        client: &str,
        client_name: &str,
    ) -> Result<(), BotError> {
        self.check_alive()?;
        let behavior = answer.behavior();
        let (updated, message, scope) = match answer {
            Answer::Allow {
                updated_input,
                scope,
            } => (updated_input, None, scope),
            Answer::Deny { message } => (None, message, Scope::Once),
        };
        let mut book = self
            .shared
            .prompts
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let request_id = &*book.id_of(request_id);
        if let Some(open) = book.open.get(request_id) {
            // A runtime that runs the tool as it asked must not be told "allow" with a changed
            // input: the client would believe its change ran.
            if let Some(changed) = &updated
                && !self.shared.runtime.can_change_tool_input()
                && serde_json::from_str::<serde_json::Value>(&open.input)
                    .ok()
                    .as_ref()
                    != Some(changed)
            {
                return Err(BotError::InvalidArgument(format!(
                    "the {} runtime runs the tool as it asked for it and cannot take a changed \
                     `updated_input`; allow it unchanged or deny it",
                    self.shared.runtime.name()
                )));
            }
            let offered = self.shared.runtime.scopes(&open.request);
            if !offered.contains(&scope) {
                let names: Vec<&str> = offered.iter().map(|s| s.as_str()).collect();
                return Err(BotError::InvalidArgument(format!(
                    "permission request {request_id} offers the scope {}; not `{}` ({} offers \
                     nothing wider for this request)",
                    names.join(", "),
                    scope.as_str(),
                    self.shared.runtime.name()
                )));
            }
        }
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
        let grant = match behavior {
            "allow" => self.shared.runtime.grant(&prompt.request, scope),
            _ => Grant::default(),
        };
        let answer = if behavior == "allow" {
            PermissionAnswer::Allow {
                updated_input: updated.clone().unwrap_or_else(|| {
                    serde_json::from_str(&prompt.input).unwrap_or(serde_json::json!({}))
                }),
                grant: grant.permissions.clone(),
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
            "scope": scope.as_str(),
        });
        if !client_name.is_empty() {
            payload["client"] = serde_json::json!(client_name);
        }
        if let Some(mode) = &grant.mode {
            payload["permission_mode"] = serde_json::json!(mode);
        }
        match &answer {
            PermissionAnswer::Allow { updated_input, .. } if updated.is_some() => {
                payload["updated_input"] = updated_input.clone();
            }
            PermissionAnswer::Deny { message } => payload["message"] = serde_json::json!(message),
            _ => {}
        }
        let payload = payload.to_string();
        let pending = book.list();
        let recorded = self.shared.store.tx_durable_then(
            |tx| store::chat::append(tx, &self.id, "permission_answer", None, &payload),
            |item| bot::publish_item(&self.shared.publisher, &self.id, item),
        );
        if let Err(e) = recorded {
            // Not recorded, so not given: the prompt stays open for the same answer later.
            book.unanswer(request_id, prompt);
            return Err(e.into());
        }
        bot::update_view(
            &self.view,
            &self.shared.publisher,
            &self.id,
            vec![Property::PendingPermissions],
            |v| v.pending = pending,
        );
        drop(book);
        self.command(Command::Core(Cmd::Respond {
            request_id: request_id.to_owned(),
            answer,
        }))?;
        if let Some(mode) = grant.mode {
            // The mode the CLI suggested is the bot's from now on: live, recorded once the
            // agent took it (`setting_applied`), and at every later start.
            self.command(Command::Core(Cmd::ApplyLive(
                ControlRequest::SetPermissionMode(mode),
            )))?;
        }
        Ok(())
    }

    /// Ends the running turn (outcome `interrupted`); queued messages stay queued. Returns
    /// whether a turn was running: interrupting an idle bot does nothing and says so.
    pub fn interrupt(&self) -> Result<bool, BotError> {
        self.check_alive()?;
        if self.snapshot().state != State::Busy {
            return Ok(false);
        }
        self.command(Command::Core(Cmd::Interrupt))?;
        Ok(true)
    }

    /// Where the bot's agent takes its login from (`GetLogin`), judged now from the environment
    /// it launches with (botvisord's, as config `env_allowlist` lets it through, with the
    /// bot's own over it) and the files that exist: variables by name only, never a value.
    pub fn login(&self) -> crate::runtime::login::Login {
        let record = self.view_guard().record.clone();
        let env = super::bot::bot_env(&self.shared.config, &record);
        self.shared.runtime.login(&record.env, &env)
    }

    /// The bot's current view, read in place: hold it for no longer than a copy would take
    /// (the actor waits to change it meanwhile), and across no `.await`.
    pub fn view_guard(&self) -> std::sync::RwLockReadGuard<'_, BotView> {
        self.view.read()
    }

    /// A copy of the bot's current view.
    pub fn snapshot(&self) -> BotView {
        self.view.read().clone()
    }
}
