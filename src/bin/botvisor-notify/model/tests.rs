use super::*;

const BOT: &str = "/org/botvisor/Botvisor1/aaaa";

fn props(state: &str, holders: u32, pending: Vec<Pending>) -> Props {
    Props {
        id: Some("aaaabbbbccccddddeeeeffff00001111".into()),
        name: Some("demo".into()),
        state: Some(state.into()),
        holders: Some(holders),
        pending: Some(pending),
        last_error: Some(String::new()),
        limit_kind: Some(String::new()),
        limit_resets_at: Some(0),
    }
}

fn model() -> Model {
    let mut m = Model::new(NotifyConfig::default());
    m.daemon_back(vec![(BOT.into(), props("idle", 0, vec![]))]);
    m
}

fn changed(m: &mut Model, p: Props) -> Out {
    m.apply(Signal::Changed {
        path: BOT.into(),
        props: p,
    })
}

fn pending(ids: &[&str]) -> Props {
    Props {
        pending: Some(
            ids.iter()
                .map(|id| {
                    (
                        (*id).into(),
                        "Write".into(),
                        r#"{"file_path":"/w/a"}"#.into(),
                    )
                })
                .collect(),
        ),
        ..Props::default()
    }
}

#[test]
fn a_request_is_shown_one_at_a_time_and_answered_by_its_token() {
    let mut m = model();
    changed(&mut m, pending(&["r1", "r2"]));
    let n = m.note(BOT, Kind::Permission).expect("a note");
    assert_eq!(n.tag, "r1");
    assert_eq!(n.summary, "demo asks to use Write");
    assert!(
        n.body.contains("file_path: /w/a") && n.body.contains("(1 more request waiting)"),
        "{}",
        n.body
    );
    assert_eq!(
        n.answer_line.as_deref(),
        Some("Answer: botvisorctl answer aaaabbbb r1 allow|deny")
    );
    // The button says how far it reaches: this request only.
    assert_eq!(n.actions[0].1, "Allow once");
    let allow = n.actions[0].0.clone();
    let key = Key::new(BOT, Kind::Permission);
    assert_eq!(
        m.action(&key, &allow),
        Some(Do::Answer {
            path: BOT.into(),
            request_id: "r1".into(),
            behavior: "allow"
        })
    );
    // Answered here: the next one shows at once, before botvisord confirms.
    assert_eq!(m.note(BOT, Kind::Permission).unwrap().tag, "r2");
    // A token that is not this bot's open request does nothing.
    assert_eq!(m.action(&key, "allow-999"), None);
    assert_eq!(m.action(&Key::new(BOT, Kind::State), &allow), None);
    changed(&mut m, pending(&[]));
    assert_eq!(m.note(BOT, Kind::Permission), None);
}

#[test]
fn a_held_bot_shows_nothing() {
    let mut m = model();
    changed(
        &mut m,
        Props {
            holders: Some(1),
            ..pending(&["r1"])
        },
    );
    assert_eq!(m.note(BOT, Kind::Permission), None);
    m.apply(Signal::TurnFinished {
        path: BOT.into(),
        turn_id: "t".into(),
        outcome: "success".into(),
    });
    assert_eq!(m.note(BOT, Kind::Turn), None);
    changed(
        &mut m,
        Props {
            state: Some("failed".into()),
            ..Props::default()
        },
    );
    assert_eq!(m.note(BOT, Kind::State), None);
    // Released: the open question shows again; what was seen while held does not.
    changed(
        &mut m,
        Props {
            holders: Some(0),
            ..Props::default()
        },
    );
    assert!(m.note(BOT, Kind::Permission).is_some());
    assert_eq!(m.note(BOT, Kind::State), None);
    assert_eq!(m.note(BOT, Kind::Turn), None);
    let mut m = Model::new(NotifyConfig {
        when_held: true,
        ..NotifyConfig::default()
    });
    m.daemon_back(vec![(BOT.into(), props("idle", 1, vec![]))]);
    changed(&mut m, pending(&["r1"]));
    assert!(m.note(BOT, Kind::Permission).is_some());
}

