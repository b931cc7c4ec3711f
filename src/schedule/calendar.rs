//! Calendar expressions as the user manager reads them: every question is asked of systemd's own
//! parser, `systemd-analyze calendar` (systemd's `systemd.time(7)` syntax: `Mon..Fri 09:00`,
//! `*:0/15`, `daily`, with an optional time zone at the end), so that what botvisor accepts is
//! exactly what the timer it writes will do. Times are Unix seconds. The program runs in
//! botvisord's own time zone, which is the user manager's (botvisord is one of its units): a
//! calendar without a zone is local time, as the timer reads it; each time is read from the
//! `(in UTC)` line systemd-analyze prints under it outside UTC. (A hostile trial in
//! `Asia/Kolkata` saw a `09:00` timer fire at 09:00 local while botvisord, then reading it in
//! UTC, found nothing due and sent nothing.)

use std::path::PathBuf;
use std::process::Command;

/// The longest calendar expression taken, in bytes.
pub const MAX_CALENDAR_BYTES: usize = 256;

/// How many due times one run of `systemd-analyze` is asked for.
const ITERATIONS: usize = 64;

/// Why a calendar expression is not taken, or could not be asked about.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CalendarError {
    /// systemd's parser refused it (its words).
    #[error("`{expr}` is not a calendar expression systemd takes: {why}")]
    Invalid {
        /// The expression, escaped.
        expr: String,
        /// What `systemd-analyze` said.
        why: String,
    },
    /// It parses, and never comes again.
    #[error("`{0}` never comes again: a schedule would never fire")]
    Never(String),
    /// It comes more often than once a second (`*:*:0/0.01`): a timer keeps to the second
    /// (`AccuracySec=1s`), and a schedule fires at most once a second.
    #[error("`{0}` comes more often than once a second; a schedule fires at most once a second")]
    TooOften(String),
    /// systemd's timestamp parser refused it (its words).
    #[error("`{expr}` is not a timestamp systemd reads: {why}")]
    InvalidTimestamp {
        /// The text, escaped.
        expr: String,
        /// What `systemd-analyze timestamp` said.
        why: String,
    },
    /// No `systemd-analyze` to ask (no systemd on this machine).
    #[error("no systemd-analyze to read calendar expressions with: {0}")]
    NoParser(String),
}

/// A calendar expression systemd took.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Calendar {
    /// Its normalized form (`Mon..Fri *-*-* 09:00:00`), which the timer unit is written with.
    pub normalized: String,
    /// Its next due time after now, in Unix seconds.
    pub next: i64,
}

fn program() -> PathBuf {
    std::env::var_os("BOTVISOR_SYSTEMD_ANALYZE")
        .map(PathBuf::from)
        .unwrap_or_else(|| "systemd-analyze".into())
}

