//! The systemd user units of a schedule (issue 49): `botvisor-schedule-<id>.timer`, which the
//! user manager fires on the schedule's calendar, and `botvisor-schedule-<id>.service`, which
//! runs `botvisorctl fire <id>` (a D-Bus call that starts botvisord when it is not running).
//! They are real files under the user's unit folder (a transient timer is never written to disk
//! and its `Persistent=` stamp is lost at a reboot, systemd/systemd #13485), written again from
//! the database whenever they differ from what it says ([`write_all`]).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::Schedule;

/// The prefix of every schedule unit's name.
pub const PREFIX: &str = "botvisor-schedule-";

/// `botvisor-schedule-<id>.timer`.
pub fn timer_name(id: &str) -> String {
    format!("{PREFIX}{id}.timer")
}

/// `botvisor-schedule-<id>.service`.
pub fn service_name(id: &str) -> String {
    format!("{PREFIX}{id}.service")
}

/// The user's unit folder: `$XDG_CONFIG_HOME/systemd/user`, else `~/.config/systemd/user`
/// (where `systemctl --user` finds a user's own units); `None` without either variable.
pub fn unit_dir() -> Option<PathBuf> {
    let config = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))?;
    Some(config.join("systemd").join("user"))
}

/// Where the user manager keeps a persistent timer's stamp (`Persistent=true`: when it last
/// fired), `$XDG_DATA_HOME/systemd/timers/stamp-<timer>`, else under `~/.local/share`; `None`
/// without either variable. The manager leaves it when the unit's files go.
pub fn stamp_file(timer: &str) -> Option<PathBuf> {
    let data = std::env::var_os("XDG_DATA_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))?;
    Some(data.join("systemd/timers").join(format!("stamp-{timer}")))
}

/// A bot's name as a unit's `Description=`: control characters left out, `%` doubled (a
/// specifier otherwise), at most 200 characters, no `\\` at its end (which would join the next
/// line).
fn description(s: &str) -> String {
    s.chars()
        .filter(|c| !c.is_control())
        .take(200)
        .collect::<String>()
        .trim_end_matches('\\')
        .replace('%', "%%")
}

/// A calendar as `OnCalendar=` takes it: systemd's own normalized form, whole (control
/// characters, which systemd's parser refused anyway, left out).
fn calendar_value(s: &str) -> String {
    s.chars().filter(|c| !c.is_control()).collect()
}

/// The timer unit's text: `OnCalendar=` the normalized calendar, `Persistent=true` (a due time
/// missed while the machine was off or the user logged out fires once when it comes back),
/// `AccuracySec=1s` (systemd's default of a minute would move fires by up to a minute),
/// `RandomizedDelaySec=` when asked, wanted by `timers.target`.
pub fn timer_text(s: &Schedule, bot_name: &str) -> String {
    let mut t = format!(
        "# Written by botvisord from its database (schedule {id}); a change here is written over.\n\
         [Unit]\n\
         Description=botvisor schedule of bot {bot}: {shown}\n\
         \n\
         [Timer]\n\
         OnCalendar={cal}\n\
         Persistent=true\n\
         AccuracySec=1s\n",
        id = s.id,
        bot = description(bot_name),
        shown = description(&s.calendar),
        cal = calendar_value(&s.calendar),
    );
    if s.random_delay_s > 0 {
        t.push_str(&format!("RandomizedDelaySec={}\n", s.random_delay_s));
    }
    t.push_str(&format!(
        "Unit={}\n\n[Install]\nWantedBy=timers.target\n",
        service_name(&s.id)
    ));
    t
}

/// The service unit's text: one `botvisorctl fire <id>` (`ctl`, an absolute path) per fire,
/// with no start limit (systemd's default, 5 starts in 10 s, would refuse a schedule every
/// 2 s).
pub fn service_text(id: &str, ctl: &Path) -> String {
    format!(
        "# Written by botvisord from its database (schedule {id}); a change here is written over.\n\
         [Unit]\n\
         Description=botvisor schedule {id}: fire\n\
         StartLimitIntervalSec=0\n\
         \n\
         [Service]\n\
         Type=oneshot\n\
         ExecStart=\"{ctl}\" fire {id}\n",
        ctl = ctl
            .display()
            .to_string()
            .replace('\\', "\\\\")
            .replace('"', "\\\"")
            .replace('%', "%%"),
    )
}

/// What [`write_all`] changed, by unit name.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Written {
    /// Timers written (new or changed): each is to be enabled and (re)started.
    pub timers: Vec<String>,
    /// Timers removed (their schedule is gone or paused): each is to be stopped and disabled
    /// (their files are gone already).
    pub removed: Vec<String>,
    /// Whether any file changed (the manager is to reload).
    pub changed: bool,
}

