//! `/org/botvisor/Botvisor1`: the `org.botvisor.Botvisor1.Manager` interface.

use std::sync::Arc;

use zbus::message::Message;
use zbus::names::MemberName;
use zbus::object_server::ObjectServer;
use zbus::{Connection, OwnedObjectPath, interface};

use super::bot::BotObject;
use super::bounds::bus_text;
use super::ctx::Ctx;
use super::error::{Error, Result};
use super::guard::{DescriptorMethods, Detached, Guarded};
use super::options::{OptionReader, Options};
use super::paths::{Paths, bot_path};
use crate::sizes::{MAX_PAGE_BYTES, MAX_SPEND_ROWS};
use crate::supervisor::NewBot;

/// The Manager object.
pub struct Manager {
    ctx: Arc<Ctx>,
}

impl Manager {
    /// The Manager, behind the caller check (design rule 14).
    pub fn guarded(ctx: Arc<Ctx>) -> Guarded<Manager> {
        Guarded::new(Manager { ctx: ctx.clone() }, ctx)
    }
}

/// The longest `NAME=VALUE` string Linux passes to a program (`MAX_ARG_STRLEN`, 32 pages of
/// 4 KiB, with its NUL): a longer one makes every launch fail with "Argument list too long".
pub const MAX_ENV_VARIABLE_BYTES: usize = 128 * 1024 - 1;

/// The most bytes a bot's extra environment may hold in all (`NAME=VALUE` strings and NULs): a
/// quarter of Linux's usual 2 MiB for arguments and environment together, so the inherited
/// environment and the CLI's own arguments keep room.
pub const MAX_ENV_BYTES: usize = 512 * 1024;

/// The most variables a bot's extra environment may hold.
pub const MAX_ENV_VARIABLES: usize = 1024;

/// A variable name as an error shows it: its first 64 characters, escaped.
fn name_shown(k: &str) -> String {
    let head: String = k.chars().take(64).collect();
    let more = if head.len() < k.len() { "…" } else { "" };
    format!("{}{more}", crate::text::escape(&head, false))
}

/// InvalidArgument for an environment no process can be given: a variable name that is empty
/// or holds `=` or NUL, a value that holds NUL, a `NAME=VALUE` over
/// [`MAX_ENV_VARIABLE_BYTES`], or more than [`MAX_ENV_VARIABLES`] variables or
/// [`MAX_ENV_BYTES`] in all. `what` names the argument (`CreateBot: option \`env\``).
pub(crate) fn check_env(
    what: &str,
    env: &std::collections::BTreeMap<String, String>,
) -> Result<()> {
    if env.len() > MAX_ENV_VARIABLES {
        return Err(Error::InvalidArgument(format!(
            "{what} holds {} variables, over the {MAX_ENV_VARIABLES} a bot may have",
            env.len()
        )));
    }
    let mut total = 0;
    for (k, v) in env {
        if k.is_empty() || k.contains(['=', '\0']) {
            return Err(Error::InvalidArgument(format!(
                "{what} has an invalid variable name `{}` (empty, or holds `=` or NUL)",
                name_shown(k)
            )));
        }
        if v.contains('\0') {
            return Err(Error::InvalidArgument(format!(
                "{what}: the value of `{}` holds a NUL byte",
                name_shown(k)
            )));
        }
        let bytes = k.len() + 1 + v.len();
        if bytes > MAX_ENV_VARIABLE_BYTES {
            return Err(Error::InvalidArgument(format!(
                "{what}: `{}` is {bytes} bytes with its value, over the {MAX_ENV_VARIABLE_BYTES} \
                 Linux passes to a program",
                name_shown(k)
            )));
        }
        total += bytes + 1;
    }
    if total > MAX_ENV_BYTES {
        return Err(Error::InvalidArgument(format!(
            "{what} holds {total} bytes, over the {MAX_ENV_BYTES} a bot's environment may have"
        )));
    }
    Ok(())
}

