//! `botvisorctl` with the real CLI (issue 17): a model API that cannot be reached is visible
//! while the CLI retries, and the README's botvisorctl examples run as written.

use std::process::Stdio;

use serde_json::Value;

use support::stand_in_api::demo_script;
use support::*;

const CTL: &str = env!("CARGO_BIN_EXE_botvisorctl");

async fn run(bus: &str, cwd: &std::path::Path, args: &[&str]) -> (i32, String, String) {
    let out = tokio::process::Command::new(CTL)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("DBUS_SESSION_BUS_ADDRESS", bus)
        .current_dir(cwd)
        .args(args)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A loopback port nobody listens on.
fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// Issue 17, points 3 and 8: `ANTHROPIC_BASE_URL` on a closed port. The CLI's `api_retry`
/// events reach `LastError` and the chat (the first and the last retry at least, at most one
/// per 10 s between), `send` shows them while it waits, and the turn's end says error, with
/// exit code 3, never success.
#[cfg_attr(
    botvisor_skip_claude,
    ignore = "BOTVISOR_TEST_CLAUDE_BIN not set: no real Claude Code to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_model_api_is_visible_while_the_cli_retries() {
    let Some(claude) = claude_bin() else { return };
    let env = TestEnv::new().await;
    let cfg = env.daemon_config(Some(claude));
    let _daemon = Daemon::start(&cfg, &env.conn).await;
    let url = format!("http://127.0.0.1:{}", closed_port());
    let mut bot_env = claude_env(&env.home, &url, &env.marker);
    // Four retries (about 8 s) instead of the CLI's default ten (about 90 s).
    bot_env.insert("CLAUDE_CODE_MAX_RETRIES".into(), "4".into());
    let bot = create_bot_in(&env, &bot_env).await;
    let id = bot.id().await.unwrap();
    let mut last_errors = bot.receive_last_error_changed().await;

    let bus = env.bus.address.clone();
    let work = env.work.clone();
    let send = tokio::spawn(async move { run(&bus, &work, &["send", &id, "hello"]).await });
    // LastError says so while the turn still runs.
    let seen = tokio::time::timeout(EVENT_TIMEOUT, async {
        while let Some(c) = futures_util::StreamExt::next(&mut last_errors).await {
            let text = c.get().await.unwrap();
            if text.contains("unreachable") {
                return text;
            }
        }
        panic!("no LastError change");
    })
    .await
    .expect("LastError names the retry");
    assert!(seen.contains("retry 1 of 4"), "{seen}");
    assert_eq!(bot.state().await.unwrap(), "busy");

    let (code, out, err) = tokio::time::timeout(EVENT_TIMEOUT, send)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        code, 3,
        "exit code of a turn that ended with an error: {out} {err}"
    );
    let lines: Vec<&str> = out.lines().collect();
    let retries: Vec<&&str> = lines.iter().filter(|l| l.starts_with("[retry]")).collect();
    assert!(
        retries.first().is_some_and(|l| l.contains("retry 1 of 4")),
        "{lines:?}"
    );
    assert!(
        retries.last().is_some_and(|l| l.contains("retry 4 of 4")),
        "{lines:?}"
    );
    assert!(retries.len() < 4, "rate-limited: {lines:?}");
    let done = lines.last().unwrap();
    assert!(done.starts_with("[done: error"), "{lines:?}");
    assert!(!lines.iter().any(|l| l.contains("success")), "{lines:?}");
    assert!(err.contains("the turn ended error"), "{err}");

    let items = chat(&bot).await;
    let notes: Vec<&Value> = of_kind(&items, "system")
        .into_iter()
        .filter(|p| p["reason"] == "api_retry")
        .collect();
    let turn = of_kind(&items, "user")[0]["turn_id"].clone();
    assert!(notes.iter().all(|n| n["turn_id"] == turn), "{notes:?}");
    assert_eq!(notes.first().unwrap()["attempt"], 1);
    assert_eq!(notes.last().unwrap()["attempt"], 4);
    // Every item of the turn carries its id, the result too.
    for kind in ["assistant", "result", "turn_finished"] {
        for p in of_kind(&items, kind) {
            assert_eq!(p["turn_id"], turn, "{kind}: {p}");
        }
    }
}

