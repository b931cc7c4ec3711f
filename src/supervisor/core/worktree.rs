//! A bot's git worktree (issue 28): the names botvisor gives one, and whether `Delete` with
//! `remove_worktree` may remove it. The shell (`crate::worktree`) runs git and hands the
//! findings here; nothing here runs git or reads a folder.

/// The prefix of a branch botvisor names for a bot: `botvisor/<name>`.
pub const BRANCH_PREFIX: &str = "botvisor/";

/// The folder, under botvisor's state folder, that holds the worktrees botvisor adds when
/// `CreateBot`'s `worktree` gives no `path` and config `worktrees_dir` is unset: one folder per
/// repository ([`repository_folder`]), one per bot in it. Not under the repository's `.git`:
/// Claude Code 2.1.328 asks before every edit under a `.git` folder, even in `acceptEdits`
/// (docs/sessions.md); nor in the repository's own tree, where its `git status` and every search
/// of the user's would see them.
pub const FOLDER: &str = "worktrees";

/// The folder of one repository's worktrees under [`FOLDER`], from the repository's top folder
/// `top` (absolute): its name as [`name_part`] keeps it, then `-` and 8 hexadecimal digits of a
/// hash of the whole path (FNV-1a, 32 bits: the same on every run and build), so that two
/// repositories of one name get two folders: `/home/me/src/app` → `app-1c9b0f2e`.
pub fn repository_folder(top: &str) -> String {
    let name = top
        .rsplit('/')
        .find(|s| !s.is_empty())
        .unwrap_or("repository");
    let mut hash: u32 = 0x811c_9dc5;
    for b in top.bytes() {
        hash ^= u32::from(b);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    format!("{}-{hash:08x}", name_part(name))
}

/// The worktree, among those `git worktree list --porcelain` printed (`listed`), that holds
/// `path` (absolute) or is it, compared by whole path components; `None` when none does.
pub fn enclosing(listed: &str, path: &str) -> Option<String> {
    let inside = |outer: &str| {
        let outer = outer.trim_end_matches('/');
        path == outer
            || path
                .strip_prefix(outer)
                .is_some_and(|rest| rest.starts_with('/'))
    };
    listed
        .lines()
        .filter_map(|l| l.strip_prefix("worktree "))
        .find(|w| inside(w))
        .map(str::to_owned)
}

/// The most entries of each list a refusal names; the rest are counted.
pub const MAX_NAMED: usize = 10;

/// A bot's name as one element of a branch name or folder name: ASCII letters, digits, `-`,
/// `_` and `.` kept, every other character `-`, no leading `.` or `-`, no `..`, no trailing
/// `.lock` or `.`; `bot` when nothing is left. Git's own rules (`git check-ref-format`) still
/// judge the branch the shell makes of it.
pub fn name_part(bot_name: &str) -> String {
    let mut s: String = bot_name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '-'
            }
        })
        .collect();
    while s.contains("..") {
        s = s.replace("..", ".");
    }
    let s = s.trim_start_matches(['.', '-']);
    let mut s = s.trim_end_matches('.').to_owned();
    if s.ends_with(".lock") {
        s.truncate(s.len() - ".lock".len());
    }
    let s = s.trim_end_matches(['.', '-']);
    if s.is_empty() {
        "bot".to_owned()
    } else {
        s.to_owned()
    }
}

/// The most names tried for a worktree botvisor names (`name`, `name-2`, … `name-100`).
pub const MAX_SUFFIX: usize = 100;

/// The `n`th name tried for `part`: `part` itself, then `part-2`, `part-3`, ….
pub fn suffixed(part: &str, n: usize) -> String {
    if n <= 1 {
        part.to_owned()
    } else {
        format!("{part}-{n}")
    }
}

/// The branch a bot named `bot_name` gets when `worktree` names none: `botvisor/<name>`
/// ([`name_part`]).
pub fn default_branch(bot_name: &str) -> String {
    format!("{BRANCH_PREFIX}{}", name_part(bot_name))
}

/// What git showed of a worktree before its removal.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Findings {
    /// The worktree's folder is gone (removed by hand): nothing uncommitted can be in it.
    pub folder_gone: bool,
    /// `git status --porcelain` lines: changes not committed, untracked files included.
    pub uncommitted: Vec<String>,
    /// The branch's commits on no other local branch (`git log --oneline <branch> --not
    /// --branches`, the branch excluded): abbreviated hash and subject.
    pub unmerged: Vec<String>,
}

/// What `Delete` with `remove_worktree` does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Removal {
    /// Remove the worktree (`git worktree remove`, with `--force` when `force` and something
    /// is uncommitted; `git worktree prune` when its folder is gone), and delete its branch when
    /// `delete_branch` (only a branch whose commits are all on another branch).
    Remove {
        /// Pass `--force` to `git worktree remove`.
        force: bool,
        /// Delete the branch after.
        delete_branch: bool,
    },
    /// Refused: `Busy` with this text; nothing changes.
    Refuse(String),
}

fn listed(what: &[String]) -> String {
    let mut shown: Vec<String> = what.iter().take(MAX_NAMED).cloned().collect();
    if what.len() > MAX_NAMED {
        shown.push(format!("and {} more", what.len() - MAX_NAMED));
    }
    shown.join("; ")
}

