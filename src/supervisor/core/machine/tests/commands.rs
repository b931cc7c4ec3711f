//! A client's commands that stop the process, and a permission answer, input by input: what
//! each asks for, in which order, and what follows the stop's end.

use super::*;

/// Whether `effects` hold a `system` item with `reason`.
fn says(effects: &[Effect], reason: &str) -> bool {
    crate::supervisor::core::effect::writes(effects).any(
        |w| matches!(w, Write::Chat { payload, .. } if payload.contains(&format!("\"{reason}\""))),
    )
}

#[test]
fn rule_9_a_stop_says_what_waits_parks_ends_a_wait_then_stops_and_shows_stopped_after() {
    let t0 = Instant::now();
    let mut core = running();
    core.turns.queue(QueuedTurn::new("u", "next"));
    core.held = Some(held_by_a_terminal(t0));
    core.restart_at = Some(t0);
    core.handle(t0, Input::Command(Cmd::Stop), &Told::default());
    let stop = drain(&mut core);
    // What waits is said once the stop ended (the message in flight settled by then), before
    // the bot shows `stopped`.
    assert!(!says(&stop, "stopped_with_queue"), "{stop:?}");
    assert!(stop.contains(&Effect::Park(true)), "parked: {stop:?}");
    let stopping = Told::default();
    core.handle(t0, Input::Stopping, &stopping);
    assert_eq!(drain(&mut core), [Effect::State(State::Stopping)]);
    core.handle(
        t0,
        Input::Stopped {
            why: StopReason::Stop,
            released: true,
        },
        &stopping,
    );
    let ended = drain(&mut core);
    let told = ended
        .iter()
        .position(|e| {
            matches!(e, Effect::Commit { .. })
                && says(std::slice::from_ref(e), "stopped_with_queue")
        })
        .expect("the waiting message told");
    let shown = ended
        .iter()
        .position(|e| *e == Effect::State(State::Stopped))
        .expect("stopped");
    assert!(told < shown, "said before the bot shows stopped: {ended:?}");
    assert!(
        stop.contains(&Effect::HeldBy(String::new())),
        "the wait ends"
    );
    assert!(core.held.is_none());
    assert_eq!(core.restart_at, None, "no crash backoff starts it again");
    assert_eq!(
        stop.last(),
        Some(&Effect::Stop(StopReason::Stop)),
        "stopped last"
    );

    let stopped = |why, state| {
        let mut core = running();
        let facts = Told::default();
        show(&mut core, state);
        core.handle(
            t0,
            Input::Stopped {
                why,
                released: true,
            },
            &facts,
        );
        drain(&mut core)
    };
    assert_eq!(
        stopped(StopReason::Stop, State::Stopping),
        [Effect::State(State::Stopped)]
    );
    assert_eq!(
        stopped(StopReason::Stop, State::Failed),
        [],
        "a failure stays until a restart"
    );
    assert_eq!(
        stopped(StopReason::Idle, State::Stopping),
        [],
        "an idle stop's end is the exit's"
    );

    // Stopped again: the waiting messages were told already.
    let mut again = running();
    again.turns.queue(QueuedTurn::new("u", "next"));
    let facts = Told::default();
    let stop = |core: &mut BotCore| {
        core.handle(t0, Input::Command(Cmd::Stop), &facts);
        let stopped = Input::Stopped {
            why: StopReason::Stop,
            released: true,
        };
        core.handle(t0, stopped, &facts);
        drain(core)
    };
    assert!(says(&stop(&mut again), "stopped_with_queue"));
    let twice = stop(&mut again);
    assert!(!says(&twice, "stopped_with_queue"), "{twice:?}");
}

#[test]
fn a_permission_answer_is_written_to_the_agent() {
    let mut core = running();
    let answer = crate::runtime::PermissionAnswer::Deny {
        message: "no".into(),
    };
    core.handle(
        Instant::now(),
        Input::Command(Cmd::Respond {
            request_id: "r1".into(),
            answer: answer.clone(),
        }),
        &Told::default(),
    );
    assert_eq!(
        drain(&mut core),
        [Effect::Send(Request::Permission {
            request_id: "r1".into(),
            answer
        })]
    );
}

