//! The process lifecycle, with no I/O: what the bot keeps from one process to the next
//! ([`Lifecycle`]), and what happens to one process ([`Run`]) and its bot. Each method takes one input (a
//! process's exit, a conversation reported lost, a stop, a crash, a client's Restart, a turn's
//! result) and returns the [`Effect`]s that say what it means for the turn, the session record,
//! the bot's `State` and its next start (design rules 3, 4, 8, 9 and 11).

use std::time::{Duration, Instant};

use serde_json::json;

use super::crash::{AfterCrash, Crashes};
use super::effect::{CommitBuilder, Effect, Publish, Write};
use super::records::{failed, forget, fresh_restart_text, item, said_error};
pub use super::run::Run;
use super::start::{StartDecision, decide_start, with_cut};
use super::stop::StopReason;
use super::turns::{Ended, Inflight, Turns};
use crate::runtime::{Cut, SessionStart, TakenTurn};
use crate::supervisor::core::State;
use crate::supervisor::core::decide::TurnOutcome;

/// The turn in flight of a process botvisor stopped: it ends `interrupted` (reason `stopped`) once
/// it began, or its message waits again unless its conversation holds it (design rule 8).
/// What the chat says of a turn ended because its agent's process survived SIGKILL.
pub const STOP_GAVE_UP: &str = "botvisord stopped the agent, but its process survived SIGKILL: \
     the turn is ended here. The bot waits in state failed until that process exits or a \
     Restart.";

pub(super) fn settle_stopped(
    turns: &mut Turns,
    why: StopReason,
    recorded: Option<&str>,
    look: impl FnOnce(&Inflight) -> Option<TakenTurn>,
    redo_limit: u32,
) -> Vec<Effect> {
    // A client following the turn learns from the turn's own end that the bot is gone, even
    // when botvisord leaves right after (reason `deleted`).
    let (reason, text) = if why == StopReason::Delete {
        ("deleted", "The bot was deleted before the turn finished.")
    } else {
        ("stopped", "The agent was stopped before the turn finished.")
    };
    if why.carries_the_turn() {
        // Nobody asked for this turn's end (issue 45): what its conversation holds decides, as
        // after a crash: its answer read back, or its message asked again without the attempt.
        return turns
            .settle_unasked(
                TurnOutcome::Interrupted,
                reason,
                text.into(),
                recorded,
                redo_limit,
                look,
            )
            .1;
    }
    turns
        .settle(
            TurnOutcome::Interrupted,
            reason,
            text.into(),
            recorded,
            |i| look(i).is_some(),
        )
        .1
}

/// A resume without an unanswered attempt was refused (`why`: a sentence saying who refused and
/// in which words, or empty): the message it was to ask again ends `taken_not_answered`, saying
/// so (reason `cut_refused`); it is in the conversation once already (issue 25).
pub(super) fn cut_refused(turns: &mut Turns, why: &str) -> Vec<Effect> {
    let turn = match turns
        .inflight
        .take_if(|i| !i.replayed && i.turn.cut.is_some())
    {
        Some(inf) => Some(inf.turn),
        None => turns
            .queue
            .front()
            .is_some_and(|t| t.cut.is_some())
            .then(|| turns.queue.pop_front())
            .flatten(),
    };
    let mut effects = Vec::new();
    if let Some(turn) = turn {
        let mut text = "The agent stopped after this message reached the conversation and before \
                        it was answered, and resuming without the unanswered attempt was refused; \
                        it is not asked again."
            .to_owned();
        if !why.is_empty() {
            text.push(' ');
            text.push_str(why);
        }
        effects.push(Turns::finish(
            &turn.id,
            TurnOutcome::TakenNotAnswered,
            "cut_refused",
            Some(("system", json!({"text": text, "reason": "cut_refused"}))),
            None,
        ));
    }
    effects.push(Effect::Queued(turns.waiting()));
    effects
}

/// The crash-loop bounds of the configuration (design rule 11).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CrashLimits {
    /// `crash_loop_window_s`.
    pub window: Duration,
    /// `crash_loop_limit`: this many crashes within the window is a crash loop.
    pub limit: u32,
}

/// What a client's Restart continues on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestartMode {
    /// The recorded conversation, when it exists (design rule 2).
    Resume,
    /// A new conversation: the recorded one is forgotten for good first (design rule 5).
    Fresh,
    /// A copy of the recorded conversation, which is left as it is (Claude Code's
    /// `--fork-session`): what continues a conversation another process holds (issue 25).
    Fork,
}

