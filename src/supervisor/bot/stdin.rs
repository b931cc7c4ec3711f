//! Lines to the running CLI's stdin, through its writer task: messages, control requests
//! (design rule 6, decided in `crate::supervisor::core::control`) and answers.

use super::Actor;

impl Actor {
    /// Writes `lines` to the current process's stdin, each with its newline; whether all went
    /// (false when there is no process or its stdin is closed).
    pub(super) fn write_lines(&self, lines: Vec<String>) -> bool {
        self.to_stdin(lines, false)
    }

    /// Writes the lines of a user message, as [`Actor::write_lines`]; once the last is written
    /// whole, the message's delivery is recorded whole.
    pub(super) fn write_message(&self, lines: Vec<String>) -> bool {
        self.to_stdin(lines, true)
    }

    fn to_stdin(&self, lines: Vec<String>, message: bool) -> bool {
        let Some(stdin) = self.proc.as_ref().and_then(|p| p.stdin.as_ref()) else {
            return lines.is_empty();
        };
        let last = lines.len().saturating_sub(1);
        lines.into_iter().enumerate().all(|(i, line)| {
            let mut bytes = line.into_bytes();
            bytes.push(b'\n');
            let piece = super::ToStdin {
                bytes,
                ends_message: message && i == last,
            };
            stdin.send(piece).is_ok()
        })
    }
}