/// `CreateBot`'s work (its doc is the method's): the bot made, its object served and announced.
/// Run in a task of its own ([`DescriptorMethods::detached_call`]): a worktree's `git worktree
/// add` may take long on a big repository.
async fn create_bot(
    ctx: &Arc<Ctx>,
    conn: &Connection,
    server: &ObjectServer,
    hdr: &zbus::message::Header<'_>,
    options: Options,
) -> Result<OwnedObjectPath> {
    let mut r = OptionReader::new("CreateBot", &options);
    let cwd = r.string("cwd")?;
    let name = r.string("name")?;
    let runtime = r.string("runtime")?;
    let model = r.string("model")?;
    let permission_mode = r.string("permission_mode")?;
    let env = r.string_map("env")?.unwrap_or_default();
    let idle_timeout_s = r.seconds("idle_timeout_s")?;
    let memory_max = r.bytes("memory_max")?;
    let budget = r
        .number("budget_usd")?
        .map(crate::supervisor::budget_nanos)
        .transpose()
        .map_err(|e| Error::InvalidArgument(format!("CreateBot: option {e}")))?;
    let continue_after_limit = r.boolean("continue_after_limit")?;
    let created_by_client = r.string("created_by")?;
    let session_id = r.string("session_id")?;
    let worktree = match r.dict("worktree")? {
        None => None,
        Some(w) => {
            let mut wr = OptionReader::new("CreateBot: option `worktree`", &w);
            let ask = crate::worktree::Ask {
                branch: wr.string("branch")?,
                base: wr.string("base")?,
                path: wr.string("path")?,
            };
            wr.finish()?;
            Some(ask)
        }
    };
    r.finish()?;
    let cwd = cwd.ok_or_else(|| {
        Error::InvalidArgument(
            "CreateBot: option `cwd` is required: the absolute path of the bot's working \
             directory, for example {'cwd': <'/home/me/project'>}"
                .into(),
        )
    })?;
    check_env("CreateBot: option `env`", &env)?;
    if idle_timeout_s.is_some_and(|s| s > crate::config::MAX_SECONDS) {
        return Err(Error::InvalidArgument(format!(
            "CreateBot: option `idle_timeout_s` must be at most {} (one year); 0 means never",
            crate::config::MAX_SECONDS
        )));
    }
    // The calling bot, from the caller's own process: a bot's agent cannot say otherwise.
    let sender = hdr.sender().map(|s| s.to_string()).unwrap_or_default();
    let (pid, marker) = super::caller::caller_process(ctx.caller.lookup(), &sender).await;
    let created_by_bot = ctx.supervisor.bot_of_process(pid, marker.as_deref());
    let handle = ctx
        .supervisor
        .create(NewBot {
            created_by_client,
            created_by_bot,
            cwd,
            name,
            runtime,
            model,
            permission_mode,
            env,
            idle_timeout_s,
            memory_max,
            budget,
            continue_after_limit,
            worktree,
            session_id,
        })
        .await?;
    let path = bot_path(&handle.id);
    server
        .at(&path, BotObject::guarded(handle.clone(), ctx.clone()))
        .await?;
    ctx.managed.served(handle);
    if let Err(e) = super::objects::announce(ctx, conn, &path).await {
        tracing::debug!(error = %e, "InterfacesAdded not sent to the user's connections");
    }
    Ok(path)
}

/// `ListConversations`'s work (its doc is the method's). Run in a task of its own: it reads
/// every transcript or rollout of the folder.
fn list_conversations(ctx: &Arc<Ctx>, cwd: String, options: Options) -> Result<Vec<Conversation>> {
    let mut r = OptionReader::new("ListConversations", &options);
    let runtime = r.string("runtime")?;
    let env = r.string_map("env")?.unwrap_or_default();
    let offset = r.seconds("offset")?.unwrap_or(0) as usize;
    let limit = r.seconds("limit")?.unwrap_or(MAX_CONVERSATIONS as u64) as usize;
    r.finish()?;
    check_env("ListConversations: option `env`", &env)?;
    let listed = ctx
        .supervisor
        .conversations(&cwd, runtime.as_deref(), &env)?;
    let mut out = Vec::new();
    for c in listed
        .into_iter()
        .skip(offset)
        .take(limit.min(MAX_CONVERSATIONS))
    {
        let mut details = Options::new();
        if let Some(bot) = &c.bot_id {
            details.insert(
                "bot".into(),
                zbus::OwnedVariant::try_from(zbus::Variant::from(bot_path(bot).into_inner()))
                    .map_err(|e| Error::Failed(e.to_string()))?,
            );
        }
        if let Some(held) = ctx
            .supervisor
            .held_by(&c.runtime, &cwd_of(&cwd), &c.session_id, &env)
        {
            details.insert(
                "held_by".into(),
                zbus::OwnedVariant::try_from(zbus::Variant::from(bus_text(&held).into_owned()))
                    .map_err(|e| Error::Failed(e.to_string()))?,
            );
        }
        // The session id and the title are what the CLI's files say: no NUL may go on the bus.
        out.push((
            c.runtime,
            bus_text(&c.session_id).into_owned(),
            c.modified_s,
            bus_text(&c.title).into_owned(),
            details,
        ));
    }
    Ok(out)
}

