//! What botvisor-notify knows of the bots, from botvisord's signals alone (no I/O here): what
//! each bot should show now ([`Model::note`]: at most one notification per bot and [`Kind`]) and
//! the events the hooks are told ([`Happening`]).
//!
//! A permission request is shown while it is open (`PendingPermissions`), the oldest first, one
//! at a time, with how many more wait. A state of `[notify] states` is shown while the bot is in
//! it, from the moment it entered it. A turn's end is shown when it ends while no client holds
//! the bot, until the next turn begins. A bot a client holds shows nothing (unless `when_held`):
//! someone is looking; what it shows then (a turn's end, a state) is taken as seen. What the user
//! dismissed is not shown again, but a new request, state or turn end is.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde_json::{Value, json};

use botvisor::config::notify::{NotifyConfig, STATE_EVENTS};

use super::note::{self, BODY_CHARS, BODY_LINES, CRITICAL, LOW, NORMAL, Note, SUMMARY_CHARS};

/// One open permission request: `(request_id, tool, input_json)`, as `PendingPermissions`.
pub type Pending = (String, String, String);

/// The kinds of notification a bot has, one of each at a time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// Its oldest open permission request.
    Permission,
    /// A state it is in that needs its user (`failed`, `limited`, …).
    State,
    /// Its turn ended while nobody was looking.
    Turn,
    /// A schedule's fire was skipped or could not be sent (issue 49: nothing fails silently).
    Schedule,
}

impl Kind {
    /// Every kind.
    pub const ALL: [Kind; 4] = [Kind::Permission, Kind::State, Kind::Turn, Kind::Schedule];
}

/// One notification's place: a host, a bot (its object path there) and a kind.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    /// The host (0: this machine's bus; see `bus::Input`). The model of one host ignores it.
    pub host: usize,
    /// The bot's object path.
    pub bot: String,
    /// The kind.
    pub kind: Kind,
}

impl Key {
    /// The key of `bot`'s notification of `kind` on this machine's bus.
    #[cfg(test)]
    pub fn new(bot: &str, kind: Kind) -> Key {
        Key::on(0, bot, kind)
    }

    /// The key of `bot`'s notification of `kind` on host `host`.
    pub fn on(host: usize, bot: &str, kind: Kind) -> Key {
        Key {
            host,
            bot: bot.to_owned(),
            kind,
        }
    }
}

/// A bot's properties as a signal or `GetManagedObjects` gave them; `None`: not given.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Props {
    /// `Id`.
    pub id: Option<String>,
    /// `Name`.
    pub name: Option<String>,
    /// `State`.
    pub state: Option<String>,
    /// `Holders`.
    pub holders: Option<u32>,
    /// `PendingPermissions`.
    pub pending: Option<Vec<Pending>>,
    /// `LastError`.
    pub last_error: Option<String>,
    /// `LimitKind`.
    pub limit_kind: Option<String>,
    /// `LimitResetsAt`, Unix seconds.
    pub limit_resets_at: Option<u64>,
}

/// What botvisord said, decoded.
#[derive(Debug, Clone, PartialEq)]
pub enum Signal {
    /// `InterfacesAdded` of a bot.
    Added {
        /// Its object path.
        path: String,
        /// All its properties.
        props: Props,
    },
    /// `InterfacesRemoved` of a bot.
    Removed {
        /// Its object path.
        path: String,
    },
    /// `PropertiesChanged` of a bot.
    Changed {
        /// Its object path.
        path: String,
        /// What changed.
        props: Props,
    },
    /// `PermissionRequested`.
    PermissionRequested {
        /// The bot's object path.
        path: String,
        /// The request.
        request_id: String,
        /// The tool.
        tool: String,
        /// Its input, JSON (a preview over 1 MiB).
        input_json: String,
    },
    /// `ChatItemAdded`.
    ChatItem {
        /// The bot's object path.
        path: String,
        /// The item's kind.
        kind: String,
        /// Its payload, JSON.
        payload: String,
    },
    /// `TurnFinished`.
    TurnFinished {
        /// The bot's object path.
        path: String,
        /// The turn.
        turn_id: String,
        /// Its outcome.
        outcome: String,
    },
}

