//! Lines to the running CLI's stdin: messages, control requests (design rule 6, decided in
//! [`crate::supervisor::core::control`]) and answers.

use super::Actor;

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
}
