//! Starting the CLI (design rule 2 decides the conversation; a conversation another process
//! holds is waited for, design rule 7, [`crate::supervisor::core::Input::HolderFound`]) and
//! writing it the next message (design rule 8: where it goes is recorded first).

use super::{Actor, Proc, bot_env};
use crate::process;
use crate::process::identity::identify;
use crate::runtime::Holder;
use crate::runtime::LaunchSpec;
use crate::runtime::SessionStart;
use crate::store::BotRecord;
use crate::supervisor::Property;
use crate::supervisor::core::Held;
use crate::supervisor::core::Input;
use crate::supervisor::core::StartDecision;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

impl Actor {
    /// Starts a process when messages wait, and feeds it the next message when it is free
    /// (`pump` decides).
    pub(super) async fn pump(&mut self) {
        let plan = self
            .core
            .pump_plan(self.proc.as_ref().map(|p| p.protocol.ready()));
        if plan.start {
            self.start();
        }
        // Looked for only when a message is to go: the registry is read then, not at every
        // event of an idle agent.
        if plan.write && self.core.waiting() && self.yield_to_holder().await {
            return;
        }
        if plan.write {
            self.write_next();
        }
    }

    /// Before a message goes to the running, idle agent: when a process outside botvisor opened
    /// the conversation meanwhile (the user's `claude --resume` in a terminal; Claude Code's
    /// registry, [`crate::runtime::Runtime::holder`]), the agent is stopped and the bot waits
    /// for that process with its message queued (design rule 7: one writer per conversation on
    /// the whole machine; the message then goes, resumed, on what the other process added).
    /// True when it did.
    async fn yield_to_holder(&mut self) -> bool {
        let Some(proc) = self.proc.as_ref() else {
            return false;
        };
        let Some(session) = proc.protocol.conversation().map(str::to_owned) else {
            return false;
        };
        // A fork writes a copy: the held original is not its conversation.
        if proc.forked_from.as_deref() == Some(session.as_str()) {
            return false;
        }
        let cwd = std::path::PathBuf::from(self.record().cwd);
        // The bot's own agent is never the other holder, whatever its environment reads as
        // (seen once on a loaded run: its marker was not found, and it was taken for another).
        let agent = proc.handle.pid;
        let Some(holder) = self
            .shared
            .runtime
            .holders(&proc.env, &cwd, &session)
            .into_iter()
            .find(|h| h.identity.pid != agent && !self.known.contains(&h.identity))
        else {
            return false;
        };
        tracing::info!(
            bot_id = %self.id, session_id = %session, pid = holder.identity.pid,
            "another process opened the conversation; the idle agent makes way"
        );
        self.hold_elsewhere(holder, &session);
        self.stop_if_asked().await;
        true
    }

    pub(super) fn build_env(&self, record: &BotRecord) -> BTreeMap<String, String> {
        bot_env(&self.shared.config, record)
    }

    /// Checks that the agent can be launched (its binary, its environment, its sandbox), puts
    /// botvisor's copy of the conversation back, and hands the core `Input::LaunchChecked`; a
    /// check that fails is `Input::LaunchFailed`. The checked binary and environment wait in
    /// [`Actor::checked`] for the spawn the core asks for.
    pub(super) fn start(&mut self) {
        let record = self.record();
        let program = match self.shared.runtime.binary() {
            Ok(p) => p,
            Err(e) => {
                self.start_refused(format!("cannot start the agent: {e}"), None);
                return;
            }
        };
        let env = self.build_env(&record);
        if let Err(e) = self.shared.runtime.check_environment(&env) {
            self.start_refused(format!("cannot start the agent: {e}"), None);
            return;
        }
        if let Err((reason, e)) =
            self.shared
                .runtime
                .check_launch(&program, &record.permission_mode, &env)
        {
            self.start_refused(format!("cannot start the agent: {e}"), Some(reason));
            return;
        }
        self.restore_conversation(&env, Path::new(&record.cwd));
        self.checked = Some((program, env));
        let runtime = &self.shared.runtime;
        self.handle(Input::LaunchChecked {
            can_resume: runtime.can_resume(),
            fresh: runtime.fresh_start(),
            runtime: runtime.name(),
        });
    }

