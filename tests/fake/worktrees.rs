//! Issue 28 through `botvisorctl`, against the scripted fake CLI and a real git: `create
//! --worktree`, `list` showing the branch, `delete --remove-worktree` refused while dirty,
//! `conversations` listing a folder's transcripts (titles escaped), and `create --adopt`.

use std::collections::HashMap;
use std::path::Path;
use std::process::Stdio;

use serde_json::{Value, json};

use support::*;

const CTL: &str = env!("CARGO_BIN_EXE_botvisorctl");

/// Runs botvisorctl on `bus`: (exit code, stdout, stderr).
async fn run(bus: &str, args: &[&str]) -> (i32, String, String) {
    let out = tokio::process::Command::new(CTL)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("DBUS_SESSION_BUS_ADDRESS", bus)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .args(args)
        .output()
        .await
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.org")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.org")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `--env K=V` for every variable the fake CLI needs.
fn env_args(s: &FakeSetup) -> Vec<String> {
    fake_env(&s.env.home, &s.state, json!({}), &s.env.marker)
        .into_iter()
        .flat_map(|(k, v)| ["--env".to_owned(), format!("{k}={v}")])
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn botvisorctl_creates_lists_and_deletes_a_bot_in_a_worktree() {
    let s = FakeSetup::start("").await;
    let bus = s.env.bus.address.clone();
    let repo = s.env.work.clone();
    git(&repo, &["init", "-q", "-b", "main"]);
    std::fs::write(repo.join("README"), "x\n").unwrap();
    git(&repo, &["add", "README"]);
    git(&repo, &["commit", "-q", "-m", "first"]);

    let mut args: Vec<String> = ["--json", "create", "--cwd", repo.to_str().unwrap()]
        .map(String::from)
        .to_vec();
    args.extend(["--worktree".into(), "--branch".into(), "feat/x".into()]);
    args.extend(env_args(&s));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, out, err) = run(&bus, &args).await;
    assert_eq!(code, 0, "{err}");
    let created: Value = serde_json::from_str(out.trim()).unwrap();
    let tree = created["cwd"].as_str().unwrap().to_owned();
    // By default in botvisor's state folder, one folder per repository, one per bot.
    let repo_top = std::fs::canonicalize(&repo).unwrap();
    let folder =
        botvisor::supervisor::core::worktree::repository_folder(&repo_top.to_string_lossy());
    assert!(
        tree.ends_with(&format!("/worktrees/{folder}/work")),
        "{tree}"
    );
    assert!(!tree.contains("/.git/"), "{tree}");

    let (code, out, _) = run(&bus, &["--json", "list"]).await;
    assert_eq!(code, 0);
    let listed: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(listed["branch"], "feat/x");
    assert_eq!(listed["worktree"], tree.as_str());
    let (_, out, _) = run(&bus, &["list"]).await;
    assert!(out.contains("BRANCH") && out.contains("feat/x"), "{out}");

    // A branch that exists already: git's words, exit code of a refused argument.
    let mut again: Vec<String> = ["create", "--cwd", repo.to_str().unwrap(), "--worktree"]
        .map(String::from)
        .to_vec();
    again.extend(["--branch".into(), "feat/x".into()]);
    again.extend(env_args(&s));
    let again: Vec<&str> = again.iter().map(String::as_str).collect();
    let (code, _, err) = run(&bus, &again).await;
    assert_ne!(code, 0);
    assert!(err.contains("already exists"), "{err}");

    std::fs::write(Path::new(&tree).join("new.txt"), "x").unwrap();
    let id = created["id"].as_str().unwrap();
    let (code, _, err) = run(&bus, &["delete", id, "--yes", "--remove-worktree"]).await;
    assert_ne!(code, 0);
    assert!(err.contains("?? new.txt"), "{err}");
    // The way out is the command's flag, not the D-Bus option (issue 46).
    assert!(
        err.contains(&format!(
            "run `botvisorctl delete {id} --yes --remove-worktree --force` to remove the worktree anyway"
        )) && !err.contains("force: true"),
        "{err}"
    );
    assert!(Path::new(&tree).join("new.txt").is_file());
    let om = zbus::fdo::ObjectManagerProxy::builder(&s.env.conn)
        .destination("org.botvisor.Botvisor1")
        .path("/org/botvisor/Botvisor1")
        .build()
        .await
        .unwrap();
    let mut removed = om.receive_interfaces_removed().await.unwrap();
    let (code, _, err) = run(
        &bus,
        &["delete", id, "--yes", "--remove-worktree", "--force"],
    )
    .await;
    assert_eq!(code, 0, "{err}");
    // `delete` ends once the worktree is gone (a script's next git command finds it removed).
    assert!(!Path::new(&tree).exists(), "removed when delete returned");
    // The worktree and its branch go before the bot's object does.
    use futures_util::StreamExt;
    bounded("InterfacesRemoved", removed.next()).await.unwrap();
    assert_eq!(git(&repo, &["branch", "--list", "feat/x"]).trim(), "");

    // An unmerged branch outlives a forced removal; the next bot of the same name gets the
    // next free name instead of git's refusal.
    let create_default = || {
        let mut a: Vec<String> = [
            "--json",
            "create",
            "--cwd",
            repo.to_str().unwrap(),
            "--worktree",
        ]
        .map(String::from)
        .to_vec();
        a.extend(env_args(&s));
        a
    };
    let a = create_default();
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let (code, out, err) = run(&bus, &a).await;
    assert_eq!(code, 0, "{err}");
    let first: Value = serde_json::from_str(out.trim()).unwrap();
    let first_tree = first["cwd"].as_str().unwrap().to_owned();
    std::fs::write(Path::new(&first_tree).join("kept.txt"), "x").unwrap();
    git(Path::new(&first_tree), &["add", "kept.txt"]);
    git(Path::new(&first_tree), &["commit", "-q", "-m", "kept"]);
    let id = first["id"].as_str().unwrap();
    let (code, _, err) = run(
        &bus,
        &["delete", id, "--yes", "--remove-worktree", "--force"],
    )
    .await;
    assert_eq!(code, 0, "{err}");
    bounded("InterfacesRemoved", removed.next()).await.unwrap();
    assert!(!Path::new(&first_tree).exists());
    assert_eq!(
        git(&repo, &["branch", "--list", "botvisor/work"]).trim(),
        "botvisor/work"
    );
    let (code, out, err) = run(&bus, &a).await;
    assert_eq!(code, 0, "{err}");
    let second: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(second["name"], "work");
    assert!(
        second["cwd"]
            .as_str()
            .unwrap()
            .ends_with(&format!("/worktrees/{folder}/work-2"))
    );
    let (_, out, _) = run(&bus, &["--json", "status", "work"]).await;
    let shown: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(shown["branch"], "botvisor/work-2");
}