/// What `systemd-analyze calendar` prints for `expr` (after `base`, Unix seconds, when given),
/// asked for `iterations` due times. Errors: the expression's (`Invalid`), or no program.
fn analyze(expr: &str, base: Option<i64>, iterations: usize) -> Result<String, CalendarError> {
    let shown = crate::text::escape(expr, false).into_owned();
    if expr.len() > MAX_CALENDAR_BYTES {
        return Err(CalendarError::Invalid {
            expr: shown.chars().take(64).collect::<String>() + "…",
            why: format!("longer than {MAX_CALENDAR_BYTES} bytes"),
        });
    }
    if expr.trim().is_empty() || expr.chars().any(char::is_control) {
        return Err(CalendarError::Invalid {
            expr: shown,
            why: "empty, or holds a control character".into(),
        });
    }
    let mut cmd = Command::new(program());
    cmd.env("LC_ALL", "C")
        .env("SYSTEMD_COLORS", "0")
        .arg("calendar")
        .arg(format!("--iterations={iterations}"));
    if let Some(b) = base {
        cmd.arg(format!("--base-time=@{b}"));
    }
    cmd.arg("--").arg(expr);
    let out =
        run(cmd).map_err(|e| CalendarError::NoParser(format!("{}: {e}", program().display())))?;
    if !out.status.success() {
        let why = String::from_utf8_lossy(&out.stderr).trim().to_owned();
        let why = why
            .rsplit_once(": ")
            .map(|(_, w)| w.to_owned())
            .unwrap_or(why);
        return Err(CalendarError::Invalid { expr: shown, why });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The moment `expr` says, in Unix seconds, as systemd's own parser reads a timestamp
/// (`systemd-analyze timestamp`, `systemd.time(7)` "Parsing Timestamps": `2027-01-01`,
/// `2026-12-31 18:00`, `tomorrow`, `+2w`, a time zone at the end), in botvisord's time zone as
/// a calendar is. Errors: `Invalid` (systemd refuses it, or it is empty, too long or holds a
/// control character), `NoParser`.
pub fn timestamp(expr: &str) -> Result<i64, CalendarError> {
    let shown = crate::text::escape(expr, false).into_owned();
    if expr.len() > MAX_CALENDAR_BYTES
        || expr.trim().is_empty()
        || expr.chars().any(char::is_control)
    {
        return Err(CalendarError::InvalidTimestamp {
            expr: shown.chars().take(64).collect(),
            why: format!(
                "empty, longer than {MAX_CALENDAR_BYTES} bytes, or holds a control character"
            ),
        });
    }
    let mut cmd = Command::new(program());
    cmd.env("LC_ALL", "C")
        .env("SYSTEMD_COLORS", "0")
        .args(["timestamp", "--", expr]);
    let out =
        run(cmd).map_err(|e| CalendarError::NoParser(format!("{}: {e}", program().display())))?;
    let printed = String::from_utf8_lossy(&out.stdout);
    let seconds = printed.lines().find_map(|l| {
        let v = l
            .trim()
            .strip_prefix("UNIX seconds:")?
            .trim()
            .strip_prefix('@')?;
        v.split('.').next()?.parse::<i64>().ok()
    });
    if let Some(s) = seconds.filter(|_| out.status.success()) {
        return Ok(s);
    }
    // systemd 252's timestamp parser takes no zone name (`2027-01-01 09:00 Europe/Paris`); its
    // calendar parser does, and a calendar that comes once is that moment.
    if let Ok(once) = analyze(expr, None, 2)
        && let (_, times) = parse_output(&once)
        && let [Some(t)] | [Some(t), None] = times[..]
    {
        return Ok(t);
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let first = stderr.lines().next().unwrap_or_default().trim();
    let why = first.rsplit_once(": ").map_or(first, |(_, w)| w).to_owned();
    Err(CalendarError::InvalidTimestamp { expr: shown, why })
}

/// How long one run of `systemd-analyze` may take (it answers in milliseconds).
const RUN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Runs `cmd` to its end, its output read, within [`RUN_TIMEOUT`] (killed past it): registered
/// with botvisord's subreaper meanwhile, which would otherwise reap it before it is waited for.
fn run(mut cmd: Command) -> std::io::Result<std::process::Output> {
    use std::io::Read;
    use std::process::Stdio;
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let (mut child, pid) = crate::process::subreaper::spawn_protected(|| {
        let child = cmd.spawn()?;
        let pid = child.id();
        Ok((child, pid))
    })?;
    let deadline = std::time::Instant::now() + RUN_TIMEOUT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Ok(status),
            Ok(None) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                break Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("did not answer within {} s", RUN_TIMEOUT.as_secs()),
                ));
            }
            Err(e) => break Err(e),
        }
    };
    crate::process::subreaper::unprotect(pid);
    let status = status?;
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    if let Some(mut o) = child.stdout.take() {
        o.read_to_end(&mut stdout)?;
    }
    if let Some(mut e) = child.stderr.take() {
        e.read_to_end(&mut stderr)?;
    }
    Ok(std::process::Output {
        status,
        stdout,
        stderr,
    })
}

/// The normalized form and the due times (Unix seconds) in `systemd-analyze calendar`'s output;
/// `None` for `Next elapse: never`.
pub fn parse_output(out: &str) -> (Option<String>, Vec<Option<i64>>) {
    let mut normalized = None;
    let mut times = Vec::new();
    for line in out.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let (key, value) = (key.trim(), value.trim());
        if key == "Normalized form" {
            normalized = Some(value.to_owned());
        } else if key == "Next elapse" || key.starts_with("Iter. #") {
            times.push(parse_time(value));
        } else if key == "(in UTC)"
            && let Some(last) = times.last_mut()
        {
            *last = parse_time(value);
        }
    }
    (normalized, times)
}

/// `Mon 2026-12-07 09:00:00 UTC` (a time as `systemd-analyze` prints it in UTC) in Unix seconds;
/// `None` for `never`, a time in another zone, or anything else.
fn parse_time(value: &str) -> Option<i64> {
    let mut words = value.split_whitespace();
    let (_, date, time) = (words.next()?, words.next()?, words.next()?);
    if words.next() != Some("UTC") {
        return None;
    }
    let stamp = humantime::parse_rfc3339_weak(&format!("{date} {time}")).ok()?;
    let secs = stamp.duration_since(std::time::UNIX_EPOCH).ok()?.as_secs();
    i64::try_from(secs).ok()
}

/// How many due times [`check`] asks for to judge a schedule's pace.
const SEEN_FOR_PACE: usize = 4;

