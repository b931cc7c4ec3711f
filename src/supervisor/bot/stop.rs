//! A process's end (design rule 9): known descendants by identity, the gentle stop with
//! escalation and the one place a stop verdict is read; an exit nobody asked for, handed to the
//! core ([`crate::supervisor::core::Input::Exited`]) and cleaned up when it asks
//! ([`crate::supervisor::core::Input::CleanedUp`]); what an interrupted turn left running,
//! stopped; and the looks the core asks for ([`crate::supervisor::core::Look`]).

use super::{Actor, DESCENDANT_GRACE, KILL_WAIT, PROOF};
use crate::process;
use crate::process::ExitInfo;
use crate::process::ProcEvent;
use crate::process::identity::Liveness;
use crate::process::identity::ProcessIdentity;
use crate::process::identity::identify;
use crate::process::identity::liveness;
use crate::process::stop::stop_by_identity;
use crate::process::subreaper;
use crate::process::tree;
use crate::process::verdict::Proof;
use crate::process::verdict::StopObservation;
use crate::process::verdict::StopVerdict;
use crate::process::verdict::verdict;
use crate::supervisor::core::stop::{StopPlan, StopReason, StopStep};
use crate::supervisor::core::{Input, Look, Looked};
use crate::supervisor::core::{Publish, Write};
use serde_json::json;
use std::time::Duration;

/// How many times the clean-up after a root's exit looks for what is left of its process tree
/// (each look stops what it finds new; the next finds what they forked meanwhile).
const CLEAN_UP_ROUNDS: usize = 5;

impl Actor {
    /// Walks the current process's descendants (targeted `/proc` reads from its pid) and records
    /// the new ones by identity.
    /// The agent's processes besides its root: its descendants, and those that escaped and lost
    /// their parent, which the daemon adopted (subreaper), with theirs. Empty with no agent.
    pub(super) fn agent_descendants(&self) -> Vec<ProcessIdentity> {
        match &self.proc {
            Some(proc) => agent_descendants(&self.id, proc.handle.pid),
            None => Vec::new(),
        }
    }

    /// Answers what the core asked to look at ([`crate::supervisor::core::Look`]): whether a
    /// descendant of the agent lives (one known by identity, or one found now), or whether the
    /// holder of the conversation lives (one that cannot be checked counts as alive).
    pub(super) fn look(&self, look: Look) -> Looked {
        match look {
            Look::Descendants(why) => Looked::Descendants {
                why,
                lives: self.known.iter().any(|id| liveness(id) == Liveness::Alive)
                    || !self.agent_descendants().is_empty(),
            },
            Look::Holder(identity) => Looked::Holder {
                alive: !matches!(liveness(&identity), Liveness::Gone),
                identity,
            },
        }
    }

    pub(super) fn snapshot_descendants(&mut self) {
        if self.proc.is_none() {
            return;
        }
        let found = self.agent_descendants();
        let new: Vec<ProcessIdentity> = found
            .into_iter()
            .filter(|id| !self.known.contains(id))
            .collect();
        if new.is_empty() {
            return;
        }
        tracing::debug!(bot_id = %self.id, count = new.len(), "new descendants");
        let writes: Vec<Write> = new
            .iter()
            .map(|id| Write::Process {
                identity: id.clone(),
                root: false,
            })
            .collect();
        if let Err(e) = self.commit(&writes, &[]) {
            tracing::error!(bot_id = %self.id, error = %e, "cannot record descendants");
        }
        self.known.extend(new);
    }

