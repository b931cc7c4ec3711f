//! The driven machine, input by input, with facts a test gives: what a CLI's events become.

use std::time::{Duration, Instant};

use serde_json::json;

use super::*;
use crate::runtime::SessionStart;
use crate::runtime::{ChatPayload, ControlRequest, LimitReport, LimitState, ResultOutcome};
use crate::supervisor::core::State;
use crate::supervisor::core::commands::Cmd;
use crate::supervisor::core::effect::{Awaited, Request, Streamed, Write};
use crate::supervisor::core::lifecycle::RestartMode;
use crate::supervisor::core::state::OnRecord;
use crate::supervisor::core::stop::StopReason;
use crate::supervisor::core::turns::QueuedTurn;

/// Facts as a test sets them.
#[derive(Default)]
struct Told {
    recorded: Option<String>,
    /// Clients holding the bot.
    holders: usize,
    /// Permission requests open.
    prompts: usize,
    /// A descendant of the agent lives (what [`answered`] answers a look with).
    descendant: bool,
    /// The process that holds the conversation exited (likewise).
    holder_gone: bool,
    /// What the conversation's file holds of the message in flight.
    taken: Option<TakenTurn>,
}

impl Facts for Told {
    fn recorded(&self) -> Option<String> {
        self.recorded.clone()
    }
    fn conversation(&self) -> Option<String> {
        Some("s".into())
    }
    fn transcript_exists(&self, _: &str) -> bool {
        true
    }
    fn taken_turn(&self, _: &Inflight) -> Option<TakenTurn> {
        self.taken.clone()
    }
    fn conversation_holds(&self, _: &Inflight) -> bool {
        false
    }
    fn left_taken(
        &self,
        _: &crate::supervisor::core::QueuedTurn,
        _: &str,
        _: std::time::SystemTime,
    ) -> Option<TakenTurn> {
        None
    }
    fn unix_now(&self) -> u64 {
        1_000_000
    }
    fn watchers(&self) -> (usize, usize) {
        (self.holders, self.prompts)
    }
    fn login_hint(&self) -> String {
        "Log in again.".to_owned()
    }
}

/// The runtime's words as a test reads them: an expired OAuth token is an authentication
/// failure, an "active writer" refusal a conversation held elsewhere, and a permission's one
/// scope `once`.
#[derive(Debug)]
pub(crate) struct TestWords;

impl crate::supervisor::core::Words for TestWords {
    fn fatal_reason(&self, text: &str) -> Option<&'static str> {
        text.contains("OAuth token has expired")
            .then_some("authentication")
    }
    fn session_in_use(&self, _: &str) -> Option<String> {
        None
    }
    fn held_elsewhere(&self, error: &str) -> bool {
        error.contains("active writer")
    }
    fn scopes(&self, _request: &serde_json::Value) -> Vec<(String, String)> {
        vec![("once".into(), "this request, this time".into())]
    }
}

/// A core loaded from `record`, with nothing running.
fn loaded(record: OnRecord) -> BotCore {
    BotCore::new(
        crate::supervisor::core::Settings::test(Duration::from_millis(50)),
        Box::new(TestWords),
        crate::supervisor::core::Standing::loaded(record),
    )
}

/// A core whose agent was launched on conversation `s` and opened it (a sign of life: no start
/// watchdog), with nothing to do: driven by inputs, as the shell drives it.
fn launched() -> BotCore {
    launched_from(OnRecord::default())
}

/// [`launched`], loaded from `record`.
fn launched_from(record: OnRecord) -> BotCore {
    let mut core = loaded(record);
    let (now, facts) = (Instant::now(), Told::default());
    core.handle(now, launched_on_s(None), &facts);
    core.handle(
        now,
        Input::Runtime(RuntimeEvent::Opened {
            session_id: "s".into(),
        }),
        &facts,
    );
    drain(&mut core);
    core
}

/// A core with a running process to which `hello` (turn `t`) goes in the conversation `s`: its
/// delivery is on record, and it is in flight.
fn running() -> BotCore {
    running_from(OnRecord::default())
}

/// [`running`], loaded from `record`.
fn running_from(record: OnRecord) -> BotCore {
    let mut core = launched_from(record);
    let (now, facts) = (Instant::now(), Told::default());
    core.handle(
        now,
        Input::Command(Cmd::Queued(QueuedTurn::new("t", "hello"))),
        &facts,
    );
    core.handle(
        now,
        Input::Deliver {
            session: "s".into(),
            now: std::time::SystemTime::UNIX_EPOCH,
        },
        &facts,
    );
    drain(&mut core);
    core
}

/// The conversation `s` held by a terminal's Claude Code (pid 7), looked at next at `at`.
fn held_by_a_terminal(at: Instant) -> super::super::held::Held {
    super::super::held::Held {
        session_id: "s".into(),
        identity: crate::process::identity::ProcessIdentity {
            pid: 7,
            start_time: 1,
            boot_id: "b".into(),
        },
        what: "Claude Code in a terminal".into(),
        command: "claude".into(),
        look_at: at,
    }
}

