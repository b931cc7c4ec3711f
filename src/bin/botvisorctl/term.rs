//! The terminal of `send`: lines of output, text as it streams, and one yes/no question at a
//! time, redrawn below whatever else is printed while it is open.
//!
//! Lines typed at the terminal are read by one thread for the life of the command; a line is an
//! answer only while a question is open (lines typed before it are dropped), so a question that
//! another client answered first goes away without waiting for Enter.

use std::io::Write;

use tokio::sync::mpsc;

use super::show::{ASK, DIM, paint};

/// An open question: the request it is about and its words.
struct Question {
    request_id: String,
    text: String,
}

/// Output of one `send` in readable form.
pub struct Term {
    /// Whether questions are asked (stdin and stderr are terminals).
    pub interactive: bool,
    /// Assistant text streamed on the current line, not yet ended by a newline.
    streaming: bool,
    question: Option<Question>,
    lines: Option<mpsc::UnboundedReceiver<Option<String>>>,
}

/// What the person said to the open question.
pub enum Said {
    /// The line typed (trimmed), for this request.
    Answer(String, String),
    /// The terminal's input ended (Ctrl-D): the question is left open.
    Eof(String),
}

impl Term {
    /// A terminal; `interactive` when questions may be asked.
    pub fn new(interactive: bool) -> Term {
        Term {
            interactive,
            streaming: false,
            question: None,
            lines: None,
        }
    }

    fn clear_question(&self) {
        if let Some(q) = &self.question {
            // Back to the start of the question's first screen line (a long question wraps),
            // and clear to the end of the screen: terminal controls, not colours, so written
            // past anstream (which drops escapes under NO_COLOR).
            let width = terminal_size::terminal_size_of(std::io::stderr())
                .map(|(w, _)| w.0)
                .or_else(super::show::terminal_width);
            let up = width.map_or(0, |cols| screen_rows(&q.text, cols).saturating_sub(1));
            if up > 0 {
                eprint!("\x1b[{up}A");
            }
            eprint!("\r\x1b[J");
        }
    }

    fn redraw_question(&self) {
        if let Some(q) = &self.question {
            anstream::eprint!("{}", q.text);
            let _ = std::io::stderr().flush();
        }
    }

    fn end_stream(&mut self) {
        if self.streaming {
            outln!();
            self.streaming = false;
        }
    }

    /// Prints a whole line on stdout.
    pub fn line(&mut self, text: &str) {
        self.clear_question();
        self.end_stream();
        outln!("{text}");
        let _ = std::io::stdout().flush();
        self.redraw_question();
    }

    /// Prints a note on stderr.
    pub fn note(&mut self, text: &str) {
        self.clear_question();
        self.end_stream();
        anstream::eprintln!("{text}");
        self.redraw_question();
    }

    /// Prints streamed assistant text; held while a question is open (the finished message
    /// follows as a whole line).
    pub fn stream(&mut self, text: &str) -> bool {
        if self.question.is_some() {
            return false;
        }
        // An agent's text: nothing in it may steer the terminal.
        out!("{}", super::show::safe_text(text));
        let _ = std::io::stdout().flush();
        self.streaming = true;
        true
    }

    /// Whether text streamed since the last line; ends that line.
    pub fn take_streamed(&mut self) -> bool {
        let was = self.streaming;
        self.end_stream();
        was
    }

    /// The request of the open question.
    pub fn asking(&self) -> Option<&str> {
        self.question.as_ref().map(|q| q.request_id.as_str())
    }

    /// Opens a question about `request_id` (only one at a time; the caller queues the rest).
    pub fn ask(&mut self, request_id: &str, text: String) {
        let lines = self.lines.get_or_insert_with(spawn_reader);
        // A line typed before the question is not its answer.
        while lines.try_recv().is_ok() {}
        self.end_stream();
        self.question = Some(Question {
            request_id: request_id.to_owned(),
            text: paint(ASK, &text),
        });
        self.redraw_question();
    }

    /// Closes the open question without an answer from here, with `why` in its place.
    pub fn close(&mut self, why: &str) {
        self.clear_question();
        self.question = None;
        anstream::eprintln!("{}", paint(DIM, why));
    }

    /// Waits for the answer to the open question (never resolves while none is open).
    pub async fn said(&mut self) -> Said {
        let (Some(q), Some(lines)) = (&self.question, &mut self.lines) else {
            return std::future::pending().await;
        };
        let id = q.request_id.clone();
        let line = lines.recv().await.flatten();
        // The person's Enter ended the question's line.
        self.question = None;
        match line {
            Some(l) => Said::Answer(id, l.trim().to_owned()),
            None => {
                self.lines = None;
                Said::Eof(id)
            }
        }
    }
}

/// Reads stdin lines on a thread of its own for the life of the process; `None` at its end.
fn spawn_reader() -> mpsc::UnboundedReceiver<Option<String>> {
    let (tx, rx) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        let stdin = std::io::stdin();
        loop {
            let mut line = String::new();
            match stdin.read_line(&mut line) {
                Ok(0) | Err(_) => {
                    let _ = tx.send(None);
                    return;
                }
                Ok(_) => {
                    if tx.send(Some(line)).is_err() {
                        return;
                    }
                }
            }
        }
    });
    rx
}

/// How many screen rows `text` (one line or several, maybe with colour escapes) takes on a
/// terminal `cols` columns wide: each line's display width, escapes left out, divided by `cols`,
/// rounded up, at least 1, summed.
fn screen_rows(text: &str, cols: u16) -> usize {
    text.split('\n').map(|line| line_rows(line, cols)).sum()
}

/// [`screen_rows`] of one line.
fn line_rows(text: &str, cols: u16) -> usize {
    let mut width = 0usize;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            // An escape sequence: up to its final letter.
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
            continue;
        }
        width += unicode_width::UnicodeWidthChar::width(c).unwrap_or(0);
    }
    let cols = usize::from(cols.max(1));
    width.div_ceil(cols).max(1)
}

#[cfg(test)]
mod tests {
    use super::screen_rows;

    #[test]
    fn a_question_takes_as_many_rows_as_it_wraps_to() {
        assert_eq!(screen_rows("", 80), 1);
        assert_eq!(screen_rows("Allow Write x? [y/N] ", 80), 1);
        assert_eq!(screen_rows(&"a".repeat(80), 80), 1, "exactly one row");
        assert_eq!(screen_rows(&"a".repeat(81), 80), 2);
        assert_eq!(screen_rows(&"a".repeat(250), 50), 5);
        // Colour escapes take no room; wide characters two columns.
        assert_eq!(
            screen_rows(&format!("\x1b[33m{}\x1b[0m", "a".repeat(80)), 80),
            1
        );
        assert_eq!(screen_rows(&"字".repeat(41), 80), 2);
        // A question of several lines (the scopes an allow may have): each line's rows.
        assert_eq!(
            screen_rows(&format!("Allow x?\n  y  once\n{}", "a".repeat(81)), 80),
            4
        );
    }
}
