//! Finding bots: by id, id prefix, name or path; everything about all of them in one call; the
//! short unique id prefixes people type.

use std::collections::HashMap;

use serde_json::{Value, json};
use zbus::OwnedVariant as OwnedValue;
use zbus::{Connection, OwnedObjectPath};

pub use botvisor::cost::dollars;
use botvisor::dbus::client::{BotProxy, ManagerProxy};
use botvisor::dbus::{BOT_INTERFACE, BUS_NAME, ROOT_PATH};
pub use botvisor::time::local_time;

use super::fail::{Failure, describe, error_name};
use super::{hint, show};

/// The shortest id prefix shown; `GetBot` takes prefixes of 4 characters or more.
pub const MIN_SHORT_ID: usize = 6;

/// One open permission request: `(request_id, tool, input_json)`.
pub type Pending = (String, String, String);

/// What a bot's properties say, read in one `GetManagedObjects` call.
#[derive(Debug, Clone, Default)]
pub struct BotInfo {
    /// The object path.
    pub path: String,
    /// 32 hex digits.
    pub id: String,
    /// The shortest unique prefix of the id (at least [`MIN_SHORT_ID`] characters).
    pub short: String,
    /// The name.
    pub name: String,
    /// The working directory.
    pub cwd: String,
    /// The git worktree botvisor made for the bot (`Worktree`; empty: none).
    pub worktree: String,
    /// Its branch (`Branch`; empty: no worktree).
    pub branch: String,
    /// The commit the branch started at (`BaseCommit`).
    pub base_commit: String,
    /// The runtime.
    pub runtime: String,
    /// The model (empty: the CLI's default).
    pub model: String,
    /// The permission mode (empty: the CLI's default).
    pub permission_mode: String,
    /// `stopped`, `idle`, `busy`, `stopping`, `failed`, `limited`, `login_required` or
    /// `held_elsewhere`.
    pub state: String,
    /// The process outside botvisor that holds the conversation (`HeldBy`; empty: none).
    pub held_by: String,
    /// The usage limit's window the bot waits for (empty: none).
    pub limit_kind: String,
    /// When it resets, Unix seconds (0: none, or not known).
    pub limit_resets_at: u64,
    /// The conversation resumed at the next start.
    pub session_id: String,
    /// The agent's pid, 0 when none.
    pub process_id: u32,
    /// The last error a person should know of.
    pub last_error: String,
    /// Messages not yet written to the agent.
    pub queued_messages: u32,
    /// Clients holding a lease.
    pub holders: u32,
    /// The last stop's verdict.
    pub stop_verdict: String,
    /// How the last stop was proven (`cgroup`, `process-tree`, …).
    pub stop_proof: String,
    /// Memory in use, bytes (`u64::MAX`: not known, no agent runs).
    pub memory_current: u64,
    /// CPU time since the agent started, nanoseconds (`u64::MAX`: not known).
    pub cpu_usage_nsec: u64,
    /// Tasks now (`u64::MAX`: not known).
    pub tasks_current: u64,
    /// The memory limit in force, bytes (`u64::MAX`: none).
    pub memory_max: u64,
    /// What the bot cost since its creation, US dollars (`CostUSD`).
    pub cost_usd: f64,
    /// Tokens the model read for it.
    pub input_tokens: u64,
    /// Tokens the model wrote for it.
    pub output_tokens: u64,
    /// The budget in force, US dollars (0: none).
    pub budget_usd: f64,
    /// Where the plan's usage limit stands (`PlanLimit`: state, kind, utilization, resets_at).
    pub plan_limit: (String, String, f64, u64),
    /// Open permission requests.
    pub pending: Vec<Pending>,
    /// The name of the client that created the bot (`CreatedBy`; empty: none given).
    pub created_by: String,
    /// The bot whose agent created this one (`CreatedByBot`; empty: none).
    pub created_by_bot: String,
}

