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

/// `s` as one line: every character that could steer a terminal or break the line (controls
/// with newline, tab and carriage return among them, C1, invisible and text-direction ones)
/// escaped (`\n`, `\u{1b}`). For what the daemon, an agent or another program said (names,
/// folders, states, ids, errors, a chat item's header fields), before it is painted.
pub fn safe(s: &str) -> String {
    botvisor::text::escape(s, false).into_owned()
}

/// `s` as text of several lines (a chat message's body, streamed text, botvisorctl's own
/// multi-line messages): as [`safe`], but newlines and tabs kept.
pub fn safe_text(s: &str) -> String {
    botvisor::text::escape(s, true).into_owned()
}

/// The keys of a chat item's payload whose strings are bodies of several lines ([`safe_text`]);
/// `input` is shown as JSON, which escapes its newlines itself.
const BODY_KEYS: [&str; 4] = ["text", "content", "preview", "input"];

/// Every string inside a JSON value made safe to print (keys kept): with `lines`, as
/// [`safe_text`], else as [`safe`].
fn safe_value(v: &Value, lines: bool) -> Value {
    match v {
        Value::String(s) if lines => Value::String(safe_text(s)),
        Value::String(s) => Value::String(safe(s)),
        Value::Array(a) => Value::Array(a.iter().map(|v| safe_value(v, lines)).collect()),
        Value::Object(o) => Value::Object(
            o.iter()
                .map(|(k, v)| (k.clone(), safe_value(v, lines)))
                .collect(),
        ),
        v => v.clone(),
    }
}

/// A chat item's payload safe to print: the bodies ([`BODY_KEYS`]) as [`safe_text`], every other
/// string (tool names, ids, outcomes, reasons, who answered) as [`safe`].
pub fn safe_payload(payload: &Value) -> Value {
    match payload {
        Value::Object(o) => Value::Object(
            o.iter()
                .map(|(k, v)| (k.clone(), safe_value(v, BODY_KEYS.contains(&k.as_str()))))
                .collect(),
        ),
        v => safe_value(v, false),
    }
}

/// One chat item as a line (or lines) of text. `read_whole` says how to read a cut item whole
/// (for example `botvisorctl chat demo --seq 42`).
pub fn item_text(kind: &str, payload: &Value, detail: Detail, read_whole: &str) -> String {
    let payload = &safe_payload(payload);
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
        "permission_request" => {
            let mut text = format!(
                "[permission?] {} {} (request {})",
                payload["tool"].as_str().unwrap_or("?"),
                cut(&compact(&payload["input"]), small),
                payload["request_id"].as_str().unwrap_or("?")
            );
            // What each allow lets run, when there is more than one (issue 46): as the flags
            // of `botvisorctl answer` that give it.
            let offered = scopes(&payload);
            if offered.len() > 1 {
                for (scope, words) in offered {
                    text.push_str(&format!("\n  allow {}: {words}", scope_flag(&scope)));
                }
            }
            paint(ASK, &text)
        }
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
            // The CLI's `duration_ms` is its last attempt's, not the turn's: the turn's time is
            // its `turn_finished` item's (issue 46).
            let mut what = payload["subtype"].as_str().unwrap_or("?").to_owned();
            if payload["is_error"] == true {
                what = format!("error ({what})");
            }
            let line = format!("[result: {what}]");
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
            if let Some(c) = payload["cost_usd"].as_f64().filter(|c| *c > 0.0) {
                line.push_str(&format!(", ${c:.4}"));
            }
            for took in duration(&payload) {
                line.push_str(&format!(", {took}"));
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
        // botvisord's notes speak of its D-Bus methods; here they are this program's commands
        // (`BOT` stands for the bot where the caller does not name it: `bot_words`).
        "system" => paint(DIM, &format!("[note] {}", super::fail::in_ctl_words(text))),
        other => format!(
            "[{other}] {}",
            long_text(text, detail, whole_size, read_whole)
        ),
    }
}

/// `text` with `tail` at the end of its first line (an item of several lines: a permission
/// request with its scopes).
pub fn after_first_line(text: &str, tail: &str) -> String {
    match text.find('\n') {
        Some(at) => format!("{}{tail}{}", &text[..at], &text[at..]),
        None => format!("{text}{tail}"),
    }
}

/// The scopes a `permission_request` payload offers, narrowest first, each with what it lets run
/// (its `reach`; a botvisord before issue 46 says no words: the scope's name stands for them).
pub fn scopes(payload: &Value) -> Vec<(String, String)> {
    payload["scopes"]
        .as_array()
        .map_or(&[][..], Vec::as_slice)
        .iter()
        .filter_map(Value::as_str)
        .map(|s| {
            let words = payload["reach"][s].as_str().unwrap_or(s);
            (s.to_owned(), words.to_owned())
        })
        .collect()
}

