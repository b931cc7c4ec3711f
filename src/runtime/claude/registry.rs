//! Claude Code's registry of live sessions, and the process outside botvisor that holds a
//! conversation (issue 25, design rule 7).
//!
//! Every Claude Code process, in a terminal or run by a program, keeps a file
//! `$CLAUDE_CONFIG_DIR/sessions/<pid>.json` while it runs: `{"pid", "sessionId", "cwd",
//! "procStart", "kind", "entrypoint", "tmux"?, "status", …}`, where `procStart` is the process's
//! start time as field 22 of `/proc/<pid>/stat` (clock ticks since boot) and `entrypoint` is
//! `cli` for the interactive terminal and `sdk-cli` for print mode (2.1.328;
//! `facts::claude::a_live_session_is_in_the_registry_and_a_second_resume_is_not_refused`). A
//! second process resuming a conversation one holds is not refused: both write its transcript.
//! A process killed with SIGKILL leaves its file behind, so an entry counts only while its pid
//! names the process that started then.

use std::path::Path;

use serde_json::Value;

/// The longest command line a holder is named by, in characters.
const COMMAND_CHARS: usize = 300;

/// An entry of the registry that names a conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The process.
    pub pid: u32,
    /// Its start time in clock ticks since boot (`procStart`).
    pub start_time: u64,
    /// What it is, in words ("Claude Code in a terminal", …).
    pub what: String,
}

/// The entries of the registry file texts `files` (one JSON object each) that name `session_id`.
/// Files that are not such objects are stepped over.
pub fn entries_for<'a>(files: impl Iterator<Item = &'a str>, session_id: &str) -> Vec<Entry> {
    files
        .filter_map(|text| crate::runtime::json_line::parse(text.as_bytes()).ok())
        .filter(|v| v.get("sessionId").and_then(Value::as_str) == Some(session_id))
        .filter_map(|v| {
            let pid = v.get("pid").and_then(Value::as_u64)?;
            let start_time = match v.get("procStart")? {
                Value::String(s) => s.parse().ok()?,
                Value::Number(n) => n.as_u64()?,
                _ => return None,
            };
            Some(Entry {
                pid: u32::try_from(pid).ok()?,
                start_time,
                what: what(&v),
            })
        })
        .collect()
}

/// What a registry entry says the process is.
fn what(v: &Value) -> String {
    let text = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or_default();
    let mut what = match (text("entrypoint"), text("kind")) {
        (_, kind) if kind.contains("bg") || kind.contains("background") => {
            "Claude Code's background agent".to_owned()
        }
        ("cli", _) => "Claude Code in a terminal".to_owned(),
        ("sdk-cli" | "sdk-ts" | "sdk-py", _) => "Claude Code run by another program".to_owned(),
        _ => "another Claude Code process".to_owned(),
    };
    if !text("tmux").is_empty() {
        what.push_str(&format!(" (tmux {})", text("tmux")));
    }
    what
}

/// Every live process, other than botvisor's own, that holds the conversation `session_id` in
/// the registry of the configuration folder `config_dir`, in the directory's order;
/// `bot_marker` is the `BOTVISOR_BOT_ID` entry of this bot's processes, which are never another
/// holder.
#[cfg(target_os = "linux")]
pub fn holders(
    config_dir: &Path,
    session_id: &str,
    bot_marker: Option<&str>,
) -> Vec<crate::runtime::Holder> {
    use crate::process::identity::{ProcessIdentity, boot_id, stat};
    let Ok(dir) = std::fs::read_dir(config_dir.join("sessions")) else {
        return Vec::new();
    };
    // Asked before every message to a running agent: a file named for a pid that no longer
    // runs (a process killed leaves its file) is not read.
    let texts: Vec<String> = dir
        .filter_map(Result::ok)
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.strip_suffix(".json").is_some_and(|pid| {
                pid.parse::<u32>()
                    .map_or(true, |pid| Path::new(&format!("/proc/{pid}")).exists())
            })
        })
        .filter_map(|e| std::fs::read_to_string(e.path()).ok())
        .collect();
    let own = std::process::id();
    entries_for(texts.iter().map(String::as_str), session_id)
        .into_iter()
        .filter(|e| e.pid != own)
        .filter(|e| stat(e.pid).is_ok_and(|s| s.start_time == e.start_time && !s.is_dead()))
        .filter(|e| bot_marker.is_none_or(|m| !crate::process::tree::has_marker(e.pid, m)))
        .map(|e| crate::runtime::Holder {
            identity: ProcessIdentity {
                pid: e.pid,
                start_time: e.start_time,
                boot_id: boot_id().to_owned(),
            },
            command: command_line(e.pid),
            what: e.what,
        })
        .collect()
}

