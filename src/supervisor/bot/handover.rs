//! A running turn survives botvisord itself (issue 47): at a restart of its unit the agent is
//! handed over to the next botvisord, which takes it over, same process, same pipes, the stream
//! read on from where it stands.
//!
//! Handing over ([`Actor::hand_over`]): the agent's stdout is no longer read; what was read is
//! handled (committed and published, as always); what was read and not yet a line, the
//! protocol's state, the process as the core knew it, the environment it runs with and the
//! permission requests open are recorded (`handovers`, in the same database); the stdin writer
//! finishes its writes. The agent runs on in its own scope, its descriptors in the service's
//! store. Taking over ([`Actor::take_over`]): with the descriptors the manager passed back, the
//! record, and the same process alive (pid, start time and boot), the agent is attached again
//! and its turn goes on; otherwise what was passed is let go and the bot recovers as after a
//! daemon crash.

use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::time::Duration;

use serde_json::json;

use super::{Actor, Proc};
use crate::process;
use crate::process::identity::{Liveness, identify, liveness};
use crate::store::{self, handovers::Handover};
use crate::supervisor::Property;
use crate::supervisor::core::Effect;
use crate::supervisor::core::Input;
use crate::supervisor::core::Run;
use crate::supervisor::core::prompts::Prompt;
use crate::systemd::fdstore::Role;

/// How long the stdin writer may take to finish its writes at a hand-over (a CLI that stopped
/// reading its stdin: what is left is written by nobody, and the next botvisord does not know).
const WRITER_FINISH: Duration = Duration::from_secs(5);

impl Actor {
    /// Design rule 18, this botvisord's half: its unit restarts, so the running agent is handed
    /// over to the next botvisord. Returns
    /// `false` (and hands nothing over) when there is none to hand over, or it cannot be: then
    /// the caller stops it as at a shutdown.
    pub(super) async fn hand_over(&mut self) -> bool {
        if crate::systemd::life::keeper().is_none() || self.stop_asked.is_some() {
            return false;
        }
        let Some(proc) = self.proc.as_mut() else {
            return false;
        };
        let pid = proc.handle.pid;
        let Ok(identity) = identify(pid) else {
            return false;
        };
        // 1. This botvisord reads no more of its stdout; what it read is handled.
        let leftover = proc.handle.hand_over().await;
        while let Ok(ev) = self.proc_rx.try_recv() {
            let _ = self.on_proc_event(ev);
        }
        if self.stop_asked.is_some() || self.proc.is_none() {
            // A line handled asked for a stop (or the agent ended): no hand-over.
            return false;
        }
        // 2. The stdin writer finishes what it was given.
        if let Some(proc) = self.proc.as_mut()
            && let Some(writer) = proc.stdin.take()
        {
            drop(writer);
            if let Some(task) = proc.writer.take()
                && tokio::time::timeout(WRITER_FINISH, task).await.is_err()
            {
                tracing::warn!(bot_id = %self.id, pid, "the agent's stdin was not written to the end before the hand-over");
            }
        }
        // 3. Recorded for the next botvisord, durably.
        let Some(proc) = self.proc.as_ref() else {
            return false;
        };
        let prompts: BTreeMap<String, Prompt> = self
            .shared
            .prompts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .open
            .clone();
        let state = json!({
            "protocol": proc.protocol.save(),
            "run": self.core.handed_over(),
            "env": proc.env,
            "forked_from": proc.forked_from,
            "prompts": prompts,
        });
        let handover = Handover {
            identity,
            invocation: crate::systemd::life::invocation().to_owned(),
            state,
            leftover,
        };
        let stored = self
            .shared
            .store
            .tx_durable(|tx| store::handovers::put(tx, &self.id, &handover));
        if let Err(e) = stored {
            tracing::error!(bot_id = %self.id, error = %e, "cannot record the hand-over; the agent is stopped");
            return false;
        }
        tracing::info!(bot_id = %self.id, pid, leftover = handover.leftover.len(), "the agent is handed over to the next botvisord");
        self.proc = None;
        true
    }