/// The flag of `botvisorctl answer … allow` that gives `scope`: `once`, `--session`,
/// `--always`, `--scope program`.
pub fn scope_flag(scope: &str) -> String {
    match scope {
        "once" => "once".to_owned(),
        "session" | "always" => format!("--{scope}"),
        other => format!("--scope {other}"),
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

/// A turn's cost and duration, as words: what the turn cost (its `turn_finished` item's
/// `cost_usd`, as botvisord counts it across restarts and resumes), when the CLI tells a cost at
/// all (its `result` has `total_cost_usd`: Claude Code, not Codex), and the turn's time (its
/// `turn_finished` item's `duration_ms`: from the message's `Send` to the turn's end, waits
/// included; never the CLI's own `duration_ms`, which is its last attempt's).
pub fn turn_cost(result: &Value, finished: &Value) -> Vec<String> {
    let mut parts = Vec::new();
    if result.get("total_cost_usd").is_some()
        && let Some(c) = finished["cost_usd"].as_f64()
    {
        parts.push(format!("${c:.4} this turn"));
    }
    parts.extend(duration(finished));
    parts
}

/// A payload's `duration_ms` as words (`44 ms`, `1.5 s`, `1 min 35 s`); nothing without one.
pub fn duration(payload: &Value) -> Vec<String> {
    let mut parts = Vec::new();
    if let Some(ms) = payload["duration_ms"].as_u64() {
        parts.push(if ms >= 60_000 {
            let s = ms / 1000;
            match (s / 3600, s % 3600 / 60, s % 60) {
                (0, m, s) => format!("{m} min {s} s"),
                (h, m, _) => format!("{h} h {m} min"),
            }
        } else if ms >= 1000 {
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

/// `text` (an item's words from [`item_text`]) with the bot `spec` for the `BOT` of its commands.
pub fn bot_words(text: &str, spec: &str) -> String {
    text.replace(" BOT ", &format!(" {} ", super::shell_word(spec)))
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
    fn headers_stay_on_one_line_and_bodies_keep_their_lines() {
        let request = json!({"tool": "Bash\n\u{1b}[2J", "request_id": "r\n1",
                             "input": {"command": "ls\n\u{9b}"}});
        let t = item_text("permission_request", &request, Detail::Full, "");
        let t = anstream::adapter::strip_str(&t).to_string();
        assert_eq!(
            t,
            r#"[permission?] Bash\n\u{1b}[2J {"command":"ls\n\\u{9b}"} (request r\n1)"#
        );
        let answer = json!({"behavior": "deny", "request_id": "r", "by": ":1.5",
                            "client": "evil\u{202e}", "message": "no\nway"});
        let t = item_text("permission_answer", &answer, Detail::Full, "");
        assert!(!t.contains('\n') && !t.contains('\u{202e}'), "{t:?}");
        let said = json!({"text": "two\nlines\tand \u{1b}[31mred\r"});
        let t = item_text("assistant", &said, Detail::Full, "");
        assert_eq!(t, "two\nlines\tand \\u{1b}[31mred\\r");
        let failed = json!({"outcome": "error\u{1b}", "reason": "x\ny", "text": ""});
        let t = item_text("turn_finished", &failed, Detail::Full, "");
        assert!(!t.contains('\n') && t.contains(r"x\ny"), "{t:?}");
    }

    #[test]
    fn a_turns_time_is_its_own_not_the_clis() {
        let result = json!({"subtype": "success", "duration_ms": 44, "total_cost_usd": 0.01});
        let finished = json!({"outcome": "success", "cost_usd": 0.01, "duration_ms": 95_210});
        assert_eq!(
            turn_cost(&result, &finished),
            ["$0.0100 this turn", "1 min 35 s"]
        );
        let t = item_text("result", &result, Detail::Full, "");
        assert!(!t.contains("44 ms"), "{t}");
        let t = item_text("turn_finished", &finished, Detail::Full, "");
        assert!(t.contains("1 min 35 s"), "{t}");
        assert_eq!(duration(&json!({"duration_ms": 1500})), ["1.5 s"]);
        assert_eq!(duration(&json!({"duration_ms": 3_725_000})), ["1 h 2 min"]);
    }

    #[test]
    fn a_result_that_is_an_error_never_reads_as_success() {
        let p = json!({"subtype": "success", "is_error": true});
        let t = item_text("result", &p, Detail::Full, "");
        assert!(t.contains("error (success)"), "{t}");
    }
}