/// An event for the hooks: its name (`EVENTS` and `STATE_EVENTS` of the configuration), whether
/// a client held the bot, and the JSON object a hook reads on its standard input.
#[derive(Debug, Clone)]
pub struct Happening {
    /// `permission_requested`, `turn_finished`, …
    pub event: String,
    /// Whether a client held the bot then.
    pub held: bool,
    /// The whole event: `event`, `time`, `bot`, `held`, `summary`, `body` and the event's own
    /// members (docs/notifications.md).
    pub json: Value,
}

/// What one input changed: the bots whose notifications may change, and the events.
#[derive(Debug, Default)]
pub struct Out {
    /// Object paths.
    pub touched: Vec<String>,
    /// For the hooks.
    pub happenings: Vec<Happening>,
}

/// What an action of a notification asks for.
#[derive(Debug, PartialEq)]
pub enum Do {
    /// `RespondPermission`.
    Answer {
        /// The bot's object path.
        path: String,
        /// The request.
        request_id: String,
        /// `allow` or `deny`.
        behavior: &'static str,
    },
    /// The default action: run the open command for this bot.
    Open(BotRef),
}

/// A bot as the open command names it.
#[derive(Debug, Clone, PartialEq)]
pub struct BotRef {
    /// Object path.
    pub path: String,
    /// 32 hex digits.
    pub id: String,
    /// Its name.
    pub name: String,
}

/// How a turn ended, kept to be shown.
#[derive(Debug, Clone, PartialEq)]
struct TurnEnd {
    turn_id: String,
    outcome: String,
    /// The `turn_finished` item's `text` (an error, a note).
    text: String,
    /// The beginning of the last thing the agent said in it.
    reply: String,
}

/// A schedule's fire that did not put its prompt (a `system` item `schedule_skipped` or
/// `schedule_failed`).
#[derive(Debug, Clone)]
struct MissedFire {
    /// The schedule's id and the due time it stood for: the notification's tag.
    tag: String,
    /// `true`: not sent (the bot `failed`); `false`: skipped (busy, budget spent).
    failed: bool,
    summary: String,
    /// The item's words: why.
    body: String,
}

/// The most characters of a reply kept for a turn's end.
const REPLY_CHARS: usize = 4096;

#[derive(Debug, Clone, Default)]
struct Bot {
    id: String,
    name: String,
    state: String,
    holders: u32,
    pending: Vec<Pending>,
    last_error: String,
    limit_kind: String,
    limit_resets_at: u64,
    /// The last `assistant` text of the turn under way, cut to [`REPLY_CHARS`].
    reply: String,
    /// The `turn_finished` item waiting for its `TurnFinished`: (turn id, text).
    finishing: Option<(String, String)>,
    /// A turn's end to show.
    ended: Option<TurnEnd>,
    /// The last fire of a schedule that was skipped or not sent, to show.
    missed: Option<MissedFire>,
    /// The state shown was dismissed or seen (until the bot enters a state again).
    state_seen: bool,
    /// Requests dismissed, seen or answered here: not shown again.
    seen: HashSet<String>,
    /// Requests the hooks were told of.
    told: HashSet<String>,
}

impl Bot {
    fn held(&self) -> bool {
        self.holders > 0
    }

    fn apply(&mut self, p: Props) {
        if let Some(v) = p.id {
            self.id = v;
        }
        if let Some(v) = p.name {
            self.name = v;
        }
        if let Some(v) = p.state {
            self.state = v;
        }
        if let Some(v) = p.holders {
            self.holders = v;
        }
        if let Some(v) = p.pending {
            self.pending = v;
            let open: HashSet<&String> = self.pending.iter().map(|(id, _, _)| id).collect();
            self.seen.retain(|id| open.contains(id));
        }
        if let Some(v) = p.last_error {
            self.last_error = v;
        }
        if let Some(v) = p.limit_kind {
            self.limit_kind = v;
        }
        if let Some(v) = p.limit_resets_at {
            self.limit_resets_at = v;
        }
    }
}

/// Every bot botvisord serves, as its signals told.
pub struct Model {
    config: NotifyConfig,
    bots: BTreeMap<String, Bot>,
    /// The token of each open request shown with actions: `allow-N` and `deny-N` name it, so
    /// that no text of the agent's is an action key.
    tokens: HashMap<(String, String), u64>,
    next_token: u64,
}

impl Model {
    /// No bots yet.
    pub fn new(config: NotifyConfig) -> Model {
        Model {
            config,
            bots: BTreeMap::new(),
            tokens: HashMap::new(),
            next_token: 1,
        }
    }

