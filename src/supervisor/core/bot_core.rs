//! One bot's core state in one place, with the one next deadline of every timer it has.
//!
//! `BotCore` holds what the bot keeps between inputs: the running process as the core knows it
//! ([`Process`]), the queue and the message in flight ([`Turns`]), what it keeps from one
//! process to the next ([`Lifecycle`]), and its timers: a crash's backoff, the idle deadline,
//! the looks for descendants after a tool, the pace of streamed text, the watchdogs, the rate of
//! retry notes, a usage limit's end and the looks at a conversation's holder. The shell sleeps
//! until [`BotCore::poll_timeout`], so a bot has one timer instead of one per concern; what came
//! is handled as [`super::Input::Timeout`] ([`super::machine`]), in the fixed order of
//! [`BotCore::handle_timeout`]. Time is always an argument.

use std::time::{Duration, Instant};

use super::control::Controls;
use super::lifecycle::{Lifecycle, Run};
use super::retry::RetryNotes;
use super::snapshots::Snapshots;
use super::stream::DeltaPacer;
use super::turns::Turns;
use super::watchdogs::{Expired, Watchdogs};
use crate::runtime::LimitReport;

/// A timer that came, as [`BotCore::handle_timeout`] reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Due {
    /// Streamed text waits to be signalled ([`DeltaPacer`]).
    FlushText,
    /// A moment to look for descendants after a tool ([`Snapshots`]).
    LookForDescendants,
    /// A watchdog caught a CLI that stopped answering (design rule 15).
    Watchdog(Expired),
    /// A crash's backoff is over: the agent may start again (design rule 11).
    RestartBackoffOver,
    /// The idle deadline came (design rules 12 and 13).
    Idle,
    /// The usage limit the bot waited for is over: the waiting messages may go (issue 24).
    LimitLifted,
    /// A moment to look whether the process that holds the conversation is still there
    /// ([`super::held`]).
    LookAtHolder,
    /// An agent taken over after botvisord was killed stayed silent with a turn in flight: its
    /// conversation's file says whether the turn ended ([`super::reattach`]).
    LookAfterCrash,
}

/// The running process, as the core knows it: what it showed ([`Run`]) and the control
/// requests it was sent and has not answered ([`Controls`]). It ends with the process.
#[derive(Debug)]
pub struct Process {
    /// What it showed so far: how it was launched, a turn begun, a lost conversation, a stop.
    pub run: Run,
    /// Control requests sent and not yet answered.
    pub controls: Controls,
}

