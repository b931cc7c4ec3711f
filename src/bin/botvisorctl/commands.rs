//! The commands that make one call (or a few) and print what they did.

use std::collections::HashMap;

use futures_util::StreamExt;

use super::bots::dollars;
use serde_json::json;
use zbus::{Connection, Variant};

use botvisor::dbus::client::{BotProxy, ManagerProxy};

use super::bots;
use super::fail::{Failure, OK};
use super::show::{self, DIM, Detail, paint};
use super::{shell_word, whole_payload};

/// What `create` is given.
pub struct CreateArgs {
    /// The working directory.
    pub cwd: std::path::PathBuf,
    /// A name.
    pub name: Option<String>,
    /// The runtime.
    pub runtime: Option<String>,
    /// The model.
    pub model: Option<String>,
    /// The permission mode.
    pub permission_mode: Option<String>,
    /// KEY=VALUE pairs.
    pub env: Vec<String>,
    /// Idle timeout in seconds.
    pub idle_timeout: Option<u32>,
    /// The memory limit in bytes (`u64::MAX`: none).
    pub memory_max: Option<u64>,
    /// A git worktree to make for the bot.
    pub worktree: Option<WorktreeArgs>,
    /// A conversation to adopt (its session or thread id).
    pub adopt: Option<String>,
}

/// `create --worktree`'s choices.
#[derive(Debug, Default)]
pub struct WorktreeArgs {
    /// The branch (default `botvisor/NAME`).
    pub branch: Option<String>,
    /// The commit it starts at (default `HEAD`).
    pub base: Option<String>,
    /// Where it goes.
    pub path: Option<std::path::PathBuf>,
}

/// `create`: prints the id, name and folder, and a note when the name was suffixed.
pub async fn create(conn: &Connection, a: CreateArgs, json: bool) -> Result<u8, Failure> {
    let cwd = std::path::absolute(&a.cwd).map_err(|e| {
        Failure::usage(format!(
            "cannot make {} absolute: {e}",
            show::safe(&a.cwd.display().to_string())
        ))
    })?;
    let cwd = cwd
        .to_str()
        .ok_or_else(|| Failure::usage("the working directory is not valid UTF-8"))?
        .to_owned();
    let env_map = env_pairs(&a.env)?;
    let mut options: HashMap<&str, Variant<'_>> = HashMap::new();
    options.insert("cwd", Variant::from(cwd.as_str()));
    for (key, value) in [
        ("name", &a.name),
        ("runtime", &a.runtime),
        ("model", &a.model),
        ("permission_mode", &a.permission_mode),
    ] {
        if let Some(v) = value {
            options.insert(key, Variant::from(v.as_str()));
        }
    }
    if !env_map.is_empty() {
        options.insert("env", Variant::from(env_map));
    }
    if let Some(s) = a.idle_timeout {
        options.insert("idle_timeout_s", Variant::from(s));
    }
    if let Some(m) = a.memory_max {
        options.insert("memory_max", Variant::from(m));
    }
    if let Some(session) = &a.adopt {
        options.insert("session_id", Variant::from(session.as_str()));
    }
    if let Some(w) = &a.worktree {
        let mut tree: HashMap<String, Variant<'_>> = HashMap::new();
        if let Some(b) = &w.branch {
            tree.insert("branch".into(), Variant::from(b.clone()));
        }
        if let Some(b) = &w.base {
            tree.insert("base".into(), Variant::from(b.clone()));
        }
        if let Some(p) = &w.path {
            let p = std::path::absolute(p).map_err(|e| {
                Failure::usage(format!("cannot make the worktree path absolute: {e}"))
            })?;
            let p = p
                .to_str()
                .ok_or_else(|| Failure::usage("the worktree path is not valid UTF-8"))?
                .to_owned();
            tree.insert("path".into(), Variant::from(p));
        }
        options.insert("worktree", Variant::from(tree));
    }
    let path = match ManagerProxy::new(conn).await?.create_bot(options).await {
        Ok(p) => p,
        // A runtime botvisord does not know is a wrong argument: a usage error, as clap's.
        Err(e)
            if super::fail::error_name(&e) == Some("InvalidArgument")
                && super::fail::describe(&e).starts_with("unknown runtime") =>
        {
            return Err(Failure::usage(super::fail::describe(&e)));
        }
        Err(e) => return Err(e.into()),
    };
    let info = bots::info(conn, path.as_str()).await?;
    // The name asked for (or the folder's, the default, as botvisord makes it of the folder's
    // name) and the one given differ when it was taken.
    let wanted = a
        .name
        .clone()
        .unwrap_or_else(|| botvisor::supervisor::default_name(std::path::Path::new(&info.cwd)));
    let suffixed = !wanted.is_empty() && wanted != info.name;
    if json {
        json_line!(
            json!({"id": info.id, "short_id": info.short, "name": info.name, "path": path.as_str(),
                   "cwd": info.cwd, "name_suffixed": suffixed})
        );
    } else {
        outln!(
            "created {} (id {}) in {}",
            show::safe(&info.name),
            info.short,
            show::safe(&info.cwd)
        );
        if !info.branch.is_empty() {
            outln!(
                "{}",
                paint(
                    DIM,
                    &format!(
                        "a git worktree on branch {} from {}",
                        show::safe(&info.branch),
                        info.base_commit.get(..12).unwrap_or(&info.base_commit)
                    )
                )
            );
        }
        if !info.session_id.is_empty() && a.adopt.is_some() {
            outln!(
                "{}",
                paint(
                    DIM,
                    &format!(
                        "adopted conversation {}; `{} chat {}` shows its earlier turns",
                        show::safe(&info.session_id),
                        super::hint::ctl(),
                        info.short
                    )
                )
            );
        }
        if suffixed {
            outln!(
                "{}",
                paint(
                    DIM,
                    &format!(
                        "note: a bot named {} exists already, so this one is {}; give \
                         --name to choose",
                        show::safe(&wanted),
                        show::safe(&info.name)
                    )
                )
            );
        }
    }
    Ok(OK)
}

