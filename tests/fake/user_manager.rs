//! botvisor installed by `scripts/install.sh` into a real `systemd --user` manager
//! ([`support::user_manager`]), its bots run by the fake CLI: D-Bus activation through systemd,
//! `systemctl --user stop`, and (issue 47) what a restart or a crash of the unit does to a turn
//! in flight. Each test prints `skipped: …` where no user manager can run (not root, no systemd,
//! no dbus-user-session), and fails there instead with `BOTVISOR_TEST_REQUIRE_SYSTEMD` set.
//!
//! Issue 47: a restart or a crash of the unit keeps the agent and its turn in flight (each agent
//! in its own scope, its pipes in the unit's file descriptor store).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::json;
use support::user_manager::{self, UserManager};
use support::*;

use botvisor::dbus::BUS_NAME;
use botvisor::dbus::client::{BotProxy, ManagerProxy};

const UNIT: &str = "botvisord.service";

/// How long the unit's store and the agents' scopes may take to settle after the last stop.
const SETTLE: Duration = Duration::from_secs(10);

/// A test's environment and a user manager into which botvisor is installed, with the fake
/// CLI recorded as `claude_bin`; `None` when no user manager can run here (after the skip line).
/// The manager is dropped before the environment (the tuple's order).
pub(crate) async fn installed() -> Option<(TestEnv, UserManager)> {
    if !user_manager::usable() {
        return None;
    }
    let env = TestEnv::new().await;
    let um = UserManager::start(&env);
    let fake = fake_cli();
    let out = um.install(
        &user_manager::bin_dir(),
        &[("CLAUDE_BIN", fake.to_str().unwrap())],
    );
    assert!(
        out.contains("installed the systemd user unit"),
        "install.sh found the user manager: {out}"
    );
    assert!(
        out.contains("the session bus lists org.botvisor.Botvisor1 now"),
        "{out}"
    );
    Some((env, um))
}

/// Creates a bot, through `conn`, whose fake CLI follows `plan` and carries the test's marker;
/// the fake's state folder is `fake-state/` of the test's folder.
pub(crate) async fn fake_bot(
    env: &TestEnv,
    conn: &zbus::Connection,
    plan: serde_json::Value,
) -> BotProxy<'static> {
    let bot_env = fake_env(&env.home, &state(env), plan, &env.marker);
    let work = env.work.to_str().unwrap().to_owned();
    let path = bounded("CreateBot", async {
        ManagerProxy::new(conn)
            .await
            .unwrap()
            .create_bot(create_options(&work, &bot_env))
            .await
            .unwrap()
    })
    .await;
    BotProxy::builder(conn).path(path).build().await.unwrap()
}

pub(crate) fn state(env: &TestEnv) -> std::path::PathBuf {
    env.dir.path().join("fake-state")
}

/// The start time of process `pid` (field 22 of `/proc/<pid>/stat`, in clock ticks since
/// boot), or `None` when it is gone or a zombie: a pid with the same start time is the same
/// process.
fn started_at(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    if matches!(fields.first(), Some(&"Z") | Some(&"X")) {
        return None;
    }
    fields.get(19)?.parse().ok()
}

/// The cgroup v2 path of `pid` (its `0::` line), empty when gone.
fn cgroup_of(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .unwrap_or_default()
        .to_owned()
}

/// The `turn_finished` chat items of `turn`, as `(outcome, reason)`, once there is one: polls
/// the stored chat every 100 ms, at most [`EVENT_TIMEOUT`].
async fn turn_end(bot: &BotProxy<'_>, turn: &str) -> Vec<(String, String)> {
    let ends = turn_ended(bot, turn).await;
    assert!(
        !ends.is_empty(),
        "turn {turn} did not end within {EVENT_TIMEOUT:?}"
    );
    ends
}

