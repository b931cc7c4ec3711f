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

/// The bot at `path` on the one host.
fn at(path: &str) -> BotKey {
    BotKey::new(0, path)
}

#[test]
fn bots_load_sorted_and_every_chat_is_asked_for_the_selected_first() {
    let mut m = Model::default();
    let calls = m.outcome(Outcome::Bots(
        0,
        vec![info("/b", "zed"), info("/a", "alpha")],
    ));
    assert_eq!(m.selected, Some(at("/a")));
    assert_eq!(
        calls,
        vec![
            Action::Call(Call::LoadChat(at("/a"))),
            Action::Call(Call::LoadChat(at("/b")))
        ]
    );
    // Choosing a bot whose chat is not read yet asks for it first (the queue has it once).
    assert_eq!(m.select(1), vec![Action::Call(Call::LoadChat(at("/b")))]);
    m.outcome(Outcome::Chat(at("/b"), Vec::new()));
    assert_eq!(m.select(-1), vec![Action::Call(Call::LoadChat(at("/a")))]);
    m.outcome(Outcome::Chat(at("/a"), Vec::new()));
    assert_eq!(m.select(1), Vec::new(), "read already");
}

#[test]
fn items_signalled_while_the_chat_is_read_are_kept_once_in_order() {
    let mut m = Model::default();
    m.outcome(Outcome::Bots(0, vec![info("/a", "a")]));
    let now = SystemTime::now();
    m.signal(
        0,
        Signal::Item("/a".into(), Item::new(3, "user", "", r#"{"text":"c"}"#)),
        now,
    );
    let read = vec![
        Item::new(1, "user", "", r#"{"text":"a"}"#),
        Item::new(2, "user", "", r#"{"text":"b"}"#),
        Item::new(3, "user", "", r#"{"text":"c"}"#),
    ];
    m.outcome(Outcome::Chat(at("/a"), read));
    let seqs: Vec<u64> = m.current().unwrap().chat.iter().map(|i| i.seq).collect();
    assert_eq!(seqs, [1, 2, 3]);
}

#[test]
fn the_always_key_takes_the_widest_scope_the_request_offers() {
    let mut m = Model::default();
    let mut a = info("/a", "a");
    a.pending = vec![("r1".into(), "Write".into(), "{}".into())];
    m.outcome(Outcome::Bots(0, vec![a]));
    let asked = Item::new(
        4,
        "permission_request",
        "",
        r#"{"request_id":"r1","scopes":["once","session"]}"#,
    );
    m.signal(0, Signal::Item("/a".into(), asked), SystemTime::now());
    assert_eq!(
        m.key(key('a')),
        vec![Action::Call(Call::Answer {
            bot: at("/a"),
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
    m.outcome(Outcome::Bots(0, vec![a]));
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
    m.signal(0, Signal::Item("/a".into(), asked), SystemTime::now());
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
            bot: at("/a"),
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
    m.outcome(Outcome::Bots(0, vec![info("/a", "a")]));
    m.key(code(KeyCode::Enter));
    for c in "hi q".chars() {
        assert_eq!(m.key(key(c)), Vec::new(), "q is a letter while writing");
    }
    assert_eq!(
        m.key(code(KeyCode::Enter)),
        vec![Action::Call(Call::Send {
            bot: at("/a"),
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
    m.outcome(Outcome::Bots(0, vec![info("/a", "a"), info("/b", "b")]));
    m.signal(0, Signal::Removed("/a".into()), SystemTime::now());
    assert_eq!(m.selected, Some(at("/b")));
    m.signal(0, Signal::DaemonLeft, SystemTime::now());
    assert_eq!(m.hosts[0].daemon, Daemon::Away);
    assert_eq!(
        m.signal(0, Signal::DaemonBack, SystemTime::now()),
        vec![
            Action::Call(Call::LoadBots(0)),
            Action::Call(Call::LoadSchedules(0))
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
        m.signal(0, Signal::SchedulesChanged, now),
        vec![Action::Call(Call::LoadSchedules(0))]
    );
    m.outcome(Outcome::Schedules(
        0,
        HashMap::from([("/b".to_owned(), 42)]),
    ));
    assert_eq!(m.next_fires.get(&at("/b")), Some(&42));
    assert!(
        m.signal(0, Signal::DaemonBack, now)
            .contains(&Action::Call(Call::LoadSchedules(0)))
    );
}

/// Issue 51: two hosts, each with a bot of the same path, kept apart; a host's link down keeps
/// its bots (greyed by the view) and says since when; its link back reads that host alone
/// again; a key's call goes to the selected bot's own host; Tab finds the bot that asks, on
/// whichever host.
#[test]
fn bots_of_several_hosts_are_kept_apart_and_a_host_down_keeps_its_rows() {
    let mut m = Model::new(vec![
        Host::new("local", "c"),
        Host::new("beta", "c -H beta"),
    ]);
    let now = SystemTime::now();
    for h in 0..2 {
        m.signal(h, Signal::Linked(Default::default()), now);
    }
    m.outcome(Outcome::Bots(0, vec![info("/a", "work")]));
    let mut asking = info("/a", "work");
    asking.pending = vec![("r1".into(), "Write".into(), "{}".into())];
    let calls = m.outcome(Outcome::Bots(1, vec![asking, info("/b", "zed")]));
    assert_eq!(m.bots.len(), 3);
    assert!(calls.contains(&Action::Call(Call::LoadChat(BotKey::new(1, "/a")))));
    let names: Vec<String> = m.bots.iter().map(|b| m.shown_name(b)).collect();
    assert_eq!(names, ["local:work", "beta:work", "beta:zed"]);
    // An item signalled on beta goes to beta's bot, not local's of the same path.
    m.signal(
        1,
        Signal::Item("/a".into(), Item::new(1, "user", "", r#"{"text":"b"}"#)),
        now,
    );
    assert!(m.bots[0].chat.is_empty());
    assert_eq!(m.bots[1].chat.len(), 1);

    // Tab: the bot that asks, on beta; its key answers there.
    assert_eq!(m.selected, Some(BotKey::new(0, "/a")));
    m.key(code(KeyCode::Tab));
    assert_eq!(m.selected, Some(BotKey::new(1, "/a")));
    let calls = m.key(key('y'));
    assert!(
        matches!(&calls[..], [Action::Call(c @ Call::Answer { .. })] if c.host() == 1),
        "{calls:?}"
    );

    // beta's link down: its bots stay, its host offline since then, the notice says why.
    let down = now + std::time::Duration::from_secs(5);
    m.signal(1, Signal::Unlinked("the link was lost".into()), down);
    assert_eq!(m.bots.len(), 3);
    assert!(!m.hosts[1].is_up() && m.hosts[0].is_up());
    assert!(m.notice.as_ref().unwrap().0.contains("beta: offline"));
    // A retry that fails keeps the first time it went.
    m.signal(
        1,
        Signal::Unlinked("no answer within 10 s".into()),
        down + std::time::Duration::from_secs(30),
    );
    assert_eq!(
        m.hosts[1].link,
        Link::Offline {
            since: down,
            why: "no answer within 10 s".into(),
            retries: 1,
        }
    );
    // Back: beta alone is read again; a bot gone meanwhile goes, local's are untouched.
    assert_eq!(
        m.signal(1, Signal::Linked(Default::default()), now),
        vec![
            Action::Call(Call::LoadBots(1)),
            Action::Call(Call::LoadSchedules(1))
        ]
    );
    m.outcome(Outcome::Bots(1, vec![info("/b", "zed")]));
    let names: Vec<String> = m.bots.iter().map(|b| m.shown_name(b)).collect();
    assert_eq!(names, ["local:work", "beta:zed"]);
    assert!(m.hosts[1].is_up());
}
