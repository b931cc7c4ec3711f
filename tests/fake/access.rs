//! Design rule 14 from outside: on a bus whose policy admits other users, a client of another
//! user (uid 65534, `nobody`) can neither call nor read anything about the user's bots, and hears
//! none of the daemon's signals about them, while the user's own clients hear all of them.
//!
//! The other user's client is this test binary run again (`other_user_client`) as root, which
//! drops to uid and gid 65534 before it connects, then takes commands on stdin.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use zbus::{Connection, Variant};

use botvisor::dbus::{BOT_INTERFACE, BUS_NAME, MANAGER_INTERFACE, ROOT_PATH};
use support::stand_in_api::{ApiRequest, Reply, Script};
use support::*;

/// Set for the helper run: the bus address to connect to.
const HELPER_ENV: &str = "BOTVISOR_TEST_OTHER_USER_BUS";
/// The other user (and group): `nobody`.
const NOBODY: u32 = 65534;
/// What marks the helper's answers (the test harness prints its own lines too).
const MARK: &str = "OTHER-USER: ";

const OUR_DENIAL: &str = "org.botvisor.Botvisor1.Error.AccessDenied";
/// `Properties.GetAll` can only answer a standard error.
const STANDARD_DENIAL: &str = "org.freedesktop.DBus.Error.AccessDenied";

// ----- the other user's client (the helper run) ------------------------------------------------

/// Not a test of its own: the other user's client when [`HELPER_ENV`] is set, else nothing.
#[test]
fn other_user_client() {
    let Ok(address) = std::env::var(HELPER_ENV) else {
        return;
    };
    // SAFETY: plain system calls; the process gives up root for good before it connects.
    unsafe {
        assert_eq!(libc::setgroups(0, std::ptr::null()), 0, "setgroups");
        assert_eq!(libc::setgid(NOBODY), 0, "setgid");
        assert_eq!(libc::setuid(NOBODY), 0, "setuid");
        assert_eq!(libc::getuid(), NOBODY);
        assert_eq!(libc::geteuid(), NOBODY);
    }
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(serve_commands(address));
}

fn answer(v: Value) {
    println!("{MARK}{v}");
}

