//! The core keeps where the bot stands (issue 48, step 2): a state is shown once, a change into
//! or out of `failed` is recorded first, a hold shows as `limited` unless the bot is parked, a
//! turn's spend counts against the budget from what is on record, and a failed commit leaves the
//! bot as recorded.

use super::*;
use crate::supervisor::core::effect::Publish;
use crate::supervisor::core::state::Standing;

use crate::supervisor::core::effect::states;

#[test]
fn a_state_is_shown_once_and_failed_is_recorded_before_it_is_shown() {
    let t0 = Instant::now();
    let facts = Told::default();
    let mut core = running();
    core.handle(t0, Input::Stopping, &facts);
    assert_eq!(drain(&mut core), [Effect::State(State::Stopping)]);
    core.handle(t0, Input::Stopping, &facts);
    assert_eq!(drain(&mut core), [], "shown already: nothing new to say");

    core.emit([Effect::State(State::Failed)]);
    assert_eq!(
        drain(&mut core),
        [Effect::Commit {
            writes: vec![Write::Failed(true)],
            publish: vec![Publish::State(State::Failed)],
        }],
        "durable first (design rule 1): shown only by its commit"
    );
    assert_eq!(core.standing.state(), State::Failed);
    assert!(!core.pump_plan(None).start, "a failed bot starts nothing");

    // A client's Restart: the handle recorded and showed the end of `failed` before it asked.
    core.handle(
        t0,
        Input::Command(Cmd::Restart {
            mode: RestartMode::Resume,
            by_client: true,
        }),
        &facts,
    );
    assert_eq!(core.standing.state(), State::Stopped);
    assert!(!core.standing.record.failed);
}

#[test]
fn a_hold_on_record_shows_limited_unless_a_client_stopped_the_bot() {
    let t0 = Instant::now();
    let facts = Told::default();
    let hold = || OnRecord {
        hold: Some(("five_hour".into(), 0)),
        ..OnRecord::default()
    };
    assert_eq!(Standing::loaded(hold()).state(), State::Limited);
    let parked = OnRecord {
        parked: true,
        ..hold()
    };
    assert_eq!(Standing::loaded(parked).state(), State::Stopped);
    let login = OnRecord {
        hold: Some((crate::supervisor::core::LOGIN.into(), 0)),
        ..OnRecord::default()
    };
    assert_eq!(Standing::loaded(login).state(), State::LoginRequired);

    // Idle with a hold: it waits for the hold, and a client's Stop says `stopped` instead.
    let mut core = launched_from(hold());
    assert_eq!(core.standing.state(), State::Limited);
    core.handle(t0, Input::Command(Cmd::Stop), &facts);
    let stop = drain(&mut core);
    assert!(
        stop.contains(&Effect::Commit {
            writes: vec![Write::Parked(true)],
            publish: vec![Publish::Parked(true)],
        }),
        "the park is recorded before it is said: {stop:?}"
    );
    core.handle(t0, Input::ParkChanged { running: true }, &facts);
    assert_eq!(states(&drain(&mut core)), [State::Idle]);
    // Parked already: a second Stop records nothing.
    core.handle(t0, Input::Command(Cmd::Stop), &facts);
    assert!(
        !crate::supervisor::core::effect::writes(&drain(&mut core))
            .any(|w| *w == Write::Parked(true))
    );
}

#[test]
fn a_turns_spend_counts_against_the_budget_from_what_is_on_record() {
    let t0 = Instant::now();
    let facts = Told {
        recorded: Some("s".into()),
        ..Told::default()
    };
    // $0.60 spent of a $1.00 budget: a turn of $0.30 crosses 80 %, the next one reaches it.
    let mut core = running_from(OnRecord {
        cost_nanos: 600_000_000,
        budget: Some(1_000_000_000),
        ..OnRecord::default()
    });
    let turn = |core: &mut BotCore, total_usd: f64| {
        event(core, t0, &facts, replay());
        let result = RuntimeEvent::TurnResult {
            outcome: ResultOutcome::Success,
            session_id: Some("s".into()),
            payload: json!({"subtype": "success", "total_cost_usd": total_usd}),
            error: None,
        };
        event(core, t0, &facts, result)
    };
    let first = turn(&mut core, 0.3);
    assert_eq!(core.spend(), (900_000_000, Some(1_000_000_000)));
    assert!(
        !crate::supervisor::core::effect::writes(&first).any(|w| matches!(w, Write::Limit(_))),
        "below the budget: {first:?}"
    );
    core.handle(
        t0,
        Input::Command(Cmd::Queued(QueuedTurn::new("u", "again"))),
        &facts,
    );
    core.handle(
        t0,
        Input::Deliver {
            session: "s".into(),
            now: std::time::SystemTime::UNIX_EPOCH,
        },
        &facts,
    );
    core.handle(
        t0,
        Input::Committed {
            awaited: Awaited::Delivery,
            ok: true,
        },
        &facts,
    );
    drain(&mut core);
    let second = turn(&mut core, 0.6);
    let budget = Some(("budget".to_owned(), 0));
    assert!(
        crate::supervisor::core::effect::writes(&second)
            .any(|w| *w == Write::Limit(budget.clone())),
        "the budget is reached: {second:?}"
    );
    assert_eq!(core.standing.record.hold, budget);
    assert_eq!(core.standing.state(), State::Limited);
}

#[test]
fn a_failed_commit_leaves_the_bot_as_recorded() {
    let t0 = Instant::now();
    let mut core = launched();
    core.emit([Effect::State(State::Failed)]);
    drain(&mut core);
    // The shell could not commit it: the view still says idle.
    core.handle(
        t0,
        Input::Recorded {
            state: State::Idle,
            record: OnRecord::default(),
        },
        &Told::default(),
    );
    assert_eq!(core.standing.state(), State::Idle);
    assert!(!core.standing.record.failed);
    core.handle(
        t0,
        Input::Command(Cmd::Queued(QueuedTurn::new("u", "next"))),
        &Told::default(),
    );
    drain(&mut core);
    assert!(
        core.pump_plan(Some(true)).write,
        "not failed: the message goes"
    );
}
