//! How the dashboard looks: the bots (name, state, runtime, cost, open prompts, last activity,
//! folder), the selected bot's chat following live, its oldest open prompt with the keys that
//! answer it, the line being written, and what the last call came to. Laid out side by side on a
//! wide terminal, one above the other on a narrow one; every text from botvisord, an agent or the
//! user is escaped first (`show::safe`), so nothing on the screen steers the terminal.

use std::time::SystemTime;

use ratatui::Frame;
use ratatui::layout::{Constraint, Direction, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph};
use unicode_width::UnicodeWidthChar;

use super::model::{Bot, Daemon, Host, Link, Mode, Model};
use crate::show::{self, Detail};

/// A terminal at least this wide shows the bots and the chat side by side.
pub const SIDE_BY_SIDE: u16 = 100;

/// `s` padded with spaces, or cut (with `…`), to exactly `width` columns.
pub fn fit(s: &str, width: usize) -> String {
    let cut = show::cut(s, width.saturating_sub(1).max(1));
    let cut = if display_width(s) <= width {
        s.to_owned()
    } else {
        cut
    };
    let w = display_width(&cut);
    if w >= width {
        cut
    } else {
        format!("{cut}{}", " ".repeat(width - w))
    }
}

/// The display width of `s` (wide characters count two columns).
pub fn display_width(s: &str) -> usize {
    s.chars().map(|c| c.width().unwrap_or(0)).sum()
}

/// `text` broken into lines of at most `width` columns (at its newlines, then by width).
pub fn wrap(text: &str, width: usize) -> Vec<String> {
    let width = width.max(1);
    let mut out = Vec::new();
    for line in text.split('\n') {
        let mut current = String::new();
        let mut w = 0;
        for c in line.chars() {
            let cw = c.width().unwrap_or(0);
            if w + cw > width && !current.is_empty() {
                out.push(std::mem::take(&mut current));
                w = 0;
            }
            current.push(c);
            w += cw;
        }
        out.push(current);
    }
    out
}

/// How long ago `t` was, in one short word: `12s`, `5m`, `3h`, `2d`; `-` when not known.
pub fn ago(t: Option<SystemTime>, now: SystemTime) -> String {
    let Some(t) = t else { return "-".into() };
    let s = now.duration_since(t).map_or(0, |d| d.as_secs());
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86_400 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}

/// The style of a chat item's lines.
fn item_style(kind: &str, payload: &serde_json::Value) -> Style {
    match kind {
        "user" => Style::new().fg(Color::Cyan),
        "assistant" => Style::new(),
        "permission_request" => Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD),
        "error" => Style::new().fg(Color::Red),
        "result" if payload["is_error"] == true => Style::new().fg(Color::Red),
        "turn_finished" if payload["outcome"] != "success" => Style::new().fg(Color::Red),
        "system" if payload["reason"] == "api_retry" => Style::new().fg(Color::Yellow),
        _ => Style::new().add_modifier(Modifier::DIM),
    }
}

/// The state as the list shows it: the words of `list`, shorter.
fn state_words(b: &Bot) -> String {
    b.info.shown_state().replace(", waiting for permission", "")
}

