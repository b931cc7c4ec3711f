//! Issue 49 on the real Claude Code: a schedule every 2 s through restarts and SIGKILLs of
//! botvisord, and one whose due times come while a plan's usage limit holds its bot. botvisor is
//! installed into a real `systemd --user` of the test's own ([`crate::survival::installed`]);
//! the schedules' timers fire `botvisorctl fire`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use support::schedules::{ends, wait_scheduled};
use support::stand_in_api::{self, ApiRequest, Script, plan_echo, plan_limit_refusal};
use support::*;
use zbus::Variant;

use botvisor::dbus::client::{BotProxy, ManagerProxy, SchedulesProxy};

/// Seconds from the test's start to the stand-in's reset: time for the first message to be
/// refused and for three fires of a 2 s schedule while the limit holds.
const RESET_AFTER_S: i64 = 30;

/// What the stand-in was asked, main conversation only: (when in Unix seconds, the user's
/// text, refused).
type Asked = Arc<Mutex<Vec<(i64, String, bool)>>>;

const UNIT: &str = "botvisord.service";

/// A bot of Claude Code on the Messages stand-in at `api_url`, made through `conn` in the
/// test's work folder, its properties read at each call; with `oauth`, a subscription user's
/// (an OAuth token, no API key).
async fn claude_bot(
    env: &TestEnv,
    conn: &zbus::Connection,
    api_url: &str,
    oauth: bool,
) -> (BotProxy<'static>, zbus::OwnedObjectPath) {
    let mut bot_env = claude_env(&env.home, api_url, &env.marker);
    if oauth {
        bot_env.remove("ANTHROPIC_API_KEY");
        bot_env.insert(
            "CLAUDE_CODE_OAUTH_TOKEN".into(),
            "sk-ant-oat01-stand-in".into(),
        );
    }
    let cwd = env.work.to_str().unwrap().to_owned();
    let path = bounded(
        "CreateBot",
        ManagerProxy::new(conn)
            .await
            .unwrap()
            .create_bot(create_options(&cwd, &bot_env)),
    )
    .await
    .unwrap();
    let bot = BotProxy::builder(conn)
        .path(path.clone())
        .cache_properties(zbus::proxy::CacheProperties::No)
        .build()
        .await
        .unwrap();
    (bot, path)
}

/// The `Schedules` interface, its property read at each call.
async fn schedules(conn: &zbus::Connection) -> SchedulesProxy<'static> {
    SchedulesProxy::builder(conn)
        .cache_properties(zbus::proxy::CacheProperties::No)
        .build()
        .await
        .unwrap()
}