/// [`turn_end`], empty when the turn did not end within [`EVENT_TIMEOUT`].
async fn turn_ended(bot: &BotProxy<'_>, turn: &str) -> Vec<(String, String)> {
    let deadline = Instant::now() + EVENT_TIMEOUT;
    loop {
        let ends: Vec<(String, String)> = bounded("GetChat", chat(bot))
            .await
            .into_iter()
            .filter(|(_, kind, p)| kind == "turn_finished" && p["turn_id"] == turn)
            .map(|(_, _, p)| {
                (
                    p["outcome"].as_str().unwrap_or_default().to_owned(),
                    p["reason"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect();
        if !ends.is_empty() || Instant::now() >= deadline {
            return ends;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `systemctl --user stop botvisord`, then: the unit is inactive, its fd store empty, and no
/// process of the test runs.
fn stop_and_check(env: &TestEnv, um: &UserManager) {
    um.systemctl_ok(&["stop", "botvisord"]);
    assert_eq!(um.unit_property(UNIT, "ActiveState"), "inactive");
    assert_eq!(um.unit_property(UNIT, "NFileDescriptorStore"), "0");
    let left = env.leftovers();
    assert!(
        left.is_empty(),
        "systemctl --user stop botvisord left these running: {left:?}"
    );
}

/// The installed unit is started by the first D-Bus call (systemd, not the bus, runs it: its
/// pid is the unit's `MainPID`, in the unit's cgroup), a bot answers, and `systemctl --user
/// stop botvisord` stops the bot's agent with it and leaves the fd store empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_call_starts_the_installed_unit_and_a_stop_of_the_unit_ends_its_agents() {
    let Some((env, um)) = installed().await else {
        return;
    };
    assert_eq!(um.unit_property(UNIT, "ActiveState"), "inactive");
    let conn = um.connect().await;
    let manager = ManagerProxy::new(&conn).await.unwrap();
    let bots = bounded("ListBots, by activation", manager.list_bots()).await;
    assert_eq!(
        bots.unwrap_or_else(|e| panic!("{e}\n{}", um.log_text())),
        []
    );
    assert_eq!(um.unit_property(UNIT, "ActiveState"), "active");
    let main = um.main_pid(UNIT);
    let owner = zbus::fdo::DBusProxy::new(&conn)
        .await
        .unwrap()
        .get_connection_unix_process_id(BUS_NAME.try_into().unwrap())
        .await
        .unwrap();
    assert_eq!(owner, main, "the name's owner is the unit's main process");
    let unit_cgroup = um.unit_property(UNIT, "ControlGroup");
    assert!(
        unit_cgroup.ends_with("/app.slice/botvisord.service"),
        "{unit_cgroup}"
    );
    assert!(
        cgroup_of(main).starts_with(&unit_cgroup),
        "{} is not in {unit_cgroup}",
        cgroup_of(main)
    );
    assert_eq!(um.unit_property(UNIT, "NRestarts"), "0");
    // Not asserted: systemd 252's user manager marks no cgroup delegated (neither
    // `trusted.delegate` nor `user.delegate`, on either hierarchy), so botvisord says
    // `process-tree` here although the unit has `Delegate=yes`.
    eprintln!(
        "Containment under the user manager: {}",
        manager.containment().await.unwrap()
    );

    let bot = fake_bot(&env, &conn, json!([{"mode": "normal"}])).await;
    let turn = send_and_wait(&bot, "hello through systemd").await;
    assert_eq!(turn.outcome, "success", "{:?}", turn.items);
    assert!(
        turn.items
            .iter()
            .any(|(_, kind, p)| kind == "assistant" && p["text"] == "fake: hello through systemd"),
        "{:?}",
        turn.items
    );
    let agent = bot.process_id().await.unwrap();
    assert_ne!(agent, 0, "the agent stays for the next message");
    // Issue 47: in a scope of its own under botvisor.slice, not in the unit's cgroup.
    let id = bot.id().await.unwrap();
    let scope = format!("/botvisor.slice/botvisor-bot-{id}.scope");
    assert!(
        cgroup_of(agent).ends_with(&scope) && !cgroup_of(agent).starts_with(&unit_cgroup),
        "the agent runs in its own scope, not in the unit's {unit_cgroup}: {}",
        cgroup_of(agent)
    );
    assert!(
        um.journal(&["--user-unit", UNIT])
            .contains("botvisord is serving"),
        "botvisord logs to the journal under its unit:\n{}",
        um.journal(&[])
    );

    stop_and_check(&env, &um);
    assert_eq!(started_at(agent), None, "the agent ({agent}) is gone");
}

/// What issue 47 wants of a restart of botvisord (an upgrade, `systemctl --user restart`) or a
/// crash of it: a turn in flight goes on in the same agent, and ends `success`, once. `disrupt`
/// does it to the unit; `crash` says that it is a crash, which `Restart=on-failure` undoes
/// (`NRestarts` 1), rather than a restart job (`NRestarts` 0).
///
/// Before issue 47 (0b697c4) the agent did not survive either: at a restart botvisord stopped
/// it, at a crash systemd killed it with the unit (`KillMode=mixed`); the next botvisord
/// launched the CLI again, which was asked the message again and answered it, so the turn still
/// ended `success`, once, but from a second agent (launch 1): both tests failed so.
async fn a_turn_in_flight_survives(disrupt: impl FnOnce(&UserManager), crash: bool) {
    let Some((env, um)) = installed().await else {
        return;
    };
    let conn = um.connect().await;
    let bot = fake_bot(
        &env,
        &conn,
        json!([{"mode": "normal", "reply_after_s": 10}]),
    )
    .await;
    let turn = bounded("Send", bot.send("a long turn", HashMap::new()))
        .await
        .unwrap();
    // The turn has begun once the daemon saw the CLI replay the message (it records the
    // session then); the answer comes 10 s after the replay.
    let changes = bot.receive_session_id_changed().await;
    let now = bot.session_id().await.unwrap();
    if now.is_empty() {
        tokio::time::timeout(EVENT_TIMEOUT, async {
            let mut changes = changes;
            while let Some(c) = futures_util::StreamExt::next(&mut changes).await {
                if !c.get().await.unwrap().is_empty() {
                    return;
                }
            }
        })
        .await
        .expect("the turn begins (SessionId is recorded)");
    }
    let agent = bot.process_id().await.unwrap();
    assert_ne!(agent, 0);
    let agent_start = started_at(agent).expect("the agent runs");
    let main = um.main_pid(UNIT);
    let manager = ManagerProxy::new(&conn).await.unwrap();
    let survival = manager.survival().await.unwrap();
    assert!(
        survival.starts_with("keep (botvisord.service, botvisor.slice)"),
        "{survival}"
    );
    let before = manager.invocation().await.unwrap();
    let (_, doctor, _) = um.run(
        user_manager::bin_dir()
            .join("botvisorctl")
            .to_str()
            .unwrap(),
        &["doctor"],
        &[],
    );
    assert!(
        doctor.contains(
            "ok   restarts: a restart, an upgrade or a crash of botvisord leaves the running turns \
             going on (botvisord.service, botvisor.slice)"
        ),
        "{doctor:?}"
    );
    assert_eq!(before, um.unit_property(UNIT, "InvocationID"));

    let disrupted = Instant::now();
    disrupt(&um);
    // No bus call until the unit is back, so that D-Bus activation does not start it first.
    let back = um.wait_unit(UNIT, &["ActiveState", "MainPID"], "botvisord back", |v| {
        v[0] == "active" && v[1] != "0" && v[1] != main.to_string()
    });
    eprintln!(
        "botvisord back as pid {} {:?} after the disruption",
        back[1],
        disrupted.elapsed()
    );
    // The new botvisord answers (org.freedesktop.DBus.Peer.Ping; the time is row 13 of the
    // benchmark), with the unit's new invocation and the same boot.
    let peer = zbus::fdo::PeerProxy::builder(&conn)
        .destination(BUS_NAME)
        .path(botvisor::dbus::ROOT_PATH)
        .build()
        .await
        .unwrap();
    bounded("Ping", peer.ping()).await.unwrap();
    eprintln!(
        "Ping answered {:?} after the disruption",
        disrupted.elapsed()
    );
    let manager = ManagerProxy::new(&conn).await.unwrap();
    let after = manager.invocation().await.unwrap();
    assert_ne!(after, before, "a new invocation");
    assert_eq!(after, um.unit_property(UNIT, "InvocationID"));
    let n_restarts = um.unit_property(UNIT, "NRestarts");
    assert_eq!(n_restarts, if crash { "1" } else { "0" }, "NRestarts");
    let survived = started_at(agent) == Some(agent_start);
    let ends = turn_end(&bot, &turn).await;
    let launches = json_lines(&state(&env).join("launches.jsonl")).len();
    let asked: Vec<u64> = json_lines(&state(&env).join("messages.jsonl"))
        .iter()
        .map(|m| m["launch"].as_u64().unwrap())
        .collect();
    // The same agent answers: launched once, asked once, the turn ended once, `success`.
    assert!(
        survived && launches == 1 && asked == [0] && ends == [("success".into(), "success".into())],
        "issue 47: the agent (pid {agent}) {} botvisord's {}; turn {turn} ended {ends:?} \
         (wanted once, (success, success)); the fake CLI was launched {launches} time(s) and \
         read the message in launch(es) {asked:?} (wanted [0]); the bot is {:?} \
         (botvisord's journal below)",
        if survived {
            "survived"
        } else {
            "did not survive"
        },
        if crash { "crash" } else { "restart" },
        bot.state().await,
    );
    stop_and_check(&env, &um);
}

/// A botvisord killed while it writes a big message to its agent leaves part of the message's
/// line in the agent's stdin, and the agent waits for the rest for ever: the next botvisord does
/// not take that agent over (the message is not on record as written whole) but stops it, and
/// the message goes once to a new agent, which answers it (a helper's hostile run of issue 47:
/// SIGKILL 50 ms after a 1 MiB `Send` left the turn `busy` for ever and every later message
/// behind it). Here the first agent reads nothing after its first answer, so the 1 MiB line
/// stays cut at the pipe's 64 KiB whatever the timing.
///
/// Before the change the next botvisord took the stalled agent over and the turn never ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_while_a_big_message_is_written_stops_that_agent_and_the_message_goes_once() {
    let Some((env, um)) = installed().await else {
        return;
    };
    let conn = um.connect().await;
    let bot = fake_bot(
        &env,
        &conn,
        json!([{"mode": "normal", "stop_reading_after": 1}, {"mode": "normal"}]),
    )
    .await;
    let first = bounded("Send", bot.send("first", HashMap::new()))
        .await
        .unwrap();
    assert_eq!(
        turn_end(&bot, &first).await,
        [("success".to_owned(), "success".to_owned())]
    );
    let agent = bot.process_id().await.unwrap();
    let big = format!("big {}", "B".repeat(1_000_000));
    let second = bounded("Send", bot.send(&big, HashMap::new()))
        .await
        .unwrap();
    // Its delivery on record: the line is being written (and, the agent reading nothing, stays
    // cut in the pipe).
    let database = env.home.join(".local/state/botvisor/botvisor.db");
    let deadline = Instant::now() + EVENT_TIMEOUT;
    loop {
        let delivered: i64 = rusqlite::Connection::open(&database)
            .unwrap()
            .query_row(
                "SELECT count(*) FROM deliveries WHERE turn_id = ?1",
                [&second],
                |r| r.get(0),
            )
            .unwrap();
        if delivered == 1 {
            break;
        }
        assert!(Instant::now() < deadline, "the big message is delivered");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let main = um.main_pid(UNIT);
    um.systemctl_ok(&["kill", "--kill-whom=main", "-s", "SIGKILL", "botvisord"]);
    um.wait_unit(UNIT, &["ActiveState", "MainPID"], "botvisord back", |v| {
        v[0] == "active" && v[1] != "0" && v[1] != main.to_string()
    });
    let ends = turn_end(&bot, &second).await;
    let asked: Vec<(u64, usize)> = json_lines(&state(&env).join("messages.jsonl"))
        .iter()
        .map(|m| {
            (
                m["launch"].as_u64().unwrap(),
                m["text"].as_str().unwrap().len(),
            )
        })
        .collect();
    assert!(
        ends == [("success".to_owned(), "success".to_owned())]
            && asked == [(0, "first".len()), (1, big.len())]
            && started_at(agent).is_none(),
        "the cut message's turn ended {ends:?} (wanted once, success); the agents read \
         (launch, bytes) {asked:?} (wanted the big message once, by the second agent); the \
         first agent (pid {agent}) is {}\n{}",
        if started_at(agent).is_some() {
            "still running"
        } else {
            "gone"
        },
        um.log_text()
    );
    stop_and_check(&env, &um);
}

/// How many bytes wait unread in the pipe that is process `pid`'s stdout (`FIONREAD` on the
/// pipe opened again through `/proc`).
fn unread_stdout(pid: u32) -> usize {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    let pipe = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(format!("/proc/{pid}/fd/1"))
        .expect("the agent's stdout");
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one c_int through the pointer, which lives for the call.
    let rc = unsafe { libc::ioctl(pipe.as_raw_fd(), libc::FIONREAD, &mut n) };
    assert_eq!(rc, 0, "FIONREAD");
    n as usize
}

/// Polls `cond` every 20 ms until it holds, at most [`EVENT_TIMEOUT`].
async fn until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + EVENT_TIMEOUT;
    while !cond() {
        assert!(Instant::now() < deadline, "{what} within {EVENT_TIMEOUT:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// botvisord killed after it read its agent's replay of a message, and the whole answer, and
/// before it handled them (here its commits wait on a database another process holds locked,
/// as any slow moment would): the next botvisord takes the agent over and reads on from the
/// next line, which never comes. The turn ends once, `success`, as the conversation's file
/// says, and the bot is idle for the next message (a helper's hostile run of issue 49: a
/// SIGKILL 27 ms after a queued prompt was delivered left the bot `busy` for ever, every later
/// prompt behind it).
///
/// Before the change the new botvisord waited for a replay that had gone with the killed one,
/// and the turn never ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_the_killed_daemon_read_and_never_handled_still_ends_its_turn_once() {
    let Some((env, um)) = installed().await else {
        return;
    };
    let conn = um.connect().await;
    let bot = fake_bot(
        &env,
        &conn,
        json!([{"mode": "normal", "transcript_lines": true, "replay_after_s": 1}]),
    )
    .await;
    let first = bounded("Send", bot.send("first", HashMap::new()))
        .await
        .unwrap();
    assert_eq!(
        turn_end(&bot, &first).await,
        [("success".to_owned(), "success".to_owned())]
    );
    let agent = bot.process_id().await.unwrap();
    let second = bounded("Send", bot.send("second", HashMap::new()))
        .await
        .unwrap();
    let messages = state(&env).join("messages.jsonl");
    let printed = state(&env).join("printed.jsonl");
    until("the agent reads the second message", || {
        json_lines(&messages).len() == 2
    })
    .await;
    // The agent replays it a second later: by then no commit of botvisord's can land.
    let database = env.home.join(".local/state/botvisor/botvisor.db");
    let lock = rusqlite::Connection::open(&database).unwrap();
    lock.execute_batch("BEGIN EXCLUSIVE").unwrap();
    until("the agent prints the whole answer", || {
        json_lines(&printed).len() == 2
    })
    .await;
    until("botvisord reads all of it", || unread_stdout(agent) == 0).await;
    let main = um.main_pid(UNIT);
    um.systemctl_ok(&["kill", "--kill-whom=main", "-s", "SIGKILL", "botvisord"]);
    lock.execute_batch("ROLLBACK").unwrap();
    drop(lock);
    um.wait_unit(UNIT, &["ActiveState", "MainPID"], "botvisord back", |v| {
        v[0] == "active" && v[1] != "0" && v[1] != main.to_string()
    });
    let ends = turn_ended(&bot, &second).await;
    let answers = bounded("GetChat", chat(&bot))
        .await
        .into_iter()
        .filter(|(_, kind, p)| kind == "assistant" && p["text"] == "fake: second")
        .count();
    let asked: Vec<String> = json_lines(&messages)
        .iter()
        .map(|m| m["text"].as_str().unwrap().to_owned())
        .collect();
    assert!(
        ends == [("success".to_owned(), "recovered".to_owned())]
            && answers == 1
            && asked == ["first", "second"]
            && started_at(agent).is_some(),
        "the turn ended {ends:?} (wanted once, success read back); its answer is in the chat \
         {answers} time(s) (wanted 1); the agent read {asked:?} (wanted each once); the agent \
         (pid {agent}) {}\n{}",
        if started_at(agent).is_some() {
            "runs on"
        } else {
            "is gone"
        },
        um.log_text()
    );
    // The bot answers the next message.
    let third = bounded("Send", bot.send("third", HashMap::new()))
        .await
        .unwrap();
    assert_eq!(
        turn_end(&bot, &third).await,
        [("success".to_owned(), "success".to_owned())]
    );
    stop_and_check(&env, &um);
}

/// Sends made while botvisord restarts, from four clients at once: every `Send` that was
/// answered with a turn id is answered by the agent once, and every one answered with an
/// error left nothing in the chat, so that a client may send it again without a duplicate (a
/// helper's hostile run of issue 47: 2 of 440 sends were committed and later answered while
/// their callers were told "Message recipient disconnected from message bus without
/// replying"; botvisord now waits for the calls it runs to be answered before it leaves).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sends_during_restarts_are_answered_once_or_refused_with_nothing_done() {
    let Some((env, um)) = installed().await else {
        return;
    };
    let conn = um.connect().await;
    let bot = fake_bot(&env, &conn, json!([{"mode": "normal"}])).await;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut clients = Vec::new();
    for c in 0..4 {
        let (bot, stop) = (bot.clone(), stop.clone());
        clients.push(tokio::spawn(async move {
            let mut results = Vec::new();
            let mut i = 0;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let text = format!("c{c} m{i}");
                let r = tokio::time::timeout(EVENT_TIMEOUT, bot.send(&text, HashMap::new()))
                    .await
                    .expect("a Send is answered within its bound");
                results.push((text, r.map_err(|e| e.to_string())));
                i += 1;
            }
            results
        }));
    }
    for _ in 0..3 {
        um.systemctl_ok(&["restart", "botvisord"]);
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let mut results = Vec::new();
    for c in clients {
        results.extend(c.await.unwrap());
    }
    let sent: Vec<&(String, Result<String, String>)> =
        results.iter().filter(|(_, r)| r.is_ok()).collect();
    for (_, r) in &sent {
        let ends = turn_end(&bot, r.as_ref().unwrap()).await;
        assert_eq!(ends.len(), 1, "a sent message's turn ends once: {ends:?}");
    }
    let users: Vec<String> = of_kind(&bounded("GetChat", chat(&bot)).await, "user")
        .iter()
        .map(|p| p["text"].as_str().unwrap_or_default().to_owned())
        .collect();
    let refused: Vec<&(String, Result<String, String>)> =
        results.iter().filter(|(_, r)| r.is_err()).collect();
    let done_anyway: Vec<_> = refused
        .iter()
        .filter(|(text, _)| users.contains(text))
        .collect();
    let words: std::collections::BTreeSet<&str> = refused
        .iter()
        .filter_map(|(_, r)| r.as_ref().err().map(String::as_str))
        .collect();
    eprintln!(
        "{} sends during 3 restarts: {} taken, {} refused: {words:?}",
        results.len(),
        sent.len(),
        refused.len()
    );
    assert!(
        done_anyway.is_empty(),
        "sends told they failed were taken anyway (a retry would send them twice): \
         {done_anyway:?}"
    );
    for (text, _) in &sent {
        assert_eq!(
            users.iter().filter(|u| *u == text).count(),
            1,
            "{text} is in the chat once"
        );
    }
    stop_and_check(&env, &um);
}

/// Eight restarts in a row keep the agent and its turn: systemd's default start limit (5 starts
/// in 10 s) failed the unit at the sixth, and the failed unit's fd store was emptied (a helper's
/// hostile run of issue 47: the agent died mid-stream and its message was asked twice).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_restarts_in_a_row_keep_the_agent_and_its_turn_in_flight() {
    a_turn_in_flight_survives(
        |um| {
            for _ in 0..8 {
                um.systemctl_ok(&["restart", "botvisord"]);
            }
        },
        false,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_of_the_unit_keeps_the_agent_and_its_turn_in_flight() {
    a_turn_in_flight_survives(|um| drop(um.systemctl_ok(&["restart", "botvisord"])), false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_of_the_daemon_keeps_the_agent_and_its_turn_in_flight() {
    a_turn_in_flight_survives(
        |um| {
            um.systemctl_ok(&["kill", "--kill-whom=main", "-s", "SIGKILL", "botvisord"]);
        },
        true,
    )
    .await;
}

/// The session ends (a logout: the user manager stops every unit, then exits): botvisord stops
/// each agent itself, gently and proven (its stop sequence, `why=shutdown`, verdict `clean`),
/// before the user manager stops the agents' scopes, which are ordered after botvisord's unit
/// for that (`Before=botvisord.service` on each scope). One bot is in a turn, one idle.
///
/// Without that order the manager sent SIGTERM to the agents and to botvisord at once: the
/// agents' ends were not botvisord's stops (seen before the change: no `stop verdict` with
/// `why=shutdown` for either bot).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_session_ending_stops_every_agent_through_botvisord() {
    let Some((env, mut um)) = installed().await else {
        return;
    };
    let conn = um.connect().await;
    let busy = fake_bot(
        &env,
        &conn,
        json!([{"mode": "normal", "reply_after_s": 60}]),
    )
    .await;
    let idle = fake_bot(&env, &conn, json!([{"mode": "normal"}])).await;
    let mut finished = idle.receive_turn_finished().await.unwrap();
    let turn = bounded("Send", idle.send("hello", HashMap::new()))
        .await
        .unwrap();
    bounded("TurnFinished", async {
        while let Some(s) = futures_util::StreamExt::next(&mut finished).await {
            if s.args().unwrap().turn_id == turn {
                return;
            }
        }
    })
    .await;
    bounded("Send", busy.send("a long turn", HashMap::new()))
        .await
        .unwrap();
    let deadline = Instant::now() + EVENT_TIMEOUT;
    while json_lines(&state(&env).join("messages.jsonl")).len() < 2 {
        assert!(
            Instant::now() < deadline,
            "the busy bot's agent takes its message"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let ids = [busy.id().await.unwrap(), idle.id().await.unwrap()];
    for id in &ids {
        assert!(
            um.unit_property(&format!("botvisor-bot-{id}.scope"), "Before")
                .split_whitespace()
                .any(|u| u == UNIT),
            "the scope is ordered before botvisord's unit"
        );
    }
    drop(conn);
    assert!(um.end_session(), "the user manager exits");
    let journal = um.journal_text();
    for id in &ids {
        let verdicts: Vec<&str> = journal
            .lines()
            .filter(|l| l.contains(": stop verdict") && l.contains(&format!("F_BOT_ID={id}")))
            .collect();
        assert!(
            verdicts.len() == 1
                && verdicts[0].contains("F_WHY=shutdown")
                && verdicts[0].contains("F_VERDICT=clean"),
            "bot {id}'s agent is stopped by botvisord at the session's end, once, proven: \
             {verdicts:?}\n{}",
            um.log_text()
        );
    }
    assert!(env.leftovers().is_empty(), "{:?}", env.leftovers());
}

/// Issue 47: 200 bots created, their agents run (each answers a message) and deleted, four at a
/// time, under the user manager. While four run, the unit's fd store holds their four
/// descriptors each and the manager has a scope per agent; once every bot is deleted the store
/// is empty (`NFileDescriptorStore=0`) and no `botvisor-bot-*.scope` is left, and
/// `systemctl --user stop botvisord` leaves nothing running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_bots_run_and_deleted_leave_no_stored_fd_and_no_scope() {
    const BOTS: usize = 200;
    const AT_ONCE: usize = 4;
    let Some((env, um)) = installed().await else {
        return;
    };
    let conn = um.connect().await;
    let began = Instant::now();
    for round in 0..BOTS / AT_ONCE {
        let bots = futures_util::future::join_all(
            (0..AT_ONCE).map(|_| fake_bot(&env, &conn, json!([{"mode": "normal"}]))),
        )
        .await;
        let turns =
            futures_util::future::join_all(bots.iter().enumerate().map(|(i, b)| async move {
                send_and_wait(b, &format!("hello {round}.{i}")).await
            }))
            .await;
        for t in &turns {
            assert_eq!(t.outcome, "success", "round {round}: {:?}", t.items);
        }
        if round == 0 {
            assert_eq!(
                um.unit_property(UNIT, "NFileDescriptorStore"),
                (4 * AT_ONCE).to_string(),
                "each running agent's stdin, stdout, stderr and pidfd are stored"
            );
            let scopes = um.units("botvisor-bot-*");
            assert_eq!(
                scopes.len(),
                AT_ONCE,
                "a scope per running agent: {scopes:?}"
            );
        }
        for b in &bots {
            bounded("Delete", b.delete())
                .await
                .unwrap_or_else(|e| panic!("round {round}: Delete: {e}"));
        }
    }
    eprintln!(
        "{BOTS} bots created, run and deleted, {AT_ONCE} at a time, in {:?}",
        began.elapsed()
    );
    // A delete answers once the bot is gone from the API; its agent's stop may end just after,
    // and the manager then drops an empty scope within milliseconds.
    let deadline = Instant::now() + SETTLE;
    let (stored, scopes) = loop {
        let stored = um.unit_property(UNIT, "NFileDescriptorStore");
        let scopes = um.units("botvisor-bot-*");
        if (stored == "0" && scopes.is_empty()) || Instant::now() > deadline {
            break (stored, scopes);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        stored, "0",
        "descriptors left in the unit's store after every bot was deleted"
    );
    assert!(
        scopes.is_empty(),
        "{} scope(s) left after every bot was deleted (botvisord's journal below):\n{}",
        scopes.len(),
        um.describe_units(&scopes)
    );
    stop_and_check(&env, &um);
}
