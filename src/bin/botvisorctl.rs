//! `botvisorctl`: the command-line client of botvisord. See `botvisorctl --help`.

use std::collections::HashMap;
use std::io::{IsTerminal, Read};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use futures_util::StreamExt;
use serde_json::{Value, json};
use zbus::{Connection, OwnedObjectPath, Variant};

use botvisor::dbus::client::{BotProxy, ManagerProxy};
use botvisor::text::escape;

/// Prints a line to stdout with unsafe characters escaped (see `botvisor::text`): nothing the
/// daemon, an agent or another program put in a name, a chat or an error steers the terminal.
/// Newlines and tabs are kept.
macro_rules! say {
    () => { println!() };
    ($($t:tt)*) => { println!("{}", escape(&format!($($t)*), true)) };
}

/// [`say!`] without the newline.
macro_rules! say_more {
    ($($t:tt)*) => { print!("{}", escape(&format!($($t)*), true)) };
}

/// [`say!`] to stderr.
macro_rules! tell {
    ($($t:tt)*) => { eprintln!("{}", escape(&format!($($t)*), true)) };
}

/// Prints a JSON value as one line; unsafe characters inside its strings become `\uXXXX`.
fn say_json(v: &Value) {
    println!("{}", botvisor::text::escape_json(&v.to_string()));
}

/// Drive botvisor's bots (supervised Claude Code sessions) from a terminal or a script.
#[derive(Parser, Debug)]
#[command(name = "botvisorctl", version)]
struct Args {
    /// Print JSON (one object per line for streams) instead of readable text.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Create a bot working in DIR.
    Create {
        /// The bot's working directory (made absolute).
        #[arg(long, default_value = ".")]
        cwd: std::path::PathBuf,
        /// A name for people.
        #[arg(long)]
        name: Option<String>,
        /// Runtime (default claude).
        #[arg(long)]
        runtime: Option<String>,
        /// Model.
        #[arg(long)]
        model: Option<String>,
        /// Permission mode (default, acceptEdits, plan, bypassPermissions, ...).
        #[arg(long)]
        permission_mode: Option<String>,
        /// Extra environment for the agent, KEY=VALUE (repeatable).
        #[arg(long = "env", value_name = "KEY=VALUE")]
        env: Vec<String>,
        /// Stop the agent after this many idle seconds (0: never).
        #[arg(long)]
        idle_timeout: Option<u32>,
    },
    /// List the bots.
    List,
    /// Send a message and print the reply as it arrives; returns at the turn's end.
    Send {
        /// Bot id, name, id prefix or object path.
        bot: String,
        /// The message; `-` reads it from stdin.
        text: String,
    },
    /// Print a bot's chat history.
    Chat {
        /// Bot id, name, id prefix or object path.
        bot: String,
        /// Only items after this sequence number.
        #[arg(long, default_value_t = 0)]
        after: u64,
        /// At most this many items (0: all of them).
        #[arg(long, default_value_t = 0)]
        limit: u32,
    },
    /// Stop a bot's agent gently; returns once it is stopped.
    Stop {
        /// Bot id, name, id prefix or object path.
        bot: String,
    },
    /// Follow one bot (or all) live: state changes, chat items, text as it streams, permission
    /// prompts. Ctrl-C ends it.
    Watch {
        /// Bot id, name, id prefix or object path; all bots when left out.
        bot: Option<String>,
    },
    /// Answer a permission prompt.
    Answer {
        /// Bot id, name, id prefix or object path.
        bot: String,
        /// The request id (shown by `watch` and `send`).
        request: String,
        /// `allow` or `deny`.
        #[arg(value_parser = ["allow", "deny"])]
        behavior: String,
        /// What the model is told (with deny).
        #[arg(long)]
        message: Option<String>,
        /// The input the tool runs with instead, as a JSON object (with allow).
        #[arg(long, value_name = "JSON")]
        updated_input: Option<String>,
    },
    /// End the running turn; queued messages stay queued.
    Interrupt {
        /// Bot id, name, id prefix or object path.
        bot: String,
    },
    /// Change the permission mode and/or the model, live when the agent runs.
    Set {
        /// Bot id, name, id prefix or object path.
        bot: String,
        /// Permission mode (default, acceptEdits, plan, auto, dontAsk, bypassPermissions).
        #[arg(long)]
        mode: Option<String>,
        /// Model.
        #[arg(long)]
        model: Option<String>,
    },
    /// Restart a bot's agent (also after state `failed`).
    Restart {
        /// Bot id, name, id prefix or object path.
        bot: String,
        /// Forget the conversation: the next one is new.
        #[arg(long)]
        fresh: bool,
    },
    /// Delete a bot and its history.
    Delete {
        /// Bot id, name, id prefix or object path.
        bot: String,
    },
}

