//! The driven machine across a process's life: its deadlines (idle, start, a holder's look),
//! live settings, interrupts, a crash, a message's write and a launch.

use super::*;

/// The deadlines that came at `now`, looks answered from `facts` ([`answered`]).
fn timeout(core: &mut BotCore, now: Instant, facts: &Told) -> Vec<Effect> {
    core.handle(now, Input::Timeout, facts);
    let effects = drain(core);
    answered(core, now, facts, effects)
}

#[test]
fn rule_12_the_idle_deadline_stops_an_idle_agent_unless_a_client_or_a_descendant_is_there() {
    let t0 = Instant::now();
    let mut core = launched();
    core.idle_at = Some(t0);
    let held = Told {
        holders: 1,
        ..Told::default()
    };
    assert_eq!(timeout(&mut core, t0, &held), [], "a client holds it");
    core.idle_at = Some(t0);
    let working = Told {
        descendant: true,
        ..Told::default()
    };
    let look = Effect::Look(crate::supervisor::core::Look::Descendants(StopReason::Idle));
    let effects = timeout(&mut core, t0, &working);
    assert_eq!(effects, std::slice::from_ref(&look), "a descendant works");
    core.idle_at = Some(t0);
    assert_eq!(
        timeout(&mut core, t0, &Told::default()),
        [look.clone(), Effect::Stop(StopReason::Idle)]
    );
    // A client came between the look and its answer: not stopped.
    core.idle_at = Some(t0);
    core.handle(t0, Input::Timeout, &Told::default());
    assert_eq!(drain(&mut core), [look]);
    let answer = crate::supervisor::core::Looked::Descendants {
        why: StopReason::Idle,
        lives: false,
    };
    core.handle(t0, Input::Looked(answer), &held);
    assert_eq!(drain(&mut core), [], "the answer is judged on what is now");
    assert_eq!(core.poll_timeout(), None, "the deadline is gone");
}

#[test]
fn rule_15_a_start_that_prints_nothing_fails_its_turn_and_stops_the_agent() {
    let t0 = Instant::now();
    let mut core = running();
    core.watch.launched(Some(t0 + Duration::from_secs(60)));
    assert_eq!(timeout(&mut core, t0, &Told::default()), []);
    let late = timeout(&mut core, t0 + Duration::from_secs(61), &Told::default());
    assert!(
        matches!(late.first(), Some(Effect::ClosePrompts(_))),
        "{late:?}"
    );
    assert_eq!(late.last(), Some(&Effect::Stop(StopReason::StartTimeout)));
    assert_eq!(
        finished(&late),
        [(
            "t".into(),
            crate::supervisor::core::decide::TurnOutcome::Error
        )]
    );
}

#[test]
fn rule_7_the_holders_exit_is_seen_at_a_look_and_lets_the_messages_go() {
    let t0 = Instant::now();
    let mut core = loaded(OnRecord::default());
    core.handle(
        t0,
        Input::HolderFound(held_by_a_terminal(t0)),
        &Told::default(),
    );
    assert_eq!(
        drain(&mut core).last(),
        Some(&Effect::State(State::HeldElsewhere))
    );
    let look = Effect::Look(crate::supervisor::core::Look::Holder(
        held_by_a_terminal(t0).identity,
    ));
    assert_eq!(
        timeout(&mut core, t0, &Told::default()),
        [look],
        "still there"
    );
    assert!(core.held.is_some());
    let gone = Told {
        holder_gone: true,
        ..Told::default()
    };
    let later = core.poll_timeout().expect("the next look");
    let effects = timeout(&mut core, later, &gone);
    assert_eq!(effects.last(), Some(&Effect::State(State::Stopped)));
    assert!(core.held.is_none());
}