/// Makes the schedule units in `dir` say what `wanted` says: each active schedule's timer and
/// service (with its bot's name, from `bot_name`), written where missing or different, and every
/// other `botvisor-schedule-*` unit removed. Errors: the file system's.
pub fn write_all(
    dir: &Path,
    wanted: &[(Schedule, String)],
    ctl: &Path,
) -> std::io::Result<Written> {
    std::fs::create_dir_all(dir)?;
    let mut out = Written::default();
    let mut keep = BTreeSet::new();
    for (s, bot_name) in wanted.iter().filter(|(s, _)| !s.paused) {
        let timer = timer_name(&s.id);
        let service = service_name(&s.id);
        let timer_changed = write_if_differs(&dir.join(&timer), &timer_text(s, bot_name))?;
        let service_changed = write_if_differs(&dir.join(&service), &service_text(&s.id, ctl))?;
        if timer_changed || service_changed {
            out.changed = true;
            out.timers.push(timer.clone());
        }
        keep.insert(timer);
        keep.insert(service);
    }
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.starts_with(PREFIX) || keep.contains(&name) {
            continue;
        }
        if !(name.ends_with(".timer") || name.ends_with(".service")) {
            continue;
        }
        // Only files (and links) botvisord may have written: a folder of that name is not
        // ours to remove, and no unit.
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        std::fs::remove_file(dir.join(&name)).map_err(|e| named(&dir.join(&name), e))?;
        out.changed = true;
        if name.ends_with(".timer") {
            out.removed.push(name);
        }
    }
    Ok(out)
}

/// Writes `text` to `path` (through a temporary file and a rename) unless it holds it already;
/// whether it wrote.
fn write_if_differs(path: &Path, text: &str) -> std::io::Result<bool> {
    if std::fs::read_to_string(path).is_ok_and(|now| now == text) {
        return Ok(false);
    }
    if path.is_dir() {
        return Err(named(
            path,
            std::io::Error::other("a folder stands where the unit goes; move it away"),
        ));
    }
    let tmp = path.with_extension("botvisor-tmp");
    std::fs::write(&tmp, text).map_err(|e| named(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| named(path, e))?;
    Ok(true)
}

/// `e`, saying the path it is about.
fn named(path: &Path, e: std::io::Error) -> std::io::Error {
    std::io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::WhenBusy;

    fn schedule(id: &str) -> Schedule {
        Schedule {
            id: id.into(),
            bot_id: "b".into(),
            calendar: "Mon..Fri *-*-* 09:00:00".into(),
            prompt: "check".into(),
            when_busy: WhenBusy::Queue,
            conversation: crate::schedule::Conversation::Same,
            until: 0,
            random_delay_s: 30,
            paused: false,
            last_due: 0,
            last_fired_at: 0,
            last_run_now: false,
        }
    }

    /// The timer says the calendar, persistence and the delay; a `%` in a bot's name is not a
    /// specifier.
    #[test]
    fn the_timer_says_the_calendar_and_persists() {
        let t = timer_text(&schedule("a1"), "50% b\\ot\nx\\");
        assert!(t.contains("OnCalendar=Mon..Fri *-*-* 09:00:00\n"), "{t}");
        assert!(t.contains("Persistent=true\n"));
        assert!(t.contains("RandomizedDelaySec=30\n"));
        assert!(t.contains("Unit=botvisor-schedule-a1.service\n"));
        assert!(
            t.contains("Description=botvisor schedule of bot 50%% b\\otx: "),
            "{t}"
        );
        // A calendar longer than a description is written whole (a hostile trial's 204 bytes
        // were cut at 200: minutes 53 to 59 never fired).
        let mut long = schedule("a2");
        let hours: Vec<String> = (0..24).map(|h| h.to_string()).collect();
        let minutes: Vec<String> = (0..60).map(|m| m.to_string()).collect();
        long.calendar = format!("*-*-* {}:{}:00", hours.join(","), minutes.join(","));
        assert!(long.calendar.len() > 200);
        let t = timer_text(&long, "demo");
        assert!(
            t.contains(&format!("OnCalendar={}\n", long.calendar)),
            "{t}"
        );
        let s = service_text("a1", Path::new("/opt/my bin/botvisorctl"));
        assert!(
            s.contains("ExecStart=\"/opt/my bin/botvisorctl\" fire a1\n"),
            "{s}"
        );
    }

    /// Units are written when missing or different, left when the same, and removed when their
    /// schedule is gone or paused; other files are not touched.
    #[test]
    fn units_follow_the_database() {
        let dir = tempfile::tempdir().unwrap();
        let ctl = Path::new("/usr/bin/botvisorctl");
        std::fs::write(dir.path().join("other.timer"), "x").unwrap();
        let a = (schedule("a1"), "demo".to_owned());
        let b = (schedule("b2"), "demo".to_owned());
        let w = write_all(dir.path(), &[a.clone(), b.clone()], ctl).unwrap();
        assert_eq!(w.timers.len(), 2);
        assert!(w.changed);
        let again = write_all(dir.path(), &[a.clone(), b.clone()], ctl).unwrap();
        assert_eq!(again, Written::default());
        std::fs::remove_file(dir.path().join(timer_name("a1"))).unwrap();
        let put_back = write_all(dir.path(), &[a.clone(), b.clone()], ctl).unwrap();
        assert_eq!(put_back.timers, vec![timer_name("a1")]);
        let mut paused = b.clone();
        paused.0.paused = true;
        let gone = write_all(dir.path(), &[a, paused], ctl).unwrap();
        assert_eq!(gone.removed, vec![timer_name("b2")]);
        assert!(!dir.path().join(service_name("b2")).exists());
        assert!(dir.path().join("other.timer").exists());
    }
}
