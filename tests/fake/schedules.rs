//! Scheduled prompts (issue 49) on a real systemd user manager ([`support::user_manager`]),
//! botvisor installed there by `scripts/install.sh`, the bots run by the fake CLI: the timer
//! units botvisord writes, each due time fired once through restarts and crashes of botvisord,
//! fires at the same moment sending the prompt once, a unit deleted by hand written again. And,
//! with no user manager, a named refusal. The user-manager tests print `skipped: …` where none
//! can run, and fail there with `BOTVISOR_TEST_REQUIRE_SYSTEMD` set (CI sets it).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::json;
use support::schedules::{chat_now, ends, wait_scheduled};
use support::user_manager::UserManager;
use support::*;

use botvisor::dbus::client::{BotProxy, SchedulesProxy};

use crate::user_manager::{fake_bot, installed, state};

const UNIT: &str = "botvisord.service";

fn timer(id: &str) -> String {
    format!("botvisor-schedule-{id}.timer")
}

fn unit_file(env: &TestEnv, name: &str) -> std::path::PathBuf {
    env.home.join(".config/systemd/user").join(name)
}

async fn schedules(conn: &zbus::Connection) -> SchedulesProxy<'static> {
    SchedulesProxy::builder(conn)
        .cache_properties(zbus::proxy::CacheProperties::No)
        .build()
        .await
        .unwrap()
}

/// A bot of the fake CLI following `plan`, on botvisor installed in a real user manager, with
/// one schedule of `calendar` and `prompt`. Fields drop in order: the manager before the
/// environment it runs in.
struct Scheduled {
    bot: BotProxy<'static>,
    path: zbus::OwnedObjectPath,
    s: SchedulesProxy<'static>,
    id: String,
    um: UserManager,
    env: TestEnv,
}

/// The next `n` `ScheduleFired` signals of schedule `id` on `fired`: (outcome, turn id) each,
/// within [`EVENT_TIMEOUT`].
async fn next_fires(
    fired: &mut botvisor::dbus::client::ScheduleFiredStream,
    id: &str,
    n: usize,
) -> Vec<(String, String)> {
    let mut out = Vec::new();
    bounded("the schedule's fires", async {
        while out.len() < n {
            let f = futures_util::StreamExt::next(fired).await.unwrap();
            let a = f.args().unwrap();
            if a.id == id {
                out.push((a.outcome.clone(), a.turn_id.clone()));
            }
        }
    })
    .await;
    out
}

/// A bot of the fake CLI following `plan` ([`fake_bot`]), its properties read from botvisord
/// at each call, not from a cache; and its object path.
async fn uncached_fake_bot(
    env: &TestEnv,
    conn: &zbus::Connection,
    plan: serde_json::Value,
) -> (BotProxy<'static>, zbus::OwnedObjectPath) {
    let made = fake_bot(env, conn, plan).await;
    let path: zbus::OwnedObjectPath = made.inner().path().to_owned().into();
    let bot = BotProxy::builder(conn)
        .path(path.clone())
        .cache_properties(zbus::proxy::CacheProperties::No)
        .build()
        .await
        .unwrap();
    (bot, path)
}

/// [`Scheduled`]; `None` where no user manager can run (after the skip line).
async fn with_schedule(plan: serde_json::Value, calendar: &str, prompt: &str) -> Option<Scheduled> {
    with_schedule_of(plan, calendar, prompt, HashMap::new()).await
}

