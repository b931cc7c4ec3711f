//! Tier 2: the API's contract on a private bus, with a stand-in binary for the CLI (these tests
//! never send a message, so no agent runs).

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use futures_util::StreamExt;
use zbus::Variant;

use support::*;

/// An executable that stands where the CLI binary is expected (never run by these tests).
fn placeholder_cli(dir: &Path) -> PathBuf {
    let path = dir.join("claude-placeholder");
    std::fs::write(&path, "#!/bin/sh\nexit 0\n").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn error_name(e: &zbus::Error) -> String {
    match e {
        zbus::Error::MethodError(name, _, _) => name.to_string(),
        other => format!("not a method error: {other}"),
    }
}

fn error_text(e: &zbus::Error) -> String {
    match e {
        zbus::Error::MethodError(_, Some(text), _) => text.clone(),
        other => other.to_string(),
    }
}

/// A daemon whose bots run [`placeholder_cli`] (none is ever started in these tests).
async fn placeholder_daemon(env: &TestEnv) -> Daemon {
    let cli = placeholder_cli(env.dir.path());
    Daemon::start(&env.daemon_config(Some(cli)), &env.conn).await
}

async fn bot_count(env: &TestEnv) -> usize {
    env.manager().await.list_bots().await.unwrap().len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_calls_get_named_errors_and_change_nothing() {
    let env = TestEnv::new().await;
    let _daemon = placeholder_daemon(&env).await;
    let manager = env.manager().await;
    let work = env.work.to_str().unwrap().to_owned();
    let file = env.dir.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let file = file.to_str().unwrap().to_owned();

    // Environments no program can be started with.
    let huge = "x".repeat(128 * 1024);
    let many: HashMap<String, String> = (0..1025).map(|i| (format!("V{i}"), "1".into())).collect();
    let long_name_eq = format!("{}=", "N".repeat(300));
    let cases: Vec<(&str, HashMap<&str, Variant<'_>>, &str, &str)> = vec![
        ("no cwd", HashMap::new(), "InvalidArgument", "cwd"),
        (
            "relative cwd",
            HashMap::from([("cwd", Variant::from("work"))]),
            "InvalidArgument",
            "absolute",
        ),
        (
            "missing cwd",
            HashMap::from([("cwd", Variant::from("/no/such/folder/here"))]),
            "InvalidArgument",
            "/no/such/folder/here",
        ),
        (
            "cwd is a file",
            HashMap::from([("cwd", Variant::from(file.as_str()))]),
            "InvalidArgument",
            "not a directory",
        ),
        (
            "unknown runtime",
            HashMap::from([
                ("cwd", Variant::from(work.as_str())),
                ("runtime", Variant::from("gpt-cli")),
            ]),
            "InvalidArgument",
            "gpt-cli",
        ),
        (
            "wrong option type",
            HashMap::from([("cwd", Variant::from(42u32))]),
            "InvalidArgument",
            "`cwd` must be of type `s`",
        ),
        (
            "wrong env type",
            HashMap::from([
                ("cwd", Variant::from(work.as_str())),
                ("env", Variant::from(vec!["A=1"])),
            ]),
            "InvalidArgument",
            "`env`",
        ),
        (
            "unknown option",
            HashMap::from([
                ("cwd", Variant::from(work.as_str())),
                ("cwdd", Variant::from("x")),
            ]),
            "InvalidArgument",
            "cwdd",
        ),
        (
            "unknown permission mode",
            HashMap::from([
                ("cwd", Variant::from(work.as_str())),
                ("permission_mode", Variant::from("yolo")),
            ]),
            "InvalidArgument",
            "yolo",
        ),
        (
            "idle timeout beyond a year",
            HashMap::from([
                ("cwd", Variant::from(work.as_str())),
                ("idle_timeout_s", Variant::from(u64::MAX)),
            ]),
            "InvalidArgument",
            "at most",
        ),
        (
            "a negative budget",
            HashMap::from([
                ("cwd", Variant::from(work.as_str())),
                ("budget_usd", Variant::from(-1.0)),
            ]),
            "InvalidArgument",
            "budget_usd",
        ),
        (
            "a budget that is not a number",
            HashMap::from([
                ("cwd", Variant::from(work.as_str())),
                ("budget_usd", Variant::from("5")),
            ]),
            "InvalidArgument",
            "budget_usd",
        ),
        (
            "a name that could be a bot id",
            HashMap::from([
                ("cwd", Variant::from(work.as_str())),
                ("name", Variant::from("deadbeef")),
            ]),
            "InvalidArgument",
            "bot id",
        ),
        (
            "a name with a leading space",
            HashMap::from([
                ("cwd", Variant::from(work.as_str())),
                ("name", Variant::from(" demo")),
            ]),
            "InvalidArgument",
            "begins or ends with U+0020",
        ),
        (
            "a name with a trailing no-break space",
            HashMap::from([
                ("cwd", Variant::from(work.as_str())),
                ("name", Variant::from("demo\u{a0}")),
            ]),
            "InvalidArgument",
            "begins or ends with U+00A0",
        ),
        (
            "a name ending in a Hangul filler, which shows blank",
            HashMap::from([
                ("cwd", Variant::from(work.as_str())),
                ("name", Variant::from("demo\u{3164}")),
            ]),
            "InvalidArgument",
            "U+3164",
        ),
        (
            "a name ending in a Khmer inherent vowel",
            HashMap::from([
                ("cwd", Variant::from(work.as_str())),
                ("name", Variant::from("x\u{17b4}")),
            ]),
            "InvalidArgument",
            "U+17B4",
        ),
        (
            "a name of blank braille only",
            HashMap::from([
                ("cwd", Variant::from(work.as_str())),
                ("name", Variant::from("\u{2800}\u{2800}")),
            ]),
            "InvalidArgument",
            "U+2800",
        ),
        (
            "a name of spaces only",
            HashMap::from([
                ("cwd", Variant::from(work.as_str())),
                ("name", Variant::from("   ")),
            ]),
            "InvalidArgument",
            "U+0020",
        ),
        (
            "a name with a newline",
            HashMap::from([
                ("cwd", Variant::from(work.as_str())),
                ("name", Variant::from("two\nlines")),
            ]),
            "InvalidArgument",
            "U+000A",
        ),
        (
            "a name with an escape sequence",
            HashMap::from([
                ("cwd", Variant::from(work.as_str())),
                ("name", Variant::from("red\u{1b}[31m")),
            ]),
            "InvalidArgument",
            "U+001B",
        ),
        (
            "a name with a right-to-left override",
            HashMap::from([
                ("cwd", Variant::from(work.as_str())),
                ("name", Variant::from("demo\u{202e}txt.exe")),
            ]),
            "InvalidArgument",
            "U+202E",
        ),
        (
            "a name with a bidi isolate",
            HashMap::from([
                ("cwd", Variant::from(work.as_str())),
                ("name", Variant::from("a\u{2067}b")),
            ]),
            "InvalidArgument",
            "U+2067",
        ),
        (
            "a name with a C1 control",
            HashMap::from([
                ("cwd", Variant::from(work.as_str())),
                ("name", Variant::from("a\u{9b}2Jb")),
            ]),
            "InvalidArgument",
            "U+009B",
        ),
        (
            "a variable too long for Linux to pass to a program",
            HashMap::from([
                ("cwd", Variant::from(work.as_str())),
                (
                    "env",
                    Variant::from(HashMap::from([("BIG", huge.as_str())])),
                ),
            ]),
            "InvalidArgument",
            "`BIG` is 131076 bytes",
        ),
        (
            "more variables than a bot may have",
            HashMap::from([
                ("cwd", Variant::from(work.as_str())),
                ("env", Variant::from(many.clone())),
            ]),
            "InvalidArgument",
            "1025 variables",
        ),
        (
            "a variable name over a line long, shown bounded",
            HashMap::from([
                ("cwd", Variant::from(work.as_str())),
                (
                    "env",
                    Variant::from(HashMap::from([(long_name_eq.as_str(), "x")])),
                ),
            ]),
            "InvalidArgument",
            "…` (empty, or holds `=`",
        ),
        (
            "negative idle timeout",
            HashMap::from([
                ("cwd", Variant::from(work.as_str())),
                ("idle_timeout_s", Variant::from(-5i32)),
            ]),
            "InvalidArgument",
            "negative",
        ),
    ];
    for (what, options, name, mention) in cases {
        let err = manager.create_bot(options).await.unwrap_err();
        assert_eq!(
            error_name(&err),
            format!("org.botvisor.Botvisor1.Error.{name}"),
            "{what}: {err}"
        );
        assert!(error_text(&err).contains(mention), "{what}: {err}");
        assert_eq!(bot_count(&env).await, 0, "{what} changed something");
    }

    // Names pick bots out: an explicit duplicate is refused, a default one gets a suffix.
    let named = manager
        .create_bot(HashMap::from([
            ("cwd", Variant::from(work.as_str())),
            ("name", Variant::from("twin")),
        ]))
        .await
        .unwrap();
    let err = manager
        .create_bot(HashMap::from([
            ("cwd", Variant::from(work.as_str())),
            ("name", Variant::from("twin")),
        ]))
        .await
        .unwrap_err();
    assert_eq!(
        error_name(&err),
        "org.botvisor.Botvisor1.Error.InvalidArgument"
    );
    // One that looks the same in a terminal is the same name: a variation selector after it.
    let err = manager
        .create_bot(HashMap::from([
            ("cwd", Variant::from(work.as_str())),
            ("name", Variant::from("twin\u{fe0f}")),
        ]))
        .await
        .unwrap_err();
    assert!(error_text(&err).contains("looks the same"), "{err}");
    // An emoji sequence may end a name.
    let heart = manager
        .create_bot(HashMap::from([
            ("cwd", Variant::from(work.as_str())),
            ("name", Variant::from("ok \u{2764}\u{fe0f}")),
        ]))
        .await
        .unwrap();
    env.bot(&heart).await.delete().await.unwrap();
    env.bot(&named).await.delete().await.unwrap();
    let long_name = "n".repeat(201);
    let err = manager
        .create_bot(HashMap::from([
            ("cwd", Variant::from(work.as_str())),
            ("name", Variant::from(long_name.as_str())),
        ]))
        .await
        .unwrap_err();
    assert_eq!(
        error_name(&err),
        "org.botvisor.Botvisor1.Error.InvalidArgument"
    );

    // Joiners are not controls: an emoji sequence is a fine name.
    let emoji = manager
        .create_bot(HashMap::from([
            ("cwd", Variant::from(work.as_str())),
            ("name", Variant::from("👩\u{200d}💻 pair")),
        ]))
        .await
        .unwrap();
    env.bot(&emoji).await.delete().await.unwrap();
    // A default name comes from the folder: what a name may not hold becomes `_`.
    let odd = env.dir.path().join("odd\u{1b}[2J\u{202e}dir");
    std::fs::create_dir(&odd).unwrap();
    let odd_bot = manager
        .create_bot(HashMap::from([(
            "cwd",
            Variant::from(odd.to_str().unwrap()),
        )]))
        .await
        .unwrap();
    let odd_bot = env.bot(&odd_bot).await;
    assert_eq!(odd_bot.name().await.unwrap(), "odd_[2J_dir");
    odd_bot.delete().await.unwrap();

    // An unknown bot.
    let err = manager.get_bot("no-such-bot").await.unwrap_err();
    assert_eq!(error_name(&err), "org.botvisor.Botvisor1.Error.NotFound");

    // A valid bot, then an empty message: named error, no chat item.
    let path = manager
        .create_bot(HashMap::from([("cwd", Variant::from(work.as_str()))]))
        .await
        .unwrap();
    assert_eq!(manager.get_bot("work").await.unwrap(), path);
    let bot = env.bot(&path).await;
    let err = bot.send("  ", HashMap::new()).await.unwrap_err();
    assert_eq!(
        error_name(&err),
        "org.botvisor.Botvisor1.Error.InvalidArgument"
    );
    let err = bot
        .send("hi", HashMap::from([("bogus", Variant::from(true))]))
        .await
        .unwrap_err();
    assert_eq!(
        error_name(&err),
        "org.botvisor.Botvisor1.Error.InvalidArgument"
    );
    // A permission answer that cannot be one: named error, nothing recorded.
    for (behavior, option, value, says) in [
        ("maybe", None, "", "`allow` or `deny`, got `maybe`"),
        (
            "allow",
            Some("updated_input"),
            "[1]",
            "must be a JSON object",
        ),
        (
            "allow",
            Some("message"),
            "why",
            "`message` goes with `deny`",
        ),
        (
            "deny",
            Some("updated_input"),
            "{}",
            "`updated_input` goes with `allow`",
        ),
    ] {
        let options: HashMap<&str, Variant<'_>> = option
            .map(|o| (o, Variant::from(value)))
            .into_iter()
            .collect();
        let err = bot
            .respond_permission("no-such-request", behavior, options)
            .await
            .unwrap_err();
        assert_eq!(
            error_name(&err),
            "org.botvisor.Botvisor1.Error.InvalidArgument",
            "{behavior} {option:?}"
        );
        assert!(error_text(&err).contains(says), "{err}");
    }
    // An environment that cannot be one: named error, and the bot's own is unchanged (it still
    // starts: the one it has is the daemon's, which the placeholder CLI does not need).
    for (env_map, says) in [
        (
            HashMap::from([("BIG".to_owned(), huge.clone())]),
            "over the 131071",
        ),
        (many.clone(), "1025 variables"),
        (
            (0..5)
                .map(|i| (format!("V{i}"), "y".repeat(120 * 1024)))
                .collect(),
            "over the 524288",
        ),
        (
            HashMap::from([("A=B".to_owned(), "x".to_owned())]),
            "invalid variable name",
        ),
    ] {
        let env_map: HashMap<&str, &str> = env_map
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let err = bot
            .set_environment(env_map, HashMap::new())
            .await
            .unwrap_err();
        assert_eq!(
            error_name(&err),
            "org.botvisor.Botvisor1.Error.InvalidArgument",
            "{says}"
        );
        assert!(error_text(&err).contains(says), "{err}");
    }
    // A budget that cannot be one: named error, the budget in force unchanged.
    for budget in [-0.01, f64::NAN, f64::INFINITY, 2e9] {
        let err = bot.set_budget(budget).await.unwrap_err();
        assert_eq!(
            error_name(&err),
            "org.botvisor.Botvisor1.Error.InvalidArgument",
            "{budget}"
        );
        assert!(error_text(&err).contains("budget_usd"), "{err}");
    }
    assert_eq!(bot.budget_usd().await.unwrap(), 0.0);
    assert!(bot.get_chat(0, 0).await.unwrap().is_empty());
    assert_eq!(bot.queued_messages().await.unwrap(), 0);
    let again = manager
        .create_bot(HashMap::from([("cwd", Variant::from(work.as_str()))]))
        .await
        .unwrap();
    assert_eq!(env.bot(&again).await.name().await.unwrap(), "work-2");

    // The chats are private to the user.
    use std::os::unix::fs::PermissionsExt;
    let db = env.dir.path().join("botvisor.db");
    let mode = std::fs::metadata(&db).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the database is readable by others");
}

/// The bus carries a dictionary as a list of entries, so a client can give an option twice (as
/// `busctl` does here); a map keeps one of them silently, and a bot was made in the second
/// folder. The call is refused, naming the key, and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_option_given_twice_is_refused_by_name() {
    let env = TestEnv::new().await;
    let _daemon = placeholder_daemon(&env).await;
    let work = env.work.to_str().unwrap().to_owned();
    let other = env.dir.path().join("other");
    std::fs::create_dir_all(&other).unwrap();
    let other = other.to_str().unwrap().to_owned();
    let twice = busctl_create_bot(
        &env.bus.address,
        30,
        &[
            "3", "cwd", "s", &work, "name", "s", "first", "cwd", "s", &other,
        ],
    )
    .await
    .expect_err("a key given twice is refused");
    assert!(
        twice.contains("`cwd`") && twice.contains("more than once"),
        "{twice}"
    );
    assert_eq!(bot_count(&env).await, 0, "nothing was made");

    // A bot's method too, and once refused, the same call with each key once is taken.
    let path = busctl_create_bot(&env.bus.address, 30, &["1", "cwd", "s", &work])
        .await
        .unwrap();
    let path = path
        .trim()
        .trim_start_matches("o ")
        .trim_matches('"')
        .to_owned();
    let bot = env
        .bot(&zbus::OwnedObjectPath::try_from(path.clone()).unwrap())
        .await;
    let twice = busctl_call(
        &env.bus.address,
        30,
        &path,
        &[
            "org.botvisor.Botvisor1.Bot",
            "Restart",
            "a{sv}",
            "2",
            "fresh",
            "b",
            "true",
            "fresh",
            "b",
            "false",
        ],
    )
    .await
    .expect_err("a key given twice is refused");
    assert!(
        twice.contains("`fresh`") && twice.contains("more than once"),
        "{twice}"
    );
    assert_eq!(bot.state().await.unwrap(), "stopped", "nothing was started");

    // A dictionary that is an argument itself: SetEnvironment's `env` (`a{ss}`).
    let set_env = |entries: &'static [&'static str]| {
        let (address, path) = (env.bus.address.clone(), path.clone());
        async move {
            let mut args = vec!["org.botvisor.Botvisor1.Bot", "SetEnvironment", "a{ss}a{sv}"];
            args.extend(entries);
            args.push("0");
            busctl_call(&address, 30, &path, &args).await
        }
    };
    let twice = set_env(&["2", "FRUIT", "apple", "FRUIT", "pear"])
        .await
        .expect_err("a variable given twice is refused");
    assert!(
        twice.contains("`FRUIT`") && twice.contains("more than once"),
        "{twice}"
    );
    set_env(&["1", "FRUIT", "apple"]).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_cli_binary_is_runtime_unavailable_on_create_and_send() {
    let env = TestEnv::new().await;
    let cli = placeholder_cli(env.dir.path());
    let mut daemon = Daemon::start(&env.daemon_config(Some(cli.clone())), &env.conn).await;
    let manager = env.manager().await;
    let work = env.work.to_str().unwrap().to_owned();
    let path = manager
        .create_bot(HashMap::from([("cwd", Variant::from(work.as_str()))]))
        .await
        .unwrap();
    std::fs::remove_file(&cli).unwrap();
    let bot = env.bot(&path).await;
    let err = bot.send("hello", HashMap::new()).await.unwrap_err();
    assert_eq!(
        error_name(&err),
        "org.botvisor.Botvisor1.Error.RuntimeUnavailable"
    );
    assert!(error_text(&err).contains("claude-placeholder"), "{err}");
    assert!(error_text(&err).contains("does not exist"), "{err}");
    assert!(bot.get_chat(0, 0).await.unwrap().is_empty());
    // A binary that is there but may not be run is its own case.
    std::fs::write(&cli, "#!/bin/sh\nexit 0\n").unwrap();
    std::fs::set_permissions(&cli, std::fs::Permissions::from_mode(0o644)).unwrap();
    let err = bot.send("hello", HashMap::new()).await.unwrap_err();
    assert_eq!(
        error_name(&err),
        "org.botvisor.Botvisor1.Error.RuntimeUnavailable"
    );
    assert!(error_text(&err).contains("not executable"), "{err}");
    assert!(!error_text(&err).contains("does not exist"), "{err}");
    assert!(bot.get_chat(0, 0).await.unwrap().is_empty());
    std::fs::remove_file(&cli).unwrap();
    let err = manager
        .create_bot(HashMap::from([("cwd", Variant::from(work.as_str()))]))
        .await
        .unwrap_err();
    assert_eq!(
        error_name(&err),
        "org.botvisor.Botvisor1.Error.RuntimeUnavailable"
    );
    assert_eq!(bot_count(&env).await, 1);
    assert!(daemon.terminate().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_daemon_on_the_same_bus_exits_non_zero() {
    let env = TestEnv::new().await;
    let cli = placeholder_cli(env.dir.path());
    let cfg = env.daemon_config(Some(cli));
    let _first = Daemon::start(&cfg, &env.conn).await;
    let mut second_cfg = cfg.clone();
    // Issue 30: a database in a folder that does not exist yet; what the refused start created
    // (the folder, the database and its files, its locks) is gone after it.
    let run = env.home.join("run/botvisor");
    let locks_before = std::fs::read_dir(&run).unwrap().count();
    second_cfg.database = env.dir.path().join("other/sub/other.db");
    let mut second = Daemon::spawn(&second_cfg, "second.log");
    let status = tokio::time::timeout(EVENT_TIMEOUT, second.wait())
        .await
        .expect("the second daemon exits by itself");
    assert!(!status.success());
    assert!(
        second.log_text().contains("already owns"),
        "{}",
        second.log_text()
    );
    assert!(
        !env.dir.path().join("other").exists(),
        "left behind: {:?}\n{}",
        std::fs::read_dir(env.dir.path().join("other/sub")).map(|d| d.count()),
        second.log_text()
    );
    assert_eq!(
        std::fs::read_dir(&run).unwrap().count(),
        locks_before,
        "no lock left"
    );
    // The first one still answers.
    assert_eq!(env.manager().await.version().await.unwrap(), "1");
}

/// Issue 31: `GetManagedObjects` writes its answer from the bots' properties itself (500 bots
/// in under 5 ms); each bot's properties there are exactly what `GetAll` gives, every name,
/// type and value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_property_as_get_all_gives_it() {
    let env = TestEnv::new().await;
    let _daemon = placeholder_daemon(&env).await;
    let work = env.work.to_str().unwrap().to_owned();
    let manager = env.manager().await;
    let plain = manager
        .create_bot(HashMap::from([("cwd", Variant::from(work.as_str()))]))
        .await
        .unwrap();
    let set = manager
        .create_bot(HashMap::from([
            ("cwd", Variant::from(work.as_str())),
            ("name", Variant::from("with settings")),
            ("model", Variant::from("some-model")),
            ("budget_usd", Variant::from(2.5f64)),
            ("created_by", Variant::from("a test")),
        ]))
        .await
        .unwrap();
    let om = object_manager(&env).await;
    managed_is_get_all(&env, &om, &[&plain, &set]).await;
}

/// The daemon's ObjectManager, for this test's client.
async fn object_manager(env: &TestEnv) -> zbus::fdo::ObjectManagerProxy<'static> {
    zbus::fdo::ObjectManagerProxy::builder(&env.conn)
        .destination("org.botvisor.Botvisor1")
        .path("/org/botvisor/Botvisor1")
        .build()
        .await
        .unwrap()
}

/// `GetManagedObjects` names exactly the bots of `paths`, each with exactly the properties
/// `GetAll` gives it, every name, type and value; and `ListBots` names the same bots. A bot
/// may change between the calls (a held bot's agent starting): asked again until the answers
/// agree, within `EVENT_TIMEOUT`; a kept answer that stays behind the view never agrees.
async fn managed_is_get_all(
    env: &TestEnv,
    om: &zbus::fdo::ObjectManagerProxy<'_>,
    paths: &[&zbus::OwnedObjectPath],
) {
    let deadline = tokio::time::Instant::now() + EVENT_TIMEOUT;
    loop {
        let Err(why) = managed_agrees(env, om, paths).await else {
            return;
        };
        assert!(tokio::time::Instant::now() < deadline, "{why}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// One look of [`managed_is_get_all`]: what differs, if anything.
async fn managed_agrees(
    env: &TestEnv,
    om: &zbus::fdo::ObjectManagerProxy<'_>,
    paths: &[&zbus::OwnedObjectPath],
) -> Result<(), String> {
    let objects = om.get_managed_objects().await.unwrap();
    let mut listed: Vec<String> = env
        .manager()
        .await
        .list_bots()
        .await
        .unwrap()
        .iter()
        .map(|p| p.to_string())
        .collect();
    listed.sort();
    let mut managed: Vec<String> = objects.keys().map(|p| p.to_string()).collect();
    managed.sort();
    let mut wanted: Vec<String> = paths.iter().map(|p| p.to_string()).collect();
    wanted.sort();
    if managed != wanted {
        return Err(format!(
            "GetManagedObjects names {managed:?}, not {wanted:?}"
        ));
    }
    if listed != wanted {
        return Err(format!("ListBots names {listed:?}, not {wanted:?}"));
    }
    for path in paths {
        let props = zbus::fdo::PropertiesProxy::builder(&env.conn)
            .destination("org.botvisor.Botvisor1")
            .path((*path).clone())
            .build()
            .await
            .unwrap();
        let iface =
            zbus::names::InterfaceName::from_static_str("org.botvisor.Botvisor1.Bot").unwrap();
        let all = props.get_all(iface.clone()).await.unwrap();
        let managed = &objects[*path];
        assert_eq!(managed.len(), 1, "one interface");
        let managed = &managed[&zbus::names::OwnedInterfaceName::from(iface)];
        let mut names: Vec<_> = all.keys().collect();
        names.sort();
        let mut managed_names: Vec<_> = managed.keys().collect();
        managed_names.sort();
        assert_eq!(managed_names, names, "the same properties");
        for (name, value) in &all {
            if &managed[name] != value {
                return Err(format!(
                    "property {name} of {path}: {:?} in GetManagedObjects, {value:?} in GetAll",
                    managed[name]
                ));
            }
        }
    }
    Ok(())
}

/// Issue 50: `GetManagedObjects` keeps each bot's part of its answer encoded and `ListBots`
/// its paths; a change of any bot's view, a create and a delete show in the next answer (the
/// kept bytes are made again from the view's version, the paths from the list's copy).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kept_answers_follow_every_change() {
    let env = TestEnv::new().await;
    let _daemon = placeholder_daemon(&env).await;
    let work = env.work.to_str().unwrap().to_owned();
    let manager = env.manager().await;
    let create = |name: &'static str| {
        let manager = manager.clone();
        let work = work.clone();
        async move {
            manager
                .create_bot(HashMap::from([
                    ("cwd", Variant::from(work.as_str())),
                    ("name", Variant::from(name)),
                ]))
                .await
                .unwrap()
        }
    };
    let (a, b, c) = (create("a").await, create("b").await, create("c").await);
    let om = object_manager(&env).await;
    managed_is_get_all(&env, &om, &[&a, &b, &c]).await;
    env.bot(&a)
        .await
        .set_name("renamed", HashMap::new())
        .await
        .unwrap();
    env.bot(&b).await.set_model("another-model").await.unwrap();
    env.bot(&c).await.hold().await.unwrap();
    managed_is_get_all(&env, &om, &[&a, &b, &c]).await;
    let objects = om.get_managed_objects().await.unwrap();
    let iface = zbus::names::OwnedInterfaceName::try_from("org.botvisor.Botvisor1.Bot").unwrap();
    let name = String::try_from(objects[&a][&iface]["Name"].try_clone().unwrap()).unwrap();
    assert_eq!(name, "renamed");
    let holders = u32::try_from(&objects[&c][&iface]["Holders"]).unwrap();
    assert_eq!(holders, 1);
    env.bot(&b).await.delete().await.unwrap();
    // The object goes once its `Delete` was answered: wait for it to leave `ListBots`.
    let deadline = tokio::time::Instant::now() + EVENT_TIMEOUT;
    while bot_count(&env).await != 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the bot never left ListBots"
        );
        tokio::task::yield_now().await;
    }
    let d = create("d").await;
    managed_is_get_all(&env, &om, &[&a, &c, &d]).await;
}

