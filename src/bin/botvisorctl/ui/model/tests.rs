use super::*;

fn info(path: &str, name: &str) -> BotInfo {
    BotInfo {
        path: path.into(),
        id: format!("{:0>32}", path.trim_start_matches('/')),
        name: name.into(),
        state: "idle".into(),
        ..BotInfo::default()
    }
}

fn key(c: char) -> KeyEvent {
    KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE)
}

fn code(c: KeyCode) -> KeyEvent {
    KeyEvent::new(c, KeyModifiers::NONE)
}

#[test]
fn bots_load_sorted_and_every_chat_is_asked_for_the_selected_first() {
    let mut m = Model::default();
    let calls = m.outcome(Outcome::Bots(vec![info("/b", "zed"), info("/a", "alpha")]));
    assert_eq!(m.selected.as_deref(), Some("/a"));
    assert_eq!(
        calls,
        vec![
            Action::Call(Call::LoadChat("/a".into())),
            Action::Call(Call::LoadChat("/b".into()))
        ]
    );
    // Choosing a bot whose chat is not read yet asks for it first (the queue has it once).
    assert_eq!(m.select(1), vec![Action::Call(Call::LoadChat("/b".into()))]);
    m.outcome(Outcome::Chat("/b".into(), Vec::new()));
    assert_eq!(
        m.select(-1),
        vec![Action::Call(Call::LoadChat("/a".into()))]
    );
    m.outcome(Outcome::Chat("/a".into(), Vec::new()));
    assert_eq!(m.select(1), Vec::new(), "read already");
}

#[test]
fn items_signalled_while_the_chat_is_read_are_kept_once_in_order() {
    let mut m = Model::default();
    m.outcome(Outcome::Bots(vec![info("/a", "a")]));
    let now = SystemTime::now();
    m.signal(
        Signal::Item("/a".into(), Item::new(3, "user", "", r#"{"text":"c"}"#)),
        now,
    );
    let read = vec![
        Item::new(1, "user", "", r#"{"text":"a"}"#),
        Item::new(2, "user", "", r#"{"text":"b"}"#),
        Item::new(3, "user", "", r#"{"text":"c"}"#),
    ];
    m.outcome(Outcome::Chat("/a".into(), read));
    let seqs: Vec<u64> = m.current().unwrap().chat.iter().map(|i| i.seq).collect();
    assert_eq!(seqs, [1, 2, 3]);
}

#[test]
fn the_always_key_takes_the_widest_scope_the_request_offers() {
    let mut m = Model::default();
    let mut a = info("/a", "a");
    a.pending = vec![("r1".into(), "Write".into(), "{}".into())];
    m.outcome(Outcome::Bots(vec![a]));
    let asked = Item::new(
        4,
        "permission_request",
        "",
        r#"{"request_id":"r1","scopes":["once","session"]}"#,
    );
    m.signal(Signal::Item("/a".into(), asked), SystemTime::now());
    assert_eq!(
        m.key(key('a')),
        vec![Action::Call(Call::Answer {
            bot: "/a".into(),
            request: "r1".into(),
            behavior: "allow",
            scope: "session".into(),
            message: String::new(),
        })]
    );
    // A deny asks what to tell the model first.
    assert_eq!(m.key(key('n')), Vec::new());
    for c in "not here".chars() {
        m.key(key(c));
    }
    let calls = m.key(code(KeyCode::Enter));
    assert!(
        matches!(&calls[0], Action::Call(Call::Answer { behavior: "deny", message, .. }) if message == "not here"),
        "{calls:?}"
    );
}

/// Issue 46: a Codex command's request offers its program from now on (`p`), and says what
/// each key lets run; `p` does nothing where it is not offered.
#[test]
fn the_program_key_allows_the_commands_program_where_offered() {
    let mut m = Model::default();
    let mut a = info("/a", "a");
    a.pending = vec![("r1".into(), "commandExecution".into(), "{}".into())];
    m.outcome(Outcome::Bots(vec![a]));
    assert_eq!(
        m.key(key('p')),
        Vec::new(),
        "not offered (its item not read)"
    );
    let asked = Item::new(
        4,
        "permission_request",
        "",
        r#"{"request_id":"r1","scopes":["once","session","always","program"],
            "reach":{"once":"this command, this time","program":"every `touch` command"}}"#,
    );
    m.signal(Signal::Item("/a".into(), asked), SystemTime::now());
    let b = m.current().unwrap();
    assert_eq!(b.reach("r1", "program"), Some("every `touch` command"));
    assert_eq!(
        b.reach("r1", "session"),
        Some("session"),
        "no words: its name"
    );
    assert_eq!(b.widest_scope("r1"), "always");
    assert_eq!(
        m.key(key('p')),
        vec![Action::Call(Call::Answer {
            bot: "/a".into(),
            request: "r1".into(),
            behavior: "allow",
            scope: "program".into(),
            message: String::new(),
        })]
    );
}

#[test]
fn writing_a_message_sends_it_and_escape_drops_it() {
    let mut m = Model::default();
    m.outcome(Outcome::Bots(vec![info("/a", "a")]));
    m.key(code(KeyCode::Enter));
    for c in "hi q".chars() {
        assert_eq!(m.key(key(c)), Vec::new(), "q is a letter while writing");
    }
    assert_eq!(
        m.key(code(KeyCode::Enter)),
        vec![Action::Call(Call::Send {
            bot: "/a".into(),
            text: "hi q".into()
        })]
    );
    m.key(code(KeyCode::Enter));
    m.key(key('x'));
    m.key(code(KeyCode::Esc));
    assert_eq!(m.mode, Mode::Normal);
    assert_eq!(m.key(key('q')), vec![Action::Quit]);
}

#[test]
fn a_removed_bot_moves_the_selection_and_a_returning_daemon_reloads() {
    let mut m = Model::default();
    m.outcome(Outcome::Bots(vec![info("/a", "a"), info("/b", "b")]));
    m.signal(Signal::Removed("/a".into()), SystemTime::now());
    assert_eq!(m.selected.as_deref(), Some("/b"));
    m.signal(Signal::DaemonLeft, SystemTime::now());
    assert_eq!(m.daemon, Daemon::Away);
    assert_eq!(
        m.signal(Signal::DaemonBack, SystemTime::now()),
        vec![
            Action::Call(Call::LoadBots),
            Action::Call(Call::LoadSchedules)
        ]
    );
}

#[test]
fn long_texts_are_cut_for_the_screen() {
    let big = "x".repeat(KEPT_TEXT * 3);
    let item = Item::new(
        1,
        "assistant",
        "",
        &serde_json::json!({ "text": big }).to_string(),
    );
    assert_eq!(
        item.payload["text"].as_str().unwrap().chars().count(),
        KEPT_TEXT + 1
    );
}

/// Issue 49: a change of the schedules reads them again, and what is read is each bot's next
/// fire; botvisord back reads them again too.
#[test]
fn the_schedules_are_read_again_when_they_change() {
    let mut m = Model::default();
    let now = SystemTime::now();
    assert_eq!(
        m.signal(Signal::SchedulesChanged, now),
        vec![Action::Call(Call::LoadSchedules)]
    );
    m.outcome(Outcome::Schedules(HashMap::from([("/b".to_owned(), 42)])));
    assert_eq!(m.next_fires.get("/b"), Some(&42));
    assert!(
        m.signal(Signal::DaemonBack, now)
            .contains(&Action::Call(Call::LoadSchedules))
    );
}