/// One bot's line of the list, `width` columns wide: `name` as the dashboard shows it; greyed
/// when its host is not `live` (its link down or its botvisord away: shown as it was).
fn bot_line(
    b: &Bot,
    name: &str,
    live: bool,
    selected: bool,
    width: usize,
    now: SystemTime,
) -> Line<'static> {
    let prompts = match b.info.pending.len() {
        0 => String::new(),
        n => format!("{n}?"),
    };
    let cost = b.info.cost_cell();
    // name, state, then what fits: prompts, runtime, last activity, cost, folder.
    let mut cells: Vec<(String, usize)> =
        vec![(show::safe(name), 16), (show::safe(&state_words(b)), 12)];
    let optional = [
        (prompts, 3),
        (show::safe(&b.info.runtime), 6),
        (ago(b.last_activity, now), 4),
        (cost, 9),
        (show::safe(&b.info.cwd), 12),
    ];
    let mut used = 2 + cells.iter().map(|(_, w)| w + 1).sum::<usize>();
    for (text, w) in optional {
        if used + w + 1 > width {
            break;
        }
        used += w + 1;
        cells.push((text, w));
    }
    // What is left goes to the name, then to the folder when it is shown.
    let spare = width.saturating_sub(used);
    let last = cells.len() - 1;
    if cells.len() == 7 {
        cells[last].1 += spare;
    } else {
        cells[0].1 += spare;
    }
    let mut text = String::from(if selected { "> " } else { "  " });
    let n = cells.len();
    for (i, (cell, w)) in cells.into_iter().enumerate() {
        text.push_str(&fit(&cell, w));
        if i + 1 < n {
            text.push(' ');
        }
    }
    let mut style = Style::new();
    if selected {
        style = style.add_modifier(Modifier::REVERSED);
    }
    if !live {
        style = style.fg(Color::DarkGray);
    } else if !b.info.pending.is_empty() {
        style = style.fg(Color::Yellow);
    } else if b.info.state == "failed" {
        style = style.fg(Color::Red);
    }
    Line::styled(fit(&text, width), style)
}

/// The lines of the selected bot's chat, wrapped to `width`.
fn chat_lines(b: &Bot, width: usize, ctl: &str) -> Vec<Line<'static>> {
    let mut lines = Vec::new();
    if !b.loaded && b.chat.is_empty() {
        lines.push(Line::styled(
            "reading the chat…",
            Style::new().add_modifier(Modifier::DIM),
        ));
    }
    for item in &b.chat {
        if item.kind == "assistant" && item.payload["text"].as_str() == Some("") {
            continue;
        }
        let read = format!("{ctl} chat {} --seq {}", b.info.short, item.seq);
        let text = show::item_text(&item.kind, &item.payload, Detail::Short(2000), &read);
        let text = anstream::adapter::strip_str(&text).to_string();
        let style = item_style(&item.kind, &item.payload);
        for l in wrap(&text, width) {
            lines.push(Line::styled(l, style));
        }
    }
    if !b.partial.is_empty() {
        for l in wrap(&show::safe_text(&b.partial), width) {
            lines.push(Line::raw(l));
        }
        lines.push(Line::styled("…", Style::new().add_modifier(Modifier::DIM)));
    }
    lines
}

/// The chat's header: the bot's name (`name`, as the dashboard shows it), runtime, folder,
/// mode and cost (`cost not told` for a bot whose CLI tells none: unknown is not `$0`), and its
/// next scheduled fire (`next_fire`, Unix seconds), in local time.
fn chat_title(b: &Bot, name: &str, next_fire: Option<i64>) -> String {
    let mut parts = vec![show::safe(&b.info.runtime)];
    if !b.info.permission_mode.is_empty() {
        parts.push(show::safe(&b.info.permission_mode));
    }
    parts.push(if b.info.cost_told() {
        crate::bots::dollars(b.info.cost_usd)
    } else {
        "cost not told".to_owned()
    });
    if b.info.queued_messages > 0 {
        parts.push(format!("{} queued", b.info.queued_messages));
    }
    if let Some(t) = next_fire {
        parts.push(format!(
            "next fire {}",
            botvisor::time::local_time(t.max(0) as u64)
        ));
    }
    format!(
        " {} ({}) {} ",
        show::safe(name),
        parts.join(", "),
        show::safe(&b.info.cwd)
    )
}