/// A call in the other byte order (a big-endian machine's) gets `GetManagedObjects`' kept
/// answer like any other, and botvisord stays on the bus: the answer is encoded in this
/// machine's order and the reply's header now says so (it said the caller's, and the bus
/// dropped botvisord's connection at the first such call).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_in_the_other_byte_order_gets_the_kept_answer() {
    use futures_util::StreamExt;
    let env = TestEnv::new().await;
    let _daemon = placeholder_daemon(&env).await;
    let work = env.work.to_str().unwrap().to_owned();
    let manager = env.manager().await;
    let mut paths = Vec::new();
    for name in ["one", "two"] {
        paths.push(
            manager
                .create_bot(HashMap::from([
                    ("cwd", Variant::from(work.as_str())),
                    ("name", Variant::from(name)),
                ]))
                .await
                .unwrap(),
        );
    }
    let other = if cfg!(target_endian = "little") {
        zbus::message::EndianSig::Big
    } else {
        zbus::message::EndianSig::Little
    };
    let call = zbus::Message::method_call("/org/botvisor/Botvisor1", "GetManagedObjects")
        .endian(other.into())
        .destination("org.botvisor.Botvisor1")
        .interface("org.freedesktop.DBus.ObjectManager")
        .build(&())
        .unwrap();
    let serial = call.primary_header().serial_num();
    let mut replies = zbus::MessageStream::from(&env.conn);
    env.conn.send(&call).await.unwrap();
    let reply = tokio::time::timeout(EVENT_TIMEOUT, async {
        loop {
            let msg = replies.next().await.unwrap().unwrap();
            if msg.header().reply_serial() == Some(serial) {
                break msg;
            }
        }
    })
    .await
    .expect("an answer");
    assert_eq!(
        reply.message_type(),
        zbus::message::Type::MethodReturn,
        "{reply:?}"
    );
    let objects: zbus::fdo::ManagedObjects = reply.body().deserialize().unwrap();
    assert_eq!(objects.len(), 2);
    let om = object_manager(&env).await;
    managed_is_get_all(&env, &om, &[&paths[0], &paths[1]]).await;
}