#[test]
fn rule_6_a_live_setting_goes_to_the_agent_or_is_recorded_for_the_next_start() {
    let t0 = Instant::now();
    let facts = Told::default();
    let mut core = running();
    let ask = |core: &mut BotCore, cmd| {
        core.handle(t0, Input::Command(cmd), &facts);
        drain(core)
    };
    let sent = ask(
        &mut core,
        Cmd::ApplyLive(ControlRequest::SetModel("opus".into())),
    );
    assert_eq!(
        sent,
        [Effect::Send(Request::Control(ControlRequest::SetModel(
            "opus".into()
        )))]
    );
    // Written: its answer is awaited within control_timeout_s.
    core.handle(
        t0,
        Input::ControlWritten {
            request: ControlRequest::SetModel("opus".into()),
            request_id: Some("c1".into()),
        },
        &facts,
    );
    assert!(
        core.poll_timeout()
            .is_some_and(|t| t <= t0 + Duration::from_secs(10))
    );
    // No agent to take it: recorded for the next start.
    let mut stopped = loaded(OnRecord::default());
    let recorded = ask(
        &mut stopped,
        Cmd::ApplyLive(ControlRequest::SetModel("opus".into())),
    );
    assert!(
        crate::supervisor::core::effect::writes(&recorded).any(|w| matches!(w, Write::Setting(_))),
        "{recorded:?}"
    );
}

#[test]
fn an_interrupt_is_awaited_only_once_written() {
    let t0 = Instant::now();
    let facts = Told::default();
    let mut core = running();
    core.handle(t0, Input::Runtime(replay()), &facts);
    drain(&mut core);
    core.handle(t0, Input::Command(Cmd::Interrupt), &facts);
    assert_eq!(
        drain(&mut core),
        [Effect::Send(Request::Control(ControlRequest::Interrupt))]
    );
    assert_eq!(core.turns.interrupting, None, "not before it is written");
    core.handle(
        t0,
        Input::ControlWritten {
            request: ControlRequest::Interrupt,
            request_id: Some("i1".into()),
        },
        &facts,
    );
    assert_eq!(core.turns.interrupting.as_deref(), Some("t"));
    // Its result ends the turn interrupted.
    let ended = event(
        &mut core,
        t0,
        &facts,
        result(ResultOutcome::Error, Some("aborted")),
    );
    assert_eq!(
        finished(&ended),
        [(
            "t".into(),
            crate::supervisor::core::decide::TurnOutcome::Interrupted
        )]
    );
}

#[test]
fn rule_11_a_crash_is_said_cleaned_up_then_backed_off_in_that_order() {
    let t0 = Instant::now();
    let facts = Told {
        recorded: Some("s".into()),
        holders: 1,
        ..Told::default()
    };
    let mut core = running();
    core.handle(t0, Input::Runtime(replay()), &facts);
    drain(&mut core);
    core.handle(
        t0,
        Input::Exited {
            status: crate::process::ExitInfo {
                code: None,
                signal: Some(9),
            },
            stderr: String::new(),
            lived: Duration::from_secs(30),
        },
        &facts,
    );
    let now = drain(&mut core);
    assert!(core.process.is_none());
    assert_eq!(now.first(), Some(&Effect::ProcessGone));
    assert_eq!(
        now.last(),
        Some(&Effect::CleanUp(StopReason::Crashed)),
        "the clean-up comes last: {now:?}"
    );
    assert_eq!(core.restart_at, None, "no backoff before the clean-up");
    core.handle(t0, Input::CleanedUp, &facts);
    let then = drain(&mut core);
    assert!(
        core.restart_at.is_some(),
        "held: restarted after a backoff: {then:?}"
    );
    core.handle(t0, Input::CleanedUp, &facts);
    assert_eq!(drain(&mut core), [], "once");
}