/// The prompt box's lines: what the selected bot (`name`) asks and the keys that answer it.
fn prompt_lines(b: &Bot, name: &str, width: usize) -> Vec<Line<'static>> {
    let Some((id, tool, input)) = b.open_request() else {
        return Vec::new();
    };
    let more = match b.info.pending.len() {
        1 => String::new(),
        n => format!(" (1 of {n})"),
    };
    let asks = format!(
        "{} asks{more}: {} {}",
        show::safe(name),
        show::safe(tool),
        show::safe(input)
    );
    // Each key with what it lets run (issue 46): `a` the widest the request offers of
    // `always` and `session`, `p` a command's program where offered.
    let widest = b.widest_scope(id);
    let said = |scope: &str| {
        b.reach(id, scope)
            .map_or_else(|| scope.to_owned(), show::safe)
    };
    let mut keys = vec![format!("y allow {}", said("once"))];
    match widest {
        "once" => keys.push("a allow (nothing wider is offered)".to_owned()),
        w => keys.push(format!("a allow {}", said(w))),
    }
    if b.reach(id, "program").is_some() {
        keys.push(format!("p allow {}", said("program")));
    }
    keys.push(format!("n deny · request {}", show::safe(id)));
    let ask = Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD);
    let mut lines: Vec<Line<'static>> = wrap(&asks, width)
        .into_iter()
        .take(3)
        .map(|l| Line::styled(l, ask))
        .collect();
    for k in keys {
        lines.push(Line::styled(fit(&k, width), Style::new().fg(Color::Yellow)));
    }
    lines
}

/// The keys, as the help shows them.
pub const HELP: &[(&str, &str)] = &[
    ("↑ ↓  j k", "choose a bot"),
    ("Tab", "choose the next bot that waits for an answer"),
    ("Enter  i", "write a message to it (Enter sends, Esc drops)"),
    ("y", "allow its open prompt, once"),
    (
        "a",
        "allow always (or for the session: the widest the CLI offers); the prompt says what it lets run",
    ),
    (
        "p",
        "allow the command's program, any arguments, from now on (Codex, where offered)",
    ),
    (
        "n",
        "deny, with what the model is told (Enter: the default words)",
    ),
    ("x", "interrupt the running turn"),
    ("S", "stop the agent (the next message starts it again)"),
    ("R", "restart the agent (also after failed)"),
    ("PgUp PgDn End", "scroll the chat; End follows it again"),
    ("q  Ctrl-C", "quit"),
];

/// Draws the whole screen.
pub fn draw(frame: &mut Frame<'_>, m: &Model, now: SystemTime) {
    let area = frame.area();
    // A bot of a host that is not live shows no prompt to answer (the answer could not reach
    // it); its chat says why.
    let prompt = match m.current() {
        Some(b) if m.host_of(b).is_up() => {
            prompt_lines(b, &m.shown_name(b), area.width.saturating_sub(2) as usize)
        }
        _ => Vec::new(),
    };
    let prompt_height = if prompt.is_empty() {
        0
    } else {
        prompt.len() as u16 + 2
    };
    let rows = Layout::default()
        .direction(Direction::Vertical)
        .constraints([
            Constraint::Length(1),
            Constraint::Min(3),
            Constraint::Length(prompt_height),
            Constraint::Length(1),
            Constraint::Length(1),
        ])
        .split(area);
    draw_title(frame, rows[0], m);
    let (list_area, chat_area) = if area.width >= SIDE_BY_SIDE {
        let left = (area.width * 2 / 5).clamp(40, 100);
        let cols = Layout::default()
            .direction(Direction::Horizontal)
            .constraints([Constraint::Length(left), Constraint::Min(10)])
            .split(rows[1]);
        (cols[0], cols[1])
    } else {
        let wanted = m.bots.len() as u16 + 2;
        let h = wanted.min(rows[1].height / 3).max(3.min(rows[1].height));
        let parts = Layout::default()
            .direction(Direction::Vertical)
            .constraints([Constraint::Length(h), Constraint::Min(1)])
            .split(rows[1]);
        (parts[0], parts[1])
    };
    draw_list(frame, list_area, m, now);
    draw_chat(frame, chat_area, m);
    if !prompt.is_empty() {
        let block = Block::default()
            .borders(Borders::ALL)
            .border_style(Style::new().fg(Color::Yellow))
            .title(" permission ");
        frame.render_widget(Paragraph::new(prompt).block(block), rows[2]);
    }
    draw_input(frame, rows[3], m);
    draw_status(frame, rows[4], m);
    if m.mode == Mode::Help {
        draw_help(frame, area, m);
    }
}

