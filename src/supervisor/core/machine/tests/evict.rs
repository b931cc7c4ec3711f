//! Issue 31 at the bot: a stop for memory pressure, asked by the supervisor, happens only when
//! every sign says idle, says so in the chat first, and is never a client's Stop (not parked);
//! and what counts as a use of the bot.

use super::*;

const S: Duration = Duration::from_secs(1);

/// A core whose agent runs with nothing to do.
fn idle_agent() -> BotCore {
    launched()
}

/// What memory pressure did to the bot, its look for descendants answered from `facts` and
/// left out.
fn pressure(core: &mut BotCore, now: Instant, facts: &Told) -> Vec<Effect> {
    core.handle(now, Input::Command(Cmd::MemoryPressure), facts);
    let effects = drain(core);
    answered(core, now, facts, effects)
        .into_iter()
        .filter(|e| !matches!(e, Effect::Look(_)))
        .collect()
}

/// The `system` items the effects commit.
fn system_items(effects: &[Effect]) -> Vec<serde_json::Value> {
    crate::supervisor::core::effect::writes(effects)
        .filter_map(|w| match w {
            Write::Chat { kind, payload, .. } if kind == "system" => {
                Some(serde_json::from_str(payload).unwrap())
            }
            _ => None,
        })
        .collect()
}

#[test]
fn issue_31_an_idle_agent_is_stopped_for_memory_pressure_saying_so_first() {
    let t0 = Instant::now();
    let mut core = idle_agent();
    core.last_used = Some(t0);
    let effects = pressure(&mut core, t0 + 725 * S, &Told::default());
    assert_eq!(effects.len(), 2, "{effects:?}");
    assert!(matches!(effects[0], Effect::Commit { .. }), "said first");
    assert_eq!(effects[1], Effect::Stop(StopReason::MemoryPressure));
    let items = system_items(&effects);
    assert_eq!(items.len(), 1);
    assert_eq!(items[0]["reason"], "memory_pressure");
    assert_eq!(items[0]["idle_s"], 725);
    assert!(
        !effects.iter().any(|e| matches!(e, Effect::Park(_))),
        "not parked: the next message resumes the conversation"
    );
}

/// Every "never" of issue 31, checked at the bot with its own facts (the supervisor's order may
/// be a moment old): nothing is said and nothing stopped.
#[test]
fn issue_31_never_a_turn_a_queue_a_prompt_a_task_a_descendant_a_holder_or_no_agent() {
    let t0 = Instant::now();
    let mut queued = idle_agent();
    queued.turns.queue(QueuedTurn::new("q", "later"));
    let mut tasks = idle_agent();
    tasks.background_tasks = 1;
    let mut stopping = idle_agent();
    stopping.process.as_mut().unwrap().run.stopping = true;
    let cases: Vec<(&str, BotCore, Told)> = vec![
        ("a turn in flight", running(), Told::default()),
        ("a queued message", queued, Told::default()),
        (
            "an open permission prompt",
            idle_agent(),
            Told {
                prompts: 1,
                ..Told::default()
            },
        ),
        ("a background task", tasks, Told::default()),
        (
            "a live descendant",
            idle_agent(),
            Told {
                descendant: true,
                ..Told::default()
            },
        ),
        (
            "a holder",
            idle_agent(),
            Told {
                holders: 1,
                ..Told::default()
            },
        ),
        ("no agent", loaded(OnRecord::default()), Told::default()),
        ("an agent being stopped", stopping, Told::default()),
    ];
    for (what, mut core, facts) in cases {
        assert_eq!(pressure(&mut core, t0, &facts), [], "{what}");
    }
}

#[test]
fn issue_31_used_is_a_launch_a_clients_command_or_a_turns_end() {
    let t0 = Instant::now();
    let facts = Told::default();
    let mut core = loaded(OnRecord::default());
    assert_eq!(core.last_used(), None, "never used in this run");
    core.handle(t0, launched_on_s(None), &facts);
    drain(&mut core);
    assert_eq!(core.last_used(), Some(t0), "a launch");
    core.handle(
        t0 + S,
        Input::Command(Cmd::Queued(QueuedTurn::new("t", "hello"))),
        &facts,
    );
    drain(&mut core);
    assert_eq!(core.last_used(), Some(t0 + S), "a message sent");
    core.turns.deliver("s", std::time::SystemTime::UNIX_EPOCH);
    event(&mut core, t0 + 2 * S, &facts, replay());
    assert_eq!(core.last_used(), Some(t0 + S), "a replay is no use");
    event(
        &mut core,
        t0 + 3 * S,
        &facts,
        result(ResultOutcome::Success, None),
    );
    assert_eq!(core.last_used(), Some(t0 + 3 * S), "a turn's end");
    core.handle(
        t0 + 4 * S,
        Input::Command(Cmd::Leases {
            holders: 1,
            warm: false,
        }),
        &facts,
    );
    assert_eq!(drain(&mut core), [], "a lease changes nothing else");
    assert_eq!(
        core.last_used(),
        Some(t0 + 4 * S),
        "a lease taken or given back"
    );
    core.handle(t0 + 5 * S, Input::Timeout, &facts);
    drain(&mut core);
    assert_eq!(core.last_used(), Some(t0 + 4 * S), "a deadline is no use");
    pressure(&mut core, t0 + 6 * S, &facts);
    assert_eq!(
        core.last_used(),
        Some(t0 + 4 * S),
        "memory pressure is botvisor's own, no use"
    );
}
