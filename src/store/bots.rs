//! The `bots` table: one row per bot, with its settings and its recorded session id.

use std::collections::BTreeMap;

use rusqlite::{Connection, OptionalExtension, Row, params};

use crate::cost::Spend;

/// A bot as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct BotRecord {
    /// 32 lower-case hex digits; also the last element of the bot's object path.
    pub id: String,
    /// A name for people; defaults to the last element of `cwd`.
    pub name: String,
    /// The canonical, absolute working directory, fixed at creation.
    pub cwd: String,
    /// The runtime's name, for example `claude`.
    pub runtime: String,
    /// The model; empty for the CLI's default.
    pub model: String,
    /// The permission mode; empty for the CLI's default.
    pub permission_mode: String,
    /// Extra environment variables for the CLI.
    pub env: BTreeMap<String, String>,
    /// Idle stop after this many seconds; `None` takes the daemon's default, 0 is never.
    pub idle_timeout_s: Option<u64>,
    /// The bot's memory limit in bytes (`memory.max` of its cgroup); `None` takes the daemon's
    /// default (config `memory_max`), if any.
    pub memory_max: Option<u64>,
    /// The conversation to resume, recorded once a turn began in it (design rule 3).
    pub session_id: Option<String>,
    /// The last error a person should know of; empty when none.
    pub last_error: String,
    /// RFC 3339.
    pub created_at: String,
    /// In state `failed`: waits for an explicit Restart, across daemon restarts.
    pub failed: bool,
    /// The verdict of the last stop; empty before the first.
    pub stop_verdict: String,
    /// Stopped by a client: waiting messages wait for the next Send or Restart, across daemon
    /// restarts.
    pub parked: bool,
    /// A plan's usage limit the bot waits for: its kind (`five_hour`, …) and reset (Unix
    /// seconds, 0 when not known); `None` when none holds.
    pub limit: Option<(String, u64)>,
    /// What the bot cost since its creation (nano-dollars, tokens).
    pub spend: Spend,
    /// The last conversation total the CLI told: its session and nano-dollars.
    pub conversation_cost: Option<(String, u64)>,
    /// The bot's budget in nano-dollars; `Some(0)` is no budget, `None` takes the daemon's
    /// `budget_usd`, if any.
    pub budget: Option<u64>,
    /// Whether a turn a usage limit cut after tool calls continues at the reset; `None` takes
    /// the daemon's `continue_after_limit`.
    pub continue_after_limit: Option<bool>,
    /// The git worktree botvisor made for the bot (issue 28), which is its `cwd`; `None` for a
    /// bot in a folder of the user's.
    pub worktree: Option<WorktreeRecord>,
    /// Who created the bot (issue 29); empty for a bot a person's program created.
    pub created_by: CreatedBy,
    /// A failed attempt the conversation holds, which the next start resumes without (issue
    /// 45, `BotCore`'s attempt); `None`: none.
    pub attempt_cut: Option<crate::runtime::Cut>,
}

/// A bot's git worktree as stored: its path is the bot's `cwd`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorktreeRecord {
    /// The repository's main worktree (where git runs to remove this one).
    pub repo: String,
    /// The branch checked out in it.
    pub branch: String,
    /// The full hash of the commit the branch started at.
    pub base_commit: String,
}

/// Who created a bot: what the creating client called itself and the bot whose agent made the
/// call, if any, with the depth of that chain.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CreatedBy {
    /// The name the client gave (`CreateBot` option `created_by`, for example an MCP client's
    /// `clientInfo.name`); empty when none was given. At most 128 characters, no control ones.
    pub client: String,
    /// The id of the bot whose agent (or one of its descendants) called `CreateBot`, as the
    /// caller's process marker said; empty when the caller was no bot's.
    pub bot: String,
    /// How many bots created by bots lead to this one: 0 for a bot no bot created, else its
    /// creator's depth plus one.
    pub depth: u32,
}