/// `Input::Launched` of a process resuming conversation `s`, its root `identity` when given.
fn launched_on_s(identity: Option<crate::process::identity::ProcessIdentity>) -> Input {
    Input::Launched {
        decision: crate::supervisor::core::start::StartDecision {
            start: SessionStart::Resume("s".into()),
            forget: None,
            cut: None,
            fork: false,
        },
        identity,
        conversation_cost: None,
    }
}

fn drain(core: &mut BotCore) -> Vec<Effect> {
    std::iter::from_fn(|| core.poll_effect()).collect()
}

/// The effects, each [`Effect::Look`] among them answered as the shell would from `facts` (its
/// `descendant` and `holder_gone`): the look, then what its answer gave.
fn answered(core: &mut BotCore, now: Instant, facts: &Told, effects: Vec<Effect>) -> Vec<Effect> {
    let mut out = Vec::new();
    for effect in effects {
        let answer = match &effect {
            Effect::Look(crate::supervisor::core::Look::Descendants(why)) => {
                Some(crate::supervisor::core::Looked::Descendants {
                    why: *why,
                    lives: facts.descendant,
                })
            }
            Effect::Look(crate::supervisor::core::Look::Holder(identity)) => {
                Some(crate::supervisor::core::Looked::Holder {
                    identity: identity.clone(),
                    alive: !facts.holder_gone,
                })
            }
            _ => None,
        };
        out.push(effect);
        if let Some(answer) = answer {
            core.handle(now, Input::Looked(answer), facts);
            let after = drain(core);
            out.extend(answered(core, now, facts, after));
        }
    }
    out
}

fn event(core: &mut BotCore, now: Instant, facts: &Told, e: RuntimeEvent) -> Vec<Effect> {
    core.handle(now, Input::Runtime(e), facts);
    drain(core)
}

fn result(outcome: ResultOutcome, error: Option<&str>) -> RuntimeEvent {
    RuntimeEvent::TurnResult {
        outcome,
        session_id: Some("s".into()),
        payload: json!({"subtype": "success", "total_cost_usd": 0.0}),
        error: error.map(str::to_owned),
    }
}

fn replay() -> RuntimeEvent {
    RuntimeEvent::UserReplay {
        session_id: Some("s".into()),
        text: "hello".into(),
    }
}

fn finished(effects: &[Effect]) -> Vec<(String, super::super::decide::TurnOutcome)> {
    super::super::effect::finished_turns(effects)
}

#[test]
fn a_turn_begins_at_its_replay_and_ends_at_its_result_with_prompts_closed_first() {
    let t0 = Instant::now();
    let facts = Told {
        recorded: Some("s".into()),
        ..Told::default()
    };
    let mut core = running();
    let began = event(&mut core, t0, &facts, replay());
    assert_eq!(
        began.first(),
        Some(&Effect::TurnBegan),
        "descendants noted first"
    );
    assert!(super::super::effect::writes(&began).any(|w| *w == Write::TurnRunning("t".into())));
    let ended = event(&mut core, t0, &facts, result(ResultOutcome::Success, None));
    let close = ended
        .iter()
        .position(|e| matches!(e, Effect::ClosePrompts(_)))
        .expect("open prompts closed");
    let end = ended
        .iter()
        .position(|e| {
            matches!(e, Effect::Commit { writes, .. }
                if writes.iter().any(|w| matches!(w, Write::TurnFinished { .. })))
        })
        .expect("the turn's end");
    assert!(
        close < end,
        "a question open at its turn's end is closed before the end is said"
    );
    assert_eq!(
        finished(&ended),
        [("t".into(), super::super::decide::TurnOutcome::Success)]
    );
    assert_eq!(ended.last(), Some(&Effect::KeepConversation));
}

#[test]
fn issue_24_a_reached_limit_makes_the_error_result_a_refusal_and_the_message_waits() {
    let t0 = Instant::now();
    let facts = Told::default();
    let mut core = running();
    event(&mut core, t0, &facts, replay());
    let report = LimitReport {
        state: LimitState::Reached,
        kind: "five_hour".into(),
        resets_at: 1_003_600,
        utilization: Some(1.0),
    };
    let told = event(&mut core, t0, &facts, RuntimeEvent::Limit(report.clone()));
    assert!(told.contains(&Effect::PlanLimit(report)));
    let ended = event(
        &mut core,
        t0,
        &facts,
        result(ResultOutcome::Error, Some("You've hit your limit")),
    );
    assert_eq!(finished(&ended), [], "no turn ends: it waits");
    assert_eq!(core.turns.queue.front().map(|t| t.id.as_str()), Some("t"));
    assert!(
        core.limit_until
            .is_some_and(|t| t > t0 + Duration::from_secs(3600))
    );
}