fn string(props: &HashMap<String, OwnedValue>, key: &str) -> String {
    props
        .get(key)
        .and_then(|v| v.try_clone().ok())
        .and_then(|v| String::try_from(v).ok())
        .unwrap_or_default()
}

fn number(props: &HashMap<String, OwnedValue>, key: &str) -> u32 {
    props
        .get(key)
        .and_then(|v| u32::try_from(v).ok())
        .unwrap_or_default()
}

fn double(props: &HashMap<String, OwnedValue>, key: &str) -> f64 {
    props
        .get(key)
        .and_then(|v| f64::try_from(v).ok())
        .unwrap_or_default()
}

fn number64(props: &HashMap<String, OwnedValue>, key: &str) -> u64 {
    props
        .get(key)
        .and_then(|v| u64::try_from(v).ok())
        .unwrap_or(u64::MAX)
}

/// A usage value for JSON: `null` when not known.
pub fn known(v: u64) -> Value {
    if v == u64::MAX { Value::Null } else { json!(v) }
}

impl BotInfo {
    /// From a bot's properties as `GetManagedObjects` or `InterfacesAdded` give them.
    pub fn from_properties(path: &str, props: &HashMap<String, OwnedValue>) -> BotInfo {
        let pending = props
            .get("PendingPermissions")
            .and_then(|v| v.try_clone().ok())
            .and_then(|v| Vec::<(String, String, String)>::try_from(v).ok())
            .unwrap_or_default();
        BotInfo {
            path: path.to_owned(),
            id: string(props, "Id"),
            short: String::new(),
            name: string(props, "Name"),
            cwd: string(props, "Cwd"),
            worktree: string(props, "Worktree"),
            branch: string(props, "Branch"),
            base_commit: string(props, "BaseCommit"),
            runtime: string(props, "Runtime"),
            model: string(props, "Model"),
            permission_mode: string(props, "PermissionMode"),
            state: string(props, "State"),
            held_by: string(props, "HeldBy"),
            limit_kind: string(props, "LimitKind"),
            limit_resets_at: match number64(props, "LimitResetsAt") {
                u64::MAX => 0,
                at => at,
            },
            session_id: string(props, "SessionId"),
            process_id: number(props, "ProcessId"),
            last_error: string(props, "LastError"),
            queued_messages: number(props, "QueuedMessages"),
            holders: number(props, "Holders"),
            stop_verdict: string(props, "StopVerdict"),
            stop_proof: string(props, "StopProof"),
            memory_current: number64(props, "MemoryCurrent"),
            cpu_usage_nsec: number64(props, "CPUUsageNSec"),
            tasks_current: number64(props, "TasksCurrent"),
            memory_max: number64(props, "MemoryMax"),
            cost_usd: double(props, "CostUSD"),
            input_tokens: match number64(props, "InputTokens") {
                u64::MAX => 0,
                n => n,
            },
            output_tokens: match number64(props, "OutputTokens") {
                u64::MAX => 0,
                n => n,
            },
            budget_usd: double(props, "BudgetUSD"),
            plan_limit: props
                .get("PlanLimit")
                .and_then(|v| v.try_clone().ok())
                .and_then(|v| <(String, String, f64, u64)>::try_from(v).ok())
                .unwrap_or((String::new(), String::new(), -1.0, 0)),
            pending,
            created_by: string(props, "CreatedBy"),
            created_by_bot: string(props, "CreatedByBot"),
        }
    }

    /// The state as a person reads it: `waiting for permission` while a request is open.
    /// `limited until 18:50` (local time; with the date when it is not within a day) while a
    /// usage limit holds (until the time its messages go), `limited (budget)` while the budget
    /// holds.
    pub fn shown_state(&self) -> String {
        let state = if self.state == "limited" && self.limit_kind == "budget" {
            "limited (budget)".to_owned()
        } else if self.state == "limited" && self.limit_resets_at > 0 {
            format!("limited until {}", local_time(self.limit_resets_at))
        } else if self.state == "login_required" {
            "login required".to_owned()
        } else if self.state == "held_elsewhere" {
            // `pid N: what: command`: the pid is what a person acts on.
            let pid = self.held_by.split(':').next().unwrap_or_default();
            format!("held elsewhere ({pid})")
        } else {
            self.state.clone()
        };
        match self.pending.len() {
            0 => state,
            1 => format!("{state}, waiting for permission"),
            n => format!("{state}, {n} permission requests"),
        }
    }

