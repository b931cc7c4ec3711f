//! Issue 28: a conversation begun with the bare Claude Code in a terminal is listed by
//! `ListConversations`, adopted by `CreateBot`'s `session_id`, its history read back from
//! `GetChat` (items marked `imported: true`), and the next message answered in it.

use std::collections::HashMap;

use zbus::Variant;

use support::stand_in_api::echo_script;
use support::*;

#[cfg_attr(
    botvisor_skip_claude,
    ignore = "BOTVISOR_TEST_CLAUDE_BIN not set: no real Claude Code to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversation_begun_in_a_terminal_is_listed_adopted_and_answered_in() {
    let Some(claude) = claude_bin() else { return };
    let env = TestEnv::new().await;
    let setup = RealSetup::start(&env, claude.clone(), echo_script()).await;

    // The user's own conversation, with the bare CLI (print mode), in the folder.
    let mut cli = tokio::process::Command::new(&claude);
    cli.args(["-p", "hello from the terminal\nsecond line"])
        .current_dir(&env.work)
        .env_clear()
        .envs(&setup.bot_env)
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .kill_on_drop(true);
    let out = bounded("the bare CLI", cli.output()).await.unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let manager = env.manager().await;
    let work = env.work.to_str().unwrap();
    let listed = manager
        .list_conversations(work, HashMap::new())
        .await
        .unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    let (runtime, session, written, title, details) = &listed[0];
    assert_eq!(runtime, "claude");
    assert_eq!(title, "hello from the terminal\\nsecond line", "escaped");
    assert!(*written > 0);
    assert!(details.is_empty(), "no bot owns it yet: {details:?}");

    // No such conversation: InvalidArgument, nothing created.
    let mut o = create_options(work, &setup.bot_env);
    o.insert(
        "session_id",
        Variant::from("00000000-0000-0000-0000-000000000000"),
    );
    let err = manager.create_bot(o).await.unwrap_err();
    assert_eq!(
        error_name(&err),
        "org.botvisor.Botvisor1.Error.InvalidArgument"
    );
    assert!(manager.list_bots().await.unwrap().is_empty());

    // Open in the user's own CLI: listed as held, Busy naming it, nothing created (rule 7).
    let other = support::other_cli::OtherCli::start(&env, &setup, &claude, session).await;
    let listed = manager
        .list_conversations(work, HashMap::new())
        .await
        .unwrap();
    let held: String = listed[0].4["held_by"].clone().try_into().unwrap();
    assert!(held.contains(&format!("pid {}", other.id())), "{held}");
    let mut o = create_options(work, &setup.bot_env);
    o.insert("session_id", Variant::from(session.as_str()));
    let err = manager.create_bot(o).await.unwrap_err();
    assert_eq!(error_name(&err), "org.botvisor.Botvisor1.Error.Busy");
    assert!(
        err.to_string().contains(&format!("pid {}", other.id())),
        "{err}"
    );
    assert!(manager.list_bots().await.unwrap().is_empty());
    bounded("the other CLI's exit", async {
        tokio::task::spawn_blocking(move || other.close())
            .await
            .unwrap()
    })
    .await;

    // Adopted: its turns are in the chat first, imported, then the next message goes on in it.
    let mut o = create_options(work, &setup.bot_env);
    o.insert("session_id", Variant::from(session.as_str()));
    let path = manager.create_bot(o).await.unwrap();
    let bot = env.bot(&path).await;
    assert_eq!(bot.session_id().await.unwrap(), *session);
    let items = chat(&bot).await;
    let kinds: Vec<&str> = items.iter().map(|(_, k, _)| k.as_str()).collect();
    assert_eq!(kinds, ["user", "assistant"], "{items:?}");
    assert!(items.iter().all(|(_, _, p)| p["imported"] == true));
    assert_eq!(items[0].2["text"], "hello from the terminal\nsecond line");
    assert_eq!(
        items[1].2["text"],
        "Hello! You said: hello from the terminal\nsecond line"
    );

    // Owned now: listed with its bot, and a second adoption is refused.
    let listed = manager
        .list_conversations(work, HashMap::new())
        .await
        .unwrap();
    let owner: zbus::OwnedObjectPath = listed[0].4["bot"].clone().try_into().unwrap();
    assert_eq!(owner, path);
    let mut o = create_options(work, &setup.bot_env);
    o.insert("session_id", Variant::from(session.as_str()));
    let err = manager.create_bot(o).await.unwrap_err();
    assert_eq!(error_name(&err), "org.botvisor.Botvisor1.Error.Busy");

    let seen = send_and_wait(&bot, "and now from botvisor").await;
    assert_eq!(seen.outcome, "success", "{seen:?}");
    assert_eq!(
        bot.session_id().await.unwrap(),
        *session,
        "the same conversation"
    );
    let asked = setup
        .api
        .requests()
        .into_iter()
        .rfind(|r| r.has_tools && r.last_user_text.contains("and now from botvisor"))
        .unwrap();
    assert!(
        asked.body.to_string().contains("hello from the terminal"),
        "the model sees the terminal's turn"
    );
    let items = chat(&bot).await;
    assert!(
        items[2..]
            .iter()
            .all(|(_, _, p)| p.get("imported").is_none())
    );
    assert!(of_kind(&items, "system").is_empty(), "{items:?}");
    drop(setup);
    env.assert_no_leftovers();
}

