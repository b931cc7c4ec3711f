//! Process identity: a pid is only a name for a process while that process lives; the pair
//! (pid, start time) names it for good. botvisor never signals a pid whose identity no longer
//! matches what it recorded (design rule 9).
//!
//! Linux: the start time is field 22 of `/proc/<pid>/stat` (clock ticks since boot, proc(5)),
//! qualified by `/proc/sys/kernel/random/boot_id` so that records from before a reboot never
//! match. Elsewhere: sysinfo's start time in seconds since the epoch, with an empty boot id.

use std::sync::OnceLock;

/// Names one process for good.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ProcessIdentity {
    /// The pid.
    pub pid: u32,
    /// Start time: clock ticks since boot on Linux, seconds since the epoch elsewhere.
    pub start_time: u64,
    /// The boot the start time belongs to (Linux `boot_id`; empty elsewhere).
    pub boot_id: String,
}

/// What `/proc/<pid>/stat` says of a process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatInfo {
    /// The pid.
    pub pid: u32,
    /// The state letter (`R`, `S`, `D`, `Z`, …).
    pub state: char,
    /// The parent pid.
    pub ppid: u32,
    /// The process group id.
    pub pgid: u32,
    /// The session id.
    pub sid: u32,
    /// Start time in clock ticks since boot.
    pub start_time: u64,
}

impl StatInfo {
    /// A zombie (`Z`) or dead (`X`) process: it has exited and only waits to be reaped.
    pub fn is_dead(&self) -> bool {
        matches!(self.state, 'Z' | 'X')
    }
}

/// Why a process could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadError {
    /// No such process.
    Gone,
    /// It exists but could not be read (permissions, a malformed line).
    Unreadable(String),
}

/// Parses the text of `/proc/<pid>/stat`. The command name (field 2) may hold spaces and
/// parentheses, so fields are counted from the last `)`.
pub fn parse_stat(text: &str) -> Option<StatInfo> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let pid = text[..open].trim().parse().ok()?;
    let rest: Vec<&str> = text.get(close + 1..)?.split_whitespace().collect();
    // rest[0] is field 3 (state); field N is rest[N - 3].
    let field = |n: usize| rest.get(n - 3).copied();
    Some(StatInfo {
        pid,
        state: field(3)?.chars().next()?,
        ppid: field(4)?.parse().ok()?,
        pgid: field(5)?.parse().ok()?,
        sid: field(6)?.parse().ok()?,
        start_time: field(22)?.parse().ok()?,
    })
}

/// This boot's id (Linux), read once.
pub fn boot_id() -> &'static str {
    static BOOT: OnceLock<String> = OnceLock::new();
    BOOT.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .map(|s| s.trim().to_owned())
            .unwrap_or_default()
    })
}

/// Reads `/proc/<pid>/stat`.
#[cfg(target_os = "linux")]
pub fn stat(pid: u32) -> Result<StatInfo, ReadError> {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(text) => parse_stat(&text).ok_or_else(|| {
            // A process being torn down can show an empty file for a moment.
            if std::path::Path::new(&format!("/proc/{pid}")).exists() {
                ReadError::Unreadable(format!("malformed /proc/{pid}/stat: {text:?}"))
            } else {
                ReadError::Gone
            }
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(ReadError::Gone),
        // ESRCH shows up when the process vanishes mid-read.
        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Err(ReadError::Gone),
        Err(e) => Err(ReadError::Unreadable(e.to_string())),
    }
}

/// The identity of a live process.
#[cfg(target_os = "linux")]
pub fn identify(pid: u32) -> Result<ProcessIdentity, ReadError> {
    let s = stat(pid)?;
    if s.is_dead() {
        return Err(ReadError::Gone);
    }
    Ok(ProcessIdentity {
        pid,
        start_time: s.start_time,
        boot_id: boot_id().to_owned(),
    })
}

/// The identity of a live process (sysinfo; start time in seconds).
#[cfg(not(target_os = "linux"))]
pub fn identify(pid: u32) -> Result<ProcessIdentity, ReadError> {
    use sysinfo::{Pid, ProcessRefreshKind, ProcessesToUpdate, System};
    let mut sys = System::new();
    let p = Pid::from_u32(pid);
    sys.refresh_processes_specifics(
        ProcessesToUpdate::Some(&[p]),
        true,
        ProcessRefreshKind::nothing(),
    );
    match sys.process(p) {
        Some(proc_) if !matches!(proc_.status(), sysinfo::ProcessStatus::Zombie) => {
            Ok(ProcessIdentity {
                pid,
                start_time: proc_.start_time(),
                boot_id: String::new(),
            })
        }
        _ => Err(ReadError::Gone),
    }
}

/// Whether `id` still names a live process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Liveness {
    /// The same process is alive.
    Alive,
    /// It exited (or the pid now names another process).
    Gone,
    /// It could not be checked.
    Unknown(String),
}

/// Checks an identity against the process table now.
pub fn liveness(id: &ProcessIdentity) -> Liveness {
    if id.boot_id != boot_id() {
        return Liveness::Gone;
    }
    match identify(id.pid) {
        Ok(now) if now.start_time == id.start_time => Liveness::Alive,
        Ok(_) | Err(ReadError::Gone) => Liveness::Gone,
        Err(ReadError::Unreadable(e)) => Liveness::Unknown(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_with_spaces_and_parens() {
        let line =
            "4242 (we(ird) name) S 1 4242 4242 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 987654 0 0";
        let s = parse_stat(line).unwrap();
        assert_eq!(
            s,
            StatInfo {
                pid: 4242,
                state: 'S',
                ppid: 1,
                pgid: 4242,
                sid: 4242,
                start_time: 987654
            }
        );
        assert!(parse_stat("garbage").is_none());
        assert!(parse_stat("1 (x) S 1 2").is_none());
    }

    #[test]
    fn own_identity_is_alive_and_a_changed_start_time_is_not() {
        let me = identify(std::process::id()).unwrap();
        assert_eq!(liveness(&me), Liveness::Alive);
        let other = ProcessIdentity {
            start_time: me.start_time + 1,
            ..me.clone()
        };
        assert_eq!(liveness(&other), Liveness::Gone);
        let other_boot = ProcessIdentity {
            boot_id: "another-boot".into(),
            ..me
        };
        assert_eq!(liveness(&other_boot), Liveness::Gone);
    }
}