fn draw_title(frame: &mut Frame<'_>, area: Rect, m: &Model) {
    if m.is_fleet() {
        frame.render_widget(Paragraph::new(hosts_line(m)), area);
        return;
    }
    let (text, style) = match m.hosts[0].daemon {
        Daemon::Away => (
            "botvisord is not running on this bus; waiting for it to come back (q quits)"
                .to_owned(),
            Style::new().fg(Color::White).bg(Color::Red),
        ),
        Daemon::Loading => (
            "botvisorctl ui: reading the bots…".to_owned(),
            Style::new().add_modifier(Modifier::BOLD),
        ),
        Daemon::Up => (
            format!(
                "botvisorctl ui: {} bot(s){}; ? keys, q quits",
                m.bots.len(),
                prompts_open(m)
            ),
            Style::new().add_modifier(Modifier::BOLD),
        ),
    };
    frame.render_widget(
        Paragraph::new(Line::styled(fit(&text, area.width as usize), style)),
        area,
    );
}

/// `, N prompts open` (empty for none): those of hosts that are live (an offline host's are
/// shown as they were, and cannot be answered until it is back).
fn prompts_open(m: &Model) -> String {
    let open: usize = m
        .bots
        .iter()
        .filter(|b| m.host_of(b).is_up())
        .map(|b| b.info.pending.len())
        .sum();
    match open {
        0 => String::new(),
        1 => ", 1 prompt open".to_owned(),
        n => format!(", {n} prompts open"),
    }
}

/// A host's state in a few words: `online`, `connecting`, `reading`, `botvisord away`,
/// `offline since 14:02:05`, `offline since 14:02:05, tried again 3×`.
pub fn host_state(h: &Host) -> String {
    match (&h.link, h.daemon) {
        (Link::Connecting, _) => "connecting".into(),
        (
            Link::Offline {
                since: t,
                retries: 0,
                ..
            },
            _,
        ) => format!("offline {}", since(*t)),
        (
            Link::Offline {
                since: t, retries, ..
            },
            _,
        ) => format!("offline {}, tried again {retries}×", since(*t)),
        (Link::Linked, Daemon::Loading) => "reading".into(),
        (Link::Linked, Daemon::Away) => "botvisord away".into(),
        (Link::Linked, Daemon::Up) => "online".into(),
    }
}

/// `since 14:02:05` (local time, as `list` says times).
pub(super) fn since(t: SystemTime) -> String {
    let secs = t
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    format!("since {}", crate::bots::local_time(secs))
}

/// The title over several hosts: the bots and prompts, how many hosts are online, then each
/// host that is not, with its state in red (a host connecting dimmed): what needs a look fits
/// first, however many hosts there are.
fn hosts_line(m: &Model) -> Line<'static> {
    let bold = Style::new().add_modifier(Modifier::BOLD);
    let online = m.hosts.iter().filter(|h| h.is_up()).count();
    let mut spans = vec![
        Span::styled(
            format!(
                "botvisorctl ui: {} bot(s) on {} hosts{}; ? keys, q quits ·",
                m.bots.len(),
                m.hosts.len(),
                prompts_open(m)
            ),
            bold,
        ),
        Span::styled(format!(" {online} online"), Style::new().fg(Color::Green)),
    ];
    for h in m.hosts.iter().filter(|h| !h.is_up()) {
        let style = match &h.link {
            Link::Connecting => Style::new().add_modifier(Modifier::DIM),
            _ => Style::new().fg(Color::White).bg(Color::Red),
        };
        spans.push(Span::raw(" · "));
        spans.push(Span::styled(
            format!("{} {}", show::safe(&h.name), host_state(h)),
            style,
        ));
    }
    // What does not fit the width is cut by the paragraph.
    Line::from(spans)
}

