//! Tier 3: botvisor's copy of a Codex thread (issue 25, "a conversation outlives the CLI's own
//! clean-up"; design rule 2: resume only what exists, in the CLI's store or in botvisor's copy)
//! on the real Codex CLI (`codex app-server`, `BOTVISOR_TEST_CODEX_BIN`): a thread Codex itself
//! removed (`codex delete`) is put back and resumed; a thread Codex compressed
//! (`rollout/compress`) is resumed as it is. Skipped (loudly) without the binary.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use support::codex::{CodexSetup, wait_no_leftovers};
use support::responses_api::{Reply, ResponsesRequest, Script, echo_script};
use support::*;

/// `codex ARGS` with the bot's `CODEX_HOME`, in its work folder, stdin empty: the exit code and
/// what it printed.
fn codex_cli(s: &CodexSetup, env: &TestEnv, args: &[&str]) -> (Option<i32>, String) {
    let out = std::process::Command::new(s.cfg.codex_bin.clone().unwrap())
        .args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .envs(&s.bot_env)
        .current_dir(&env.work)
        .stdin(Stdio::null())
        .output()
        .expect("run codex");
    (
        out.status.code(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// The model never answers the first request about `hang` (its turn is killed while the model
/// answers) and echoes everything else.
fn hang_once_script() -> Script {
    let asked = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    std::sync::Arc::new(move |req: &ResponsesRequest| {
        if req.last_user_text == "hang" && !asked.swap(true, std::sync::atomic::Ordering::SeqCst) {
            Reply::Never
        } else {
            Reply::Text(format!("Hello! You said: {}", req.last_user_text))
        }
    })
}

/// The files of `thread` under `codex_home/sessions`, by name.
fn thread_files(codex_home: &Path, thread: &str) -> Vec<String> {
    let mut names: Vec<String> =
        botvisor::runtime::codex::rollout::thread_files(codex_home, thread)
            .into_iter()
            .map(|f| f.path.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
    names.sort();
    names
}

#[cfg_attr(
    botvisor_skip_codex,
    ignore = "BOTVISOR_TEST_CODEX_BIN not set: no real Codex to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thread_codex_deleted_is_put_back_from_botvisors_copy_and_resumed() {
    let Some(codex) = codex_bin() else { return };
    let env = TestEnv::new().await;
    let s = CodexSetup::start(&env, codex, hang_once_script()).await;
    let bot = s.bot(&env, "").await;
    assert_eq!(send_and_wait(&bot, "one").await.outcome, "success");
    let thread = bot.session_id().await.unwrap();
    // A turn killed while the model answers is asked again after a thread/revert: the thread
    // is now its rollout and a segment.
    let mut finished = bot.receive_turn_finished().await.unwrap();
    let hang = bot.send("hang", Default::default()).await.unwrap();
    s.api
        .wait_for(|r| r.last_user_text == "hang", EVENT_TIMEOUT)
        .await;
    let pid = bot.process_id().await.unwrap();
    // SAFETY: kill(2) on the agent's pid, as a crash from outside.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    let ended = wait_turns(&mut finished, std::slice::from_ref(&hang)).await;
    assert_eq!(ended[0].1, "success", "asked again and answered: {ended:?}");
    let files = thread_files(&s.codex_home, &thread);
    println!("the thread's files: {files:?}");
    assert_eq!(files.len(), 2, "a rollout and a segment: {files:?}");
    stop_and_wait(&bot).await;

    // Codex removes the thread (the CLI doing it, as its own clean-up would).
    let (code, said) = codex_cli(&s, &env, &["delete", "--force", &thread]);
    println!(
        "codex delete: {code:?} {}",
        said.lines().next().unwrap_or("")
    );
    assert_eq!(code, Some(0), "{said}");
    assert_eq!(thread_files(&s.codex_home, &thread), Vec::<String>::new());

    let two = send_and_wait(&bot, "two").await;
    assert_eq!(two.outcome, "success", "{two:?}");
    assert_eq!(bot.session_id().await.unwrap(), thread, "the same thread");
    assert_eq!(thread_files(&s.codex_home, &thread), files, "both put back");
    let items = chat(&bot).await;
    let restored = of_kind(&items, "system")
        .into_iter()
        .find(|p| p["reason"] == "conversation_restored")
        .unwrap_or_else(|| panic!("no item says the thread was put back: {items:?}"));
    assert_eq!(restored["session_id"], json!(thread));
    assert_eq!(
        restored["files"].as_array().map(Vec::len),
        Some(2),
        "{restored}"
    );
    assert!(
        !of_kind(&items, "system")
            .iter()
            .any(|p| p["reason"] == "transcript_missing"),
        "{items:?}"
    );
    let last = s.api.requests().pop().unwrap();
    assert_eq!(
        last.user_texts(),
        ["one", "hang", "two"],
        "the model gets the earlier turns, the message asked again once"
    );
    assert!(last.body.to_string().contains("Hello! You said: one"));
    stop_and_wait(&bot).await;
    wait_no_leftovers(&env).await;
}

/// Sends `rollout/compress` to a Codex app-server of its own on the bot's `CODEX_HOME` and
/// waits for `compressed` to appear.
async fn compress(s: &CodexSetup, env: &TestEnv, compressed: &Path) {
    let mut child = tokio::process::Command::new(s.cfg.codex_bin.clone().unwrap())
        .arg("app-server")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .envs(&s.bot_env)
        .current_dir(&env.work)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn codex app-server");
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    for request in [
        json!({"method": "initialize", "id": 0, "params": {"clientInfo": {"name": "test", "version": "0"},
               "capabilities": {"experimentalApi": true}}}),
        json!({"method": "initialized"}),
        json!({"method": "rollout/compress", "id": 1}),
    ] {
        stdin
            .write_all(format!("{request}\n").as_bytes())
            .await
            .unwrap();
    }
    tokio::time::timeout(EVENT_TIMEOUT, async {
        while let Ok(Some(line)) = lines.next_line().await {
            let v: Value = serde_json::from_str(&line).unwrap_or_default();
            if v["id"] == 1 {
                assert_eq!(v["result"], json!({}), "{v}");
                return;
            }
        }
    })
    .await
    .expect("rollout/compress is answered");
    tokio::time::timeout(EVENT_TIMEOUT, async {
        while !compressed.exists() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("Codex compresses the rollout");
    drop(stdin);
    let _ = tokio::time::timeout(EVENT_TIMEOUT, child.wait()).await;
}

#[cfg_attr(
    botvisor_skip_codex,
    ignore = "BOTVISOR_TEST_CODEX_BIN not set: no real Codex to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thread_codex_compressed_is_resumed_as_it_is() {
    let Some(codex) = codex_bin() else { return };
    let env = TestEnv::new().await;
    let s = CodexSetup::start(&env, codex, echo_script()).await;
    let bot = s.bot(&env, "").await;
    assert_eq!(send_and_wait(&bot, "one").await.outcome, "success");
    let thread = bot.session_id().await.unwrap();
    stop_and_wait(&bot).await;
    let rollout = s.rollout(&thread).expect("a rollout");
    let bytes = std::fs::read(&rollout).unwrap();
    // Not written for eight days: cold, for Codex's `rollout/compress`.
    std::fs::File::options()
        .write(true)
        .open(&rollout)
        .unwrap()
        .set_modified(std::time::SystemTime::now() - Duration::from_secs(8 * 86_400))
        .unwrap();
    let mut zst = rollout.clone().into_os_string();
    zst.push(".zst");
    compress(&s, &env, Path::new(&zst)).await;
    assert!(!rollout.exists(), "compressed in its place");

    let two = send_and_wait(&bot, "two").await;
    assert_eq!(two.outcome, "success", "{two:?}");
    assert_eq!(bot.session_id().await.unwrap(), thread, "the same thread");
    let items = chat(&bot).await;
    for p in of_kind(&items, "system") {
        assert!(
            !matches!(
                p["reason"].as_str(),
                Some("transcript_missing" | "conversation_restored" | "conversation_not_found")
            ),
            "neither replaced nor put back: {p}"
        );
    }
    assert_eq!(
        s.api.requests().pop().unwrap().user_texts(),
        ["one", "two"],
        "the model gets the earlier turn"
    );
    let now = std::fs::read(&rollout).unwrap();
    assert_eq!(
        &now[..bytes.len()],
        &bytes[..],
        "Codex's own file, continued"
    );
    let beside: Vec<String> = std::fs::read_dir(rollout.parent().unwrap())
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(&thread))
        .collect();
    assert_eq!(
        beside.len(),
        1,
        "no copy set aside or left beside it: {beside:?}"
    );
    stop_and_wait(&bot).await;
    wait_no_leftovers(&env).await;
}

#[cfg_attr(
    botvisor_skip_codex,
    ignore = "BOTVISOR_TEST_CODEX_BIN not set: no real Codex to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thread_the_user_archived_is_neither_replaced_nor_put_back() {
    let Some(codex) = codex_bin() else { return };
    let env = TestEnv::new().await;
    let s = CodexSetup::start(&env, codex, echo_script()).await;
    let bot = s.bot(&env, "").await;
    assert_eq!(send_and_wait(&bot, "one").await.outcome, "success");
    let thread = bot.session_id().await.unwrap();
    stop_and_wait(&bot).await;
    let (code, said) = codex_cli(&s, &env, &["archive", &thread]);
    assert_eq!(code, Some(0), "{said}");
    assert_eq!(thread_files(&s.codex_home, &thread), Vec::<String>::new());

    let two = send_and_wait(&bot, "two").await;
    assert_eq!(two.outcome, "error", "{two:?}");
    let error = bot.last_error().await.unwrap();
    assert!(
        error.contains(&format!("session {thread} is archived"))
            && error.contains("codex unarchive"),
        "Codex's words: {error}"
    );
    assert_eq!(bot.session_id().await.unwrap(), thread, "not replaced");
    assert_eq!(
        thread_files(&s.codex_home, &thread),
        Vec::<String>::new(),
        "no copy put back beside the archived one"
    );
    let items = chat(&bot).await;
    for p in of_kind(&items, "system") {
        assert!(
            !matches!(
                p["reason"].as_str(),
                Some("transcript_missing" | "conversation_restored")
            ),
            "{p}"
        );
    }
    assert!(!s.api.asked().contains(&"two".to_owned()), "nothing sent");
    wait_no_leftovers(&env).await;
}
