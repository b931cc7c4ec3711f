//! Reading a CLI's JSON-lines conversation file (Claude Code's transcript, Codex's rollout):
//! whether it holds a record of some shape, written at or after a moment.

use std::path::Path;
use std::time::{Duration, SystemTime};

use serde_json::Value;

/// How much earlier than `since` a record's `timestamp` may be and still count: the CLI's clock
/// reading and ours are taken at slightly different moments and rounded.
pub const CLOCK_SLACK: Duration = Duration::from_secs(1);

/// Whether a line of the file at `path`, newest first, is a JSON object for which `is_it` holds
/// and whose RFC 3339 `timestamp` is at or after `since` (less [`CLOCK_SLACK`]). An unreadable
/// file or line counts as no.
pub fn holds_since(path: &Path, since: SystemTime, is_it: impl Fn(&Value) -> bool) -> bool {
    let Ok(content) = std::fs::read_to_string(path) else {
        return false;
    };
    content.lines().rev().any(|line| {
        let Ok(v) = super::json_line::parse(line.as_bytes()) else {
            return false;
        };
        is_it(&v) && written_since(&v, since)
    })
}

/// Whether the record `v`'s RFC 3339 `timestamp` is at or after `since`, less [`CLOCK_SLACK`].
pub fn written_since(v: &Value, since: SystemTime) -> bool {
    v.get("timestamp")
        .and_then(Value::as_str)
        .and_then(|t| humantime::parse_rfc3339(t).ok())
        .is_some_and(|t| t >= since - CLOCK_SLACK)
}