/// Over several hosts, a line for each host that is not live and shows no bot (never reached,
/// or with none): its state and why, so that every host's trouble is in sight.
fn silent_hosts(m: &Model, width: usize) -> Vec<Line<'static>> {
    if !m.is_fleet() {
        return Vec::new();
    }
    m.hosts
        .iter()
        .enumerate()
        .filter(|(i, h)| !h.is_up() && !m.bots.iter().any(|b| b.host == *i))
        .map(|(_, h)| {
            let why = match &h.link {
                Link::Offline { why, .. } => format!(": {why}"),
                _ => String::new(),
            };
            let text = format!("  {}: {}{}", h.name, host_state(h), why);
            let style = match h.link {
                Link::Connecting => Style::new().add_modifier(Modifier::DIM),
                _ => Style::new().fg(Color::Red),
            };
            Line::styled(fit(&show::safe(&text), width), style)
        })
        .collect()
}

fn draw_list(frame: &mut Frame<'_>, area: Rect, m: &Model, now: SystemTime) {
    let block = Block::default().borders(Borders::ALL).title(" bots ");
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let width = inner.width as usize;
    let height = inner.height as usize;
    let silent = silent_hosts(m, width);
    if m.bots.is_empty() {
        let text = if m.is_fleet() {
            "no bots on the hosts reached so far"
        } else if m.hosts[0].daemon == Daemon::Up {
            "no bots; create one with `botvisorctl create --cwd DIR`"
        } else {
            ""
        };
        let mut lines: Vec<Line<'static>> = wrap(text, width).into_iter().map(Line::raw).collect();
        lines.extend(silent);
        frame.render_widget(Paragraph::new(lines), inner);
        return;
    }
    // The hosts without a bot to show take the list's last lines; the bots the rest.
    let height = height.saturating_sub(silent.len().min(height / 2));
    let at = m.selected_index().unwrap_or(0);
    // The selected bot stays in sight.
    let first = at.saturating_sub(height.saturating_sub(1));
    let mut lines: Vec<Line<'static>> = m
        .bots
        .iter()
        .enumerate()
        .skip(first)
        .take(height)
        .map(|(i, b)| {
            let live = m.host_of(b).is_up();
            bot_line(b, &m.shown_name(b), live, i == at, width, now)
        })
        .collect();
    lines.extend(silent.into_iter().take(inner.height as usize / 2));
    frame.render_widget(Paragraph::new(lines), inner);
}

fn draw_chat(frame: &mut Frame<'_>, area: Rect, m: &Model) {
    let Some(b) = m.current() else {
        frame.render_widget(Block::default().borders(Borders::ALL).title(" chat "), area);
        return;
    };
    let title = fit(
        &chat_title(b, &m.shown_name(b), m.next_fires.get(&b.key()).copied()),
        area.width.saturating_sub(4) as usize,
    );
    let block = Block::default()
        .borders(Borders::ALL)
        .title(title.trim_end().to_owned());
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let host = m.host_of(b);
    let mut lines = chat_lines(b, inner.width as usize, &host.ctl);
    if m.is_fleet() && !host.is_up() {
        // Said last, so it stays in sight at the chat's end.
        let why = match &host.link {
            Link::Offline { why, .. } => format!(": {why}"),
            _ => String::new(),
        };
        let words = format!(
            "{} is {}{}; shown as it was, and followed again once it is back",
            host.name,
            host_state(host),
            why
        );
        for l in wrap(&show::safe(&words), inner.width as usize) {
            lines.push(Line::styled(l, Style::new().fg(Color::Red)));
        }
    }
    let height = inner.height as usize;
    let most = lines.len().saturating_sub(height);
    let scroll = m.scroll.min(most);
    let start = most - scroll;
    let shown: Vec<Line<'static>> = lines.into_iter().skip(start).take(height).collect();
    frame.render_widget(Paragraph::new(shown), inner);
}

