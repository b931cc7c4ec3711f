//! The words of a notification, and how one is sent to a server with the capabilities it has.
//!
//! Everything a bot, its agent or its tools wrote is untrusted: a bot's name, a tool's input, an
//! error. Every such text is bounded ([`SUMMARY_CHARS`], [`BODY_CHARS`], [`BODY_LINES`]) and has
//! its control, invisible and text-direction characters written as escapes (`\u{202e}`,
//! `botvisor::text`), so that no line can be added (a server's context menu lists one action a
//! line) and no text reversed; the body is escaped again for servers that read it as markup
//! (`body-markup`). The summary is plain text by the specification, and is sent as it is.

use std::collections::HashMap;

use serde_json::Value;

/// The most characters of a summary (escapes included), `…` last when cut.
pub const SUMMARY_CHARS: usize = 120;

/// The most characters of a body (escapes included), `…` last when cut.
pub const BODY_CHARS: usize = 600;

/// The most lines of a body.
pub const BODY_LINES: usize = 8;

/// The most characters of one value shown of a tool's input.
pub const VALUE_CHARS: usize = 200;

/// The `app_name` of every notification.
pub const APP_NAME: &str = "botvisor";

/// The `desktop-entry` hint: `botvisor-notify.desktop`, installed by `scripts/install.sh`.
pub const DESKTOP_ENTRY: &str = "botvisor-notify";

/// Urgency levels of the specification.
pub const LOW: u8 = 0;
/// Normal urgency.
pub const NORMAL: u8 = 1;
/// Critical urgency: servers keep it until it is dismissed.
pub const CRITICAL: u8 = 2;

/// What one notification says, before the server's capabilities are known. Every text is
/// already escaped and bounded.
#[derive(Debug, Clone, PartialEq)]
pub struct Note {
    /// What it shows, for telling a dismissal of this one from one of an earlier content: the
    /// request id, the state or the turn id.
    pub tag: String,
    /// One line.
    pub summary: String,
    /// Plain text, lines separated by `\n`.
    pub body: String,
    /// The line to run where the server has no actions (`botvisorctl answer …`).
    pub answer_line: Option<String>,
    /// `(action key, label)` besides the default action.
    pub actions: Vec<(String, String)>,
    /// [`LOW`], [`NORMAL`] or [`CRITICAL`].
    pub urgency: u8,
    /// The `category` hint (`im.received`, `x-botvisor.permission`, …).
    pub category: String,
    /// A themed icon name.
    pub icon: &'static str,
    /// `expire_timeout` in milliseconds: 0 never, -1 the server's default.
    pub expire_ms: i32,
}

/// What the server said it can do (`GetCapabilities`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Caps {
    /// `actions`: buttons (or a menu) that send `ActionInvoked`.
    pub actions: bool,
    /// `body-markup`: the body is read as markup.
    pub body_markup: bool,
}

impl Caps {
    /// From the capability names.
    pub fn from_names(names: &[String]) -> Caps {
        Caps {
            actions: names.iter().any(|n| n == "actions"),
            body_markup: names.iter().any(|n| n == "body-markup"),
        }
    }
}

/// The arguments of one `Notify` call but `replaces_id`.
#[derive(Debug, Clone, PartialEq)]
pub struct Rendered {
    /// `app_icon`.
    pub icon: String,
    /// `summary`.
    pub summary: String,
    /// `body`.
    pub body: String,
    /// `actions`: key, label, key, label, …
    pub actions: Vec<String>,
    /// `urgency` (byte), `category` and `desktop-entry` (strings).
    pub hints: HashMap<&'static str, zbus::OwnedVariant>,
    /// `expire_timeout`.
    pub expire_ms: i32,
}