/// What follows a crash's clean-up ([`Lifecycle::crashed`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Crashed {
    /// What is said and shown.
    pub effects: Vec<Effect>,
    /// The agent starts again after this backoff (design rule 11); `None`: it does not.
    pub backoff: Option<std::time::Duration>,
}

/// What the bot keeps from one process to the next.
#[derive(Debug, Clone, Default)]
pub struct Lifecycle {
    /// Recent crashes (design rule 11).
    pub crashes: Crashes,
    /// The next start resumes this id (a new conversation was refused as in use).
    pub force_resume: Option<String>,
    /// An id in use was resumed once since the last Restart.
    pub in_use_retried: bool,
    /// A crashed agent is to be started again when its backoff ends, though nothing waits (a
    /// client holds the bot).
    pub restart_pending: bool,
    /// A client that took a lease asked for the agent before any message (issue 31, a warm
    /// start: [`super::commands::Cmd::Leases`]): the pump starts it though nothing waits. Ends
    /// with the start, a client's Stop, or the last lease.
    pub warm_start: bool,
    /// A fresh Restart's conversation to leave, while its forget is not on record (design rule
    /// 5): no start resumes it ([`Lifecycle::start_decision`]).
    pub forget_pending: Option<String>,
    /// A Restart with `fork`: the next resume continues in a copy of the conversation.
    pub fork_next: bool,
    /// A changed environment waits for the turn in flight to end: the agent then restarts on
    /// its conversation to take it (issue 46). Ends with any start.
    pub restart_when_idle: bool,
}

impl Lifecycle {
    /// A turn's result came to the process `run` (the turn's own effects are
    /// [`Turns::result`]'s). A success means the agent works: the crash backoff starts from its
    /// first step again. An error the runtime names a failure restarting cannot fix (`fatal`,
    /// `"<kind> error: <text>"`) makes this process's exit fail the bot. An error before any turn
    /// began is a refusal of the conversation ([`Run::refused`], design rule 4's fallback). With no message in
    /// flight and the process not being stopped, the bot is `idle`.
    pub fn turn_result(
        &mut self,
        run: &mut Run,
        turns: &Turns,
        ended: &Ended,
        fatal: Option<String>,
    ) -> Vec<Effect> {
        let succeeded = ended.succeeded;
        if ended.turn_id.is_some() && ended.error.is_some() && !run.turn_began {
            run.refused = true;
        }
        if fatal.is_some() {
            run.fatal = fatal;
        }
        if succeeded {
            self.crashes.clear();
        }
        if turns.inflight.is_none() && !run.stopping {
            vec![Effect::State(State::Idle)]
        } else {
            Vec::new()
        }
    }

    /// A process starts: which conversation (design rule 2). An id the CLI refused as in use
    /// (it exists: the CLI holds it) is resumed, once, as [`Lifecycle::exited`] said; otherwise
    /// [`decide_start`] resumes the recorded conversation only if its transcript exists. `cut`
    /// is the first waiting message's, when it is asked again: the resume drops its unanswered
    /// attempt ([`with_cut`], issue 25).
    pub fn start_decision(
        &mut self,
        recorded: Option<&str>,
        can_resume: bool,
        transcript_exists: impl FnOnce(&str) -> bool,
        fresh: impl Fn() -> SessionStart,
        cut: Option<&Cut>,
    ) -> StartDecision {
        if let Some(old) = self.forget_pending.clone()
            && recorded == Some(old.as_str())
        {
            return StartDecision {
                start: fresh(),
                forget: Some((old, crate::runtime::ForgetReason::FreshRestart)),
                cut: None,
                fork: false,
            };
        }
        let decision = match self.force_resume.take() {
            Some(id) => StartDecision {
                start: SessionStart::Resume(id),
                forget: None,
                cut: None,
                fork: false,
            },
            None => decide_start(recorded, can_resume, transcript_exists, &fresh),
        };
        let mut decision = with_cut(decision, cut, fresh);
        if std::mem::take(&mut self.fork_next) {
            decision.fork = matches!(decision.start, SessionStart::Resume(_));
        }
        decision
    }

    /// The forget a start asked for ([`Lifecycle::start_decision`]) was committed, or not: once
    /// it is, a fresh Restart's conversation is left for good.
    pub fn start_forgot(&mut self, committed: bool) {
        if committed {
            self.forget_pending = None;
        }
    }