fn draw_input(frame: &mut Frame<'_>, area: Rect, m: &Model) {
    let width = area.width as usize;
    let (label, text) = match &m.mode {
        Mode::Compose(t) => (
            format!(
                "to {}> ",
                m.current()
                    .map_or(String::new(), |b| show::safe(&m.shown_name(b)))
            ),
            t.clone(),
        ),
        Mode::Deny { text, .. } => (
            "deny; tell the model (Enter: the default)> ".into(),
            text.clone(),
        ),
        _ => {
            let hint = match m.current() {
                Some(b) if b.info.state == "failed" => {
                    format!("failed: {}", show::safe(&b.info.last_error))
                }
                Some(b) if !b.info.last_error.is_empty() => {
                    format!("last error: {}", show::safe(&b.info.last_error))
                }
                _ => String::new(),
            };
            frame.render_widget(
                Paragraph::new(Line::styled(fit(&hint, width), Style::new().fg(Color::Red))),
                area,
            );
            return;
        }
    };
    // The end of what is written stays in sight, with the cursor after it.
    let text = show::safe(&text);
    let room = width.saturating_sub(display_width(&label) + 1);
    let mut shown: String = text.clone();
    while display_width(&shown) > room {
        shown.remove(0);
    }
    let line = Line::from(vec![
        Span::styled(label.clone(), Style::new().add_modifier(Modifier::BOLD)),
        Span::raw(shown.clone()),
    ]);
    frame.render_widget(Paragraph::new(line), area);
    let x = area.x
        + (display_width(&label) + display_width(&shown)).min(width.saturating_sub(1)) as u16;
    frame.set_cursor_position((x, area.y));
}

fn draw_status(frame: &mut Frame<'_>, area: Rect, m: &Model) {
    let width = area.width as usize;
    let line = match &m.notice {
        Some((text, true)) => {
            Line::styled(fit(&show::safe(text), width), Style::new().fg(Color::Red))
        }
        Some((text, false)) => Line::styled(
            fit(&show::safe(text), width),
            Style::new().add_modifier(Modifier::DIM),
        ),
        None => Line::styled(
            fit(
                "Enter write · y allow · a always · p program · n deny · x interrupt · S stop · R restart · ? keys · q quit",
                width,
            ),
            Style::new().add_modifier(Modifier::DIM),
        ),
    };
    frame.render_widget(Paragraph::new(line), area);
}