    /// Design rule 18, the next botvisord's half: at the actor's start, takes over the agent the
    /// previous botvisord handed over (or left running at a crash), with the
    /// descriptors the manager passed back (`passed`). Returns whether it did; when not, what
    /// was passed is closed and taken out of the store, and a hand-over record is forgotten.
    pub(super) async fn take_over(&mut self, passed: Option<BTreeMap<Role, OwnedFd>>) -> bool {
        let record = match self
            .shared
            .store
            .read(|c| store::handovers::get(c, &self.id))
        {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(bot_id = %self.id, error = %e, "cannot read the hand-over record");
                None
            }
        };
        let had = passed.is_some();
        // A message whose line is not on record as written whole may be cut in the agent's
        // stdin (a botvisord killed while it wrote a big one, or a writer that could not finish
        // at a hand-over): the agent waits for the rest of the line for ever, so it is not
        // taken over but stopped, and the message goes again once (design rule 8).
        let partly = self
            .shared
            .store
            .read(|c| store::deliveries::partly_written(c, &self.id))
            .unwrap_or(false);
        if partly && had {
            tracing::info!(bot_id = %self.id, "the message in flight may be cut in the agent's stdin; the agent is not taken over, and the message goes again");
        }
        let passed = passed.filter(|_| !partly);
        let taken = match (passed, record.clone()) {
            (Some(fds), Some(h)) => self.attach(fds, h),
            (Some(fds), None) => self.attach_after_crash(fds),
            (_, Some(h)) => {
                tracing::info!(bot_id = %self.id, pid = h.identity.pid, "a hand-over without the agent's descriptors (a reboot, or the unit was stopped): the bot recovers as after a crash");
                false
            }
            _ => false,
        };
        if record.is_some()
            && let Err(e) = self
                .shared
                .store
                .tx_now(|tx| store::handovers::take(tx, &self.id))
        {
            tracing::warn!(bot_id = %self.id, error = %e, "cannot forget the hand-over record");
        }
        if had && !taken {
            process::spawn::unstore_descriptors(&self.id);
            // Not taken over: the agent the previous botvisord left is stopped here, gently, with
            // what it started (design rule 9), before the bot recovers.
            let left = record.map(|h| h.identity).or_else(|| {
                self.shared
                    .store
                    .read(store::processes::all)
                    .ok()?
                    .into_iter()
                    .find(|r| r.bot_id == self.id && r.role == "root")
                    .map(|r| r.identity)
            });
            if let Some(identity) = left.filter(|id| liveness(id) == Liveness::Alive) {
                let mut targets = vec![identity.clone()];
                targets.extend(process::tree::descendants(identity.pid));
                tracing::info!(bot_id = %self.id, pid = identity.pid, "stopping the agent the previous botvisord left, which is not taken over");
                process::stop::stop_by_identity(&targets, self.shared.config.stop_grace()).await;
            }
        }
        taken
    }

    /// Takes over the agent a killed botvisord left running with no hand-over (issue 47): its
    /// root process as recorded at its launch, alive; its protocol rebuilt from what is on
    /// record ([`crate::runtime::Runtime::reopen`]); its stream read on from the next whole line
    /// (what the killed botvisord read and did not handle is lost from it, and read back from
    /// the conversation's file when the turn ends silent:
    /// [`crate::supervisor::core::Input::TakenOver`], `crashed`).
    fn attach_after_crash(&mut self, fds: BTreeMap<Role, OwnedFd>) -> bool {
        if crate::systemd::life::keeper().is_none() {
            return false;
        }
        let root = match self.shared.store.read(store::processes::all) {
            Ok(all) => all
                .into_iter()
                .find(|r| r.bot_id == self.id && r.role == "root")
                .map(|r| r.identity),
            Err(_) => None,
        };
        let Some(identity) = root.filter(|id| liveness(id) == Liveness::Alive) else {
            return false;
        };
        let pid = identity.pid;
        let record = self.record();
        let Some(session) = record.session_id.clone() else {
            tracing::info!(bot_id = %self.id, pid, "the agent left by a killed botvisord had no turn on record; it is stopped");
            return false;
        };
        let left = match self.left() {
            Ok(left) => left,
            Err(e) => {
                tracing::warn!(bot_id = %self.id, error = %e, "cannot read the bot's turns");
                return false;
            }
        };
        let env = self.build_env(&record);
        let cwd = std::path::PathBuf::from(&record.cwd);
        // The turn it answers, as its conversation's file names it (Codex's turn id).
        let asked = left
            .running
            .first()
            .map(|r| (r.turn.text.clone(), r.sent_at))
            .or_else(|| {
                left.queued
                    .iter()
                    .find_map(|(t, sent)| sent.as_ref().map(|(_, at)| (t.text.clone(), *at)))
            });
        let taken = asked.and_then(|(text, since)| {
            self.shared
                .runtime
                .taken_turn(&env, &cwd, &session, &text, since)
        });
        let open_payloads = self
            .shared
            .store
            .read(|c| store::chat::unanswered_permission_payloads(c, &self.id))
            .unwrap_or_default();
        let open: Vec<String> = open_payloads
            .iter()
            .filter_map(|p| p["request_id"].as_str().map(str::to_owned))
            .collect();
        let start = crate::runtime::SessionStart::Resume(session.clone());
        let spec = crate::runtime::LaunchSpec {
            cwd: &cwd,
            model: &record.model,
            permission_mode: &record.permission_mode,
            env: &env,
            start: &start,
            cut: None,
            fork: false,
        };
        let Some(protocol) =
            self.shared
                .runtime
                .reopen(&spec, taken.as_ref().and_then(|t| t.cut.as_ref()), &open)
        else {
            return false;
        };
        // The permission requests it asked and nobody answered are open again.
        let prompts: BTreeMap<String, Prompt> = open_payloads
            .iter()
            .filter_map(|p| {
                Some((
                    p["request_id"].as_str()?.to_owned(),
                    Prompt {
                        tool: p["tool"].as_str().unwrap_or_default().to_owned(),
                        input: p["input"].to_string(),
                        request: json!({
                            "permission_suggestions": p["suggestions"],
                            "tool_use_id": p["tool_use_id"],
                        }),
                    },
                ))
            })
            .collect();
        let taken = Taken {
            pid,
            leftover: Vec::new(),
            mid_line: true,
            protocol,
            env,
            forked_from: None,
            prompts,
        };
        if !self.install(fds, taken) {
            return false;
        }
        let mut run = Run::new(start);
        run.turn_began = !left.running.is_empty();
        self.handle(Input::TakenOver {
            run,
            left,
            session,
            crashed: true,
        });
        self.find_scope();
        tracing::info!(bot_id = %self.id, pid, "took over the agent a killed botvisord left running");
        true
    }

    /// The cgroup of the agent's scope, for the stop's proof, once the user manager says it.
    fn find_scope(&self) {
        if let Some(keeper) = crate::systemd::life::keeper() {
            let (id, scope_dir) = (self.id.clone(), self.scope_dir.clone());
            tokio::spawn(async move {
                if let Some(cgroup) = keeper.scope_cgroup(&id).await {
                    *scope_dir.lock().unwrap_or_else(|p| p.into_inner()) =
                        crate::systemd::life::Keeper::cgroup_dir(&cgroup);
                }
            });
        }
    }

    fn attach(&mut self, fds: BTreeMap<Role, OwnedFd>, h: Handover) -> bool {
        let pid = h.identity.pid;
        if liveness(&h.identity) != Liveness::Alive {
            tracing::info!(bot_id = %self.id, pid, "the handed-over agent is gone");
            return false;
        }
        let runtime = self.shared.runtime.clone();
        let (Some(protocol), Ok(run)) = (
            runtime.restore(&h.state["protocol"]),
            serde_json::from_value::<Run>(h.state["run"].clone()),
        ) else {
            tracing::warn!(bot_id = %self.id, pid, "the hand-over record cannot be read; the agent is stopped");
            return false;
        };
        let taken = Taken {
            pid,
            leftover: h.leftover,
            mid_line: false,
            protocol,
            env: serde_json::from_value(h.state["env"].clone()).unwrap_or_default(),
            forked_from: h.state["forked_from"].as_str().map(str::to_owned),
            // The permission requests it asked and nobody answered are open again.
            prompts: serde_json::from_value(h.state["prompts"].clone()).unwrap_or_default(),
        };
        if !self.install(fds, taken) {
            return false;
        }
        let left = match self.left() {
            Ok(left) => left,
            Err(e) => {
                tracing::warn!(bot_id = %self.id, error = %e, "cannot read the bot's turns");
                Default::default()
            }
        };
        let session = self
            .record()
            .session_id
            .or_else(|| run.start.session_id().map(str::to_owned))
            .unwrap_or_default();
        self.handle(Input::TakenOver {
            run,
            left,
            session,
            crashed: false,
        });
        self.find_scope();
        tracing::info!(bot_id = %self.id, pid, invocation = %h.invocation, "took over the agent the previous botvisord handed over");
        true
    }

    /// Makes `taken` the bot's running agent, reading and writing the descriptors the manager
    /// passed back (`fds`, by role): false (said in the journal) when its pipes are missing or
    /// it cannot be attached, and nothing changed.
    fn install(&mut self, mut fds: BTreeMap<Role, OwnedFd>, taken: Taken) -> bool {
        let pid = taken.pid;
        let (Some(stdin), Some(stdout)) = (fds.remove(&Role::Stdin), fds.remove(&Role::Stdout))
        else {
            tracing::warn!(bot_id = %self.id, pid, "the agent's pipes were not passed back");
            return false;
        };
        let descriptors = process::attach::Descriptors {
            stdin,
            stdout,
            stderr: fds.remove(&Role::Stderr),
            pidfd: fds.remove(&Role::Pid),
        };
        self.generation += 1;
        let (handle, stdin) = match process::attach::attach(
            pid,
            descriptors,
            taken.leftover,
            taken.mid_line,
            self.generation,
            self.proc_tx.clone(),
        ) {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(bot_id = %self.id, pid, error = %e, "cannot take the agent over; it is stopped");
                return false;
            }
        };
        let (writer, task) = super::stdin::spawn_writer(stdin, self.message_whole());
        self.launched_env = Some(taken.env.clone());
        self.proc = Some(Proc {
            handle,
            stdin: Some(writer),
            writer: Some(task),
            protocol: taken.protocol,
            before_turn: None,
            began_a_turn: false,
            usage: self.watch_usage(pid, None),
            env: taken.env,
            forked_from: taken.forked_from,
        });
        self.update(vec![Property::ProcessId], |v| v.process_id = pid);
        if !taken.prompts.is_empty() {
            let list = self.with_prompts(|book| {
                book.open.extend(taken.prompts);
                vec![Effect::Pending(book.list())]
            });
            self.apply(list);
        }
        true
    }
}

/// An agent to take over from the previous botvisord ([`Actor::install`]).
struct Taken {
    /// Its root process.
    pid: u32,
    /// What the previous botvisord read of its stdout and did not handle, read first.
    leftover: Vec<u8>,
    /// Whether the stream may stand mid-line (after a crash): read on from the next whole line.
    mid_line: bool,
    /// Its protocol, restored or rebuilt.
    protocol: Box<dyn crate::runtime::Protocol>,
    /// The environment it runs with.
    env: BTreeMap<String, String>,
    /// The conversation it forked from, if it did.
    forked_from: Option<String>,
    /// The permission requests it asked and nobody answered.
    prompts: BTreeMap<String, Prompt>,
}