    /// `five-hour window 91 % used (warning), resets 18:50` ([`plan_limit_words`]).
    pub fn plan_limit_words(&self) -> String {
        plan_limit_words(&self.plan_limit)
    }

    /// Whether the bot's CLI told what it cost: not for a Codex bot, whose `CostUSD` stays 0
    /// because Codex tells tokens only (unknown is not zero).
    pub fn cost_told(&self) -> bool {
        cost_told(&self.runtime, self.cost_usd)
    }

    /// The cost in a column: `$0.0123` ([`dollars`]), or `-` when the CLI told none
    /// ([`BotInfo::cost_told`]).
    pub fn cost_cell(&self) -> String {
        if self.cost_told() {
            dollars(self.cost_usd)
        } else {
            "-".to_owned()
        }
    }

    /// `$0.0123 (1234 tokens in, 567 out) of a $5.00 budget` ([`dollars`]); `not told by the
    /// CLI (…)` when it told none.
    pub fn cost_words(&self) -> String {
        let budget = if self.budget_usd > 0.0 {
            format!(" of a {} budget", dollars(self.budget_usd))
        } else {
            String::new()
        };
        let cost = if self.cost_told() {
            dollars(self.cost_usd)
        } else {
            "not told by the CLI".to_owned()
        };
        format!(
            "{cost} ({} tokens in, {} out){budget}",
            self.input_tokens, self.output_tokens
        )
    }

    /// The JSON object of `list` and `status`.
    pub fn to_json(&self) -> Value {
        json!({
            "id": self.id,
            "short_id": self.short,
            "path": self.path,
            "name": self.name,
            "worktree": self.worktree,
            "branch": self.branch,
            "base_commit": self.base_commit,
            "state": self.state,
            "held_by": self.held_by,
            "limit_kind": self.limit_kind,
            "limit_resets_at": self.limit_resets_at,
            "cost_usd": self.cost_usd,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "budget_usd": self.budget_usd,
            "plan_limit": {"state": self.plan_limit.0, "kind": self.plan_limit.1,
                           "utilization": self.plan_limit.2, "resets_at": self.plan_limit.3},
            "cwd": self.cwd,
            "runtime": self.runtime,
            "model": self.model,
            "permission_mode": self.permission_mode,
            "session_id": self.session_id,
            "process_id": self.process_id,
            "queued_messages": self.queued_messages,
            "holders": self.holders,
            "last_error": self.last_error,
            "stop_verdict": self.stop_verdict,
            "stop_proof": self.stop_proof,
            "memory_current": known(self.memory_current),
            "cpu_usage_nsec": known(self.cpu_usage_nsec),
            "tasks_current": known(self.tasks_current),
            "memory_max": known(self.memory_max),
            "created_by": self.created_by,
            "created_by_bot": self.created_by_bot,
            "pending_permissions": self.pending.iter().map(|(id, tool, input)| json!({
                "request_id": id,
                "tool": tool,
                "input": serde_json::from_str::<Value>(input).unwrap_or(Value::Null),
            })).collect::<Vec<_>>(),
        })
    }
}

/// Whether a bot of `runtime` whose `CostUSD` reads `cost_usd` had its cost told: Codex tells
/// no cost (its bots' `CostUSD` stays 0), so 0 there means "not known", not "free".
pub fn cost_told(runtime: &str, cost_usd: f64) -> bool {
    runtime != "codex" || cost_usd > 0.0
}

