//! Issue 28 on Codex: bots in git worktrees of one repository, with a real git.

use std::collections::HashMap;
use std::path::Path;

use futures_util::StreamExt;
use zbus::Variant;

use support::git::{git, repository};
use support::*;

/// The same on Codex: two Codex bots in worktrees of one repository, each running a shell
/// command that writes its own file in its own worktree (its `cwd`), each thread resumed after
/// a restart of botvisord, and the worktrees removed once merged.
#[cfg_attr(
    botvisor_skip_codex,
    ignore = "BOTVISOR_TEST_CODEX_BIN not set: no real Codex to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_bots_edit_one_repository_in_worktrees_and_resume_after_a_restart() {
    let Some(codex) = codex_bin() else { return };
    let env = TestEnv::new().await;
    let repo = env.work.clone();
    repository(&repo);
    let mut setup =
        support::codex::CodexSetup::start(&env, codex, support::responses_api::shell_script())
            .await;
    let mut bots = Vec::new();
    for _ in 0..2 {
        let mut o = create_options(repo.to_str().unwrap(), &setup.bot_env);
        o.insert("runtime", Variant::from("codex"));
        o.insert(
            "worktree",
            Variant::from(HashMap::<String, zbus::OwnedVariant>::new()),
        );
        let path = bounded("CreateBot", async {
            env.manager().await.create_bot(o).await
        })
        .await
        .unwrap_or_else(|e| panic!("CreateBot codex with a worktree: {e}"));
        bots.push(env.bot(&path).await);
    }
    let mut trees = Vec::new();
    let mut threads = Vec::new();
    for (i, bot) in bots.iter().enumerate() {
        let tree = bot.worktree().await.unwrap();
        let seen = send_and_wait(bot, &format!("run: echo from-{i} > codex{i}.txt")).await;
        assert_eq!(seen.outcome, "success", "{seen:?}");
        assert_eq!(
            std::fs::read_to_string(Path::new(&tree).join(format!("codex{i}.txt")))
                .unwrap()
                .trim(),
            format!("from-{i}"),
            "written in its own worktree, its cwd"
        );
        threads.push(bot.session_id().await.unwrap());
        trees.push(tree);
    }
    assert_eq!(git(&repo, &["status", "--porcelain"]).trim(), "");

    let paths: Vec<_> = bots.iter().map(|b| b.inner().path().to_owned()).collect();
    drop(bots);
    setup.daemon.terminate().await;
    setup.daemon = Daemon::start(&setup.cfg, &env.conn).await;
    let om = zbus::fdo::ObjectManagerProxy::builder(&env.conn)
        .destination("org.botvisor.Botvisor1")
        .path("/org/botvisor/Botvisor1")
        .build()
        .await
        .unwrap();
    let mut removed = om.receive_interfaces_removed().await.unwrap();
    for (i, p) in paths.iter().enumerate() {
        let bot = env.bot(&p.clone().into()).await;
        let seen = send_and_wait(&bot, &format!("again {i}")).await;
        assert_eq!(seen.outcome, "success", "{seen:?}");
        assert_eq!(bot.session_id().await.unwrap(), threads[i], "resumed");
        let request = setup
            .api
            .requests()
            .into_iter()
            .rfind(|r| r.last_user_text.contains(&format!("again {i}")))
            .unwrap();
        assert!(
            request.body.to_string().contains(&format!("codex{i}.txt")),
            "the resumed thread carries its history"
        );
        let tree = Path::new(&trees[i]);
        git(tree, &["add", "."]);
        git(tree, &["commit", "-q", "-m", &format!("codex {i}")]);
        let branch = bot.branch().await.unwrap();
        git(&repo, &["merge", "-q", "--no-edit", &branch]);
        bot.delete_with(HashMap::from([("remove_worktree", Variant::from(true))]))
            .await
            .unwrap();
        // The worktree goes once the agent is stopped, before the bot's object.
        bounded("InterfacesRemoved", removed.next()).await.unwrap();
        assert!(!tree.exists(), "the merged worktree is removed");
    }
    assert!(repo.join("codex0.txt").is_file() && repo.join("codex1.txt").is_file());
    drop(setup);
    support::codex::wait_no_leftovers(&env).await;
}