/// Checks `expr` with systemd's parser: its normalized form and next due time. Errors:
/// [`CalendarError`] (refused, never comes, more often than once a second, or no parser).
pub fn check(expr: &str) -> Result<Calendar, CalendarError> {
    let (normalized, times) = parse_output(&analyze(expr, None, SEEN_FOR_PACE)?);
    let normalized = normalized.unwrap_or_else(|| expr.to_owned());
    let too_often = || CalendarError::TooOften(crate::text::escape(expr, false).into_owned());
    let due: Vec<i64> = times.iter().map_while(|t| *t).collect();
    // Due times are printed to the second. Two alike are within a second; four that span
    // less than three seconds come more often than once a second, wherever the second's
    // boundaries fall (two of them alone could straddle one: a CI run saw `*:*:0/0.01` pass).
    if due.windows(2).any(|w| w[0] == w[1])
        || (due.len() == SEEN_FOR_PACE
            && due[SEEN_FOR_PACE - 1] - due[0] < SEEN_FOR_PACE as i64 - 1)
    {
        return Err(too_often());
    }
    match times[..] {
        [Some(next), ..] => Ok(Calendar { normalized, next }),
        _ => Err(CalendarError::Never(
            crate::text::escape(expr, false).into_owned(),
        )),
    }
}

/// The due times of `expr` after `base` (Unix seconds, strictly after), at most `n`, in order.
pub fn after(expr: &str, base: i64, n: usize) -> Result<Vec<i64>, CalendarError> {
    let (_, times) = parse_output(&analyze(expr, Some(base), n.max(1))?);
    Ok(times.into_iter().map_while(|t| t).collect())
}

/// The latest due time of `expr` at or before `now` (Unix seconds), looking back at most to
/// `since` (exclusive); `None` when there is none in that span. Asks for the due times after
/// `now - d` with `d` doubling from 1 s (one run per doubling, [`ITERATIONS`] due times each),
/// so a schedule every few seconds and one every year take a few runs each.
pub fn latest_due(expr: &str, now: i64, since: i64) -> Result<Option<i64>, CalendarError> {
    let mut back: i64 = 1;
    loop {
        let base = (now - back).max(since);
        let times = after(expr, base, ITERATIONS)?;
        let mut latest = None;
        for t in &times {
            if *t <= now {
                latest = Some(*t);
            }
        }
        match latest {
            // Every due time asked for was at or before now: more may follow before now.
            Some(t) if times.len() == ITERATIONS && times.iter().all(|x| *x <= now) => {
                return latest_after(expr, t, now).map(Some);
            }
            Some(t) => return Ok(Some(t)),
            None if base <= since => return Ok(None),
            None => back = back.saturating_mul(2),
        }
    }
}