/// [`with_schedule`], the schedule made with `options` (`CreateSchedule`'s).
async fn with_schedule_of(
    plan: serde_json::Value,
    calendar: &str,
    prompt: &str,
    options: HashMap<&str, zbus::Variant<'_>>,
) -> Option<Scheduled> {
    let (env, um) = installed().await?;
    let conn = um.connect().await;
    let (bot, path) = uncached_fake_bot(&env, &conn, plan).await;
    let s = schedules(&conn).await;
    let id = bounded(
        "CreateSchedule",
        s.create_schedule(&path, calendar, prompt, options),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", um.log_text()));
    Some(Scheduled {
        bot,
        path,
        s,
        id,
        um,
        env,
    })
}

/// A bad calendar is refused by name and writes nothing; a good one is written as a timer the
/// manager lists (`list-timers`), persistent, and deleting the schedule removes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_is_a_timer_the_manager_lists_and_a_bad_calendar_writes_nothing() {
    let Some((env, um)) = installed().await else {
        return;
    };
    let conn = um.connect().await;
    let bot = fake_bot(&env, &conn, json!([{"mode": "normal"}])).await;
    let path = bot.inner().path().to_owned();
    let s = schedules(&conn).await;
    for bad in ["every day at nine", "2020-01-01", "", "*:*:0/0.01"] {
        let e = s
            .create_schedule(&path, bad, "check", HashMap::new())
            .await
            .unwrap_err();
        assert_eq!(
            error_name(&e),
            "org.botvisor.Botvisor1.Error.InvalidArgument",
            "{bad:?}: {e}"
        );
    }
    let folder = env.home.join(".config/systemd/user");
    let written = |f: &std::path::Path| {
        std::fs::read_dir(f)
            .map(|d| {
                d.filter_map(|e| e.ok()).any(|e| {
                    e.file_name()
                        .to_string_lossy()
                        .starts_with("botvisor-schedule-")
                })
            })
            .unwrap_or(false)
    };
    assert!(!written(&folder), "a refused calendar wrote a unit");

    let id = bounded(
        "CreateSchedule",
        s.create_schedule(&path, "Mon..Fri 9:00", "check the deps", HashMap::new()),
    )
    .await
    .unwrap();
    let text = std::fs::read_to_string(unit_file(&env, &timer(&id))).unwrap();
    assert!(
        text.contains("OnCalendar=Mon..Fri *-*-* 09:00:00\n"),
        "{text}"
    );
    assert!(text.contains("Persistent=true\n"), "{text}");
    let listed = um.systemctl_ok(&["list-timers", "--all", "--no-pager"]);
    assert!(listed.contains(&timer(&id)), "{listed}");
    assert_eq!(um.unit_property(&timer(&id), "ActiveState"), "active");
    let shown = s.schedules().await.unwrap();
    assert_eq!(shown.len(), 1);
    let next = i64::try_from(&*shown[0]["next"]).unwrap();
    assert!(next > 0, "a next due time is shown");

    bounded("DeleteSchedule", s.delete_schedule(&id))
        .await
        .unwrap();
    assert!(!written(&folder), "the deleted schedule's units are gone");
    // Stopped (its stop job may end a moment after the call), then no more listed as a timer
    // that runs. (`--all` may still show it, inactive, until the manager unloads it.)
    um.wait_unit(&timer(&id), &["ActiveState"], "the timer stopped", |v| {
        v[0] != "active"
    });
    let listed = um.systemctl_ok(&["list-timers", "--no-pager"]);
    assert!(!listed.contains(&timer(&id)), "{listed}");
}

/// Issue 49's exactly once: a schedule every 2 s keeps firing through 3 restarts and 2 SIGKILLs
/// of botvisord (each after two more fires); every due time fired is one message, asked of the
/// CLI once and answered once, the due times only go up, and a due time missed while botvisord
/// was down is not fired later on its own (the next fire claims the latest).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_due_time_fires_once_through_restarts_and_kills_of_botvisord() {
    let Some(t) = with_schedule(json!([{"mode": "normal"}]), "*:*:0/2", "tick").await else {
        return;
    };
    let (bot, s, id, um, env) = (&t.bot, &t.s, &t.id, &t.um, &t.env);
    let disruptions = ["restart", "kill", "restart", "kill", "restart"];
    let mut seen = 0;
    for (i, what) in disruptions.iter().enumerate() {
        let now = wait_scheduled(
            bot,
            &format!("two fires before disruption {i} ({what})"),
            |f| f.len() >= seen + 2,
        )
        .await;
        seen = now.len();
        eprintln!("{seen} fires, then a {what} of botvisord");
        match *what {
            "restart" => {
                um.systemctl_ok(&["restart", "botvisord"]);
            }
            _ => {
                um.systemctl_ok(&["kill", "--kill-whom=main", "-s", "SIGKILL", "botvisord"]);
            }
        }
    }
    wait_scheduled(bot, "two fires after the last disruption", |f| {
        f.len() >= seen + 2
    })
    .await;
    bounded("DeleteSchedule", s.delete_schedule(id))
        .await
        .unwrap();
    assert!(!unit_file(env, &timer(id)).exists());

    // Every fire's turn ends; then what the CLI was asked is compared with what was fired.
    let fired = wait_scheduled(bot, "the fires", |_| true).await;
    let deadline = Instant::now() + EVENT_TIMEOUT;
    let ended = loop {
        let ended = ends(bot).await;
        if fired.values().flatten().all(|t| ended.contains_key(t)) {
            break ended;
        }
        assert!(
            Instant::now() < deadline,
            "not every fired turn ended: {fired:?} {ended:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    for (due, turns) in &fired {
        assert_eq!(turns.len(), 1, "due time {due} fired {} times", turns.len());
        assert_eq!(ended[&turns[0]], ["success"], "the fire of {due}");
    }
    let asked = json_lines(&state(env).join("messages.jsonl"))
        .iter()
        .filter(|m| m["text"] == "tick")
        .count();
    assert_eq!(
        asked,
        fired.len(),
        "the CLI was asked the prompt once per fire ({fired:?})"
    );
    assert!(fired.len() >= 12, "{} fires", fired.len());
    let restarts = um.unit_property(UNIT, "NRestarts");
    eprintln!("{} fires, NRestarts {restarts}", fired.len());
}