/// `chat`: the history page by page, big items whole.
pub async fn chat(
    conn: &Connection,
    spec: &str,
    after: u64,
    limit: u32,
    seq: Option<u64>,
    json: bool,
) -> Result<u8, Failure> {
    let bot = bots::resolve(conn, spec).await?;
    let (mut after, mut left) = match seq {
        Some(s) => (s.saturating_sub(1), 1u64),
        None => (after, if limit == 0 { u64::MAX } else { limit as u64 }),
    };
    while left > 0 {
        let page = bot.get_chat(after, left.min(10_000) as u32).await?;
        if page.is_empty() {
            break;
        }
        for (seq_i, kind, time, payload) in page {
            let payload = whole_payload(&bot, seq_i, &payload).await;
            if json {
                json_line!(json!({"seq": seq_i, "kind": kind, "time": time, "payload": payload}));
            } else {
                outln!(
                    "{} {}",
                    paint(DIM, &format!("#{seq_i}")),
                    show::bot_words(&show::item_text(&kind, &payload, Detail::Full, ""), spec)
                );
            }
            after = seq_i;
            left -= 1;
        }
    }
    if let Some(s) = seq
        && after < s
    {
        return Err(Failure::failed(format!("the bot has no chat item {s}")));
    }
    Ok(OK)
}