    /// A process started: no crash restart and no warm start is pending any more.
    pub fn started(&mut self) {
        self.restart_pending = false;
        self.warm_start = false;
    }

    /// Design rule 5 (a fresh restart forgets for good) and rule 7's "never a second process".
    ///
    /// A client's Restart, once its old process, if any, was stopped: `released` says its root
    /// is proven gone. A root that survived SIGKILL keeps the bot as it is: never a second process
    /// beside it (design rule 7), and `None` is returned. Otherwise, with [`RestartMode::Fresh`],
    /// the recorded conversation is forgotten first (reason `fresh_restart`, design rule 5): the
    /// effects returned are that commit, and [`Lifecycle::restart_recorded`] says what follows
    /// it; with [`RestartMode::Fork`] the next resume continues in a copy (a `system` item,
    /// reason `fork`; the copy is recorded once a turn begins in it, rule 3).
    pub fn restart(
        &mut self,
        released: bool,
        mode: RestartMode,
        recorded: Option<&str>,
    ) -> Option<Vec<Effect>> {
        if !released {
            return None;
        }
        let mut effects = Vec::new();
        match (mode, recorded) {
            (RestartMode::Fresh, Some(old)) => {
                effects.push(forget(old, "fresh_restart", fresh_restart_text(old)));
                self.forget_pending = Some(old.to_owned());
            }
            (RestartMode::Fork, Some(old)) => {
                self.fork_next = true;
                effects.push(item(
                    "system",
                    json!({
                        "text": format!(
                            "Restarted on a copy of the conversation {old}: the agent continues \
                             in a new conversation forked from it; {old} is left as it is."
                        ),
                        "reason": "fork",
                        "session_id": old,
                    }),
                ));
            }
            _ => {}
        }
        Some(effects)
    }

    /// The commit of [`Lifecycle::restart`] ended. `committed`: the crash count, a forced resume
    /// and the id-in-use retry are cleared, so is `LastError` (the client acted on it), the bot
    /// is `stopped`, unparked, and starts now. Not
    /// committed, the old conversation is still on record: the bot is parked, not started, and
    /// the conversation stays to be left ([`Lifecycle::forget_pending`]): the next start, when a
    /// client sends or restarts, begins a new conversation and forgets the old one then (rule 5).
    pub fn restart_recorded(&mut self, committed: bool) -> Vec<Effect> {
        if !committed {
            return vec![Effect::Park(true)];
        }
        self.forget_pending = None;
        self.crashes.clear();
        self.force_resume = None;
        self.in_use_retried = false;
        // The client acted on what LastError said: it no longer stands.
        let mut c = CommitBuilder::default();
        c.write(Write::LastError(String::new()))
            .then(Publish::LastError(String::new()));
        let mut effects: Vec<Effect> = c.build().into_iter().collect();
        effects.extend([
            Effect::Park(false),
            Effect::State(State::Stopped),
            Effect::Start,
        ]);
        effects
    }

    /// A stop gave up: the root outlived SIGKILL and the kill wait (design rule 9). Nothing is
    /// released, no other process may start beside it (rule 7): the bot is `failed` until the
    /// root exits ([`Lifecycle::exited`], a late exit) or a client restarts it. The turn in
    /// flight ends now, `interrupted` (reason `stop_gave_up`, saying why), as for any stop: a
    /// message not yet replayed waits again unless its conversation holds it (rule 8); a turn
    /// never stays running behind a process botvisord could not end.
    pub fn stop_gave_up(
        turns: &mut Turns,
        recorded: Option<&str>,
        holds: impl FnOnce(&Inflight) -> bool,
    ) -> Vec<Effect> {
        let (_, mut effects) = turns.settle(
            TurnOutcome::Interrupted,
            "stop_gave_up",
            STOP_GAVE_UP.into(),
            recorded,
            holds,
        );
        effects.extend(failed(turns.waiting()));
        effects
    }

    /// A client's Stop ended: the bot is `stopped`, unless it is `failed` (a root that survived
    /// SIGKILL, a crash loop, a fatal error): that waits for a Restart.
    pub fn stop_ended(state: State) -> Vec<Effect> {
        if state == State::Failed {
            Vec::new()
        } else {
            vec![Effect::State(State::Stopped)]
        }
    }

