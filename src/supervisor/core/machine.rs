//! The bot's driven machine (issue 27, after quinn-proto's `Connection`): the shell hands the
//! core each [`Input`] with [`BotCore::handle`], then carries out what [`BotCore::poll_effect`]
//! gives, in order, and sleeps until [`BotCore::poll_timeout`]. The core does no I/O; what only
//! the shell can read (files, the runtime's reading of words, the bot's record, the wall clock)
//! it asks through [`Facts`].

use std::time::Instant;

use super::bot_core::BotCore;
use super::effect::Effect;
use super::state::State;
use super::turns::Inflight;
use crate::runtime::{LimitReport, LimitState, RuntimeEvent, TakenTurn};

/// Something that happened to the bot.
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    /// The running CLI said something (its protocol's reading of a stdout line).
    Runtime(RuntimeEvent),
    /// It is `now`: the deadlines of [`BotCore::poll_timeout`] that came are handled, in a fixed
    /// order ([`super::bot_core::Due`]).
    Timeout,
    /// A client's command ([`super::commands`]).
    Command(super::commands::Cmd),
    /// The running process exited unasked.
    Exited {
        /// How.
        status: crate::process::ExitInfo,
        /// The tail of its stderr.
        stderr: String,
        /// How long it lived.
        lived: std::time::Duration,
    },
    /// The shell begins a stop of the running process: it takes no message from now on, and
    /// the bot shows `stopping`.
    Stopping,
    /// A stop's sequence and its clean-up ended: the bot shows `stopped` until what follows
    /// ([`Input::Stopped`] for a stop the core asked for) says otherwise.
    StopEnded,
    /// What an [`super::effect::Effect::Look`] found ([`super::look`]).
    Looked(super::look::Looked),
    /// A commit the core asked for failed: what stands on record, as the shell's view shows
    /// it once every effect before was carried out (the view only ever shows what is durable,
    /// design rule 1), replaces what the core kept ([`super::state::Standing`]).
    Recorded {
        /// The state shown.
        state: State,
        /// The record.
        record: super::state::OnRecord,
    },
    /// The park the core asked for ([`super::effect::Effect::Park`]) was carried out: a client's
    /// Stop parked the bot, or a Send or Restart unparked it. What a held bot shows depends on
    /// the park: `limited` and `login_required` show as `idle` with an agent and `stopped`
    /// without.
    ParkChanged {
        /// Whether an agent process runs.
        running: bool,
    },
    /// The stop the core asked for ([`super::effect::Effect::Stop`]) ended, the process gone or
    /// given up on.
    Stopped {
        /// Why it was asked.
        why: super::stop::StopReason,
        /// Whether the stop's verdict released the conversation (no process of the bot is
        /// left); true when no process ran.
        released: bool,
    },
    /// The commit before an [`super::effect::Effect::ReportCommit`] was made durable (`ok`), or
    /// failed.
    Committed {
        /// What waited for it.
        awaited: super::effect::Awaited,
        /// Whether it is durable.
        ok: bool,
    },
    /// The clean-up the core asked for ([`super::effect::Effect::CleanUp`]) is done.
    CleanedUp,
    /// The running process is ready for the next message and writes to conversation `session`
    /// (the pump said to write, [`BotCore::pump_plan`]); `now` is the wall clock. The next
    /// waiting message is put on record with where it goes, then written
    /// ([`super::effect::Request::Message`]).
    Deliver {
        /// The conversation the process writes to.
        session: String,
        /// The wall clock now.
        now: std::time::SystemTime,
    },
    /// The agent may be launched: its binary, environment and sandbox were checked and
    /// botvisor's copy of the conversation put back. The core decides which conversation it
    /// starts or resumes (design rule 2, `BotCore::start_decision`); a conversation it leaves is
    /// forgotten on record first ([`super::effect::Awaited::Forget`]); then
    /// [`super::effect::Effect::Spawn`].
    LaunchChecked {
        /// Whether the runtime can resume a conversation.
        can_resume: bool,
        /// How the runtime starts a new conversation (`Runtime::fresh_start`).
        fresh: crate::runtime::SessionStart,
        /// The runtime's name, for the words of a forget.
        runtime: &'static str,
    },
    /// The agent was launched as `decision` said (its root is `identity`, when it could be read):
    /// the process as the core knows it begins, on record by identity (design rule 9), with its
    /// start watchdog, and the bot is `idle`.
    Launched {
        /// Which conversation it starts or resumes, and how.
        decision: super::start::StartDecision,
        /// The root process, by identity.
        identity: Option<crate::process::identity::ProcessIdentity>,
        /// The conversation and what it had cost when its last process ended, in nano-dollars:
        /// the process counts on from it, so a turn's cost is only its own (issue 46; `None`: a
        /// fork or a conversation the CLI names).
        conversation_cost: Option<(String, u64)>,
    },
    /// The agent could not be launched (`text` says why in words; `reason` names it, as
    /// `bubblewrap_missing`): said, and the bot pauses until a client sends or restarts.
    LaunchFailed {
        /// Why, in words.
        text: String,
        /// Its name, when it has one.
        reason: Option<&'static str>,
    },
    /// The agent the previous botvisord handed over (`crashed: false`), or one a killed
    /// botvisord left running (`crashed: true`, issue 47), runs on as `run` in conversation
    /// `session`; `left` is what the store holds of the bot's turns
    /// ([`BotCore::reattached`]).
    TakenOver {
        /// The process as the previous botvisord knew it.
        run: super::run::Run,
        /// The bot's turns on record.
        left: super::left_turns::Left,
        /// The conversation it writes to.
        session: String,
        /// The previous botvisord was killed, not stopped.
        crashed: bool,
    },
    /// At the daemon's start, no agent taken over: the turns the previous daemon left are
    /// settled or delivered once ([`super::left_turns::recover`], design rule 8).
    Recover(super::left_turns::Left),
    /// The bot's supervision begins (after [`Input::TakenOver`] or [`Input::Recover`]): the
    /// failed attempt on record (`bots.attempt_cut`) and what the conversation had cost when the
    /// CLI last told it are the core's again, and a usage limit on record holds again until its
    /// reset ([`super::limits::resumed`]); `running`: an agent runs.
    Began {
        /// The attempt a resume must cut (design rule 8).
        attempt_cut: Option<crate::runtime::Cut>,
        /// The conversation and its cost in nano-dollars (not counted again, [`super::spend`]).
        conversation_cost: Option<(String, u64)>,
        /// Whether an agent runs.
        running: bool,
    },
    /// Another process holds the conversation (design rule 7, [`super::held`]): found by a
    /// start (no process starts), or, before a message goes, by the idle agent's shell (the
    /// agent is stopped first). The bot waits for it.
    HolderFound(super::held::Held),
    /// A plan's limit or the login no longer holds: the bot goes on, unless its cost is at the
    /// budget in force ([`super::budget::hold_over`]); `running`: an agent runs.
    HoldLifted {
        /// Whether an agent runs.
        running: bool,
    },
    /// A stop gave up on a process that would not exit ([`super::lifecycle::Lifecycle::stop_gave_up`]).
    StopGaveUp,
    /// The process a stop ended (asked for `why`) is gone: the core forgets it, its open
    /// control requests end, and its message in flight is settled
    /// ([`super::lifecycle::Lifecycle::stopped`]).
    ProcessStopped {
        /// Why the stop was asked.
        why: super::stop::StopReason,
    },
    /// The message the core asked to write ([`super::effect::Request::Message`]) was written to
    /// the agent's stdin (`ok`), or could not be (the process went, its stdin closed).
    Written {
        /// Whether it was written.
        ok: bool,
    },
    /// A control request the core asked for ([`super::effect::Request::Control`]) was written
    /// to the agent as `request_id`, or not (`None`).
    ControlWritten {
        /// The request.
        request: crate::runtime::ControlRequest,
        /// The id the protocol gave it.
        request_id: Option<String>,
    },
}