/// Whether a worktree with these findings may be removed. Without `force`, only one that is
/// clean (nothing uncommitted) and fully merged (no commit of its branch on no other branch);
/// the refusal says what is uncommitted or unmerged, in git's own lines. With `force` it goes
/// whatever it holds, but an unmerged branch is kept (its commits stay reachable by name);
/// a merged branch is deleted either way.
pub fn removal(path: &str, branch: &str, found: &Findings, force: bool) -> Removal {
    let dirty = !found.folder_gone && !found.uncommitted.is_empty();
    let unmerged = !found.unmerged.is_empty();
    if force || (!dirty && !unmerged) {
        return Removal::Remove {
            force: force && dirty,
            delete_branch: !unmerged,
        };
    }
    let mut why = Vec::new();
    if dirty {
        why.push(format!(
            "the worktree {path} has {} uncommitted change(s) (git status: {})",
            found.uncommitted.len(),
            listed(&found.uncommitted)
        ));
    }
    if unmerged {
        why.push(format!(
            "branch {branch} has {} commit(s) on no other branch (git log: {})",
            found.unmerged.len(),
            listed(&found.unmerged)
        ));
    }
    Removal::Refuse(format!(
        "{}; commit and merge them, or delete with `force: true` to remove the worktree anyway \
         (an unmerged branch is kept); nothing changed",
        why.join(", and ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bot_name_becomes_a_branch_git_takes() {
        assert_eq!(default_branch("repo"), "botvisor/repo");
        assert_eq!(default_branch("my repo 2"), "botvisor/my-repo-2");
        assert_eq!(default_branch("..x..lock"), "botvisor/x");
        assert_eq!(default_branch("é"), "botvisor/bot");
        assert_eq!(default_branch("a.lock"), "botvisor/a");
        assert_eq!(name_part("-.-"), "bot");
        assert_eq!(suffixed("repo", 1), "repo");
        assert_eq!(suffixed("repo", 3), "repo-3");
    }

    #[test]
    fn a_clean_merged_worktree_goes_with_its_branch() {
        let clean = Findings::default();
        assert_eq!(
            removal("/w", "b", &clean, false),
            Removal::Remove {
                force: false,
                delete_branch: true
            }
        );
    }

    #[test]
    fn a_dirty_or_unmerged_worktree_is_refused_naming_what_holds_it() {
        let dirty = Findings {
            uncommitted: vec!["?? new.txt".into()],
            ..Default::default()
        };
        let Removal::Refuse(why) = removal("/w", "b", &dirty, false) else {
            panic!()
        };
        assert!(why.contains("?? new.txt") && why.contains("/w"), "{why}");
        let unmerged = Findings {
            unmerged: vec!["abc123 add a".into()],
            ..Default::default()
        };
        let Removal::Refuse(why) = removal("/w", "b", &unmerged, false) else {
            panic!()
        };
        assert!(
            why.contains("abc123 add a") && why.contains("branch b"),
            "{why}"
        );
        let many = Findings {
            uncommitted: (0..15).map(|i| format!("?? f{i}")).collect(),
            ..Default::default()
        };
        let Removal::Refuse(why) = removal("/w", "b", &many, false) else {
            panic!()
        };
        assert!(why.contains("and 5 more") && !why.contains("f12"), "{why}");
    }

    #[test]
    fn force_removes_but_keeps_an_unmerged_branch() {
        let both = Findings {
            uncommitted: vec![" M a".into()],
            unmerged: vec!["abc x".into()],
            ..Default::default()
        };
        assert_eq!(
            removal("/w", "b", &both, true),
            Removal::Remove {
                force: true,
                delete_branch: false
            }
        );
    }

    #[test]
    fn a_folder_removed_by_hand_holds_nothing_uncommitted() {
        let gone = Findings {
            folder_gone: true,
            uncommitted: vec!["ignored".into()],
            ..Default::default()
        };
        assert_eq!(
            removal("/w", "b", &gone, false),
            Removal::Remove {
                force: false,
                delete_branch: true
            }
        );
    }

    #[test]
    fn a_repositorys_worktrees_folder_is_its_name_and_a_stable_hash_of_its_path() {
        let a = repository_folder("/home/me/src/app");
        assert!(a.starts_with("app-") && a.len() == "app-".len() + 8, "{a}");
        assert_eq!(
            a,
            repository_folder("/home/me/src/app"),
            "the same every time"
        );
        assert_ne!(
            a,
            repository_folder("/home/me/other/app"),
            "two repositories, two folders"
        );
        assert!(
            repository_folder("/x/a b.lock").starts_with("a-b"),
            "a name git takes"
        );
    }

    #[test]
    fn a_path_inside_a_worktree_is_found_by_whole_components() {
        let listed = "worktree /r/repo\nHEAD abc\nbranch refs/heads/main\n\n\
                      worktree /s/trees/a\nHEAD def\n";
        assert_eq!(
            enclosing(listed, "/r/repo/sub/wt").as_deref(),
            Some("/r/repo")
        );
        assert_eq!(
            enclosing(listed, "/s/trees/a").as_deref(),
            Some("/s/trees/a")
        );
        assert_eq!(
            enclosing(listed, "/s/trees/a/inner").as_deref(),
            Some("/s/trees/a")
        );
        assert_eq!(
            enclosing(listed, "/s/trees/ab"),
            None,
            "a sibling that shares a prefix"
        );
        assert_eq!(enclosing(listed, "/r/repository"), None);
    }
}
