//! Control requests to the running CLI (design rule 6) and their answers, decided in
//! [`crate::supervisor::core::control`].

use super::Actor;
use crate::config::Config;
use crate::runtime::ControlRequest;
use crate::supervisor::core::control::Controls;
use std::time::Instant;

impl Actor {
    /// Sends a control request to the running process, if there is one that can take it.
    pub(super) fn send_control(&mut self, request: ControlRequest) -> bool {
        if self.core.process.as_ref().is_none_or(|p| p.run.stopping) {
            return false;
        }
        let Some(proc) = self.proc.as_mut().filter(|p| p.stdin.is_some()) else {
            return false;
        };
        let Some(sent) = proc.protocol.control(&request) else {
            return false;
        };
        if !self.write_lines(sent.lines) {
            return false;
        }
        let request_id = sent.request_id;
        if Controls::watched(&request) {
            let deadline =
                Config::watchdog(self.shared.config.control_timeout_s).map(|d| Instant::now() + d);
            self.core.watch.control_sent(&request_id, deadline);
        }
        if let Some(p) = self.core.process.as_mut() {
            p.controls.sent(request_id, request);
        }
        true
    }

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