/// The watchdogs' bounds in force, in seconds (0: never; design rule 15).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bounds {
    /// `start_timeout_s`.
    pub start_s: f64,
    /// `interrupt_grace_s`.
    pub interrupt_grace_s: f64,
    /// `control_timeout_s`.
    pub control_s: f64,
}

impl Bounds {
    /// A watchdog's deadline: `seconds` (one of the bounds) after `now`; `None` for 0, never.
    pub fn deadline(now: Instant, seconds: f64) -> Option<Instant> {
        (seconds > 0.0).then(|| now + std::time::Duration::from_secs_f64(seconds))
    }
}

/// The runtime's reading of what its CLI says, fixed for the bot's runtime and given at
/// [`BotCore::new`] (the shell's is `Runtime`'s own: `fatal_reason`, `session_in_use`,
/// `held_elsewhere`, `scopes` with `reach`); reading changes nothing.
pub trait Words: std::fmt::Debug + Send + Sync {
    /// An error's words read as a failure restarting cannot fix, by kind (`authentication`,
    /// `usage limit`, …), or `None`.
    fn fatal_reason(&self, text: &str) -> Option<&'static str>;
    /// A process's stderr read as a new conversation refused because its id is in use: the id.
    fn session_in_use(&self, stderr: &str) -> Option<String>;
    /// Whether the CLI's refusal to open a conversation says another process holds it.
    fn held_elsewhere(&self, error: &str) -> bool;
    /// The scopes an allow of a permission request may have, narrowest first, each with what
    /// it reaches in words (`once`, `session`, `always`, `program`).
    fn scopes(&self, request: &serde_json::Value) -> Vec<(String, String)>;
}

