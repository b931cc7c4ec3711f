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
            // SAFETY: kill(2) on our own test processes.
            unsafe { libc::kill(id.pid as i32, libc::SIGKILL) };
        }
        child.wait().unwrap();
    }
}
