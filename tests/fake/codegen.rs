//! The contract's code generators (issue 23): GNOME and KDE developers start a client from
//! `dbus/org.botvisor.Botvisor1.xml` with `gdbus-codegen` and `qdbusxml2cpp`. Each test makes
//! the code, builds a small client with it (`tests/codegen/`) and runs it against botvisord: the
//! descriptor of `OpenChatItem` arrives (GLib: `org.gtk.GDBus.C.UnixFD`), and Qt knows every
//! type (`org.qtproject.QtDBus.QtTypeName`, with `dbus/qt/botvisor-types.h`).
//!
//! Needs `gdbus-codegen` and GIO's headers (Debian: `libglib2.0-dev-bin`, `libglib2.0-dev`),
//! `qdbusxml2cpp`, `moc` and QtDBus's headers (`qtbase5-dev-tools`, `qtbase5-dev`), `cc`, `c++`
//! and `pkg-config`; `.ci/run` installs them. Without them a test prints `skipped: …` and
//! passes, unless `BOTVISOR_TEST_REQUIRE_CODEGEN` is set (CI sets it).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::json;

use support::*;

const XML: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/dbus/org.botvisor.Botvisor1.xml"
);
const HERE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/codegen");
const QT_TYPES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/dbus/qt");

/// `program` with `args`, which must succeed; its stdout.
fn run(dir: &Path, program: &str, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The flags `pkg-config` gives for `packages`, split.
fn pkg_config(dir: &Path, packages: &[&str]) -> Vec<String> {
    let mut args = vec!["--cflags", "--libs"];
    args.extend_from_slice(packages);
    run(dir, "pkg-config", &args)
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

/// Whether the tools are here: `true`, or `false` after printing the skip line (a panic under
/// `BOTVISOR_TEST_REQUIRE_CODEGEN`).
fn tools(what: &str, programs: &[&str], packages: &[&str]) -> bool {
    let missing: Vec<String> = programs
        .iter()
        .filter(|p| {
            Command::new("sh")
                .args(["-c", &format!("command -v {p}")])
                .output()
                .map_or(true, |o| !o.status.success())
        })
        .map(|p| p.to_string())
        .chain(
            packages
                .iter()
                .filter(|p| {
                    Command::new("pkg-config")
                        .args(["--exists", p])
                        .status()
                        .map_or(true, |s| !s.success())
                })
                .map(|p| format!("pkg-config {p}")),
        )
        .collect();
    if missing.is_empty() {
        return true;
    }
    let why = format!("{what}: missing {}", missing.join(", "));
    if std::env::var_os("BOTVISOR_TEST_REQUIRE_CODEGEN").is_some_and(|v| !v.is_empty()) {
        panic!("{why}, but BOTVISOR_TEST_REQUIRE_CODEGEN is set");
    }
    eprintln!("skipped: {why}");
    false
}

/// A daemon with one bot whose chat holds one turn.
struct Chat {
    setup: FakeSetup,
    id: String,
    path: String,
    /// How many chat items it holds.
    items: usize,
    /// Its first item's seq and payload.
    seq: u64,
    payload: String,
}

async fn a_bot_with_a_chat() -> Chat {
    let setup = FakeSetup::start("").await;
    let bot = setup.bot(json!([{"mode": "normal"}])).await;
    send_and_wait(&bot, "hello").await;
    let mut items = bot.get_chat(0, 0).await.unwrap();
    let count = items.len();
    let (seq, _, _, payload) = items.remove(0);
    Chat {
        id: bot.id().await.unwrap(),
        path: bot.inner().path().to_string(),
        items: count,
        seq,
        payload,
        setup,
    }
}

/// Runs the built `client` against the daemon of `setup`: its stdout.
async fn run_client(setup: &FakeSetup, client: PathBuf, id: &str, seq: u64) -> String {
    let address = setup.env.bus.address.clone();
    let (id, seq) = (id.to_owned(), seq.to_string());
    let out = bounded(
        "the generated client",
        tokio::task::spawn_blocking(move || {
            Command::new(&client)
                .args([&id, &seq])
                .env("DBUS_SESSION_BUS_ADDRESS", address)
                .output()
                .unwrap()
        }),
    )
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "the client failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// What both clients print of `chat`'s bot: its path, its state, how many items, and its first
/// item through the descriptor.
fn assert_reads_the_chat(out: &str, chat: &Chat) {
    assert_eq!(line(out, "path"), chat.path);
    assert_eq!(line(out, "state"), "idle");
    assert_eq!(line(out, "items"), chat.items.to_string());
    assert_eq!(
        line(out, "payload"),
        chat.payload,
        "the descriptor's content"
    );
}

/// The value of the line `key …` of `out`.
fn line<'a>(out: &'a str, key: &str) -> &'a str {
    out.lines()
        .find_map(|l| l.strip_prefix(&format!("{key} ")))
        .unwrap_or_else(|| panic!("no `{key}` line in:\n{out}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn gdbus_codegen_makes_a_client_that_gets_the_descriptor() {
    if !tools(
        "gdbus-codegen",
        &["gdbus-codegen", "cc", "pkg-config"],
        &["gio-unix-2.0"],
    ) {
        return;
    }
    let build = tempfile::tempdir().unwrap();
    let dir = build.path();
    run(
        dir,
        "gdbus-codegen",
        &[
            "--generate-c-code",
            "botvisor-glib",
            "--c-namespace",
            "Botvisor",
            "--interface-prefix",
            "org.botvisor.Botvisor1.",
            XML,
        ],
    );
    let mut args: Vec<String> = vec![
        "-o".into(),
        "glib_client".into(),
        "-I.".into(),
        format!("{HERE}/glib_client.c"),
        "botvisor-glib.c".into(),
    ];
    args.extend(pkg_config(dir, &["gio-unix-2.0"]));
    run(
        dir,
        "cc",
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
    );

    let chat = a_bot_with_a_chat().await;
    let out = run_client(&chat.setup, dir.join("glib_client"), &chat.id, chat.seq).await;
    assert_reads_the_chat(&out, &chat);
}

#[tokio::test(flavor = "multi_thread")]
async fn qdbusxml2cpp_makes_a_client_that_knows_every_type() {
    if !tools(
        "qdbusxml2cpp",
        &["qdbusxml2cpp", "c++", "pkg-config"],
        &["Qt5DBus"],
    ) {
        return;
    }
    let build = tempfile::tempdir().unwrap();
    let dir = build.path();
    run(
        dir,
        "qdbusxml2cpp",
        &["-i", "botvisor-types.h", "-p", "botvisor_proxy", XML],
    );
    let host_bins = run(dir, "pkg-config", &["--variable=host_bins", "Qt5Core"]);
    let moc = Path::new(host_bins.trim()).join("moc");
    run(
        dir,
        moc.to_str().unwrap(),
        &["botvisor_proxy.h", "-o", "moc_botvisor_proxy.cpp"],
    );
    let mut args: Vec<String> = vec![
        "-fPIC".into(),
        "-o".into(),
        "qt_client".into(),
        "-I.".into(),
        format!("-I{QT_TYPES}"),
        format!("{HERE}/qt_client.cpp"),
        "botvisor_proxy.cpp".into(),
        "moc_botvisor_proxy.cpp".into(),
    ];
    args.extend(pkg_config(dir, &["Qt5DBus", "Qt5Core"]));
    run(
        dir,
        "c++",
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
    );

    let chat = a_bot_with_a_chat().await;
    let out = run_client(&chat.setup, dir.join("qt_client"), &chat.id, chat.seq).await;
    assert_eq!(line(&out, "runtimes"), "claude,codex");
    assert_eq!(line(&out, "pending"), "0");
    assert_reads_the_chat(&out, &chat);
}