/// A failure to report, with the exit code.
struct Failure(String);

impl From<zbus::Error> for Failure {
    fn from(e: zbus::Error) -> Self {
        Failure(describe(&e))
    }
}

impl From<zbus::fdo::Error> for Failure {
    fn from(e: zbus::fdo::Error) -> Self {
        Failure(describe(&zbus::Error::from(e)))
    }
}

const NOT_RUNNING: &str = "botvisord is not running on this session bus; start it with \
                           `botvisord` (or `systemctl --user start botvisord`)";

fn describe(e: &zbus::Error) -> String {
    match e {
        zbus::Error::FDO(fdo)
            if matches!(
                **fdo,
                zbus::fdo::Error::ServiceUnknown(_) | zbus::fdo::Error::NameHasNoOwner(_)
            ) =>
        {
            NOT_RUNNING.into()
        }
        zbus::Error::MethodError(name, text, _) => {
            let name = name.as_str();
            if name == "org.freedesktop.DBus.Error.ServiceUnknown"
                || name == "org.freedesktop.DBus.Error.NameHasNoOwner"
            {
                return NOT_RUNNING.into();
            }
            let short = name
                .strip_prefix("org.botvisor.Botvisor1.Error.")
                .unwrap_or(name);
            match text {
                Some(t) => format!("{short}: {t}"),
                None => short.to_owned(),
            }
        }
        other => other.to_string(),
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args = Args::parse();
    let conn = match Connection::session().await {
        Ok(c) => c,
        Err(e) => {
            tell!(
                "botvisorctl: cannot connect to the session bus ({e}); is DBUS_SESSION_BUS_ADDRESS set?"
            );
            return ExitCode::from(2);
        }
    };
    let code = match run(&conn, args).await {
        Ok(code) => code,
        Err(Failure(text)) => {
            tell!("botvisorctl: {text}");
            ExitCode::FAILURE
        }
    };
    // Do not wait for a terminal question that another client answered meanwhile: the runtime
    // would wait for its blocking read.
    use std::io::Write;
    let _ = std::io::stdout().flush();
    if code == ExitCode::SUCCESS {
        std::process::exit(0);
    }
    std::process::exit(1);
}

async fn resolve(conn: &Connection, bot: &str) -> Result<BotProxy<'static>, Failure> {
    let path: OwnedObjectPath = if bot.starts_with('/') {
        OwnedObjectPath::try_from(bot.to_owned())
            .map_err(|e| Failure(format!("`{bot}` is not an object path: {e}")))?
    } else {
        ManagerProxy::new(conn).await?.get_bot(bot).await?
    };
    Ok(BotProxy::builder(conn).path(path).build().await?)
}