/// What the core may ask the world while it handles an input; nothing asked changes anything.
pub trait Facts {
    /// The bot's recorded conversation.
    fn recorded(&self) -> Option<String>;
    /// The conversation the running process holds (its protocol's), `None` when it has none
    /// yet.
    fn conversation(&self) -> Option<String>;
    /// Whether the runtime's file of the conversation `session_id` exists now (design rule 2).
    fn transcript_exists(&self, session_id: &str) -> bool;
    /// What the conversation the message in flight went to holds of it (issue 25).
    fn taken_turn(&self, inflight: &Inflight) -> Option<TakenTurn>;
    /// The wall clock, in Unix seconds (a plan's reset is told so).
    fn unix_now(&self) -> u64;
    /// Clients holding the bot (leases), and permission requests open.
    fn watchers(&self) -> (usize, usize);
    /// How a person logs the bot's CLI in again, one sentence (`Runtime::login_hint`).
    fn login_hint(&self) -> String;
    /// Whether the conversation the message in flight went to holds it (the runtime's
    /// transcript, written since the message was; design rule 8).
    fn conversation_holds(&self, inflight: &Inflight) -> bool;
    /// What the conversation `session` holds of the message of `turn`, written since `since`
    /// (issue 25): what a turn the previous daemon left became.
    fn left_taken(
        &self,
        turn: &super::turns::QueuedTurn,
        session: &str,
        since: std::time::SystemTime,
    ) -> Option<TakenTurn>;
}

impl BotCore {
    /// Handles `input` at `now`: the state changes, and the effects wait for
    /// [`BotCore::poll_effect`].
    pub fn handle(&mut self, now: Instant, input: Input, facts: &dyn Facts) {
        match input {
            Input::Runtime(event) => {
                // A turn's end is a use of the bot (issue 31, `super::evict`).
                if matches!(event, RuntimeEvent::TurnResult { .. }) {
                    self.used(now);
                }
                self.runtime_event(now, event, facts)
            }
            Input::Timeout => {
                for due in self.handle_timeout(now) {
                    self.due(now, due, facts);
                }
            }
            Input::Command(cmd) => {
                if cmd.is_use() {
                    self.used(now);
                }
                self.command(now, cmd, facts)
            }
            Input::Exited {
                status,
                stderr,
                lived,
            } => self.exited(now, status, &stderr, lived, facts),
            Input::Stopping => {
                if let Some(p) = self.process.as_mut() {
                    p.run.stopping = true;
                }
                self.emit([Effect::State(State::Stopping)]);
            }
            Input::StopEnded => self.emit([Effect::State(State::Stopped)]),
            Input::Looked(answer) => self.looked(now, answer, facts),
            Input::Recorded { state, record } => {
                tracing::warn!(
                    state = state.as_str(),
                    "a commit failed; the bot stands as recorded"
                );
                self.standing.state = state;
                self.standing.record = record;
            }
            Input::ParkChanged { running } => {
                let shown = match self.standing.state {
                    State::Limited | State::LoginRequired if running => Some(State::Idle),
                    State::Limited | State::LoginRequired => Some(State::Stopped),
                    s @ (State::Idle | State::Stopped) => Some(s),
                    _ => None,
                };
                self.emit(shown.map(Effect::State));
            }
            Input::Stopped { why, released } => self.stopped(why, released, facts),
            Input::Committed { awaited, ok } => self.committed(awaited, ok),
            Input::CleanedUp => self.cleaned_up(now, facts),
            Input::Deliver { session, now } => self.deliver(&session, now),
            Input::LaunchChecked {
                can_resume,
                fresh,
                runtime,
            } => self.launch_checked(can_resume, fresh, runtime, facts),
            Input::Launched {
                decision,
                identity,
                conversation_cost,
            } => {
                self.used(now);
                if conversation_cost.is_some() {
                    self.turns.meter.conversation = conversation_cost;
                }
                self.launched(now, decision, identity)
            }
            Input::LaunchFailed { text, reason } => {
                self.emit(super::records::start_refused(&text, reason))
            }
            Input::Written { ok } => {
                let effects = self.turns.wrote(ok);
                self.emit(effects);
            }
            Input::ControlWritten {
                request,
                request_id,
            } => self.control_written(now, request, request_id),
            Input::TakenOver {
                run,
                left,
                session,
                crashed,
            } => {
                let effects = self.reattached(run, left, &session);
                if crashed && self.turns.inflight.is_some() {
                    self.crash_look_told = false;
                    self.crash_look = Some(now + super::reattach::CRASH_LOOK);
                }
                self.emit(effects);
            }
            Input::Recover(left) => {
                let recorded = facts.recorded();
                let redo_limit = self.settings.exit.redo_limit;
                let effects = super::left_turns::recover(
                    &mut self.turns,
                    left,
                    recorded.as_deref(),
                    redo_limit,
                    |turn, session, since| facts.left_taken(turn, session, since),
                );
                self.emit(effects);
            }
            Input::Began {
                attempt_cut,
                conversation_cost,
                running,
            } => self.began(now, attempt_cut, conversation_cost, running, facts),
            Input::HolderFound(held) => {
                // An idle agent makes way first; the wait is said once it is gone
                // (`BotCore::stopped`).
                if self.process.is_some() {
                    self.emit([Effect::Stop(super::stop::StopReason::HeldElsewhere)]);
                } else {
                    self.emit(super::held::held(&held));
                }
                self.held = Some(held);
            }
            Input::HoldLifted { running } => {
                let (cost, budget) = self.spend();
                self.emit(super::budget::hold_over(running, cost, budget));
            }
            Input::StopGaveUp => {
                let recorded = facts.recorded();
                let effects = super::lifecycle::Lifecycle::stop_gave_up(
                    &mut self.turns,
                    recorded.as_deref(),
                    |i| facts.conversation_holds(i),
                );
                self.emit(effects);
            }
            Input::ProcessStopped { why } => self.process_stopped(now, why, facts),
        }
        // A turn's watchdogs end with the turn, whichever input ended it.
        self.watch
            .in_flight(self.turns.inflight.as_ref().map(|i| i.turn.id.as_str()));
    }

