//! A bot's git worktree (issue 28), made and removed by running git as a program (no git
//! library, nothing of git reimplemented). What git says on failure is passed on in its own
//! words. The decisions (names, whether a removal is allowed) are
//! `supervisor::core::worktree`'s; this module only runs git and reads its answers.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::supervisor::core::worktree::{self, Findings, Removal};

/// The longest any one git command may take before the call that runs it fails (design rule
/// 15: a call that can wait has a bound).
pub const GIT_TIMEOUT: Duration = Duration::from_secs(30);

/// The most bytes of git's own words an error carries.
const MAX_WORDS: usize = 2000;

/// What `CreateBot`'s `worktree` option asks for; every field optional.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ask {
    /// The branch to make (`git worktree add -b`); default `botvisor/<bot name>`.
    pub branch: Option<String>,
    /// The commit the branch starts at, anything `git rev-parse` reads; default `HEAD`.
    pub base: Option<String>,
    /// Where the worktree goes (absolute, must not exist yet); default
    /// `<worktrees folder>/<bot name>`.
    pub path: Option<String>,
}

/// A worktree botvisor made for a bot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Made {
    /// The worktree's canonical path: the bot's `Cwd`.
    pub path: String,
    /// The repository's main worktree, where git is run to remove it.
    pub repo: String,
    /// The branch checked out in it.
    pub branch: String,
    /// The full hash of the commit the branch started at.
    pub base_commit: String,
}

/// Runs `git` with `args` in `dir` (`git -C dir`), bounded by [`GIT_TIMEOUT`]. `Ok(stdout)` on
/// success; `Err` with git's own words (its stderr, else stdout, else the exit status).
pub async fn git(dir: &Path, args: &[&str]) -> Result<String, String> {
    let mut cmd = tokio::process::Command::new("git");
    cmd.arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("LC_ALL", "C")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let shown = format!("git {}", args.join(" "));
    // Registered with the subreaper, which would otherwise reap git's exit before tokio does.
    let spawned = crate::process::subreaper::spawn_protected(|| {
        let child = cmd.spawn()?;
        let pid = child.id().unwrap_or(0);
        Ok((child, pid))
    });
    let (child, pid) = match spawned {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err("git is not installed (no `git` on PATH)".into());
        }
        Err(e) => return Err(format!("cannot run `{shown}`: {e}")),
        Ok(spawned) => spawned,
    };
    let waited = tokio::time::timeout(GIT_TIMEOUT, child.wait_with_output()).await;
    crate::process::subreaper::unprotect(pid);
    let out = match waited {
        Err(_) => {
            return Err(format!(
                "`{shown}` did not end within {} s",
                GIT_TIMEOUT.as_secs()
            ));
        }
        Ok(Err(e)) => return Err(format!("cannot run `{shown}`: {e}")),
        Ok(Ok(out)) => out,
    };
    if out.status.success() {
        return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    let words = if out.stderr.iter().any(|b| !b.is_ascii_whitespace()) {
        String::from_utf8_lossy(&out.stderr).into_owned()
    } else if out.stdout.iter().any(|b| !b.is_ascii_whitespace()) {
        String::from_utf8_lossy(&out.stdout).into_owned()
    } else {
        out.status.to_string()
    };
    let words = crate::text::escape(words.trim(), false).into_owned();
    let words = match words.char_indices().nth(MAX_WORDS) {
        Some((at, _)) => format!("{}…", &words[..at]),
        None => words,
    };
    Err(format!("`{shown}` failed: {words}"))
}

