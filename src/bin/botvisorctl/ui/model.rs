//! What the dashboard knows and what a key does, with no terminal and no bus: the bots and their
//! chats as the signals tell them, the selected bot, the line being written, and the calls a
//! key asks for ([`Call`]), which `ui::run` makes off the loop that reads the bus.

use std::collections::{HashMap, VecDeque};
use std::time::SystemTime;

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use serde_json::Value;

use crate::bots::BotInfo;

/// The most chat items kept per bot (the newest); older ones are read with `botvisorctl chat`.
pub const KEPT_ITEMS: usize = 500;

/// The most characters of one item's text kept for the screen.
pub const KEPT_TEXT: usize = 16 * 1024;

/// One chat item as the dashboard shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct Item {
    /// Its sequence number.
    pub seq: u64,
    /// `user`, `assistant`, `tool_use`, …
    pub kind: String,
    /// Its payload (a preview for an item over 1 MiB), strings cut to [`KEPT_TEXT`].
    pub payload: Value,
    /// When it was recorded (`GetChat`'s time; `None` for a signalled item).
    pub time: Option<SystemTime>,
}

/// A bot as the dashboard knows it.
#[derive(Debug, Clone, Default)]
pub struct Bot {
    /// Its properties.
    pub info: BotInfo,
    /// Its newest chat items, oldest first.
    pub chat: VecDeque<Item>,
    /// Whether its chat was read (before that, `chat` holds only what the signals brought).
    pub loaded: bool,
    /// The assistant text streaming now (`TextDelta`), not yet an item.
    pub partial: String,
    /// When it last said or was told something (its newest item, or a streamed piece).
    pub last_activity: Option<SystemTime>,
    /// The scopes each open request offers (its `permission_request` item's `scopes`), each
    /// with what it lets run (its `reach`).
    pub scopes: HashMap<String, Vec<(String, String)>>,
}

/// Whether botvisord is on the bus.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Daemon {
    /// The bots are being read.
    Loading,
    /// It answers.
    Up,
    /// It left the bus; the dashboard waits for it.
    Away,
}

/// What the line at the bottom is for.
#[derive(Debug, Clone, PartialEq)]
pub enum Mode {
    /// Keys are commands.
    Normal,
    /// Writing a message to the selected bot.
    Compose(String),
    /// Writing what the model is told with a deny of `request`.
    Deny {
        /// The request denied.
        request: String,
        /// The message so far.
        text: String,
    },
    /// The keys, shown over the chat.
    Help,
}

/// A call a key asks for, made by `ui::calls` with a bound; its outcome comes back as an
/// [`Outcome`].
#[derive(Debug, Clone, PartialEq)]
pub enum Call {
    /// Read every bot (`GetManagedObjects`).
    LoadBots,
    /// Read a bot's chat (its newest [`KEPT_ITEMS`]).
    LoadChat(String),
    /// `Send`.
    Send {
        /// The bot's path.
        bot: String,
        /// The message.
        text: String,
    },
    /// `RespondPermission`.
    Answer {
        /// The bot's path.
        bot: String,
        /// The request.
        request: String,
        /// `allow` or `deny`.
        behavior: &'static str,
        /// `once`, `session` or `always`.
        scope: String,
        /// What the model is told (deny); empty: the default.
        message: String,
    },
    /// `Interrupt`.
    Interrupt(String),
    /// `Stop`.
    Stop(String),
    /// `Restart`.
    Restart(String),
    /// Read the schedules (`Schedules`): each bot's next fire.
    LoadSchedules,
}

/// What a [`Call`] came to.
#[derive(Debug)]
pub enum Outcome {
    /// Every bot.
    Bots(Vec<BotInfo>),
    /// A bot's newest items.
    Chat(String, Vec<Item>),
    /// A bot's chat could not be read: why.
    ChatFailed(String, String),
    /// A call did what it was asked: what to say.
    Done(String),
    /// A call failed: what to say.
    Failed(String),
    /// The bots could not be read: botvisord is not on the bus.
    Absent,
    /// Each bot's next fire of a schedule, by bot path, in Unix seconds (a bot with none is
    /// left out; schedules that cannot be read count as none).
    Schedules(HashMap<String, i64>),
}