#[test]
fn rule_5_a_fresh_restart_starts_only_once_its_forget_is_durable() {
    let t0 = Instant::now();
    let facts = Told {
        recorded: Some("s".into()),
        ..Told::default()
    };
    let restart = |mode| {
        let mut core = running();
        core.restart_at = Some(t0);
        core.handle(
            t0,
            Input::Command(Cmd::Restart {
                mode,
                by_client: true,
            }),
            &facts,
        );
        let asked = drain(&mut core);
        assert_eq!(asked.last(), Some(&Effect::Stop(StopReason::Restart)));
        assert_eq!(core.restart_at, None, "no backoff starts it meanwhile");
        assert!(
            !asked.contains(&Effect::Start),
            "nothing starts before the stop ended"
        );
        core
    };

    let mut fresh = restart(RestartMode::Fresh);
    fresh.handle(
        t0,
        Input::Stopped {
            why: StopReason::Restart,
            released: true,
        },
        &facts,
    );
    let forget = drain(&mut fresh);
    assert!(
        crate::supervisor::core::effect::writes(&forget).any(|w| *w == Write::Session(None)),
        "{forget:?}"
    );
    assert_eq!(
        forget.last(),
        Some(&Effect::ReportCommit(Awaited::Restart(RestartMode::Fresh)))
    );
    assert!(!forget.contains(&Effect::Start));
    let mut failed = restart(RestartMode::Fresh);
    failed.handle(
        t0,
        Input::Stopped {
            why: StopReason::Restart,
            released: true,
        },
        &facts,
    );
    drain(&mut failed);
    fresh.handle(
        t0,
        Input::Committed {
            awaited: Awaited::Restart(RestartMode::Fresh),
            ok: true,
        },
        &facts,
    );
    let started = drain(&mut fresh);
    assert_eq!(
        started.first(),
        Some(&Effect::ForgetKept),
        "the copy goes too"
    );
    assert_eq!(started.last(), Some(&Effect::Start));
    failed.handle(
        t0,
        Input::Committed {
            awaited: Awaited::Restart(RestartMode::Fresh),
            ok: false,
        },
        &facts,
    );
    let parked = drain(&mut failed);
    assert!(parked.contains(&Effect::Park(true)), "{parked:?}");
    assert!(!parked.contains(&Effect::Start) && !parked.contains(&Effect::ForgetKept));

    let mut resume = restart(RestartMode::Resume);
    resume.handle(
        t0,
        Input::Stopped {
            why: StopReason::Restart,
            released: true,
        },
        &facts,
    );
    let again = drain(&mut resume);
    assert_eq!(again.last(), Some(&Effect::Start), "nothing to wait for");
    assert!(!again.contains(&Effect::ForgetKept));

    let mut stuck = restart(RestartMode::Resume);
    stuck.handle(
        t0,
        Input::Stopped {
            why: StopReason::Restart,
            released: false,
        },
        &facts,
    );
    assert_eq!(
        drain(&mut stuck),
        [],
        "never a second process beside a root that outlived SIGKILL"
    );
}

#[test]
fn a_clients_restart_lifts_a_hold_and_ends_a_wait_but_botvisors_own_does_not() {
    let t0 = Instant::now();
    let held = Told::default();
    let asked = |by_client| {
        let mut core = running_from(OnRecord {
            hold: Some(("five_hour".into(), 0)),
            ..OnRecord::default()
        });
        core.limit_until = Some(t0);
        core.handle(
            t0,
            Input::Command(Cmd::Restart {
                mode: RestartMode::Resume,
                by_client,
            }),
            &held,
        );
        (drain(&mut core), core.limit_until)
    };
    let (client, until) = asked(true);
    assert!(
        client.iter().any(
            |e| matches!(e, Effect::Commit { writes, .. } if writes.contains(&Write::Limit(None)))
        ),
        "{client:?}"
    );
    assert_eq!(until, None);
    let (own, until) = asked(false);
    assert_eq!(own, [Effect::Stop(StopReason::Restart)]);
    assert_eq!(until, Some(t0));
}

#[test]
fn a_delete_stops_first_then_marks_the_bot_deleted_and_ends_and_a_shutdown_just_ends() {
    let t0 = Instant::now();
    let facts = Told::default();
    let mut core = running();
    core.handle(t0, Input::Command(Cmd::Delete), &facts);
    assert_eq!(
        drain(&mut core),
        [Effect::Stop(StopReason::Delete)],
        "the agent is stopped before the rows change"
    );
    assert!(core.standing.parked, "nothing starts again");
    let stopped = |why, released| Input::Stopped { why, released };
    core.handle(t0, stopped(StopReason::Delete, false), &facts);
    let marked = drain(&mut core);
    assert!(
        crate::supervisor::core::effect::writes(&marked).any(|w| *w == Write::BotDeleted),
        "deleted whatever the verdict: {marked:?}"
    );
    assert_eq!(marked.last(), Some(&Effect::ReportCommit(Awaited::Delete)));
    let committed = |ok| Input::Committed {
        awaited: Awaited::Delete,
        ok,
    };
    core.handle(t0, committed(true), &facts);
    assert_eq!(drain(&mut core), [Effect::ForgetKept, Effect::End]);
    core.handle(t0, committed(false), &facts);
    assert_eq!(
        drain(&mut core),
        [Effect::End],
        "the copy kept when not deleted"
    );

    let mut down = running();
    down.handle(t0, Input::Command(Cmd::Shutdown), &facts);
    assert_eq!(drain(&mut down), [Effect::Stop(StopReason::Shutdown)]);
    assert!(down.standing.parked, "nothing starts again");
    down.handle(t0, stopped(StopReason::Shutdown, true), &facts);
    assert_eq!(drain(&mut down), [Effect::End], "the record stays as it is");
}