#[test]
fn issue_24_an_expired_login_holds_the_message_and_watches_the_credentials() {
    let t0 = Instant::now();
    let facts = Told::default();
    let mut core = running();
    event(&mut core, t0, &facts, replay());
    let ended = event(
        &mut core,
        t0,
        &facts,
        result(ResultOutcome::Error, Some("401 OAuth token has expired")),
    );
    assert_eq!(finished(&ended), []);
    assert!(ended.contains(&Effect::FollowCredentials));
    assert!(
        ended.contains(&Effect::State(State::LoginRequired)),
        "{ended:?}"
    );
    assert_eq!(
        core.turns.queue.front().map(|t| t.id.as_str()),
        Some("t"),
        "it waits"
    );
}

#[test]
fn streamed_text_is_paced_and_a_whole_message_ends_it() {
    let t0 = Instant::now();
    let facts = Told::default();
    let mut core = running();
    event(&mut core, t0, &facts, replay());
    let first = event(&mut core, t0, &facts, RuntimeEvent::TextDelta("a".into()));
    assert!(first.contains(&Effect::Stream(Streamed::Append("a".into()))));
    assert!(
        first.iter().any(
            |e| matches!(e, Effect::Stream(Streamed::Signal { turn_id, text })
            if turn_id == "t" && text == "a")
        ),
        "{first:?}"
    );
    let second = event(&mut core, t0, &facts, RuntimeEvent::TextDelta("b".into()));
    assert!(
        !second
            .iter()
            .any(|e| matches!(e, Effect::Stream(Streamed::Signal { .. }))),
        "not twice within the interval"
    );
    let whole = event(
        &mut core,
        t0,
        &facts,
        RuntimeEvent::Chat(ChatPayload {
            kind: "assistant",
            payload: json!({"text": "ab"}),
        }),
    );
    let signal = whole
        .iter()
        .position(|e| matches!(e, Effect::Stream(Streamed::Signal { text, .. }) if text == "b"))
        .expect("what waited is let out");
    let item = whole
        .iter()
        .position(|e| matches!(e, Effect::Commit { .. }))
        .expect("the item");
    assert!(signal < item, "the text before the item");
    assert_eq!(whole.last(), Some(&Effect::Stream(Streamed::Clear)));
}

#[test]
fn a_request_of_the_cli_is_refused_and_a_tool_is_looked_after() {
    let t0 = Instant::now();
    let facts = Told::default();
    let mut core = running();
    let refused = event(
        &mut core,
        t0,
        &facts,
        RuntimeEvent::ControlRequest {
            request_id: "r".into(),
            subtype: "mcp_message".into(),
            request: json!({}),
        },
    );
    assert_eq!(
        refused,
        [Effect::Send(Request::Refuse {
            request_id: "r".into(),
            message: "botvisor does not serve `mcp_message` requests".into()
        })]
    );
    event(&mut core, t0, &facts, replay());
    let tool = event(
        &mut core,
        t0,
        &facts,
        RuntimeEvent::Chat(ChatPayload {
            kind: "tool_use",
            payload: json!({"id": "u", "name": "Bash"}),
        }),
    );
    assert_eq!(tool.last(), Some(&Effect::LookForDescendants));
    assert!(core.poll_timeout().is_some(), "a later look is due");
}

#[test]
fn rule_4_a_lost_conversation_asks_for_the_stop_after_its_effects() {
    let t0 = Instant::now();
    let facts = Told::default();
    let mut core = running();
    let lost = event(
        &mut core,
        t0,
        &facts,
        RuntimeEvent::ConversationNotFound {
            session_id: "s".into(),
        },
    );
    assert_eq!(lost.last(), Some(&Effect::Stop(StopReason::Replaced)));
    assert_eq!(core.turns.queue.front().map(|t| t.id.as_str()), Some("t"));
}

#[test]
fn a_control_answer_is_taken_once() {
    let t0 = Instant::now();
    let facts = Told::default();
    let mut core = running();
    core.process
        .as_mut()
        .unwrap()
        .controls
        .sent("c1".into(), ControlRequest::SetModel("opus".into()));
    let answered = event(
        &mut core,
        t0,
        &facts,
        RuntimeEvent::ControlResponse {
            request_id: "c1".into(),
            result: Ok(json!({})),
        },
    );
    assert!(!answered.is_empty(), "the model now in force is recorded");
    let again = event(
        &mut core,
        t0,
        &facts,
        RuntimeEvent::ControlResponse {
            request_id: "c1".into(),
            result: Ok(json!({})),
        },
    );
    assert_eq!(again, []);
}

/// Timers, settings, interrupts, crashes, holders, a message's write and a launch.
mod lives;

/// A client's Stop, Restart, Delete, the shutdown and a permission answer.
mod commands;

/// A stop for memory pressure at the bot, and what counts as a use (issue 31).
mod evict;

/// Where the bot stands, kept by the core: its state, its park, its hold, spend and budget.
mod standing;

/// An agent taken over after a crash, its message's replay lost with the killed botvisord.
mod crash;