    /// The running process refused the cut it was launched with and holds the whole conversation
    /// (Codex: `thread/revert` refused; `why` says who refused, in which words): the message that
    /// was to be asked again ends `taken_not_answered` (reason `cut_refused`), as a refusal by
    /// exit does (`ExitPlan::CutRefused`), no crash is counted, and the process takes the next
    /// messages.
    pub fn cut_refused(run: &mut Run, turns: &mut Turns, why: &str) -> Vec<Effect> {
        run.cut = None;
        cut_refused(turns, why)
    }

    /// Design rule 4 (a lost conversation is not a turn).
    ///
    /// The CLI could not find the conversation `session_id` it was resumed on (design rule 4): the
    /// process takes no message any more, a message not yet replayed waits again first, the
    /// record is forgotten (reason `conversation_not_found`) so the next start begins a new
    /// conversation. `None` when it was reported already. `stop` says the process is to be
    /// stopped now (unless botvisor is stopping it already).
    pub fn conversation_lost(
        run: &mut Run,
        turns: &mut Turns,
        session_id: &str,
    ) -> Option<(Vec<Effect>, bool)> {
        if run.lost {
            return None;
        }
        run.lost = true;
        let mut effects = vec![forget(
            session_id,
            "conversation_not_found",
            format!(
                "The CLI could not find the conversation {session_id}; a new conversation began."
            ),
        )];
        effects.extend(turns.conversation_lost());
        Some((effects, !run.stopping))
    }

    /// A process botvisor stopped (for `why`) exited: the
    /// reported session is adopted, the turn in flight ends `interrupted` (reason `stopped`) or
    /// its message waits again (design rule 8). The bot is `stopped` after the clean-up. The stop
    /// of a process that lost its conversation (`replaced`) unparks the bot: its waiting message
    /// goes to a new conversation at once.
    pub fn stopped(
        run: &Run,
        turns: &mut Turns,
        why: StopReason,
        recorded: Option<&str>,
        transcript_exists: impl Fn(&str) -> bool,
        look: impl FnOnce(&Inflight) -> Option<TakenTurn>,
        redo_limit: u32,
    ) -> Vec<Effect> {
        let mut effects = Vec::new();
        let mut recorded = recorded.map(str::to_owned);
        if let Some((id, effect)) = run.adopt_reported(recorded.as_deref(), &transcript_exists) {
            effects.push(effect);
            recorded = Some(id);
        }
        effects.extend(settle_stopped(
            turns,
            why,
            recorded.as_deref(),
            look,
            redo_limit,
        ));
        if why == StopReason::Replaced && run.lost {
            effects.push(Effect::Park(false));
        }
        effects
    }

    /// After a crash's clean-up (design rule 11): within the crash-loop limit the agent is
    /// started again after a backoff when it is needed (messages wait, or `holders` clients hold
    /// the bot), with a `system` item (reason `restart_pending`, `in_s`); at the limit the bot is
    /// `failed` with an `error` item (reason `crash_loop`) that quotes the crash's `text`.
    pub fn crashed(
        &mut self,
        now: Instant,
        limits: CrashLimits,
        turns: &Turns,
        holders: usize,
        text: &str,
    ) -> Crashed {
        let needed = !turns.queue.is_empty() || holders > 0;
        let waiting = turns.waiting();
        match self
            .crashes
            .crashed(now, limits.window, limits.limit, needed)
        {
            AfterCrash::CrashLoop { count } => {
                let text = format!(
                    "The agent crashed {count} times within {} s; botvisor stopped restarting \
                     it. Call Restart to try again. Last: {text}",
                    limits.window.as_secs()
                );
                let mut effects = vec![said_error(&text, Some("crash_loop"))];
                effects.extend(failed(waiting));
                Crashed {
                    effects,
                    backoff: None,
                }
            }
            AfterCrash::Restart { backoff, count } => {
                self.restart_pending = true;
                let note = item(
                    "system",
                    json!({
                        "text": format!(
                            "botvisor restarts the agent in {:.2} s (crash {count} of at most {} \
                             within {} s).",
                            backoff.as_secs_f64(),
                            limits.limit,
                            limits.window.as_secs()
                        ),
                        "reason": "restart_pending",
                        "in_s": backoff.as_secs_f64(),
                    }),
                );
                Crashed {
                    effects: vec![note],
                    backoff: Some(backoff),
                }
            }
            AfterCrash::Wait => Crashed::default(),
        }
    }
}

#[cfg(test)]
mod tests;