impl BotRecord {
    /// A new bot's record: no session, no error, settings at their defaults, created now.
    pub fn new(id: &str, name: &str, cwd: &str, runtime: &str) -> BotRecord {
        BotRecord {
            id: id.to_owned(),
            name: name.to_owned(),
            cwd: cwd.to_owned(),
            runtime: runtime.to_owned(),
            model: String::new(),
            permission_mode: String::new(),
            env: BTreeMap::new(),
            idle_timeout_s: None,
            memory_max: None,
            session_id: None,
            last_error: String::new(),
            created_at: crate::time::now_rfc3339(),
            failed: false,
            stop_verdict: String::new(),
            parked: false,
            limit: None,
            spend: Spend::default(),
            conversation_cost: None,
            budget: None,
            continue_after_limit: None,
            worktree: None,
            created_by: CreatedBy::default(),
            attempt_cut: None,
        }
    }
}

fn from_row(r: &Row<'_>) -> rusqlite::Result<BotRecord> {
    let env: String = r.get("env")?;
    Ok(BotRecord {
        id: r.get("id")?,
        name: r.get("name")?,
        cwd: r.get("cwd")?,
        runtime: r.get("runtime")?,
        model: r.get("model")?,
        permission_mode: r.get("permission_mode")?,
        env: serde_json::from_str(&env).unwrap_or_default(),
        idle_timeout_s: r.get::<_, Option<i64>>("idle_timeout_s")?.map(|v| v as u64),
        memory_max: r.get::<_, Option<i64>>("memory_max")?.map(|v| v as u64),
        session_id: r.get("session_id")?,
        last_error: r.get("last_error")?,
        created_at: r.get("created_at")?,
        failed: r.get::<_, i64>("failed")? != 0,
        stop_verdict: r.get("stop_verdict")?,
        parked: r.get::<_, i64>("parked")? != 0,
        limit: (r.get::<_, i64>("limited")? != 0).then_some((
            r.get("limit_kind")?,
            r.get::<_, i64>("limit_resets_at")?.max(0) as u64,
        )),
        spend: Spend {
            cost_nanos: r.get::<_, i64>("cost_nanos")?.max(0) as u64,
            input_tokens: r.get::<_, i64>("input_tokens")?.max(0) as u64,
            output_tokens: r.get::<_, i64>("output_tokens")?.max(0) as u64,
        },
        conversation_cost: {
            let s: String = r.get("cost_session")?;
            (!s.is_empty())
                .then(|| -> rusqlite::Result<(String, u64)> {
                    Ok((s, r.get::<_, i64>("cost_session_nanos")?.max(0) as u64))
                })
                .transpose()?
        },
        budget: r
            .get::<_, Option<i64>>("budget_nanos")?
            .map(|v| v.max(0) as u64),
        continue_after_limit: r
            .get::<_, Option<i64>>("continue_after_limit")?
            .map(|v| v != 0),
        worktree: match r.get::<_, Option<String>>("worktree_repo")? {
            Some(repo) => Some(WorktreeRecord {
                repo,
                branch: r
                    .get::<_, Option<String>>("worktree_branch")?
                    .unwrap_or_default(),
                base_commit: r
                    .get::<_, Option<String>>("worktree_base")?
                    .unwrap_or_default(),
            }),
            None => None,
        },
        created_by: CreatedBy {
            client: r.get("created_by_client")?,
            bot: r.get("created_by_bot")?,
            depth: r
                .get::<_, i64>("agent_depth")?
                .clamp(0, i64::from(u32::MAX)) as u32,
        },
        attempt_cut: r
            .get::<_, Option<String>>("attempt_cut")?
            .and_then(|c| serde_json::from_str(&c).ok()),
    })
}