    /// Every process still to stop for this bot once its root is gone: known descendants, orphans
    /// the daemon adopted that carry the bot's marker, and what descends from either.
    pub(super) fn leftovers(&self) -> Vec<ProcessIdentity> {
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
    pub(super) async fn clean_up_after_exit(
        &mut self,
        root_pid: u32,
        why: StopReason,
    ) -> StopVerdict {
        // A descendant that forks while it is being stopped (a loop that ignores SIGTERM) leaves
        // children the first look did not see, orphaned to the daemon: look again, and stop what
        // is new, until a look finds nothing new (at most CLEAN_UP_ROUNDS looks with a grace).
        let mut observed: Vec<(ProcessIdentity, Liveness)> = Vec::new();
        for round in 0..=CLEAN_UP_ROUNDS {
            let new: Vec<ProcessIdentity> = self
                .leftovers()
                .into_iter()
                .filter(|id| !observed.iter().any(|(seen, _)| seen == id))
                .collect();
            if new.is_empty() {
                break;
            }
            // The last look's finds get SIGKILL without a grace: the rounds are over; whatever
            // lives on is a survivor in the verdict.
            let grace = if round == CLEAN_UP_ROUNDS {
                Duration::ZERO
            } else {
                DESCENDANT_GRACE
            };
            observed.extend(stop_by_identity(&new, grace).await);
        }
        // Design rule 10: where the bot has a cgroup, it is killed whole and read empty.
        let mut proof = PROOF;
        let scope = self
            .scope_dir
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        let left = match &scope {
            Some(dir) => process::cgroup::after_stop_in(&self.id, dir).await,
            None => process::cgroup::after_stop(&self.id).await,
        };
        if let Some(left) = left {
            observed.extend(left);
            proof = Proof::Cgroup;
        }
        let v = verdict(&StopObservation {
            root_exited: true,
            descendants: observed,
            proof,
        });
        self.read_verdict(root_pid, why, &v);
        v
    }

    /// The one place a verdict is read: the journal always; the chat and `LastError` when it is
    /// not clean; the `StopVerdict` property.
    pub(super) fn read_verdict(&mut self, root_pid: u32, why: StopReason, v: &StopVerdict) {
        tracing::info!(
            bot_id = %self.id,
            pid = root_pid,
            why = why.as_str(),
            verdict = v.name(),
            proof = v.proof().unwrap_or(PROOF).as_str(),
            "stop verdict"
        );
        let (verdict, proof) = (
            v.name().to_owned(),
            v.proof().map_or("", |p| p.as_str()).to_owned(),
        );
        if let Err(e) = self.commit(
            &[Write::StopVerdict(verdict.clone())],
            &[Publish::StopVerdict { verdict, proof }],
        ) {
            tracing::error!(bot_id = %self.id, error = %e, "cannot record the verdict");
        }
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
            if let Err(e) = self.commit(&[Write::ProcessesReleased], &[]) {
                tracing::error!(bot_id = %self.id, error = %e, "cannot clear process records");
            }
        }
    }

    /// Carries out the stop the core asked for ([`Effect::Stop`]), if it asked for one, and
    /// tells it how it ended ([`Input::Stopped`]).
    ///
    /// [`Effect::Stop`]: crate::supervisor::core::Effect::Stop
    /// [`Input::Stopped`]: crate::supervisor::core::Input::Stopped
    pub(super) async fn stop_if_asked(&mut self) {
        let Some(why) = self.stop_asked.take() else {
            return;
        };
        let released = self.stop_process(why).await.is_none_or(|v| v.released());
        self.handle(crate::supervisor::core::Input::Stopped { why, released });
    }