    /// The next effect to carry out, in order; `None` when all were given.
    pub fn poll_effect(&mut self) -> Option<Effect> {
        self.effects.pop_front()
    }

    /// Queues effects for [`BotCore::poll_effect`], keeping [`BotCore::standing`] with them:
    /// the one place where the bot's state, its park and its record's hold, spend and budget
    /// change. A state asked for is shown as [`Standing::shown`](super::state::Standing) says,
    /// and only when it changes; a change into or out of `failed` is recorded first (design
    /// rule 1), so it comes as a commit that publishes it. [`Effect::Pause`] is the core's own
    /// (nothing of it reaches the shell); a commit's publications are noted as it is asked for.
    pub(super) fn emit(&mut self, effects: impl IntoIterator<Item = Effect>) {
        for effect in effects {
            match effect {
                Effect::State(asked) => {
                    let state = self.standing.shown(asked);
                    let before = self.standing.state;
                    if state == before {
                        continue;
                    }
                    tracing::debug!(state = state.as_str(), "state");
                    if before == State::Failed || state == State::Failed {
                        let failed = state == State::Failed;
                        self.emit([Effect::Commit {
                            writes: vec![super::effect::Write::Failed(failed)],
                            publish: vec![super::effect::Publish::State(state)],
                        }]);
                    } else {
                        self.standing.state = state;
                        self.effects.push_back(Effect::State(state));
                    }
                }
                Effect::Pause => self.standing.parked = true,
                Effect::Park(parked) => {
                    self.standing.parked = parked;
                    if self.standing.record.parked != parked {
                        self.emit([Effect::Commit {
                            writes: vec![super::effect::Write::Parked(parked)],
                            publish: vec![super::effect::Publish::Parked(parked)],
                        }]);
                    }
                    self.effects.push_back(Effect::Park(parked));
                }
                Effect::Commit { writes, publish } => {
                    for p in &publish {
                        self.standing.note(p);
                    }
                    self.effects.push_back(Effect::Commit { writes, publish });
                }
                other => self.effects.push_back(other),
            }
        }
    }
}

/// A plan's report that the limit is reached, with nothing more known.
pub(super) fn reached_unknown() -> LimitReport {
    LimitReport {
        state: LimitState::Reached,
        kind: String::new(),
        resets_at: 0,
        utilization: None,
    }
}

#[cfg(test)]
pub(super) mod tests;