/// Every bot, sorted by name, with short ids filled in.
pub async fn all(conn: &Connection) -> Result<Vec<BotInfo>, Failure> {
    let om = zbus::fdo::ObjectManagerProxy::builder(conn)
        .destination(BUS_NAME)
        .path(ROOT_PATH)
        .build()
        .await?;
    let objects = om.get_managed_objects().await?;
    let mut bots: Vec<BotInfo> = objects
        .iter()
        .filter_map(|(path, ifaces)| {
            let props = ifaces
                .iter()
                .find(|(name, _)| name.as_str() == BOT_INTERFACE)?
                .1;
            Some(BotInfo::from_properties(path.as_str(), props))
        })
        .collect();
    let ids: Vec<&str> = bots.iter().map(|b| b.id.as_str()).collect();
    let shorts = short_ids(&ids);
    for b in &mut bots {
        b.short = shorts.get(&b.id).cloned().unwrap_or_else(|| b.id.clone());
    }
    bots.sort_by(|a, b| a.name.cmp(&b.name).then(a.id.cmp(&b.id)));
    Ok(bots)
}

/// The shortest prefix of each id that no other id starts with, at least [`MIN_SHORT_ID`]
/// characters (as `git` abbreviates commits).
pub fn short_ids(ids: &[&str]) -> HashMap<String, String> {
    let mut out = HashMap::new();
    for id in ids {
        let mut len = MIN_SHORT_ID.min(id.len());
        while len < id.len()
            && ids
                .iter()
                .any(|other| other != id && other.starts_with(&id[..len]))
        {
            len += 1;
        }
        out.insert((*id).to_owned(), id[..len].to_owned());
    }
    out
}

/// The object path of the bot `spec` names (id, id prefix, name or object path).
/// The bot `spec` (an id, id prefix, name or object path) names on `conn`'s botvisord, or
/// `None` when no bot there has it (an object path is taken as given). Errors: as
/// [`path_of`]'s, but for a bot not found.
pub async fn find(conn: &Connection, spec: &str) -> Result<Option<OwnedObjectPath>, Failure> {
    if !spec.starts_with('/') {
        match ManagerProxy::new(conn).await?.get_bot(spec).await {
            Ok(p) => return Ok(Some(p)),
            Err(e) if error_name(&e) == Some("NotFound") => return Ok(None),
            Err(_) => {}
        }
    }
    // Said in path_of's words (a path not well formed, an id prefix that fits several).
    path_of(conn, spec).await.map(Some)
}

/// For a bot not found: when `spec` reads `HOST:BOT` as a row over several hosts names it
/// (`buildbox:demo`) and `HOST` is a host of the hosts file (or `local`), how to name it on its
/// host (` (it reads as bot demo of host buildbox: -H buildbox … demo)`); else nothing.
fn on_named_host(spec: &str) -> String {
    let Some((host, bot)) = spec.split_once(':') else {
        return String::new();
    };
    let known = host == super::hosts::LOCAL
        || super::hosts::load().is_ok_and(|c| c.hosts.iter().any(|h| h.name == host));
    if !known || bot.is_empty() {
        return String::new();
    }
    format!(
        " (it reads as the bot {} of host {}: name its host with `-H {}` and the bot alone)",
        show::safe(bot),
        show::safe(host),
        show::safe(host)
    )
}

