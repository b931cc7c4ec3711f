//! `botvisorctl ui`: a terminal dashboard on the same D-Bus API (ratatui on crossterm): every bot
//! with its state, runtime, cost, open prompts and last activity; the selected bot's chat
//! following live; its open prompt answered with a key (allow, always allow, deny with words);
//! a message written and sent; interrupt, stop, restart.
//!
//! One loop owns the screen and the [`model::Model`]. It reads three channels and never waits
//! for the bus itself: botvisord's signals (moved on at once by a task of their own,
//! [`crate::drain`]), the outcomes of the calls a key asked for (each made by a task of its own
//! with a bound, [`calls`]), and the keys and resizes of the terminal (read by a thread). The
//! terminal is put back as it was on every way out: `q`, Ctrl-C, SIGTERM, SIGHUP, SIGINT, a lost
//! connection, a panic.

mod calls;
mod links;
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
use crate::drain::Drained;
use crate::fail::{Failure, OK};
use model::Link;
use model::{Action, BotKey, Call, Host, Item, Model, Outcome, Signal};

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

/// The calls waiting for their turn: chats are read a few at a time on each host, the rest at
/// once.
#[derive(Default)]
struct Calls {
    chats: VecDeque<BotKey>,
    reading: HashMap<usize, usize>,
}

impl Calls {
    /// Asks for `call` on its host's connection (`conns`); a call for a host not linked now
    /// is dropped when it reads (it is asked again once the host is back) and said to have
    /// failed, with why, when it changes a bot.
    fn ask(
        &mut self,
        conns: &[Option<Connection>],
        model: &mut Model,
        call: Call,
        tx: &mpsc::UnboundedSender<Outcome>,
    ) {
        let host = call.host();
        let Some(Some(conn)) = conns.get(host) else {
            if !matches!(
                call,
                Call::LoadBots(_) | Call::LoadChat(_) | Call::LoadSchedules(_)
            ) {
                model.outcome(Outcome::Failed(offline(model, host)));
            }
            return;
        };
        let who = if model.is_fleet() {
            model.hosts[host].name.as_str()
        } else {
            ""
        };
        match call {
            Call::LoadChat(key) => {
                if !self.chats.contains(&key) {
                    self.chats.push_back(key);
                }
            }
            Call::LoadBots(host) => {
                self.chats.retain(|k| k.host != host);
                calls::spawn(conn, Call::LoadBots(host), tx.clone(), who);
            }
            other => calls::spawn(conn, other, tx.clone(), who),
        }
    }

    /// Host `host`'s link is down: its chats waiting are dropped (read again once it is back),
    /// and those being read no longer count.
    fn forget(&mut self, host: usize) {
        self.chats.retain(|k| k.host != host);
        self.reading.remove(&host);
    }

    /// Reads `key`'s chat before the others waiting (the bot the user chose).
    fn prefer(&mut self, key: Option<&BotKey>) {
        if let Some(at) = key.and_then(|p| self.chats.iter().position(|c| c == p))
            && at > 0
        {
            let p = self.chats.remove(at).expect("in the queue");
            self.chats.push_front(p);
        }
    }

    fn chat_done(&mut self, host: usize) {
        if let Some(n) = self.reading.get_mut(&host) {
            *n = n.saturating_sub(1);
        }
    }

    /// Starts the chats waiting, at most [`CHATS_AT_ONCE`] at a time on each host.
    fn next(&mut self, conns: &[Option<Connection>], tx: &mpsc::UnboundedSender<Outcome>) {
        let mut waiting = VecDeque::new();
        while let Some(key) = self.chats.pop_front() {
            let Some(Some(conn)) = conns.get(key.host) else {
                continue;
            };
            let reading = self.reading.entry(key.host).or_default();
            if *reading >= CHATS_AT_ONCE {
                waiting.push_back(key);
                continue;
            }
            *reading += 1;
            calls::spawn(conn, Call::LoadChat(key), tx.clone(), "");
        }
        self.chats = waiting;
    }
}

/// What is said of a call to host `host` while its link is down.
fn offline(model: &Model, host: usize) -> String {
    let h = &model.hosts[host];
    let name = crate::show::safe(&h.name);
    match &h.link {
        Link::Offline { since, why, .. } => format!(
            "{name} is offline ({}: {}); nothing was done there",
            view::since(*since),
            crate::show::safe(why)
        ),
        _ => format!("{name} is not reached yet; nothing was done there"),
    }
}

/// Usage error (exit 2) when stdin or stdout is not a terminal.
fn need_terminal() -> Result<(), Failure> {
    if !std::io::stdout().is_terminal() || !std::io::stdin().is_terminal() {
        return Err(Failure::usage(
            "botvisorctl ui needs a terminal; `botvisorctl watch` and `list` work in a pipe",
        ));
    }
    Ok(())
}

/// Runs the dashboard on `conn` until `q`, Ctrl-C, SIGTERM, SIGHUP or SIGINT (exit 0), or a lost
/// connection (exit 1, saying so). Usage error (exit 2) when stdin or stdout is not a terminal.
pub async fn run(conn: &Connection) -> Result<u8, Failure> {
    need_terminal()?;
    let (tx, feed) = mpsc::unbounded_channel();
    // Subscribed before the bots are read: nothing falls between.
    links::one(conn, tx).await?;
    let model = Model::new(vec![Host::new("", crate::hint::ctl())]);
    dashboard(model, feed, true).await
}

