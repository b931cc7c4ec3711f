//! Wall-clock time stamps in the one format botvisor stores and publishes.

use std::time::SystemTime;

/// The current time as RFC 3339 in UTC with millisecond precision, for example
/// `2026-11-29T19:36:20.123Z`. This is the `time` field of every chat item.
pub fn now_rfc3339() -> String {
    humantime::format_rfc3339_millis(SystemTime::now()).to_string()
}

/// `at` (Unix seconds) in the local time zone as `HH:MM`, or `YYYY-MM-DD HH:MM` when it is more
/// than a day from now.
pub fn local_time(at: u64) -> String {
    let t = at as libc::time_t;
    // SAFETY: localtime_r writes only into `tm`, which lives on this stack.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    if unsafe { libc::localtime_r(&t, &mut tm) }.is_null() {
        return format!("{at} (Unix time)");
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    if at.abs_diff(now) > 24 * 3600 {
        format!(
            "{:04}-{:02}-{:02} {:02}:{:02}",
            tm.tm_year + 1900,
            tm.tm_mon + 1,
            tm.tm_mday,
            tm.tm_hour,
            tm.tm_min
        )
    } else {
        format!("{:02}:{:02}", tm.tm_hour, tm.tm_min)
    }
}
