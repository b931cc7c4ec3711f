//! A schedule as a launchd job on macOS (issue 49): a property list whose
//! `StartCalendarInterval` is the schedule's calendar (launchd's own rules then apply: a fire
//! missed while the machine slept comes once at wake-up, coalesced), running `botvisorctl fire
//! <id>`. Built from the normalized calendar systemd prints (`[weekdays] year-month-day
//! hour:minute:second`); launchd has no seconds and no years, so a calendar that needs either,
//! or a time zone, is refused in words.

use std::collections::BTreeSet;
use std::path::Path;

/// The most entries a `StartCalendarInterval` array is given (one per combination of the
/// calendar's listed values).
pub const MAX_INTERVALS: usize = 1000;

/// The job's label: `org.botvisor.schedule.<id>`.
pub fn label(id: &str) -> String {
    format!("org.botvisor.schedule.{id}")
}

/// One field's values: `None` for every value (`*`), else the set. `a`, `a,b`, `a..b`,
/// `a/step` and `a..b/step` within `lo..=hi`.
fn field(text: &str, lo: u32, hi: u32) -> Result<Option<BTreeSet<u32>>, String> {
    if text == "*" {
        return Ok(None);
    }
    let mut out = BTreeSet::new();
    for part in text.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((r, s)) => (r, s.parse::<u32>().map_err(|_| format!("step `{s}`"))?),
            None => (part, 0),
        };
        let (a, b) = match range.split_once("..") {
            Some((a, b)) => (num(a)?, num(b)?),
            None if range == "*" => (lo, hi),
            None if step > 0 => (num(range)?, hi),
            None => (num(range)?, num(range)?),
        };
        if a < lo || b > hi || a > b {
            return Err(format!("`{part}` is outside {lo}..{hi}"));
        }
        let mut v = a;
        while v <= b {
            out.insert(v);
            if step == 0 {
                v += 1;
            } else {
                v += step;
            }
        }
    }
    Ok(Some(out))
}

fn num(s: &str) -> Result<u32, String> {
    s.parse().map_err(|_| format!("`{s}` is not a number"))
}

fn weekdays(text: &str) -> Result<Option<BTreeSet<u32>>, String> {
    const DAYS: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
    let day = |d: &str| {
        DAYS.iter()
            .position(|x| *x == d)
            .map(|i| i as u32)
            .ok_or_else(|| format!("`{d}` is not a weekday"))
    };
    let mut out = BTreeSet::new();
    for part in text.split(',') {
        match part.split_once("..") {
            Some((a, b)) => {
                let (a, b) = (day(a)?, day(b)?);
                // Sat..Mon wraps over Sunday.
                let mut d = a;
                loop {
                    out.insert(d);
                    if d == b {
                        break;
                    }
                    d = (d + 1) % 7;
                }
            }
            None => {
                out.insert(day(part)?);
            }
        }
    }
    Ok(Some(out))
}