/// `note` as it is sent to a server with `caps`: the default action (`Open`) and the note's
/// actions where the server has actions, else the answer line in the body; the body
/// markup-escaped where the server reads markup.
pub fn render(note: &Note, caps: &Caps) -> Rendered {
    let mut body = note.body.clone();
    let mut actions = Vec::new();
    if caps.actions {
        actions.push("default".to_owned());
        actions.push("Open".to_owned());
        for (k, l) in &note.actions {
            actions.push(k.clone());
            actions.push(l.clone());
        }
    } else if let Some(line) = &note.answer_line {
        if !body.is_empty() {
            body.push('\n');
        }
        body.push_str(line);
    }
    if caps.body_markup {
        body = markup_escaped(&body);
    }
    let mut hints = HashMap::new();
    hints.insert("urgency", zbus::OwnedVariant::from(note.urgency));
    if let Ok(v) = zbus::OwnedVariant::try_from(zbus::Variant::from(note.category.as_str())) {
        hints.insert("category", v);
    }
    if let Ok(v) = zbus::OwnedVariant::try_from(zbus::Variant::from(DESKTOP_ENTRY)) {
        hints.insert("desktop-entry", v);
    }
    Rendered {
        icon: note.icon.to_owned(),
        summary: note.summary.clone(),
        body,
        actions,
        hints,
        expire_ms: note.expire_ms,
    }
}

/// `s` with `&`, `<` and `>` written as entities: text, never markup, for a server that reads
/// the body as markup.
pub fn markup_escaped(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            c => out.push(c),
        }
    }
    out
}

/// `s` on one line, unsafe characters (newlines too) escaped, at most `max` characters with
/// `…` last when cut; an escape is never cut in two.
pub fn line(s: &str, max: usize) -> String {
    bounded(s, max, usize::MAX, false)
}

/// `s` as lines: newlines and tabs kept, every other unsafe character escaped, at most
/// `max_lines` lines and `max` characters, `…` last when cut.
pub fn block(s: &str, max: usize, max_lines: usize) -> String {
    bounded(s, max, max_lines, true)
}

fn bounded(s: &str, max: usize, max_lines: usize, keep_lines: bool) -> String {
    let mut out = String::new();
    let mut chars = 0;
    let mut lines = 1;
    for c in s.chars() {
        let kept = keep_lines && (c == '\n' || c == '\t');
        let piece: std::borrow::Cow<'_, str> = if kept || !botvisor::text::is_unsafe(c) {
            c.to_string().into()
        } else {
            let mut buf = [0u8; 4];
            botvisor::text::escape(c.encode_utf8(&mut buf), false)
                .into_owned()
                .into()
        };
        let n = piece.chars().count();
        if c == '\n' && kept {
            if lines == max_lines {
                out.push('…');
                return out;
            }
            lines += 1;
        }
        if chars + n > max.saturating_sub(1) {
            out.push('…');
            return out;
        }
        out.push_str(&piece);
        chars += n;
    }
    out
}

