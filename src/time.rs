//! Wall-clock time stamps in the one format botvisor stores and publishes.

use std::time::SystemTime;

/// The current time as RFC 3339 in UTC with millisecond precision, for example
/// `2026-11-29T19:36:20.123Z`. This is the `time` field of every chat item.
pub fn now_rfc3339() -> String {
    humantime::format_rfc3339_millis(SystemTime::now()).to_string()
}