/// One bot's core state and timers.
#[derive(Debug)]
pub struct BotCore {
    /// What the rules read of the configuration and the runtime.
    pub(super) settings: Settings,
    /// The runtime's reading of what its CLI says.
    pub(super) words: Box<dyn super::Words>,
    /// Where the bot stands: its state, its park, and its record's hold, spend and budget
    /// (kept by [`BotCore::emit`] from the effects that change them).
    pub(super) standing: super::state::Standing,
    /// The running process, if one runs (the shell holds its handle, pipes and protocol).
    pub(super) process: Option<Process>,
    /// A launch decided and waiting for its forget's commit ([`super::effect::Awaited::Forget`]).
    pub(super) launching: Option<super::start::StartDecision>,
    /// The queue and the message in flight.
    pub(super) turns: Turns,
    /// What the bot keeps from one process to the next: crashes, a forced resume, a pending
    /// restart.
    pub(super) life: Lifecycle,
    /// When a crashed agent may start again (design rule 11: set after a crash's clean-up,
    /// cleared by a client's Stop or Restart); `None`: no backoff.
    pub(super) restart_at: Option<Instant>,
    /// When the bot stops for idleness, if it stays idle.
    pub(super) idle_at: Option<Instant>,
    /// When the bot was last used: its agent's launch, a client's command, a turn's end
    /// ([`super::evict`]: the least recently used idle bot is stopped first under memory
    /// pressure).
    pub(super) last_used: Option<Instant>,
    /// One-shot moments to look for descendants again after a tool started (a foreground tool
    /// prints nothing while it runs).
    pub(super) snapshots: Snapshots<Instant>,
    /// Streamed text not yet signalled, and when it may be.
    pub(super) deltas: DeltaPacer<Instant>,
    /// What the current process must do by when (design rule 15).
    pub(super) watch: Watchdogs<Instant>,
    /// When the CLI's model-request retries were last noted in the chat.
    pub(super) retry_notes: RetryNotes,
    /// While a usage limit holds: when the waiting messages go ([`super::limits::wait`]).
    pub(super) limit_until: Option<Instant>,
    /// The turn in flight when the CLI said the limit is reached, with what it said: its error
    /// result then means the limit refused it ([`super::limits::refused`]).
    pub(super) limit_seen: Option<(String, LimitReport)>,
    /// Limits hit since a turn was last answered (the backoff of a limit without a reset).
    pub(super) limit_strikes: u32,
    /// The process outside botvisor that holds the conversation, while the bot waits for it
    /// ([`super::held`]), with when to look at it next.
    pub(super) held: Option<super::held::Held>,
    /// Where the plan's usage limit stands, as the CLI last told it in this daemon run.
    pub(super) plan_limit: Option<LimitReport>,
    /// Background tasks the CLI reports as running (design rule 12).
    pub(super) background_tasks: usize,
    /// What follows an exit's clean-up: its effects, and a crash's text ([`super::exit`]).
    pub(super) after_clean_up: Option<(Vec<super::effect::Effect>, Option<String>)>,
    /// The turn an interrupt is being sent for (until the request is written).
    pub(super) interrupting: Option<String>,
    /// A Restart waiting for its stop to end, and how it starts again.
    pub(super) restarting: Option<super::lifecycle::RestartMode>,
    /// A failed attempt the conversation holds, which the next start resumes without (issue
    /// 45, [`super::attempt`]).
    pub(super) attempt: Option<crate::runtime::Cut>,
    /// A client's Stop is to be said in the chat (`stopped_with_queue`) once it ended.
    pub(super) stop_note_due: bool,
    /// While an agent taken over after a crash has a turn in flight: when its conversation's
    /// file is read for the turn's end, unless it speaks first ([`super::reattach`]).
    pub(super) crash_look: Option<Instant>,
    /// The first look after a crash that found no end was said in the journal (once per
    /// agent taken over, so that a turn that stays silent says what it waits for).
    pub(super) crash_look_told: bool,
    /// A failed attempt whose agent is being stopped, so that its cut is read once it is.
    pub(super) recut: Option<super::turns::Inflight>,
    /// Effects of the inputs handled, not yet given to the shell ([`BotCore::poll_effect`]).
    pub(super) effects: std::collections::VecDeque<super::effect::Effect>,
}

/// What the core's rules read of botvisord's configuration and the bot's runtime: fixed for the
/// daemon's run, given at [`BotCore::new`]. What can change while it runs (the bot's own
/// settings, its record) is asked through [`super::Facts`] or comes as an input.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// Streamed text is let out at most once per this interval (issue 31).
    pub text_interval: Duration,
    /// The watchdogs' bounds (design rule 15).
    pub bounds: super::Bounds,
    /// What an exit asks: the fresh-start window, how often a message is asked again, the
    /// crash-loop limit (design rules 4, 8 and 11).
    pub exit: super::exit::ExitSettings,
    /// The waits around a usage limit's reset (`limit_margin_s`, `limit_retry_s`).
    pub limit_times: super::limits::LimitTimes,
    /// `continue_after_limit` for a bot that sets none of its own.
    pub continue_after_limit: bool,
    /// The daemon's budget (`budget_usd`) in nano-dollars, in force for a bot without one.
    pub budget_default: Option<u64>,
    /// What a person checks when the model API cannot be reached, one sentence in the
    /// runtime's terms (`Runtime::api_hint`).
    pub api_hint: &'static str,
}

#[cfg(test)]
impl Settings {
    /// The settings the core's tests run with, streamed text paced at `text_interval`.
    pub(crate) fn test(text_interval: Duration) -> Settings {
        Settings {
            text_interval,
            bounds: super::Bounds {
                start_s: 60.0,
                interrupt_grace_s: 10.0,
                control_s: 10.0,
            },
            exit: super::exit::ExitSettings {
                fresh_window: Duration::from_secs(15),
                redo_limit: 3,
                crash_limits: super::lifecycle::CrashLimits {
                    window: Duration::from_secs(120),
                    limit: 5,
                },
            },
            limit_times: super::limits::LimitTimes {
                margin: Duration::from_secs(5),
                retry: Duration::from_secs(300),
            },
            continue_after_limit: false,
            budget_default: None,
            api_hint: "Check the stand-in.",
        }
    }
}

