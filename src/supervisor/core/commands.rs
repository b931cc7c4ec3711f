//! A client's commands as the core reads them (issue 27): a message queued, a budget set, a
//! live setting, an interrupt, a permission answer, a Stop (and, with [`Input::Stopped`], what
//! follows its end). (A Restart, a Delete and the shutdown are still sequenced by the shell.)
//!
//! [`Input::Stopped`]: super::machine::Input::Stopped

use std::time::Instant;

use super::bot_core::BotCore;
use super::budget::{self, Held};
use super::control::{Controls, for_next_start};
use super::effect::{Awaited, Effect, Request};
use super::lifecycle::{Lifecycle, RestartMode};
use super::limits::{self, LimitHold};
use super::machine::{Bounds, Facts};
use super::spend;
use super::state::State;
use super::stop::StopReason;
use super::turns::QueuedTurn;
use super::{held, records};
use crate::runtime::ControlRequest;

/// A client's command, already validated and recorded where it must be (`BotHandle`).
#[derive(Debug, Clone, PartialEq)]
pub enum Cmd {
    /// A message sent (its turn and item committed by `Send`).
    Queued(QueuedTurn),
    /// The bot's own budget, nano-dollars (`Some(0)`: none); recorded by the core's effects.
    SetBudget(Option<u64>),
    /// A setting already recorded, for the running agent.
    ApplyLive(ControlRequest),
    /// End the turn in flight.
    Interrupt,
    /// A client's answer to the CLI's permission request `request_id`, already taken from the
    /// prompt book (the first answer wins there).
    Respond {
        /// The CLI's request id.
        request_id: String,
        /// What the client answered.
        answer: crate::runtime::PermissionAnswer,
    },
    /// Something the running agent takes only at its launch changed (its environment,
    /// `SetEnvironment`; its conversation, continued by another process). With an idle agent it
    /// starts again on its conversation now (a Restart that is not a client's); with a turn in
    /// flight, once that turn ends ([`Cmd::RestartWhenIdle`]); with no agent nothing happens:
    /// the next launch takes it. `held_waits`: while a hold is on record (a plan's limit, the
    /// budget) an idle agent is stopped instead, as an idle one is: no agent starts for a held
    /// bot, and the launch at the hold's end takes what is in force.
    LaunchInputsChanged {
        /// A hold on record stops the idle agent instead of restarting it.
        held_waits: bool,
    },
    /// Something the running agent takes only at its launch changed while a turn was in flight
    /// (its environment, `SetEnvironment`; its conversation, continued by another process): the
    /// agent takes it once that turn ends, an interrupt included (issue 46: applied when the
    /// output says it is), restarted on its conversation with the waiting messages carried on.
    RestartWhenIdle,
    /// Start the agent again (design rule 5 for a fresh start): the running process, if any,
    /// is stopped first. `by_client`: a client's Restart, which also tries again at once
    /// whatever limit, login or budget the bot waited for and ends a wait for another holder;
    /// otherwise botvisor's own (a changed environment), which leaves those as they are.
    Restart {
        /// On the conversation, a new one, or a copy.
        mode: RestartMode,
        /// A client asked.
        by_client: bool,
    },
    /// A client's Delete: nothing starts again, the process is stopped, then the bot's rows are
    /// marked deleted and botvisor's copy of its conversation removed, and its supervision ends.
    Delete,
    /// botvisord shuts down: nothing starts again, the process is stopped (the bot keeps its
    /// record, parked or not), and its supervision ends.
    Shutdown,
    /// A client's Stop: the bot is parked (messages wait for its next Send or Restart), a wait
    /// for another holder ends, and the process is stopped (design rule 9).
    Stop,
    /// The bot's leases changed: `holders` clients hold it now; `warm`: the one that just took
    /// a lease asked for a warm start (issue 31: `HoldWith`'s `warm_start`, config
    /// `warm_start`). A warm start launches a stopped agent with no message, so that the first
    /// message is answered at a running agent's pace; the pump decides whether anything may
    /// start (not while parked by a Stop, failed, limited, in a crash backoff, or waiting for
    /// another holder). Design rule 3 makes a launch no message reaches leave no record. With
    /// no lease left, a warm start not yet made is dropped, and the idle deadline applies.
    Leases {
        /// Clients holding the bot.
        holders: usize,
        /// A warm start was asked with the lease just taken.
        warm: bool,
    },
    /// The machine is under memory pressure and the supervisor found this bot the least
    /// recently used idle one: it stops now if it may, with a `system` item (reason
    /// `memory_pressure`), and otherwise nothing ([`BotCore::memory_pressure`], issue 31).
    MemoryPressure,
}

