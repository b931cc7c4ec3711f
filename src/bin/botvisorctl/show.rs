//! How chat items and notes look in a terminal: words, colour (through `anstream`, which drops
//! it for pipes, files and `NO_COLOR`), and cuts by display width.

use anstyle::{AnsiColor, Style};
use serde_json::Value;
use unicode_width::UnicodeWidthChar;

/// Notes of botvisorctl itself, tool calls and results.
pub const DIM: Style = Style::new().dimmed();
/// Permission prompts.
pub const ASK: Style = Style::new()
    .fg_color(Some(anstyle::Color::Ansi(AnsiColor::Yellow)))
    .bold();
/// Errors.
pub const ERROR: Style = Style::new().fg_color(Some(anstyle::Color::Ansi(AnsiColor::Red)));
/// A warning (retries).
pub const WARN: Style = Style::new().fg_color(Some(anstyle::Color::Ansi(AnsiColor::Yellow)));
/// A good end.
pub const GOOD: Style = Style::new().fg_color(Some(anstyle::Color::Ansi(AnsiColor::Green)));
/// Bot names.
pub const NAME: Style = Style::new().bold();
/// The user's own messages.
pub const USER: Style = Style::new().fg_color(Some(anstyle::Color::Ansi(AnsiColor::Cyan)));

/// `text` in `style`.
pub fn paint(style: Style, text: &str) -> String {
    format!("{style}{text}{style:#}")
}

/// How much of a long text to show.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Detail {
    /// Messages whole; tool inputs and results cut at 200 columns.
    Full,
    /// Everything cut at this many columns, with its size and how to read it whole.
    Short(usize),
}

/// The longest beginning of `s` that is at most `max` columns wide, with `…` when cut.
pub fn cut(s: &str, max: usize) -> String {
    let mut width = 0;
    for (i, c) in s.char_indices() {
        let w = c.width().unwrap_or(0);
        if width + w > max {
            let mut t = s[..i].to_owned();
            t.push('…');
            return t;
        }
        width += w;
    }
    s.to_owned()
}

/// A byte count for people: `812 B`, `14.2 KiB`, `12.0 MiB`.
pub fn size(bytes: u64) -> String {
    const KIB: f64 = 1024.0;
    let b = bytes as f64;
    if b < KIB {
        format!("{bytes} B")
    } else if b < KIB * KIB {
        format!("{:.1} KiB", b / KIB)
    } else {
        format!("{:.1} MiB", b / (KIB * KIB))
    }
}

/// A text under `detail`: whole, or cut with its size and how to read the item whole.
fn long_text(text: &str, detail: Detail, whole_size: Option<u64>, read_whole: &str) -> String {
    match detail {
        Detail::Full if whole_size.is_none() => text.to_owned(),
        Detail::Full => format!(
            "{}{}",
            text,
            paint(
                DIM,
                &format!(
                    " … ({} in all; {read_whole})",
                    size(whole_size.unwrap_or(0))
                )
            )
        ),
        Detail::Short(max) => {
            let shown = cut(text, max);
            if shown.len() == text.len() && whole_size.is_none() {
                return shown;
            }
            let total = whole_size.unwrap_or(text.len() as u64);
            format!(
                "{shown}{}",
                paint(DIM, &format!(" ({} in all; {read_whole})", size(total)))
            )
        }
    }
}

/// `s` with every character that could steer a terminal (controls, C1, invisible and
/// text-direction ones) escaped (`\u{1b}`); newlines kept. For what the daemon, an agent or
/// another program said, before it is painted.
pub fn safe(s: &str) -> String {
    botvisor::text::escape(s, true).into_owned()
}

/// [`safe`] on every string inside a JSON value (keys kept).
pub fn safe_value(v: &Value) -> Value {
    match v {
        Value::String(s) => Value::String(safe(s)),
        Value::Array(a) => Value::Array(a.iter().map(safe_value).collect()),
        Value::Object(o) => {
            Value::Object(o.iter().map(|(k, v)| (k.clone(), safe_value(v))).collect())
        }
        v => v.clone(),
    }
}