/// `ListConversations` of `work` from `offset`, at most `limit`: the session ids.
async fn env_page(s: &FakeSetup, work: &Path, offset: u32, limit: u32) -> Vec<String> {
    let options = std::collections::HashMap::from([
        ("offset", zbus::Variant::from(offset)),
        ("limit", zbus::Variant::from(limit)),
    ]);
    s.env
        .manager()
        .await
        .list_conversations(work.to_str().unwrap(), options)
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.1)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn botvisorctl_lists_a_folders_conversations_and_adopts_one() {
    let s = FakeSetup::start("").await;
    let bus = s.env.bus.address.clone();
    let work = s.env.work.canonicalize().unwrap();
    let slug = botvisor::runtime::claude::transcript::slug(&work);
    let folder = s.env.home.join(".claude/projects").join(slug);
    std::fs::create_dir_all(&folder).unwrap();
    let id = "3f0c1b9e-4a51-4c7d-9a0e-5b1c2d3e4f50";
    let long = "x".repeat(300);
    // An answer over the 1 MiB an item may be: imported as a preview, like any item.
    let big = "y".repeat(2 * 1024 * 1024);
    let lines = [
        json!({"type": "user", "uuid": "u1", "parentUuid": null, "message": {"role": "user",
               "content": format!("\u{1b}[31mred\u{1b}[0m then {long}")}}),
        json!({"type": "assistant", "uuid": "a1", "parentUuid": "u1",
               "message": {"content": [{"type": "text", "text": big}]}}),
    ];
    let text: Vec<String> = lines.iter().map(Value::to_string).collect();
    std::fs::write(folder.join(format!("{id}.jsonl")), text.join("\n") + "\n").unwrap();

    let (code, out, err) = run(
        &bus,
        &["--json", "conversations", "--cwd", work.to_str().unwrap()],
    )
    .await;
    assert_eq!(code, 0, "{err}");
    let found: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(found["session_id"], id);
    let title = found["title"].as_str().unwrap();
    assert!(
        !title.contains('\u{1b}'),
        "control characters escaped: {title:?}"
    );
    assert!(title.starts_with("\\u{1b}[31mred"), "{title:?}");
    assert_eq!(title.chars().count(), 201, "200 characters and `…`");
    assert!(title.ends_with('…'));

    let mut args: Vec<String> = ["--json", "create", "--cwd", work.to_str().unwrap()]
        .map(String::from)
        .to_vec();
    args.extend(["--adopt".into(), id.into()]);
    args.extend(env_args(&s));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, out, err) = run(&bus, &args).await;
    assert_eq!(code, 0, "{err}");
    let created: Value = serde_json::from_str(out.trim()).unwrap();
    let (code, out, _) = run(&bus, &["--json", "chat", created["id"].as_str().unwrap()]).await;
    assert_eq!(code, 0);
    let items: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(items.len(), 2, "{items:?}");
    assert!(
        items
            .iter()
            .all(|i| i.to_string().contains("\"imported\":true")),
        "{items:?}"
    );

    // Newest first, paged: two older conversations of the folder around the adopted one.
    for (name, age) in [("old", 3600), ("older", 7200)] {
        let file = folder.join(format!("{name}.jsonl"));
        let line = json!({"type": "user", "uuid": "u", "message": {"content": name}});
        std::fs::write(&file, format!("{line}\n")).unwrap();
        let when = std::time::SystemTime::now() - std::time::Duration::from_secs(age);
        std::fs::File::options()
            .write(true)
            .open(&file)
            .unwrap()
            .set_modified(when)
            .unwrap();
    }
    let (_, out, _) = run(
        &bus,
        &["--json", "conversations", "--cwd", work.to_str().unwrap()],
    )
    .await;
    let ids: Vec<String> = out
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["session_id"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(ids, [id, "old", "older"]);
    let page = env_page(&s, &work, 1, 1).await;
    assert_eq!(page, ["old"]);
    let owned: Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    assert_eq!(owned["bot"], created["id"], "the adopted one is the bot's");

    // An id that could name another file: InvalidArgument, nothing created.
    let mut bad: Vec<String> = ["create", "--cwd", work.to_str().unwrap()]
        .map(String::from)
        .to_vec();
    bad.extend(["--adopt".into(), "../../etc/passwd".into()]);
    let bad: Vec<&str> = bad.iter().map(String::as_str).collect();
    let (code, _, err) = run(&bus, &bad).await;
    assert_ne!(code, 0);
    assert!(err.contains("keeps no conversation"), "{err}");
    let (_, out, _) = run(&bus, &["--json", "list"]).await;
    assert_eq!(out.lines().count(), 1);
}

