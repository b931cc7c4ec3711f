//! The unit tests of `core::limits`.

use super::*;
use crate::runtime::LimitState;

/// Now in the tests: a little before the reset of [`reached`]'s examples.
const NOW: u64 = 1_796_200_000;

const TIMES: LimitTimes = LimitTimes {
    margin: Duration::from_secs(5),
    retry: Duration::from_secs(300),
};

fn hold(resets_at: u64) -> LimitHold {
    LimitHold {
        kind: "five_hour".into(),
        resets_at,
    }
}

/// A `five_hour` limit reached, resetting at `resets_at` (0: not told).
fn reached(resets_at: u64) -> LimitReport {
    LimitReport {
        state: LimitState::Reached,
        kind: "five_hour".into(),
        resets_at,
        utilization: Some(1.0),
    }
}

/// Turns with `a` in flight (its turn began) and `b` waiting.
fn a_begun_b_waiting() -> Turns {
    let mut t = Turns::default();
    for id in ["a", "b"] {
        t.queue(QueuedTurn {
            id: id.into(),
            text: id.into(),
            ..QueuedTurn::default()
        });
    }
    t.deliver("s", SystemTime::UNIX_EPOCH).unwrap();
    t.replayed("s", Some("s"), Some("s"), |_| false).unwrap();
    t
}

#[test]
fn after_a_restart_only_a_plans_limit_gets_a_timer() {
    assert_eq!(
        resumed("five_hour", 1_000, 400, TIMES, 0, None),
        Resumed::Wait(Duration::from_secs(605))
    );
    assert_eq!(
        resumed("five_hour", 0, 400, TIMES, 0, None),
        Resumed::Wait(TIMES.retry),
        "a reset not known is retried, not waited for forever"
    );
    // A reset that passed while botvisord was not running: the margin's rest, then it goes,
    // however often botvisord starts again (not a new retry from each start).
    assert_eq!(
        resumed("five_hour", 398, 400, TIMES, 0, None),
        Resumed::Wait(Duration::from_secs(3))
    );
    assert_eq!(
        resumed("five_hour", 100, 400, TIMES, 0, None),
        Resumed::Wait(Duration::ZERO)
    );
    assert_eq!(
        resumed("five_hour", 400, 400, TIMES, 0, None),
        Resumed::Wait(TIMES.margin)
    );
    assert_eq!(
        resumed(LOGIN, 0, 400, TIMES, 0, None),
        Resumed::Credentials,
        "a login comes back with the credentials, never with a timer"
    );
    assert_eq!(
        resumed(BUDGET, 0, 400, TIMES, 10, Some(10)),
        Resumed::Budget
    );
    assert_eq!(
        resumed(BUDGET, 0, 400, TIMES, 10, Some(11)),
        Resumed::Lift,
        "a budget raised while the daemon was down lifts the hold"
    );
    assert_eq!(resumed(BUDGET, 0, 400, TIMES, 10, None), Resumed::Lift);
}

#[test]
fn a_reset_past_or_too_far_ahead_is_not_believed_and_the_bot_says_when_it_tries_again() {
    let day = 24 * 3600;
    assert_eq!(goes_at(NOW + 60, NOW, 0, TIMES), (NOW + 60, true));
    assert_eq!(goes_at(NOW + 7 * day, NOW, 0, TIMES), (NOW + 7 * day, true));
    assert_eq!(goes_at(0, NOW, 0, TIMES), (NOW + 300, false));
    assert_eq!(goes_at(NOW - 100, NOW, 0, TIMES), (NOW + 300, false));
    assert_eq!(goes_at(NOW, NOW, 2, TIMES), (NOW + 1200, false));
    assert_eq!(goes_at(99_999_999_999, NOW, 0, TIMES), (NOW + 300, false));
    assert_eq!(goes_at(0, u64::MAX - 1, 0, TIMES), (u64::MAX, false));
    let mut t = a_begun_b_waiting();
    let (held, effects) = refused(&mut t, &reached(NOW - 100), false, NOW, 1, TIMES).unwrap();
    assert_eq!(held.resets_at, NOW + 600, "LimitResetsAt says when it goes");
    let Some(Effect::Commit { writes, .. }) =
        effects.iter().find(|e| matches!(e, Effect::Commit { .. }))
    else {
        panic!("{effects:?}");
    };
    let note = writes.iter().find_map(|w| match w {
        Write::Chat { payload, .. } => Some(payload.clone()),
        _ => None,
    });
    let note: serde_json::Value = serde_json::from_str(&note.unwrap()).unwrap();
    assert_eq!(note["reset_told"], NOW - 100);
    let words = note["text"].as_str().unwrap();
    assert!(
        words.contains("tries again, at 2026-12-02T08:36:40Z"),
        "{words}"
    );
}