/// `stop`: waits for `stopped` and says the stop's verdict.
pub async fn stop(conn: &Connection, spec: &str, json: bool) -> Result<u8, Failure> {
    let path = bots::path_of(conn, spec).await?;
    // A caching proxy: its property streams follow PropertiesChanged.
    let bot = BotProxy::builder(conn).path(path).build().await?;
    let before = bot.state().await?;
    let mut changes = bot.receive_state_changed().await;
    // botvisord may leave during the stop (a crash): then the wait ends, with words.
    let dbus = zbus::fdo::DBusProxy::new(conn).await?;
    let mut owner = dbus
        .receive_name_owner_changed_with_args(&[(0, botvisor::dbus::BUS_NAME)])
        .await?;
    bot.stop().await?;
    let done = tokio::time::timeout(std::time::Duration::from_secs(120), async {
        loop {
            let state: String = bot.state().await?;
            if state == "stopped" || state == "failed" {
                return Ok::<_, zbus::Error>(Some(state));
            }
            tokio::select! {
                _ = changes.next() => {}
                Some(sig) = owner.next() => {
                    if sig.args().is_ok_and(|a| a.new_owner().is_none()) {
                        return Ok(None);
                    }
                }
            }
        }
    })
    .await;
    let state = match done {
        Ok(Ok(Some(state))) => state,
        Ok(Ok(None)) => {
            return Err(Failure::failed(format!(
                "botvisord went away before the agent was proven stopped. When it runs again it                  stops what is left of the bot's processes first (see `{} status {}`)",
                super::hint::ctl(),
                shell_word(spec)
            )));
        }
        Ok(Err(e)) => return Err(e.into()),
        Err(_) => return Err(Failure::failed("the agent did not stop within 120 s")),
    };
    let verdict = bot.stop_verdict().await.unwrap_or_default();
    let last = bot.last_error().await.unwrap_or_default();
    let was_running = before != "stopped" && before != "failed";
    if json {
        json_line!(
            json!({"id": bot.id().await.unwrap_or_default(), "state": state,
                   "was_running": was_running, "stop_verdict": verdict})
        );
    } else if !was_running {
        outln!(
            "{} was not running ({})",
            shell_word(spec),
            show::safe(&before)
        );
    } else {
        outln!(
            "stopped {} (verdict: {})",
            shell_word(spec),
            verdict_words(&verdict)
        );
    }
    if state == "failed" {
        return Err(Failure::failed(format!(
            "the stop failed: {}",
            show::safe(&last)
        )));
    }
    Ok(OK)
}

/// A stop verdict in words.
fn verdict_words(v: &str) -> String {
    match v {
        "clean" => "clean: the agent and all its processes are gone".to_owned(),
        "root-exited" => "the agent exited; left-over processes were killed".to_owned(),
        "root-exited-unverified" => {
            "the agent exited; its descendants could not be checked".to_owned()
        }
        "root-alive" => "the agent is still alive".to_owned(),
        "" => "none recorded".to_owned(),
        other => show::safe(other),
    }
}

/// What `answer` is given.
pub struct AnswerArgs {
    /// The request id or a unique start of it; `None`: the only open prompt.
    pub request: Option<String>,
    /// `allow` or `deny`.
    pub behavior: String,
    /// What the model is told (deny).
    pub message: Option<String>,
    /// The input the tool runs with instead (allow), JSON text.
    pub updated_input: Option<String>,
    /// `once`, `session` or `always` (allow); `None`: once.
    pub scope: Option<String>,
}

