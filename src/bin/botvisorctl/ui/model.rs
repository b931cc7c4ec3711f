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

/// A bot as the dashboard names it: its host and its object path there (two hosts may each
/// have a bot of the same path).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct BotKey {
    /// Its host: an index into [`Model::hosts`] (0 for a dashboard on one bus).
    pub host: usize,
    /// Its object path on that host's bus.
    pub path: String,
}

impl BotKey {
    /// The bot at `path` on host `host`.
    pub fn new(host: usize, path: &str) -> BotKey {
        BotKey {
            host,
            path: path.to_owned(),
        }
    }
}

/// A bot as the dashboard knows it.
#[derive(Debug, Clone, Default)]
pub struct Bot {
    /// Its host: an index into [`Model::hosts`].
    pub host: usize,
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

/// How the dashboard's link to a host stands (issue 51). A dashboard on one bus has one host,
/// linked for its whole life (its link lost ends it).
#[derive(Debug, Clone, PartialEq)]
pub enum Link {
    /// Being reached, the first time.
    Connecting,
    /// Reached: its signals are followed.
    Linked,
    /// Not reached, or its link stopped answering: since when, and why in words. Tried again
    /// by itself with backoff; its bots stay shown as they were, greyed.
    Offline {
        /// When it went offline.
        since: SystemTime,
        /// Why, in words (the last try's).
        why: String,
        /// How many times it was tried again since, and failed.
        retries: u32,
    },
}

/// A host of the dashboard.
#[derive(Debug, Clone)]
pub struct Host {
    /// Its name as rows show it (`local`, `buildbox`); empty for the one host of a dashboard
    /// on one bus (its rows show bot names alone).
    pub name: String,
    /// The botvisorctl command that reaches it, for the hints shown (`botvisorctl --host
    /// buildbox`).
    pub ctl: String,
    /// Its link.
    pub link: Link,
    /// Whether its botvisord is on its bus.
    pub daemon: Daemon,
    /// Which botvisord answered (its machine's boot id, its invocation), where it says.
    pub which: crate::fleet::Daemon,
}

impl Host {
    /// A host named `name`, reached with `ctl`, not linked yet.
    pub fn new(name: &str, ctl: &str) -> Host {
        Host {
            name: name.to_owned(),
            ctl: ctl.to_owned(),
            link: Link::Connecting,
            daemon: Daemon::Loading,
            which: crate::fleet::Daemon::default(),
        }
    }