#[test]
fn a_turn_that_ends_unattended_shows_once_until_the_next_turn() {
    let mut m = model();
    m.apply(Signal::ChatItem {
        path: BOT.into(),
        kind: "assistant".into(),
        payload: r#"{"text":"All done.","turn_id":"t1"}"#.into(),
    });
    m.apply(Signal::ChatItem {
        path: BOT.into(),
        kind: "turn_finished".into(),
        payload: r#"{"turn_id":"t1","outcome":"success","text":""}"#.into(),
    });
    let out = m.apply(Signal::TurnFinished {
        path: BOT.into(),
        turn_id: "t1".into(),
        outcome: "success".into(),
    });
    assert_eq!(out.happenings[0].event, "turn_finished");
    assert_eq!(out.happenings[0].json["reply"], "All done.");
    let n = m.note(BOT, Kind::Turn).unwrap();
    assert_eq!(
        (n.summary.as_str(), n.body.as_str(), n.urgency),
        ("demo finished", "All done.", LOW)
    );
    m.dismissed(&Key::new(BOT, Kind::Turn), "t1");
    assert_eq!(m.note(BOT, Kind::Turn), None);
    m.apply(Signal::TurnFinished {
        path: BOT.into(),
        turn_id: "t2".into(),
        outcome: "error".into(),
    });
    assert!(m.note(BOT, Kind::Turn).is_some());
    changed(
        &mut m,
        Props {
            state: Some("busy".into()),
            ..Props::default()
        },
    );
    assert_eq!(m.note(BOT, Kind::Turn), None);
    // An interrupt is someone's act: not shown.
    m.apply(Signal::TurnFinished {
        path: BOT.into(),
        turn_id: "t3".into(),
        outcome: "interrupted".into(),
    });
    assert_eq!(m.note(BOT, Kind::Turn), None);
}

#[test]
fn states_are_names_and_each_entry_shows_once() {
    let mut m = model();
    let out = changed(
        &mut m,
        Props {
            state: Some("held_elsewhere".into()),
            last_error: Some("in use by pid 7".into()),
            ..Props::default()
        },
    );
    let events: Vec<&str> = out.happenings.iter().map(|h| h.event.as_str()).collect();
    assert_eq!(events, ["state_changed", "held_elsewhere"]);
    let n = m.note(BOT, Kind::State).unwrap();
    assert!(n.body.starts_with("in use by pid 7"), "{}", n.body);
    assert_eq!(n.category, "x-botvisor.held-elsewhere");
    m.dismissed(&Key::new(BOT, Kind::State), "held_elsewhere");
    assert_eq!(m.note(BOT, Kind::State), None);
    changed(
        &mut m,
        Props {
            state: Some("idle".into()),
            ..Props::default()
        },
    );
    changed(
        &mut m,
        Props {
            state: Some("failed".into()),
            ..Props::default()
        },
    );
    let n = m.note(BOT, Kind::State).unwrap();
    assert_eq!((n.summary.as_str(), n.urgency), ("demo failed", CRITICAL));
    // A turn's end beside a state that says more: one note.
    m.apply(Signal::TurnFinished {
        path: BOT.into(),
        turn_id: "t".into(),
        outcome: "crashed".into(),
    });
    assert_eq!(m.note(BOT, Kind::Turn), None);
    let mut m = Model::new(NotifyConfig {
        states: vec!["stopping".into()],
        ..NotifyConfig::default()
    });
    m.daemon_back(vec![(BOT.into(), props("stopping", 0, vec![]))]);
    assert_eq!(
        m.note(BOT, Kind::State).unwrap().summary,
        "demo is stopping"
    );
}

#[test]
fn the_hooks_hear_each_request_once_and_botvisord_leaving() {
    let mut m = model();
    let out = m.apply(Signal::PermissionRequested {
        path: BOT.into(),
        request_id: "r1".into(),
        tool: "Bash".into(),
        input_json: r#"{"command":"ls"}"#.into(),
    });
    assert_eq!(out.happenings[0].json["input"]["command"], "ls");
    assert_eq!(out.happenings[0].json["bot"]["name"], "demo");
    changed(&mut m, pending(&["r1"]));
    let out = m.daemon_back(vec![(
        BOT.into(),
        props(
            "busy",
            0,
            vec![
                ("r1".into(), "Bash".into(), "{}".into()),
                ("r2".into(), "Bash".into(), "{}".into()),
            ],
        ),
    )]);
    let events: Vec<(&str, &Value)> = out
        .happenings
        .iter()
        .map(|h| (h.event.as_str(), &h.json["request_id"]))
        .collect();
    assert_eq!(
        events,
        [
            ("daemon_back", &Value::Null),
            ("permission_requested", &json!("r2"))
        ]
    );
    let out = m.daemon_left();
    assert_eq!(out.happenings[0].event, "daemon_left");
    assert_eq!(m.note(BOT, Kind::Permission), None);
    // A bot botvisord no longer has is gone when it is back.
    let out = m.daemon_back(vec![]);
    assert!(out.touched.contains(&BOT.to_owned()));
    assert_eq!(m.note(BOT, Kind::State), None);
}