async fn serve_commands(address: String) {
    let conn = zbus::connection::Builder::address(address.as_str())
        .build()
        .await
        .expect("the other user connects");
    // Whatever a plain match rule for every signal lets through.
    let rule = zbus::MatchRule::builder()
        .msg_type(zbus::message::Type::Signal)
        .build()
        .unwrap();
    let mut stream = zbus::MessageStream::for_match_rule(rule, &conn, None)
        .await
        .unwrap();
    let heard = Arc::new(Mutex::new(Vec::<Value>::new()));
    let log = heard.clone();
    tokio::spawn(async move {
        while let Some(Ok(msg)) = stream.next().await {
            let hdr = msg.header();
            let body = msg.body();
            log.lock().unwrap().push(json!({
                "sender": hdr.sender().map(|s| s.to_string()),
                "path": hdr.path().map(|p| p.to_string()),
                "interface": hdr.interface().map(|i| i.to_string()),
                "member": hdr.member().map(|m| m.to_string()),
                "body": String::from_utf8_lossy(&body.data()[..]),
            }));
        }
    });
    answer(json!({"ready": conn.unique_name().unwrap().as_str()}));
    let (tx, mut commands) = tokio::sync::mpsc::unbounded_channel::<String>();
    std::thread::spawn(move || {
        for line in std::io::BufRead::lines(std::io::stdin().lock()) {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    while let Some(line) = commands.recv().await {
        let cmd: Value = serde_json::from_str(&line).unwrap();
        match cmd["cmd"].as_str() {
            Some("probe") => {
                let results = probe(&conn, cmd["bot"].as_str().unwrap()).await;
                answer(json!({ "probe": results }));
            }
            Some("report") => {
                let heard = heard.lock().unwrap().clone();
                answer(json!({ "heard": heard }));
                return;
            }
            other => panic!("unknown command {other:?}"),
        }
    }
}

/// The error name a call got, or `answered`.
async fn outcome<B>(conn: &Connection, path: &str, iface: &str, member: &str, body: &B) -> String
where
    B: serde::Serialize + zbus::zvariant::DynamicType,
{
    match conn
        .call_method(Some(BUS_NAME), path, Some(iface), member, body)
        .await
    {
        Ok(_) => "answered".to_owned(),
        Err(zbus::Error::MethodError(name, _, _)) => name.to_string(),
        Err(zbus::Error::FDO(e)) => zbus::DBusError::name(&*e).to_string(),
        Err(e) => format!("failed: {e}"),
    }
}

/// Every method, and every read, on the root and on the bot at `bot`: `[what, outcome]`.
async fn probe(conn: &Connection, bot: &str) -> Vec<(String, String)> {
    let none: HashMap<&str, Variant<'_>> = HashMap::new();
    let cwd: HashMap<&str, Variant<'_>> = HashMap::from([("cwd", Variant::from("/tmp"))]);
    let props = "org.freedesktop.DBus.Properties";
    let mut out = Vec::new();
    let mut note = |what: &str, o: String| out.push((what.to_owned(), o));
    note(
        "CreateBot",
        outcome(conn, ROOT_PATH, MANAGER_INTERFACE, "CreateBot", &(&cwd,)).await,
    );
    note(
        "ListBots",
        outcome(conn, ROOT_PATH, MANAGER_INTERFACE, "ListBots", &()).await,
    );
    note(
        "GetBot",
        outcome(conn, ROOT_PATH, MANAGER_INTERFACE, "GetBot", &("a",)).await,
    );
    note(
        "ListSpend",
        outcome(conn, ROOT_PATH, MANAGER_INTERFACE, "ListSpend", &(&none,)).await,
    );
    let get_managed = "GetManagedObjects";
    let om = "org.freedesktop.DBus.ObjectManager";
    note(
        get_managed,
        outcome(conn, ROOT_PATH, om, get_managed, &()).await,
    );
    for p in ["Version", "Runtimes", "PermissionModes"] {
        let what = format!("Get Manager.{p}");
        note(
            &what,
            outcome(conn, ROOT_PATH, props, "Get", &(MANAGER_INTERFACE, p)).await,
        );
    }
    note(
        "GetAll Manager",
        outcome(conn, ROOT_PATH, props, "GetAll", &(MANAGER_INTERFACE,)).await,
    );
    let b = BOT_INTERFACE;
    note(
        "Send",
        outcome(conn, bot, b, "Send", &("from another user", &none)).await,
    );
    for m in ["Stop", "Delete", "Hold", "Release", "Interrupt"] {
        note(m, outcome(conn, bot, b, m, &()).await);
    }
    note(
        "SetPermissionMode",
        outcome(conn, bot, b, "SetPermissionMode", &("plan",)).await,
    );
    note(
        "SetModel",
        outcome(conn, bot, b, "SetModel", &("opus",)).await,
    );
    note("Restart", outcome(conn, bot, b, "Restart", &(&none,)).await);
    let respond = ("some-request", "allow", &none);
    note(
        "RespondPermission",
        outcome(conn, bot, b, "RespondPermission", &respond).await,
    );
    note(
        "GetChat",
        outcome(conn, bot, b, "GetChat", &(0u64, 0u32)).await,
    );
    note(
        "GetLogin",
        outcome(conn, bot, b, "GetLogin", &(&none,)).await,
    );
    for p in [
        "Id",
        "Name",
        "Cwd",
        "Runtime",
        "Model",
        "PermissionMode",
        "State",
        "SessionId",
        "ProcessId",
        "LastError",
        "QueuedMessages",
        "Holders",
        "PendingPermissions",
        "PartialText",
        "StopVerdict",
    ] {
        note(
            &format!("Get Bot.{p}"),
            outcome(conn, bot, props, "Get", &(b, p)).await,
        );
    }
    note(
        "GetAll Bot",
        outcome(conn, bot, props, "GetAll", &(b,)).await,
    );
    out
}

// ----- the test's side ------------------------------------------------------------------------

/// The other user's client, seen from the test.
struct OtherUser {
    child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
}

impl OtherUser {
    /// Starts it on `env`'s bus and waits until it listens.
    async fn start(env: &TestEnv) -> OtherUser {
        let mut child = tokio::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                // The test's name as the harness knows it: its module path without the crate.
                concat!(module_path!(), "::other_user_client")
                    .split_once("::")
                    .unwrap()
                    .1,
                "--nocapture",
                "--test-threads=1",
            ])
            .env(HELPER_ENV, &env.bus.address)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut other = OtherUser {
            child,
            stdin,
            lines,
        };
        let ready = other.next_answer().await;
        assert!(ready["ready"].as_str().is_some(), "{ready}");
        other
    }

    async fn next_answer(&mut self) -> Value {
        tokio::time::timeout(EVENT_TIMEOUT, async {
            while let Some(line) = self.lines.next_line().await.unwrap() {
                // The harness may have begun the line (`test other_user_client ... `).
                if let Some(at) = line.find(MARK) {
                    return serde_json::from_str(&line[at + MARK.len()..]).unwrap();
                }
            }
            panic!("the other user's client ended without answering");
        })
        .await
        .expect("the other user's client answers")
    }

    async fn ask(&mut self, cmd: Value) -> Value {
        let line = format!("{cmd}\n");
        self.stdin.write_all(line.as_bytes()).await.unwrap();
        self.next_answer().await
    }

    /// Every call and read on `bot` and the root: `(what, error name)`.
    async fn probe(&mut self, bot: &str) -> Vec<(String, String)> {
        let v = self.ask(json!({"cmd": "probe", "bot": bot})).await;
        serde_json::from_value(v["probe"].clone()).unwrap()
    }

    /// What it heard from `sender`, and ends it.
    async fn heard_from(mut self, sender: &str) -> Vec<Value> {
        let v = self.ask(json!({"cmd": "report"})).await;
        let _ = self.child.wait().await;
        v["heard"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["sender"] == sender)
            .cloned()
            .collect()
    }
}

/// Waits until the daemon's log says that signals now go only to the user's connections.
async fn wait_restricted(daemon: &Daemon) {
    tokio::time::timeout(EVENT_TIMEOUT, async {
        let mut poll = tokio::time::interval(Duration::from_millis(20));
        loop {
            if daemon
                .log_text()
                .contains("sends its signals only to the connections of user")
            {
                return;
            }
            poll.tick().await;
        }
    })
    .await
    .expect("botvisord notices the other user's connection");
}

/// Every signal the daemon sends that `conn` receives.
async fn signal_log(conn: &Connection) -> zbus::MessageStream {
    let rule = zbus::MatchRule::builder()
        .msg_type(zbus::message::Type::Signal)
        .sender(BUS_NAME)
        .build()
        .unwrap();
    zbus::MessageStream::for_match_rule(rule, conn, None)
        .await
        .unwrap()
}

/// `(member, body as text)` of what the log holds now.
fn drain(log: &mut zbus::MessageStream) -> Vec<(String, String)> {
    let mut out = Vec::new();
    while let Some(Some(Ok(msg))) = futures_util::FutureExt::now_or_never(log.next()) {
        let member = msg
            .header()
            .member()
            .map(|m| m.to_string())
            .unwrap_or_default();
        out.push((
            member,
            String::from_utf8_lossy(&msg.body().data()[..]).into_owned(),
        ));
    }
    out
}

async fn daemon_name(conn: &Connection) -> String {
    zbus::fdo::DBusProxy::new(conn)
        .await
        .unwrap()
        .get_name_owner(BUS_NAME.try_into().unwrap())
        .await
        .unwrap()
        .to_string()
}

fn assert_all_denied(results: &[(String, String)]) {
    assert!(results.len() > 30, "{results:?}");
    for (what, outcome) in results {
        let want = if what.starts_with("GetAll") {
            STANDARD_DENIAL
        } else {
            OUR_DENIAL
        };
        assert_eq!(outcome, want, "{what}: another user got an answer");
    }
}

/// Fails if the other user heard any signal about a bot, or any text of `secrets`.
fn assert_heard_nothing(heard: &[Value], secrets: &[&str]) {
    for s in heard {
        let member = s["member"].as_str().unwrap_or_default();
        assert!(
            !matches!(
                member,
                "ChatItemAdded"
                    | "TurnFinished"
                    | "TextDelta"
                    | "PermissionRequested"
                    | "PropertiesChanged"
            ),
            "the other user heard {s}"
        );
        let body = s["body"].as_str().unwrap_or_default();
        for secret in secrets {
            assert!(
                !body.contains(secret),
                "the other user heard `{secret}`: {s}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_user_can_neither_call_nor_read_and_hears_nothing_of_the_users_bots() {
    let env = TestEnv::open_to_all().await;
    let fake = FakeSetup::start_in(env, "stop_grace_s = 0.5\n").await;
    let env = &fake.env;
    let cwd = env.dir.path().join("hidden-project-7391");
    std::fs::create_dir(&cwd).unwrap();
    let bot_env = fake_env(
        &env.home,
        &fake.state,
        json!([{"mode": "normal"}]),
        &env.marker,
    );
    let mut options = create_options(cwd.to_str().unwrap(), &bot_env);
    options.insert("name", Variant::from("private-name-7391"));
    let path = env.manager().await.create_bot(options).await.unwrap();
    let bot = env.bot(&path).await;
    assert_eq!(
        send_and_wait(&bot, "the secret word is PAPAYA-7391")
            .await
            .outcome,
        "success"
    );
    let items_before = chat(&bot).await.len();

    let mut user_log = signal_log(&env.conn).await;
    let mut other = OtherUser::start(env).await;
    wait_restricted(&fake.daemon).await;

    // Every method and every read is refused, and nothing changed.
    assert_all_denied(&other.probe(path.as_str()).await);
    assert_eq!(
        env.manager().await.list_bots().await.unwrap(),
        vec![path.clone()]
    );
    assert_eq!(chat(&bot).await.len(), items_before);
    assert_eq!(bot.holders().await.unwrap(), 0);
    assert_eq!(bot.permission_mode().await.unwrap(), "");
    assert_eq!(bot.model().await.unwrap(), "");
    assert_eq!(bot.queued_messages().await.unwrap(), 0);

    // The user goes on talking and creates a bot: the user's clients hear all of it.
    let seen = send_and_wait(&bot, "PAPAYA-7391 once more").await;
    assert_eq!(seen.outcome, "success");
    assert!(
        seen.items.iter().any(
            |(_, k, p)| k == "assistant" && p["text"].as_str().unwrap().contains("PAPAYA-7391")
        ),
        "{seen:?}"
    );
    let second = env.dir.path().join("second-7391");
    std::fs::create_dir(&second).unwrap();
    let second_path = env
        .manager()
        .await
        .create_bot(HashMap::from([
            ("cwd", Variant::from(second.to_str().unwrap())),
            ("name", Variant::from("second-private-7391")),
        ]))
        .await
        .unwrap();
    env.bot(&second_path).await.delete().await.unwrap();
    let mut user_heard = Vec::new();
    tokio::time::timeout(EVENT_TIMEOUT, async {
        loop {
            user_heard.extend(drain(&mut user_log));
            if user_heard.iter().any(|(m, _)| m == "InterfacesRemoved") {
                return;
            }
            user_log_next(&mut user_log, &mut user_heard).await;
        }
    })
    .await
    .expect("the user hears the second bot come and go");
    for member in [
        "ChatItemAdded",
        "TurnFinished",
        "PropertiesChanged",
        "InterfacesAdded",
    ] {
        assert!(
            user_heard.iter().any(|(m, _)| m == member),
            "the user did not hear {member}: {user_heard:?}"
        );
    }
    assert!(
        user_heard
            .iter()
            .any(|(m, b)| m == "InterfacesAdded" && b.contains("second-private-7391")),
        "the user hears the new bot's properties: {user_heard:?}"
    );
    assert!(
        user_heard
            .iter()
            .any(|(m, b)| m == "ChatItemAdded" && b.contains("PAPAYA-7391")),
        "{user_heard:?}"
    );

    let daemon = daemon_name(&env.conn).await;
    let heard = other.heard_from(&daemon).await;
    assert_heard_nothing(
        &heard,
        &[
            "PAPAYA-7391",
            "hidden-project-7391",
            "private-name-7391",
            "second-private-7391",
            "second-7391",
        ],
    );
}

/// Waits for the next message of `log` into `heard`.
async fn user_log_next(log: &mut zbus::MessageStream, heard: &mut Vec<(String, String)>) {
    if let Some(Ok(msg)) = log.next().await {
        let member = msg
            .header()
            .member()
            .map(|m| m.to_string())
            .unwrap_or_default();
        heard.push((
            member,
            String::from_utf8_lossy(&msg.body().data()[..]).into_owned(),
        ));
    }
}

const STREAMED: &str = "PAPAYA-STREAM-5512";
const WRITTEN: &str = "PAPAYA-CONTENT-5512";

fn script(target: std::path::PathBuf) -> Script {
    Arc::new(move |req: &ApiRequest| {
        if req.has_tool_result {
            Reply::Text("I tried.".into())
        } else if req.last_user_text.contains("write") {
            Reply::ToolUse {
                name: "Write".into(),
                input: json!({"file_path": target.to_str().unwrap(), "content": WRITTEN}),
            }
        } else {
            Reply::SlowText {
                chunks: [
                    "The ", "word ", "is ", STREAMED, " and ", "that ", "is ", "all.",
                ]
                .map(String::from)
                .to_vec(),
                every: Duration::from_millis(120),
            }
        }
    })
}

#[cfg_attr(
    botvisor_skip_claude,
    ignore = "BOTVISOR_TEST_CLAUDE_BIN not set: no real Claude Code to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_user_hears_no_streamed_text_and_no_permission_request() {
    let Some(claude) = claude_bin() else { return };
    let env = TestEnv::open_to_all().await;
    let target = env.work.join("out.txt");
    let setup = RealSetup::start(&env, claude, script(target.clone())).await;
    let other = OtherUser::start(&env).await;
    wait_restricted(&setup.daemon).await;

    let bot = setup.create_bot(&env, &env.work, &[]).await;
    let mut deltas = bot.receive_text_delta().await.unwrap();
    let streamed = send_and_wait(&bot, "say the word PAPAYA-ASKED-5512").await;
    assert_eq!(streamed.outcome, "success", "{streamed:?}");
    let mut text = String::new();
    while let Some(Some(d)) = futures_util::FutureExt::now_or_never(deltas.next()) {
        text.push_str(&d.args().unwrap().text);
    }
    assert!(
        text.contains(STREAMED),
        "the user sees the text stream: {text:?}"
    );

    let prompt = {
        let bot = bot.clone();
        tokio::spawn(async move {
            let mut prompts = bot.receive_permission_requested().await.unwrap();
            let sig = tokio::time::timeout(EVENT_TIMEOUT, prompts.next())
                .await
                .expect("the user hears the permission request")
                .unwrap();
            let a = sig.args().unwrap();
            assert!(a.input_json.contains(WRITTEN), "{}", a.input_json);
            bot.respond_permission(&a.request_id, "deny", HashMap::new())
                .await
                .unwrap();
        })
    };
    let asked = send_and_wait(&bot, "please write the file").await;
    prompt.await.unwrap();
    assert!(!target.exists());
    assert!(
        asked
            .items
            .iter()
            .any(|(_, k, _)| k == "permission_request"),
        "{asked:?}"
    );

    let daemon = daemon_name(&env.conn).await;
    let heard = other.heard_from(&daemon).await;
    assert_heard_nothing(
        &heard,
        &[
            STREAMED,
            WRITTEN,
            "PAPAYA-ASKED-5512",
            env.work.to_str().unwrap(),
        ],
    );
}