impl Cmd {
    /// Whether the command is a use of the bot by a client ([`super::evict`]): every command
    /// but the shutdown, a Delete and memory pressure, which are botvisor's own or end the bot.
    pub fn is_use(&self) -> bool {
        !matches!(self, Cmd::Shutdown | Cmd::Delete | Cmd::MemoryPressure)
    }
}

impl BotCore {
    /// A client's command.
    pub(super) fn command(&mut self, now: Instant, cmd: Cmd, facts: &dyn Facts) {
        match cmd {
            Cmd::Queued(turn) => {
                // A message sent before the actor recovered was loaded from the store already:
                // never queued twice (rule 8).
                let known = self.turns.knows(&turn.id);
                let id = turn.id.clone();
                let effects = self.turns.queue(turn);
                self.emit(effects);
                // Sent while a usage limit holds: it says when it will go.
                if let Some((kind, resets_at)) = self.standing.record.hold.clone()
                    && !known
                {
                    self.emit([limits::waiting(&LimitHold { kind, resets_at }, &id)]);
                }
            }
            Cmd::SetBudget(own) => {
                let (cost, _) = self.spend();
                let in_force = spend::in_force(own, self.settings.budget_default);
                let held = match &self.standing.record.hold {
                    None => Held::Nothing,
                    Some((k, _)) if k == budget::BUDGET => Held::ByBudget,
                    Some(_) => Held::ByOther,
                };
                let effects = budget::set(
                    own,
                    in_force,
                    cost,
                    held,
                    self.turns.inflight.is_some(),
                    self.process.is_some(),
                );
                self.emit(effects);
            }
            // Shown once in force (design rule 6): taken by the running agent, or, with no agent
            // to take it, recorded for the next start now.
            Cmd::ApplyLive(request) => self.send_control(now, request),
            Cmd::Interrupt => {
                if let Some(turn) = self.turns.to_interrupt() {
                    self.interrupting = Some(turn);
                    self.send_control(now, ControlRequest::Interrupt);
                }
            }
            Cmd::Respond { request_id, answer } => {
                self.emit([Effect::Send(Request::Permission { request_id, answer })]);
            }
            Cmd::RestartWhenIdle => self.restart_when_idle(),
            Cmd::LaunchInputsChanged { held_waits } => {
                if self.process.is_none() {
                    return;
                }
                if self.turns.inflight.is_some() {
                    self.restart_when_idle();
                } else if held_waits && self.standing.record.hold.is_some() {
                    self.emit([Effect::Stop(StopReason::Idle)]);
                } else {
                    self.command(
                        now,
                        Cmd::Restart {
                            mode: RestartMode::Resume,
                            by_client: false,
                        },
                        facts,
                    );
                }
            }
            Cmd::Restart { mode, by_client } => {
                if by_client {
                    // The handle recorded and showed the end of `failed` before it asked
                    // (a Send right after the Restart is taken, not refused).
                    if self.standing.state == State::Failed {
                        self.standing.state = State::Stopped;
                        self.standing.record.failed = false;
                    }
                    if self.limit_until.take().is_some() || self.standing.record.hold.is_some() {
                        self.emit(limits::lifted(self.process.is_some()));
                    }
                    // The start that follows looks for a holder again.
                    if self.held.take().is_some() {
                        self.emit(held::dropped());
                    }
                }
                self.restart_at = None;
                self.restarting = Some(mode);
                self.emit([Effect::Stop(StopReason::Restart)]);
            }
            Cmd::Delete => self.emit([Effect::Pause, Effect::Stop(StopReason::Delete)]),
            Cmd::Shutdown => self.emit([Effect::Pause, Effect::Stop(StopReason::Shutdown)]),
            Cmd::Stop => {
                // Said once the stop ended (the message in flight settled: ended, or waiting
                // again), before the bot shows `stopped`, so that a client that sees `stopped`
                // finds it in the chat ([`BotCore::stopped`]).
                self.stop_note_due = !self.standing.parked;
                self.restart_at = None;
                self.emit([Effect::Park(true)]);
                if self.held.take().is_some() {
                    self.emit(held::dropped());
                }
                self.life.warm_start = false;
                self.emit([Effect::Stop(StopReason::Stop)]);
            }
            Cmd::Leases { holders, warm } => {
                if holders == 0 {
                    self.life.warm_start = false;
                } else if warm && self.process.is_none() {
                    self.life.warm_start = true;
                }
            }
            Cmd::MemoryPressure => self.memory_pressure(facts),
        }
    }