/// Makes a worktree for the bot named `bot_name` from the repository that holds `cwd`:
/// `git worktree add -b <branch> <path> <base commit>`. `folder` is config `worktrees_dir`;
/// without it, `<state>/worktrees/<repository folder>` (`state`: botvisor's state folder, the
/// database's; [`worktree::repository_folder`]), or the repository's common git directory when
/// there is no state folder (an in-memory database). A branch or path
/// botvisor names is the first free of `<name>`, `<name>-2`, … (at most
/// `core::worktree::MAX_SUFFIX`). Errors (git's words included): `cwd` in no repository, a
/// branch name git refuses or that exists, a base git cannot read, a path that exists or is not
/// absolute.
pub async fn add(
    cwd: &Path,
    bot_name: &str,
    ask: &Ask,
    folder: Option<&Path>,
    state: Option<&Path>,
) -> Result<Made, String> {
    let top = git(cwd, &["rev-parse", "--show-toplevel"]).await?;
    let top = PathBuf::from(top.trim());
    let base = ask.base.clone().unwrap_or_else(|| "HEAD".to_owned());
    let spec = format!("{base}^{{commit}}");
    let base_commit = match git(&top, &["rev-parse", "--verify", "--end-of-options", &spec]).await {
        Ok(commit) => commit.trim().to_owned(),
        // A repository with no commit yet has no HEAD to start a branch from: say so, with
        // git's words after it.
        Err(e)
            if ask.base.is_none()
                && git(&top, &["rev-parse", "--verify", "--quiet", "HEAD"])
                    .await
                    .is_err() =>
        {
            return Err(format!(
                "the repository {} has no commit yet, so a worktree has nothing to start from; \
                 commit once first ({e})",
                crate::text::escape(&top.to_string_lossy(), false)
            ));
        }
        Err(e) => return Err(e),
    };
    if let Some(p) = &ask.path
        && !Path::new(p).is_absolute()
    {
        return Err(format!(
            "`path` must be absolute, got `{}`",
            crate::text::escape(p, false)
        ));
    }
    let dir = match (&ask.path, folder) {
        (Some(_), _) => PathBuf::new(),
        (None, Some(f)) => f.to_path_buf(),
        (None, None) if let Some(state) = state => state
            .join(worktree::FOLDER)
            .join(worktree::repository_folder(&top.to_string_lossy())),
        (None, None) => {
            let common = git(
                &top,
                &["rev-parse", "--path-format=absolute", "--git-common-dir"],
            )
            .await?;
            PathBuf::from(common.trim()).join("botvisor-worktrees")
        }
    };
    // A name botvisor chooses is the first free one: `-2`, `-3`, … after the bot's name while a
    // branch or folder of that name is left (a deleted bot's, kept unmerged or still being
    // removed). A name the client gave is git's to judge.
    let part = worktree::name_part(bot_name);
    let mut n = 1;
    let (branch, path) = loop {
        let part = worktree::suffixed(&part, n);
        let branch = ask
            .branch
            .clone()
            .unwrap_or_else(|| format!("{}{part}", worktree::BRANCH_PREFIX));
        let path = match &ask.path {
            Some(p) => PathBuf::from(p),
            None => dir.join(&part),
        };
        let branch_taken = ask.branch.is_none()
            && git(
                &top,
                &[
                    "rev-parse",
                    "--verify",
                    "--quiet",
                    &format!("refs/heads/{branch}"),
                ],
            )
            .await
            .is_ok();
        let path_taken = ask.path.is_none() && path.exists();
        if (!branch_taken && !path_taken) || n >= worktree::MAX_SUFFIX {
            break (branch, path);
        }
        n += 1;
    };
    git(&top, &["check-ref-format", "--branch", &branch]).await?;
    let path_text = path.to_string_lossy().into_owned();
    // Not inside another worktree, the repository's own checkout included: a forced removal of
    // the outer one would take this one with it, and the outer one's `git status` would show it.
    let listed = git(&top, &["worktree", "list", "--porcelain"]).await?;
    if let Some(outer) = worktree::enclosing(&listed, &path_text) {
        return Err(format!(
            "`path` {} is inside the worktree {}; give a folder outside every worktree of the \
             repository",
            crate::text::escape(&path_text, false),
            crate::text::escape(&outer, false)
        ));
    }
    git(
        &top,
        &[
            "worktree",
            "add",
            "-b",
            &branch,
            "--",
            &path_text,
            &base_commit,
        ],
    )
    .await?;
    let canonical = std::fs::canonicalize(&path)
        .map_err(|e| format!("the worktree {path_text} git made cannot be read: {e}"))?;
    Ok(Made {
        path: canonical.to_string_lossy().into_owned(),
        repo: top.to_string_lossy().into_owned(),
        branch,
        base_commit,
    })
}

/// What git shows of the worktree at `path` on `branch` of the repository `repo`: what is
/// uncommitted (`git status --porcelain --untracked-files=all`) and which commits of the branch
/// are on no other local branch.
pub async fn findings(repo: &Path, path: &Path, branch: &str) -> Result<Findings, String> {
    let folder_gone = !path.is_dir();
    let uncommitted = if folder_gone {
        Vec::new()
    } else {
        git(path, &["status", "--porcelain", "--untracked-files=all"])
            .await?
            .lines()
            .map(str::to_owned)
            .collect()
    };
    let full = format!("refs/heads/{branch}");
    // `--exclude` before `--branches` takes the name without `refs/heads/` (git-rev-list(1)); a
    // branch name holds no glob character (git check-ref-format).
    let exclude = format!("--exclude={branch}");
    let unmerged = git(
        repo,
        &[
            "log",
            "--format=%h %s",
            &full,
            "--not",
            &exclude,
            "--branches",
        ],
    )
    .await?
    .lines()
    .map(|l| crate::text::escape(l, false).into_owned())
    .collect();
    Ok(Findings {
        folder_gone,
        uncommitted,
        unmerged,
    })
}

/// Whether the worktree may go, as `supervisor::core::worktree::removal` decides from what git
/// shows now.
pub async fn decide(
    repo: &Path,
    path: &Path,
    branch: &str,
    force: bool,
) -> Result<Removal, String> {
    let found = findings(repo, path, branch).await?;
    Ok(worktree::removal(
        &path.to_string_lossy(),
        branch,
        &found,
        force,
    ))
}

/// Removes the worktree at `path` as `removal` says: `git worktree remove [--force]` (or
/// `git worktree prune` when its folder is gone), then the branch deleted when asked (`git branch
/// -D`: the decision found its commits on another branch, which `-d` would judge against `HEAD`
/// alone). A refusal
/// removes nothing. Errors: git's words.
pub async fn remove(
    repo: &Path,
    path: &Path,
    branch: &str,
    removal: &Removal,
) -> Result<(), String> {
    let Removal::Remove {
        force,
        delete_branch,
    } = removal
    else {
        return Ok(());
    };
    let path_text = path.to_string_lossy().into_owned();
    if path.is_dir() {
        let mut args = vec!["worktree", "remove"];
        if *force {
            args.push("--force");
        }
        args.extend(["--", path_text.as_str()]);
        git(repo, &args).await?;
    } else {
        git(repo, &["worktree", "prune"]).await?;
    }
    if *delete_branch {
        git(repo, &["branch", "-D", "--", branch]).await?;
    }
    Ok(())
}