    /// Launches the agent on the conversation `decision` names ([`Effect::Spawn`]).
    ///
    /// [`Effect::Spawn`]: crate::supervisor::core::Effect::Spawn
    pub(super) fn spawn(&mut self, decision: StartDecision) {
        let record = self.record();
        let Some((program, env)) = self.checked.take() else {
            self.start_refused(
                "cannot start the agent: its launch was not checked".into(),
                None,
            );
            return;
        };
        let cwd = Path::new(&record.cwd);
        let runtime = self.shared.runtime.clone();
        // One writer per conversation on the whole machine (rule 7): a conversation another
        // process holds is waited for; a fork leaves it alone.
        if let SessionStart::Resume(id) = &decision.start
            && !decision.fork
            && let Some(holder) = runtime.holder(&env, cwd, id)
        {
            self.hold_elsewhere(holder, id);
            return;
        }
        if matches!(decision.start, SessionStart::Resume(_)) && !decision.fork {
            crate::supervisor::imported::import_added(&self.shared, &self.id, &record, &env);
        }
        if let SessionStart::Resume(id) = &decision.start {
            match runtime.before_resume(&env, cwd, id) {
                Ok(true) => tracing::info!(
                    bot_id = %self.id, session_id = %id,
                    "the conversation's record of where to continue named a dropped attempt; \
                     it now names the newest entry"
                ),
                Ok(false) => {}
                Err(e) => tracing::warn!(
                    bot_id = %self.id, session_id = %id, error = %e,
                    "cannot ready the conversation's files for the resume"
                ),
            }
        }
        let spec = LaunchSpec {
            cwd,
            model: &record.model,
            permission_mode: &record.permission_mode,
            env: &env,
            start: &decision.start,
            cut: decision.cut.as_ref(),
            fork: decision.fork,
        };
        // What the conversation had cost when its last process ended: the process counts on
        // from it, so a turn's cost is only its own (issue 46; a new conversation from 0).
        let conversation_cost =
            decision
                .start
                .session_id()
                .filter(|_| !decision.fork)
                .map(|session| {
                    let baseline = match &decision.start {
                        SessionStart::Resume(id) => runtime.cost_baseline(&env, cwd, id),
                        _ => None,
                    };
                    (session.to_owned(), baseline.map_or(0, crate::cost::nanos))
                });
        let cmd = self.shared.runtime.command(program, &spec);
        let mut protocol = self.shared.runtime.open(&spec);
        self.generation += 1;
        // Issue 47: under a user manager the agent runs in a scope of its own, held at its gate
        // until it is in it, and its pipes wait in the service's store for the next botvisord.
        let keeper = crate::systemd::life::keeper();
        let cgroup = match keeper {
            Some(_) => None,
            None => self.launch_cgroup(),
        };
        let start = process::spawn::Start {
            cgroup: cgroup.as_deref(),
            gated: keeper.is_some(),
            store_as: keeper.map(|_| self.id.as_str()),
        };
        *self.scope_dir.lock().unwrap_or_else(|p| p.into_inner()) = None;
        match process::spawn::spawn_with(&cmd, start, self.generation, self.proc_tx.clone()) {
            Ok(mut handle) => {
                if let (Some(keeper), Some(gate)) = (keeper, handle.gate.take()) {
                    self.move_to_scope(keeper, handle.pid, gate, &record);
                }
                tracing::info!(
                    bot_id = %self.id,
                    pid = handle.pid,
                    session_id = decision.start.session_id().unwrap_or("(named by the CLI)"),
                    resume = matches!(decision.start, SessionStart::Resume(_)),
                    "agent started"
                );
                let whole = self.message_whole();
                let (stdin, writer) = handle
                    .stdin
                    .take()
                    .map(|stdin| super::stdin::spawn_writer(stdin, whole))
                    .unzip();
                let protocol_opening = protocol.opening();
                let pid = handle.pid;
                self.known.clear();
                let forked_from = decision
                    .fork
                    .then(|| decision.start.session_id().map(str::to_owned))
                    .flatten();
                self.launched_env = Some(env.clone());
                self.proc = Some(Proc {
                    handle,
                    stdin,
                    writer,
                    protocol,
                    before_turn: None,
                    began_a_turn: false,
                    usage: self.watch_usage(pid, cgroup),
                    env: env.clone(),
                    forked_from,
                });
                self.update(vec![Property::ProcessId], |v| v.process_id = pid);
                let identity = identify(pid).ok();
                self.handle(Input::Launched {
                    decision,
                    identity,
                    conversation_cost,
                });
                self.write_lines(protocol_opening);
            }
            Err(e) => {
                let text = process::launch_error::explain(&cmd.program, &cmd.cwd, &e);
                tracing::error!(bot_id = %self.id, error = %text, "spawn failed");
                self.start_refused(text, None);
            }
        }
    }