    /// A change taken at launch waits for the turn in flight to end ([`Cmd::RestartWhenIdle`]);
    /// with none in flight, the agent restarts with it now.
    fn restart_when_idle(&mut self) {
        if self.process.is_none() {
            return;
        }
        self.life.restart_when_idle = true;
        self.restart_if_idle();
    }

    /// A restart a changed setting waits for, once no turn is in flight: on the same
    /// conversation, botvisor's own (no limit or login hold is lifted).
    pub(super) fn restart_if_idle(&mut self) {
        if !self.life.restart_when_idle
            || self.turns.inflight.is_some()
            || self.process.is_none()
            || self.restarting.is_some()
        {
            return;
        }
        self.life.restart_when_idle = false;
        tracing::info!("the agent restarts on its conversation to take what changed");
        self.restart_at = None;
        self.restarting = Some(RestartMode::Resume);
        self.emit([Effect::Stop(StopReason::Restart)]);
    }

    /// The stop the core asked for ([`Effect::Stop`]) ended; `released` says whether its
    /// verdict let the conversation go (design rule 9). After a client's Stop the bot shows
    /// `stopped`, unless it failed (a failure stays until a client restarts it).
    ///
    /// After a Restart's stop, [`Lifecycle::restart`] says whether and how the agent starts
    /// again: never beside a root that outlived SIGKILL (rule 7); a fresh restart's forget is
    /// committed before anything starts (rule 5), so its outcome is awaited
    /// ([`Effect::ReportCommit`], then [`BotCore::committed`]).
    pub(super) fn stopped(&mut self, why: StopReason, released: bool, facts: &dyn Facts) {
        // The agent that held a failed attempt is gone, whatever stopped it: where to cut is
        // read now (issue 45).
        self.recut(facts);
        match why {
            StopReason::Stop => {
                if std::mem::take(&mut self.stop_note_due) {
                    self.emit(records::stopped_with_queue(&self.turns.waiting_ids()));
                }
                self.emit(Lifecycle::stop_ended(self.standing.state))
            }
            // Deleted whatever the stop's verdict: the client asked for the bot to be gone (a
            // root that survived SIGKILL is named in the journal by the stop).
            StopReason::Delete => {
                let mut c = super::effect::CommitBuilder::default();
                c.write(super::effect::Write::BotDeleted)
                    .then(super::effect::Publish::BotRemoved);
                self.emit(c.build());
                self.emit([Effect::ReportCommit(Awaited::Delete)]);
            }
            StopReason::Shutdown => self.emit([Effect::End]),
            // An idle agent made way for another process that opened its conversation (design
            // rule 7): the bot waits for that one now.
            StopReason::HeldElsewhere => {
                if let Some(held) = &self.held {
                    self.emit(held::held(held));
                }
            }
            StopReason::Restart => {
                let mode = self.restarting.take().unwrap_or(RestartMode::Resume);
                let recorded = facts.recorded();
                let Some(effects) = self.life.restart(released, mode, recorded.as_deref()) else {
                    return;
                };
                if effects.iter().any(|e| matches!(e, Effect::Commit { .. })) {
                    self.emit(effects);
                    self.emit([Effect::ReportCommit(Awaited::Restart(mode))]);
                } else {
                    self.emit(effects);
                    self.committed(Awaited::Restart(mode), true);
                }
            }
            _ => {}
        }
    }

