//! `botvisorctl mcp`: a Model Context Protocol server on stdin and stdout (the official Rust
//! SDK, `rmcp`), so that an agent (Claude Code, Codex, any MCP client) can list, create and
//! drive bots: docs/mcp.md.
//!
//! Every tool is a call of the D-Bus API on the connection botvisorctl made like any other
//! client (the session bus, `--address` or `--host`): botvisord's own checks (design rule 14,
//! leases, limits, the exactly-once rules, the guard rails of issue 29) hold for an agent as for
//! a person. What is this server's alone is in `[mcp]` of botvisor's configuration file: which
//! tools it serves and in which folders it creates bots. A refused call, a bad argument or a
//! failed D-Bus call is a tool result with `isError` and words that say why, never an end of
//! the server.
//!
//! Every answer is JSON text, bounded ([`MAX_ANSWER_BYTES`], [`MAX_ITEM_BYTES`],
//! [`MAX_PAGE_BYTES`]) and escaped as botvisorctl's JSON output is (`botvisor::text`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rmcp::handler::server::{router::tool::ToolRouter, wrapper::Parameters};
use rmcp::model::{Implementation, ServerCapabilities, ServerConfig};
use rmcp::service::RequestContext;
use rmcp::{RoleServer, ServerHandler, ServiceExt, schemars, tool, tool_handler, tool_router};
use serde::Deserialize;
use serde_json::{Value, json};
use zbus::{Connection, Variant};

use botvisor::config::mcp::McpConfig;
use botvisor::dbus::ROOT_PATH;
use botvisor::dbus::client::{BotProxy, ManagerProxy};

use super::bots;
use super::drain::{Drained, botvisor_signals};
use super::fail::{Failure, describe, error_name};

/// How long `send_message` waits for its turn's end when not told, in seconds: under Codex's
/// default `tool_timeout_sec` of 60.
pub const DEFAULT_WAIT_S: u64 = 50;
/// The longest wait `send_message` takes, in seconds (one hour).
pub const MAX_WAIT_S: u64 = 3600;
/// The most bytes of a turn's answer text `send_message` returns; more is cut, said by
/// `truncated`.
pub const MAX_ANSWER_BYTES: usize = 64 * 1024;
/// How many chat items `read_chat` returns when not told.
pub const DEFAULT_CHAT_ITEMS: u32 = 20;
/// The most chat items one `read_chat` returns.
pub const MAX_CHAT_ITEMS: u32 = 100;
/// The most bytes of one chat item's payload `read_chat` returns; a longer one is cut.
pub const MAX_ITEM_BYTES: usize = 8 * 1024;
/// The most bytes of chat items one `read_chat` returns, all items together.
pub const MAX_PAGE_BYTES: usize = 128 * 1024;

/// What a tool returns: JSON text, or the words of an error (an `isError` result).
type ToolResult = Result<String, String>;

/// The MCP server: one connection to botvisord, the `[mcp]` configuration, and the bot this
/// server runs under, if any.
#[derive(Clone)]
pub struct BotvisorMcp {
    conn: Connection,
    config: McpConfig,
    home: PathBuf,
    /// The id of the bot whose agent started this server (its `BOTVISOR_BOT_ID` marker).
    me: Option<String>,
    tool_router: ToolRouter<Self>,
}

/// A bot, named as botvisorctl names bots.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct BotArg {
    /// The bot: its id, a unique id prefix (4 characters or more) or its name.
    pub bot: String,
}