/// A signal of botvisord, read off the bus.
#[derive(Debug, Clone)]
pub enum Signal {
    /// `ChatItemAdded` on a bot.
    Item(String, Item),
    /// `TextDelta` on a bot.
    Delta(String, String),
    /// `TurnFinished` on a bot.
    TurnFinished(String),
    /// `PropertiesChanged` on a bot: its properties as `GetManagedObjects` names them.
    Properties(String, HashMap<String, zbus::OwnedVariant>),
    /// A bot appeared (`InterfacesAdded`).
    Added(Box<BotInfo>),
    /// A bot went (`InterfacesRemoved`).
    Removed(String),
    /// botvisord left the bus.
    DaemonLeft,
    /// botvisord is back on the bus.
    DaemonBack,
    /// The schedules changed (`PropertiesChanged` of `Schedules`).
    SchedulesChanged,
}

/// What a key (or a resize) leads to.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Make this call.
    Call(Call),
    /// End the dashboard.
    Quit,
}

/// Everything the dashboard shows.
#[derive(Debug)]
pub struct Model {
    /// The bots, sorted by name.
    pub bots: Vec<Bot>,
    /// The selected bot's path.
    pub selected: Option<String>,
    /// Whether botvisord is there.
    pub daemon: Daemon,
    /// What the bottom line is for.
    pub mode: Mode,
    /// The last thing said about a call: `(text, is_error)`.
    pub notice: Option<(String, bool)>,
    /// How many screen lines the chat is scrolled up from its end (0: it follows).
    pub scroll: usize,
    /// Each bot's next fire of a schedule (issue 49), by bot path, in Unix seconds.
    pub next_fires: HashMap<String, i64>,
}

impl Default for Model {
    fn default() -> Self {
        Model {
            bots: Vec::new(),
            selected: None,
            daemon: Daemon::Loading,
            mode: Mode::Normal,
            notice: None,
            scroll: 0,
            next_fires: HashMap::new(),
        }
    }
}

/// `s` cut to [`KEPT_TEXT`] characters, with `…` when cut.
fn kept(s: &str) -> String {
    match s.char_indices().nth(KEPT_TEXT) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_owned(),
    }
}

/// Every string in `v` cut to [`KEPT_TEXT`] characters.
fn kept_value(v: Value) -> Value {
    match v {
        Value::String(s) => Value::String(kept(&s)),
        Value::Array(a) => Value::Array(a.into_iter().map(kept_value).collect()),
        Value::Object(o) => Value::Object(o.into_iter().map(|(k, v)| (k, kept_value(v))).collect()),
        other => other,
    }
}

impl Item {
    /// An item from `GetChat` (with its RFC 3339 `time`) or `ChatItemAdded` (`time` empty): its
    /// payload parsed and its strings cut.
    pub fn new(seq: u64, kind: &str, time: &str, payload: &str) -> Item {
        Item {
            seq,
            kind: kind.to_owned(),
            payload: kept_value(serde_json::from_str(payload).unwrap_or(Value::Null)),
            time: humantime::parse_rfc3339(time).ok(),
        }
    }
}

impl Bot {
    fn new(info: BotInfo) -> Bot {
        Bot {
            info,
            ..Bot::default()
        }
    }

    /// Adds an item (in `seq` order; one seen already is left out), keeping the newest
    /// [`KEPT_ITEMS`].
    fn push(&mut self, item: Item, time: Option<SystemTime>) {
        if self.chat.back().is_some_and(|last| last.seq >= item.seq) {
            return;
        }
        if item.kind == "permission_request"
            && let Some(id) = item.payload["request_id"].as_str()
        {
            self.scopes
                .insert(id.to_owned(), crate::show::scopes(&item.payload));
        }
        if item.kind == "assistant" {
            self.partial.clear();
        }
        self.chat.push_back(item);
        while self.chat.len() > KEPT_ITEMS {
            self.chat.pop_front();
        }
        if let Some(t) = time.or(self.chat.back().and_then(|i| i.time)) {
            self.last_activity = Some(self.last_activity.map_or(t, |l| l.max(t)));
        }
    }

    /// The widest scope the oldest open request offers: `always`, else `session`, else `once`
    /// (or `once` while its request item is not read).
    pub fn widest_scope(&self, request: &str) -> &str {
        ["always", "session"]
            .into_iter()
            .find(|s| self.reach(request, s).is_some())
            .unwrap_or("once")
    }

    /// What an allow of `request` with `scope` lets run, when the request offers `scope`.
    pub fn reach(&self, request: &str, scope: &str) -> Option<&str> {
        self.scopes
            .get(request)?
            .iter()
            .find(|(s, _)| s == scope)
            .map(|(_, words)| words.as_str())
    }

    /// The oldest open request: `(request_id, tool, input_json)`.
    pub fn open_request(&self) -> Option<&crate::bots::Pending> {
        self.info.pending.first()
    }
}