/// The open request `wanted` names among `pending` (`(request_id, tool, input)`): its id, or a
/// start of one id only; with `wanted` left out, the only open request. Errors (exit 1) say
/// what is open and how to name it.
pub fn pick_request(
    pending: &[bots::Pending],
    wanted: Option<&str>,
    spec: &str,
) -> Result<String, Failure> {
    let listed = |p: &[&bots::Pending]| {
        p.iter()
            .map(|(id, tool, _)| format!("{} ({})", show::safe(id), show::safe(tool)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if wanted == Some("") {
        // A script's empty variable must not answer whatever is open.
        return Err(Failure::usage(
            "the request id is empty; give its id or a start of it, or leave it out to answer \
             the only open one",
        ));
    }
    let all: Vec<&bots::Pending> = pending.iter().collect();
    let fits: Vec<&bots::Pending> = match wanted {
        None => all.clone(),
        Some(w) => match all.iter().find(|(id, _, _)| id == w) {
            Some(exact) => vec![*exact],
            None => all
                .iter()
                .filter(|(id, _, _)| id.starts_with(w))
                .copied()
                .collect(),
        },
    };
    match (fits.as_slice(), wanted) {
        ([one], _) => Ok(one.0.clone()),
        ([], _) if all.is_empty() => Err(Failure::failed(format!(
            "{} has no open permission prompt",
            shell_word(spec)
        ))),
        ([], Some(w)) => Err(Failure::failed(format!(
            "no open permission prompt of {} starts with `{}`; open: {}",
            shell_word(spec),
            show::safe(w),
            listed(&all)
        ))),
        (_, None) => Err(Failure::failed(format!(
            "{} has {} open permission prompts: {}; name one: `{} answer {} REQUEST allow|deny`",
            shell_word(spec),
            all.len(),
            listed(&all),
            super::hint::ctl(),
            shell_word(spec)
        ))),
        (several, Some(w)) => Err(Failure::failed(format!(
            "no open request is `{0}` (answered already, or never asked), and `{0}` starts {1} \
             open requests: {2}; give more of the id",
            show::safe(w),
            several.len(),
            listed(several)
        ))),
    }
}

/// `answer`.
pub async fn answer(
    conn: &Connection,
    spec: &str,
    a: AnswerArgs,
    json: bool,
) -> Result<u8, Failure> {
    if let Some(u) = &a.updated_input
        && !serde_json::from_str::<serde_json::Value>(u).is_ok_and(|v| v.is_object())
    {
        return Err(Failure::usage("--updated-input must be a JSON object"));
    }
    if a.behavior == "deny" && a.scope.as_deref().is_some_and(|s| s != "once") {
        return Err(Failure::usage(
            "--always, --session and --scope go with allow: a deny answers one request",
        ));
    }
    let bot = bots::resolve(conn, spec).await?;
    let pending = bot.pending_permissions().await?;
    let request = pick_request(&pending, a.request.as_deref(), spec)?;
    let mut options: HashMap<&str, Variant<'_>> = HashMap::new();
    if let Some(m) = &a.message {
        options.insert("message", Variant::from(m.as_str()));
    }
    if let Some(u) = &a.updated_input {
        options.insert("updated_input", Variant::from(u.as_str()));
    }
    // Only when wider: a botvisord from before the option refuses what it does not know.
    if let Some(s) = a.scope.as_deref().filter(|s| *s != "once") {
        options.insert("scope", Variant::from(s));
    }
    options.insert("client", Variant::from("botvisorctl"));
    bot.respond_permission(&request, &a.behavior, options)
        .await?;
    let scope = a.scope.as_deref().unwrap_or("once");
    if json {
        json_line!(json!({"request_id": request, "behavior": a.behavior, "scope": scope}));
    } else {
        let done = if a.behavior == "allow" {
            "allowed"
        } else {
            "denied"
        };
        let reach = match scope {
            "session" => ", and the same while the agent runs (session)",
            "always" => ", and the same from now on (always)",
            "program" => ", and its program with any arguments from now on (program)",
            _ => "",
        };
        outln!("{done} request {}{reach}", show::safe(&request));
    }
    Ok(OK)
}

/// `rename`.
pub async fn rename(conn: &Connection, spec: &str, name: &str, json: bool) -> Result<u8, Failure> {
    let bot = bots::resolve(conn, spec).await?;
    bot.set_name(name, HashMap::new()).await?;
    if json {
        json_line!(json!({"id": bot.id().await.unwrap_or_default(), "name": name}));
    } else {
        outln!("renamed {} to {}", shell_word(spec), shell_word(name));
    }
    Ok(OK)
}

/// `interrupt`.
pub async fn interrupt(conn: &Connection, spec: &str, json: bool) -> Result<u8, Failure> {
    let done = bots::resolve(conn, spec).await?.interrupt().await?;
    if json {
        json_line!(json!({ "interrupted": done }));
    } else if done {
        outln!("interrupting the running turn");
    } else {
        outln!("no turn was running: nothing to interrupt");
    }
    Ok(OK)
}

/// `--env KEY=VALUE` arguments as a map (a later KEY wins). Usage error: one without `=` or
/// with an empty KEY.
pub fn env_pairs(args: &[String]) -> Result<HashMap<String, String>, Failure> {
    let mut env = HashMap::new();
    for kv in args {
        let (k, v) = kv
            .split_once('=')
            .filter(|(k, _)| !k.is_empty())
            .ok_or_else(|| {
                Failure::usage(format!("--env `{}` is not KEY=VALUE", show::safe(kv)))
            })?;
        env.insert(k.to_owned(), v.to_owned());
    }
    Ok(env)
}

/// How `set` changes the extra environment.
pub enum EnvChange {
    /// `--replace-env` with `--env`, or `--clear-env`: exactly these variables.
    Replace(HashMap<String, String>),
    /// `--env` and `--unset-env`: these added or changed, these removed, the others kept.
    Merge {
        /// Added or changed.
        set: HashMap<String, String>,
        /// Removed.
        unset: Vec<String>,
    },
}

/// What `set` changes; `None` leaves it as it is.
pub struct Settings {
    /// `--permission-mode`.
    pub permission_mode: Option<String>,
    /// `--model`.
    pub model: Option<String>,
    /// `--budget`, US dollars.
    pub budget: Option<f64>,
    /// `--env`, `--unset-env`, `--replace-env`, `--clear-env`.
    pub env: Option<EnvChange>,
}

/// `set`.
pub async fn set(
    conn: &Connection,
    spec: &str,
    settings: Settings,
    json: bool,
) -> Result<u8, Failure> {
    let Settings {
        permission_mode: mode,
        model,
        budget,
        env,
    } = settings;
    if mode.is_none() && model.is_none() && budget.is_none() && env.is_none() {
        return Err(Failure::usage(
            "give --permission-mode, --model, --budget, --env, --unset-env and/or --clear-env",
        ));
    }
    let bot = bots::resolve(conn, spec).await?;
    if let Some(b) = budget {
        bot.set_budget(b).await?;
    }
    if let Some(change) = &env {
        let (set, options) = match change {
            EnvChange::Replace(set) => (set, HashMap::new()),
            EnvChange::Merge { set, unset } => {
                let mut o: HashMap<&str, zbus::Variant<'_>> = HashMap::new();
                o.insert("merge", true.into());
                if !unset.is_empty() {
                    o.insert("unset", unset.clone().into());
                }
                (set, o)
            }
        };
        let set: HashMap<&str, &str> = set.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        bot.set_environment(set, options).await?;
    }
    let running = bot.process_id().await.unwrap_or(0) != 0;
    // A running agent's answer comes as a chat item: subscribed before asking.
    let items = match running {
        true => Some(bot.receive_chat_item_added().await?),
        false => None,
    };
    let mut asked = Vec::new();
    if let Some(mode) = &mode {
        bot.set_permission_mode(mode).await?;
        asked.push(("permission_mode", mode.clone()));
    }
    if let Some(model) = &model {
        bot.set_model(model).await?;
        asked.push(("model", model.clone()));
    }
    // Whether every setting is in force now (else from the next start).
    let live = match items {
        Some(items) => setting_answers(items, asked).await?,
        None => false,
    };
    // The names in force now (never the values: they may be secrets).
    let (set_names, unset_names): (Vec<String>, Vec<String>) = match &env {
        None => (Vec::new(), Vec::new()),
        Some(EnvChange::Replace(set)) => (set.keys().cloned().collect(), Vec::new()),
        Some(EnvChange::Merge { set, unset }) => (set.keys().cloned().collect(), unset.clone()),
    };
    if json {
        json_line!(
            json!({"id": bot.id().await.unwrap_or_default(), "permission_mode": mode,
                   "model": model, "budget_usd": budget,
                   "env": env.as_ref().map(|_| &set_names),
                   "env_unset": env.as_ref().map(|_| &unset_names),
                   "env_replaced": matches!(env, Some(EnvChange::Replace(_))), "live": live})
        );
    } else {
        let when = if live {
            "applied to the running agent"
        } else {
            "taken at the next start"
        };
        let mut what = Vec::new();
        if let Some(m) = &mode {
            what.push(format!(
                "permission mode {}",
                if m.is_empty() {
                    "(the CLI's default)".to_owned()
                } else {
                    show::safe(m)
                }
            ));
        }
        if let Some(m) = &model {
            what.push(format!(
                "model {}",
                if m.is_empty() {
                    "(the CLI's default)".to_owned()
                } else {
                    show::safe(m)
                }
            ));
        }
        if !what.is_empty() {
            outln!("{}: {} ({when})", shell_word(spec), what.join(", "));
        }
        if let Some(change) = &env {
            let sorted = |names: &[String]| {
                let mut n: Vec<_> = names.iter().map(|k| show::safe(k)).collect();
                n.sort();
                n.join(", ")
            };
            const WHEN: &str = "an idle agent restarts with it now, a busy one once its turn ends; waiting \
                 messages go on";
            match change {
                EnvChange::Replace(set) if set.is_empty() => {
                    outln!("{}: no extra environment ({WHEN})", shell_word(spec))
                }
                EnvChange::Replace(_) => outln!(
                    "{}: extra environment now exactly {} ({WHEN})",
                    shell_word(spec),
                    sorted(&set_names)
                ),
                EnvChange::Merge { .. } => {
                    let mut what = Vec::new();
                    if !set_names.is_empty() {
                        what.push(format!("set {}", sorted(&set_names)));
                    }
                    if !unset_names.is_empty() {
                        what.push(format!("removed {}", sorted(&unset_names)));
                    }
                    outln!(
                        "{}: extra environment: {}; the rest kept ({WHEN})",
                        shell_word(spec),
                        what.join(", ")
                    )
                }
            }
        }
        if let Some(b) = budget {
            if b == 0.0 {
                outln!("{}: no budget", shell_word(spec));
            } else {
                outln!("{}: budget {}", shell_word(spec), dollars(b));
            }
        }
    }
    Ok(OK)
}

/// How long `set` waits for the running agent's answers: beyond botvisord's own bound
/// (`control_timeout_s`, 10 s by default), after which it reports the silence itself.
const SETTING_ANSWER_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// Waits for the running agent's answer to each setting `asked` (`(setting, value)`, as the
/// chat items name them): whether it took them all (`false`: one is for its next start); a
/// refusal or a silence is the failure that the `error` item words. Reads only the signals: no
/// bus call while they come.
async fn setting_answers(
    mut items: botvisor::dbus::client::ChatItemAddedStream,
    mut asked: Vec<(&'static str, String)>,
) -> Result<bool, Failure> {
    let mut live = true;
    let wait = async {
        while !asked.is_empty() {
            let Some(sig) = items.next().await else {
                return Err(Failure::failed(
                    "the bot went away before the agent answered",
                ));
            };
            let Ok(args) = sig.args() else { continue };
            let Ok(p) = serde_json::from_str::<serde_json::Value>(&args.payload) else {
                continue;
            };
            let Some(at) = asked
                .iter()
                .position(|(name, value)| p["setting"] == *name && p["value"] == value.as_str())
            else {
                continue;
            };
            asked.remove(at);
            if args.kind == "error" {
                let text = p["text"].as_str().unwrap_or("the running agent refused it");
                return Err(Failure::failed(show::safe(text)));
            }
            live &= p["reason"] == "setting_applied";
        }
        Ok(live)
    };
    tokio::time::timeout(SETTING_ANSWER_WAIT, wait)
        .await
        .unwrap_or_else(|_| {
            Err(Failure::failed(format!(
                "the running agent did not answer within {} s; LastError will say when it does",
                SETTING_ANSWER_WAIT.as_secs()
            )))
        })
}

/// `restart`.
pub async fn restart(
    conn: &Connection,
    spec: &str,
    fresh: bool,
    fork: bool,
    json: bool,
) -> Result<u8, Failure> {
    let bot = bots::resolve(conn, spec).await?;
    let mut options = HashMap::from([("fresh", Variant::from(fresh))]);
    // Only when asked: a botvisord from before issue 25 refuses the option it does not know.
    if fork {
        options.insert("fork", Variant::from(true));
    }
    bot.restart(options).await?;
    if json {
        json_line!(json!({"id": bot.id().await.unwrap_or_default(), "fresh": fresh, "fork": fork}));
    } else if fresh {
        outln!("restarting {} in a new conversation", shell_word(spec));
    } else if fork && bot.session_id().await.unwrap_or_default().is_empty() {
        // Nothing to copy: the next message begins the bot's first conversation.
        outln!(
            "restarting {} (it has no conversation yet to copy)",
            shell_word(spec)
        );
    } else if fork {
        outln!(
            "restarting {} in a copy of its conversation",
            shell_word(spec)
        );
    } else {
        outln!("restarting {}", shell_word(spec));
    }
    Ok(OK)
}

/// How long `delete --remove-worktree` waits for the bot's object to go (its agent stopped, its
/// worktree removed): the stop's grace and SIGKILL, and git's own bound of 30 s, with room.
const REMOVAL_WAIT: std::time::Duration = std::time::Duration::from_secs(90);

/// What deleting the bot `name` loses of its work, as a warning: the turn it runs (ended
/// `interrupted`, its answer never given) and the messages queued behind it (never sent); `None`
/// when it loses neither.
fn lost_with(name: &str, running: bool, queued: u32) -> Option<String> {
    let mut lost = Vec::new();
    if running {
        lost.push("its running turn (it ends interrupted, unanswered)".to_owned());
    }
    match queued {
        0 => {}
        1 => lost.push("1 queued message (never sent)".to_owned()),
        n => lost.push(format!("{n} queued messages (never sent)")),
    }
    (!lost.is_empty()).then(|| {
        format!(
            "warning: deleting {} loses {}",
            show::safe(name),
            lost.join(" and ")
        )
    })
}

/// `delete`: asks first on a terminal unless `yes`; without a terminal `--yes` is required. A
/// bot with a turn running or messages queued is deleted all the same, with a warning that says
/// what is lost (issue 46).
pub async fn delete(
    conn: &Connection,
    spec: &str,
    yes: bool,
    worktree: Option<bool>,
    json: bool,
) -> Result<u8, Failure> {
    let path = bots::path_of(conn, spec).await?;
    let info = bots::info(conn, path.as_str()).await?;
    let running = info.state == "busy";
    let lost = lost_with(&info.name, running, info.queued_messages);
    if !yes {
        use std::io::{IsTerminal, Write};
        if !std::io::stdin().is_terminal() {
            return Err(Failure::usage(format!(
                "botvisorctl delete asks first; to delete {} without asking, give --yes",
                show::safe(&info.name)
            )));
        }
        if let Some(lost) = &lost {
            anstream::eprintln!("{}", paint(super::show::WARN, lost));
        }
        anstream::eprint!(
            "Delete bot {} ({}) in {} and its whole history? [y/N] ",
            show::safe(&info.name),
            info.short,
            show::safe(&info.cwd)
        );
        let _ = std::io::stderr().flush();
        let mut line = String::new();
        let _ = std::io::stdin().read_line(&mut line);
        if !matches!(line.trim(), "y" | "Y" | "yes" | "Yes") {
            anstream::eprintln!("nothing deleted");
            return Ok(OK);
        }
    } else if let Some(lost) = &lost {
        // Deleted all the same (`--yes`), but not in silence.
        anstream::eprintln!("{}", paint(super::show::WARN, lost));
    }
    let object = path.clone();
    let bot: BotProxy<'static> = bots::proxy(conn, path).await?;
    match worktree {
        None => bot.delete().await?,
        Some(force) => {
            // The worktree goes after the agent's stop, before the bot's object: "deleted"
            // is said once the object is gone, so that a script's next git command finds the
            // worktree removed (found by a hostile run: it was still there).
            let om = zbus::fdo::ObjectManagerProxy::builder(conn)
                .destination(botvisor::dbus::BUS_NAME)
                .path(botvisor::dbus::ROOT_PATH)
                .build()
                .await?;
            let mut removed = om.receive_interfaces_removed().await?;
            bot.delete_with(HashMap::from([
                ("remove_worktree", Variant::from(true)),
                ("force", Variant::from(force)),
            ]))
            .await
            .map_err(|e| {
                // The refusal's way out, with this bot in it.
                Failure::failed(super::fail::describe(&e).replace(
                    "delete BOT --yes --remove-worktree",
                    &format!("delete {} --yes --remove-worktree", shell_word(spec)),
                ))
            })?;
            // Bounded: the agent's stop (its grace, then SIGKILL) and git's own bound (30 s).
            let gone = tokio::time::timeout(REMOVAL_WAIT, async {
                while let Some(sig) = removed.next().await {
                    if sig
                        .args()
                        .is_ok_and(|a| a.object_path.as_str() == object.as_str())
                    {
                        return true;
                    }
                }
                false
            })
            .await
            .unwrap_or(false);
            if !gone {
                anstream::eprintln!(
                    "note: {} is deleted; its worktree is still being removed",
                    show::safe(&info.name)
                );
            }
        }
    }
    if json {
        json_line!(json!({"id": info.id, "name": info.name, "deleted": true,
                          "worktree_removed": worktree.is_some() && !info.worktree.is_empty(),
                          "turn_running": running, "queued_messages": info.queued_messages}));
    } else {
        outln!("deleted {} ({})", show::safe(&info.name), info.short);
    }
    Ok(OK)
}