/// `create_bot`'s arguments.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct CreateArgs {
    /// The bot's working folder: an absolute path of an existing folder inside the folders this
    /// server allows (`[mcp] folders`).
    pub folder: String,
    /// `claude` (Claude Code, the default) or `codex` (OpenAI Codex).
    pub runtime: Option<String>,
    /// The model (default: the CLI's).
    pub model: Option<String>,
    /// The permission mode. Claude Code: default, acceptEdits, auto, bypassPermissions, dontAsk
    /// or plan. Codex: untrusted, on-request or never, alone or as POLICY:SANDBOX.
    pub permission_mode: Option<String>,
    /// A name for people (default: the folder's name).
    pub name: Option<String>,
    /// Give the bot a git worktree of its own, made from the repository that holds `folder`
    /// (`git worktree add`; the bot works in it for its whole life, so bots on one repository
    /// do not step on each other). Default false.
    pub worktree: Option<bool>,
    /// With `worktree`: the worktree's branch (default `botvisor/<name>`), from `HEAD`.
    pub branch: Option<String>,
}

/// `create_schedule`'s arguments.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct ScheduleArgs {
    /// The bot: its id, a unique id prefix or its name.
    pub bot: String,
    /// When, in systemd's calendar syntax: `Mon..Fri 09:00`, `hourly`, `*:0/15`, `daily`, with
    /// a time zone at its end when not the machine's (`09:00 Europe/Paris`).
    pub calendar: String,
    /// The message each fire sends to the bot.
    pub prompt: String,
    /// Skip a fire while the bot is busy instead of queueing it (default false).
    pub skip_when_busy: Option<bool>,
    /// Begin a new conversation of the bot at each fire, skipping a fire while it is busy
    /// (default false: into the bot's conversation).
    pub fresh: Option<bool>,
}

/// A schedule, by its id.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct ScheduleIdArg {
    /// The schedule's id (32 hex digits, as `list_schedules` gives it).
    pub id: String,
}

/// `send_message`'s arguments.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct SendArgs {
    /// The bot: its id, a unique id prefix or its name.
    pub bot: String,
    /// The message.
    pub text: String,
    /// How long to wait for the turn's end, in seconds (default 50, at most 3600). Past it the
    /// turn goes on; its id is returned.
    pub timeout_s: Option<u64>,
}

/// `read_chat`'s arguments.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct ChatArgs {
    /// The bot: its id, a unique id prefix or its name.
    pub bot: String,
    /// Items after this seq, oldest first (a previous answer's `next_after_seq`). Default: the
    /// most recent `limit` items.
    pub after_seq: Option<u64>,
    /// How many items (default 20, at most 100).
    pub limit: Option<u32>,
}

/// `list_permission_requests`'s arguments.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct PendingArgs {
    /// One bot (its id, a unique id prefix or its name); default: every bot.
    pub bot: Option<String>,
}

/// `answer_permission_request`'s arguments.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct AnswerArgs {
    /// The bot: its id, a unique id prefix or its name.
    pub bot: String,
    /// The request's id, as `list_permission_requests` gives it.
    pub request_id: String,
    /// `allow` or `deny`.
    pub behavior: String,
    /// What the model is told with a `deny`.
    pub message: Option<String>,
}

/// A D-Bus error in words, with botvisord's error name (`LimitExceeded: …`).
fn dbus_error(e: &zbus::Error) -> String {
    match error_name(e) {
        Some(name) => format!("{name}: {}", describe(e)),
        None => describe(e),
    }
}

fn failure(f: Failure) -> String {
    f.text
}