pub async fn path_of(conn: &Connection, spec: &str) -> Result<OwnedObjectPath, Failure> {
    if spec.starts_with('/') {
        return OwnedObjectPath::try_from(spec.to_owned()).map_err(|e| {
            Failure::usage(format!(
                "`{}` is not an object path: {}",
                show::safe(spec),
                show::safe(&e.to_string())
            ))
        });
    }
    match ManagerProxy::new(conn).await?.get_bot(spec).await {
        Ok(p) => Ok(p),
        Err(e) if error_name(&e) == Some("NotFound") => {
            // `abc` could be the start of an id, too short to pick one out.
            let short_prefix =
                (1..4).contains(&spec.len()) && spec.bytes().all(|b| b.is_ascii_hexdigit());
            let why = if short_prefix {
                " (an id prefix takes 4 characters or more)".to_owned()
            } else {
                on_named_host(spec)
            };
            Err(Failure::failed(format!(
                "no bot has the id, id prefix or name `{}`{why}; `{} list` shows them all",
                show::safe(spec),
                hint::ctl()
            )))
        }
        Err(e) if error_name(&e) == Some("InvalidArgument") => Err(Failure::failed(format!(
            "`{}` fits several bots; give more of the id (`{} list` shows them)",
            show::safe(spec),
            hint::ctl()
        ))),
        Err(e) => Err(Failure::failed(describe(&e))),
    }
}

/// A proxy on the bot `spec` names, reading properties from botvisord on every call.
pub async fn resolve(conn: &Connection, spec: &str) -> Result<BotProxy<'static>, Failure> {
    let path = path_of(conn, spec).await?;
    proxy(conn, path).await
}

/// A proxy on the bot at `path`, reading properties from botvisord on every call.
pub async fn proxy(conn: &Connection, path: OwnedObjectPath) -> Result<BotProxy<'static>, Failure> {
    Ok(BotProxy::builder(conn)
        .path(path)
        .cache_properties(zbus::proxy::CacheProperties::No)
        .build()
        .await?)
}

/// One bot's information (with its short id among all bots).
pub async fn info(conn: &Connection, path: &str) -> Result<BotInfo, Failure> {
    all(conn)
        .await?
        .into_iter()
        .find(|b| b.path == path)
        .ok_or_else(|| {
            Failure::failed(format!(
                "that bot is gone (deleted); `{} list` shows the bots",
                hint::ctl()
            ))
        })
}

/// `PlanLimit` `(state, kind, utilization, resets_at)` as words: `five-hour window 91 % used
/// (warning), resets 18:50`; `not told` before the CLI said.
pub fn plan_limit_words(plan_limit: &(String, String, f64, u64)) -> String {
    let (state, kind, used, resets_at) = plan_limit;
    if state.is_empty() {
        return "not told".to_owned();
    }
    let window = if kind.is_empty() {
        "the plan's window".to_owned()
    } else {
        format!("{} window", kind.replace('_', "-"))
    };
    let used = if *used >= 0.0 {
        format!(" {:.0} % used", used * 100.0)
    } else {
        String::new()
    };
    let reset = if *resets_at > 0 {
        format!(", resets {}", local_time(*resets_at))
    } else {
        String::new()
    };
    format!("{window}{used} ({state}){reset}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_ids_are_unique_prefixes() {
        let ids = [
            "3f2a91aaaa000000000000000000000000",
            "3f2a91bbbb000000000000000000000000",
            "77aa00000000000000000000000000000",
        ];
        let s = short_ids(&ids);
        assert_eq!(s[ids[0]], "3f2a91a");
        assert_eq!(s[ids[1]], "3f2a91b");
        assert_eq!(s[ids[2]], "77aa00");
    }

    #[test]
    fn a_limited_bot_says_until_when() {
        let mut props = HashMap::new();
        props.insert(
            "State".to_owned(),
            OwnedValue::from(zbus::Str::from("limited")),
        );
        let reset = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
            + 600;
        props.insert("LimitResetsAt".to_owned(), OwnedValue::from(reset));
        let b = BotInfo::from_properties("/b", &props);
        assert_eq!(
            b.shown_state(),
            format!("limited until {}", local_time(reset))
        );
        assert_eq!(local_time(reset).len(), 5, "HH:MM within a day");
        assert_eq!(
            local_time(reset + 3 * 86_400).len(),
            16,
            "with the date further off"
        );
        props.insert("LimitResetsAt".to_owned(), OwnedValue::from(0u64));
        let b = BotInfo::from_properties("/b", &props);
        assert_eq!(b.shown_state(), "limited", "no reset known");
    }
}
