//! Issue 28: several Claude Code bots on one repository, each in a git worktree botvisor makes,
//! with a real git.

use std::collections::HashMap;
use std::path::Path;

use futures_util::StreamExt;
use zbus::Variant;

use botvisor::dbus::client::BotProxy;
use support::git::{git, repository, worktrees};
use support::stand_in_api::demo_script;
use support::*;

/// Sends `text`, allows every permission request of its turn, and returns its outcome (a
/// worktree given a `path` under `.git` is asked for every edit: Claude Code 2.1.328 asks before
/// it writes under a `.git` folder even in `acceptEdits`).
async fn send_allowing(bot: &BotProxy<'_>, text: &str) -> String {
    let mut asked = bot.receive_permission_requested().await.unwrap();
    let mut finished = bot.receive_turn_finished().await.unwrap();
    let turn = bot.send(text, HashMap::new()).await.unwrap();
    tokio::time::timeout(EVENT_TIMEOUT, async {
        loop {
            tokio::select! {
                Some(sig) = asked.next() => {
                    let id = sig.args().unwrap().request_id.clone();
                    bot.respond_permission(&id, "allow", HashMap::new()).await.unwrap();
                }
                Some(sig) = finished.next() => {
                    let a = sig.args().unwrap();
                    if a.turn_id == turn {
                        return a.outcome.clone();
                    }
                }
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("turn {turn} of `{text}` did not finish"))
}

/// Creates a bot in a worktree of the repository at `repo` (`worktree` options as given).
async fn create_in_worktree(
    env: &TestEnv,
    setup: &RealSetup,
    repo: &Path,
    worktree: HashMap<String, zbus::OwnedVariant>,
) -> zbus::Result<zbus::OwnedObjectPath> {
    let cwd = repo.to_str().unwrap();
    let mut o = create_options(cwd, &setup.bot_env);
    o.insert("permission_mode", Variant::from("acceptEdits"));
    o.insert("worktree", Variant::from(worktree));
    bounded("CreateBot", async {
        env.manager().await.create_bot(o).await
    })
    .await
}

#[cfg_attr(
    botvisor_skip_claude,
    ignore = "BOTVISOR_TEST_CLAUDE_BIN not set: no real Claude Code to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_bots_edit_one_repository_in_worktrees_resume_after_a_restart_and_delete_them() {
    let Some(claude) = claude_bin() else { return };
    let env = TestEnv::new().await;
    let repo = env.work.clone();
    repository(&repo);
    let mut setup = RealSetup::start(&env, claude, demo_script()).await;

    // A branch git refuses is InvalidArgument with git's words, and nothing is made.
    let bad = HashMap::from([(
        "branch".to_owned(),
        zbus::OwnedVariant::from(zbus::Str::from("no..dots")),
    )]);
    let err = create_in_worktree(&env, &setup, &repo, bad)
        .await
        .unwrap_err();
    assert_eq!(
        error_name(&err),
        "org.botvisor.Botvisor1.Error.InvalidArgument"
    );
    assert!(err.to_string().contains("not a valid branch name"), "{err}");
    assert!(env.manager().await.list_bots().await.unwrap().is_empty());

    // Three bots, each in its worktree, each writing its own file.
    let mut bots = Vec::new();
    for _ in 0..3 {
        let path = create_in_worktree(&env, &setup, &repo, HashMap::new())
            .await
            .unwrap_or_else(|e| panic!("CreateBot with a worktree: {e}"));
        bots.push(env.bot(&path).await);
    }
    let head = git(&repo, &["rev-parse", "HEAD"]).trim().to_owned();
    let mut trees = Vec::new();
    for (i, bot) in bots.iter().enumerate() {
        let tree = bot.worktree().await.unwrap();
        assert_eq!(bot.cwd().await.unwrap(), tree);
        let want = if i == 0 {
            "botvisor/work".to_owned()
        } else {
            format!("botvisor/work-{}", i + 1)
        };
        assert_eq!(bot.branch().await.unwrap(), want);
        assert_eq!(bot.base_commit().await.unwrap(), head);
        // By default in botvisor's state folder (the database's), one folder per repository:
        // not under `.git`, where Claude Code asks before every edit.
        let repo_top = std::fs::canonicalize(&repo).unwrap();
        let folder = env.dir.path().join("worktrees").join(
            botvisor::supervisor::core::worktree::repository_folder(&repo_top.to_string_lossy()),
        );
        assert!(
            tree.starts_with(&folder.display().to_string()),
            "{tree} is not in {}",
            folder.display()
        );
        assert_eq!(
            git(Path::new(&tree), &["branch", "--show-current"]).trim(),
            want
        );
        trees.push(tree);
    }
    for (i, bot) in bots.iter().enumerate() {
        let file = format!("{}/bot{i}.txt", trees[i]);
        let outcome = send_allowing(bot, &format!("write {file}: from bot {i}")).await;
        assert_eq!(outcome, "success");
        assert_eq!(
            std::fs::read_to_string(&file).unwrap(),
            format!("from bot {i}")
        );
    }
    for (i, tree) in trees.iter().enumerate() {
        let status = git(Path::new(tree), &["status", "--porcelain"]);
        assert_eq!(status.trim(), format!("?? bot{i}.txt"), "only its own file");
    }
    assert_eq!(git(&repo, &["status", "--porcelain"]).trim(), "");

    // A restart of botvisord: every bot resumes its conversation in the same worktree.
    let mut sessions = Vec::new();
    for bot in &bots {
        sessions.push(bot.session_id().await.unwrap());
    }
    let paths: Vec<_> = bots.iter().map(|b| b.inner().path().to_owned()).collect();
    drop(bots);
    setup.daemon.terminate().await;
    setup.daemon = Daemon::start(&setup.cfg, &env.conn).await;
    let mut bots = Vec::new();
    for p in &paths {
        bots.push(env.bot(&p.clone().into()).await);
    }
    for (i, bot) in bots.iter().enumerate() {
        assert_eq!(bot.worktree().await.unwrap(), trees[i]);
        let seen = send_and_wait(bot, &format!("again {i}")).await;
        assert_eq!(seen.outcome, "success", "{seen:?}");
        assert_eq!(bot.session_id().await.unwrap(), sessions[i], "resumed");
        let items = chat(bot).await;
        assert!(of_kind(&items, "system").is_empty(), "{items:?}");
    }
    let resumed = setup
        .api
        .requests()
        .into_iter()
        .rfind(|r| r.has_tools && r.last_user_text.contains("again 2"))
        .unwrap();
    assert!(
        resumed.body.to_string().contains("from bot 2"),
        "the resumed request carries the conversation's history"
    );

    let om = zbus::fdo::ObjectManagerProxy::builder(&env.conn)
        .destination("org.botvisor.Botvisor1")
        .path("/org/botvisor/Botvisor1")
        .build()
        .await
        .unwrap();
    let mut removed = om.receive_interfaces_removed().await.unwrap();
    let remove = |force: bool| {
        HashMap::from([
            ("remove_worktree", Variant::from(true)),
            ("force", Variant::from(force)),
        ])
    };

    // A dirty worktree is refused, naming what is uncommitted; nothing changes.
    let err = bots[0].delete_with(remove(false)).await.unwrap_err();
    assert_eq!(error_name(&err), "org.botvisor.Botvisor1.Error.Busy");
    assert!(err.to_string().contains("?? bot0.txt"), "{err}");
    assert_eq!(env.manager().await.list_bots().await.unwrap().len(), 3);
    assert!(Path::new(&trees[0]).join("bot0.txt").is_file());

    // Committed but merged nowhere: refused too, naming the commit.
    git(Path::new(&trees[1]), &["add", "bot1.txt"]);
    git(
        Path::new(&trees[1]),
        &["commit", "-q", "-m", "bot one's file"],
    );
    let err = bots[1].delete_with(remove(false)).await.unwrap_err();
    assert_eq!(error_name(&err), "org.botvisor.Botvisor1.Error.Busy");
    assert!(err.to_string().contains("bot one's file"), "{err}");

    // Merged into main: removed, with its branch, before the object goes.
    git(&repo, &["merge", "-q", "--ff-only", "botvisor/work-2"]);
    bots[1].delete_with(remove(false)).await.unwrap();
    let gone = tokio::time::timeout(EVENT_TIMEOUT, removed.next())
        .await
        .expect("InterfacesRemoved")
        .unwrap();
    assert_eq!(gone.args().unwrap().object_path.as_str(), paths[1].as_str());
    assert!(!Path::new(&trees[1]).exists(), "the worktree is removed");
    assert_eq!(
        git(&repo, &["branch", "--list", "botvisor/work-2"]).trim(),
        ""
    );
    assert!(repo.join("bot1.txt").is_file(), "its work is on main");

    // `force`: the dirty one goes too.
    bots[0].delete_with(remove(true)).await.unwrap();
    let gone = tokio::time::timeout(EVENT_TIMEOUT, removed.next())
        .await
        .expect("InterfacesRemoved")
        .unwrap();
    assert_eq!(gone.args().unwrap().object_path.as_str(), paths[0].as_str());
    assert!(!Path::new(&trees[0]).exists());
    assert!(!worktrees(&repo).contains(&trees[0]), "git forgot it");

    // A worktree removed by hand is a folder that is gone: Busy names it, nothing is queued;
    // Delete with `remove_worktree` then prunes what git kept of it.
    stop_and_wait(&bots[2]).await;
    std::fs::remove_dir_all(&trees[2]).unwrap();
    let err = bots[2]
        .send("after removal", HashMap::new())
        .await
        .unwrap_err();
    assert_eq!(error_name(&err), "org.botvisor.Botvisor1.Error.Busy");
    assert!(err.to_string().contains(&trees[2]), "{err}");
    assert!(err.to_string().contains("worktree add"), "{err}");
    assert!(worktrees(&repo).contains(&trees[2]));
    bots[2].delete_with(remove(false)).await.unwrap();
    tokio::time::timeout(EVENT_TIMEOUT, removed.next())
        .await
        .expect("InterfacesRemoved")
        .unwrap();
    assert!(!worktrees(&repo).contains(&trees[2]));
    assert!(env.manager().await.list_bots().await.unwrap().is_empty());
    drop(setup);
    env.assert_no_leftovers();
}

/// Config `worktrees_dir` puts the worktrees outside `.git`, where Claude Code 2.1.328 lets
/// `acceptEdits` write without asking (under `.git/` it asks for every edit, whatever the mode:
/// see `send_allowing`).
#[cfg_attr(
    botvisor_skip_claude,
    ignore = "BOTVISOR_TEST_CLAUDE_BIN not set: no real Claude Code to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configured_worktrees_folder_outside_git_lets_accept_edits_write() {
    let Some(claude) = claude_bin() else { return };
    let env = TestEnv::new().await;
    let repo = env.work.clone();
    repository(&repo);
    let trees = env.dir.path().join("trees");
    let config = format!("worktrees_dir = \"{}\"\n", trees.display());
    let setup = RealSetup::start_with_config(&env, claude, demo_script(), &config).await;
    let path = create_in_worktree(&env, &setup, &repo, HashMap::new())
        .await
        .unwrap();
    let bot = env.bot(&path).await;
    let tree = bot.worktree().await.unwrap();
    assert_eq!(
        Path::new(&tree),
        trees.canonicalize().unwrap().join("work"),
        "in the configured folder"
    );
    let file = format!("{tree}/mine.txt");
    let seen = send_and_wait(&bot, &format!("write {file}: no question asked")).await;
    assert_eq!(seen.outcome, "success", "{seen:?}");
    assert!(
        seen.items.iter().all(|(_, k, _)| k != "permission_request"),
        "acceptEdits applies outside .git: {:?}",
        seen.items
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "no question asked");
}