/// `s` cut to at most `max` bytes at a character boundary, and whether it was cut.
fn cut(s: &str, max: usize) -> (String, bool) {
    if s.len() <= max {
        return (s.to_owned(), false);
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    (format!("{}…", &s[..end]), true)
}

/// `v` as the text of a tool's answer: JSON, with control, invisible and text-direction
/// characters inside its strings as `\uXXXX`.
fn answer(v: Value) -> ToolResult {
    Ok(botvisor::text::escape_json(&v.to_string()).into_owned())
}

/// A chat item's payload for an answer: whole when it is small, else its `text` (or its JSON)
/// cut to [`MAX_ITEM_BYTES`] with `"truncated": true`.
fn item_payload(payload: &str) -> Value {
    let v: Value = serde_json::from_str(payload).unwrap_or(Value::Null);
    if payload.len() <= MAX_ITEM_BYTES && !botvisor::preview::is_preview(&v) {
        return v;
    }
    let whole = match v["text"].as_str() {
        Some(t) => t.to_owned(),
        None => payload.to_owned(),
    };
    let (text, _) = cut(&whole, MAX_ITEM_BYTES);
    json!({"truncated": true, "turn_id": v["turn_id"], "text": text})
}

/// Whether `folder` (canonical) is inside one of `allowed` (canonicalised here; one that does
/// not exist allows nothing).
fn folder_allowed(folder: &Path, allowed: &[PathBuf]) -> bool {
    allowed
        .iter()
        .filter_map(|a| std::fs::canonicalize(a).ok())
        .any(|a| folder.starts_with(a))
}

impl BotvisorMcp {
    /// A server over `conn` with `config`; `home` is where `~` in `[mcp] folders` points; `me`
    /// the calling bot's id.
    pub fn new(conn: Connection, config: McpConfig, home: PathBuf, me: Option<String>) -> Self {
        BotvisorMcp {
            conn,
            config,
            home,
            me,
            tool_router: Self::tool_router(),
        }
    }

    /// Err naming `[mcp] tools` when `tool` is not allowed.
    fn allowed(&self, tool: &str) -> Result<(), String> {
        if self.config.allows_tool(tool) {
            return Ok(());
        }
        Err(format!(
            "the tool `{tool}` is not allowed here: botvisor's configuration (`[mcp] tools`, \
             docs/mcp.md) allows {}; a person can do it with botvisorctl",
            self.config.tools.join(", ")
        ))
    }

    async fn bot(&self, spec: &str) -> Result<BotProxy<'static>, String> {
        let path = bots::path_of(&self.conn, spec).await.map_err(failure)?;
        bots::proxy(&self.conn, path).await.map_err(failure)
    }

    /// The name the MCP client gives (`clientInfo.name`: in the request's `_meta` where the
    /// protocol carries it there, else in `initialize`), for `created_by`; without one, `an MCP
    /// client`.
    fn client_name(ctx: &RequestContext<RoleServer>) -> String {
        ctx.client_info()
            .map(|i| i.name)
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| "an MCP client".to_owned())
            .chars()
            .filter(|c| !c.is_control())
            .take(botvisor::supervisor::MAX_CREATED_BY_CHARS)
            .collect()
    }

    /// The seq of the bot's last chat item (0: none), found with `GetChat` pages of one item
    /// (seqs are a bot's own, counted from 1): doubling, then halving.
    async fn last_seq(bot: &BotProxy<'_>) -> Result<u64, String> {
        let after = |s: u64| async move {
            bot.get_chat(s, 1)
                .await
                .map(|items| !items.is_empty())
                .map_err(|e| dbus_error(&e))
        };
        if !after(0).await? {
            return Ok(0);
        }
        // Invariant: an item after `lo`, none after `hi`.
        let (mut lo, mut hi) = (0u64, 1u64);
        while after(hi).await? {
            lo = hi;
            hi = hi.saturating_mul(2);
        }
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if after(mid).await? {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        Ok(hi)
    }
}