    /// The commit `awaited` waited for is durable (`ok`) or failed. A Restart's: the agent
    /// starts (and a fresh one's copy of the old conversation is removed), or, not recorded,
    /// the bot is parked and nothing starts ([`Lifecycle::restart_recorded`]).
    pub(super) fn committed(&mut self, awaited: Awaited, ok: bool) {
        match awaited {
            Awaited::Delivery => self.delivery_committed(ok),
            Awaited::Forget => {
                self.life.start_forgot(ok);
                if let Some(decision) = self.launching.take() {
                    self.emit([Effect::Spawn(decision)]);
                }
            }
            Awaited::Delete => {
                if ok {
                    tracing::info!("bot deleted");
                    self.emit([Effect::ForgetKept]);
                } else {
                    tracing::error!("cannot record the bot's deletion");
                }
                self.emit([Effect::End]);
            }
            Awaited::Restart(mode) => {
                if !ok {
                    tracing::error!("the restart could not be recorded; not started");
                } else if mode == RestartMode::Fresh {
                    self.emit([Effect::ForgetKept]);
                }
                // A backoff after a crash no longer stands: the client restarted, or the bot
                // is parked.
                self.restart_at = None;
                let effects = self.life.restart_recorded(ok);
                self.emit(effects);
            }
        }
    }

    /// Sends `request` to the running agent, unless none can take it (none runs, or it is being
    /// stopped): then it is what [`BotCore::control_written`] does with a request not written.
    fn send_control(&mut self, now: Instant, request: ControlRequest) {
        if self.process.as_ref().is_some_and(|p| !p.run.stopping) {
            self.emit([Effect::Send(Request::Control(request))]);
        } else {
            self.control_written(now, request, None);
        }
    }

    /// A control request was written to the agent as `request_id`, or not (`None`: no agent,
    /// or its stdin closed). Written: its answer is awaited (a setting within
    /// `control_timeout_s`, an interrupt's turn within `interrupt_grace_s`). Not written: an
    /// interrupt is dropped; a setting is recorded for the next start (design rule 6).
    pub(super) fn control_written(
        &mut self,
        now: Instant,
        request: ControlRequest,
        request_id: Option<String>,
    ) {
        let bounds = self.settings.bounds;
        let after = |s: f64| Bounds::deadline(now, s);
        match request_id {
            Some(id) => {
                if request == ControlRequest::Interrupt
                    && let Some(turn) = self.interrupting.take()
                {
                    tracing::info!(turn_id = %turn, "interrupting");
                    self.watch
                        .interrupt_sent(&turn, after(bounds.interrupt_grace_s));
                    self.turns.interrupt_sent(turn);
                }
                if Controls::watched(&request) {
                    self.watch.control_sent(&id, after(bounds.control_s));
                }
                if let Some(p) = self.process.as_mut() {
                    p.controls.sent(id, request);
                }
            }
            None => {
                if request == ControlRequest::Interrupt {
                    self.interrupting = None;
                    return;
                }
                if let Some(p) = self.process.as_mut() {
                    p.controls.superseded_by(&request);
                }
                if let Some(effect) = for_next_start(&request, self.process.is_some()) {
                    self.emit([effect]);
                }
            }
        }
    }
}