/// Runs the dashboard over several hosts (issue 51): every bot of every member in one list,
/// each named with its host; a host whose link is down greys its rows and is linked again by
/// itself, the others going on. Ends as [`run`] does, but for a lost link, which is not an end.
pub async fn run_fleet(members: &[crate::fleet::Member]) -> Result<u8, Failure> {
    need_terminal()?;
    let (tx, feed) = mpsc::unbounded_channel();
    links::fleet(members, &tx);
    drop(tx);
    let hosts = members
        .iter()
        .map(|m| Host::new(&m.name, &crate::hint::ctl_for(m)))
        .collect();
    dashboard(Model::new(hosts), feed, false).await
}

/// The dashboard's loop over `model`, fed by the hosts' links (`feed`); `ends_when_lost`: a
/// link down ends it (one bus).
async fn dashboard(
    mut model: Model,
    mut feed: mpsc::UnboundedReceiver<links::Feed>,
    ends_when_lost: bool,
) -> Result<u8, Failure> {
    // The screen is the dashboard's: the links' programs (ssh) print nothing over it; what
    // they say is said in their links' failures.
    crate::connect::quiet_programs();
    let (tx, mut outcomes) = mpsc::unbounded_channel();
    let mut keys = terminal_events();
    let mut term_signals = (
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .map_err(|e| Failure::failed(format!("cannot watch SIGTERM: {e}")))?,
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
            .map_err(|e| Failure::failed(format!("cannot watch SIGHUP: {e}")))?,
        // Ctrl-C at the keyboard is a key in raw mode; a SIGINT from another program (`kill
        // -INT`, `timeout -s INT`) ends the dashboard as SIGTERM does, the terminal put back.
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
            .map_err(|e| Failure::failed(format!("cannot watch SIGINT: {e}")))?,
    );
    let mut screen =
        Screen::enter().map_err(|e| Failure::failed(format!("cannot use the terminal: {e}")))?;
    let mut conns: Vec<Option<Connection>> = vec![None; model.hosts.len()];
    let mut pending = Calls::default();
    let mut tick = tokio::time::interval(TICK);
    loop {
        let drawn = screen
            .terminal
            .draw(|frame| view::draw(frame, &model, SystemTime::now()));
        if let Err(e) = drawn {
            drop(screen);
            return Err(Failure::failed(format!("cannot draw on the terminal: {e}")));
        }
        let mut actions = Vec::new();
        let mut lost = None;
        // One thing, then everything else already there, before the screen is drawn again.
        tokio::select! {
            fed = feed.recv() => match fed {
                Some(f) => lost = on_feed(&mut model, &mut conns, &mut pending, f, &mut actions),
                None => lost = Some(String::new()),
            },
            Some(outcome) = outcomes.recv() => on_outcome(&mut model, &mut pending, outcome, &mut actions),
            Some(event) = keys.recv() => on_key(&mut model, event, &mut actions),
            _ = tick.tick() => {}
            _ = term_signals.0.recv() => return Ok(OK),
            _ = term_signals.1.recv() => return Ok(OK),
            _ = term_signals.2.recv() => return Ok(OK),
        }
        while lost.is_none() && !actions.contains(&Action::Quit) {
            if let Ok(f) = feed.try_recv() {
                lost = on_feed(&mut model, &mut conns, &mut pending, f, &mut actions);
            } else if let Ok(outcome) = outcomes.try_recv() {
                on_outcome(&mut model, &mut pending, outcome, &mut actions);
            } else if let Ok(event) = keys.try_recv() {
                on_key(&mut model, event, &mut actions);
            } else {
                break;
            }
        }
        if lost.is_some() && ends_when_lost {
            drop(screen);
            return Err(lost_connection());
        }
        if actions.contains(&Action::Quit) {
            return Ok(OK);
        }
        for action in actions {
            if let Action::Call(call) = action {
                pending.ask(&conns, &mut model, call, &tx);
            }
        }
        pending.prefer(model.selected.as_ref());
        pending.next(&conns, &tx);
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

/// What a link told; `Some(why)` when a host's link is down.
fn on_feed(
    model: &mut Model,
    conns: &mut [Option<Connection>],
    pending: &mut Calls,
    fed: links::Feed,
    actions: &mut Vec<Action>,
) -> Option<String> {
    let now = SystemTime::now();
    match fed {
        links::Feed::Up(host, conn, which) => {
            if let Some(c) = conns.get_mut(host) {
                *c = Some(conn);
            }
            actions.extend(model.signal(host, Signal::Linked(which), now));
        }
        links::Feed::Bus(host, event) => on_event(model, host, event, actions),
        links::Feed::Down(host, why) => {
            if let Some(c) = conns.get_mut(host) {
                *c = None;
            }
            pending.forget(host);
            actions.extend(model.signal(host, Signal::Unlinked(why.clone()), now));
            return Some(why);
        }
    }
    None
}

/// One thing read off host `host`'s bus.
fn on_event(model: &mut Model, host: usize, event: links::Event, actions: &mut Vec<Action>) {
    match event {
        Drained::First(Ok(msg)) => {
            if let Some(signal) = signal_of(&msg) {
                actions.extend(model.signal(host, signal, SystemTime::now()));
            }
        }
        // A lost link is the link's news (Feed::Down); other errors are dropped.
        Drained::First(Err(_)) => {}
        Drained::Second(change) => {
            if let Ok(a) = change.args() {
                let signal = if a.new_owner().is_some() {
                    Signal::DaemonBack
                } else {
                    Signal::DaemonLeft
                };
                actions.extend(model.signal(host, signal, SystemTime::now()));
            }
        }
    }
}

fn on_outcome(model: &mut Model, pending: &mut Calls, outcome: Outcome, actions: &mut Vec<Action>) {
    if let Outcome::Chat(key, _) | Outcome::ChatFailed(key, _) = &outcome {
        pending.chat_done(key.host);
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