/// Fires at the same moment send the prompt once: eight `run-now`s at once queue one message;
/// a fire of the timer's kind at the same time finds it made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fires_at_the_same_moment_send_the_prompt_once() {
    // Once a year: the timer itself does not fire during the test.
    let Some(t) = with_schedule(json!([{"mode": "normal"}]), "*-01-01 00:00:00", "once").await
    else {
        return;
    };
    let (bot, s, id) = (&t.bot, &t.s, &t.id);
    let mut calls = Vec::new();
    for i in 0..9 {
        let s = s.clone();
        let id = id.clone();
        calls.push(tokio::spawn(async move {
            let options = if i < 8 {
                HashMap::from([("now", zbus::Variant::from(true))])
            } else {
                HashMap::new()
            };
            s.fire_schedule(&id, options).await.unwrap()
        }));
    }
    let mut outcomes = Vec::new();
    for c in calls {
        outcomes.push(bounded("FireSchedule", c).await.unwrap().0);
    }
    let queued = outcomes.iter().filter(|o| *o == "queued").count();
    assert_eq!(queued, 1, "{outcomes:?}");
    assert!(
        outcomes
            .iter()
            .all(|o| ["queued", "already_fired", "nothing_due"].contains(&o.as_str())),
        "{outcomes:?}"
    );
    let fired = wait_scheduled(bot, "the fire", |f| !f.is_empty()).await;
    assert_eq!(fired.len(), 1, "{fired:?}");
    // The same run-now asked again later (its answer lost: botvisord killed) is the fire it
    // made, even past the 5 s of a moment: it says when it was first asked.
    let first_asked = *fired.keys().next().unwrap();
    let again = HashMap::from([
        ("now", zbus::Variant::from(true)),
        ("at", zbus::Variant::from(first_asked)),
    ]);
    let (outcome, _, due) = bounded("FireSchedule again", s.fire_schedule(id, again))
        .await
        .unwrap();
    assert_eq!((outcome.as_str(), due), ("already_fired", first_asked));
    let future = HashMap::from([
        ("now", zbus::Variant::from(true)),
        ("at", zbus::Variant::from(first_asked + 3600)),
    ]);
    let e = s.fire_schedule(id, future).await.unwrap_err();
    assert_eq!(
        error_name(&e),
        "org.botvisor.Botvisor1.Error.InvalidArgument",
        "{e}"
    );
    // A paused schedule fires nothing, not even asked to.
    bounded("PauseSchedule", s.pause_schedule(id, true))
        .await
        .unwrap();
    let e = s
        .fire_schedule(id, HashMap::from([("now", zbus::Variant::from(true))]))
        .await
        .unwrap_err();
    assert_eq!(
        error_name(&e),
        "org.botvisor.Botvisor1.Error.InvalidArgument",
        "{e}"
    );
    let fired = wait_scheduled(bot, "the fires", |_| true).await;
    assert_eq!(fired.len(), 1, "{fired:?}");
}