#[test]
fn a_known_reset_is_waited_for_with_its_margin() {
    assert_eq!(wait(&hold(1_000), 400, 0, TIMES), Duration::from_secs(605));
}

#[test]
fn an_unknown_or_past_reset_backs_off_instead_of_looping() {
    assert_eq!(wait(&hold(0), 400, 0, TIMES), Duration::from_secs(300));
    assert_eq!(wait(&hold(100), 400, 1, TIMES), Duration::from_secs(600));
    assert_eq!(wait(&hold(100), 400, 3, TIMES), Duration::from_secs(2400));
    assert_eq!(wait(&hold(0), 400, 40, TIMES), MAX_RETRY);
}

#[test]
fn the_refused_message_goes_back_first_and_the_bot_holds() {
    let mut t = a_begun_b_waiting();
    let report = reached(1_796_200_214);
    let (held, effects) = refused(&mut t, &report, false, NOW, 0, TIMES).unwrap();
    assert_eq!(held, hold(1_796_200_214));
    assert!(t.inflight.is_none());
    let ids: Vec<&str> = t.queue.iter().map(|q| q.id.as_str()).collect();
    assert_eq!(ids, ["a", "b"], "in the order sent, the refused one first");
    let Effect::Commit { writes, publish } = &effects[0] else {
        panic!("{effects:?}");
    };
    assert_eq!(writes[0], Write::TurnRequeued("a".into()));
    assert!(
        !writes
            .iter()
            .any(|w| matches!(w, Write::TurnFinished { .. })),
        "not a failed turn: {writes:?}"
    );
    assert!(writes.contains(&Write::Limit(Some(("five_hour".into(), 1_796_200_214)))));
    assert!(publish.contains(&Publish::Limit(Some(("five_hour".into(), 1_796_200_214)))));
    assert_eq!(effects[1], Effect::State(State::Limited));
    assert_eq!(effects[2], Effect::Queued(2));
    assert!(
        refused(&mut t, &report, false, NOW, 0, TIMES).is_none(),
        "nothing in flight"
    );
}

#[test]
fn a_turn_cut_after_its_tool_calls_ends_limited_and_is_not_sent_again() {
    let mut t = a_begun_b_waiting();
    t.said_by_cli("tool_use", "{}".into());
    let (_, effects) = refused(&mut t, &reached(0), false, NOW, 0, TIMES).unwrap();
    let ids: Vec<&str> = t.queue.iter().map(|q| q.id.as_str()).collect();
    assert_eq!(ids, ["b"], "the cut turn is not queued again");
    assert_eq!(
        crate::supervisor::core::effect::finished_turns(&effects),
        [("a".to_owned(), TurnOutcome::Limited)]
    );
    assert!(
        crate::supervisor::core::effect::writes(&effects)
            .any(|w| *w == Write::Limit(Some(("five_hour".into(), NOW + 300)))),
        "the bot holds all the same"
    );
    assert!(effects.contains(&Effect::State(State::Limited)));
}

#[test]
fn with_continue_after_limit_a_cut_turn_waits_to_continue() {
    let mut t = a_begun_b_waiting();
    t.said_by_cli("tool_use", "{}".into());
    let (_, effects) = refused(&mut t, &reached(0), true, NOW, 0, TIMES).unwrap();
    let queued: Vec<(&str, &str)> = t
        .queue
        .iter()
        .map(|q| (q.id.as_str(), q.text.as_str()))
        .collect();
    assert_eq!(queued, [("a", CONTINUE_TEXT), ("b", "b")]);
    assert!(crate::supervisor::core::effect::finished_turns(&effects).is_empty());
    assert!(
        crate::supervisor::core::effect::writes(&effects)
            .any(|w| *w == Write::TurnContinued("a".into(), CONTINUE_TEXT.into()))
    );
}

#[test]
fn the_words_name_the_window_and_the_reset() {
    let t = text(&hold(1_796_200_214));
    assert!(t.contains("five-hour usage limit is reached"), "{t}");
    assert!(t.contains("resets at 2026-12-02T08:30:14Z (UTC)"), "{t}");
    assert!(text(&hold(0)).contains("not known"));
}

#[test]
fn lifted_is_recorded_before_the_state() {
    let effects = lifted(true);
    assert!(
        matches!(&effects[0], Effect::Commit { writes, .. } if writes == &vec![Write::Limit(None)])
    );
    assert_eq!(effects[1], Effect::State(State::Idle));
    assert_eq!(lifted(false)[1], Effect::State(State::Stopped));
}