impl Model {
    /// The selected bot.
    pub fn current(&self) -> Option<&Bot> {
        let path = self.selected.as_ref()?;
        self.bots.iter().find(|b| &b.info.path == path)
    }

    fn bot_mut(&mut self, path: &str) -> Option<&mut Bot> {
        self.bots.iter_mut().find(|b| b.info.path == path)
    }

    /// The selected bot's index in [`Model::bots`].
    pub fn selected_index(&self) -> Option<usize> {
        let path = self.selected.as_ref()?;
        self.bots.iter().position(|b| &b.info.path == path)
    }

    fn sort(&mut self) {
        self.bots.sort_by(|a, b| {
            a.info
                .name
                .cmp(&b.info.name)
                .then(a.info.id.cmp(&b.info.id))
        });
        let ids: Vec<&str> = self.bots.iter().map(|b| b.info.id.as_str()).collect();
        let shorts = crate::bots::short_ids(&ids);
        for b in &mut self.bots {
            if let Some(s) = shorts.get(&b.info.id) {
                b.info.short = s.clone();
            }
        }
    }

    /// The calls the selected bot needs: its chat, when not read yet.
    fn chat_wanted(&self) -> Vec<Action> {
        match self.current() {
            Some(b) if !b.loaded => vec![Action::Call(Call::LoadChat(b.info.path.clone()))],
            _ => Vec::new(),
        }
    }

    /// What a call came to; returns the calls that follow (the chats to read).
    pub fn outcome(&mut self, outcome: Outcome) -> Vec<Action> {
        match outcome {
            Outcome::Bots(infos) => {
                self.daemon = Daemon::Up;
                let mut old: HashMap<String, Bot> = self
                    .bots
                    .drain(..)
                    .map(|b| (b.info.path.clone(), b))
                    .collect();
                for info in infos {
                    let bot = match old.remove(&info.path) {
                        Some(mut b) => {
                            b.info = info;
                            b
                        }
                        None => Bot::new(info),
                    };
                    self.bots.push(bot);
                }
                self.sort();
                if self.current().is_none() {
                    self.selected = self.bots.first().map(|b| b.info.path.clone());
                    self.scroll = 0;
                }
                // Every chat is read, the selected bot's first: each bot's last activity shows.
                let mut calls = self.chat_wanted();
                for b in &self.bots {
                    if !b.loaded && Some(&b.info.path) != self.selected.as_ref() {
                        calls.push(Action::Call(Call::LoadChat(b.info.path.clone())));
                    }
                }
                calls
            }
            Outcome::Chat(path, items) => {
                if let Some(b) = self.bot_mut(&path) {
                    let signalled: Vec<Item> = b.chat.drain(..).collect();
                    b.loaded = true;
                    for item in items {
                        b.push(item, None);
                    }
                    for item in signalled {
                        b.push(item, None);
                    }
                }
                Vec::new()
            }
            Outcome::ChatFailed(path, why) => {
                // While botvisord is away its chats are read again when it is back.
                if self.daemon == Daemon::Away {
                    return Vec::new();
                }
                if let Some(b) = self.bot_mut(&path) {
                    b.loaded = true;
                }
                self.notice = Some((why, true));
                Vec::new()
            }
            Outcome::Done(text) => {
                self.notice = Some((text, false));
                Vec::new()
            }
            Outcome::Failed(text) => {
                self.notice = Some((text, true));
                Vec::new()
            }
            Outcome::Absent => {
                self.daemon = Daemon::Away;
                Vec::new()
            }
            Outcome::Schedules(next) => {
                self.next_fires = next;
                Vec::new()
            }
        }
    }