/// The README's botvisorctl examples run as written (against the stand-in it tells how to
/// start, on the test's port), each exiting 0 with what the README says it prints.
#[cfg_attr(
    botvisor_skip_claude,
    ignore = "BOTVISOR_TEST_CLAUDE_BIN not set: no real Claude Code to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_botvisorctl_examples_run_as_written() {
    let Some(claude) = claude_bin() else { return };
    let env = TestEnv::new().await;
    let setup = RealSetup::start(&env, claude, demo_script()).await;
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let blocks = sh_blocks(&readme, "## The same with botvisorctl");
    assert!(
        blocks.len() >= 2,
        "the README's botvisorctl section has its two examples"
    );
    // The stand-in of the README listens on 47111; the test's on a free port. The CLI also
    // needs the test's HOME (never the user's ~/.claude): the daemon's environment gives it.
    let port = setup.api.url.rsplit(':').next().unwrap().to_owned();
    let bus = env.bus.address.clone();
    let mut ran = 0;
    // The second example goes on with the first one's bot: `stop` and `delete` come last.
    let mut all: Vec<String> = blocks.iter().flat_map(|b| commands(b)).collect();
    all.sort_by_key(|c| c.contains(" stop ") || c.contains(" delete "));
    {
        for command in all {
            let command = command.replace("47111", &port);
            let words = shell_words(&command);
            if words.first().map(String::as_str) != Some("botvisorctl") {
                continue;
            }
            let args: Vec<&str> = words[1..].iter().map(String::as_str).collect();
            // Interactive ones are exercised by tests/real/claude/ctl_terminals.rs, tests/fake/ctl.rs and (ui)
            // tests/real/ui.rs.
            if matches!(args.first(), Some(&"watch") | Some(&"answer") | Some(&"ui")) {
                continue;
            }
            if args.first() == Some(&"send") && args.get(2).is_some_and(|t| t.starts_with("write "))
            {
                continue;
            }
            let (code, out, err) = run(&bus, &env.work, &args).await;
            assert_eq!(code, 0, "`{command}` failed: {out} {err}");
            match args[0] {
                "create" => assert!(out.starts_with("created demo (id "), "{out}"),
                "list" => assert!(out.contains("demo"), "{out}"),
                "send" => {
                    assert!(out.contains("Hello! You said: hello"), "{out}");
                    assert!(
                        out.lines().last().unwrap().starts_with("[done: success"),
                        "{out}"
                    );
                }
                "chat" => assert!(out.contains("> hello"), "{out}"),
                "stop" => assert!(out.starts_with("stopped demo"), "{out}"),
                "delete" => assert!(out.starts_with("deleted demo"), "{out}"),
                _ => {}
            }
            ran += 1;
        }
    }
    assert!(ran >= 9, "only {ran} README commands ran");
}

/// The ```sh blocks of the README section that starts with `heading`.
fn sh_blocks(readme: &str, heading: &str) -> Vec<String> {
    let start = readme.find(heading).expect("the README has the section");
    let section = &readme[start + heading.len()..];
    let section = &section[..section.find("\n## ").unwrap_or(section.len())];
    section
        .split("```sh\n")
        .skip(1)
        .map(|b| b[..b.find("```").unwrap()].to_owned())
        .collect()
}

/// The commands of a shell block: comment lines dropped, `\` continuations joined.
fn commands(block: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in block.lines() {
        let line = line.trim_end();
        if line.trim_start().starts_with('#') {
            continue;
        }
        if let Some(head) = line.strip_suffix('\\') {
            current.push_str(head);
            continue;
        }
        current.push_str(line);
        if !current.trim().is_empty() {
            out.push(current.trim().to_owned());
        }
        current.clear();
    }
    out
}

/// Splits a command like a shell would for the README's simple lines: words, single and double
/// quotes, a `#` comment to the line's end (`$PWD` is left as it is: only `write` lines use it).
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quote: Option<char> = None;
    let mut any = false;
    for c in line.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                any = true;
            }
            // A comment: the rest of the line.
            (None, '#') if word.is_empty() && !any => break,
            (None, c) if c.is_whitespace() => {
                if any || !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                    any = false;
                }
            }
            (None, c) => word.push(c),
        }
    }
    if any || !word.is_empty() {
        words.push(word);
    }
    words
}

/// The README's busctl and gdbus examples run as written, on the test's private bus (`--user`
/// and `--session` become its address) and stand-in port; `$BOT` is the path `CreateBot`
/// printed, as the README says. The monitors (which run until stopped) are left out.
#[cfg_attr(
    botvisor_skip_claude,
    ignore = "BOTVISOR_TEST_CLAUDE_BIN not set: no real Claude Code to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_busctl_and_gdbus_examples_run_as_written() {
    let Some(claude) = claude_bin() else { return };
    let env = TestEnv::new().await;
    let setup = RealSetup::start(&env, claude, demo_script()).await;
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let port = setup.api.url.rsplit(':').next().unwrap().to_owned();
    let address = env.bus.address.clone();
    let mut ran = 0;
    for heading in ["## A session with busctl", "## The same with gdbus"] {
        let mut bot = String::new();
        for block in sh_blocks(&readme, heading) {
            for command in commands(&block) {
                if command.contains(" monitor ") || command.starts_with("BOT=") {
                    continue;
                }
                let command = command
                    .replace("47111", &port)
                    .replace("busctl --user", &format!("busctl --address={address}"))
                    .replace(
                        "gdbus call --session",
                        &format!("gdbus call --address {address}"),
                    );
                let out = tokio::process::Command::new("bash")
                    .arg("-c")
                    .arg(&command)
                    .env("BOT", &bot)
                    .current_dir(&env.work)
                    .stdin(Stdio::null())
                    .output()
                    .await
                    .unwrap();
                let text = String::from_utf8_lossy(&out.stdout).into_owned();
                assert!(
                    out.status.success(),
                    "`{command}` failed: {text} {}",
                    String::from_utf8_lossy(&out.stderr)
                );
                if command.contains("CreateBot") {
                    // busctl: o "/org/…"; gdbus: (objectpath '/org/…',)
                    let start = text.find("/org/botvisor/Botvisor1/").expect("a bot path");
                    bot = text[start..]
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '/' || *c == '_')
                        .collect();
                }
                if command.contains("GetChat") {
                    assert!(text.contains("hello"), "the chat holds the message: {text}");
                }
                ran += 1;
            }
        }
        assert!(!bot.is_empty(), "{heading}: no bot was created");
    }
    assert!(ran >= 8, "only {ran} README commands ran");
}