/// Inserts a new bot.
pub fn insert(conn: &Connection, b: &BotRecord) -> rusqlite::Result<()> {
    conn.execute(
        "INSERT INTO bots (id, name, cwd, runtime, model, permission_mode, env, idle_timeout_s,
                           session_id, last_error, created_at, memory_max, budget_nanos,
                           continue_after_limit, worktree_repo, worktree_branch, worktree_base,
                           created_by_client, created_by_bot, agent_depth)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18,
                   ?19, ?20)",
        params![
            b.id,
            b.name,
            b.cwd,
            b.runtime,
            b.model,
            b.permission_mode,
            serde_json::to_string(&b.env).unwrap_or_else(|_| "{}".into()),
            b.idle_timeout_s.map(|v| v as i64),
            b.session_id,
            b.last_error,
            b.created_at,
            b.memory_max.map(|v| v as i64),
            b.budget.map(|v| v.min(i64::MAX as u64) as i64),
            b.continue_after_limit.map(i64::from),
            b.worktree.as_ref().map(|w| &w.repo),
            b.worktree.as_ref().map(|w| &w.branch),
            b.worktree.as_ref().map(|w| &w.base_commit),
            b.created_by.client,
            b.created_by.bot,
            i64::from(b.created_by.depth),
        ],
    )?;
    Ok(())
}

/// All bots, oldest first.
pub fn load_all(conn: &Connection) -> rusqlite::Result<Vec<BotRecord>> {
    let mut st = conn.prepare("SELECT * FROM bots WHERE deleting = 0 ORDER BY created_at, id")?;
    st.query_map([], from_row)?.collect()
}

/// Marks a bot deleted, as a client's Delete is answered: no later start loads it
/// ([`load_all`]), and the next start deletes it ([`purge_deleting`]). Returns whether it existed.
pub fn mark_deleting(conn: &Connection, id: &str) -> rusqlite::Result<bool> {
    Ok(conn.execute("UPDATE bots SET deleting = 1 WHERE id = ?1", [id])? > 0)
}

/// The ids of the bots a Delete marked and nothing deleted yet (a daemon crashed meanwhile).
pub fn deleting(conn: &Connection) -> rusqlite::Result<Vec<String>> {
    let mut st = conn.prepare("SELECT id FROM bots WHERE deleting = 1")?;
    st.query_map([], |r| r.get(0))?.collect()
}

/// Deletes every bot a Delete marked (after their processes were stopped). Returns how many.
pub fn purge_deleting(conn: &Connection) -> rusqlite::Result<usize> {
    conn.execute("DELETE FROM bots WHERE deleting = 1", [])
}

/// One bot.
pub fn load(conn: &Connection, id: &str) -> rusqlite::Result<Option<BotRecord>> {
    conn.query_row("SELECT * FROM bots WHERE id = ?1", [id], from_row)
        .optional()
}

/// Deletes a bot with its chat items and turns. Returns whether it existed.
pub fn delete(conn: &Connection, id: &str) -> rusqlite::Result<bool> {
    Ok(conn.execute("DELETE FROM bots WHERE id = ?1", [id])? > 0)
}

/// Records (or with `None` clears) the conversation to resume.
pub fn set_session(conn: &Connection, id: &str, session_id: Option<&str>) -> rusqlite::Result<()> {
    conn.prepare_cached("UPDATE bots SET session_id = ?2 WHERE id = ?1")?
        .execute(params![id, session_id])?;
    Ok(())
}

/// Stores the model.
pub fn set_model(conn: &Connection, id: &str, model: &str) -> rusqlite::Result<()> {
    conn.execute(
        "UPDATE bots SET model = ?2 WHERE id = ?1",
        params![id, model],
    )?;
    Ok(())
}

/// Stores the permission mode.
pub fn set_permission_mode(conn: &Connection, id: &str, mode: &str) -> rusqlite::Result<()> {
    conn.execute(
        "UPDATE bots SET permission_mode = ?2 WHERE id = ?1",
        params![id, mode],
    )?;
    Ok(())
}

/// Stores whether the bot is in state `failed`.
pub fn set_failed(conn: &Connection, id: &str, failed: bool) -> rusqlite::Result<()> {
    conn.execute(
        "UPDATE bots SET failed = ?2 WHERE id = ?1",
        params![id, failed as i64],
    )?;
    Ok(())
}

/// Stores whether a client stopped the bot (its waiting messages wait).
pub fn set_parked(conn: &Connection, id: &str, parked: bool) -> rusqlite::Result<()> {
    conn.prepare_cached("UPDATE bots SET parked = ?2 WHERE id = ?1")?
        .execute(params![id, parked as i64])?;
    Ok(())
}