    /// What a signal tells; returns the calls that follow.
    pub fn signal(&mut self, signal: Signal, now: SystemTime) -> Vec<Action> {
        match signal {
            Signal::Item(path, item) => {
                if let Some(b) = self.bot_mut(&path) {
                    b.push(item, Some(now));
                }
            }
            Signal::Delta(path, text) => {
                if let Some(b) = self.bot_mut(&path) {
                    b.partial.push_str(&text);
                    if b.partial.len() > KEPT_TEXT * 4 {
                        let cut = b.partial.len() - KEPT_TEXT * 2;
                        let cut = (cut..b.partial.len())
                            .find(|i| b.partial.is_char_boundary(*i))
                            .unwrap_or(0);
                        b.partial.drain(..cut);
                    }
                    b.last_activity = Some(now);
                }
            }
            Signal::TurnFinished(path) => {
                if let Some(b) = self.bot_mut(&path) {
                    b.partial.clear();
                }
            }
            Signal::Properties(path, changed) => {
                if let Some(b) = self.bot_mut(&path) {
                    let mut props: HashMap<String, zbus::OwnedVariant> = HashMap::new();
                    for (k, v) in changed {
                        props.insert(k, v);
                    }
                    apply_properties(&mut b.info, &props);
                    if props.contains_key("Name") {
                        self.sort();
                    }
                }
            }
            Signal::Added(info) => {
                let info = *info;
                if self.bot_mut(&info.path).is_none() {
                    let path = info.path.clone();
                    self.bots.push(Bot::new(info));
                    self.sort();
                    if self.selected.is_none() {
                        self.selected = Some(path.clone());
                    }
                    return vec![Action::Call(Call::LoadChat(path))];
                }
            }
            Signal::Removed(path) => {
                let at = self.selected_index();
                self.bots.retain(|b| b.info.path != path);
                if self.selected.as_deref() == Some(path.as_str()) {
                    let i = at.unwrap_or(0).min(self.bots.len().saturating_sub(1));
                    self.selected = self.bots.get(i).map(|b| b.info.path.clone());
                    self.scroll = 0;
                    if !matches!(self.mode, Mode::Help) {
                        self.mode = Mode::Normal;
                    }
                    return self.chat_wanted();
                }
            }
            Signal::DaemonLeft => self.daemon = Daemon::Away,
            Signal::SchedulesChanged => return vec![Action::Call(Call::LoadSchedules)],
            Signal::DaemonBack => {
                self.daemon = Daemon::Loading;
                self.notice = None;
                for b in &mut self.bots {
                    b.loaded = false;
                    b.partial.clear();
                }
                return vec![
                    Action::Call(Call::LoadBots),
                    Action::Call(Call::LoadSchedules),
                ];
            }
        }
        Vec::new()
    }

    fn select(&mut self, step: isize) -> Vec<Action> {
        if self.bots.is_empty() {
            return Vec::new();
        }
        let at = self.selected_index().unwrap_or(0) as isize;
        let last = self.bots.len() as isize - 1;
        let to = (at + step).clamp(0, last) as usize;
        let path = self.bots[to].info.path.clone();
        if self.selected.as_ref() != Some(&path) {
            self.selected = Some(path);
            self.scroll = 0;
        }
        self.chat_wanted()
    }

    /// What `key` does; returns the calls it asks for.
    pub fn key(&mut self, key: KeyEvent) -> Vec<Action> {
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        if ctrl && matches!(key.code, KeyCode::Char('c') | KeyCode::Char('d')) {
            return match &self.mode {
                Mode::Compose(_) | Mode::Deny { .. } => {
                    self.mode = Mode::Normal;
                    Vec::new()
                }
                _ => vec![Action::Quit],
            };
        }
        match self.mode.clone() {
            Mode::Help => {
                self.mode = Mode::Normal;
                Vec::new()
            }
            Mode::Compose(text) => self.compose_key(key, text),
            Mode::Deny { request, text } => self.deny_key(key, request, text),
            Mode::Normal => self.normal_key(key),
        }
    }

    fn compose_key(&mut self, key: KeyEvent, mut text: String) -> Vec<Action> {
        match key.code {
            KeyCode::Esc => self.mode = Mode::Normal,
            KeyCode::Enter if text.trim().is_empty() => self.mode = Mode::Normal,
            KeyCode::Enter => {
                self.mode = Mode::Normal;
                self.scroll = 0;
                if let Some(b) = self.current() {
                    let bot = b.info.path.clone();
                    return vec![Action::Call(Call::Send { bot, text })];
                }
            }
            KeyCode::Backspace => {
                text.pop();
                self.mode = Mode::Compose(text);
            }
            KeyCode::Char(c) => {
                text.push(c);
                self.mode = Mode::Compose(text);
            }
            _ => {}
        }
        Vec::new()
    }

    fn deny_key(&mut self, key: KeyEvent, request: String, mut text: String) -> Vec<Action> {
        match key.code {
            KeyCode::Esc => self.mode = Mode::Normal,
            KeyCode::Enter => {
                self.mode = Mode::Normal;
                if let Some(b) = self.current() {
                    return vec![Action::Call(Call::Answer {
                        bot: b.info.path.clone(),
                        request,
                        behavior: "deny",
                        scope: "once".into(),
                        message: text,
                    })];
                }
            }
            KeyCode::Backspace => {
                text.pop();
                self.mode = Mode::Deny { request, text };
            }
            KeyCode::Char(c) => {
                text.push(c);
                self.mode = Mode::Deny { request, text };
            }
            _ => {}
        }
        Vec::new()
    }

