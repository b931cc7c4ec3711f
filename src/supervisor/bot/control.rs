//! Control requests to the running CLI (design rule 6) and their answers, decided in
//! [`crate::supervisor::core::control`].

use super::Actor;
use crate::config::Config;
use std::time::Instant;

impl Actor {
    /// Writes `lines` to the current process's stdin, each with its newline; whether all went
    /// (false when there is no process or its stdin is closed).
    pub(super) fn write_lines(&self, lines: Vec<String>) -> bool {
        let Some(stdin) = self.proc.as_ref().and_then(|p| p.stdin.as_ref()) else {
            return lines.is_empty();
        };
        lines.into_iter().all(|line| {
            let mut bytes = line.into_bytes();
            bytes.push(b'\n');
            stdin.send(bytes).is_ok()
        })
    }

    /// Now plus a watchdog's bound in seconds (`None` for 0: never).
    pub(super) fn deadline(&self, seconds: f64) -> Option<Instant> {
        Config::watchdog(seconds).map(|d| Instant::now() + d)
    }
}