#[tool_router]
impl BotvisorMcp {
    /// Every bot with its state, runtime, folder, model, cost and open permission requests.
    #[tool(
        description = "List botvisor's bots (supervised Claude Code and Codex sessions): id, name, \
                       state, runtime, folder, model, cost in US dollars, open permission \
                       requests, and who created each (created_by, created_by_bot). `you` marks \
                       the bot this server runs under."
    )]
    async fn list_bots(&self) -> ToolResult {
        self.allowed("list_bots")?;
        let all = bots::all(&self.conn).await.map_err(failure)?;
        let list: Vec<Value> = all
            .iter()
            .map(|b| {
                json!({
                    "id": b.id,
                    "name": b.name,
                    "state": b.state,
                    "runtime": b.runtime,
                    "folder": b.cwd,
                    "model": b.model,
                    "permission_mode": b.permission_mode,
                    "cost_usd": b.cost_usd,
                    "queued_messages": b.queued_messages,
                    "pending_permissions": b.pending.len(),
                    "last_error": cut(&b.last_error, 1024).0,
                    "created_by": b.created_by,
                    "created_by_bot": b.created_by_bot,
                    "you": self.me.as_deref() == Some(b.id.as_str()),
                })
            })
            .collect();
        answer(json!({ "bots": list }))
    }

    /// Creates a bot in an allowed folder; botvisord records this server's client as its
    /// creator.
    #[tool(
        description = "Create a bot: a Claude Code (runtime `claude`) or Codex (`codex`) session \
                       working in `folder`, supervised by botvisor. Returns its id and name. The \
                       folder must be inside the folders botvisor's `[mcp] folders` allows."
    )]
    async fn create_bot(
        &self,
        Parameters(a): Parameters<CreateArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> ToolResult {
        self.allowed("create_bot")?;
        let folder = std::fs::canonicalize(&a.folder).map_err(|e| {
            format!(
                "folder `{}`: {e}; give the absolute path of an existing folder",
                botvisor::text::escape(&a.folder, false)
            )
        })?;
        let allowed = self.config.folder_paths(&self.home);
        if !folder_allowed(&folder, &allowed) {
            return Err(format!(
                "folder {} is outside the folders this server may create bots in (`[mcp] \
                 folders`: {})",
                botvisor::text::escape(&folder.to_string_lossy(), false),
                allowed
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        let cwd = folder.to_string_lossy().into_owned();
        let client = Self::client_name(&ctx);
        let mut options: HashMap<&str, Variant<'_>> = HashMap::new();
        options.insert("cwd", Variant::from(cwd.as_str()));
        options.insert("created_by", Variant::from(client.as_str()));
        for (key, value) in [
            ("runtime", &a.runtime),
            ("model", &a.model),
            ("permission_mode", &a.permission_mode),
            ("name", &a.name),
        ] {
            if let Some(v) = value {
                options.insert(key, Variant::from(v.as_str()));
            }
        }
        if a.branch.is_some() && a.worktree != Some(true) {
            return Err("`branch` names a worktree's branch: give it with `worktree: true`".into());
        }
        if a.worktree == Some(true) {
            let mut worktree: HashMap<&str, Variant<'_>> = HashMap::new();
            if let Some(branch) = &a.branch {
                worktree.insert("branch", Variant::from(branch.as_str()));
            }
            options.insert("worktree", Variant::from(worktree));
        }
        let manager = ManagerProxy::new(&self.conn)
            .await
            .map_err(|e| dbus_error(&e))?;
        let path = manager
            .create_bot(options)
            .await
            .map_err(|e| dbus_error(&e))?;
        let bot = bots::proxy(&self.conn, path).await.map_err(failure)?;
        let id = bot.id().await.map_err(|e| dbus_error(&e))?;
        let name = bot.name().await.map_err(|e| dbus_error(&e))?;
        let runtime = bot.runtime().await.map_err(|e| dbus_error(&e))?;
        let folder = bot.cwd().await.map_err(|e| dbus_error(&e))?;
        let branch = bot.branch().await.map_err(|e| dbus_error(&e))?;
        answer(
            json!({"id": id, "name": name, "folder": folder, "runtime": runtime,
                      "branch": branch, "created_by": client, "created_by_bot": self.me}),
        )
    }

    /// Sends a message and waits (bounded) for its turn's end.
    #[tool(
        description = "Send a message to a bot and wait for its turn to end (at most `timeout_s`, \
                       default 50 s). Returns the bot's answer text and the turn's outcome \
                       (success, error, interrupted, …). On timeout the turn goes on: the answer \
                       says so and gives its turn id; read_chat shows its end later."
    )]
    async fn send_message(&self, Parameters(a): Parameters<SendArgs>) -> ToolResult {
        self.allowed("send_message")?;
        let wait = a.timeout_s.unwrap_or(DEFAULT_WAIT_S);
        if wait == 0 || wait > MAX_WAIT_S {
            return Err(format!(
                "timeout_s must be from 1 to {MAX_WAIT_S} seconds, got {wait}"
            ));
        }
        if a.text.trim().is_empty() {
            return Err("text is empty: there is nothing to send".into());
        }
        if a.text.len() > botvisor::sizes::MAX_SEND_BYTES {
            return Err(botvisor::sizes::send_too_long(a.text.len()));
        }
        if let Some(why) = botvisor::sizes::unsendable(&a.text) {
            return Err(why);
        }
        let bot = self.bot(&a.bot).await?;
        let path = bot.inner().path().to_owned();
        let id = bot.id().await.map_err(|e| dbus_error(&e))?;
        if self.me.as_deref() == Some(id.as_str()) {
            return Err(
                "a bot cannot send a message to itself and wait: the message would wait behind \
                 the very turn that waits for it"
                    .into(),
            );
        }
        // Subscribed before Send: nothing of the turn falls before the subscription.
        let mut events = botvisor_signals(&self.conn).await.map_err(failure)?;
        let turn_id = bot
            .send(&a.text, HashMap::new())
            .await
            .map_err(|e| dbus_error(&e))?;
        let mut said: Vec<String> = Vec::new();
        let deadline = tokio::time::sleep(Duration::from_secs(wait));
        tokio::pin!(deadline);
        let outcome = loop {
            tokio::select! {
                event = events.recv() => match event {
                    Some(Drained::First(Ok(msg))) => {
                        let hdr = msg.header();
                        let on_bot = hdr.path().is_some_and(|p| p.as_str() == path.as_str());
                        let member = hdr.member().map(|m| m.as_str().to_owned());
                        match member.as_deref() {
                            Some("ChatItemAdded") if on_bot => {
                                let (_, kind, payload): (u64, String, String) =
                                    msg.body().deserialize().map_err(|e| e.to_string())?;
                                let v: Value =
                                    serde_json::from_str(&payload).unwrap_or(Value::Null);
                                if kind == "assistant" && v["turn_id"] == turn_id.as_str()
                                    && let Some(t) = item_payload(&payload)["text"].as_str()
                                {
                                    said.push(t.to_owned());
                                }
                            }
                            Some("TurnFinished") if on_bot => {
                                let (t, outcome): (String, String) =
                                    msg.body().deserialize().map_err(|e| e.to_string())?;
                                if t == turn_id {
                                    break outcome;
                                }
                            }
                            Some("InterfacesRemoved")
                                if hdr.path().is_some_and(|p| p.as_str() == ROOT_PATH) =>
                            {
                                let gone = msg
                                    .body()
                                    .deserialize::<(zbus::OwnedObjectPath, Vec<String>)>()
                                    .is_ok_and(|(p, _)| p.as_str() == path.as_str());
                                if gone {
                                    return Err(format!(
                                        "the bot was deleted before turn {turn_id} ended"
                                    ));
                                }
                            }
                            _ => {}
                        }
                    }
                    Some(Drained::First(Err(e))) => return Err(dbus_error(&e)),
                    None => return Err("the connection to botvisord ended".into()),
                    Some(Drained::Second(sig)) => {
                        if sig.args().is_ok_and(|a| a.new_owner().is_none()) {
                            return Err(format!(
                                "botvisord left the bus before turn {turn_id} ended; it ends the \
                                 turn when it runs again (read_chat shows it)"
                            ));
                        }
                    }
                },
                _ = &mut deadline => {
                    let (text, truncated) = cut(&said.join("\n\n"), MAX_ANSWER_BYTES);
                    return answer(json!({
                        "bot": id, "turn_id": turn_id, "finished": false, "outcome": "running",
                        "answer": text, "truncated": truncated,
                        "note": format!("the turn goes on after {wait} s; read_chat with this \
                                         bot shows its end (a `turn_finished` item with turn_id \
                                         {turn_id})"),
                    }));
                }
            }
        };
        let (text, truncated) = cut(&said.join("\n\n"), MAX_ANSWER_BYTES);
        answer(
            json!({"bot": id, "turn_id": turn_id, "finished": true, "outcome": outcome,
                      "answer": text, "truncated": truncated}),
        )
    }

    /// A page of a bot's chat.
    #[tool(
        description = "Read a bot's chat: items oldest first, each with seq, kind (user, \
                       assistant, tool_use, tool_result, permission_request, turn_finished, …), \
                       time and payload (long payloads cut). Without after_seq: the most recent \
                       `limit` items (default 20, at most 100). Page on with next_after_seq."
    )]
    async fn read_chat(&self, Parameters(a): Parameters<ChatArgs>) -> ToolResult {
        self.allowed("read_chat")?;
        let limit = a.limit.unwrap_or(DEFAULT_CHAT_ITEMS);
        if limit == 0 || limit > MAX_CHAT_ITEMS {
            return Err(format!(
                "limit must be from 1 to {MAX_CHAT_ITEMS}, got {limit}"
            ));
        }
        let bot = self.bot(&a.bot).await?;
        let after = match a.after_seq {
            Some(s) => s,
            None => Self::last_seq(&bot).await?.saturating_sub(u64::from(limit)),
        };
        let items = bot
            .get_chat(after, limit)
            .await
            .map_err(|e| dbus_error(&e))?;
        let mut out = Vec::new();
        let mut bytes = 0;
        let mut next = after;
        for (seq, kind, time, payload) in &items {
            let item = json!({"seq": seq, "kind": kind, "time": time,
                              "payload": item_payload(payload)});
            let size = item.to_string().len();
            if !out.is_empty() && bytes + size > MAX_PAGE_BYTES {
                break;
            }
            bytes += size;
            next = *seq;
            out.push(item);
        }
        let more = out.len() < items.len() || items.len() as u32 == limit;
        answer(json!({"items": out, "next_after_seq": next, "more": more}))
    }

    /// Open permission requests of one bot or all.
    #[tool(
        description = "List the open permission requests (a bot's agent asks before it runs a \
                       tool): bot, request_id, tool and input. Of one bot, or of every bot."
    )]
    async fn list_permission_requests(&self, Parameters(a): Parameters<PendingArgs>) -> ToolResult {
        self.allowed("list_permission_requests")?;
        let all = bots::all(&self.conn).await.map_err(failure)?;
        let only = match &a.bot {
            Some(spec) => Some(
                self.bot(spec)
                    .await?
                    .id()
                    .await
                    .map_err(|e| dbus_error(&e))?,
            ),
            None => None,
        };
        let mut out = Vec::new();
        for b in all
            .iter()
            .filter(|b| only.as_ref().is_none_or(|o| *o == b.id))
        {
            for (request_id, tool, input) in &b.pending {
                out.push(
                    json!({"bot": b.id, "bot_name": b.name, "request_id": request_id,
                                "tool": tool, "input": item_payload(input)}),
                );
            }
        }
        answer(json!({"requests": out}))
    }

    /// Answers a permission request (not allowed by default).
    #[tool(
        description = "Answer a bot's open permission request: behavior `allow` or `deny` (with \
                       a message for the model). A bot never answers its own requests. Not \
                       allowed unless botvisor's `[mcp] tools` names it."
    )]
    async fn answer_permission_request(
        &self,
        Parameters(a): Parameters<AnswerArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> ToolResult {
        self.allowed("answer_permission_request")?;
        if !matches!(a.behavior.as_str(), "allow" | "deny") {
            return Err(format!(
                "behavior must be `allow` or `deny`, not `{}`",
                botvisor::text::escape(&a.behavior, false)
            ));
        }
        let bot = self.bot(&a.bot).await?;
        let client = format!("{} (mcp)", Self::client_name(&ctx));
        let mut options: HashMap<&str, Variant<'_>> = HashMap::new();
        options.insert("client", Variant::from(client.as_str()));
        if let Some(m) = &a.message {
            options.insert("message", Variant::from(m.as_str()));
        }
        bot.respond_permission(&a.request_id, &a.behavior, options)
            .await
            .map_err(|e| dbus_error(&e))?;
        answer(json!({"answered": a.request_id, "behavior": a.behavior}))
    }

    /// Interrupts a bot's running turn.
    #[tool(
        description = "Interrupt a bot's running turn (it ends `interrupted`; queued messages \
                       stay queued). Says whether a turn was running."
    )]
    async fn interrupt_bot(&self, Parameters(a): Parameters<BotArg>) -> ToolResult {
        self.allowed("interrupt_bot")?;
        let bot = self.bot(&a.bot).await?;
        let interrupted = bot.interrupt().await.map_err(|e| dbus_error(&e))?;
        answer(json!({"interrupted": interrupted}))
    }

    /// Stops a bot's agent.
    #[tool(
        description = "Stop a bot's agent process gently (its conversation is kept; the next \
                       message starts it again)."
    )]
    async fn stop_bot(&self, Parameters(a): Parameters<BotArg>) -> ToolResult {
        self.allowed("stop_bot")?;
        let bot = self.bot(&a.bot).await?;
        bot.stop().await.map_err(|e| dbus_error(&e))?;
        answer(json!({"stopping": bot.id().await.map_err(|e| dbus_error(&e))?}))
    }

    /// The schedules, with their next due times.
    #[tool(
        description = "List botvisor's scheduled prompts: id, bot, calendar (systemd's \
                       normalized form), prompt, whether paused, next due time and last fire \
                       (Unix seconds)."
    )]
    async fn list_schedules(&self) -> ToolResult {
        self.allowed("list_schedules")?;
        let all = super::schedule::all(&self.conn).await.map_err(failure)?;
        let list: Vec<Value> = all
            .iter()
            .map(|s| {
                json!({
                    "id": s.id, "bot": s.bot.rsplit('/').next().unwrap_or_default(),
                    "calendar": s.calendar, "prompt": cut(&s.prompt, 1024).0,
                    "when_busy": s.when_busy, "conversation": s.conversation,
                    "paused": s.paused,
                    "next": s.next, "last_fired": s.last_fired,
                })
            })
            .collect();
        answer(json!({ "schedules": list }))
    }

    /// Puts a prompt on a calendar (not allowed by default).
    #[tool(
        description = "Put a prompt on a calendar for a bot: a systemd user timer sends `prompt` \
                       to `bot` at each time of `calendar` (systemd's syntax), once per due \
                       time, with no one there. Returns the schedule's id and next due time. \
                       Not allowed unless botvisor's `[mcp] tools` names it."
    )]
    async fn create_schedule(&self, Parameters(a): Parameters<ScheduleArgs>) -> ToolResult {
        self.allowed("create_schedule")?;
        let path = bots::path_of(&self.conn, &a.bot).await.map_err(failure)?;
        let mut options: HashMap<&str, Variant<'_>> = HashMap::new();
        if a.skip_when_busy == Some(true) {
            options.insert("when_busy", "skip".into());
        }
        if a.fresh == Some(true) {
            options.insert("conversation", "fresh".into());
        }
        let proxy = botvisor::dbus::client::SchedulesProxy::new(&self.conn)
            .await
            .map_err(|e| dbus_error(&e))?;
        let id = proxy
            .create_schedule(&path.as_ref(), &a.calendar, &a.prompt, options)
            .await
            .map_err(|e| dbus_error(&e))?;
        let next = super::schedule::all(&self.conn)
            .await
            .map_err(failure)?
            .into_iter()
            .find(|s| s.id == id)
            .map_or(0, |s| s.next);
        answer(json!({"id": id, "next": next}))
    }

    /// Deletes a schedule (not allowed by default).
    #[tool(
        description = "Delete a scheduled prompt and its timer. Not allowed unless botvisor's \
                       `[mcp] tools` names it."
    )]
    async fn delete_schedule(&self, Parameters(a): Parameters<ScheduleIdArg>) -> ToolResult {
        self.allowed("delete_schedule")?;
        let proxy = botvisor::dbus::client::SchedulesProxy::new(&self.conn)
            .await
            .map_err(|e| dbus_error(&e))?;
        proxy
            .delete_schedule(&a.id)
            .await
            .map_err(|e| dbus_error(&e))?;
        answer(json!({"deleted": a.id}))
    }

    /// Deletes a bot (not allowed by default).
    #[tool(
        description = "Delete a bot with its chat, for good. Not allowed unless botvisor's \
                       `[mcp] tools` names it."
    )]
    async fn delete_bot(&self, Parameters(a): Parameters<BotArg>) -> ToolResult {
        self.allowed("delete_bot")?;
        let bot = self.bot(&a.bot).await?;
        let id = bot.id().await.map_err(|e| dbus_error(&e))?;
        if self.me.as_deref() == Some(id.as_str()) {
            return Err("a bot cannot delete itself".into());
        }
        bot.delete().await.map_err(|e| dbus_error(&e))?;
        answer(json!({"deleted": id}))
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for BotvisorMcp {
    fn get_info(&self) -> ServerConfig {
        let me = match &self.me {
            Some(id) => format!(" You are bot {id}."),
            None => String::new(),
        };
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("botvisor", env!("CARGO_PKG_VERSION")))
            .with_instructions(format!(
                "botvisor supervises coding-agent sessions (bots). These tools list, create and \
                 drive them: send_message waits for the bot's answer.{me}"
            ))
    }
}