impl BotCore {
    /// A bot with nothing queued and no timer, ruled by `settings`.
    pub fn new(
        settings: Settings,
        words: Box<dyn super::Words>,
        standing: super::state::Standing,
    ) -> BotCore {
        BotCore {
            deltas: DeltaPacer::new(settings.text_interval),
            settings,
            words,
            standing,
            process: None,
            turns: Turns::default(),
            life: Lifecycle::default(),
            restart_at: None,
            launching: None,
            idle_at: None,
            last_used: None,
            snapshots: Snapshots::default(),
            watch: Watchdogs::default(),
            retry_notes: RetryNotes::default(),
            limit_until: None,
            limit_seen: None,
            limit_strikes: 0,
            held: None,
            plan_limit: None,
            background_tasks: 0,
            interrupting: None,
            restarting: None,
            after_clean_up: None,
            attempt: None,
            recut: None,
            crash_look: None,
            crash_look_told: false,
            stop_note_due: false,
            effects: std::collections::VecDeque::new(),
        }
    }

    /// The earliest deadline of every timer the bot has, `None` when none is set.
    pub fn poll_timeout(&self) -> Option<Instant> {
        [
            self.deltas.flush_at,
            self.snapshots.next(),
            self.watch.next(),
            self.restart_at,
            self.idle_at,
            self.limit_until,
            self.held.as_ref().map(|h| h.look_at),
            self.crash_look,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// It is `now`: what came, in the order the shell handles it (streamed text first, so a
    /// watchdog's stop or an idle stop follows what was said; the idle deadline last, as it
    /// reads the state the others leave; a limit's end before it, so a bot whose wait is over is not
    /// stopped for idleness first). Each timer that came is cleared.
    pub fn handle_timeout(&mut self, now: Instant) -> Vec<Due> {
        let mut due = Vec::new();
        if self.deltas.flush_at.is_some_and(|t| t <= now) {
            due.push(Due::FlushText);
        }
        if self.snapshots.next().is_some_and(|t| t <= now) && self.snapshots.due(now) {
            due.push(Due::LookForDescendants);
        }
        if self.watch.next().is_some_and(|t| t <= now) {
            due.extend(self.watch.expired(now).into_iter().map(Due::Watchdog));
        }
        if self.restart_at.is_some_and(|t| t <= now) {
            self.restart_at = None;
            due.push(Due::RestartBackoffOver);
        }
        if self.limit_until.is_some_and(|t| t <= now) {
            self.limit_until = None;
            due.push(Due::LimitLifted);
        }
        if let Some(h) = self.held.as_mut().filter(|h| h.look_at <= now) {
            h.look_at = now + super::held::LOOK_EVERY;
            due.push(Due::LookAtHolder);
        }
        if self.crash_look.is_some_and(|t| t <= now) {
            self.crash_look = None;
            due.push(Due::LookAfterCrash);
        }
        if self.idle_at.is_some_and(|t| t <= now) {
            self.idle_at = None;
            due.push(Due::Idle);
        }
        due
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn one_deadline_is_the_earliest_of_every_timer() {
        let t0 = Instant::now();
        let mut core = BotCore::new(
            crate::supervisor::core::Settings::test(Duration::from_millis(50)),
            Box::new(crate::supervisor::core::machine::tests::TestWords),
            crate::supervisor::core::Standing::loaded(Default::default()),
        );
        assert_eq!(core.poll_timeout(), None, "no timer: no deadline");
        core.idle_at = Some(t0 + 30 * S);
        core.restart_at = Some(t0 + 20 * S);
        core.watch.launched(Some(t0 + 10 * S));
        assert_eq!(core.poll_timeout(), Some(t0 + 10 * S));
        core.snapshots.tool(t0);
        assert!(
            core.poll_timeout().unwrap() < t0 + 10 * S,
            "a look after a tool comes first"
        );
    }

    #[test]
    fn what_came_is_reported_once_in_order_and_cleared() {
        let t0 = Instant::now();
        let mut core = BotCore::new(
            crate::supervisor::core::Settings::test(Duration::from_millis(50)),
            Box::new(crate::supervisor::core::machine::tests::TestWords),
            crate::supervisor::core::Standing::loaded(Default::default()),
        );
        core.idle_at = Some(t0 + 2 * S);
        core.restart_at = Some(t0 + S);
        core.watch.launched(Some(t0 + S));
        assert_eq!(core.handle_timeout(t0), Vec::new(), "nothing came yet");
        assert_eq!(
            core.handle_timeout(t0 + 3 * S),
            vec![
                Due::Watchdog(Expired::Start),
                Due::RestartBackoffOver,
                Due::Idle
            ]
        );
        assert_eq!(
            core.handle_timeout(t0 + 4 * S),
            Vec::new(),
            "each came once"
        );
        assert_eq!(core.poll_timeout(), None);
    }
}