#[test]
fn rule_7_an_open_refused_because_another_process_holds_the_conversation_keeps_the_message() {
    let t0 = Instant::now();
    let facts = Told::default();
    let mut core = running();
    let effects = event(
        &mut core,
        t0,
        &facts,
        RuntimeEvent::OpenFailed {
            error: "thread s already has an active writer".into(),
        },
    );
    assert_eq!(finished(&effects), [], "the message does not fail");
    assert_eq!(core.turns.queue.front().map(|t| t.id.as_str()), Some("t"));
    assert_eq!(effects.last(), Some(&Effect::Stop(StopReason::OpenFailed)));
    assert!(
        !effects.contains(&Effect::Park(true)),
        "not parked: the next start waits for it"
    );
}

#[test]
fn rule_8_a_message_is_written_only_once_where_it_goes_is_durable() {
    let facts = Told::default();
    let now = Instant::now();
    let wall = std::time::SystemTime::UNIX_EPOCH + Duration::from_millis(5);
    let mut core = launched();
    for (id, text) in [("t", "hello"), ("u", "again")] {
        core.handle(
            now,
            Input::Command(Cmd::Queued(QueuedTurn::new(id, text))),
            &facts,
        );
    }
    drain(&mut core);

    // Where it goes is committed, and awaited, before anything is written.
    let deliver = |core: &mut BotCore| {
        core.handle(
            now,
            Input::Deliver {
                session: "s".into(),
                now: wall,
            },
            &facts,
        );
        drain(core)
    };
    let effects = deliver(&mut core);
    assert!(matches!(
        &effects[..],
        [Effect::Commit { writes, .. }, Effect::ReportCommit(Awaited::Delivery)]
            if writes == &[Write::Delivery { turn_id: "t".into(), session_id: "s".into(), at: wall }]
    ));
    // Not durable: nothing is written, and the message waits first again.
    core.handle(
        now,
        Input::Committed {
            awaited: Awaited::Delivery,
            ok: false,
        },
        &facts,
    );
    assert!(drain(&mut core).is_empty());
    assert!(!core.in_flight());

    // Durable: the message is written, and once written the bot is busy.
    deliver(&mut core);
    core.handle(
        now,
        Input::Committed {
            awaited: Awaited::Delivery,
            ok: true,
        },
        &facts,
    );
    assert_eq!(
        drain(&mut core),
        [Effect::Send(Request::Message {
            turn_id: "t".into(),
            text: "hello".into()
        })]
    );
    core.handle(now, Input::Written { ok: true }, &facts);
    // The one written is the turn in flight; the other waits.
    assert_eq!(
        drain(&mut core),
        [Effect::State(State::Busy), Effect::Queued(1)]
    );
    // One message in flight at a time (rule 7).
    assert!(deliver(&mut core).is_empty());
}

#[test]
fn rule_9_a_launched_agent_is_on_record_by_identity_idle_and_watched_from_its_start() {
    let facts = Told::default();
    let now = Instant::now();
    let mut core = loaded(OnRecord::default());
    let root = crate::process::identity::ProcessIdentity {
        pid: 42,
        start_time: 9,
        boot_id: "b".into(),
    };
    core.handle(now, launched_on_s(Some(root.clone())), &facts);
    assert!(matches!(
        &drain(&mut core)[..],
        [Effect::Commit { writes, .. }, Effect::State(State::Idle)]
            if writes == &[Write::Process { identity: root.clone(), root: true }]
    ));
    // The start watchdog: `start_s` (60 s) from the launch.
    assert_eq!(core.poll_timeout(), Some(now + Duration::from_secs(60)));

    core.handle(
        now,
        Input::LaunchFailed {
            text: "cannot start the agent: no such file".into(),
            reason: None,
        },
        &facts,
    );
    let refused = drain(&mut core);
    assert!(matches!(&refused[..], [Effect::Commit { .. }]));
    assert!(core.standing.parked, "nothing starts until a client sends");
}

