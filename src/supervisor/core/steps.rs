//! What the shell asks the core between inputs, and the handlers of the inputs of a launch, a
//! delivery, the actor's start and a stopped process. The questions change nothing: the pump's
//! plan (start the agent, write the next message), whether messages wait or one is in flight,
//! whether the agent works. The one change made outside [`BotCore::handle`] is the idle
//! deadline ([`BotCore::rearm_idle`], once per turn of the actor's loop). The handlers are
//! [`super::Input::LaunchChecked`], [`super::Input::Launched`], [`super::Input::Deliver`] with
//! its commit, [`super::Input::Began`] and [`super::Input::ProcessStopped`].

use std::time::{Duration, Instant, SystemTime};

use super::bot_core::{BotCore, Process};
use super::control::Controls;
use super::effect::{Awaited, CommitBuilder, Effect, Request, Write};
use super::idle::{self, Activity};
use super::lifecycle::{Lifecycle, Run};
use super::limits;
use super::machine::{Bounds, Facts};
use super::pump::{self, ProcessNow, PumpFacts, PumpPlan};
use super::start::StartDecision;
use super::state::State;
use super::stop::StopReason;
use crate::process::identity::ProcessIdentity;
use crate::runtime::SessionStart;

impl BotCore {
    /// Whether to start the agent and whether to write it the next message now ([`pump::pump`]
    /// decides from the core's state and `process_ready`, which only the shell knows: whether a
    /// process runs (`Some`) and its protocol is past its handshake (`true`)).
    pub fn pump_plan(&self, process_ready: Option<bool>) -> PumpPlan {
        let standing = &self.standing;
        pump::pump(&PumpFacts {
            parked: standing.parked,
            failed_or_stopping: matches!(standing.state, State::Failed | State::Stopping),
            process: match process_ready {
                None => ProcessNow::None,
                Some(_) if !self.process.as_ref().is_some_and(|p| p.run.usable()) => {
                    ProcessNow::Unusable
                }
                Some(false) => ProcessNow::Opening,
                Some(true) => ProcessNow::Usable,
            },
            waiting: !self.turns.queue.is_empty(),
            restart_pending: self.life.restart_pending,
            warm_start: self.life.warm_start,
            backoff_running: self.restart_at.is_some(),
            in_flight: self.turns.inflight.is_some(),
            limited: self.limit_until.is_some() || standing.record.hold.is_some(),
            held: self.held.is_some(),
        })
    }

    /// Messages wait in the queue.
    pub fn waiting(&self) -> bool {
        !self.turns.queue.is_empty()
    }

    /// A message is in flight.
    pub fn in_flight(&self) -> bool {
        self.turns.inflight.is_some()
    }

    /// [`Input::LaunchChecked`](super::Input::LaunchChecked): which conversation the launch
    /// starts or resumes, and the forget of one it leaves, committed before the spawn.
    pub(super) fn launch_checked(
        &mut self,
        can_resume: bool,
        fresh: SessionStart,
        runtime: &str,
        facts: &dyn Facts,
    ) {
        let recorded = facts.recorded();
        let decision = self.start_decision(
            recorded.as_deref(),
            can_resume,
            |id| facts.transcript_exists(id),
            || fresh.clone(),
        );
        match &decision.forget {
            Some((old, reason)) => {
                self.emit([
                    super::records::forget_at_start(old, reason, runtime),
                    Effect::ReportCommit(Awaited::Forget),
                ]);
                self.launching = Some(decision);
            }
            None => self.emit([Effect::Spawn(decision)]),
        }
    }

    /// Which conversation a launch starts or resumes (design rule 2,
    /// [`Lifecycle::start_decision`]); the first waiting message, when it is asked again, cuts
    /// its unanswered attempt out (issue 25).
    pub(super) fn start_decision(
        &mut self,
        recorded: Option<&str>,
        can_resume: bool,
        transcript_exists: impl FnOnce(&str) -> bool,
        fresh: impl Fn() -> SessionStart,
    ) -> StartDecision {
        let cut = self
            .turns
            .queue
            .front()
            .and_then(|t| t.cut.clone())
            .or_else(|| self.attempt_cut());
        self.life
            .start_decision(recorded, can_resume, transcript_exists, fresh, cut.as_ref())
    }

