//! Processes that carry a bot's marker ([`super::tree::BOT_MARKER`]), found by one scan of the
//! whole process table. Only for a daemon's start after a crash without cgroup containment: a
//! process a tool forked after the last snapshot, that escaped by a double fork and was adopted by
//! the crashed daemon, was never recorded and now descends from nothing the next daemon knows;
//! its inherited marker still names its bot. (With cgroups, the bot's cgroup holds it.)
//!
//! Cost: one read of `/proc/<pid>/environ` per process of the user (others' are unreadable and
//! skipped), tens of milliseconds at a few thousand processes, only at a start after a crash.

use std::collections::{BTreeMap, BTreeSet};

use super::identity::{ProcessIdentity, identify};
use super::tree::BOT_MARKER;

/// Every process whose environment names one of `bot_ids` as its bot, by bot id; never this
/// process.
#[cfg(target_os = "linux")]
pub fn marked(bot_ids: &BTreeSet<String>) -> BTreeMap<String, Vec<ProcessIdentity>> {
    let mut out: BTreeMap<String, Vec<ProcessIdentity>> = BTreeMap::new();
    if bot_ids.is_empty() {
        return out;
    }
    let own = std::process::id();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    let prefix = format!("{BOT_MARKER}=");
    for entry in dir.filter_map(Result::ok) {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == own {
            continue;
        }
        let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        let bot = env
            .split(|b| *b == 0)
            .filter_map(|kv| std::str::from_utf8(kv).ok())
            .find_map(|kv| kv.strip_prefix(prefix.as_str()));
        if let Some(bot) = bot.filter(|b| bot_ids.contains(*b))
            && let Ok(id) = identify(pid)
        {
            out.entry(bot.to_owned()).or_default().push(id);
        }
    }
    out
}

/// Every process that carries a bot's marker (not available here).
#[cfg(not(target_os = "linux"))]
pub fn marked(_bot_ids: &BTreeSet<String>) -> BTreeMap<String, Vec<ProcessIdentity>> {
    BTreeMap::new()
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn finds_a_marked_process_by_its_bot_and_nothing_of_another() {
        let bot = format!("marked-test-{}", std::process::id());
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .env(BOT_MARKER, &bot)
            .spawn()
            .unwrap();
        // Until it has exec'd, a child shows its parent's environment: wait for the marker.
        let wanted = BTreeSet::from([bot.clone()]);
        let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut found = marked(&wanted);
        while found.is_empty() && std::time::Instant::now() < until {
            std::thread::sleep(std::time::Duration::from_millis(5));
            found = marked(&wanted);
        }
        let other = marked(&BTreeSet::from(["no-such-bot".to_owned()]));
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(
            found
                .get(&bot)
                .map(|v| v.iter().map(|i| i.pid).collect::<Vec<_>>()),
            Some(vec![child.id()])
        );
        assert!(other.is_empty());
    }
}