/// A schedule of `tick` every 2 s for the bot at `path`; its id.
async fn every_two_seconds(
    s: &SchedulesProxy<'_>,
    path: &zbus::OwnedObjectPath,
    um: &support::user_manager::UserManager,
) -> String {
    bounded(
        "CreateSchedule",
        s.create_schedule(path, "*:*:0/2", "tick", HashMap::<&str, Variant<'_>>::new()),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", um.log_text()))
}

/// Issue 49's exactly once on the real CLI: a schedule every 2 s fires through 5 restarts and
/// 2 SIGKILLs of botvisord (each after two more fires), 30 fires in all; every due time fired
/// is one message, the model is asked it once per fire (the stand-in counts), and each fired
/// turn ends `success` once.
#[cfg_attr(
    botvisor_skip_claude,
    ignore = "BOTVISOR_TEST_CLAUDE_BIN not set: no real Claude Code to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_fires_through_restarts_and_kills_each_reach_the_model_once() {
    let Some(claude) = claude_bin() else { return };
    let Some((env, um)) = crate::survival::installed(&claude, None).await else {
        return;
    };
    let api = stand_in_api::StandInApi::start(stand_in_api::echo_script()).await;
    let conn = um.connect().await;
    let (bot, path) = claude_bot(&env, &conn, &api.url, false).await;
    let s = schedules(&conn).await;
    let id = every_two_seconds(&s, &path, &um).await;
    let disruptions = [
        "restart", "kill", "restart", "restart", "kill", "restart", "restart",
    ];
    let mut seen = 0;
    for (i, what) in disruptions.iter().enumerate() {
        let now = wait_scheduled(
            &bot,
            &format!("two fires before disruption {i} ({what})"),
            |f| f.len() >= seen + 2,
        )
        .await;
        seen = now.len();
        eprintln!("{seen} fires, then a {what} of botvisord");
        if *what == "restart" {
            um.systemctl_ok(&["restart", "botvisord"]);
        } else {
            um.systemctl_ok(&["kill", "--kill-whom=main", "-s", "SIGKILL", "botvisord"]);
        }
    }
    wait_scheduled(&bot, "thirty fires", |f| f.len() >= 30).await;
    bounded("DeleteSchedule", s.delete_schedule(&id))
        .await
        .unwrap();
    let fired = wait_scheduled(&bot, "the fires", |_| true).await;
    let deadline = Instant::now() + EVENT_TIMEOUT;
    let ended = loop {
        let ended = ends(&bot).await;
        if fired.values().flatten().all(|t| ended.contains_key(t)) {
            break ended;
        }
        assert!(
            Instant::now() < deadline,
            "not every fired turn ended: {fired:?} {ended:?}\n{}",
            um.log_text()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    for (due, turns) in &fired {
        assert_eq!(turns.len(), 1, "due time {due} fired {} times", turns.len());
        assert_eq!(ended[&turns[0]], ["success"], "the fire of {due}");
    }
    let asked = api
        .requests()
        .iter()
        .filter(|r| r.has_tools && !r.has_tool_result && r.last_user_text.trim() == "tick")
        .count();
    assert_eq!(
        asked,
        fired.len(),
        "the model was asked the prompt once per fire ({} fires)",
        fired.len()
    );
    let restarts = um.unit_property(UNIT, "NRestarts");
    eprintln!("{} fires, NRestarts {restarts}", fired.len());
}

/// Refuses every request with a `five_hour` limit until `reset` (Unix seconds), then echoes.
fn limited_until(reset: i64, asked: Asked) -> Script {
    Arc::new(move |req: &ApiRequest| {
        let now = botvisor::time::unix_now();
        let refused = now < reset;
        if req.has_tools {
            asked
                .lock()
                .unwrap()
                .push((now, req.last_user_text.trim().to_owned(), refused));
        }
        if refused {
            plan_limit_refusal(reset as u64)
        } else {
            plan_echo("allowed", &req.last_user_text, (reset + 5 * 3600) as u64)
        }
    })
}

/// The `turn_finished` outcomes of `turn` in `bot`'s chat, once it has one (polled every
/// 200 ms, at most [`EVENT_TIMEOUT`]).
async fn turn_ends(bot: &BotProxy<'_>, turn: &str) -> Vec<String> {
    let deadline = Instant::now() + EVENT_TIMEOUT;
    loop {
        let ends: Vec<String> = bounded("GetChat", chat(bot))
            .await
            .into_iter()
            .filter(|(_, kind, p)| kind == "turn_finished" && p["turn_id"] == turn)
            .map(|(_, _, p)| p["outcome"].as_str().unwrap_or_default().to_owned())
            .collect();
        if !ends.is_empty() {
            return ends;
        }
        assert!(Instant::now() < deadline, "turn {turn} ends");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A bot held by a usage limit at its schedule's due times gets the prompt once, after the
/// reset: the first fire's prompt waits behind the refused message, the later fires find it
/// waiting (`still_waiting`) and send nothing more, and the model is asked it once, after the
/// reset. Before `still_waiting` each due time queued a prompt of its own, and the model was
/// asked it once per due time after the reset.
#[cfg_attr(
    botvisor_skip_claude,
    ignore = "BOTVISOR_TEST_CLAUDE_BIN not set: no real Claude Code to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bot_limited_at_its_due_times_gets_the_prompt_once_after_the_reset() {
    let Some(claude) = claude_bin() else { return };
    let Some((env, um)) = crate::survival::installed(&claude, None).await else {
        return;
    };
    let reset = botvisor::time::unix_now() + RESET_AFTER_S;
    let asked: Asked = Arc::default();
    let api = stand_in_api::StandInApi::start(limited_until(reset, asked.clone())).await;
    let conn = um.connect().await;
    let (bot, path) = claude_bot(&env, &conn, &api.url, true).await;
    let first = bounded("Send", bot.send("first", HashMap::new()))
        .await
        .unwrap();
    let deadline = Instant::now() + EVENT_TIMEOUT;
    while bot.state().await.unwrap_or_default() != "limited" {
        assert!(Instant::now() < deadline, "the limit holds the bot");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let s = schedules(&conn).await;
    let mut fired = s.receive_schedule_fired().await.unwrap();
    let id = every_two_seconds(&s, &path, &um).await;
    let mut outcomes = Vec::new();
    bounded("three fires while the limit holds", async {
        while outcomes.len() < 3 {
            let f = fired.next().await.unwrap();
            let a = f.args().unwrap();
            if a.id == id {
                outcomes.push((a.outcome.clone(), a.turn_id.clone()));
            }
        }
    })
    .await;
    bounded("DeleteSchedule", s.delete_schedule(&id))
        .await
        .unwrap();
    assert!(
        botvisor::time::unix_now() < reset,
        "the three fires came while the limit held (the test is too slow for its reset)"
    );
    let tick = outcomes[0].1.clone();
    assert_eq!(
        outcomes,
        [
            ("queued".to_owned(), tick.clone()),
            ("still_waiting".to_owned(), tick.clone()),
            ("still_waiting".to_owned(), tick.clone()),
        ],
        "one prompt waits for the reset"
    );
    assert_eq!(turn_ends(&bot, &first).await, ["success"]);
    assert_eq!(turn_ends(&bot, &tick).await, ["success"]);
    let answered: Vec<(i64, String)> = asked
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, _, refused)| !refused)
        .map(|(at, text, _)| (*at, text.clone()))
        .collect();
    let ticks: Vec<i64> = answered
        .iter()
        .filter(|(_, t)| t == "tick")
        .map(|(at, _)| *at)
        .collect();
    assert!(
        ticks.len() == 1 && ticks[0] >= reset,
        "the model was asked the scheduled prompt once, after the reset ({reset}): {answered:?}"
    );
}