/// Runs the bare CLI in print mode in `env.work` with the stand-in's environment (`args` after
/// `-p --output-format json`), outside botvisor; returns its JSON result.
async fn bare_cli(
    env: &TestEnv,
    setup: &RealSetup,
    claude: &std::path::Path,
    args: &[&str],
) -> serde_json::Value {
    let mut cli = tokio::process::Command::new(claude);
    cli.args(["-p", "--output-format", "json"])
        .args(args)
        .current_dir(&env.work)
        .env_clear()
        .envs(&setup.bot_env)
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .kill_on_drop(true);
    let out = bounded("the bare CLI", cli.output()).await.unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Issue 46 §2 and §3: a conversation begun with two `claude -p` turns is adopted; the bot's
/// first turn costs that turn only (not the two before it); stopped, the user continues it in a
/// terminal; the bot's next message finds the terminal's exchange in its chat first (imported,
/// once, in order, as the model then sees it), and that turn too costs only itself.
#[cfg_attr(
    botvisor_skip_claude,
    ignore = "BOTVISOR_TEST_CLAUDE_BIN not set: no real Claude Code to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_terminal_adds_is_imported_and_a_turn_costs_only_itself() {
    let Some(claude) = claude_bin() else { return };
    let env = TestEnv::new().await;
    let setup = RealSetup::start(&env, claude.clone(), echo_script()).await;
    let first = bare_cli(&env, &setup, &claude, &["one"]).await;
    let session = first["session_id"].as_str().unwrap().to_owned();
    // What one echo turn costs, as the CLI computes it.
    let per_turn = first["total_cost_usd"].as_f64().unwrap();
    assert!(per_turn > 0.0);
    bare_cli(&env, &setup, &claude, &["--resume", &session, "two"]).await;

    let mut o = create_options(env.work.to_str().unwrap(), &setup.bot_env);
    o.insert("session_id", Variant::from(session.as_str()));
    let path = env.manager().await.create_bot(o).await.unwrap();
    let bot = env.bot(&path).await;
    let near = |a: f64, b: f64| (a - b).abs() < 1e-9;
    let cost_of = |items: &[(u64, String, serde_json::Value)], turn: &str| {
        of_kind(items, "turn_finished")
            .iter()
            .find(|p| p["turn_id"] == turn)
            .and_then(|p| p["cost_usd"].as_f64())
            .unwrap_or(-1.0)
    };
    let three = send_and_wait(&bot, "three").await;
    assert_eq!(three.outcome, "success");
    let items = chat(&bot).await;
    assert!(
        near(cost_of(&items, &three.turn_id), per_turn),
        "the first turn after adoption costs itself only, not the turns before: {} ≠ {per_turn}",
        cost_of(&items, &three.turn_id)
    );

    // Stopped, the user goes on in a terminal.
    stop_and_wait(&bot).await;
    bare_cli(
        &env,
        &setup,
        &claude,
        &["--resume", &session, "from the terminal"],
    )
    .await;
    let four = send_and_wait(&bot, "four").await;
    assert_eq!(four.outcome, "success");
    let items = chat(&bot).await;
    let at = |kind: &str, text: &str| {
        items
            .iter()
            .position(|(_, k, p)| k == kind && p["text"].as_str().is_some_and(|t| t == text))
    };
    let (Some(theirs), Some(answer), Some(mine)) = (
        at("user", "from the terminal"),
        at("assistant", "Hello! You said: from the terminal"),
        at("user", "four"),
    ) else {
        panic!("the terminal's exchange is in the chat: {items:?}");
    };
    assert!(
        theirs < answer && answer < mine,
        "in order, before the next message: {items:?}"
    );
    assert_eq!(items[theirs].2["imported"], true);
    assert_eq!(
        items[theirs - 1].2["reason"],
        "imported_elsewhere",
        "{items:?}"
    );
    let imported = items
        .iter()
        .filter(|(_, _, p)| p["text"] == "from the terminal")
        .count();
    assert_eq!(imported, 1, "imported once: {items:?}");
    assert!(
        near(cost_of(&items, &four.turn_id), per_turn),
        "a turn after the terminal's costs itself only: {}",
        cost_of(&items, &four.turn_id)
    );
    assert!(
        near(bot.cost_usd().await.unwrap(), 2.0 * per_turn),
        "the bot's cost counts its own turns: {}",
        bot.cost_usd().await.unwrap()
    );
    // Once more: nothing new, nothing imported again.
    assert_eq!(send_and_wait(&bot, "five").await.outcome, "success");
    let again = chat(&bot).await;
    assert_eq!(
        of_kind(&again, "system")
            .iter()
            .filter(|p| p["reason"] == "imported_elsewhere")
            .count(),
        1,
        "{again:?}"
    );
}

