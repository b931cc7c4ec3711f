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