/// The live processes that hold the conversation (not known here).
#[cfg(not(target_os = "linux"))]
pub fn holders(
    _config_dir: &Path,
    _session_id: &str,
    _bot_marker: Option<&str>,
) -> Vec<crate::runtime::Holder> {
    Vec::new()
}

/// The command line of `pid`, its arguments joined by spaces, cut to [`COMMAND_CHARS`].
#[cfg(target_os = "linux")]
fn command_line(pid: u32) -> String {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let text = raw
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(String::from_utf8_lossy)
        .collect::<Vec<_>>()
        .join(" ");
    text.chars().take(COMMAND_CHARS).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_name_their_session_process_and_kind() {
        let files = [
            r#"{"pid":9357,"sessionId":"s","procStart":"287907","kind":"interactive","entrypoint":"cli","tmux":"hx:@0.%0"}"#,
            r#"{"pid":14784,"sessionId":"s","procStart":"290259","kind":"interactive","entrypoint":"sdk-cli"}"#,
            r#"{"pid":1,"sessionId":"other","procStart":"1"}"#,
            r#"{"pid":"x","sessionId":"s","procStart":"1"}"#,
            r#"{"pid":2,"sessionId":"s"}"#,
            "not json",
        ];
        let got = entries_for(files.into_iter(), "s");
        assert_eq!(
            got,
            [
                Entry {
                    pid: 9357,
                    start_time: 287907,
                    what: "Claude Code in a terminal (tmux hx:@0.%0)".into()
                },
                Entry {
                    pid: 14784,
                    start_time: 290259,
                    what: "Claude Code run by another program".into()
                }
            ]
        );
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn only_a_live_process_that_started_then_and_is_not_the_bots_holds() {
        let dir = tempfile::tempdir().unwrap();
        let sessions = dir.path().join("sessions");
        std::fs::create_dir(&sessions).unwrap();
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .env(crate::process::tree::BOT_MARKER, "mine")
            .spawn()
            .unwrap();
        let pid = child.id();
        // Between fork and exec the child is still this test: wait for `sleep` itself.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !command_line(pid).starts_with("sleep") {
            assert!(std::time::Instant::now() < deadline, "sleep never ran");
            std::thread::yield_now();
        }
        let started = crate::process::identity::stat(pid).unwrap().start_time;
        let write = |start: u64| {
            std::fs::write(
                sessions.join(format!("{pid}.json")),
                format!(
                    r#"{{"pid":{pid},"sessionId":"s","procStart":"{start}","entrypoint":"cli"}}"#
                ),
            )
            .unwrap()
        };
        write(started);
        let held = holders(dir.path(), "s", None).pop().expect("held");
        assert_eq!(held.identity.pid, pid);
        assert!(held.command.starts_with("sleep 30"), "{}", held.command);
        assert!(
            holders(dir.path(), "s", Some("mine")).is_empty(),
            "the bot's own"
        );
        assert!(holders(dir.path(), "other", None).is_empty());
        write(started + 1);
        assert!(
            holders(dir.path(), "s", None).is_empty(),
            "the pid names another process"
        );
        write(started);
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(holders(dir.path(), "s", None).is_empty(), "gone");
    }
}