    /// Whether what it shows is live: linked, and its botvisord there.
    pub fn is_up(&self) -> bool {
        self.link == Link::Linked && self.daemon != Daemon::Away
    }
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
    /// Read every bot of a host (`GetManagedObjects`).
    LoadBots(usize),
    /// Read a bot's chat (its newest [`KEPT_ITEMS`]).
    LoadChat(BotKey),
    /// `Send`.
    Send {
        /// The bot.
        bot: BotKey,
        /// The message.
        text: String,
    },
    /// `RespondPermission`.
    Answer {
        /// The bot.
        bot: BotKey,
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
    Interrupt(BotKey),
    /// `Stop`.
    Stop(BotKey),
    /// `Restart`.
    Restart(BotKey),
    /// Read a host's schedules (`Schedules`): each bot's next fire.
    LoadSchedules(usize),
}

impl Call {
    /// The host the call goes to.
    pub fn host(&self) -> usize {
        match self {
            Call::LoadBots(h) | Call::LoadSchedules(h) => *h,
            Call::LoadChat(b)
            | Call::Send { bot: b, .. }
            | Call::Answer { bot: b, .. }
            | Call::Interrupt(b)
            | Call::Stop(b)
            | Call::Restart(b) => b.host,
        }
    }
}

/// What a [`Call`] came to.
#[derive(Debug)]
pub enum Outcome {
    /// Every bot of a host.
    Bots(usize, Vec<BotInfo>),
    /// A bot's newest items.
    Chat(BotKey, Vec<Item>),
    /// A bot's chat could not be read: why.
    ChatFailed(BotKey, String),
    /// A call did what it was asked: what to say.
    Done(String),
    /// A call failed: what to say.
    Failed(String),
    /// A host's bots could not be read: its botvisord is not on its bus.
    Absent(usize),
    /// A host's bots' next fires of a schedule, by bot path, in Unix seconds (a bot with none
    /// is left out; schedules that cannot be read count as none).
    Schedules(usize, HashMap<String, i64>),
}

/// A signal of a host's botvisord, read off its bus, or news of its link.
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
    /// The host's link is up (again): which botvisord answers there.
    Linked(crate::fleet::Daemon),
    /// The host's link is down: why, in words.
    Unlinked(String),
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
    /// The hosts, in the order given (one for a dashboard on one bus).
    pub hosts: Vec<Host>,
    /// The bots, sorted by host, then name.
    pub bots: Vec<Bot>,
    /// The selected bot.
    pub selected: Option<BotKey>,
    /// What the bottom line is for.
    pub mode: Mode,
    /// The last thing said about a call: `(text, is_error)`.
    pub notice: Option<(String, bool)>,
    /// How many screen lines the chat is scrolled up from its end (0: it follows).
    pub scroll: usize,
    /// Each bot's next fire of a schedule (issue 49), in Unix seconds.
    pub next_fires: HashMap<BotKey, i64>,
}

impl Default for Model {
    /// A dashboard on one bus: one host, without a name, linked.
    fn default() -> Self {
        let mut one = Host::new("", "botvisorctl");
        one.link = Link::Linked;
        Model::new(vec![one])
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
    fn new(host: usize, info: BotInfo) -> Bot {
        Bot {
            host,
            info,
            ..Bot::default()
        }
    }

    /// How the dashboard names it.
    pub fn key(&self) -> BotKey {
        BotKey::new(self.host, &self.info.path)
    }

    fn is(&self, key: &BotKey) -> bool {
        self.host == key.host && self.info.path == key.path
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
    /// A dashboard of `hosts`, none linked yet.
    pub fn new(hosts: Vec<Host>) -> Model {
        Model {
            hosts,
            bots: Vec::new(),
            selected: None,
            mode: Mode::Normal,
            notice: None,
            scroll: 0,
            next_fires: HashMap::new(),
        }
    }

    /// Whether it shows several hosts (rows named `host:bot`).
    pub fn is_fleet(&self) -> bool {
        self.hosts.len() > 1
    }

    /// `b`'s name as the dashboard shows it: `host:name` over several hosts, else its name.
    pub fn shown_name(&self, b: &Bot) -> String {
        match self.hosts.get(b.host) {
            Some(h) if self.is_fleet() => format!("{}:{}", h.name, b.info.name),
            _ => b.info.name.clone(),
        }
    }

    /// `b`'s host.
    pub fn host_of(&self, b: &Bot) -> &Host {
        &self.hosts[b.host.min(self.hosts.len() - 1)]
    }

    /// The selected bot.
    pub fn current(&self) -> Option<&Bot> {
        let key = self.selected.as_ref()?;
        self.bots.iter().find(|b| b.is(key))
    }

    fn bot_mut(&mut self, key: &BotKey) -> Option<&mut Bot> {
        self.bots.iter_mut().find(|b| b.is(key))
    }

    /// The selected bot's index in [`Model::bots`].
    pub fn selected_index(&self) -> Option<usize> {
        let key = self.selected.as_ref()?;
        self.bots.iter().position(|b| b.is(key))
    }

    fn sort(&mut self) {
        self.bots.sort_by(|a, b| {
            a.host
                .cmp(&b.host)
                .then(a.info.name.cmp(&b.info.name))
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
            Some(b) if !b.loaded => vec![Action::Call(Call::LoadChat(b.key()))],
            _ => Vec::new(),
        }
    }

    /// What a call came to; returns the calls that follow (the chats to read).
    pub fn outcome(&mut self, outcome: Outcome) -> Vec<Action> {
        match outcome {
            Outcome::Bots(host, infos) => {
                let Some(h) = self.hosts.get_mut(host) else {
                    return Vec::new();
                };
                h.daemon = Daemon::Up;
                let (theirs, others): (Vec<Bot>, Vec<Bot>) =
                    self.bots.drain(..).partition(|b| b.host == host);
                self.bots = others;
                let mut old: HashMap<String, Bot> = theirs
                    .into_iter()
                    .map(|b| (b.info.path.clone(), b))
                    .collect();
                for info in infos {
                    let bot = match old.remove(&info.path) {
                        Some(mut b) => {
                            b.info = info;
                            b
                        }
                        None => Bot::new(host, info),
                    };
                    self.bots.push(bot);
                }
                self.sort();
                if self.current().is_none() {
                    let at = self.bots.iter().position(|b| b.host == host).unwrap_or(0);
                    self.selected = self.bots.get(at).map(Bot::key);
                    self.scroll = 0;
                }
                // Every chat of the host is read, the selected bot's first: each bot's last
                // activity shows.
                let mut calls = self.chat_wanted();
                for b in self.bots.iter().filter(|b| b.host == host) {
                    if !b.loaded && Some(&b.key()) != self.selected.as_ref() {
                        calls.push(Action::Call(Call::LoadChat(b.key())));
                    }
                }
                calls
            }
            Outcome::Chat(key, items) => {
                if let Some(b) = self.bot_mut(&key) {
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
            Outcome::ChatFailed(key, why) => {
                // While its host is away its chats are read again when it is back.
                if !self.hosts.get(key.host).is_some_and(Host::is_up) {
                    return Vec::new();
                }
                if let Some(b) = self.bot_mut(&key) {
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
            Outcome::Absent(host) => {
                if let Some(h) = self.hosts.get_mut(host) {
                    h.daemon = Daemon::Away;
                }
                Vec::new()
            }
            Outcome::Schedules(host, next) => {
                self.next_fires.retain(|k, _| k.host != host);
                self.next_fires.extend(
                    next.into_iter()
                        .map(|(path, at)| (BotKey { host, path }, at)),
                );
                Vec::new()
            }
        }
    }

    /// What a signal of host `host` tells; returns the calls that follow.
    pub fn signal(&mut self, host: usize, signal: Signal, now: SystemTime) -> Vec<Action> {
        let key = |path: String| BotKey { host, path };
        match signal {
            Signal::Item(path, item) => {
                if let Some(b) = self.bot_mut(&key(path)) {
                    b.push(item, Some(now));
                }
            }
            Signal::Delta(path, text) => {
                if let Some(b) = self.bot_mut(&key(path)) {
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
                if let Some(b) = self.bot_mut(&key(path)) {
                    b.partial.clear();
                }
            }
            Signal::Properties(path, changed) => {
                if let Some(b) = self.bot_mut(&key(path)) {
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
                let added = key(info.path.clone());
                if self.bot_mut(&added).is_none() {
                    self.bots.push(Bot::new(host, info));
                    self.sort();
                    if self.selected.is_none() {
                        self.selected = Some(added.clone());
                    }
                    return vec![Action::Call(Call::LoadChat(added))];
                }
            }
            Signal::Removed(path) => {
                let gone = key(path);
                let at = self.selected_index();
                self.bots.retain(|b| !b.is(&gone));
                if self.selected.as_ref() == Some(&gone) {
                    let i = at.unwrap_or(0).min(self.bots.len().saturating_sub(1));
                    self.selected = self.bots.get(i).map(Bot::key);
                    self.scroll = 0;
                    if !matches!(self.mode, Mode::Help) {
                        self.mode = Mode::Normal;
                    }
                    return self.chat_wanted();
                }
            }
            Signal::DaemonLeft => {
                if let Some(h) = self.hosts.get_mut(host) {
                    h.daemon = Daemon::Away;
                }
            }
            Signal::SchedulesChanged => return vec![Action::Call(Call::LoadSchedules(host))],
            Signal::DaemonBack => return self.reload(host),
            Signal::Linked(which) => {
                if let Some(h) = self.hosts.get_mut(host) {
                    h.link = Link::Linked;
                    h.which = which;
                }
                return self.reload(host);
            }
            Signal::Unlinked(why) => {
                let Some(h) = self.hosts.get_mut(host) else {
                    return Vec::new();
                };
                // Offline since it first went; a failed retry says its reason and counts.
                let (since, retries) = match &h.link {
                    Link::Offline { since, retries, .. } => (*since, retries + 1),
                    _ => (now, 0),
                };
                if h.link == Link::Linked {
                    self.notice = Some((format!("{}: offline: {why}", h.name), true));
                }
                h.link = Link::Offline {
                    since,
                    why,
                    retries,
                };
                for b in self.bots.iter_mut().filter(|b| b.host == host) {
                    b.partial.clear();
                }
            }
        }
        Vec::new()
    }

    /// Everything of host `host` read again (its botvisord or its link is back): its bots, its
    /// chats, its schedules.
    fn reload(&mut self, host: usize) -> Vec<Action> {
        if let Some(h) = self.hosts.get_mut(host) {
            h.daemon = Daemon::Loading;
        }
        self.notice = None;
        for b in self.bots.iter_mut().filter(|b| b.host == host) {
            b.loaded = false;
            b.partial.clear();
        }
        vec![
            Action::Call(Call::LoadBots(host)),
            Action::Call(Call::LoadSchedules(host)),
        ]
    }

    fn select(&mut self, step: isize) -> Vec<Action> {
        if self.bots.is_empty() {
            return Vec::new();
        }
        let at = self.selected_index().unwrap_or(0) as isize;
        let last = self.bots.len() as isize - 1;
        let to = (at + step).clamp(0, last) as usize;
        self.select_at(to)
    }

    fn select_at(&mut self, to: usize) -> Vec<Action> {
        let Some(key) = self.bots.get(to).map(Bot::key) else {
            return Vec::new();
        };
        if self.selected.as_ref() != Some(&key) {
            self.selected = Some(key);
            self.scroll = 0;
        }
        self.chat_wanted()
    }

    /// Selects the next bot after the selected one (round the end) that waits for an answer to
    /// a prompt, on a host that is live (an answer can reach it); nothing when none does.
    fn select_next_asking(&mut self) -> Vec<Action> {
        let n = self.bots.len();
        let at = self.selected_index().map_or(0, |i| i + 1);
        let next = (0..n).map(|i| (at + i) % n).find(|&i| {
            let b = &self.bots[i];
            !b.info.pending.is_empty() && self.host_of(b).is_up()
        });
        match next {
            Some(i) => self.select_at(i),
            None => {
                self.notice = Some(("no bot waits for an answer".into(), false));
                Vec::new()
            }
        }
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
                    let bot = b.key();
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
                        bot: b.key(),
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
        let bot = self.current().map(Bot::key);
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
            KeyCode::Tab => return self.select_next_asking(),
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