#[test]
fn signals_of_unknown_bots_change_nothing() {
    let mut m = model();
    let out = m.apply(Signal::Changed {
        path: "/org/botvisor/Botvisor1/zz".into(),
        props: pending(&["x"]),
    });
    assert!(out.touched.is_empty() && out.happenings.is_empty());
    assert_eq!(
        m.action(&Key::new("/nope", Kind::Permission), "allow-1"),
        None
    );
}

/// Issue 49: a scheduled prompt sent, skipped or not sent is an event for the hooks, with the
/// schedule's id and due time; a user's own message is none.
#[test]
fn a_schedules_fire_skip_and_failure_are_hook_events() {
    let mut m = model();
    let item = |kind: &str, payload: serde_json::Value| Signal::ChatItem {
        path: BOT.into(),
        kind: kind.into(),
        payload: payload.to_string(),
    };
    let schedule = json!({"id": "5c4e", "due": 1_796_601_600, "by": "timer"});
    let out = m.apply(item("user", json!({"text": "hello", "turn_id": "t0"})));
    assert!(out.happenings.is_empty());
    let out = m.apply(item(
        "user",
        json!({"text": "check the deps", "turn_id": "t1", "schedule": schedule}),
    ));
    assert_eq!(out.happenings.len(), 1);
    let h = &out.happenings[0];
    assert_eq!(h.event, "schedule_fired");
    assert_eq!(h.json["schedule"]["due"], 1_796_601_600);
    assert_eq!(h.json["turn_id"], "t1");
    assert_eq!(h.json["body"], "check the deps");
    for (reason, said) in [
        ("schedule_skipped", "skipped"),
        ("schedule_failed", "not sent"),
    ] {
        let out = m.apply(item(
            "system",
            json!({"text": "The scheduled prompt was skipped: busy.", "reason": reason, "schedule": schedule}),
        ));
        assert_eq!(out.happenings.len(), 1, "{reason}");
        assert_eq!(out.happenings[0].event, reason);
        assert_eq!(
            out.happenings[0].json["summary"],
            format!("demo: scheduled prompt {said}")
        );
    }
}

#[test]
fn a_skipped_or_failed_fire_shows_on_the_desktop_until_dismissed_or_seen() {
    let mut m = model();
    let missed = |m: &mut Model, reason: &str, due: u64| {
        m.apply(Signal::ChatItem {
            path: BOT.into(),
            kind: "system".into(),
            payload: json!({
                "text": "The scheduled prompt was skipped: demo is busy.",
                "reason": reason,
                "schedule": {"id": "5c4e", "due": due, "by": "timer"},
            })
            .to_string(),
        })
    };
    assert_eq!(m.note(BOT, Kind::Schedule), None);
    let out = missed(&mut m, "schedule_skipped", 100);
    assert_eq!(out.touched, [BOT.to_owned()], "the desktop is told");
    let n = m.note(BOT, Kind::Schedule).expect("a note");
    assert_eq!(
        (
            n.tag.as_str(),
            n.summary.as_str(),
            n.body.as_str(),
            n.category.as_str()
        ),
        (
            "5c4e@100",
            "demo: scheduled prompt skipped",
            "The scheduled prompt was skipped: demo is busy.",
            "x-botvisor.schedule-skipped"
        )
    );
    m.dismissed(&Key::new(BOT, Kind::Schedule), "5c4e@100");
    assert_eq!(m.note(BOT, Kind::Schedule), None, "dismissed");
    missed(&mut m, "schedule_failed", 200);
    let n = m.note(BOT, Kind::Schedule).expect("the next one shows");
    assert_eq!(
        (n.tag.as_str(), n.category.as_str()),
        ("5c4e@200", "x-botvisor.schedule-failed")
    );
    // An older tag dismissed changes nothing.
    m.dismissed(&Key::new(BOT, Kind::Schedule), "5c4e@100");
    assert!(m.note(BOT, Kind::Schedule).is_some());
    // Someone looks at the bot: seen.
    changed(&mut m, props("idle", 1, vec![]));
    assert_eq!(m.note(BOT, Kind::Schedule), None, "seen by its holder");
}