/// Stores the failed attempt the bot's conversation holds (issue 45), or none.
pub fn set_attempt_cut(
    conn: &Connection,
    id: &str,
    cut: Option<&crate::runtime::Cut>,
) -> rusqlite::Result<()> {
    let cut = cut.and_then(|c| serde_json::to_string(c).ok());
    conn.prepare_cached("UPDATE bots SET attempt_cut = ?2 WHERE id = ?1")?
        .execute(params![id, cut])?;
    Ok(())
}

/// Stores the usage limit the bot waits for (kind, reset in Unix seconds), or none.
pub fn set_limit(conn: &Connection, id: &str, limit: Option<(&str, u64)>) -> rusqlite::Result<()> {
    let (limited, kind, resets_at) = match limit {
        Some((kind, at)) => (1i64, kind, at.min(i64::MAX as u64) as i64),
        None => (0, "", 0),
    };
    conn.prepare_cached(
        "UPDATE bots SET limited = ?2, limit_kind = ?3, limit_resets_at = ?4 WHERE id = ?1",
    )?
    .execute(params![id, limited, kind, resets_at])?;
    Ok(())
}

/// Adds a turn's `spend` to the bot's and, when the CLI told one, records its conversation's
/// total (session, nano-dollars).
pub fn add_spend(
    conn: &Connection,
    id: &str,
    spend: &Spend,
    conversation: Option<(&str, u64)>,
) -> rusqlite::Result<()> {
    let i = |v: u64| v.min(i64::MAX as u64) as i64;
    conn.prepare_cached(
        "UPDATE bots SET cost_nanos = MIN(cost_nanos + ?2, 9223372036854775807),
                         input_tokens = MIN(input_tokens + ?3, 9223372036854775807),
                         output_tokens = MIN(output_tokens + ?4, 9223372036854775807)
         WHERE id = ?1",
    )?
    .execute(params![
        id,
        i(spend.cost_nanos),
        i(spend.input_tokens),
        i(spend.output_tokens)
    ])?;
    if let Some((session, total)) = conversation {
        conn.prepare_cached(
            "UPDATE bots SET cost_session = ?2, cost_session_nanos = ?3 WHERE id = ?1",
        )?
        .execute(params![id, session, i(total)])?;
    }
    Ok(())
}

/// Stores the bot's budget in nano-dollars (`None`: the daemon's).
pub fn set_budget(conn: &Connection, id: &str, budget: Option<u64>) -> rusqlite::Result<()> {
    conn.prepare_cached("UPDATE bots SET budget_nanos = ?2 WHERE id = ?1")?
        .execute(params![id, budget.map(|v| v.min(i64::MAX as u64) as i64)])?;
    Ok(())
}

/// Stores the bot's extra environment for the CLI.
pub fn set_env(
    conn: &Connection,
    id: &str,
    env: &BTreeMap<String, String>,
) -> rusqlite::Result<()> {
    conn.prepare_cached("UPDATE bots SET env = ?2 WHERE id = ?1")?
        .execute(params![
            id,
            serde_json::to_string(env).unwrap_or_else(|_| "{}".into())
        ])?;
    Ok(())
}

/// Stores the bot's name.
pub fn set_name(conn: &Connection, id: &str, name: &str) -> rusqlite::Result<()> {
    conn.prepare_cached("UPDATE bots SET name = ?2 WHERE id = ?1")?
        .execute(params![id, name])?;
    Ok(())
}

/// Stores the verdict of the last stop.
pub fn set_stop_verdict(conn: &Connection, id: &str, verdict: &str) -> rusqlite::Result<()> {
    conn.prepare_cached("UPDATE bots SET stop_verdict = ?2 WHERE id = ?1")?
        .execute(params![id, verdict])?;
    Ok(())
}

/// Stores the last error (empty clears it).
pub fn set_last_error(conn: &Connection, id: &str, last_error: &str) -> rusqlite::Result<()> {
    conn.prepare_cached("UPDATE bots SET last_error = ?2 WHERE id = ?1")?
        .execute(params![id, last_error])?;
    Ok(())
}
