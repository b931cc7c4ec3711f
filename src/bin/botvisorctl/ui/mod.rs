//! `botvisorctl ui`: a terminal dashboard on the same D-Bus API (ratatui on crossterm): every bot
//! with its state, runtime, cost, open prompts and last activity; the selected bot's chat
//! following live; its open prompt answered with a key (allow, always allow, deny with words);
//! a message written and sent; interrupt, stop, restart.
//!
//! One loop owns the screen and the [`model::Model`]. It reads three channels and never waits
//! for the bus itself: botvisord's signals (moved on at once by a task of their own,
//! [`crate::drain`]), the outcomes of the calls a key asked for (each made by a task of its own
//! with a bound, [`calls`]), and the keys and resizes of the terminal (read by a thread). The
//! terminal is put back as it was on every way out: `q`, Ctrl-C, SIGTERM, SIGHUP, a lost
//! connection, a panic.

mod calls;
pub mod model;
mod view;

use std::collections::{HashMap, VecDeque};
use std::io::IsTerminal;
use std::time::{Duration, SystemTime};

use crossterm::event::{Event, KeyEventKind};
use ratatui::Terminal;
use ratatui::backend::CrosstermBackend;
use tokio::sync::mpsc;
use zbus::OwnedVariant as OwnedValue;
use zbus::{Connection, OwnedObjectPath};

use botvisor::dbus::{BOT_INTERFACE, ROOT_PATH};

use crate::bots::BotInfo;
use crate::drain::{Drained, botvisor_signals};
use crate::fail::{Failure, OK};
use model::{Action, Call, Item, Model, Outcome, Signal};

/// How many chats are read at once (the selected bot's first).
const CHATS_AT_ONCE: usize = 3;

/// How often the screen is drawn again with nothing new (the ages in the list).
const TICK: Duration = Duration::from_secs(1);

/// The terminal in the dashboard's hands: raw, in the alternate screen. Put back when dropped,
/// and by the panic hook [`Screen::enter`] installs.
struct Screen {
    terminal: Terminal<CrosstermBackend<std::io::Stdout>>,
}

/// Puts the terminal back: out of raw mode and the alternate screen, the cursor shown.
fn restore() {
    let _ = crossterm::terminal::disable_raw_mode();
    let _ = crossterm::execute!(
        std::io::stdout(),
        crossterm::terminal::LeaveAlternateScreen,
        crossterm::cursor::Show
    );
}

impl Screen {
    fn enter() -> std::io::Result<Screen> {
        let hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            restore();
            hook(info);
        }));
        crossterm::terminal::enable_raw_mode()?;
        crossterm::execute!(std::io::stdout(), crossterm::terminal::EnterAlternateScreen)?;
        let terminal = Terminal::new(CrosstermBackend::new(std::io::stdout()))?;
        Ok(Screen { terminal })
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        let _ = self.terminal.show_cursor();
        restore();
    }
}

/// The terminal's events, read by a thread for the life of the command.
fn terminal_events() -> mpsc::UnboundedReceiver<Event> {
    let (tx, rx) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        while let Ok(event) = crossterm::event::read() {
            if tx.send(event).is_err() {
                return;
            }
        }
    });
    rx
}

