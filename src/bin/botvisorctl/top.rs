//! `botvisorctl top`: every bot's memory, CPU and tasks, refreshed every `--interval` seconds.
//!
//! In a terminal it redraws a table in the alternate screen (as `list` lays it out) until `q` or
//! Ctrl-C; with `--json`, or when stdout is not a terminal, it prints one JSON line per refresh.
//! CPU% is the growth of `CPUUsageNSec` between two refreshes over the time between them.

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::mpsc;
use zbus::Connection;

use super::bots::{self, BotInfo, known};
use super::fail::{Failure, NOT_RUNNING, OK};
use super::list::{bytes, count, cpu_time, table};
use super::show;

mod fleet;
pub use fleet::run_fleet;

/// What a bot's previous refresh read: when, its CPU time (ns) and its agent's pid.
#[derive(Debug, Clone, Copy)]
struct Seen {
    at: Instant,
    cpu_nsec: u64,
    pid: u32,
}

/// The share of one CPU the bot's agent used between two readings, in percent (200 for two CPUs
/// busy): `None` when either reading is not known (`u64::MAX`), the agent changed (another
/// pid: its CPU time started again), or no time passed.
pub fn cpu_percent(
    before_nsec: u64,
    before_pid: u32,
    now_nsec: u64,
    now_pid: u32,
    elapsed: Duration,
) -> Option<f64> {
    if before_nsec == u64::MAX
        || now_nsec == u64::MAX
        || before_pid != now_pid
        || now_pid == 0
        || now_nsec < before_nsec
        || elapsed.is_zero()
    {
        return None;
    }
    Some((now_nsec - before_nsec) as f64 / elapsed.as_nanos() as f64 * 100.0)
}

/// CPU% as the table shows it: `12.5`, `-` when not known.
pub fn shown_percent(p: Option<f64>) -> String {
    p.map_or_else(|| "-".to_owned(), |p| format!("{p:.1}"))
}

/// The terminal while `top` draws in it: the alternate screen without its cursor (or, for a
/// given number of refreshes, the screen itself, redrawn in place, so that the last refresh
/// stays), and stdin without line editing or echo (Ctrl-C still signals); put back as it was
/// when dropped.
struct Screen {
    saved: Option<libc::termios>,
    /// Whether it draws in the alternate screen.
    alternate: bool,
    /// How many lines the last refresh drew (in place: where the next one starts).
    drawn: std::cell::Cell<usize>,
}

impl Screen {
    fn enter(keys: bool, alternate: bool) -> Screen {
        let saved = keys.then(|| {
            // SAFETY: tcgetattr(3)/tcsetattr(3) on stdin with a termios it fills in.
            unsafe {
                let mut t: libc::termios = std::mem::zeroed();
                if libc::tcgetattr(libc::STDIN_FILENO, &mut t) != 0 {
                    return None;
                }
                let saved = t;
                t.c_lflag &= !(libc::ICANON | libc::ECHO);
                t.c_cc[libc::VMIN] = 1;
                t.c_cc[libc::VTIME] = 0;
                (libc::tcsetattr(libc::STDIN_FILENO, libc::TCSANOW, &t) == 0).then_some(saved)
            }
        });
        // Terminal controls, not colours: written past anstream.
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(if alternate {
            b"\x1b[?1049h\x1b[?25l"
        } else {
            b"\x1b[?25l"
        });
        let _ = out.flush();
        Screen {
            saved: saved.flatten(),
            alternate,
            drawn: std::cell::Cell::new(0),
        }
    }

    /// Draws `lines` from the top left (in place: where the last refresh began), each cut to
    /// the terminal's height.
    fn draw(&self, lines: &[String]) {
        let height = terminal_size::terminal_size().map_or(usize::MAX, |(_, h)| h.0 as usize);
        let mut text = if self.alternate {
            String::from("\x1b[H")
        } else {
            match self.drawn.get() {
                0 => String::from("\r"),
                n => format!("\x1b[{n}A\r"),
            }
        };
        let shown: Vec<&String> = lines.iter().take(height.saturating_sub(1).max(1)).collect();
        for line in &shown {
            text.push_str(line);
            text.push_str("\x1b[K\n");
        }
        self.drawn.set(shown.len());
        text.push_str("\x1b[J");
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(text.as_bytes());
        let _ = out.flush();
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(if self.alternate {
            b"\x1b[?25h\x1b[?1049l"
        } else {
            b"\x1b[?25h"
        });
        let _ = out.flush();
        if let Some(t) = &self.saved {
            // SAFETY: puts back the termios read in `enter`.
            unsafe {
                libc::tcsetattr(libc::STDIN_FILENO, libc::TCSANOW, t);
            }
        }
    }
}