/// One conversation as `ListConversations` answers it: runtime, session id, last written (Unix
/// seconds), title, details.
type Conversation = (String, String, i64, String, Options);

impl DescriptorMethods for Manager {
    fn detached_call(
        &self,
        conn: &Connection,
        msg: &Message,
        name: &MemberName<'_>,
    ) -> Option<Detached> {
        let (ctx, conn, msg) = (self.ctx.clone(), conn.clone(), msg.clone());
        match name.as_str() {
            "CreateBot" => Some(Box::pin(async move {
                let hdr = msg.header();
                let answer = match msg.body().deserialize::<Options>() {
                    Ok(options) => {
                        create_bot(&ctx, &conn, conn.object_server(), &hdr, options).await
                    }
                    Err(e) => Err(Error::InvalidArgument(format!("CreateBot: {e}"))),
                };
                answer_with(&conn, &hdr, answer).await;
            })),
            "ListConversations" => Some(Box::pin(async move {
                let hdr = msg.header();
                let answer = match msg.body().deserialize::<(String, Options)>() {
                    Ok((cwd, options)) => {
                        // Files are read: off the runtime's worker threads.
                        let ctx = ctx.clone();
                        tokio::task::spawn_blocking(move || list_conversations(&ctx, cwd, options))
                            .await
                            .unwrap_or_else(|e| {
                                Err(Error::Failed(format!("ListConversations failed: {e}")))
                            })
                    }
                    Err(e) => Err(Error::InvalidArgument(format!("ListConversations: {e}"))),
                };
                answer_with(&conn, &hdr, answer).await;
            })),
            _ => None,
        }
    }
}

/// Sends a detached call's answer: its value, or its error.
pub(super) async fn answer_with<B>(
    conn: &Connection,
    hdr: &zbus::message::Header<'_>,
    answer: Result<B>,
) where
    B: serde::Serialize + zbus::zvariant::DynamicType,
{
    let sent = match answer {
        Ok(body) => conn.reply(hdr, &body).await,
        Err(e) => conn.reply_dbus_error(hdr, e).await,
    };
    if let Err(e) = sent {
        tracing::debug!(error = %e, "the answer of a detached call was not sent");
    }
}

/// One row of `ListSpend`: bot id, name, runtime, UTC day, US dollars (-1: not told), input
/// tokens, output tokens.
pub type SpendRow = (String, String, String, String, f64, u64, u64);

/// The most conversations one `ListConversations` answer holds (a page).
pub const MAX_CONVERSATIONS: usize = 500;

/// `cwd` canonicalised, as the conversations were listed for it (unchanged when it cannot be).
fn cwd_of(cwd: &str) -> String {
    crate::supervisor::canonical_cwd(cwd).unwrap_or_else(|_| cwd.to_owned())
}

/// Manages bots: creates them and lists them.
#[interface(name = "org.botvisor.Botvisor1.Manager", spawn = false)]
impl Manager {
    /// Creates a bot and returns its object path. Options: `cwd` (s, required: absolute path of
    /// an existing directory), `name` (s), `runtime` (s, default `claude`), `model` (s),
    /// `permission_mode` (s), `env` (a{ss}, added to the CLI's environment), `idle_timeout_s`
    /// (u, seconds, 0 = never), `memory_max` (t, bytes, at least 1 MiB; `2^64-1` = none; where
    /// the memory controller is delegated), `budget_usd` (d, US dollars; 0 = no budget; default
    /// config `budget_usd`), `continue_after_limit` (b: a turn a usage limit cut after tool calls
    /// continues by itself at the reset; default config `continue_after_limit`, false),
    /// `worktree` (a{sv}: `branch`, `base`, `path`, each s: a git worktree made for the bot,
    /// its `Cwd`), `session_id` (s: adopt a conversation `ListConversations` lists),
    /// `created_by` (s: who creates it, for example an MCP client's name; at most 128 characters;
    /// recorded in `CreatedBy` with the bot whose agent called, which botvisord reads from the
    /// caller's process). Errors: InvalidArgument, RuntimeUnavailable,
    /// NotSupported (`memory_max` without a delegated memory controller), LimitExceeded (a bot's
    /// agent called and config `agent_max_depth` or `agent_max_bots` refuses one more), AccessDenied.
    #[zbus(out_args("bot"))]
    async fn create_bot(
        &self,
        options: Options,
        #[zbus(connection)] conn: &Connection,
        #[zbus(object_server)] server: &ObjectServer,
        #[zbus(header)] hdr: zbus::message::Header<'_>,
    ) -> Result<OwnedObjectPath> {
        create_bot(&self.ctx, conn, server, &hdr, options).await
    }