/// Runs the server on stdin and stdout until the client closes them. `config` is botvisor's
/// configuration file (`None`: the default one, which may be missing).
pub async fn run(conn: &Connection, config: Option<PathBuf>) -> Result<u8, Failure> {
    let required = config.is_some();
    let path = config.unwrap_or_else(botvisor::config::paths::default_config);
    let cfg = botvisor::config::Config::load(&path, required)
        .map_err(|e| Failure::usage(e.to_string()))?;
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/"));
    let me = std::env::var(botvisor::process::tree::BOT_MARKER)
        .ok()
        .filter(|m| !m.is_empty());
    let server = BotvisorMcp::new(conn.clone(), cfg.mcp, home, me);
    let service = server
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| Failure::failed(format!("MCP: the client's initialize failed: {e}")))?;
    service
        .waiting()
        .await
        .map_err(|e| Failure::failed(format!("MCP server: {e}")))?;
    Ok(super::fail::OK)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_are_cut_at_a_character_boundary() {
        assert_eq!(cut("abc", 3), ("abc".to_owned(), false));
        assert_eq!(cut("aé", 2), ("a…".to_owned(), true));
    }

    #[test]
    fn a_big_item_is_cut_and_says_so() {
        let big = json!({"turn_id": "t", "text": "x".repeat(MAX_ITEM_BYTES * 2)}).to_string();
        let v = item_payload(&big);
        assert_eq!(v["truncated"], true);
        assert_eq!(v["turn_id"], "t");
        assert!(v["text"].as_str().unwrap().len() <= MAX_ITEM_BYTES + 3);
        let small = json!({"text": "hi"}).to_string();
        assert_eq!(item_payload(&small), json!({"text": "hi"}));
    }

    #[test]
    fn folders_inside_the_allowed_ones_only() {
        let dir = tempfile_dir();
        let inside = dir.join("a/b");
        std::fs::create_dir_all(&inside).unwrap();
        let inside = std::fs::canonicalize(inside).unwrap();
        assert!(folder_allowed(&inside, &[dir.join("a")]));
        assert!(!folder_allowed(&inside, &[dir.join("c")]));
        assert!(!folder_allowed(Path::new("/"), std::slice::from_ref(&dir)));
        std::fs::remove_dir_all(dir).unwrap();
    }

    fn tempfile_dir() -> PathBuf {
        let d = std::env::temp_dir().join(format!("botvisorctl-mcp-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }
}