/// Where `top` shows its refreshes: a [`Screen`] when stdout is a terminal and `--json` is not
/// given (`-n N`: the last refresh stays on the screen, drawn in place, not in the alternate
/// one), and the keys typed when stdin is a terminal too.
fn terminal(
    json: bool,
    iterations: Option<u64>,
) -> (Option<Screen>, Option<mpsc::UnboundedReceiver<u8>>) {
    let on_screen = !json && std::io::stdout().is_terminal();
    let typed = on_screen && std::io::stdin().is_terminal();
    let screen = on_screen.then(|| Screen::enter(typed, iterations.is_none()));
    (screen, typed.then(keys))
}

/// The keys typed at the terminal, one byte each, read by a thread for the life of the command.
fn keys() -> mpsc::UnboundedReceiver<u8> {
    let (tx, rx) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        use std::io::Read;
        let mut stdin = std::io::stdin();
        let mut b = [0u8; 1];
        while let Ok(1) = stdin.read(&mut b) {
            if tx.send(b[0]).is_err() {
                break;
            }
        }
    });
    rx
}

/// One bot of one refresh as JSON: its identity, state and usage, with `cpu_percent` (`null`
/// when not known).
fn row_json(b: &BotInfo, cpu: Option<f64>) -> Value {
    json!({
        "id": b.id,
        "short_id": b.short,
        "name": b.name,
        "state": b.state,
        "process_id": b.process_id,
        "memory_current": known(b.memory_current),
        "memory_max": known(b.memory_max),
        "cpu_usage_nsec": known(b.cpu_usage_nsec),
        "cpu_percent": cpu.map(|p| (p * 10.0).round() / 10.0),
        "tasks_current": known(b.tasks_current),
    })
}

/// The lines of one refresh in the terminal.
fn screen_lines(all: &[(BotInfo, Option<f64>)], interval: f64) -> Vec<String> {
    let mut lines = vec![format!(
        "botvisorctl top: {} bot(s), every {interval}s; q or Ctrl-C quits",
        all.len()
    )];
    if all.is_empty() {
        lines.push(format!(
            "no bots; create one with `{} create --cwd DIR`",
            super::hint::ctl()
        ));
        return lines;
    }
    let rows = all
        .iter()
        .map(|(b, cpu)| {
            vec![
                show::safe(&b.short),
                show::safe(&b.name),
                show::safe(&b.shown_state()),
                bytes(b.memory_current),
                shown_percent(*cpu),
                cpu_time(b.cpu_usage_nsec),
                count(b.tasks_current),
            ]
        })
        .collect();
    lines.extend(table(
        &["ID", "NAME", "STATE", "MEMORY", "CPU%", "CPU", "TASKS"],
        rows,
    ));
    lines
}

/// The lines of a refresh in the terminal while botvisord is not on the bus.
fn gone_lines(interval: f64) -> Vec<String> {
    vec![
        format!("botvisorctl top: every {interval}s; q or Ctrl-C quits"),
        show::paint(
            show::ERROR,
            "botvisord is not running on this bus; waiting for it to come back",
        ),
    ]
}

/// Prints one JSON line; false when the reader went away (`| head`), which ends `top` as Ctrl-C
/// does.
fn print_line(line: &Value) -> bool {
    let line = line.to_string();
    let text = botvisor::text::escape_json(&line);
    let mut out = std::io::stdout().lock();
    writeln!(out, "{text}").and_then(|()| out.flush()).is_ok()
}

/// `top`: refreshes every `interval` seconds, `iterations` times (else until q or Ctrl-C).
/// While botvisord is not on the bus (stopped, restarting) it says so (in the terminal, or once
/// as `{"event": "daemon_left", "time"}`) and goes on when it is back (`{"event": "daemon_back",
/// "time"}`); such refreshes are not counted in `iterations`.
pub async fn run(
    conn: &Connection,
    interval: f64,
    iterations: Option<u64>,
    json: bool,
) -> Result<u8, Failure> {
    let ctrl_c = stop_asked();
    tokio::pin!(ctrl_c);
    let (screen, mut keys) = terminal(json, iterations);
    let mut seen: HashMap<String, Seen> = HashMap::new();
    let mut done = 0u64;
    // Whether botvisord was away at the last refresh.
    let mut away = false;
    loop {
        match bots::all(conn).await {
            Ok(all) => {
                if std::mem::take(&mut away)
                    && screen.is_none()
                    && !print_line(&json!({"event": "daemon_back",
                                           "time": botvisor::time::now_rfc3339()}))
                {
                    return Ok(OK);
                }
                let now = Instant::now();
                let rows = with_cpu(all, &seen, now);
                seen = seen_now(&rows, now);
                match &screen {
                    Some(screen) => screen.draw(&screen_lines(&rows, interval)),
                    None => {
                        let line = json!({
                            "time": botvisor::time::now_rfc3339(),
                            "bots": rows.iter().map(|(b, cpu)| row_json(b, *cpu)).collect::<Vec<_>>(),
                        });
                        if !print_line(&line) {
                            return Ok(OK);
                        }
                    }
                }
                done += 1;
                if iterations.is_some_and(|n| done >= n) {
                    return Ok(OK);
                }
            }
            Err(f) if f.text == NOT_RUNNING => {
                seen.clear();
                match &screen {
                    Some(screen) => screen.draw(&gone_lines(interval)),
                    None if !away
                        && !print_line(&json!({"event": "daemon_left",
                                               "time": botvisor::time::now_rfc3339()})) =>
                    {
                        return Ok(OK);
                    }
                    None => {}
                }
                away = true;
            }
            Err(f) => return Err(f),
        }
        if quit_while_waiting(
            Duration::from_secs_f64(interval),
            ctrl_c.as_mut(),
            &mut keys,
        )
        .await
        {
            return Ok(OK);
        }
    }
}