    /// botvisord is on the bus with these bots (`GetManagedObjects`): bots it no longer has go,
    /// the others take its properties. Requests open now that the hooks were not told of are
    /// told (`permission_requested`).
    pub fn daemon_back(&mut self, bots: Vec<(String, Props)>) -> Out {
        let mut out = Out::default();
        let now: HashSet<&String> = bots.iter().map(|(p, _)| p).collect();
        let gone: Vec<String> = self
            .bots
            .keys()
            .filter(|p| !now.contains(p))
            .cloned()
            .collect();
        for path in gone {
            self.bots.remove(&path);
            out.touched.push(path);
        }
        for (path, props) in bots {
            let bot = self.bots.entry(path.clone()).or_default();
            bot.apply(props);
            let untold: Vec<Pending> = bot
                .pending
                .iter()
                .filter(|(id, _, _)| !bot.told.contains(id))
                .cloned()
                .collect();
            for (id, tool, input) in untold {
                out.happenings
                    .push(self.requested(&path, &id, &tool, &input));
            }
            out.touched.push(path);
        }
        self.forget_tokens();
        out.happenings
            .insert(0, daemon_event("daemon_back", "botvisord is on the bus"));
        out
    }

    /// botvisord left the bus: its requests can no longer be answered (their notifications
    /// go); what else the bots show stays until it is back.
    pub fn daemon_left(&mut self) -> Out {
        let mut out = Out::default();
        for (path, bot) in &mut self.bots {
            bot.pending.clear();
            bot.seen.clear();
            bot.told.clear();
            bot.finishing = None;
            bot.reply.clear();
            out.touched.push(path.clone());
        }
        self.forget_tokens();
        out.happenings
            .push(daemon_event("daemon_left", "botvisord left the bus"));
        out
    }