    fn normal_key(&mut self, key: KeyEvent) -> Vec<Action> {
        let bot = self.current().map(|b| b.info.path.clone());
        let request = self
            .current()
            .and_then(|b| b.open_request().map(|(id, _, _)| id.clone()));
        let allow = |scope: String| match (&bot, &request) {
            (Some(bot), Some(request)) => vec![Action::Call(Call::Answer {
                bot: bot.clone(),
                request: request.clone(),
                behavior: "allow",
                scope,
                message: String::new(),
            })],
            _ => Vec::new(),
        };
        match key.code {
            KeyCode::Char('q') => return vec![Action::Quit],
            KeyCode::Char('?') | KeyCode::F(1) => self.mode = Mode::Help,
            KeyCode::Up | KeyCode::Char('k') => return self.select(-1),
            KeyCode::Down | KeyCode::Char('j') => return self.select(1),
            KeyCode::Home => return self.select(isize::MIN / 2),
            KeyCode::End if self.scroll > 0 => self.scroll = 0,
            KeyCode::End => return self.select(isize::MAX / 2),
            KeyCode::PageUp => self.scroll = self.scroll.saturating_add(10),
            KeyCode::PageDown => self.scroll = self.scroll.saturating_sub(10),
            KeyCode::Enter | KeyCode::Char('i') if bot.is_some() => {
                self.mode = Mode::Compose(String::new());
            }
            KeyCode::Char('y') => return allow("once".into()),
            KeyCode::Char('p') => {
                // Only where the request offers it (Codex: a command's program, issue 46).
                let offered = match (self.current(), &request) {
                    (Some(b), Some(r)) => b.reach(r, "program").is_some(),
                    _ => false,
                };
                if offered {
                    return allow("program".into());
                }
            }
            KeyCode::Char('a') => {
                let scope = match (self.current(), &request) {
                    (Some(b), Some(r)) => b.widest_scope(r).to_owned(),
                    _ => "once".to_owned(),
                };
                return allow(scope);
            }
            KeyCode::Char('n') => {
                if let Some(request) = request {
                    self.mode = Mode::Deny {
                        request,
                        text: String::new(),
                    };
                }
            }
            KeyCode::Char('x') => {
                if let Some(bot) = bot {
                    return vec![Action::Call(Call::Interrupt(bot))];
                }
            }
            KeyCode::Char('S') => {
                if let Some(bot) = bot {
                    return vec![Action::Call(Call::Stop(bot))];
                }
            }
            KeyCode::Char('R') => {
                if let Some(bot) = bot {
                    return vec![Action::Call(Call::Restart(bot))];
                }
            }
            _ => {}
        }
        Vec::new()
    }
}

/// Applies changed properties (as `PropertiesChanged` names them) to `info`.
pub fn apply_properties(info: &mut BotInfo, props: &HashMap<String, zbus::OwnedVariant>) {
    // `BotInfo::from_properties` reads every property it knows; one not changed keeps its value.
    let fresh = BotInfo::from_properties(&info.path, props);
    for key in props.keys() {
        match key.as_str() {
            "Name" => info.name = fresh.name.clone(),
            "State" => info.state = fresh.state.clone(),
            "Model" => info.model = fresh.model.clone(),
            "PermissionMode" => info.permission_mode = fresh.permission_mode.clone(),
            "HeldBy" => info.held_by = fresh.held_by.clone(),
            "LimitKind" => info.limit_kind = fresh.limit_kind.clone(),
            "LimitResetsAt" => info.limit_resets_at = fresh.limit_resets_at,
            "SessionId" => info.session_id = fresh.session_id.clone(),
            "ProcessId" => info.process_id = fresh.process_id,
            "LastError" => info.last_error = fresh.last_error.clone(),
            "QueuedMessages" => info.queued_messages = fresh.queued_messages,
            "Holders" => info.holders = fresh.holders,
            "CostUSD" => info.cost_usd = fresh.cost_usd,
            "BudgetUSD" => info.budget_usd = fresh.budget_usd,
            "InputTokens" => info.input_tokens = fresh.input_tokens,
            "OutputTokens" => info.output_tokens = fresh.output_tokens,
            "PendingPermissions" => info.pending = fresh.pending.clone(),
            "MemoryCurrent" => info.memory_current = fresh.memory_current,
            "CPUUsageNSec" => info.cpu_usage_nsec = fresh.cpu_usage_nsec,
            "TasksCurrent" => info.tasks_current = fresh.tasks_current,
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests;