/// Design rule 15: `git worktree add` runs while the object server answers other calls. The
/// repository's `post-checkout` hook (git runs it inside `worktree add`) waits until the test
/// lets it go; meanwhile another client's `ListBots` and a `ListConversations` are answered.
/// Before, `CreateBot` ran in the object server's one task: every call of every client waited
/// behind the slowest git, up to its 30 s bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_git_holds_no_other_call() {
    let s = FakeSetup::start("").await;
    let repo = s.env.work.clone();
    git(&repo, &["init", "-q", "-b", "main"]);
    std::fs::write(repo.join("README"), "x\n").unwrap();
    git(&repo, &["add", "README"]);
    git(
        &repo,
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@example.org",
            "commit",
            "-q",
            "-m",
            "first",
        ],
    );
    let started = s.env.dir.path().join("hook-started");
    let release = s.env.dir.path().join("hook-release");
    let hook = repo.join(".git/hooks/post-checkout");
    std::fs::write(
        &hook,
        format!(
            "#!/bin/sh\ntouch '{}'\nwhile [ ! -e '{}' ]; do sleep 0.05; done\n",
            started.display(),
            release.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();

    let cwd = repo.to_str().unwrap().to_owned();
    let env = HashMap::new();
    let creating = {
        let manager = s.env.manager().await;
        let cwd = cwd.clone();
        tokio::spawn(async move {
            let mut o = create_options(&cwd, &env);
            o.insert(
                "worktree",
                zbus::zvariant::Variant::from(HashMap::<String, zbus::OwnedVariant>::new()),
            );
            manager.create_bot(o).await
        })
    };
    bounded("the hook starts", async {
        while !started.exists() {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
    // Another client, while git waits: answered at once (5 s is far more than an answer takes,
    // and far less than git's bound).
    let other = s.env.bus.connect().await;
    let manager = botvisor::dbus::client::ManagerProxy::new(&other)
        .await
        .unwrap();
    let quick = std::time::Duration::from_secs(5);
    tokio::time::timeout(quick, manager.list_bots())
        .await
        .expect("ListBots answered while git runs")
        .unwrap();
    tokio::time::timeout(quick, manager.list_conversations(&cwd, HashMap::new()))
        .await
        .expect("ListConversations answered while git runs")
        .unwrap();
    assert!(!creating.is_finished(), "git still waits for the hook");

    std::fs::write(&release, "").unwrap();
    let path = bounded("CreateBot", creating).await.unwrap().unwrap();
    let bot = s.env.bot(&path).await;
    assert!(bot.worktree().await.unwrap().ends_with("/work"));
}

/// Creates that run at once (each in a task of its own since `CreateBot` no longer holds the
/// object server) still take free names and free branches: a burst of 8 plain creates and 8
/// worktree creates on one repository gives 16 bots, 16 names and 8 worktrees on 8 branches.
/// Found by a hostile run: two bots named `plain-2`, and worktree creates that failed on
/// branches botvisor had picked itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creates_at_once_take_distinct_names_and_branches() {
    let s = FakeSetup::start("").await;
    let repo = s.env.work.clone();
    support::git::repository(&repo);
    let cwd = repo.to_str().unwrap().to_owned();
    let mut calls = Vec::new();
    for i in 0..16 {
        let manager = s.env.manager().await;
        let cwd = cwd.clone();
        calls.push(tokio::spawn(async move {
            let env = HashMap::new();
            let mut o = create_options(&cwd, &env);
            if i % 2 == 1 {
                o.insert(
                    "worktree",
                    zbus::zvariant::Variant::from(HashMap::<String, zbus::OwnedVariant>::new()),
                );
            }
            manager.create_bot(o).await
        }));
    }
    let mut names = std::collections::BTreeSet::new();
    let mut branches = std::collections::BTreeSet::new();
    for call in calls {
        let path = bounded("CreateBot", call).await.unwrap().expect("created");
        let bot = s.env.bot(&path).await;
        names.insert(bot.name().await.unwrap());
        let branch = bot.branch().await.unwrap();
        if !branch.is_empty() {
            branches.insert(branch);
        }
    }
    assert_eq!(names.len(), 16, "{names:?}");
    assert_eq!(branches.len(), 8, "{branches:?}");
    assert_eq!(
        support::git::worktrees(&repo).len(),
        9,
        "the checkout and 8 worktrees"
    );
}

/// A worktree `path` inside another worktree (or the repository's own checkout) is refused: a
/// forced removal of the outer one would take it, and what it holds, with it (a hostile run lost
/// a file that way).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worktree_inside_another_worktree_is_refused() {
    let s = FakeSetup::start("").await;
    let repo = s.env.work.clone();
    support::git::repository(&repo);
    let cwd = repo.to_str().unwrap().to_owned();
    let manager = s.env.manager().await;
    let env = HashMap::new();
    let mut o = create_options(&cwd, &env);
    o.insert(
        "worktree",
        zbus::zvariant::Variant::from(HashMap::<String, zbus::OwnedVariant>::new()),
    );
    let outer = s.env.bot(&manager.create_bot(o).await.unwrap()).await;
    let outer_tree = outer.worktree().await.unwrap();
    for inside in [format!("{outer_tree}/inner"), format!("{cwd}/sub/wt")] {
        let mut o = create_options(&cwd, &env);
        let mut wt = HashMap::<String, zbus::OwnedVariant>::new();
        wt.insert(
            "path".into(),
            zbus::OwnedVariant::try_from(zbus::zvariant::Variant::from(inside.as_str())).unwrap(),
        );
        o.insert("worktree", zbus::zvariant::Variant::from(wt));
        let err = manager.create_bot(o).await.unwrap_err();
        assert_eq!(
            error_name(&err),
            "org.botvisor.Botvisor1.Error.InvalidArgument",
            "{inside}"
        );
        assert!(err.to_string().contains("is inside the worktree"), "{err}");
        assert!(
            !std::path::Path::new(&inside).exists(),
            "nothing made: {inside}"
        );
    }
    assert_eq!(manager.list_bots().await.unwrap().len(), 1);
}

/// A repository with no commit yet: the refusal says so, not only git's "Needed a single
/// revision", and nothing is made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worktree_of_a_repository_with_no_commit_is_refused_saying_so() {
    let s = FakeSetup::start("").await;
    let repo = s.env.work.clone();
    git(&repo, &["init", "-q", "-b", "main"]);
    let cwd = repo.to_str().unwrap().to_owned();
    let manager = s.env.manager().await;
    let env = HashMap::new();
    let mut o = create_options(&cwd, &env);
    o.insert(
        "worktree",
        zbus::zvariant::Variant::from(HashMap::<String, zbus::OwnedVariant>::new()),
    );
    let err = manager.create_bot(o).await.unwrap_err();
    assert_eq!(
        error_name(&err),
        "org.botvisor.Botvisor1.Error.InvalidArgument"
    );
    assert!(err.to_string().contains("has no commit yet"), "{err}");
    assert!(manager.list_bots().await.unwrap().is_empty());
    // And a creator's name that could steer a terminal is refused like a bot's name.
    let mut o = create_options(&cwd, &env);
    o.insert(
        "created_by",
        zbus::zvariant::Variant::from("evil\u{202e}txt"),
    );
    let err = manager.create_bot(o).await.unwrap_err();
    assert_eq!(
        error_name(&err),
        "org.botvisor.Botvisor1.Error.InvalidArgument"
    );
    assert!(err.to_string().contains("text-direction"), "{err}");
}