/// One chat item as a line (or lines) of text. `read_whole` says how to read a cut item whole
/// (for example `botvisorctl chat demo --seq 42`).
pub fn item_text(kind: &str, payload: &Value, detail: Detail, read_whole: &str) -> String {
    let payload = &safe_value(payload);
    // A preview (an item over 1 MiB that was not read whole): its beginning and its size.
    let (payload, whole_size) = if botvisor::preview::is_preview(payload) {
        let mut p = payload.clone();
        let of = payload["preview_of"].as_str().unwrap_or("text").to_owned();
        if !of.is_empty() {
            p[of.as_str()] = payload["preview"].clone();
        }
        (p, payload["size"].as_u64())
    } else {
        (payload.clone(), None)
    };
    let text = payload["text"].as_str().unwrap_or_default();
    let small = match detail {
        Detail::Full => 200,
        Detail::Short(n) => n.min(200),
    };
    match kind {
        "user" => paint(
            USER,
            &format!("> {}", long_text(text, detail, whole_size, read_whole)),
        ),
        "assistant" => long_text(text, detail, whole_size, read_whole),
        "tool_use" => paint(
            DIM,
            &format!(
                "[tool {}] {}",
                payload["name"].as_str().unwrap_or("?"),
                cut(&compact(&payload["input"]), small)
            ),
        ),
        "tool_result" => {
            let content = match &payload["content"] {
                Value::String(s) => s.clone(),
                other => compact(other),
            };
            let style = if payload["is_error"] == true {
                ERROR
            } else {
                DIM
            };
            paint(style, &format!("[tool result] {}", cut(&content, small)))
        }
        "permission_request" => paint(
            ASK,
            &format!(
                "[permission?] {} {} (request {})",
                payload["tool"].as_str().unwrap_or("?"),
                cut(&compact(&payload["input"]), small),
                payload["request_id"].as_str().unwrap_or("?")
            ),
        ),
        "permission_answer" => paint(
            DIM,
            &format!(
                "[permission {}] request {} by {}{}",
                payload["behavior"].as_str().unwrap_or("?"),
                payload["request_id"].as_str().unwrap_or("?"),
                answered_by(&payload),
                payload["message"]
                    .as_str()
                    .map(|m| format!(": {m}"))
                    .unwrap_or_default()
            ),
        ),
        "result" => {
            let mut parts = vec![payload["subtype"].as_str().unwrap_or("?").to_owned()];
            if payload["is_error"] == true {
                parts[0] = format!("error ({})", parts[0]);
            }
            parts.extend(cost(&payload));
            let line = format!("[result: {}]", parts.join(", "));
            paint(
                if payload["is_error"] == true {
                    ERROR
                } else {
                    DIM
                },
                &line,
            )
        }
        "turn_finished" => {
            let outcome = payload["outcome"].as_str().unwrap_or("?");
            let reason = payload["reason"].as_str().unwrap_or_default();
            let mut line = format!("[turn ended: {outcome}");
            if !reason.is_empty() && reason != outcome && reason != "success" {
                line.push_str(&format!(" ({reason})"));
            }
            line.push(']');
            if !text.is_empty() {
                line.push_str(&format!(" {}", cut(text, small.max(200))));
            }
            paint(if outcome == "success" { DIM } else { ERROR }, &line)
        }
        "error" => paint(
            ERROR,
            &format!(
                "[error] {}",
                long_text(text, detail, whole_size, read_whole)
            ),
        ),
        "system" if payload["reason"] == "api_retry" => paint(WARN, &format!("[retry] {text}")),
        "system" => paint(DIM, &format!("[note] {text}")),
        other => format!(
            "[{other}] {}",
            long_text(text, detail, whole_size, read_whole)
        ),
    }
}

/// Who answered a permission request: the client's name and its bus name, or `botvisord`.
pub fn answered_by(payload: &Value) -> String {
    let by = payload["by"].as_str().unwrap_or("?");
    match payload["client"].as_str() {
        Some(name) if !name.is_empty() => format!("{name} ({by})"),
        _ => by.to_owned(),
    }
}

/// A result's cost and duration, as words.
pub fn cost(payload: &Value) -> Vec<String> {
    let mut parts = Vec::new();
    if let Some(c) = payload["total_cost_usd"].as_f64() {
        // Claude Code's `total_cost_usd` counts the whole conversation so far, not the turn.
        parts.push(format!("${c:.4} so far"));
    }
    if let Some(ms) = payload["duration_ms"].as_u64() {
        parts.push(if ms >= 1000 {
            format!("{:.1} s", ms as f64 / 1000.0)
        } else {
            format!("{ms} ms")
        });
    }
    parts
}

/// JSON on one line (for tool inputs).
pub fn compact(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// The terminal's width in columns: `COLUMNS`, else the terminal's, else none (a pipe).
pub fn terminal_width() -> Option<u16> {
    if let Some(n) = std::env::var("COLUMNS").ok().and_then(|c| c.parse().ok()) {
        return Some(n);
    }
    use std::io::IsTerminal;
    if !std::io::stdout().is_terminal() {
        return None;
    }
    terminal_size::terminal_size().map(|(w, _)| w.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn cuts_follow_display_width() {
        assert_eq!(cut("日本語のテキスト", 6), "日本語…");
        assert_eq!(cut("abc", 3), "abc");
        assert_eq!(cut("abcd", 3), "abc…");
    }

    #[test]
    fn short_detail_names_the_size_and_how_to_read_it() {
        let p = json!({"text": "x".repeat(200_000)});
        let t = item_text(
            "assistant",
            &p,
            Detail::Short(100),
            "botvisorctl chat b --seq 7",
        );
        assert!(t.len() < 300, "{}", t.len());
        assert!(
            t.contains("195.3 KiB in all; botvisorctl chat b --seq 7"),
            "{t}"
        );
    }

    #[test]
    fn a_result_that_is_an_error_never_reads_as_success() {
        let p = json!({"subtype": "success", "is_error": true});
        let t = item_text("result", &p, Detail::Full, "");
        assert!(t.contains("error (success)"), "{t}");
    }
}