/// From the due time `t` at or before `now`, the last one at or before `now`.
fn latest_after(expr: &str, mut t: i64, now: i64) -> Result<i64, CalendarError> {
    loop {
        let times = after(expr, t, ITERATIONS)?;
        let before: Vec<i64> = times.iter().copied().filter(|x| *x <= now).collect();
        match before.last() {
            // No step forward (due times within one second, which `check` refuses): the
            // latest is this one.
            Some(last) if *last == t => return Ok(t),
            Some(last) if before.len() == ITERATIONS => t = *last,
            Some(last) => return Ok(*last),
            None => return Ok(t),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEEN: &str = "  Original form: *:*:0/10
Normalized form: *-*-* *:*:00/10
    Next elapse: Mon 2026-12-07 02:35:50 UTC
       From now: 164ms left
       Iter. #2: Mon 2026-12-07 02:36:00 UTC
       From now: 10s left
";

    /// What systemd 252 printed with `TZ=Asia/Kolkata`: each time in UTC on the line under it.
    const SEEN_IN_KOLKATA: &str = "  Original form: 09:00
Normalized form: *-*-* 09:00:00
    Next elapse: Mon 2026-12-07 09:00:00 IST
       (in UTC): Mon 2026-12-07 03:30:00 UTC
       From now: 14min ago
       Iter. #2: Tue 2026-12-08 09:00:00 IST
       (in UTC): Tue 2026-12-08 03:30:00 UTC
       From now: 23h left
";

    /// What systemd 252 printed is read as the normalized form and two due times, in UTC and
    /// in another zone (from the `(in UTC)` lines).
    #[test]
    fn the_output_of_systemd_analyze_is_read() {
        let (normalized, times) = parse_output(SEEN);
        assert_eq!(normalized.as_deref(), Some("*-*-* *:*:00/10"));
        assert_eq!(times, vec![Some(1_796_610_950), Some(1_796_610_960)]);
        let (_, local) = parse_output(SEEN_IN_KOLKATA);
        // 2026-12-07 03:30 UTC, and a day later.
        assert_eq!(local, vec![Some(1_796_614_200), Some(1_796_700_600)]);
        let (_, never) =
            parse_output("Normalized form: 2020-01-01 00:00:00\n    Next elapse: never\n");
        assert_eq!(never, vec![None]);
    }

    /// Skipped (said) where no systemd-analyze runs; CI installs systemd.
    fn analyzer() -> bool {
        let ok = Command::new(program()).arg("--version").output().is_ok();
        if !ok {
            eprintln!("skipped: no systemd-analyze on this machine");
        }
        ok
    }

    /// systemd's parser decides: a bad expression is refused in its words, one in the past
    /// never comes, a good one is normalized.
    #[test]
    fn the_managers_parser_decides() {
        if !analyzer() {
            return;
        }
        let ok = check("Mon..Fri 9:00").unwrap();
        assert_eq!(ok.normalized, "Mon..Fri *-*-* 09:00:00");
        assert!(matches!(check("bogus"), Err(CalendarError::Invalid { .. })));
        assert!(matches!(
            check("--help"),
            Err(CalendarError::Invalid { .. })
        ));
        assert!(matches!(
            check("9:00\n--x"),
            Err(CalendarError::Invalid { .. })
        ));
        assert!(matches!(check("2020-01-01"), Err(CalendarError::Never(_))));
        // More often than once a second: refused (a hostile trial saw `*:*:0/0.01` loop the
        // search for the latest due time for ever).
        // Wherever a second's boundary falls (a CI run saw two due times straddle one), many
        // times over.
        for _ in 0..50 {
            assert!(matches!(
                check("*:*:0/0.01"),
                Err(CalendarError::TooOften(_))
            ));
        }
        assert!(matches!(
            check("*:*:0/0.6"),
            Err(CalendarError::TooOften(_))
        ));
        assert!(check("*:*:*").is_ok(), "once a second is not too often");
        let latest = latest_due("*-*-* *:*:00/0.010000", 1_796_626_840, 1_796_626_800).unwrap();
        assert!(
            latest.is_some_and(|t| (1_796_626_839..=1_796_626_840).contains(&t)),
            "{latest:?}"
        );
    }

    /// An end date is read by systemd's timestamp parser: a date with a zone is that moment; a
    /// bad one is refused in its words; a relative one is from now.
    #[test]
    fn an_end_is_a_timestamp_systemd_reads() {
        if !analyzer() {
            return;
        }
        assert_eq!(timestamp("2027-01-01 09:00 UTC").unwrap(), 1_798_794_000);
        assert!(matches!(
            timestamp("bogus"),
            Err(CalendarError::InvalidTimestamp { .. })
        ));
        assert!(matches!(
            timestamp(""),
            Err(CalendarError::InvalidTimestamp { .. })
        ));
        assert!(matches!(
            timestamp("--help"),
            Err(CalendarError::InvalidTimestamp { .. })
        ));
        // A zone name, which systemd 252's timestamp parser does not take: read as a calendar
        // that comes once.
        assert_eq!(
            timestamp("2027-01-01 09:00 Europe/Paris").unwrap(),
            1_798_790_400
        );
        let in_a_day = timestamp("+1d").unwrap() - crate::time::unix_now();
        assert!((86_390..=86_410).contains(&in_a_day), "{in_a_day}");
    }

    /// A calendar with no zone is the local time of the zone systemd-analyze runs in (the user
    /// manager's, for botvisord): `09:00` in Kolkata is 03:30 UTC.
    #[test]
    fn a_calendar_without_a_zone_is_local_time() {
        if !analyzer() {
            return;
        }
        let mut cmd = Command::new(program());
        cmd.env("TZ", "Asia/Kolkata").env("LC_ALL", "C").args([
            "calendar",
            "--iterations=1",
            "--base-time=@1796601600",
            "--",
            "09:00",
        ]);
        let out = run(cmd).unwrap();
        let (_, times) = parse_output(&String::from_utf8_lossy(&out.stdout));
        assert_eq!(times, vec![Some(1_796_614_200)]);
    }

    /// The latest due time at or before a moment: on a slot, between slots, after a long gap,
    /// and none before the first.
    #[test]
    fn the_latest_due_time_is_found() {
        if !analyzer() {
            return;
        }
        // 2026-12-07 00:00:00 UTC.
        let day = 1_796_601_600;
        assert_eq!(latest_due("*:*:0/10", day + 25, 0).unwrap(), Some(day + 20));
        assert_eq!(latest_due("*:*:0/10", day + 20, 0).unwrap(), Some(day + 20));
        assert_eq!(latest_due("*:*:0/10", day + 20, day + 20).unwrap(), None);
        assert_eq!(
            latest_due("*-*-* 09:00", day + 3 * 86_400 + 3_600, 0).unwrap(),
            Some(day + 2 * 86_400 + 9 * 3_600)
        );
        // Every second for a day: more due times than one run asks for.
        assert_eq!(
            latest_due("*:*:*", day + 1_000, day).unwrap(),
            Some(day + 1_000)
        );
    }
}
