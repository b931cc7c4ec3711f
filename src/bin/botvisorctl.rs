//! `botvisorctl`: the command-line client of botvisord. See `botvisorctl --help`.

use std::collections::HashMap;
use std::io::{IsTerminal, Read};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use futures_util::StreamExt;
use serde_json::{Value, json};
use zbus::{Connection, OwnedObjectPath, Variant};

use botvisor::dbus::client::{BotProxy, ManagerProxy};

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
        /// At most this many items (0: up to 10,000).
        #[arg(long, default_value_t = 0)]
        limit: u32,
    },
    /// Stop a bot's agent gently.
    Stop {
        /// Bot id, name, id prefix or object path.
        bot: String,
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
            eprintln!(
                "botvisorctl: cannot connect to the session bus ({e}); is DBUS_SESSION_BUS_ADDRESS set?"
            );
            return ExitCode::from(2);
        }
    };
    match run(&conn, args).await {
        Ok(code) => code,
        Err(Failure(text)) => {
            eprintln!("botvisorctl: {text}");
            ExitCode::FAILURE
        }
    }
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
                println!("{}", json!({"id": id, "path": path.as_str()}));
            } else {
                println!("{id}");
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
                println!("{}", Value::Array(rows));
            } else if rows.is_empty() {
                println!("no bots; create one with `botvisorctl create --cwd DIR`");
            } else {
                println!("{:<32}  {:<16}  {:<8}  CWD", "ID", "NAME", "STATE");
                for r in rows {
                    println!(
                        "{:<32}  {:<16}  {:<8}  {}",
                        r["id"].as_str().unwrap_or_default(),
                        r["name"].as_str().unwrap_or_default(),
                        r["state"].as_str().unwrap_or_default(),
                        r["cwd"].as_str().unwrap_or_default()
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
                s
            } else {
                text
            };
            let bot = resolve(conn, &bot).await?;
            let mut items = bot.receive_chat_item_added().await?;
            let mut finished = bot.receive_turn_finished().await?;
            let turn_id = bot.send(&text, HashMap::new()).await?;
            if !json && std::io::stderr().is_terminal() {
                eprintln!("(turn {turn_id})");
            }
            let mut mine = false;
            loop {
                tokio::select! {
                    Some(sig) = items.next() => {
                        let a = sig.args()?;
                        let payload: Value = serde_json::from_str(&a.payload).unwrap_or(Value::Null);
                        if a.kind == "user" {
                            mine = payload["turn_id"] == turn_id.as_str();
                            continue;
                        }
                        if mine || payload.get("turn_id").is_none() {
                            print_item(json, a.seq, &a.kind, "", &payload);
                        }
                    }
                    Some(sig) = finished.next() => {
                        let a = sig.args()?;
                        if a.turn_id == turn_id {
                            if json {
                                println!("{}", json!({"turn_finished": a.turn_id, "outcome": a.outcome}));
                            } else if a.outcome != "success" {
                                eprintln!("botvisorctl: the turn ended: {}", a.outcome);
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
            for (seq, kind, time, payload) in bot.get_chat(after, limit).await? {
                let payload: Value = serde_json::from_str(&payload).unwrap_or(Value::Null);
                print_item(json, seq, &kind, &time, &payload);
            }
        }
        Cmd::Stop { bot } => {
            resolve(conn, &bot).await?.stop().await?;
        }
        Cmd::Delete { bot } => {
            resolve(conn, &bot).await?.delete().await?;
        }
    }
    Ok(ExitCode::SUCCESS)
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
        println!("{o}");
        return;
    }
    let text = payload["text"].as_str().unwrap_or_default();
    match kind {
        "user" => println!("> {text}"),
        "assistant" => println!("{text}"),
        "tool_use" => println!(
            "[tool {}] {}",
            payload["name"].as_str().unwrap_or("?"),
            cut(&payload["input"].to_string(), 200)
        ),
        "tool_result" => {
            let content = match &payload["content"] {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            println!("[tool result] {}", cut(&content, 200));
        }
        "result" => {
            let mut parts = vec![payload["subtype"].as_str().unwrap_or("?").to_owned()];
            if let Some(c) = payload["total_cost_usd"].as_f64() {
                parts.push(format!("${c:.4}"));
            }
            if let Some(ms) = payload["duration_ms"].as_u64() {
                parts.push(format!("{ms} ms"));
            }
            println!("[done: {}]", parts.join(", "));
        }
        other => println!("[{other}] {text}"),
    }
}