    /// `Input::Launched`: a new process as the core knows it, its root on record by identity,
    /// the start watchdog from `now` (`Bounds::start_s`; 0: none), and the bot `idle`.
    pub(super) fn launched(
        &mut self,
        now: Instant,
        decision: StartDecision,
        identity: Option<ProcessIdentity>,
    ) {
        self.life.started();
        self.life.restart_when_idle = false;
        self.background_tasks = 0;
        self.attempt_launched(matches!(decision.start, SessionStart::Resume(_)));
        self.process = Some(Process {
            run: Run::with_cut(decision.start, decision.cut),
            controls: Controls::default(),
        });
        self.watch
            .launched(Bounds::deadline(now, self.settings.bounds.start_s));
        if let Some(identity) = identity {
            let mut c = CommitBuilder::default();
            c.write(Write::Process {
                identity,
                root: true,
            });
            self.emit(c.build());
        }
        self.emit([Effect::State(State::Idle)]);
    }

    /// `Input::Deliver`: the next waiting message for the running process, which writes to
    /// conversation `session`. Where it goes is committed first, and the core waits for that
    /// commit ([`Awaited::Delivery`]) before it asks for the write (design rule 8).
    pub(super) fn deliver(&mut self, session: &str, now: SystemTime) {
        let launched_cut = self.process.as_ref().and_then(|p| p.run.cut.clone());
        if let Some((_, effects)) = self.turns.deliver_cut(session, now, launched_cut.as_ref()) {
            self.emit(effects);
            self.emit([Effect::ReportCommit(Awaited::Delivery)]);
        }
    }

    /// The delivery's record was durable (`ok`): the message goes. When not, it waits again,
    /// first, and nothing is written (a daemon crash could deliver it twice).
    pub(super) fn delivery_committed(&mut self, ok: bool) {
        if !self.turns.delivery_recorded(ok) {
            return;
        }
        if let Some(i) = &self.turns.inflight {
            let (turn_id, text) = (i.turn.id.clone(), i.turn.text.clone());
            self.emit([Effect::Send(Request::Message { turn_id, text })]);
        }
    }

    /// After every input: an idle bot (`activity`, [`BotCore::activity`]) gets a fresh idle
    /// deadline `timeout` from `now`, a busy one none ([`idle::idle_deadline`]).
    pub fn rearm_idle(&mut self, activity: &Activity, timeout: Option<Duration>, now: Instant) {
        self.idle_at = idle::idle_deadline(activity, timeout, now);
    }

    /// Whether the agent works, for the usage watch: a process runs and is not being stopped,
    /// and it is `busy` or runs background tasks.
    pub fn working(&self, busy: bool) -> bool {
        self.process.as_ref().is_some_and(|p| !p.run.stopping)
            && (busy || self.background_tasks > 0)
    }

    /// [`Input::Began`](super::Input::Began).
    pub(super) fn began(
        &mut self,
        now: Instant,
        attempt_cut: Option<crate::runtime::Cut>,
        conversation_cost: Option<(String, u64)>,
        running: bool,
        facts: &dyn Facts,
    ) {
        self.attempt = attempt_cut;
        self.turns.meter.conversation = conversation_cost;
        let Some((kind, resets_at)) = self.standing.record.hold.clone() else {
            return;
        };
        let (cost, budget) = self.spend();
        let times = self.settings.limit_times;
        match limits::resumed(&kind, resets_at, facts.unix_now(), times, cost, budget) {
            limits::Resumed::Wait(wait) => self.limit_until = Some(now + wait),
            limits::Resumed::Credentials | limits::Resumed::Budget => {}
            limits::Resumed::Lift => self.emit(limits::lifted(running)),
        }
    }

    /// [`Input::ProcessStopped`](super::Input::ProcessStopped): what every end of a process
    /// means ([`BotCore::process_gone`]), its control requests ended, then what the process left
    /// ([`Lifecycle::stopped`]).
    pub(super) fn process_stopped(&mut self, now: Instant, why: StopReason, facts: &dyn Facts) {
        let process = self.process.take();
        self.process_gone(now);
        let Some(mut process) = process else {
            return;
        };
        self.emit(std::mem::take(&mut process.controls).at_exit());
        let recorded = facts.recorded();
        let effects = Lifecycle::stopped(
            &process.run,
            &mut self.turns,
            why,
            recorded.as_deref(),
            |id| facts.transcript_exists(id),
            |i| facts.taken_turn(i),
            self.settings.exit.redo_limit,
        );
        self.emit(effects);
    }
}