/// A permission request whose id the CLI wrote with a NUL in it, which the bus cannot carry
/// (it dropped botvisord's connection): the id is shown with U+FFFD in the signal and the
/// property, botvisord stays on the bus, and an answer given with the id as shown reaches the
/// CLI, which ends its turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_id_with_a_nul_is_shown_and_answered() {
    use futures_util::StreamExt;
    let s = FakeSetup::start("").await;
    let bot = s
        .bot(serde_json::json!([{"mode": "normal",
            "ask": {"tool": "Write", "input_bytes": 10, "rid_prefix": "x\u{0}y-"}}]))
        .await;
    let mut asked = bot.receive_permission_requested().await.unwrap();
    let mut finished = bot.receive_turn_finished().await.unwrap();
    let turn = bot.send("write it", HashMap::new()).await.unwrap();
    let sig = tokio::time::timeout(EVENT_TIMEOUT, asked.next())
        .await
        .expect("the request is signalled")
        .unwrap();
    let id = sig.args().unwrap().request_id.to_string();
    assert_eq!(id, "x\u{FFFD}y-0-0");
    assert_eq!(bot.pending_permissions().await.unwrap()[0].0, id);
    // An answer refused names the id as shown (a raw NUL in the error dropped botvisord).
    let refused = bot
        .respond_permission(
            &id,
            "allow",
            HashMap::from([("scope", Variant::from("always"))]),
        )
        .await
        .unwrap_err()
        .to_string();
    assert!(refused.contains(&id), "{refused}");
    bot.respond_permission(&id, "allow", HashMap::new())
        .await
        .unwrap();
    let again = bot
        .respond_permission(&id, "deny", HashMap::new())
        .await
        .unwrap_err()
        .to_string();
    assert!(again.contains("already answered (allow)"), "{again}");
    let outcome = tokio::time::timeout(EVENT_TIMEOUT, async {
        loop {
            let f = finished.next().await.unwrap();
            let a = f.args().unwrap();
            if a.turn_id == turn {
                break a.outcome.to_string();
            }
        }
    })
    .await
    .expect("the turn ends");
    assert_eq!(outcome, "success");
    let answers = std::fs::read_to_string(s.state.join("answers.jsonl")).unwrap();
    assert!(answers.contains("\"allow\""), "{answers}");
    assert!(bot.pending_permissions().await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn created_bots_appear_in_the_object_manager_and_delete_removes_them() {
    let env = TestEnv::new().await;
    let _daemon = placeholder_daemon(&env).await;
    let om = object_manager(&env).await;
    let mut added = om.receive_interfaces_added().await.unwrap();
    let mut removed = om.receive_interfaces_removed().await.unwrap();
    let work = env.work.to_str().unwrap().to_owned();
    let path = env
        .manager()
        .await
        .create_bot(HashMap::from([
            ("cwd", Variant::from(work.as_str())),
            ("name", Variant::from("mine")),
        ]))
        .await
        .unwrap();
    use futures_util::StreamExt;
    let sig = tokio::time::timeout(EVENT_TIMEOUT, added.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(sig.args().unwrap().object_path.as_str(), path.as_str());
    let objects = om.get_managed_objects().await.unwrap();
    assert!(objects.keys().any(|p| p.as_str() == path.as_str()));
    let bot = env.bot(&path).await;
    assert_eq!(bot.name().await.unwrap(), "mine");
    assert_eq!(bot.cwd().await.unwrap(), work);
    assert_eq!(bot.state().await.unwrap(), "stopped");
    bot.delete().await.unwrap();
    let sig = tokio::time::timeout(EVENT_TIMEOUT, removed.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(sig.args().unwrap().object_path.as_str(), path.as_str());
    assert_eq!(bot_count(&env).await, 0);
}

/// Issue 23, point 9: `Delete` is answered before the object goes. A client that starts waiting
/// for `InterfacesRemoved` when its call returns must see it; before, in 5 of 6 deletes of a bot
/// with no running agent the signal came first. The order is read from one stream of every
/// message the client's connection receives, in the order they arrive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_is_answered_before_the_object_goes() {
    let env = TestEnv::new().await;
    let _daemon = placeholder_daemon(&env).await;
    let manager = env.manager().await;
    let work = env.work.to_str().unwrap().to_owned();
    let rule = zbus::MatchRule::builder()
        .msg_type(zbus::message::Type::Signal)
        .interface("org.freedesktop.DBus.ObjectManager")
        .member("InterfacesRemoved")
        .build()
        .unwrap();
    // A match rule on the bus alone, so that the signal reaches this connection at all, with no
    // queue of its own here that would fill unread.
    zbus::fdo::DBusProxy::new(&env.conn)
        .await
        .unwrap()
        .add_match_rule(rule)
        .await
        .unwrap();
    for round in 0..40 {
        let path = manager
            .create_bot(HashMap::from([("cwd", Variant::from(work.as_str()))]))
            .await
            .unwrap();
        let mut arrivals = zbus::MessageStream::from(&env.conn);
        let reply = env
            .conn
            .call_method(
                Some(botvisor::dbus::BUS_NAME),
                path.as_str(),
                Some(botvisor::dbus::BOT_INTERFACE),
                "Delete",
                &(),
            )
            .await
            .unwrap();
        let call = reply.header().reply_serial().unwrap();
        let first = tokio::time::timeout(EVENT_TIMEOUT, async {
            while let Some(Ok(m)) = arrivals.next().await {
                let h = m.header();
                if h.reply_serial() == Some(call) {
                    return "answer";
                }
                if h.member()
                    .is_some_and(|n| n.as_str() == "InterfacesRemoved")
                    && m.body()
                        .deserialize::<(zbus::OwnedObjectPath, Vec<String>)>()
                        .is_ok_and(|(p, _)| p == path)
                {
                    return "InterfacesRemoved";
                }
            }
            panic!("the connection closed");
        })
        .await
        .unwrap();
        assert_eq!(
            first, "answer",
            "round {round}: InterfacesRemoved came before Delete's answer"
        );
        tokio::time::timeout(EVENT_TIMEOUT, async {
            while let Some(Ok(m)) = arrivals.next().await {
                if m.header()
                    .member()
                    .is_some_and(|n| n.as_str() == "InterfacesRemoved")
                {
                    return;
                }
            }
        })
        .await
        .expect("InterfacesRemoved after the answer");
    }
}

/// Issue 30: `SetName` renames a bot, checked as `CreateBot` checks a name (its own code), says
/// it with `PropertiesChanged`, and keeps it across a daemon restart; a refused name changes
/// nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_name_renames_with_the_checks_of_create_bot() {
    let env = TestEnv::new().await;
    let cli = placeholder_cli(env.dir.path());
    let cfg = env.daemon_config(Some(cli));
    let mut daemon = Daemon::start(&cfg, &env.conn).await;
    let manager = env.manager().await;
    let work = env.work.to_str().unwrap();
    let mut paths = Vec::new();
    for name in ["first", "second"] {
        let mut options = HashMap::new();
        options.insert("cwd", Variant::from(work));
        options.insert("name", Variant::from(name));
        paths.push(manager.create_bot(options).await.unwrap());
    }
    let bot = env.bot(&paths[0]).await;
    let mut names = bot.receive_name_changed().await;
    bot.set_name("renamed", HashMap::new()).await.unwrap();
    let seen = tokio::time::timeout(EVENT_TIMEOUT, async {
        loop {
            let c = names.next().await.expect("Name changes");
            let n = c.get().await.unwrap();
            if n == "renamed" {
                return n;
            }
        }
    })
    .await
    .expect("PropertiesChanged says the new name");
    assert_eq!(seen, "renamed");
    assert_eq!(manager.get_bot("renamed").await.unwrap(), paths[0]);
    for (bad, why) in [
        ("second", "exists already"),
        ("", "empty"),
        (" padded", "begins or ends"),
        ("abc123", "could be a bot id"),
        ("evil\u{202e}", "U+202E"),
        (&"x".repeat(201), "longer than 200"),
    ] {
        let e = bot.set_name(bad, HashMap::new()).await.unwrap_err();
        assert_eq!(
            error_name(&e),
            "org.botvisor.Botvisor1.Error.InvalidArgument"
        );
        assert!(error_text(&e).contains(why), "{bad:?}: {}", error_text(&e));
    }
    let mut options = HashMap::new();
    options.insert("x", Variant::from(1u32));
    let e = bot.set_name("other", options).await.unwrap_err();
    assert!(error_text(&e).contains("x"), "{}", error_text(&e));
    assert_eq!(bot.name().await.unwrap(), "renamed");
    // Its own name again is no change.
    bot.set_name("renamed", HashMap::new()).await.unwrap();
    daemon.terminate().await;
    let _daemon = Daemon::start(&cfg, &env.conn).await;
    assert_eq!(
        env.manager().await.get_bot("renamed").await.unwrap(),
        paths[0]
    );
}