/// A timer unit deleted by hand is written again and started when botvisord starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timer_unit_deleted_by_hand_is_written_again() {
    let Some(t) = with_schedule(json!([{"mode": "normal"}]), "hourly", "look at CI").await else {
        return;
    };
    let (s, id, um, env) = (&t.s, &t.id, &t.um, &t.env);
    let file = unit_file(env, &timer(id));
    let before = std::fs::read_to_string(&file).unwrap();
    std::fs::remove_file(&file).unwrap();
    um.systemctl_ok(&["stop", &timer(id)]);
    um.systemctl_ok(&["daemon-reload"]);
    um.systemctl_ok(&["restart", "botvisord"]);
    // The first call after the restart is answered once the start-up check ran or runs.
    bounded("Schedules", s.schedules()).await.unwrap();
    wait_timer_active(um, &timer(id));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), before);
}

/// Waits (bounded) until the manager shows `timer` active.
fn wait_timer_active(um: &UserManager, timer: &str) {
    um.wait_unit(timer, &["ActiveState"], "the timer active again", |v| {
        v[0] == "active"
    });
}

/// Without a systemd user manager (botvisord on a private bus), a schedule is refused by name,
/// `NotSupported`, and nothing is written; a bad calendar is still `InvalidArgument`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_user_manager_a_schedule_is_refused_by_name() {
    let fake = FakeSetup::start("").await;
    let bot = fake.bot(json!([{"mode": "normal"}])).await;
    let path = bot.inner().path().to_owned();
    let s = schedules(&fake.env.conn).await;
    let e = s
        .create_schedule(&path, "*:0/15", "check", HashMap::new())
        .await
        .unwrap_err();
    assert_eq!(
        error_name(&e),
        "org.botvisor.Botvisor1.Error.NotSupported",
        "{e}"
    );
    assert!(e.to_string().contains("no timer of its own"), "{e}");
    let e = s
        .create_schedule(&path, "bogus", "check", HashMap::new())
        .await
        .unwrap_err();
    assert_eq!(
        error_name(&e),
        "org.botvisor.Botvisor1.Error.InvalidArgument",
        "{e}"
    );
    assert!(s.schedules().await.unwrap().is_empty());
    assert!(!fake.env.home.join(".config/systemd/user").exists());
}