    /// Applies one signal of botvisord.
    pub fn apply(&mut self, signal: Signal) -> Out {
        let mut out = Out::default();
        match signal {
            Signal::Added { path, props } => {
                let bot = self.bots.entry(path.clone()).or_default();
                bot.apply(props);
                self.forget_tokens();
                let h = self.bot_event(
                    &path,
                    "bot_added",
                    format!("{} was added", self.name(&path)),
                    String::new(),
                    json!({}),
                );
                out.happenings.push(h);
                out.touched.push(path);
            }
            Signal::Removed { path } => {
                if self.bots.contains_key(&path) {
                    let h = self.bot_event(
                        &path,
                        "bot_removed",
                        format!("{} was deleted", self.name(&path)),
                        String::new(),
                        json!({}),
                    );
                    out.happenings.push(h);
                    self.bots.remove(&path);
                    self.forget_tokens();
                    out.touched.push(path);
                }
            }
            Signal::Changed { path, props } => {
                let Some(bot) = self.bots.get_mut(&path) else {
                    return out;
                };
                let before_state = bot.state.clone();
                let was_held = bot.held();
                let new_state = props.state.clone();
                let pending_changed = props.pending.is_some();
                bot.apply(props);
                if bot.held() && !was_held {
                    // Someone is looking now: what it shows is seen.
                    bot.ended = None;
                    bot.missed = None;
                    bot.state_seen = true;
                }
                if let Some(state) = new_state.filter(|s| *s != before_state) {
                    if self.config.states.contains(&state) {
                        bot.state_seen = bot.held();
                    }
                    if state == "busy" {
                        bot.ended = None;
                    }
                    out.happenings
                        .extend(self.state_events(&path, &before_state));
                }
                if pending_changed {
                    self.forget_tokens();
                }
                out.touched.push(path);
            }
            Signal::PermissionRequested {
                path,
                request_id,
                tool,
                input_json,
            } => {
                if !self.bots.contains_key(&path) {
                    return out;
                }
                let h = self.requested(&path, &request_id, &tool, &input_json);
                out.happenings.push(h);
            }
            Signal::ChatItem {
                path,
                kind,
                payload,
            } => {
                let Some(bot) = self.bots.get_mut(&path) else {
                    return out;
                };
                let p: Value = serde_json::from_str(&payload).unwrap_or(Value::Null);
                match kind.as_str() {
                    "assistant" if p.get("parent_tool_use_id").is_none_or(Value::is_null) => {
                        let text = p["text"]
                            .as_str()
                            .or_else(|| p["preview"].as_str())
                            .unwrap_or_default();
                        if !text.trim().is_empty() {
                            bot.reply = text.chars().take(REPLY_CHARS).collect();
                        }
                    }
                    "turn_finished" => {
                        let turn = p["turn_id"].as_str().unwrap_or_default().to_owned();
                        let text = p["text"].as_str().unwrap_or_default().to_owned();
                        bot.finishing = Some((turn, text));
                    }
                    "user" if p["schedule"].is_object() => {
                        let summary = format!("{}: scheduled prompt sent", self.name(&path));
                        let body: String = p["text"]
                            .as_str()
                            .unwrap_or_default()
                            .chars()
                            .take(REPLY_CHARS)
                            .collect();
                        let h = self.bot_event(
                            &path,
                            "schedule_fired",
                            summary,
                            body,
                            json!({"schedule": p["schedule"], "turn_id": p["turn_id"]}),
                        );
                        out.happenings.push(h);
                    }
                    "system"
                        if matches!(
                            p["reason"].as_str(),
                            Some("schedule_skipped" | "schedule_failed")
                        ) =>
                    {
                        let event = p["reason"].as_str().unwrap_or_default().to_owned();
                        let summary = format!(
                            "{}: scheduled prompt {}",
                            self.name(&path),
                            if event == "schedule_skipped" {
                                "skipped"
                            } else {
                                "not sent"
                            }
                        );
                        let body = p["text"].as_str().unwrap_or_default().to_owned();
                        if let Some(bot) = self.bots.get_mut(&path) {
                            bot.missed = Some(MissedFire {
                                tag: format!(
                                    "{}@{}",
                                    p["schedule"]["id"].as_str().unwrap_or_default(),
                                    p["schedule"]["due"].as_u64().unwrap_or_default()
                                ),
                                failed: event == "schedule_failed",
                                summary: summary.clone(),
                                body: note::block(&body, BODY_CHARS, BODY_LINES),
                            });
                        }
                        let h = self.bot_event(
                            &path,
                            &event,
                            summary,
                            body,
                            json!({"schedule": p["schedule"]}),
                        );
                        out.happenings.push(h);
                        out.touched.push(path.clone());
                    }
                    "permission_answer" => {
                        let tool = p["tool"].as_str().unwrap_or_default().to_owned();
                        let behavior = p["behavior"].as_str().unwrap_or_default().to_owned();
                        let client = p["client"]
                            .as_str()
                            .or_else(|| p["by"].as_str())
                            .unwrap_or_default()
                            .to_owned();
                        let summary = format!(
                            "{}: {} {}",
                            self.name(&path),
                            tool,
                            match behavior.as_str() {
                                "allow" | "accept" => "allowed",
                                _ => "denied",
                            }
                        );
                        let body = if client.is_empty() {
                            String::new()
                        } else {
                            format!("answered by {client}")
                        };
                        let h = self.bot_event(
                            &path,
                            "permission_answered",
                            summary,
                            body,
                            json!({
                                "request_id": p["request_id"], "tool": tool, "behavior": behavior,
                                "by": p["by"], "client": p["client"],
                            }),
                        );
                        out.happenings.push(h);
                    }
                    _ => {}
                }
            }
            Signal::TurnFinished {
                path,
                turn_id,
                outcome,
            } => {
                let config_turns = self.config.turn_finished;
                let when_held = self.config.when_held;
                let Some(bot) = self.bots.get_mut(&path) else {
                    return out;
                };
                let text = match bot.finishing.take() {
                    Some((t, text)) if t == turn_id => text,
                    _ => String::new(),
                };
                let end = TurnEnd {
                    turn_id: turn_id.clone(),
                    outcome: outcome.clone(),
                    text,
                    reply: std::mem::take(&mut bot.reply),
                };
                if config_turns && outcome != "interrupted" && (!bot.held() || when_held) {
                    bot.ended = Some(end.clone());
                }
                let (summary, body) = turn_words(&bot.name, &end);
                let h = self.bot_event(
                    &path,
                    "turn_finished",
                    summary,
                    body,
                    json!({
                        "turn_id": end.turn_id, "outcome": end.outcome, "text": end.text,
                        "reply": end.reply,
                    }),
                );
                out.happenings.push(h);
                out.touched.push(path);
            }
        }
        out
    }