/// The keys, and over several hosts each host: its state, which botvisord answered there (the
/// first 8 characters of its machine's boot id and of its invocation, where it says them) and,
/// offline, why.
fn draw_help(frame: &mut Frame<'_>, area: Rect, m: &Model) {
    let w = area.width.min(96);
    let inner = w.saturating_sub(2) as usize;
    let mut lines: Vec<Line<'static>> = HELP
        .iter()
        .map(|(k, what)| Line::raw(fit(&format!("{k:>14}  {what}"), inner)))
        .collect();
    if m.is_fleet() {
        lines.push(Line::raw(""));
        for h in &m.hosts {
            let which = if h.which.boot_id.is_empty() && h.which.invocation.is_empty() {
                String::new()
            } else {
                format!(
                    " (boot {}, botvisord {})",
                    crate::fleet::short(&h.which.boot_id),
                    crate::fleet::short(&h.which.invocation)
                )
            };
            let why = match &h.link {
                Link::Offline { why, .. } => format!(": {why}"),
                _ => String::new(),
            };
            let text = format!("{:>14}  {}{which}{why}", h.name, host_state(h));
            lines.push(Line::raw(fit(&show::safe(&text), inner)));
        }
    }
    lines.push(Line::styled(
        "any key closes this",
        Style::new().add_modifier(Modifier::DIM),
    ));
    let h = (lines.len() as u16 + 2).min(area.height);
    let popup = Rect {
        x: area.x + (area.width - w) / 2,
        y: area.y + (area.height - h) / 2,
        width: w,
        height: h,
    };
    let title = if m.is_fleet() {
        " keys and hosts "
    } else {
        " keys "
    };
    frame.render_widget(Clear, popup);
    frame.render_widget(
        Paragraph::new(lines).block(Block::default().borders(Borders::ALL).title(title)),
        popup,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bots::BotInfo;

    #[test]
    fn fit_pads_and_cuts_by_display_width() {
        assert_eq!(fit("ab", 4), "ab  ");
        assert_eq!(fit("abcdef", 4), "abc…");
        assert_eq!(display_width(&fit("日本語のテキスト", 7)), 7);
        assert_eq!(fit("abcd", 4), "abcd");
    }

    #[test]
    fn wrap_breaks_at_newlines_and_by_width() {
        assert_eq!(wrap("abcdef\ngh", 4), ["abcd", "ef", "gh"]);
        assert_eq!(wrap("", 4), [""]);
        assert_eq!(wrap("日本語", 4), ["日本", "語"]);
    }

    /// Issue 46: a Codex bot tells no cost, so its title and its line say so instead of `$0`;
    /// a Claude Code bot's cost is shown, `$0` included.
    #[test]
    fn a_cost_not_told_is_not_shown_as_zero() {
        let bot = |runtime: &str, cost_usd: f64| Bot {
            host: 0,
            info: BotInfo {
                name: "b".into(),
                runtime: runtime.into(),
                cost_usd,
                ..BotInfo::default()
            },
            chat: Default::default(),
            loaded: true,
            partial: String::new(),
            last_activity: None,
            scopes: Default::default(),
        };
        let now = SystemTime::now();
        let line = |b: &Bot| {
            bot_line(b, "b", true, false, 80, now)
                .spans
                .iter()
                .map(|s| s.content.to_string())
                .collect::<String>()
        };
        let codex = bot("codex", 0.0);
        assert!(
            chat_title(&codex, "b", None).contains("cost not told"),
            "{}",
            chat_title(&codex, "b", None)
        );
        assert!(
            !chat_title(&codex, "b", None).contains("$0"),
            "{}",
            chat_title(&codex, "b", None)
        );
        assert!(!line(&codex).contains("$0"), "{}", line(&codex));
        let claude = bot("claude", 0.25);
        assert!(
            chat_title(&claude, "b", None).contains("$0.25"),
            "{}",
            chat_title(&claude, "b", None)
        );
        assert!(line(&claude).contains("$0.25"), "{}", line(&claude));
        let free = bot("claude", 0.0);
        assert!(
            chat_title(&free, "b", None).contains("$0"),
            "{}",
            chat_title(&free, "b", None)
        );
        // Issue 49: the next fire of the bot's schedules, in local time.
        let soon = now.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() + 600;
        let title = chat_title(&free, "b", Some(soon as i64));
        assert!(
            title.contains(&format!("next fire {}", botvisor::time::local_time(soon))),
            "{title}"
        );
        assert!(!chat_title(&free, "b", None).contains("next fire"));
    }

    #[test]
    fn ages_are_one_short_word() {
        let now = SystemTime::now();
        let before = |s| Some(now - std::time::Duration::from_secs(s));
        assert_eq!(ago(before(5), now), "5s");
        assert_eq!(ago(before(300), now), "5m");
        assert_eq!(ago(before(7200), now), "2h");
        assert_eq!(ago(before(200_000), now), "2d");
        assert_eq!(ago(None, now), "-");
    }
}