async fn run(conn: &Connection, args: Args) -> Result<ExitCode, Failure> {
    let json = args.json;
    match args.command {
        Cmd::Create {
            cwd,
            name,
            runtime,
            model,
            permission_mode,
            env,
            idle_timeout,
        } => {
            let cwd = std::path::absolute(&cwd)
                .map_err(|e| Failure(format!("cannot make {} absolute: {e}", cwd.display())))?;
            let cwd = cwd
                .to_str()
                .ok_or_else(|| Failure("the working directory is not valid UTF-8".into()))?
                .to_owned();
            let mut env_map = HashMap::new();
            for kv in &env {
                let (k, v) = kv
                    .split_once('=')
                    .ok_or_else(|| Failure(format!("--env `{kv}` is not KEY=VALUE")))?;
                env_map.insert(k.to_owned(), v.to_owned());
            }
            let mut options: HashMap<&str, Variant<'_>> = HashMap::new();
            options.insert("cwd", Variant::from(cwd.as_str()));
            for (key, value) in [
                ("name", &name),
                ("runtime", &runtime),
                ("model", &model),
                ("permission_mode", &permission_mode),
            ] {
                if let Some(v) = value {
                    options.insert(key, Variant::from(v.as_str()));
                }
            }
            if !env_map.is_empty() {
                options.insert("env", Variant::from(env_map));
            }
            if let Some(s) = idle_timeout {
                options.insert("idle_timeout_s", Variant::from(s));
            }
            let path = ManagerProxy::new(conn).await?.create_bot(options).await?;
            let bot = BotProxy::builder(conn).path(path.clone()).build().await?;
            let id = bot.id().await?;
            if json {
                say_json(&json!({"id": id, "path": path.as_str()}));
            } else {
                say!("{id}");
            }
        }
        Cmd::List => {
            let paths = ManagerProxy::new(conn).await?.list_bots().await?;
            let mut rows = Vec::new();
            for path in paths {
                let bot = BotProxy::builder(conn).path(path.clone()).build().await?;
                rows.push(json!({
                    "id": bot.id().await?,
                    "path": path.as_str(),
                    "name": bot.name().await?,
                    "state": bot.state().await?,
                    "cwd": bot.cwd().await?,
                    "runtime": bot.runtime().await?,
                    "model": bot.model().await?,
                    "permission_mode": bot.permission_mode().await?,
                    "session_id": bot.session_id().await?,
                    "process_id": bot.process_id().await?,
                    "queued_messages": bot.queued_messages().await?,
                    "last_error": bot.last_error().await?,
                }));
            }
            if json {
                say_json(&Value::Array(rows));
            } else if rows.is_empty() {
                say!("no bots; create one with `botvisorctl create --cwd DIR`");
            } else {
                say!("{:<32}  {:<16}  {:<8}  CWD", "ID", "NAME", "STATE");
                for r in rows {
                    let cell =
                        |k: &str| escape(r[k].as_str().unwrap_or_default(), false).into_owned();
                    say!(
                        "{:<32}  {:<16}  {:<8}  {}",
                        cell("id"),
                        cell("name"),
                        cell("state"),
                        cell("cwd")
                    );
                }
            }
        }
        Cmd::Send { bot, text } => {
            let text = if text == "-" {
                let mut s = String::new();
                std::io::stdin()
                    .read_to_string(&mut s)
                    .map_err(|e| Failure(format!("cannot read stdin: {e}")))?;
                // The newline that ends the last line is not part of the message.
                if s.ends_with('\n') {
                    s.pop();
                    if s.ends_with('\r') {
                        s.pop();
                    }
                }
                s
            } else {
                text
            };
            let bot = resolve(conn, &bot).await?;
            let mut items = bot.receive_chat_item_added().await?;
            let mut finished = bot.receive_turn_finished().await?;
            let mut deltas = bot.receive_text_delta().await?;
            let mut prompts = bot.receive_permission_requested().await?;
            let mut states = bot.receive_state_changed().await;
            let dbus = zbus::fdo::DBusProxy::new(conn).await?;
            let mut owner = dbus
                .receive_name_owner_changed_with_args(&[(0, botvisor::dbus::BUS_NAME)])
                .await?;
            let turn_id = bot.send(&text, HashMap::new()).await?;
            let interactive = std::io::stdin().is_terminal() && std::io::stdout().is_terminal();
            if !json && std::io::stderr().is_terminal() {
                tell!("(turn {turn_id})");
            }
            let mut mine = false;
            let mut streamed = false;
            // Inline answers: one question at a time on the terminal, while events keep coming.
            let mut waiting: std::collections::VecDeque<(String, String, String)> =
                Default::default();
            let mut asking: Option<(String, tokio::task::JoinHandle<bool>)> = None;
            let mut answered_elsewhere: Option<String> = None;
            loop {
                if asking.is_none()
                    && let Some((id, tool, input)) = waiting.pop_front()
                {
                    let question = format!("Allow {tool} {}? [y/N] ", cut(&input, 300));
                    asking = Some((id, tokio::task::spawn_blocking(move || ask(&question))));
                }
                tokio::select! {
                    yes = async { (&mut asking.as_mut().unwrap().1).await }, if asking.is_some() => {
                        let (id, _) = asking.take().unwrap();
                        if answered_elsewhere.as_deref() == Some(id.as_str()) {
                            continue;
                        }
                        let behavior = if yes.unwrap_or(false) { "allow" } else { "deny" };
                        if let Err(e) = bot.respond_permission(&id, behavior, HashMap::new()).await {
                            tell!("botvisorctl: {}", describe(&e));
                        }
                    }
                    Some(sig) = items.next() => {
                        let a = sig.args()?;
                        let payload = whole_payload(&bot, a.seq, &a.payload).await;
                        if a.kind == "user" {
                            mine = payload["turn_id"] == turn_id.as_str();
                            continue;
                        }
                        if a.kind == "permission_answer" {
                            let id = payload["request_id"].as_str().unwrap_or_default().to_owned();
                            let me = conn.unique_name().map(|n| n.to_string()).unwrap_or_default();
                            if payload["by"] != me.as_str() {
                                waiting.retain(|(w, _, _)| *w != id);
                                if asking.as_ref().is_some_and(|(a, _)| *a == id) {
                                    tell!(
                                        "\n(answered elsewhere: {} by {}; press Enter to go on)",
                                        payload["behavior"].as_str().unwrap_or("?"),
                                        payload["by"].as_str().unwrap_or("?")
                                    );
                                    answered_elsewhere = Some(id);
                                }
                            }
                        }
                        if !(mine || payload.get("turn_id").is_none()) {
                            continue;
                        }
                        if a.kind == "assistant" && streamed && !json {
                            say!();
                            streamed = false;
                            continue;
                        }
                        print_item(json, a.seq, &a.kind, "", &payload);
                    }
                    Some(sig) = deltas.next() => {
                        let a = sig.args()?;
                        if a.turn_id == turn_id && !json {
                            use std::io::Write;
                            say_more!("{}", a.text);
                            let _ = std::io::stdout().flush();
                            streamed = true;
                        }
                    }
                    Some(sig) = prompts.next() => {
                        let a = sig.args()?;
                        let (id, tool, input) = (a.request_id.clone(), a.tool.clone(), a.input_json.clone());
                        if json {
                            say_json(&json!({"permission_requested": id, "tool": tool, "input": serde_json::from_str::<Value>(&input).unwrap_or(Value::Null)}));
                        }
                        if interactive {
                            waiting.push_back((id, tool, input));
                        } else if !json {
                            say!(
                                "[permission] {tool} {} — answer with: botvisorctl answer {} {id} allow|deny",
                                cut(&input, 200),
                                bot.id().await.unwrap_or_default()
                            );
                        }
                    }
                    Some(change) = states.next() => {
                        if change.get().await.ok().as_deref() == Some("failed") {
                            let last = bot.last_error().await.unwrap_or_default();
                            return Err(Failure(format!("the bot failed before the turn ended: {last}")));
                        }
                    }
                    Some(sig) = owner.next() => {
                        if sig.args().is_ok_and(|a| a.new_owner().is_none()) {
                            return Err(Failure(
                                "botvisord went away; the message stays queued for its next start".into(),
                            ));
                        }
                    }
                    Some(sig) = finished.next() => {
                        let a = sig.args()?;
                        if a.turn_id == turn_id {
                            if json {
                                say_json(&json!({"turn_finished": a.turn_id, "outcome": a.outcome}));
                            } else if a.outcome != "success" {
                                tell!("botvisorctl: the turn ended: {}", a.outcome);
                            }
                            return Ok(if a.outcome == "success" { ExitCode::SUCCESS } else { ExitCode::FAILURE });
                        }
                    }
                    else => return Err(Failure("the bus connection closed".into())),
                }
            }
        }
        Cmd::Chat { bot, after, limit } => {
            let bot = resolve(conn, &bot).await?;
            // Page by page (each reply is bounded) until the end or the limit.
            let mut after = after;
            let mut left = if limit == 0 { u64::MAX } else { limit as u64 };
            while left > 0 {
                let page = bot.get_chat(after, left.min(10_000) as u32).await?;
                if page.is_empty() {
                    break;
                }
                for (seq, kind, time, payload) in page {
                    let payload = whole_payload(&bot, seq, &payload).await;
                    print_item(json, seq, &kind, &time, &payload);
                    after = seq;
                    left -= 1;
                }
            }
        }
        Cmd::Stop { bot } => {
            let bot = resolve(conn, &bot).await?;
            let mut changes = bot.receive_state_changed().await;
            bot.stop().await?;
            let done = tokio::time::timeout(std::time::Duration::from_secs(120), async {
                loop {
                    let state: String = bot.inner().get_property("State").await?;
                    if state == "stopped" || state == "failed" {
                        return Ok::<_, zbus::Error>(state);
                    }
                    changes.next().await;
                }
            })
            .await;
            match done {
                Ok(Ok(state)) if state == "failed" => {
                    let last = bot.last_error().await.unwrap_or_default();
                    return Err(Failure(format!("the stop failed: {last}")));
                }
                Ok(Ok(_)) => {}
                Ok(Err(e)) => return Err(e.into()),
                Err(_) => return Err(Failure("the agent did not stop within 120 s".into())),
            }
        }
        Cmd::Watch { bot } => return watch(conn, bot, json).await,
        Cmd::Answer {
            bot,
            request,
            behavior,
            message,
            updated_input,
        } => {
            let bot = resolve(conn, &bot).await?;
            let mut options: HashMap<&str, Variant<'_>> = HashMap::new();
            if let Some(m) = &message {
                options.insert("message", Variant::from(m.as_str()));
            }
            if let Some(u) = &updated_input {
                options.insert("updated_input", Variant::from(u.as_str()));
            }
            bot.respond_permission(&request, &behavior, options).await?;
        }
        Cmd::Interrupt { bot } => {
            let done = resolve(conn, &bot).await?.interrupt().await?;
            if json {
                say_json(&json!({ "interrupted": done }));
            } else if !done {
                say!("no turn was running: nothing to interrupt");
            }
        }
        Cmd::Set { bot, mode, model } => {
            if mode.is_none() && model.is_none() {
                return Err(Failure("give --mode and/or --model".into()));
            }
            let bot = resolve(conn, &bot).await?;
            if let Some(mode) = mode {
                bot.set_permission_mode(&mode).await?;
            }
            if let Some(model) = model {
                bot.set_model(&model).await?;
            }
        }
        Cmd::Restart { bot, fresh } => {
            let bot = resolve(conn, &bot).await?;
            let options = HashMap::from([("fresh", Variant::from(fresh))]);
            bot.restart(options).await?;
        }
        Cmd::Delete { bot } => {
            resolve(conn, &bot).await?.delete().await?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Asks a yes/no question on the terminal.
fn ask(question: &str) -> bool {
    use std::io::Write;
    eprint!("{}", escape(question, false));
    let _ = std::io::stderr().flush();
    let mut line = String::new();
    if std::io::stdin().read_line(&mut line).is_err() {
        return false;
    }
    matches!(line.trim(), "y" | "Y" | "yes" | "Yes")
}

/// Follows the daemon's signals for one bot or all of them.
async fn watch(conn: &Connection, bot: Option<String>, json: bool) -> Result<ExitCode, Failure> {
    let only: Option<String> = match &bot {
        Some(b) => Some(resolve(conn, b).await?.inner().path().to_string()),
        None => None,
    };
    let rule = zbus::MatchRule::builder()
        .msg_type(zbus::message::Type::Signal)
        .sender(botvisor::dbus::BUS_NAME)
        .build()?;
    let mut stream = zbus::MessageStream::for_match_rule(rule, conn, None).await?;
    let mut names: HashMap<String, String> = HashMap::new();
    if !json {
        tell!(
            "watching {}; Ctrl-C to stop",
            bot.as_deref().unwrap_or("all bots")
        );
    }
    let mut streaming: Option<String> = None;
    loop {
        let msg = tokio::select! {
            m = stream.next() => match m {
                Some(Ok(m)) => m,
                Some(Err(e)) => return Err(e.into()),
                None => return Ok(ExitCode::SUCCESS),
            },
            _ = tokio::signal::ctrl_c() => return Ok(ExitCode::SUCCESS),
        };
        let hdr = msg.header();
        let path = hdr.path().map(|p| p.to_string()).unwrap_or_default();
        let member = hdr.member().map(|m| m.to_string()).unwrap_or_default();
        if only
            .as_ref()
            .is_some_and(|o| *o != path && member != "InterfacesRemoved")
        {
            continue;
        }
        let label = if path.starts_with(&format!("{}/", botvisor::dbus::ROOT_PATH)) {
            if !names.contains_key(&path) {
                let name = match BotProxy::builder(conn).path(path.clone()).build().await {
                    Ok(p) => p.name().await.unwrap_or_else(|_| path.clone()),
                    Err(_) => path.clone(),
                };
                names.insert(path.clone(), escape(&name, false).into_owned());
            }
            names[&path].clone()
        } else {
            String::new()
        };
        let body = msg.body();
        let line: Option<(Value, String)> = match member.as_str() {
            "ChatItemAdded" => {
                let (seq, kind, payload): (u64, String, String) = body.deserialize()?;
                let mut p: Value = serde_json::from_str(&payload).unwrap_or(Value::Null);
                if botvisor::preview::is_preview(&p) {
                    match BotProxy::builder(conn)
                        .path(path.clone())
                        .cache_properties(zbus::proxy::CacheProperties::No)
                        .build()
                        .await
                    {
                        Ok(bot) => p = whole_payload(&bot, seq, &payload).await,
                        Err(e) => eprintln!("botvisorctl: {}", describe(&e)),
                    }
                }
                if kind == "assistant" && streaming.take().is_some() {
                    say!();
                    if !json {
                        continue;
                    }
                }
                let mut text = format!("[{label}] #{seq} {}", item_text(&kind, &p));
                if kind == "permission_request" {
                    let bot_id = path.rsplit('/').next().unwrap_or_default();
                    text.push_str(&format!(
                        " — botvisorctl answer {bot_id} {} allow|deny",
                        p["request_id"].as_str().unwrap_or("?")
                    ));
                }
                Some((
                    json!({"bot": path, "event": "chat", "seq": seq, "kind": kind, "payload": p}),
                    text,
                ))
            }
            "TurnFinished" => {
                let (turn, outcome): (String, String) = body.deserialize()?;
                Some((
                    json!({"bot": path, "event": "turn_finished", "turn_id": turn, "outcome": outcome}),
                    format!("[{label}] turn {turn} ended: {outcome}"),
                ))
            }
            "PermissionRequested" => {
                let (id, tool, input): (String, String, String) = body.deserialize()?;
                // Shown once in readable output: as the `permission_request` chat item.
                json.then(|| {
                    (
                        json!({"bot": path, "event": "permission_requested", "request_id": id, "tool": tool, "input": serde_json::from_str::<Value>(&input).unwrap_or(Value::Null)}),
                        String::new(),
                    )
                })
            }
            "TextDelta" => {
                let (turn, text): (String, String) = body.deserialize()?;
                if json {
                    Some((
                        json!({"bot": path, "event": "text_delta", "turn_id": turn, "text": text}),
                        String::new(),
                    ))
                } else {
                    use std::io::Write;
                    if streaming.as_deref() != Some(path.as_str()) {
                        say_more!("[{label}] ");
                        streaming = Some(path.clone());
                    }
                    say_more!("{text}");
                    let _ = std::io::stdout().flush();
                    None
                }
            }
            "PropertiesChanged" => {
                let (_iface, changed, _inv): (
                    String,
                    HashMap<String, zbus::OwnedVariant>,
                    Vec<String>,
                ) = body.deserialize()?;
                let mut v = serde_json::Map::new();
                let mut parts = Vec::new();
                for (k, val) in changed {
                    let shown = match &*val {
                        Variant::Str(s) => json!(s.as_str()),
                        Variant::U32(n) => json!(n),
                        other => json!(format!("{other:?}")),
                    };
                    if k == "State" || k == "LastError" || k == "StopVerdict" || k == "SessionId" {
                        parts.push(format!("{k}={shown}"));
                    }
                    v.insert(k, shown);
                }
                if parts.is_empty() && !json {
                    None
                } else {
                    Some((
                        json!({"bot": path, "event": "properties", "changed": v}),
                        format!("[{label}] {}", parts.join(" ")),
                    ))
                }
            }
            "InterfacesAdded" => {
                let (p, _): (
                    zbus::OwnedObjectPath,
                    HashMap<String, HashMap<String, zbus::OwnedVariant>>,
                ) = body.deserialize()?;
                Some((
                    json!({"event": "bot_added", "bot": p.as_str()}),
                    format!("bot added: {}", p.as_str()),
                ))
            }
            "InterfacesRemoved" => {
                let (p, _): (zbus::OwnedObjectPath, Vec<String>) = body.deserialize()?;
                if only.as_ref().is_some_and(|o| o != p.as_str()) {
                    None
                } else {
                    Some((
                        json!({"event": "bot_removed", "bot": p.as_str()}),
                        format!("bot removed: {}", p.as_str()),
                    ))
                }
            }
            _ => None,
        };
        if let Some((j, text)) = line {
            if json {
                say_json(&j);
            } else {
                if streaming.take().is_some() {
                    say!();
                }
                say!("{text}");
            }
        }
    }
}

/// A chat item's payload to show: a preview (an item over 1 MiB) is replaced by the whole item,
/// read with `ReadChatItem` in ranges (which works over any transport); if that fails, the
/// preview is shown, with a warning.
async fn whole_payload(bot: &BotProxy<'_>, seq: u64, payload: &str) -> Value {
    let v: Value = serde_json::from_str(payload).unwrap_or(Value::Null);
    if !botvisor::preview::is_preview(&v) {
        return v;
    }
    match botvisor::dbus::client::read_whole_item(bot, seq).await {
        Ok(text) => serde_json::from_str(&text).unwrap_or(v),
        Err(e) => {
            eprintln!(
                "botvisorctl: cannot read chat item {seq} whole ({}); showing its preview",
                describe(&e)
            );
            v
        }
    }
}

fn item_text(kind: &str, payload: &Value) -> String {
    let text = payload["text"].as_str().unwrap_or_default();
    match kind {
        "user" => format!("> {text}"),
        "assistant" => text.to_owned(),
        "tool_use" => format!(
            "[tool {}] {}",
            payload["name"].as_str().unwrap_or("?"),
            cut(&payload["input"].to_string(), 200)
        ),
        "tool_result" => {
            let content = match &payload["content"] {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            format!("[tool result] {}", cut(&content, 200))
        }
        "permission_request" => format!(
            "[permission?] {} {}",
            payload["tool"].as_str().unwrap_or("?"),
            cut(&payload["input"].to_string(), 200)
        ),
        "permission_answer" => format!(
            "[permission {}] by {}",
            payload["behavior"].as_str().unwrap_or("?"),
            payload["by"].as_str().unwrap_or("?")
        ),
        "result" => {
            let mut parts = vec![payload["subtype"].as_str().unwrap_or("?").to_owned()];
            if let Some(c) = payload["total_cost_usd"].as_f64() {
                parts.push(format!("${c:.4}"));
            }
            if let Some(ms) = payload["duration_ms"].as_u64() {
                parts.push(format!("{ms} ms"));
            }
            format!("[done: {}]", parts.join(", "))
        }
        other => format!("[{other}] {text}"),
    }
}

fn cut(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_owned()
    } else {
        let mut t: String = s.chars().take(max).collect();
        t.push('…');
        t
    }
}

fn print_item(json: bool, seq: u64, kind: &str, time: &str, payload: &Value) {
    if json {
        let mut o = json!({"seq": seq, "kind": kind, "payload": payload});
        if !time.is_empty() {
            o["time"] = json!(time);
        }
        say_json(&o);
        return;
    }
    say!("{}", item_text(kind, payload));
}