    /// A notification's action was invoked (`ActionInvoked`): what to do, if it still applies.
    /// An answer marks its request as seen, so that the notification moves on to the next one.
    pub fn action(&mut self, key: &Key, action: &str) -> Option<Do> {
        let bot = self.bots.get_mut(&key.bot)?;
        if action == "default" {
            return Some(Do::Open(BotRef {
                path: key.bot.clone(),
                id: bot.id.clone(),
                name: bot.name.clone(),
            }));
        }
        if key.kind != Kind::Permission {
            return None;
        }
        let (behavior, token) = if let Some(t) = action.strip_prefix("allow-") {
            ("allow", t)
        } else if let Some(t) = action.strip_prefix("deny-") {
            ("deny", t)
        } else {
            return None;
        };
        let token: u64 = token.parse().ok()?;
        let ((path, request_id), _) = self.tokens.iter().find(|(_, t)| **t == token)?;
        if *path != key.bot || !bot.pending.iter().any(|(id, _, _)| id == request_id) {
            return None;
        }
        let request_id = request_id.clone();
        bot.seen.insert(request_id.clone());
        Some(Do::Answer {
            path: key.bot.clone(),
            request_id,
            behavior,
        })
    }

    /// The user dismissed (or the server expired) the notification `key` that showed `tag`: it
    /// is not shown again.
    pub fn dismissed(&mut self, key: &Key, tag: &str) {
        let Some(bot) = self.bots.get_mut(&key.bot) else {
            return;
        };
        match key.kind {
            Kind::Permission => {
                if bot.pending.iter().any(|(id, _, _)| id == tag) {
                    bot.seen.insert(tag.to_owned());
                }
            }
            Kind::State => {
                if bot.state == tag {
                    bot.state_seen = true;
                }
            }
            Kind::Turn => {
                if bot.ended.as_ref().is_some_and(|e| e.turn_id == tag) {
                    bot.ended = None;
                }
            }
            Kind::Schedule => {
                if bot.missed.as_ref().is_some_and(|m| m.tag == tag) {
                    bot.missed = None;
                }
            }
        }
    }

    /// Design rule 17 (tell the user): what `path` should show as its notification of `kind`
    /// now; `None`: nothing.
    pub fn note(&self, path: &str, kind: Kind) -> Option<Note> {
        let bot = self.bots.get(path)?;
        if !self.config.desktop || (bot.held() && !self.config.when_held) {
            return None;
        }
        match kind {
            Kind::Permission => self.permission_note(path, bot),
            Kind::State => self.state_note(bot),
            Kind::Turn => {
                if self.state_note(bot).is_some() {
                    // The state says more (a crash loop's `failed`, a limit): one note.
                    return None;
                }
                let end = bot.ended.as_ref()?;
                let (summary, body) = turn_words(&bot.name, end);
                let (urgency, icon) = match end.outcome.as_str() {
                    "success" => (LOW, "dialog-information"),
                    _ => (NORMAL, "dialog-warning"),
                };
                Some(Note {
                    tag: end.turn_id.clone(),
                    summary,
                    body,
                    answer_line: None,
                    actions: Vec::new(),
                    urgency,
                    category: if end.outcome == "success" {
                        "im.received".to_owned()
                    } else {
                        "x-botvisor.turn-failed".to_owned()
                    },
                    icon,
                    expire_ms: -1,
                })
            }
            Kind::Schedule => {
                let missed = bot.missed.as_ref()?;
                Some(Note {
                    tag: missed.tag.clone(),
                    summary: missed.summary.clone(),
                    body: missed.body.clone(),
                    answer_line: None,
                    actions: Vec::new(),
                    urgency: NORMAL,
                    category: if missed.failed {
                        "x-botvisor.schedule-failed".to_owned()
                    } else {
                        "x-botvisor.schedule-skipped".to_owned()
                    },
                    icon: "dialog-warning",
                    expire_ms: -1,
                })
            }
        }
    }