/// Waits `left` for the next refresh; true when `top` is to end meanwhile: `stop` ended (a
/// signal) or `q` was typed. A terminal whose input ended leaves only the signals.
async fn quit_while_waiting(
    left: Duration,
    mut stop: std::pin::Pin<&mut impl std::future::Future<Output = ()>>,
    keys: &mut Option<mpsc::UnboundedReceiver<u8>>,
) -> bool {
    let sleep = tokio::time::sleep(left);
    tokio::pin!(sleep);
    loop {
        tokio::select! {
            () = &mut sleep => return false,
            () = &mut stop => return true,
            key = async {
                match keys.as_mut() {
                    Some(k) => k.recv().await,
                    None => std::future::pending().await,
                }
            } => match key {
                Some(b'q' | b'Q') => return true,
                Some(_) => {}
                None => *keys = None,
            },
        }
    }
}

/// Ends when `top` is asked to stop by a signal: Ctrl-C (SIGINT), SIGTERM or SIGHUP (the
/// terminal closed), so that the terminal is put back (`Screen`'s drop) and `top` exits 0.
/// SIGTERM and SIGHUP are taken from this call on.
fn stop_asked() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).ok();
    let mut hup = signal(SignalKind::hangup()).ok();
    async move {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = next(&mut term) => {}
            _ = next(&mut hup) => {}
        }
    }
}

/// The next delivery of `s`; never, for a signal that could not be taken.
async fn next(s: &mut Option<tokio::signal::unix::Signal>) {
    match s {
        Some(s) => {
            s.recv().await;
        }
        None => std::future::pending::<()>().await,
    }
}

/// What this refresh read of each bot, by id, for the next one's CPU%.
fn seen_now(rows: &[(BotInfo, Option<f64>)], now: Instant) -> HashMap<String, Seen> {
    rows.iter()
        .map(|(b, _)| {
            let s = Seen {
                at: now,
                cpu_nsec: b.cpu_usage_nsec,
                pid: b.process_id,
            };
            (b.id.clone(), s)
        })
        .collect()
}

/// Each bot with its CPU% since the refresh `seen` holds.
fn with_cpu(
    all: Vec<BotInfo>,
    seen: &HashMap<String, Seen>,
    now: Instant,
) -> Vec<(BotInfo, Option<f64>)> {
    all.into_iter()
        .map(|b| {
            let cpu = seen.get(&b.id).and_then(|s| {
                cpu_percent(
                    s.cpu_nsec,
                    s.pid,
                    b.cpu_usage_nsec,
                    b.process_id,
                    now - s.at,
                )
            });
            (b, cpu)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_percent_is_the_growth_of_cpu_time_over_the_time_between_refreshes() {
        let s = Duration::from_secs(2);
        assert_eq!(cpu_percent(0, 7, 1_000_000_000, 7, s), Some(50.0));
        assert_eq!(cpu_percent(1, 7, 4_000_000_001, 7, s), Some(200.0));
        assert_eq!(cpu_percent(5, 7, 5, 7, s), Some(0.0));
        assert_eq!(cpu_percent(u64::MAX, 7, 5, 7, s), None, "first sample");
        assert_eq!(cpu_percent(5, 7, u64::MAX, 7, s), None, "agent stopped");
        assert_eq!(cpu_percent(9, 7, 5, 8, s), None, "another agent");
        assert_eq!(cpu_percent(0, 0, 0, 0, s), None, "no agent");
        assert_eq!(cpu_percent(0, 7, 5, 7, Duration::ZERO), None);
        assert_eq!(shown_percent(Some(12.345)), "12.3");
        assert_eq!(shown_percent(None), "-");
    }
}
