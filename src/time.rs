//! Wall-clock time stamps in the one format botvisor stores and publishes.

use std::time::SystemTime;

/// The current time as RFC 3339 in UTC with millisecond precision, for example
/// `2026-11-29T19:36:20.123Z`. This is the `time` field of every chat item.
pub fn now_rfc3339() -> String {
    humantime::format_rfc3339_millis(SystemTime::now()).to_string()
}

/// Now, in Unix seconds (0 on a clock set before 1970).
pub fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// `at` (Unix seconds) as RFC 3339 in UTC to the second, `2027-01-01T09:00:00Z`; a negative
/// `at` as the epoch.
pub fn rfc3339(at: i64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(at.max(0) as u64);
    humantime::format_rfc3339_seconds(t).to_string()
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

/// The UTC day of `at` as `YYYY-MM-DD`: the day a bot's spend is counted on (the spend ledger,
/// `store::spend`).
pub fn utc_day(at: SystemTime) -> String {
    let stamp = humantime::format_rfc3339_seconds(at).to_string();
    stamp.get(..10).unwrap_or(&stamp).to_owned()
}

/// Checks that `text` is a day as `YYYY-MM-DD` (a date that exists: `2028-02-29`, not
/// `2027-02-29` or `2027-1-5`). The error says what is wrong, in words to follow `since`
/// (`ListSpend`'s option, `botvisorctl cost --since`).
pub fn check_day(text: &str) -> Result<(), String> {
    let bad = || {
        format!(
            "must be a day as YYYY-MM-DD (UTC), for example `2026-05-01`; got `{}`",
            crate::text::escape(&text.chars().take(40).collect::<String>(), false)
        )
    };
    let b = text.as_bytes();
    let digits = |r: std::ops::Range<usize>| b[r].iter().all(u8::is_ascii_digit);
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' || !digits(0..4) || !digits(5..7) {
        return Err(bad());
    }
    if !digits(8..10) {
        return Err(bad());
    }
    let number = |r: std::ops::Range<usize>| text[r].parse::<u32>().unwrap_or(0);
    let (year, month, day) = (number(0..4), number(5..7), number(8..10));
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let days = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return Err(bad()),
    };
    if day == 0 || day > days {
        return Err(bad());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_day_is_the_utc_date() {
        let at = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_800_000_000);
        assert_eq!(utc_day(at), "2027-01-15");
        // 23:59:59 UTC is still that day, whatever the local time zone.
        let at = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(86_400 - 1);
        assert_eq!(utc_day(at), "1970-01-01");
    }

    #[test]
    fn only_days_that_exist_are_days() {
        for day in ["2026-05-01", "2028-02-29", "2000-02-29", "1999-12-31"] {
            assert_eq!(check_day(day), Ok(()), "{day}");
        }
        for day in [
            "",
            "2026-5-01",
            "2026-05-1",
            "2026/05/01",
            "2026-05-01T00:00",
            "2027-02-29",
            "1900-02-29",
            "2026-13-01",
            "2026-00-10",
            "2026-04-31",
            "2026-04-00",
            "２０２６-05-01",
            "+026-05-01",
        ] {
            let e = check_day(day).unwrap_err();
            assert!(e.contains("YYYY-MM-DD"), "{day}: {e}");
        }
    }
}
