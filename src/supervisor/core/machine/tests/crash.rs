//! An agent taken over after botvisord was killed (issue 47) with a message written to it and
//! its replay never handled: the killed botvisord read the replay (and maybe the whole answer)
//! from the pipe and died before it handled it. The turn ends once either way, as the
//! conversation's file says (design rule 8; a hostile
//! run of issue 49's schedules left a bot `busy` for ever so).

use std::time::SystemTime;

use super::*;
use crate::supervisor::core::left_turns::Left;
use crate::supervisor::core::reattach::CRASH_LOOK;
use crate::supervisor::core::run::Run;

/// A core that took over, after a crash, an agent on conversation `s` to which `hello` (turn
/// `t`) was written and not replayed, as the store has it.
fn taken_over_unreplayed(t0: Instant, facts: &Told) -> BotCore {
    let mut core = loaded(OnRecord::default());
    let left = Left {
        queued: vec![(
            QueuedTurn::new("t", "hello"),
            Some(("s".into(), SystemTime::UNIX_EPOCH)),
        )],
        ..Left::default()
    };
    core.handle(
        t0,
        Input::TakenOver {
            run: Run::new(SessionStart::Resume("s".into())),
            left,
            session: "s".into(),
            crashed: true,
        },
        facts,
    );
    let effects = drain(&mut core);
    assert!(effects.contains(&Effect::State(State::Busy)), "{effects:?}");
    core
}

/// A whole answer in the conversation's file.
fn answered_in_file() -> TakenTurn {
    TakenTurn {
        answer: vec![ChatPayload {
            kind: "assistant",
            payload: json!({"text": "hi"}),
        }],
        answered: true,
        ..TakenTurn::bare()
    }
}

/// The commit that makes the turn run (its replay's).
fn runs(effects: &[Effect], turn: &str) -> bool {
    crate::supervisor::core::effect::writes(effects)
        .any(|w| matches!(w, Write::TurnRunning(t) if t == turn))
}

#[test]
fn rule_8_a_replay_and_answer_the_killed_daemon_read_are_read_back_and_the_turn_ends_once() {
    let t0 = Instant::now();
    let facts = Told {
        taken: Some(answered_in_file()),
        ..Told::default()
    };
    let mut core = taken_over_unreplayed(t0, &facts);
    // The agent says nothing more: it said it all to the killed botvisord.
    core.handle(t0 + CRASH_LOOK, Input::Timeout, &facts);
    let look = drain(&mut core);
    assert!(
        runs(&look, "t"),
        "the turn runs, as its replay would: {look:?}"
    );
    assert_eq!(
        finished(&look),
        [(
            "t".into(),
            super::super::super::decide::TurnOutcome::Success
        )],
        "it ends success, read back: {look:?}"
    );
    assert!(look.contains(&Effect::State(State::Idle)), "{look:?}");
    assert!(core.turns.inflight.is_none());
    core.handle(t0 + CRASH_LOOK * 3, Input::Timeout, &facts);
    assert!(finished(&drain(&mut core)).is_empty(), "once");
}

#[test]
fn rule_8_an_answer_after_a_replay_the_killed_daemon_read_is_that_turns() {
    let t0 = Instant::now();
    let facts = Told {
        taken: Some(TakenTurn::bare()),
        ..Told::default()
    };
    let mut core = taken_over_unreplayed(t0, &facts);
    // The agent answers on: its replay went to the killed botvisord.
    let chat = event(
        &mut core,
        t0,
        &facts,
        RuntimeEvent::Chat(ChatPayload {
            kind: "assistant",
            payload: json!({"text": "hi"}),
        }),
    );
    assert!(runs(&chat, "t"), "the turn runs first: {chat:?}");
    let item_turn = crate::supervisor::core::effect::writes(&chat).find_map(|w| match w {
        Write::Chat { kind, turn_id, .. } if kind == "assistant" => Some(turn_id.clone()),
        _ => None,
    });
    assert_eq!(
        item_turn,
        Some(Some("t".into())),
        "the answer is the turn's"
    );
    let end = event(&mut core, t0, &facts, result(ResultOutcome::Success, None));
    assert_eq!(
        finished(&end),
        [(
            "t".into(),
            super::super::super::decide::TurnOutcome::Success
        )],
        "{end:?}"
    );
    assert!(core.turns.inflight.is_none());
}

#[test]
fn rule_8_a_message_the_file_lacks_is_waited_for_never_written_again() {
    let t0 = Instant::now();
    let facts = Told::default();
    let mut core = taken_over_unreplayed(t0, &facts);
    for n in 1..=4 {
        core.handle(t0 + CRASH_LOOK * n, Input::Timeout, &facts);
        let look = drain(&mut core);
        assert!(
            core.turns.inflight.is_some() && look.is_empty(),
            "it was written whole: the agent reads it when it can: {look:?}"
        );
    }
    assert!(
        !core.pump_plan(Some(true)).write,
        "nothing is written again"
    );
}