/// What a tool asks to do, in a few `key: value` lines, each value escaped on one line and cut
/// to [`VALUE_CHARS`] (the text around them not yet escaped): the command, path,
/// URL or pattern first (Claude Code's `command`, `file_path`, …; Codex's `command`, `cwd`,
/// `reason`, `grant_root`), then other short values; a preview's beginning for an input too big
/// to send; else the JSON text.
pub fn describe_input(input_json: &str) -> String {
    let v: Value = match serde_json::from_str(input_json) {
        Ok(v) => v,
        Err(_) => return input_json.chars().take(BODY_CHARS).collect(),
    };
    if botvisor::preview::is_preview(&v) {
        let what = v["preview_of"].as_str().unwrap_or("input");
        let text = v["preview"].as_str().unwrap_or_default();
        return format!(
            "{what} ({} bytes): {}",
            v["size"].as_u64().unwrap_or(0),
            text.chars().take(VALUE_CHARS).collect::<String>()
        );
    }
    let Some(obj) = v.as_object() else {
        return v.to_string().chars().take(BODY_CHARS).collect();
    };
    const FIRST: &[&str] = &[
        "command",
        "file_path",
        "notebook_path",
        "path",
        "url",
        "pattern",
        "query",
        "cwd",
        "reason",
        "grant_root",
        "description",
    ];
    let mut keys: Vec<&String> = obj.keys().collect();
    keys.sort_by_key(|k| FIRST.iter().position(|f| f == k).unwrap_or(FIRST.len()));
    let mut lines = Vec::new();
    for k in keys {
        let shown = match &obj[k] {
            Value::String(s) => s.clone(),
            Value::Array(a) if a.iter().all(Value::is_string) => a
                .iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(" "),
            Value::Number(n) => n.to_string(),
            Value::Bool(b) => b.to_string(),
            _ => continue,
        };
        if shown.is_empty() {
            continue;
        }
        // Each value on one line: no value can add a line of its own (such as an answer line
        // naming another request).
        lines.push(format!("{}: {}", line(k, 40), line(&shown, VALUE_CHARS)));
        if lines.len() == BODY_LINES - 1 {
            break;
        }
    }
    if lines.is_empty() {
        return v.to_string().chars().take(BODY_CHARS).collect();
    }
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_text_is_escaped_and_bounded() {
        let evil = "a\u{202e}b\n#Allow (x) [1,allow-1]\u{1b}[2J";
        let l = line(evil, 200);
        assert!(
            !l.contains('\n') && !l.contains('\u{202e}') && !l.contains('\u{1b}'),
            "{l}"
        );
        assert!(l.contains("\\u{202e}") && l.contains("\\n"), "{l}");
        let huge = "x".repeat(100_000);
        assert_eq!(line(&huge, 120).chars().count(), 120);
        assert!(line(&huge, 120).ends_with('…'));
        // An escape is never cut in two.
        let l = line(&"\u{202e}".repeat(50), 25);
        assert!(l.ends_with("}…") || l.ends_with('…'), "{l}");
        assert!(!l.contains("\\u{20…"), "{l}");
        let b = block(&"line\n".repeat(100), 600, 8);
        assert_eq!(b.lines().count(), 8, "{b}");
        assert!(b.ends_with('…'));
        let b = block("tab\there\r\nnext", 600, 8);
        assert_eq!(b, "tab\there\\r\nnext");
    }

    #[test]
    fn markup_is_text() {
        assert_eq!(
            markup_escaped("<b>x</b> & <a href=\"y\">"),
            "&lt;b&gt;x&lt;/b&gt; &amp; &lt;a href=\"y\"&gt;"
        );
    }

    #[test]
    fn inputs_say_what_the_tool_does_first() {
        assert_eq!(
            describe_input(r#"{"content":"hello","file_path":"/tmp/a.txt"}"#),
            "file_path: /tmp/a.txt\ncontent: hello"
        );
        assert_eq!(
            describe_input(r#"{"command":["bash","-lc","ls"],"cwd":"/w","reason":"look"}"#),
            "command: bash -lc ls\ncwd: /w\nreason: look"
        );
        let preview =
            r#"{"truncated":true,"size":2000000,"preview_of":"content","preview":"xxxx"}"#;
        assert_eq!(describe_input(preview), "content (2000000 bytes): xxxx");
        assert_eq!(describe_input("not json"), "not json");
        let long = format!(r#"{{"command":"{}"}}"#, "y".repeat(1000));
        assert_eq!(
            describe_input(&long).chars().count(),
            "command: ".len() + 200
        );
        assert_eq!(
            describe_input(r#"{"command":"ls\nAnswer: botvisorctl answer x y allow"}"#),
            "command: ls\\nAnswer: botvisorctl answer x y allow"
        );
    }

    #[test]
    fn actions_or_the_answer_line() {
        let note = Note {
            tag: "r".into(),
            summary: "demo asks to use Write".into(),
            body: "file_path: <b>".into(),
            answer_line: Some("botvisorctl answer 3f2a r allow".into()),
            actions: vec![
                ("allow-1".into(), "Allow".into()),
                ("deny-1".into(), "Deny".into()),
            ],
            urgency: NORMAL,
            category: "x-botvisor.permission".into(),
            icon: "dialog-question",
            expire_ms: 0,
        };
        let with = render(
            &note,
            &Caps {
                actions: true,
                body_markup: true,
            },
        );
        assert_eq!(
            with.actions,
            ["default", "Open", "allow-1", "Allow", "deny-1", "Deny"]
        );
        assert_eq!(with.body, "file_path: &lt;b&gt;");
        let without = render(&note, &Caps::default());
        assert!(without.actions.is_empty());
        assert_eq!(
            without.body,
            "file_path: <b>\nbotvisorctl answer 3f2a r allow"
        );
        assert_eq!(
            with.hints.get("urgency").map(|v| u8::try_from(v).unwrap()),
            Some(NORMAL)
        );
    }
}