/// Issue 46 §2 while the bot's agent runs between turns (`idle`, the state after every turn): a
/// terminal's `claude -p --resume` exits within a second, so nothing holds the conversation when
/// the bot's next message comes. That message finds the terminal's exchange in its chat first
/// (imported, once), and the agent, which knew nothing of it, starts again on the conversation,
/// so that the model sees the terminal's turn before the bot's. Before the fix (a hostile run of
/// issue 46) the message went to the idle agent: the terminal's turn was in no later request
/// and not in the chat.
#[cfg_attr(
    botvisor_skip_claude,
    ignore = "BOTVISOR_TEST_CLAUDE_BIN not set: no real Claude Code to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_terminal_adds_while_the_agent_idles_reaches_the_chat_and_the_model() {
    let Some(claude) = claude_bin() else { return };
    let env = TestEnv::new().await;
    let setup = RealSetup::start(&env, claude.clone(), echo_script()).await;
    let bot = setup.create_bot(&env, &env.work, &[]).await;
    assert_eq!(send_and_wait(&bot, "first").await.outcome, "success");
    wait_state(&bot, "idle").await;
    let agent = bot.process_id().await.unwrap();
    assert_ne!(agent, 0);
    let session = bot.session_id().await.unwrap();
    bare_cli(
        &env,
        &setup,
        &claude,
        &["--resume", &session, "TERMINAL turn"],
    )
    .await;
    assert_eq!(send_and_wait(&bot, "second").await.outcome, "success");
    let items = chat(&bot).await;
    let at = |kind: &str, text: &str| {
        items
            .iter()
            .position(|(_, k, p)| k == kind && p["text"].as_str().is_some_and(|t| t == text))
    };
    let (Some(theirs), Some(answer), Some(mine)) = (
        at("user", "TERMINAL turn"),
        at("assistant", "Hello! You said: TERMINAL turn"),
        at("user", "second"),
    ) else {
        panic!("the terminal's exchange is in the chat: {items:?}");
    };
    assert!(theirs < answer && answer < mine, "in order: {items:?}");
    assert_eq!(items[theirs].2["imported"], true);
    let last = setup
        .api
        .requests()
        .into_iter()
        .rfind(|r| r.has_tools)
        .unwrap();
    let texts = last.user_texts();
    let pos = |t: &str| texts.iter().position(|x| x.contains(t));
    assert!(
        matches!((pos("TERMINAL turn"), pos("second")), (Some(a), Some(b)) if a < b),
        "the model sees the terminal's turn before the bot's: {texts:?}"
    );
    assert_eq!(support::repeats::occurrences("TERMINAL turn", &texts), 1);
    assert_ne!(
        bot.process_id().await.unwrap(),
        agent,
        "the agent started again on the conversation"
    );
    assert_eq!(
        bot.session_id().await.unwrap(),
        session,
        "the same conversation"
    );
}
