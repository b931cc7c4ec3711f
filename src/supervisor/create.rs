//! `CreateBot` (design rules 2, 3 and 14; issues 28 and 29): one create at a time, from its
//! checks to its record, then the bot's actor.

use std::path::Path;

use super::{
    BotError, BotHandle, NewBot, Supervisor, bot, canonical_cwd, check_model, check_name,
    check_permission_mode, core, default_name, memory_max,
};
use crate::store::{self, BotRecord};

impl Supervisor {
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
        // One lookup in the registry's index of names, however many bots there are (issue 50);
        // `creating` keeps the name free until the bot is recorded.
        let name = match new.name.filter(|n| !n.is_empty()) {
            Some(name) => {
                check_name("option `name`", &name, |n| self.name_like(n, None))?;
                name
            }
            None => self.free_name(&default_name(Path::new(&cwd))),
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
        let stored = self.store.tx_durable(|tx| {
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
        // An adopted conversation's copy follows its files from now on: what another process
        // adds to it later is imported before the bot's next turn (issue 46), not what was
        // imported here.
        if let (Some(session), true, Some(db)) = (
            record.session_id.as_deref(),
            self.config.keep_conversations,
            self.store.path(),
        ) {
            let files = runtime.conversation_files(
                &bot::bot_env(&self.config, &record),
                Path::new(&record.cwd),
                session,
            );
            let folder = crate::supervisor::keep::folder(db, &record.id);
            if let Err(e) = crate::supervisor::keep::update(&folder, session, &files) {
                tracing::warn!(bot_id = %record.id, error = %e, "cannot keep a copy of the adopted conversation");
            }
        }
        tracing::info!(bot_id = %record.id, cwd = %record.cwd, "bot created");
        Ok(self.start_actor(record, runtime, false))
    }
}