    /// The conversations the CLIs keep for the folder `cwd`, read from the files that exist
    /// (Claude Code's transcripts of that folder, Codex's rollouts whose `cwd` it is), newest
    /// first, as `(runtime, session id, last written in Unix seconds, title, details)`: the title is the first user message, escaped
    /// and at most 200 characters; details `bot` (o, the bot that owns it) and `held_by` (s, a
    /// live process outside botvisor that holds it), each only when so. Options: `runtime` (s,
    /// one runtime only), `env` (a{ss}, added to the daemon's environment to find the CLI's
    /// folder, as a bot's), `offset` (u, default 0), `limit` (u, default and at most 500).
    /// Errors: InvalidArgument (a `cwd` `CreateBot` would refuse, an unknown runtime or option).
    #[zbus(out_args("conversations"))]
    async fn list_conversations(&self, cwd: String, options: Options) -> Result<Vec<Conversation>> {
        list_conversations(&self.ctx, cwd, options)
    }

    /// What every bot ever made spent, deleted bots included, one row per bot and UTC day on
    /// which it spent: `(bot id, name, runtime, day, US dollars, input tokens, output tokens)`,
    /// the name the bot had at that day's last spend, the day `YYYY-MM-DD` (UTC), the dollars as
    /// the CLI computed them (-1: the CLI told no cost, as Codex, which tells tokens only), the
    /// input tokens counting cache writes and reads. Rows in the order they began (by day,
    /// oldest first); a page of at most `limit` rows and 4 MiB, but at least one row when there
    /// is one: call again with `offset` plus the rows received until the reply is empty.
    /// Options: `since` (s, `YYYY-MM-DD`: that day and later), `offset` (u, default 0), `limit`
    /// (u, default and at most 4096). Errors: InvalidArgument (a `since` that is no such day, an
    /// unknown option or type), Failed.
    #[zbus(out_args("spend"))]
    async fn list_spend(&self, options: Options) -> Result<Vec<SpendRow>> {
        let mut r = OptionReader::new("ListSpend", &options);
        let since = r.string("since")?;
        let offset = r.seconds("offset")?.unwrap_or(0);
        let limit = r.seconds("limit")?.unwrap_or(0);
        r.finish()?;
        if let Some(day) = &since {
            crate::time::check_day(day)
                .map_err(|e| Error::InvalidArgument(format!("ListSpend: option `since` {e}")))?;
        }
        let limit = match limit {
            0 => MAX_SPEND_ROWS,
            n => n.min(u64::from(MAX_SPEND_ROWS)) as u32,
        };
        let rows = self
            .ctx
            .supervisor
            .store()
            .read(|c| {
                crate::store::spend::since(c, since.as_deref(), offset, limit, MAX_PAGE_BYTES)
            })
            .map_err(|e| Error::Failed(e.to_string()))?;
        Ok(rows
            .into_iter()
            .map(|r| {
                let usd = if r.cost_told {
                    crate::cost::usd(r.spend.cost_nanos)
                } else {
                    -1.0
                };
                (
                    r.bot_id,
                    r.name,
                    r.runtime,
                    r.day,
                    usd,
                    r.spend.input_tokens,
                    r.spend.output_tokens,
                )
            })
            .collect())
    }

    /// The object paths of all bots, oldest first.
    #[zbus(out_args("bots"))]
    async fn list_bots(&self) -> Result<Paths> {
        Ok(self.ctx.listed.of(self.ctx.supervisor.list()))
    }