/// A signal of botvisord as the model reads it; `None` for one it does not need.
fn signal_of(msg: &zbus::Message) -> Option<Signal> {
    let hdr = msg.header();
    let path = hdr.path()?.to_string();
    let member = hdr.member()?.to_string();
    let body = msg.body();
    match member.as_str() {
        "ChatItemAdded" => {
            let (seq, kind, payload): (u64, String, String) = body.deserialize().ok()?;
            Some(Signal::Item(path, Item::new(seq, &kind, "", &payload)))
        }
        "TextDelta" => {
            let (_turn, text): (String, String) = body.deserialize().ok()?;
            Some(Signal::Delta(path, text))
        }
        "TurnFinished" => Some(Signal::TurnFinished(path)),
        "PropertiesChanged" => {
            let (iface, changed, _): (String, HashMap<String, OwnedValue>, Vec<String>) =
                body.deserialize().ok()?;
            if iface == botvisor::dbus::schedules::SCHEDULES_INTERFACE {
                return Some(Signal::SchedulesChanged);
            }
            (iface == BOT_INTERFACE).then_some(Signal::Properties(path, changed))
        }
        "InterfacesAdded" if path == ROOT_PATH => {
            let (p, ifaces): (
                OwnedObjectPath,
                HashMap<String, HashMap<String, OwnedValue>>,
            ) = body.deserialize().ok()?;
            let props = ifaces.get(BOT_INTERFACE)?;
            Some(Signal::Added(Box::new(BotInfo::from_properties(
                p.as_str(),
                props,
            ))))
        }
        "InterfacesRemoved" if path == ROOT_PATH => {
            let (p, ifaces): (OwnedObjectPath, Vec<String>) = body.deserialize().ok()?;
            ifaces
                .iter()
                .any(|i| i == BOT_INTERFACE)
                .then(|| Signal::Removed(p.to_string()))
        }
        _ => None,
    }
}

/// The calls waiting for their turn: chats are read a few at a time, the rest at once.
#[derive(Default)]
struct Calls {
    chats: VecDeque<String>,
    reading: usize,
}

impl Calls {
    fn ask(&mut self, conn: &Connection, call: Call, tx: &mpsc::UnboundedSender<Outcome>) {
        match call {
            Call::LoadChat(path) => {
                if !self.chats.contains(&path) {
                    self.chats.push_back(path);
                }
            }
            Call::LoadBots => {
                self.chats.clear();
                calls::spawn(conn, Call::LoadBots, tx.clone());
            }
            other => calls::spawn(conn, other, tx.clone()),
        }
    }

    /// Reads `path`'s chat before the others waiting (the bot the user chose).
    fn prefer(&mut self, path: Option<&String>) {
        if let Some(at) = path.and_then(|p| self.chats.iter().position(|c| c == p))
            && at > 0
        {
            let p = self.chats.remove(at).expect("in the queue");
            self.chats.push_front(p);
        }
    }

    fn chat_done(&mut self) {
        self.reading = self.reading.saturating_sub(1);
    }

    fn next(&mut self, conn: &Connection, tx: &mpsc::UnboundedSender<Outcome>) {
        while self.reading < CHATS_AT_ONCE {
            let Some(path) = self.chats.pop_front() else {
                return;
            };
            self.reading += 1;
            calls::spawn(conn, Call::LoadChat(path), tx.clone());
        }
    }
}