/// A fire into a bot waiting on a permission question never answers it: the prompt is queued
/// behind the turn that asked, the question stays open, and the CLI gets the prompt only once a
/// person answered; both turns end once. A second fire while that prompt waits sends nothing
/// more (`still_waiting`; before, it queued a second prompt). A schedule that skips a busy bot
/// says so in the chat, once for a run of skips (before, once per fire).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fire_into_a_bot_waiting_on_a_permission_leaves_it_unanswered() {
    let plan = json!([{"mode": "normal", "ask": {"tool": "Write", "input_bytes": 10}}]);
    let Some(t) = with_schedule(plan, "*-01-01 00:00:00", "tick").await else {
        return;
    };
    let (bot, path, s, id, env) = (&t.bot, &t.path, &t.s, &t.id, &t.env);
    let first = bounded("Send", bot.send("first", HashMap::new()))
        .await
        .unwrap();
    let deadline = Instant::now() + EVENT_TIMEOUT;
    while bot.pending_permissions().await.unwrap_or_default().len() != 1 {
        assert!(Instant::now() < deadline, "the first turn asks");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (outcome, tick, _) = bounded(
        "FireSchedule",
        s.fire_schedule(id, HashMap::from([("now", zbus::Variant::from(true))])),
    )
    .await
    .unwrap();
    assert_eq!(outcome, "queued");
    // A schedule has one prompt waiting at most: its timer's fires every 2 s while the first
    // one's prompt waits are recorded and send nothing more.
    let mut fired = s.receive_schedule_fired().await.unwrap();
    let often = bounded(
        "CreateSchedule",
        s.create_schedule(path, "*:*:0/2", "often", HashMap::new()),
    )
    .await
    .unwrap();
    let outcomes = next_fires(&mut fired, &often, 3).await;
    let first_often = outcomes[0].1.clone();
    assert_eq!(
        outcomes,
        [
            ("queued".to_owned(), first_often.clone()),
            ("still_waiting".to_owned(), first_often.clone()),
            ("still_waiting".to_owned(), first_often.clone()),
        ],
        "one prompt waits"
    );
    bounded("DeleteSchedule", s.delete_schedule(&often))
        .await
        .unwrap();
    assert_eq!(bot.queued_messages().await.unwrap(), 2, "tick and often's");
    // A schedule that skips a busy bot says so in the chat, and sends nothing.
    let skipper = bounded(
        "CreateSchedule",
        s.create_schedule(
            path,
            "*-01-01 00:00:00",
            "skipped tick",
            HashMap::from([("when_busy", zbus::Variant::from("skip"))]),
        ),
    )
    .await
    .unwrap();
    let (skipped, none, _) = bounded(
        "FireSchedule",
        s.fire_schedule(
            &skipper,
            HashMap::from([("now", zbus::Variant::from(true))]),
        ),
    )
    .await
    .unwrap();
    assert_eq!((skipped.as_str(), none.as_str()), ("skipped", ""));
    let said = chat_now(bot).await.unwrap_or_default();
    assert!(
        said.iter().any(|(k, p)| k == "system"
            && p["reason"] == "schedule_skipped"
            && p["schedule"]["id"] == skipper.as_str()),
        "{said:?}"
    );
    // A run of skips for the same reason is said once: a 2 s schedule that skips, fired three
    // times by its timer into the busy bot, leaves one chat item (each fire in its record and
    // its signal).
    let mut fired = s.receive_schedule_fired().await.unwrap();
    let skips = bounded(
        "CreateSchedule",
        s.create_schedule(
            path,
            "*:*:0/2",
            "skips",
            HashMap::from([("when_busy", zbus::Variant::from("skip"))]),
        ),
    )
    .await
    .unwrap();
    let skip_outcomes: Vec<String> = next_fires(&mut fired, &skips, 3)
        .await
        .into_iter()
        .map(|(outcome, _)| outcome)
        .collect();
    bounded("DeleteSchedule", s.delete_schedule(&skips))
        .await
        .unwrap();
    assert_eq!(skip_outcomes, ["skipped", "skipped", "skipped"]);
    let said = chat_now(bot).await.unwrap_or_default();
    let notes = said
        .iter()
        .filter(|(k, p)| k == "system" && p["schedule"]["id"] == skips.as_str())
        .count();
    assert_eq!(notes, 1, "said once: {said:?}");
    let pending = bot.pending_permissions().await.unwrap();
    assert_eq!(pending.len(), 1, "the question is still open: {pending:?}");
    assert_eq!(bot.queued_messages().await.unwrap(), 2, "the prompts wait");
    let asked: Vec<String> = json_lines(&state(env).join("messages.jsonl"))
        .iter()
        .map(|m| m["text"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(asked, ["first"], "the CLI has not been sent the prompt");
    bounded(
        "RespondPermission",
        bot.respond_permission(&pending[0].0, "allow", HashMap::new()),
    )
    .await
    .unwrap();
    // The scheduled turn asks a question of its own (this fake asks before every answer): it
    // waits for a person too, who answers it.
    let deadline = Instant::now() + EVENT_TIMEOUT;
    let second = loop {
        let open = bot.pending_permissions().await.unwrap_or_default();
        if let Some(q) = open.into_iter().find(|q| q.0 != pending[0].0) {
            break q.0;
        }
        assert!(Instant::now() < deadline, "the scheduled turn asks");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(ends(bot).await.contains_key(&first));
    assert!(
        !ends(bot).await.contains_key(&tick),
        "it waits for the answer"
    );
    bounded(
        "RespondPermission",
        bot.respond_permission(&second, "allow", HashMap::new()),
    )
    .await
    .unwrap();
    let ended = loop {
        let ended = ends(bot).await;
        if ended.contains_key(&first) && ended.contains_key(&tick) {
            break ended;
        }
        assert!(Instant::now() < deadline, "both turns end: {ended:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(ended[&first], ["success"]);
    assert_eq!(ended[&tick], ["success"]);
}

/// A schedule with `conversation` `fresh` begins a new conversation of the bot at each fire: the
/// CLI is launched on a new session id for each fired prompt (never resuming the one before,
/// nor the conversation the bot had), each prompt asked once and answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_schedule_begins_a_new_conversation_at_each_fire() {
    let options = HashMap::from([("conversation", zbus::Variant::from("fresh"))]);
    let Some(t) = with_schedule_of(json!([{"mode": "normal"}]), "*:*:0/2", "triage", options).await
    else {
        return;
    };
    let (bot, s, id, env) = (&t.bot, &t.s, &t.id, &t.env);
    let listed = bounded("Schedules", s.schedules()).await.unwrap();
    assert_eq!(
        listed[0]
            .get("conversation")
            .and_then(|v| <&str>::try_from(&**v).ok()),
        Some("fresh")
    );
    let fired = wait_scheduled(bot, "three fires", |f| f.len() >= 3).await;
    bounded("DeleteSchedule", s.delete_schedule(id))
        .await
        .unwrap();
    let deadline = Instant::now() + EVENT_TIMEOUT;
    loop {
        let ended = ends(bot).await;
        if fired
            .values()
            .flatten()
            .all(|turn| ended.contains_key(turn))
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "every fired turn ends: {ended:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let launches = json_lines(&state(env).join("launches.jsonl"));
    let session_of = |launch: u64| -> (String, bool) {
        let argv: Vec<String> = launches[launch as usize]["argv"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap().to_owned())
            .collect();
        let at = |flag: &str| {
            argv.iter()
                .position(|a| a == flag)
                .map(|i| argv[i + 1].clone())
        };
        match (at("--session-id"), at("--resume")) {
            (Some(new), _) => (new, false),
            (None, Some(resumed)) => (resumed, true),
            _ => panic!("{argv:?}"),
        }
    };
    let asked: Vec<(String, bool)> = json_lines(&state(env).join("messages.jsonl"))
        .iter()
        .filter(|m| m["text"] == "triage")
        .map(|m| session_of(m["launch"].as_u64().unwrap()))
        .collect();
    assert_eq!(asked.len(), fired.len(), "each fired prompt asked once");
    let sessions: std::collections::BTreeSet<&String> = asked.iter().map(|(s, _)| s).collect();
    assert!(
        sessions.len() == asked.len() && asked.iter().all(|(_, resumed)| !resumed),
        "each fire in a conversation of its own, begun for it: {asked:?}"
    );
}

/// A schedule's end (`until`, a timestamp as systemd reads one): an end systemd refuses, one
/// in the past, or one before the calendar's next due time is refused and writes nothing; a
/// schedule every 2 s ending in 6 s fires only due times before its end, its timer goes 30 s
/// after it (room for a late fire), it stays listed with no next due time, and a `run-now` of
/// it is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_ends_at_its_end_and_its_timer_goes() {
    let Some((env, um)) = installed().await else {
        return;
    };
    let conn = um.connect().await;
    let (bot, path) = uncached_fake_bot(&env, &conn, json!([{"mode": "normal"}])).await;
    let s = schedules(&conn).await;
    let until = |u: &str| HashMap::from([("until", zbus::Variant::from(u.to_owned()))]);
    for (calendar, end) in [
        ("*:*:0/2", "bogus"),
        ("*:*:0/2", "2020-01-01"),
        ("*-01-01 00:00:00", "+1h"),
    ] {
        let e = bounded(
            "CreateSchedule",
            s.create_schedule(&path, calendar, "tick", until(end)),
        )
        .await
        .unwrap_err();
        assert_eq!(
            error_name(&e),
            "org.botvisor.Botvisor1.Error.InvalidArgument",
            "{end}: {e}"
        );
    }
    assert!(
        bounded("Schedules", s.schedules())
            .await
            .unwrap()
            .is_empty()
    );
    let id = bounded(
        "CreateSchedule",
        s.create_schedule(&path, "*:*:0/2", "tick", until("+6s")),
    )
    .await
    .unwrap();
    let listed = bounded("Schedules", s.schedules()).await.unwrap();
    let end = listed[0]
        .get("until")
        .and_then(|v| i64::try_from(&**v).ok())
        .unwrap();
    assert!(end > botvisor::time::unix_now(), "{end}");
    wait_scheduled(&bot, "a fire before the end", |f| !f.is_empty()).await;
    let deadline = Instant::now() + EVENT_TIMEOUT;
    while unit_file(&env, &timer(&id)).exists() {
        assert!(Instant::now() < deadline, "the ended schedule's timer goes");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let gone_at = botvisor::time::unix_now();
    // A grace of 30 s past the end (and the random delay, none here) lets a late fire of the
    // last due time find its service; the 5 s check removes the units then.
    assert!(
        gone_at <= end + 30 + 7,
        "its timer went {} s after its end",
        gone_at - end
    );
    let fired = wait_scheduled(&bot, "the fires", |_| true).await;
    assert!(
        fired.keys().all(|due| *due <= end),
        "only due times before the end fired: {fired:?} (end {end})"
    );
    // Its next due time goes with its timer (the same check, a moment after).
    loop {
        let listed = bounded("Schedules", s.schedules()).await.unwrap();
        assert_eq!(listed.len(), 1, "an ended schedule stays listed");
        let next = listed[0].get("next").and_then(|v| i64::try_from(&**v).ok());
        if next == Some(0) {
            break;
        }
        assert!(Instant::now() < deadline, "no next due time: {next:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let e = bounded(
        "FireSchedule",
        s.fire_schedule(&id, HashMap::from([("now", zbus::Variant::from(true))])),
    )
    .await
    .unwrap_err();
    assert_eq!(
        error_name(&e),
        "org.botvisor.Botvisor1.Error.InvalidArgument",
        "{e}"
    );
}

/// The hostile trial of issue 49's end and pause: a due time at the end whose fire comes late
/// (botvisord frozen over it, as a restart or a random delay would hold it) still fires, once;
/// and a schedule paused over a due time and resumed fires nothing it missed (its last due
/// time moves to the resume, its timer's stamp is gone with its units). Before: the late fire
/// found the schedule ended and sent nothing, silently; the resume caught the missed due time
/// up at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_fire_at_the_end_fires_and_a_resume_catches_nothing_up() {
    let Some(t) = with_schedule(json!([{"mode": "normal"}]), "*-01-01 00:00:00", "yearly").await
    else {
        return;
    };
    let (bot, path, s, um, env) = (&t.bot, &t.path, &t.s, &t.um, &t.env);
    // One due time, 3 s from now, and the end at it.
    let due = botvisor::time::unix_now() + 3;
    let at = botvisor::time::rfc3339(due);
    let when = format!("{} {} UTC", &at[..10], &at[11..19]);
    let last = bounded(
        "CreateSchedule",
        s.create_schedule(
            path,
            &when,
            "last",
            HashMap::from([("until", zbus::Variant::from(format!("@{due}")))]),
        ),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", um.log_text()));
    um.systemctl_ok(&["kill", "--kill-whom=main", "-s", "SIGSTOP", "botvisord"]);
    let service = format!("botvisor-schedule-{last}.service");
    let deadline = Instant::now() + EVENT_TIMEOUT;
    while um.unit_property(&service, "ActiveState") != "activating"
        || botvisor::time::unix_now() < due + 2
    {
        assert!(
            Instant::now() < deadline,
            "the timer fires into the frozen botvisord"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    um.systemctl_ok(&["kill", "--kill-whom=main", "-s", "SIGCONT", "botvisord"]);
    let fired = wait_scheduled(bot, "the late fire of the last due time", |f| {
        f.contains_key(&due)
    })
    .await;
    assert_eq!(fired[&due].len(), 1, "{fired:?}");

    // Paused over a due time of a 2 s schedule, then resumed.
    let often = bounded(
        "CreateSchedule",
        s.create_schedule(path, "*:*:0/2", "often", HashMap::new()),
    )
    .await
    .unwrap();
    wait_scheduled(bot, "a fire of the 2 s schedule", |f| f.len() >= 2).await;
    bounded("PauseSchedule", s.pause_schedule(&often, true))
        .await
        .unwrap();
    let stamp = env
        .home
        .join(".local/share/systemd/timers")
        .join(format!("stamp-botvisor-schedule-{often}.timer"));
    assert!(!stamp.exists(), "the paused timer's stamp is gone");
    let paused_at = botvisor::time::unix_now();
    while botvisor::time::unix_now() < paused_at + 3 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let before = wait_scheduled(bot, "the fires so far", |_| true).await;
    bounded("PauseSchedule", s.pause_schedule(&often, false))
        .await
        .unwrap();
    let resumed_at = botvisor::time::unix_now();
    let after = wait_scheduled(bot, "a fire after the resume", |f| {
        f.keys().any(|d| *d >= resumed_at)
    })
    .await;
    let caught_up: Vec<&i64> = after
        .keys()
        .filter(|d| !before.contains_key(d) && **d < resumed_at)
        .collect();
    assert!(
        caught_up.is_empty(),
        "due times of the pause were fired after the resume: {caught_up:?}"
    );
}