    fn permission_note(&self, path: &str, bot: &Bot) -> Option<Note> {
        if !self.config.permissions {
            return None;
        }
        let mut open = bot
            .pending
            .iter()
            .filter(|(id, _, _)| !bot.seen.contains(id));
        let (request_id, tool, input) = open.next()?;
        let more = open.count();
        let token = *self.tokens.get(&(path.to_owned(), request_id.clone()))?;
        let (summary, mut body) = permission_words(&bot.name, tool, input);
        if more > 0 {
            body = note::block(
                &format!(
                    "{body}\n({more} more request{} waiting)",
                    if more == 1 { "" } else { "s" }
                ),
                BODY_CHARS + 40,
                BODY_LINES + 1,
            );
        }
        let id = self.short_id(&bot.id);
        Some(Note {
            tag: request_id.clone(),
            summary,
            body,
            answer_line: Some(note::line(
                &format!("Answer: botvisorctl answer {id} {request_id} allow|deny"),
                BODY_CHARS,
            )),
            actions: vec![
                // Its reach said on the button (issue 46): this request only; a wider allow is
                // `botvisorctl answer` with a scope, or `send`'s, `watch`'s and the dashboard's.
                (format!("allow-{token}"), "Allow once".to_owned()),
                (format!("deny-{token}"), "Deny".to_owned()),
            ],
            urgency: NORMAL,
            category: "x-botvisor.permission".to_owned(),
            icon: "dialog-question",
            expire_ms: 0,
        })
    }

    fn state_note(&self, bot: &Bot) -> Option<Note> {
        if bot.state_seen || !self.config.states.contains(&bot.state) {
            return None;
        }
        let (summary, body) = state_words(bot);
        let urgency = if bot.state == "failed" {
            CRITICAL
        } else {
            NORMAL
        };
        Some(Note {
            tag: bot.state.clone(),
            summary,
            body,
            answer_line: None,
            actions: Vec::new(),
            urgency,
            category: format!("x-botvisor.{}", bot.state.replace('_', "-")),
            icon: if bot.state == "failed" {
                "dialog-error"
            } else {
                "dialog-warning"
            },
            expire_ms: -1,
        })
    }

    /// Gives each open request a token (see `tokens`) and forgets those of closed ones.
    fn forget_tokens(&mut self) {
        let open: HashSet<(String, String)> = self
            .bots
            .iter()
            .flat_map(|(p, b)| {
                b.pending
                    .iter()
                    .map(move |(id, _, _)| (p.clone(), id.clone()))
            })
            .collect();
        self.tokens.retain(|k, _| open.contains(k));
        for k in open {
            if !self.tokens.contains_key(&k) {
                self.tokens.insert(k, self.next_token);
                self.next_token += 1;
            }
        }
    }

    /// The shortest prefix of `id` (8 characters or more) no other bot's id starts with.
    fn short_id(&self, id: &str) -> String {
        let mut len = 8.min(id.len());
        while len < id.len()
            && self
                .bots
                .values()
                .any(|b| b.id != id && b.id.starts_with(&id[..len]))
        {
            len += 1;
        }
        id[..len].to_owned()
    }

    fn name(&self, path: &str) -> String {
        self.bots
            .get(path)
            .map(|b| note::line(&b.name, 60))
            .unwrap_or_default()
    }

    /// The hooks' `permission_requested`, once per request.
    fn requested(
        &mut self,
        path: &str,
        request_id: &str,
        tool: &str,
        input_json: &str,
    ) -> Happening {
        let name = self
            .bots
            .get(path)
            .map(|b| b.name.clone())
            .unwrap_or_default();
        if let Some(bot) = self.bots.get_mut(path) {
            bot.told.insert(request_id.to_owned());
        }
        let (summary, body) = permission_words(&name, tool, input_json);
        let input: Value = serde_json::from_str(input_json)
            .unwrap_or_else(|_| Value::String(input_json.to_owned()));
        self.bot_event(
            path,
            "permission_requested",
            summary,
            body,
            json!({
                "request_id": request_id, "tool": tool, "input": input,
            }),
        )
    }

    /// `state_changed`, and the state's own event for those of `STATE_EVENTS`.
    fn state_events(&self, path: &str, previous: &str) -> Vec<Happening> {
        let Some(bot) = self.bots.get(path) else {
            return Vec::new();
        };
        let (summary, body) = state_words(bot);
        let members = json!({
            "state": bot.state, "previous": previous, "last_error": bot.last_error,
            "limit_kind": bot.limit_kind, "limit_resets_at": bot.limit_resets_at,
        });
        let mut out = vec![self.bot_event(
            path,
            "state_changed",
            summary.clone(),
            body.clone(),
            members.clone(),
        )];
        if STATE_EVENTS.contains(&bot.state.as_str()) {
            out.push(self.bot_event(path, &bot.state, summary, body, members));
        }
        out
    }