    /// Moves the agent `pid`, held at `gate`, into its own scope (issue 47), then lets it run;
    /// a scope that cannot be made is said in the journal, and the agent runs without one (a
    /// restart of botvisord then ends it, as without a user manager).
    fn move_to_scope(
        &self,
        keeper: &'static crate::systemd::life::Keeper,
        pid: u32,
        gate: process::spawn::Gate,
        record: &BotRecord,
    ) {
        let id = self.id.clone();
        let memory = crate::supervisor::memory_max::in_force(
            record.memory_max,
            self.shared.config.memory_max,
            process::cgroup::containment(),
        );
        let scope_dir = self.scope_dir.clone();
        tokio::spawn(async move {
            match keeper.scope(&id, pid, memory).await {
                Ok(cgroup) => {
                    tracing::info!(bot_id = %id, pid, %cgroup, "the agent runs in its own scope");
                    *scope_dir.lock().unwrap_or_else(|p| p.into_inner()) =
                        crate::systemd::life::Keeper::cgroup_dir(&cgroup);
                }
                Err(e) => {
                    tracing::warn!(bot_id = %id, pid, error = %e, "the agent runs without a scope of its own: a restart of botvisord ends it")
                }
            }
            if let Err(e) = gate.release() {
                tracing::warn!(bot_id = %id, pid, error = %e, "the agent's gate cannot be opened");
            }
        });
    }

    /// The agent cannot start (`Input::LaunchFailed`).
    fn start_refused(&mut self, text: String, reason: Option<&'static str>) {
        self.handle(Input::LaunchFailed { text, reason });
    }

    /// The next waiting message to the running process, when its stdin is open and it writes
    /// to a conversation: the core puts where it goes on record, then asks for the write
    /// (`Input::Deliver`).
    pub(super) fn write_next(&mut self) {
        let Some(proc) = self.proc.as_ref() else {
            return;
        };
        if proc.stdin.as_ref().is_none_or(|stdin| stdin.is_closed()) {
            return;
        }
        let Some(session) = proc.protocol.conversation().map(str::to_owned) else {
            return;
        };
        self.handle(Input::Deliver {
            session,
            now: std::time::SystemTime::now(),
        });
    }
}

impl Actor {
    /// A start found `session_id` held by `holder`: no process starts; the bot waits for it.
    pub(super) fn hold_elsewhere(&mut self, holder: Holder, session_id: &str) {
        tracing::info!(
            bot_id = %self.id, session_id, pid = holder.identity.pid, what = %holder.what,
            "the conversation is open in another process; waiting for it to exit"
        );
        let h = Held {
            session_id: session_id.to_owned(),
            identity: holder.identity,
            what: holder.what,
            command: holder.command,
            look_at: Instant::now() + crate::supervisor::core::LOOK_EVERY,
        };
        self.handle(Input::HolderFound(h));
    }
}