#[test]
fn issue_31_a_lease_asking_a_warm_start_launches_a_stopped_agent_once() {
    let facts = Told::default();
    let now = Instant::now();
    // No process runs.
    let shell = None;
    let lease = |core: &mut BotCore, holders, warm| {
        core.handle(now, Input::Command(Cmd::Leases { holders, warm }), &facts);
        drain(core)
    };
    let mut core = loaded(OnRecord::default());
    assert!(!core.pump_plan(shell).start, "nothing waits, nothing asked");
    assert!(lease(&mut core, 1, false).is_empty());
    assert!(!core.pump_plan(shell).start, "a lease alone starts nothing");

    // Nothing is recorded by the lease itself (rule 3): no effect at all.
    assert!(lease(&mut core, 1, true).is_empty());
    assert!(core.pump_plan(shell).start, "a warm start");
    core.handle(now, launched_on_s(None), &facts);
    drain(&mut core);
    // A process runs, past its handshake.
    let ready = Some(true);
    assert!(!core.pump_plan(ready).start);
    // Once: the agent that stops later is not started again by the same lease.
    stopped(&mut core, &facts);
    assert!(!core.pump_plan(shell).start, "started once");

    // Asked while an agent runs: nothing to warm.
    let mut core = running();
    lease(&mut core, 1, true);
    assert!(!core.life.warm_start, "nothing to warm");

    // The last lease ends before the start: dropped.
    let mut core = loaded(OnRecord::default());
    lease(&mut core, 2, true);
    lease(&mut core, 1, false);
    assert!(core.pump_plan(shell).start, "another client still holds it");
    lease(&mut core, 0, false);
    assert!(!core.pump_plan(shell).start, "no lease left");

    // A client's Stop drops it too.
    let mut core = loaded(OnRecord::default());
    lease(&mut core, 1, true);
    core.handle(now, Input::Command(Cmd::Stop), &facts);
    drain(&mut core);
    assert!(!core.life.warm_start, "dropped by the Stop");
    assert!(!core.pump_plan(shell).start);
}

/// A stop the shell carried out ended: the process is gone.
fn stopped(core: &mut BotCore, facts: &Told) {
    core.handle(
        Instant::now(),
        Input::ProcessStopped {
            why: StopReason::Stop,
        },
        facts,
    );
    drain(core);
}

#[test]
fn rule_5_a_launch_that_leaves_a_conversation_spawns_only_once_its_forget_was_committed() {
    let now = Instant::now();
    let facts = Told {
        recorded: Some("s".into()),
        ..Told::default()
    };
    let checked = || Input::LaunchChecked {
        can_resume: false,
        fresh: SessionStart::New("n".into()),
        runtime: "codex",
    };
    let mut core = loaded(OnRecord::default());
    core.handle(now, checked(), &facts);
    let first = drain(&mut core);
    assert!(
        matches!(&first[..], [Effect::Commit { writes, .. }, Effect::ReportCommit(Awaited::Forget)]
            if writes.first() == Some(&Write::Session(None))),
        "the forget is committed and awaited first: {first:?}"
    );
    for ok in [false, true] {
        let mut core = loaded(OnRecord::default());
        core.handle(now, checked(), &facts);
        drain(&mut core);
        core.handle(
            now,
            Input::Committed {
                awaited: Awaited::Forget,
                ok,
            },
            &facts,
        );
        let then = drain(&mut core);
        assert!(
            matches!(&then[..], [Effect::Spawn(d)]
                if d.start == SessionStart::New("n".into()) && d.forget.is_some()),
            "the launch goes on, forget committed or not ({ok}): {then:?}"
        );
    }
    // Nothing to leave: the spawn at once.
    let mut core = loaded(OnRecord::default());
    core.handle(
        now,
        Input::LaunchChecked {
            can_resume: true,
            fresh: SessionStart::New("n".into()),
            runtime: "claude",
        },
        &facts,
    );
    let at_once = drain(&mut core);
    assert!(
        matches!(&at_once[..], [Effect::Spawn(d)] if d.start == SessionStart::Resume("s".into())),
        "{at_once:?}"
    );
}
