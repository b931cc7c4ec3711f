//! Issue 28 on Codex: a thread begun with the bare `codex exec` is listed by
//! `ListConversations`, adopted by `CreateBot`'s `session_id`, its history read back from
//! `GetChat` (items marked `imported: true`), and the next message answered in it.

use std::collections::HashMap;

use zbus::Variant;

use support::*;

#[cfg_attr(
    botvisor_skip_codex,
    ignore = "BOTVISOR_TEST_CODEX_BIN not set: no real Codex to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_codex_thread_begun_in_a_terminal_is_listed_adopted_and_answered_in() {
    let Some(codex) = codex_bin() else { return };
    let env = TestEnv::new().await;
    // As the echo script, but a message `slow` is answered over 3 s: meanwhile its process
    // holds the thread.
    let script: support::responses_api::Script =
        std::sync::Arc::new(|req: &support::responses_api::ResponsesRequest| {
            use support::responses_api::Reply;
            if req.last_user_text.trim() == "slow" {
                Reply::SlowText {
                    chunks: (0..30).map(|i| format!("{i} ")).collect(),
                    every: std::time::Duration::from_millis(100),
                }
            } else {
                Reply::Text(format!("Hello! You said: {}", req.last_user_text))
            }
        });
    let setup = support::codex::CodexSetup::start(&env, codex.clone(), script).await;

    // The user's own thread, with the bare CLI (`codex exec`), in the folder.
    let mut cli = tokio::process::Command::new(&codex);
    cli.args(["exec", "--skip-git-repo-check", "hello from the terminal"])
        .current_dir(&env.work)
        .env_clear()
        .envs(&setup.bot_env)
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    let out = bounded("the bare CLI", cli.output()).await.unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let manager = env.manager().await;
    let work = env.work.to_str().unwrap();
    let find = HashMap::from([
        ("runtime", Variant::from("codex")),
        ("env", Variant::from(setup.bot_env.clone())),
    ]);
    let listed = manager
        .list_conversations(work, find.clone())
        .await
        .unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    let (runtime, thread, _, title, details) = &listed[0];
    assert_eq!(runtime, "codex");
    assert_eq!(title, "hello from the terminal");
    assert!(details.is_empty(), "{details:?}");
    assert!(setup.rollout(thread).is_some());

    let mut o = create_options(work, &setup.bot_env);
    o.insert("runtime", Variant::from("codex"));
    o.insert(
        "session_id",
        Variant::from("01a242f8-0000-7000-8000-000000000000"),
    );
    let err = manager.create_bot(o).await.unwrap_err();
    assert_eq!(
        error_name(&err),
        "org.botvisor.Botvisor1.Error.InvalidArgument"
    );

    // Held by the user's own `codex exec resume` (its writer lock): listed as held, Busy.
    let mut other = tokio::process::Command::new(&codex);
    other
        .args(["exec", "--skip-git-repo-check", "resume", thread, "slow"])
        .current_dir(&env.work)
        .env_clear()
        .envs(&setup.bot_env)
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true);
    let mut other = other.spawn().unwrap();
    let holder = bounded("the other Codex's writer lock", async {
        let mut tick = tokio::time::interval(std::time::Duration::from_millis(20));
        loop {
            if let Some(h) = botvisor::runtime::codex::writer::holder(&setup.codex_home, thread) {
                return h;
            }
            tick.tick().await;
        }
    })
    .await;
    let listed = manager
        .list_conversations(work, find.clone())
        .await
        .unwrap();
    let held: String = listed[0].4["held_by"].clone().try_into().unwrap();
    assert!(held.contains(&format!("pid {}", holder.pid)), "{held}");
    let mut o = create_options(work, &setup.bot_env);
    o.insert("runtime", Variant::from("codex"));
    o.insert("session_id", Variant::from(thread.as_str()));
    let err = manager.create_bot(o).await.unwrap_err();
    assert_eq!(error_name(&err), "org.botvisor.Botvisor1.Error.Busy");
    assert!(manager.list_bots().await.unwrap().is_empty());
    let status = bounded("the other Codex's end", other.wait())
        .await
        .unwrap();
    assert!(status.success());

    let mut o = create_options(work, &setup.bot_env);
    o.insert("runtime", Variant::from("codex"));
    o.insert("session_id", Variant::from(thread.as_str()));
    let path = manager.create_bot(o).await.unwrap();
    let bot = env.bot(&path).await;
    let items = chat(&bot).await;
    let shown: Vec<(&str, &str)> = items
        .iter()
        .map(|(_, k, p)| (k.as_str(), p["text"].as_str().unwrap_or_default()))
        .collect();
    assert_eq!(
        shown,
        [
            ("user", "hello from the terminal"),
            ("assistant", "Hello! You said: hello from the terminal"),
            ("user", "slow"),
            (
                "assistant",
                (0..30)
                    .map(|i| format!("{i} "))
                    .collect::<String>()
                    .as_str()
            ),
        ]
    );
    assert!(items.iter().all(|(_, _, p)| p["imported"] == true));

    let seen = send_and_wait(&bot, "and now from botvisor").await;
    assert_eq!(seen.outcome, "success", "{seen:?}");
    assert_eq!(bot.session_id().await.unwrap(), *thread, "the same thread");
    let asked = setup
        .api
        .requests()
        .into_iter()
        .rfind(|r| r.last_user_text.contains("and now from botvisor"))
        .unwrap();
    assert!(
        asked.body.to_string().contains("hello from the terminal"),
        "the model sees the terminal's turn"
    );
    let listed = manager.list_conversations(work, find).await.unwrap();
    let owner: zbus::OwnedObjectPath = listed[0].4["bot"].clone().try_into().unwrap();
    assert_eq!(owner, path);
    drop(setup);
    support::codex::wait_no_leftovers(&env).await;
}

