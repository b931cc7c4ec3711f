//! Descendants of a process, found by targeted `/proc` reads (never a scan of the whole process
//! table): `/proc/<pid>/task/<tid>/children` lists the children each thread started.

use std::collections::{HashSet, VecDeque};

use super::identity::{ProcessIdentity, identify};

/// The environment variable every agent process is started with; descendants inherit it, which
/// attributes orphans adopted by the daemon (as subreaper) to their bot.
pub const BOT_MARKER: &str = "BOTVISOR_BOT_ID";

/// Upper bound on the processes one walk visits.
pub const MAX_WALK: usize = 4096;

/// The children of `pid` (all its threads), or empty when it is gone or unreadable.
#[cfg(target_os = "linux")]
pub fn children(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for task in tasks.filter_map(Result::ok) {
        if let Ok(text) = std::fs::read_to_string(task.path().join("children")) {
            out.extend(
                text.split_whitespace()
                    .filter_map(|p| p.parse::<u32>().ok()),
            );
        }
    }
    out
}

/// The children of `pid` (not available here).
#[cfg(not(target_os = "linux"))]
pub fn children(_pid: u32) -> Vec<u32> {
    Vec::new()
}

/// Every live descendant of `root` (not `root` itself), by identity, breadth first.
pub fn descendants(root: u32) -> Vec<ProcessIdentity> {
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    let mut queue: VecDeque<u32> = children(root).into();
    while let Some(pid) = queue.pop_front() {
        if out.len() >= MAX_WALK || !seen.insert(pid) {
            continue;
        }
        if let Ok(id) = identify(pid) {
            queue.extend(children(pid));
            out.push(id);
        }
    }
    out
}

/// The bot id process `pid` carries as [`BOT_MARKER`] in its environment (the environment it
/// was started with, `/proc/<pid>/environ`), or `None`: no marker, the process is gone, or its
/// environment is not readable (another user's).
#[cfg(target_os = "linux")]
pub fn marker_of(pid: u32) -> Option<String> {
    let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    let prefix = format!("{BOT_MARKER}=");
    env.split(|b| *b == 0)
        .find_map(|kv| kv.strip_prefix(prefix.as_bytes()))
        .and_then(|v| std::str::from_utf8(v).ok())
        .filter(|v| !v.is_empty())
        .map(str::to_owned)
}

/// The bot id a process carries (not available here).
#[cfg(not(target_os = "linux"))]
pub fn marker_of(_pid: u32) -> Option<String> {
    None
}

/// Whether `ancestor` is `pid` itself or one of its ancestors (parents followed through
/// `/proc/<pid>/stat`, at most 64 steps; a process adopted by a subreaper after its parent
/// died is no longer below its old ancestors). `ancestor` 0 is nobody's.
pub fn descends_from(pid: u32, ancestor: u32) -> bool {
    if ancestor == 0 {
        return false;
    }
    let mut at = pid;
    for _ in 0..64 {
        if at == ancestor {
            return true;
        }
        match super::identity::stat(at) {
            Ok(s) if s.ppid > 1 && s.ppid != at => at = s.ppid,
            _ => return false,
        }
    }
    false
}

/// `pid` and its ancestors, nearest first, as [`descends_from`] follows them (parents through
/// `/proc/<pid>/stat`, at most 64, init left out); empty for pid 0.
pub fn ancestors(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let mut at = pid;
    while at != 0 && out.len() < 64 {
        out.push(at);
        match super::identity::stat(at) {
            Ok(s) if s.ppid > 1 && s.ppid != at => at = s.ppid,
            _ => break,
        }
    }
    out
}

/// Whether process `pid` carries `BOTVISOR_BOT_ID=<bot_id>` in its environment.
#[cfg(target_os = "linux")]
pub fn has_marker(pid: u32, bot_id: &str) -> bool {
    let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else {
        return false;
    };
    let want = format!("{BOT_MARKER}={bot_id}");
    env.split(|b| *b == 0).any(|kv| kv == want.as_bytes())
}

/// Whether process `pid` carries the bot marker (not available here).
#[cfg(not(target_os = "linux"))]
pub fn has_marker(_pid: u32, _bot_id: &str) -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_a_grandchild_and_its_marker() {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 30 & wait"])
            .env(BOT_MARKER, "testbot")
            .spawn()
            .unwrap();
        // The grandchild appears once sh has forked; wait for it (bounded, generous under load).
        let mut found = Vec::new();
        for _ in 0..1000 {
            found = descendants(child.id());
            if !found.is_empty() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(!found.is_empty(), "the grandchild was not found");
        for id in &found {
            assert!(has_marker(id.pid, "testbot"), "{id:?}");
            assert!(!has_marker(id.pid, "otherbot"));
            assert_eq!(marker_of(id.pid).as_deref(), Some("testbot"));
            assert!(descends_from(id.pid, child.id()));
            assert!(descends_from(id.pid, id.pid));
            assert!(!descends_from(child.id(), id.pid));
            assert!(!descends_from(id.pid, 0));
            let up = ancestors(id.pid);
            assert_eq!(up[..2], [id.pid, child.id()], "nearest first");
            assert!(
                up.contains(&std::process::id()),
                "the test is an ancestor: {up:?}"
            );
            assert!(ancestors(0).is_empty());
            // SAFETY: kill(2) on our own test processes.
            unsafe { libc::kill(id.pid as i32, libc::SIGKILL) };
        }
        child.wait().unwrap();
    }
}