/// Runs the dashboard until `q`, Ctrl-C, SIGTERM or SIGHUP (exit 0), or a lost connection
/// (exit 1, saying so). Usage error (exit 2) when stdin or stdout is not a terminal.
pub async fn run(conn: &Connection) -> Result<u8, Failure> {
    if !std::io::stdout().is_terminal() || !std::io::stdin().is_terminal() {
        return Err(Failure::usage(
            "botvisorctl ui needs a terminal; `botvisorctl watch` and `list` work in a pipe",
        ));
    }
    // Subscribed before the bots are read: nothing falls between.
    let mut events = botvisor_signals(conn).await?;
    let (tx, mut outcomes) = mpsc::unbounded_channel();
    let mut keys = terminal_events();
    let mut term_signals = (
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .map_err(|e| Failure::failed(format!("cannot watch SIGTERM: {e}")))?,
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
            .map_err(|e| Failure::failed(format!("cannot watch SIGHUP: {e}")))?,
    );
    let mut screen =
        Screen::enter().map_err(|e| Failure::failed(format!("cannot use the terminal: {e}")))?;
    let mut model = Model::default();
    let mut pending = Calls::default();
    pending.ask(conn, Call::LoadBots, &tx);
    pending.ask(conn, Call::LoadSchedules, &tx);
    let mut tick = tokio::time::interval(TICK);
    let ctl = crate::hint::ctl();
    loop {
        let drawn = screen
            .terminal
            .draw(|frame| view::draw(frame, &model, ctl, SystemTime::now()));
        if let Err(e) = drawn {
            drop(screen);
            return Err(Failure::failed(format!("cannot draw on the terminal: {e}")));
        }
        let mut actions = Vec::new();
        // One thing, then everything else already there, before the screen is drawn again.
        tokio::select! {
            event = events.recv() => match event {
                Some(e) => {
                    if let Some(lost) = on_event(&mut model, e, &mut actions) {
                        drop(screen);
                        return Err(lost);
                    }
                }
                None => {
                    drop(screen);
                    return Err(lost_connection());
                }
            },
            Some(outcome) = outcomes.recv() => on_outcome(&mut model, &mut pending, outcome, &mut actions),
            Some(event) = keys.recv() => on_key(&mut model, event, &mut actions),
            _ = tick.tick() => {}
            _ = term_signals.0.recv() => return Ok(OK),
            _ = term_signals.1.recv() => return Ok(OK),
        }
        loop {
            if let Ok(e) = events.try_recv() {
                if let Some(lost) = on_event(&mut model, e, &mut actions) {
                    drop(screen);
                    return Err(lost);
                }
            } else if let Ok(outcome) = outcomes.try_recv() {
                on_outcome(&mut model, &mut pending, outcome, &mut actions);
            } else if let Ok(event) = keys.try_recv() {
                on_key(&mut model, event, &mut actions);
            } else {
                break;
            }
            if actions.contains(&Action::Quit) {
                break;
            }
        }
        if actions.contains(&Action::Quit) {
            return Ok(OK);
        }
        for action in actions {
            if let Action::Call(call) = action {
                pending.ask(conn, call, &tx);
            }
        }
        pending.prefer(model.selected.as_ref());
        pending.next(conn, &tx);
    }
}

/// What the connection's loss is said with.
fn lost_connection() -> Failure {
    Failure::failed(format!(
        "{} was lost; what happens in botvisord goes on. Start `{} ui` again",
        crate::hint::link(),
        crate::hint::ctl()
    ))
}

/// One thing read off the bus; `Some` when the connection is lost.
fn on_event(
    model: &mut Model,
    event: Drained<zbus::Result<zbus::Message>, zbus::fdo::NameOwnerChanged>,
    actions: &mut Vec<Action>,
) -> Option<Failure> {
    match event {
        Drained::First(Ok(msg)) => {
            if let Some(signal) = signal_of(&msg) {
                actions.extend(model.signal(signal, SystemTime::now()));
            }
        }
        Drained::First(Err(e)) if crate::fail::is_lost(&e) => return Some(lost_connection()),
        Drained::First(Err(_)) => {}
        Drained::Second(change) => {
            if let Ok(a) = change.args() {
                let signal = if a.new_owner().is_some() {
                    Signal::DaemonBack
                } else {
                    Signal::DaemonLeft
                };
                actions.extend(model.signal(signal, SystemTime::now()));
            }
        }
    }
    None
}

fn on_outcome(model: &mut Model, pending: &mut Calls, outcome: Outcome, actions: &mut Vec<Action>) {
    if matches!(outcome, Outcome::Chat(..) | Outcome::ChatFailed(..)) {
        pending.chat_done();
    }
    actions.extend(model.outcome(outcome));
}

fn on_key(model: &mut Model, event: Event, actions: &mut Vec<Action>) {
    match event {
        Event::Key(key) if key.kind != KeyEventKind::Release => actions.extend(model.key(key)),
        Event::Paste(text) => {
            for c in text.chars() {
                let key = crossterm::event::KeyEvent::new(
                    crossterm::event::KeyCode::Char(c),
                    crossterm::event::KeyModifiers::NONE,
                );
                if matches!(
                    model.mode,
                    model::Mode::Compose(_) | model::Mode::Deny { .. }
                ) {
                    actions.extend(model.key(key));
                }
            }
        }
        // A resize: the next draw fits the new size.
        _ => {}
    }
}