    /// The object path of the bot whose id or name is `id_or_name` (a unique id prefix of at
    /// least 4 digits also works). Errors: NotFound (no such bot), InvalidArgument (a name or
    /// prefix that fits several bots).
    #[zbus(out_args("bot"))]
    async fn get_bot(&self, id_or_name: String) -> Result<OwnedObjectPath> {
        let bots = self.ctx.supervisor.list();
        if let Some(h) = bots.iter().find(|h| h.id == id_or_name) {
            return Ok(bot_path(&h.id));
        }
        let matches: Vec<_> = bots
            .iter()
            .filter(|h| {
                h.snapshot().record.name == id_or_name
                    || (id_or_name.len() >= 4 && h.id.starts_with(&id_or_name))
            })
            .collect();
        match matches.as_slice() {
            [] => Err(Error::NotFound(format!(
                "no bot has the id or name `{id_or_name}`; ListBots shows them all"
            ))),
            [one] => Ok(bot_path(&one.id)),
            many => Err(Error::InvalidArgument(format!(
                "`{id_or_name}` fits {} bots; use the bot id",
                many.len()
            ))),
        }
    }

    /// The API version: `1`.
    #[zbus(property(emits_changed_signal = "const"))]
    fn version(&self) -> String {
        super::API_VERSION.to_owned()
    }

    /// Why botvisord cannot write its database now (locked by another process, disk full,
    /// I/O); empty while writes succeed. While set, what the agents say is kept in order and
    /// written once the database can be written, calls that must write answer
    /// `StorageUnavailable`, and reads keep answering.
    #[zbus(property)]
    fn storage_error(&self) -> String {
        self.ctx
            .supervisor
            .store()
            .health()
            .failing()
            .unwrap_or_default()
    }

    /// How bots are contained: `cgroup` (each in its own cgroup of the subtree delegated to
    /// botvisord: `cgroup.kill` stops a bot whole and `populated 0` proves it gone) or
    /// `process-tree` (process groups, subreaper and identities; the journal says why at start).
    #[zbus(property(emits_changed_signal = "const"))]
    fn containment(&self) -> String {
        crate::process::cgroup::containment().name().to_owned()
    }

    /// The kernel's boot id (`/proc/sys/kernel/random/boot_id`, 36 characters with dashes;
    /// empty where the kernel has none). A client that sees it change knows the machine
    /// rebooted: no agent of before runs, and each bot resumes its conversation at its next
    /// message.
    #[zbus(property(emits_changed_signal = "const"), name = "BootId")]
    fn boot_id(&self) -> String {
        crate::systemd::life::boot_id().to_owned()
    }

    /// This botvisord's invocation: systemd's `INVOCATION_ID` when it runs as a unit, else one
    /// of its own (32 hexadecimal digits either way). It changes at every start of botvisord, a
    /// restart included; with `BootId` unchanged and `Survival` `keep …`, the agents and their
    /// turns went on through the restart. A dropped connection with the same invocation is the
    /// bus, not botvisord.
    #[zbus(property(emits_changed_signal = "const"))]
    fn invocation(&self) -> String {
        crate::systemd::life::invocation().to_owned()
    }

    /// Whether the agents outlive botvisord's own restarts: `keep (<unit>, <slice>)` (each
    /// agent in a scope of its own under the slice, its pipes in the unit's file descriptor
    /// store: a restart, an upgrade or a crash of botvisord leaves the turns running) or
    /// `off: <why>` (a restart ends the running turns, and the next botvisord answers each
    /// taken message once). Settled at start.
    #[zbus(property(emits_changed_signal = "const"))]
    fn survival(&self) -> String {
        crate::systemd::life::survival().describe()
    }

    /// The runtimes bots can be created with, for example `["claude", "codex"]`.
    #[zbus(property(emits_changed_signal = "const"))]
    fn runtimes(&self) -> Vec<String> {
        self.ctx.supervisor.runtime_names()
    }

    /// The permission modes each runtime accepts, by runtime name (the empty string, the CLI's
    /// own default, is accepted by all and not listed). Claude Code: the names of its permission
    /// modes; Codex: an approval policy, alone or as `policy:sandbox`.
    #[zbus(property(emits_changed_signal = "const"))]
    fn permission_modes(&self) -> std::collections::HashMap<String, Vec<String>> {
        self.ctx.supervisor.permission_modes()
    }
}