/// A stop shows `stopping` as it begins and `stopped` once its clean-up ended, and a process
/// being stopped takes no message: the state of a stop is the core's, not the shell's.
#[test]
fn a_stop_shows_stopping_then_stopped_and_the_process_takes_no_message_meanwhile() {
    let t0 = Instant::now();
    let mut core = running();
    core.handle(t0, Input::Stopping, &Told::default());
    assert!(matches!(
        drain(&mut core)[..],
        [Effect::State(State::Stopping)]
    ));
    assert!(core.process.as_ref().unwrap().run.stopping);
    core.handle(t0, Input::StopEnded, &Told::default());
    assert!(matches!(
        drain(&mut core)[..],
        [Effect::State(State::Stopped)]
    ));
}

/// What a held bot shows follows its park: `limited` and `login_required` show as `idle` with
/// an agent and `stopped` without; `idle` and `stopped` are said again; any other state stays.
#[test]
fn a_park_shows_a_held_bot_idle_with_an_agent_and_stopped_without() {
    let t0 = Instant::now();
    // Idle and stopped stay as they are shown (nothing new to say).
    let cases = [
        (State::Limited, true, Some(State::Idle)),
        (State::LoginRequired, false, Some(State::Stopped)),
        (State::Idle, true, None),
        (State::Stopped, false, None),
        (State::Busy, true, None),
        (State::Failed, false, None),
    ];
    for (state, running, then) in cases {
        let mut core = loaded(OnRecord::default());
        let told = Told::default();
        show(&mut core, state);
        core.handle(t0, Input::ParkChanged { running }, &told);
        let shown = crate::supervisor::core::effect::states(&drain(&mut core));
        assert_eq!(shown, Vec::from_iter(then), "{state:?}, running {running}");
    }
}

/// A bot whose agent was launched on conversation `s` and waits for a message.
fn idle_agent(_now: Instant) -> BotCore {
    launched()
}

#[test]
fn rule_7_an_idle_agent_makes_way_for_another_holder_and_the_wait_is_said_once_it_is_gone() {
    let t0 = Instant::now();
    let facts = Told::default();
    let mut core = idle_agent(t0);
    core.handle(t0, Input::HolderFound(held_by_a_terminal(t0)), &facts);
    assert_eq!(
        drain(&mut core),
        [Effect::Stop(StopReason::HeldElsewhere)],
        "the agent stops first; nothing is said yet"
    );
    core.handle(t0, stopped_input(StopReason::HeldElsewhere), &facts);
    let after = drain(&mut core);
    assert!(after.contains(&Effect::HeldBy(
        "pid 7: Claude Code in a terminal: claude".into()
    )));
    assert_eq!(after.last(), Some(&Effect::State(State::HeldElsewhere)));

    // Found by a start, with no agent: the wait is said at once.
    let mut core = loaded(OnRecord::default());
    core.handle(t0, Input::HolderFound(held_by_a_terminal(t0)), &facts);
    let at_once = drain(&mut core);
    assert!(!at_once.iter().any(|e| matches!(e, Effect::Stop(_))));
    assert_eq!(at_once.last(), Some(&Effect::State(State::HeldElsewhere)));
}

#[test]
fn rule_6_what_an_agent_takes_at_launch_restarts_it_when_idle_waits_for_its_turn_or_a_hold() {
    let t0 = Instant::now();
    let changed = |held_waits| Input::Command(Cmd::LaunchInputsChanged { held_waits });
    let stops = |e: &[Effect]| {
        e.iter()
            .filter_map(|e| match e {
                Effect::Stop(why) => Some(*why),
                _ => None,
            })
            .collect::<Vec<_>>()
    };
    // Idle, nothing held: restarted on its conversation now.
    let mut core = idle_agent(t0);
    core.handle(t0, changed(true), &Told::default());
    assert_eq!(stops(&drain(&mut core)), [StopReason::Restart]);
    // A limit on record: the idle agent stops as an idle one does; none starts for it.
    let limited = || {
        launched_from(OnRecord {
            hold: Some(("five_hour".into(), 0)),
            ..OnRecord::default()
        })
    };
    let mut core = limited();
    core.handle(t0, changed(true), &Told::default());
    assert_eq!(stops(&drain(&mut core)), [StopReason::Idle]);
    // A conversation continued elsewhere restarts it, limit or not.
    let mut core = limited();
    core.handle(t0, changed(false), &Told::default());
    assert_eq!(stops(&drain(&mut core)), [StopReason::Restart]);
    // A turn in flight: nothing now, the restart once it ends.
    let mut core = running();
    core.handle(t0, changed(true), &Told::default());
    assert!(stops(&drain(&mut core)).is_empty());
    assert!(core.life.restart_when_idle);
    // No agent: the next launch takes it.
    let mut core = loaded(OnRecord::default());
    core.handle(t0, changed(true), &Told::default());
    assert!(drain(&mut core).is_empty());
}

fn stopped_input(why: StopReason) -> Input {
    Input::Stopped {
        why,
        released: true,
    }
}

/// The rules showed `state` (as [`BotCore::emit`] shows it), its effects drained.
fn show(core: &mut BotCore, state: State) {
    core.emit([Effect::State(state)]);
    drain(core);
}