/// Issue 46 §2 on Codex: a bot's thread continued with the bare `codex exec resume` while the
/// bot is stopped: its next message finds the terminal's exchange in its chat first (imported,
/// once, in order), as the model then sees it.
#[cfg_attr(
    botvisor_skip_codex,
    ignore = "BOTVISOR_TEST_CODEX_BIN not set: no real Codex to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_codex_exec_resume_adds_to_a_bots_thread_is_imported() {
    let Some(codex) = codex_bin() else { return };
    let env = TestEnv::new().await;
    let setup = support::codex::CodexSetup::start(
        &env,
        codex.clone(),
        support::responses_api::echo_script(),
    )
    .await;
    let bot = setup.bot(&env, "").await;
    assert_eq!(send_and_wait(&bot, "one").await.outcome, "success");
    let thread = bot.session_id().await.unwrap();
    stop_and_wait(&bot).await;
    let mut cli = tokio::process::Command::new(&codex);
    cli.args([
        "exec",
        "--skip-git-repo-check",
        "resume",
        &thread,
        "from the terminal",
    ])
    .current_dir(&env.work)
    .env_clear()
    .envs(&setup.bot_env)
    .env("PATH", std::env::var("PATH").unwrap_or_default())
    .stdin(std::process::Stdio::null())
    .kill_on_drop(true);
    let out = bounded("codex exec resume", cli.output()).await.unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(send_and_wait(&bot, "two").await.outcome, "success");
    let items = chat(&bot).await;
    let at = |kind: &str, text: &str| {
        items
            .iter()
            .position(|(_, k, p)| k == kind && p["text"].as_str().is_some_and(|t| t == text))
    };
    let (Some(theirs), Some(answer), Some(mine)) = (
        at("user", "from the terminal"),
        at("assistant", "Hello! You said: from the terminal"),
        at("user", "two"),
    ) else {
        panic!("the terminal's exchange is in the chat: {items:?}");
    };
    assert!(theirs < answer && answer < mine, "{items:?}");
    assert_eq!(items[theirs].2["imported"], true);
    assert_eq!(
        items
            .iter()
            .filter(|(_, _, p)| p["text"] == "from the terminal")
            .count(),
        1,
        "{items:?}"
    );
    assert_eq!(bot.session_id().await.unwrap(), thread);
}