    /// Stops the process gently: close stdin, SIGTERM the group, grace, SIGKILL the group, then
    /// every known descendant by identity. Lines the process writes meanwhile are still recorded.
    /// Returns the verdict (`None` when no process ran).
    pub(super) async fn stop_process(&mut self, why: StopReason) -> Option<StopVerdict> {
        self.snapshot_descendants();
        let proc = self.proc.as_mut()?;
        // A stored duplicate of stdin would keep the agent from seeing its end (issue 47).
        if crate::systemd::life::keeper().is_some() {
            process::spawn::unstore_descriptors(&self.id);
        }
        proc.stdin = None;
        let pid = proc.handle.pid;
        let generation = proc.handle.generation;
        let exited = proc.handle.exited().is_some();
        self.handle(Input::Stopping);
        tracing::info!(bot_id = %self.id, pid, why = why.as_str(), "stopping agent");
        // The sequence is decided in core::stop; here it is carried out.
        let (mut plan, first) = StopPlan::begin(
            tokio::time::Instant::now(),
            self.shared.config.stop_grace(),
            KILL_WAIT,
            exited,
        );
        if first == Some(StopStep::Term)
            && let Some(p) = &self.proc
        {
            p.handle.signal_group(libc::SIGTERM);
        }
        let exit = loop {
            tokio::select! {
                ev = self.proc_rx.recv() => match ev {
                    Some(ProcEvent::Exited(g, info)) if g == generation => break Some(info),
                    Some(ev) => { let _ = self.on_proc_event(ev); }
                    None => break None,
                },
                _ = tokio::time::sleep_until(plan.next_deadline()) => {
                    match plan.deadline(tokio::time::Instant::now()) {
                        Some(StopStep::Kill) => {
                            if let Some(p) = self.proc.as_ref().filter(|p| p.handle.exited().is_none()) {
                                tracing::warn!(bot_id = %self.id, pid, "grace period over; SIGKILL");
                                p.handle.signal_group(libc::SIGKILL);
                            }
                        }
                        Some(StopStep::GiveUp) => break None,
                        Some(StopStep::Term) | None => {}
                    }
                }
            }
        };
        let Some(info) = exit else {
            let v = verdict(&StopObservation {
                root_exited: false,
                descendants: Vec::new(),
                proof: PROOF,
            });
            self.read_verdict(pid, why, &v);
            self.handle(Input::StopGaveUp);
            return Some(v);
        };
        tracing::info!(bot_id = %self.id, pid, status = %info, "agent stopped");
        self.proc.take()?;
        self.handle(Input::ProcessStopped { why });
        let v = self.clean_up_after_exit(pid, why).await;
        self.handle(Input::StopEnded);
        Some(v)
    }
}

/// The processes of bot `bot_id`'s agent whose root is `root` besides it: its descendants, and
/// those that escaped and lost their parent, which the daemon adopted (subreaper), with theirs.
pub(super) fn agent_descendants(bot_id: &str, root: u32) -> Vec<ProcessIdentity> {
    let mut found = tree::descendants(root);
    for pid in subreaper::adopted_orphans(bot_id) {
        found.extend(identify(pid).into_iter().chain(tree::descendants(pid)));
    }
    found
}

impl Actor {
    /// Stops what an interrupted turn left running, by identity (SIGTERM, `stop_grace_s`,
    /// SIGKILL), and says in the chat what was stopped and what survived (reason
    /// `interrupted_processes`).
    pub(super) async fn stop_left_by_interrupt(&mut self, turn: &str, left: Vec<ProcessIdentity>) {
        tracing::info!(bot_id = %self.id, turn_id = %turn, count = left.len(), "stopping what the interrupted turn left running");
        let grace = Duration::from_secs_f64(self.shared.config.stop_grace_s);
        let stopped = process::stop::stop_by_identity(&left, grace).await;
        let note = crate::supervisor::core::stopped_note(&stopped);
        if note["survivors"].as_array().is_some_and(|s| !s.is_empty()) {
            tracing::warn!(bot_id = %self.id, turn_id = %turn, "{}", note["text"]);
        }
        self.add_item("system", Some(turn), note);
    }
}

impl Actor {
    /// The process exited without being asked to.
    pub(super) async fn on_exit(&mut self, info: ExitInfo) {
        let Some(proc) = self.proc.take() else {
            return;
        };
        if crate::systemd::life::keeper().is_some() {
            crate::process::spawn::unstore_descriptors(&self.id);
        }
        let root_pid = proc.handle.pid;
        self.handle(Input::Exited {
            status: info,
            stderr: proc.handle.stderr_text(),
            lived: proc.handle.started.elapsed(),
        });
        if let Some(why) = self.clean_up_asked.take() {
            self.clean_up_after_exit(root_pid, why).await;
            self.handle(Input::CleanedUp);
        }
    }
}