/// The `StartCalendarInterval` entries of `normalized` (systemd's normalized form), each a list
/// of (key, value). Errors: in words, what launchd cannot say (seconds, years, a time zone, a
/// repetition of days, too many combinations).
pub fn intervals(normalized: &str) -> Result<Vec<Vec<(&'static str, u32)>>, String> {
    let words: Vec<&str> = normalized.split_whitespace().collect();
    let (days, date, time) = match words.as_slice() {
        [date, time] => ("*", *date, *time),
        [days, date, time] => (*days, *date, *time),
        _ => {
            return Err(format!(
                "`{normalized}` has a time zone or a form launchd cannot say"
            ));
        }
    };
    let [year, month, day] = date.splitn(3, '-').collect::<Vec<_>>()[..] else {
        return Err(format!("`{date}` is not year-month-day"));
    };
    let [hour, minute, second] = time.splitn(3, ':').collect::<Vec<_>>()[..] else {
        return Err(format!("`{time}` is not hour:minute:second"));
    };
    if year != "*" {
        return Err("launchd has no years: a calendar for given years cannot be said".into());
    }
    if second != "00" {
        return Err(
            "launchd fires on whole minutes: a calendar with seconds cannot be said".into(),
        );
    }
    if day.contains('~') {
        return Err("launchd cannot count days from a month's end (`~`)".into());
    }
    let fields: [(&'static str, Option<BTreeSet<u32>>); 5] = [
        ("Month", field(month, 1, 12)?),
        ("Day", field(day, 1, 31)?),
        ("Weekday", if days == "*" { None } else { weekdays(days)? }),
        ("Hour", field(hour, 0, 23)?),
        ("Minute", field(minute, 0, 59)?),
    ];
    let mut out: Vec<Vec<(&'static str, u32)>> = vec![Vec::new()];
    for (key, values) in fields {
        let Some(values) = values else { continue };
        let mut next = Vec::new();
        for entry in &out {
            for v in &values {
                let mut e = entry.clone();
                e.push((key, *v));
                next.push(e);
            }
        }
        if next.len() > MAX_INTERVALS {
            return Err(format!(
                "`{normalized}` needs more than {MAX_INTERVALS} launchd calendar entries"
            ));
        }
        out = next;
    }
    Ok(out)
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The launchd job of schedule `id` whose calendar is `normalized`, running `ctl fire <id>`:
/// an XML property list (`~/Library/LaunchAgents/<label>.plist`). Errors: [`intervals`]'.
pub fn plist(id: &str, normalized: &str, ctl: &Path) -> Result<String, String> {
    let entries = intervals(normalized)?;
    let mut x = String::from(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
         <!DOCTYPE plist PUBLIC \"-//Apple//DTD PLIST 1.0//EN\" \
         \"http://www.apple.com/DTDs/PropertyList-1.0.dtd\">\n\
         <plist version=\"1.0\">\n<dict>\n",
    );
    x.push_str(&format!(
        "  <key>Label</key>\n  <string>{}</string>\n",
        xml_escape(&label(id))
    ));
    x.push_str("  <key>ProgramArguments</key>\n  <array>\n");
    for arg in [&ctl.display().to_string(), "fire", id] {
        x.push_str(&format!("    <string>{}</string>\n", xml_escape(arg)));
    }
    x.push_str("  </array>\n  <key>StartCalendarInterval</key>\n  <array>\n");
    for entry in entries {
        x.push_str("    <dict>\n");
        for (key, v) in entry {
            x.push_str(&format!(
                "      <key>{key}</key>\n      <integer>{v}</integer>\n"
            ));
        }
        x.push_str("    </dict>\n");
    }
    x.push_str("  </array>\n</dict>\n</plist>\n");
    Ok(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Weekdays at nine: five entries, Monday to Friday; every quarter hour: four; daily at
    /// midnight: one with hour and minute.
    #[test]
    fn calendars_become_launchd_intervals() {
        let week = intervals("Mon..Fri *-*-* 09:00:00").unwrap();
        assert_eq!(week.len(), 5);
        assert_eq!(week[0], vec![("Weekday", 1), ("Hour", 9), ("Minute", 0)]);
        assert_eq!(intervals("*-*-* *:00/15:00").unwrap().len(), 4);
        assert_eq!(
            intervals("*-*-* 00:00:00").unwrap(),
            vec![vec![("Hour", 0), ("Minute", 0)]]
        );
        assert_eq!(intervals("Sat..Mon *-*-* 10:30:00").unwrap().len(), 3);
    }

    /// What launchd cannot say is refused in words.
    #[test]
    fn what_launchd_cannot_say_is_refused() {
        assert!(
            intervals("*-*-* *:*:00/10")
                .unwrap_err()
                .contains("seconds")
        );
        assert!(
            intervals("2027-*-* 09:00:00")
                .unwrap_err()
                .contains("years")
        );
        assert!(intervals("*-*-* 09:00:00 Europe/Paris").is_err());
        assert!(intervals("*-*-* *:*:00").unwrap().len() == 1);
    }

    /// What Apple's property list DTD (`PropertyList-1.0.dtd`) allows, checked on `node`: a
    /// `dict` holds `key` and value by turns, an `array` values, and a value is one of the
    /// DTD's object elements; `integer` and `string` hold text only. Errors name the place.
    fn check_object(node: roxmltree::Node<'_, '_>, at: &str) -> Result<(), String> {
        const OBJECTS: [&str; 9] = [
            "array", "data", "date", "dict", "real", "integer", "string", "true", "false",
        ];
        let name = node.tag_name().name();
        if !OBJECTS.contains(&name) {
            return Err(format!("{at}: <{name}> is no plist object"));
        }
        let children: Vec<_> = node.children().filter(|n| n.is_element()).collect();
        match name {
            "dict" => {
                if children.len() % 2 != 0 {
                    return Err(format!("{at}: a dict's keys and values do not pair"));
                }
                for pair in children.chunks(2) {
                    if pair[0].tag_name().name() != "key" {
                        return Err(format!(
                            "{at}: <{}> where a key goes",
                            pair[0].tag_name().name()
                        ));
                    }
                    let key = pair[0].text().unwrap_or_default();
                    check_object(pair[1], &format!("{at}/{key}"))?;
                }
            }
            "array" => {
                for (i, c) in children.iter().enumerate() {
                    check_object(*c, &format!("{at}[{i}]"))?;
                }
            }
            "integer" => {
                node.text()
                    .unwrap_or_default()
                    .parse::<i64>()
                    .map_err(|_| format!("{at}: an integer that is not one"))?;
            }
            _ if !children.is_empty() => return Err(format!("{at}: <{name}> holds elements")),
            _ => {}
        }
        Ok(())
    }

    /// launchd's keys for a calendar job: `Label` a string, `ProgramArguments` an array of
    /// strings, `StartCalendarInterval` an array of dicts whose keys are launchd's five and
    /// whose values are integers in range (launchd.plist(5)).
    fn check_launchd(x: &str) -> Result<(), String> {
        let doc = roxmltree::Document::parse_with_options(
            x,
            roxmltree::ParsingOptions {
                allow_dtd: true,
                ..Default::default()
            },
        )
        .map_err(|e| e.to_string())?;
        let plist = doc.root_element();
        if plist.tag_name().name() != "plist" || plist.attribute("version") != Some("1.0") {
            return Err("the root is not <plist version=\"1.0\">".into());
        }
        let top: Vec<_> = plist.children().filter(|n| n.is_element()).collect();
        if top.len() != 1 || top[0].tag_name().name() != "dict" {
            return Err("a plist holds one dict".into());
        }
        check_object(top[0], "")?;
        let items: Vec<_> = top[0].children().filter(|n| n.is_element()).collect();
        let mut seen = std::collections::BTreeMap::new();
        for pair in items.chunks(2) {
            seen.insert(pair[0].text().unwrap_or_default().to_owned(), pair[1]);
        }
        let kind = |k: &str| seen.get(k).map(|n| n.tag_name().name().to_owned());
        if kind("Label").as_deref() != Some("string") {
            return Err("Label is not a string".into());
        }
        let args = seen.get("ProgramArguments").ok_or("no ProgramArguments")?;
        if args.tag_name().name() != "array"
            || args
                .children()
                .filter(|n| n.is_element())
                .any(|n| n.tag_name().name() != "string")
        {
            return Err("ProgramArguments is not an array of strings".into());
        }
        let cal = seen
            .get("StartCalendarInterval")
            .ok_or("no StartCalendarInterval")?;
        for d in cal.children().filter(|n| n.is_element()) {
            let kv: Vec<_> = d.children().filter(|n| n.is_element()).collect();
            for pair in kv.chunks(2) {
                let key = pair[0].text().unwrap_or_default();
                let range = match key {
                    "Minute" => 0..=59,
                    "Hour" => 0..=23,
                    "Day" => 1..=31,
                    "Weekday" => 0..=7,
                    "Month" => 1..=12,
                    other => return Err(format!("StartCalendarInterval has no key {other}")),
                };
                let v: i64 = pair[1].text().unwrap_or_default().parse().unwrap_or(-1);
                if pair[1].tag_name().name() != "integer" || !range.contains(&v) {
                    return Err(format!("{key} {v} is not an integer in {range:?}"));
                }
            }
        }
        Ok(())
    }

    /// Issue 49: the jobs of three schedules are property lists launchd takes, by the DTD's
    /// rules and launchd's keys; a broken one is caught.
    #[test]
    fn three_schedules_make_plists_the_dtd_and_launchd_take() {
        let ctl = Path::new("/Users/me/.local/bin/botvisorctl");
        for (id, cal) in [
            ("a1", "Mon..Fri *-*-* 09:00:00"),
            ("b2", "*-*-* *:00/15:00"),
            ("c3", "*-*-01 06:30:00"),
        ] {
            let x = plist(id, cal, ctl).unwrap();
            check_launchd(&x).unwrap_or_else(|e| panic!("{cal}: {e}\n{x}"));
        }
        let broken = plist("a1", "*-*-* 09:00:00", ctl)
            .unwrap()
            .replace("<integer>9</integer>", "<integer>24</integer>");
        assert!(check_launchd(&broken).is_err());
        let unpaired =
            plist("a1", "*-*-* 09:00:00", ctl)
                .unwrap()
                .replacen("<key>Label</key>", "", 1);
        assert!(check_launchd(&unpaired).is_err());
    }

    /// The property list names the job, the command and the calendar, escaped.
    #[test]
    fn the_plist_holds_the_job() {
        let x = plist("a1", "Mon *-*-* 09:00:00", Path::new("/x/<b>/botvisorctl")).unwrap();
        assert!(x.contains("<string>org.botvisor.schedule.a1</string>"));
        assert!(x.contains("<string>/x/&lt;b&gt;/botvisorctl</string>"));
        assert!(x.contains("<key>Weekday</key>\n      <integer>1</integer>"));
    }
}