    fn bot_event(
        &self,
        path: &str,
        event: &str,
        summary: String,
        body: String,
        members: Value,
    ) -> Happening {
        let (id, name, held) = self
            .bots
            .get(path)
            .map(|b| (b.id.clone(), b.name.clone(), b.held()))
            .unwrap_or_default();
        let mut j = json!({
            "event": event,
            "time": botvisor::time::now_rfc3339(),
            "bot": {"path": path, "id": id, "name": name},
            "held": held,
            "summary": summary,
            "body": body,
        });
        if let (Some(obj), Value::Object(m)) = (j.as_object_mut(), members) {
            obj.extend(m);
        }
        Happening {
            event: event.to_owned(),
            held,
            json: j,
        }
    }
}

fn daemon_event(event: &str, summary: &str) -> Happening {
    Happening {
        event: event.to_owned(),
        held: false,
        json: json!({
            "event": event, "time": botvisor::time::now_rfc3339(), "held": false,
            "summary": summary, "body": "",
        }),
    }
}

/// Summary and body of a permission request (escaped, bounded).
fn permission_words(name: &str, tool: &str, input_json: &str) -> (String, String) {
    let summary = note::line(
        &format!("{} asks to use {}", cut(name, 60), cut(tool, 40)),
        SUMMARY_CHARS,
    );
    let body = note::block(&note::describe_input(input_json), BODY_CHARS, BODY_LINES);
    (summary, body)
}

/// Summary and body of a bot's state (escaped, bounded).
fn state_words(bot: &Bot) -> (String, String) {
    let name = cut(&bot.name, 60);
    let (summary, mut body) = match bot.state.as_str() {
        "failed" => (
            format!("{name} failed"),
            "It waits for a restart: botvisorctl restart".to_owned(),
        ),
        "limited" if bot.limit_kind == "budget" => (
            format!("{name} reached its budget"),
            "Its messages wait until the budget is raised (botvisorctl set --budget) or it is \
             restarted."
                .to_owned(),
        ),
        "limited" => (
            format!("{name} waits for a usage limit"),
            if bot.limit_resets_at > 0 {
                format!(
                    "Its messages go at {}{}.",
                    botvisor::time::local_time(bot.limit_resets_at),
                    if bot.limit_kind.is_empty() {
                        String::new()
                    } else {
                        format!(" ({} window)", bot.limit_kind)
                    }
                )
            } else {
                "Its messages go when the limit lifts.".to_owned()
            },
        ),
        "login_required" => (
            format!("{name} needs a new login"),
            "Log in again (claude /login, codex login); its messages go on by themselves."
                .to_owned(),
        ),
        "held_elsewhere" => (
            format!("{name}'s conversation is open elsewhere"),
            "Its messages wait until the other program lets the conversation go.".to_owned(),
        ),
        other => (format!("{name} is {other}"), String::new()),
    };
    if bot.state == "failed" {
        body = format!("{body} {}", bot.id.get(..8).unwrap_or(&bot.id));
    }
    if !bot.last_error.is_empty() {
        body = format!("{}\n{body}", bot.last_error);
    }
    (
        note::line(&summary, SUMMARY_CHARS),
        note::block(&body, BODY_CHARS, BODY_LINES),
    )
}

/// Summary and body of a turn's end (escaped, bounded).
fn turn_words(name: &str, end: &TurnEnd) -> (String, String) {
    let name = cut(name, 60);
    let summary = match end.outcome.as_str() {
        "success" => format!("{name} finished"),
        "error" => format!("{name}: the turn ended with an error"),
        "crashed" => format!("{name}: the agent exited during the turn"),
        "limited" => format!("{name}: a usage limit cut the turn"),
        "taken_not_answered" => format!("{name}: the turn ended unanswered"),
        other => format!("{name}: the turn ended ({other})"),
    };
    let body = if end.outcome == "success" || end.text.is_empty() {
        &end.reply
    } else {
        &end.text
    };
    (
        note::line(&summary, SUMMARY_CHARS),
        note::block(body, BODY_CHARS, BODY_LINES),
    )
}

/// The first `max` characters of `s`, `…` last when cut (not escaped).
fn cut(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_owned();
    }
    let mut out: String = s.chars().take(max - 1).collect();
    out.push('…');
    out
}

#[cfg(test)]
mod tests;
