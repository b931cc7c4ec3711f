//! `/org/botvisor/Botvisor1/<id>`: the `org.botvisor.Botvisor1.Bot` interface.

use std::sync::Arc;

use zbus::interface;
use zbus::message::Header;
use zbus::object_server::SignalEmitter;

use super::bounds;
use super::ctx::Ctx;
use super::error::{Error, Result};
use super::guard::{DescriptorCall, DescriptorMethods, Detached, Guarded, Promised, PromisedCall};
use super::options::{OptionReader, Options};
use crate::sizes::{MAX_PAGE_BYTES, MAX_PAGE_ITEMS, MAX_READ_BYTES, MAX_SEND_BYTES};
use crate::store;
use crate::supervisor::{Answer, BotError, BotHandle};

/// The caller's unique bus name (empty on a peer-to-peer connection).
fn client_of(hdr: &Header<'_>) -> String {
    hdr.sender().map(|s| s.to_string()).unwrap_or_default()
}

mod managed;
pub use managed::{EncodedBots, ManagedBots};

/// One bot object.
#[derive(Clone)]
pub struct BotObject {
    handle: BotHandle,
    ctx: Arc<Ctx>,
}

impl BotObject {
    /// The object for a bot's handle, behind the caller check (design rule 14): every method
    /// and every property read is the user's alone.
    pub fn guarded(handle: BotHandle, ctx: Arc<Ctx>) -> Guarded<BotObject> {
        Guarded::new(
            BotObject {
                handle,
                ctx: ctx.clone(),
            },
            ctx,
        )
    }

    /// `Send`'s work: the options and the size checked, the message queued; its turn id and
    /// the promise to keep before the answer. Errors: as `Send`'s.
    /// `answered`: told once the reply is sent (the actor takes the message after it).
    fn queue(
        &self,
        text: String,
        options: &Options,
        answered: Option<tokio::sync::oneshot::Receiver<()>>,
    ) -> Result<(String, store::Promise)> {
        OptionReader::new("Send", options).finish()?;
        if text.len() > MAX_SEND_BYTES {
            return Err(Error::InvalidArgument(crate::sizes::send_too_long(
                text.len(),
            )));
        }
        Ok(self.handle.send(text, answered)?)
    }

    /// The bot's view, read in place: a property reads the field it serves, with no copy of the
    /// rest (`GetManagedObjects` reads every property of every bot).
    fn view(&self) -> std::sync::RwLockReadGuard<'_, crate::supervisor::BotView> {
        self.handle.view_guard()
    }

    /// The calling client's lease (`Hold`, `HoldWith`), with a warm start or not.
    fn lease(&self, hdr: &Header<'_>, warm: bool) -> Result<()> {
        let client = client_of(hdr);
        self.handle.hold(&client, warm)?;
        // The client may have left while this call waited to be checked, and its departure been
        // handled before the lease was taken: the bus says whether it is still there. One that
        // leaves after this answer is handled after the lease (found by a fresh user: leases left
        // by a storm of clients that held and left at once). Asked from a task of its own: this
        // method runs in the object server's one task, and a round trip per Hold made every
        // other call wait behind a storm of them.
        if !client.is_empty() {
            let (lookup, handle) = (self.ctx.caller.lookup().clone(), self.handle.clone());
            tokio::spawn(async move {
                if !lookup.on_bus(&client).await {
                    handle.client_gone(&client);
                }
            });
        }
        Ok(())
    }

    /// AccessDenied when the client `sender` is one of this bot's own processes (issue 29): its
    /// process carries the bot's marker (`process::tree::BOT_MARKER`) or descends from the
    /// bot's running agent. A bot's agent that answered its own permission requests would have
    /// granted itself whatever it asked.
    async fn refuse_own_answer(&self, sender: &str) -> Result<()> {
        let (pid, marker) = super::caller::caller_process(self.ctx.caller.lookup(), sender).await;
        let agent = self.view().process_id;
        let own = marker.as_deref() == Some(self.handle.id.as_str())
            || crate::process::tree::descends_from(pid, agent);
        if own {
            return Err(Error::AccessDenied(format!(
                "a bot cannot answer its own permission requests: the caller (process {pid}) is \
                 one of bot {}'s processes; a person or another program answers them",
                self.handle.id
            )));
        }
        Ok(())
    }

    /// `OpenChatItem`'s work: a sealed copy of chat item `seq`'s payload.
    async fn chat_item_fd(&self, seq: u64, options: Options) -> Result<zbus::OwnedFd> {
        OptionReader::new("OpenChatItem", &options).finish()?;
        self.handle.check_alive()?;
        // A big item takes a while to copy: off the runtime's worker threads.
        let (store, id) = (self.ctx.supervisor.store().clone(), self.handle.id.clone());
        let fd = tokio::task::spawn_blocking(move || super::item_fd::sealed_copy(&store, &id, seq))
            .await
            .map_err(|e| Error::Failed(format!("the copy of chat item {seq} failed: {e}")))?
            .map_err(|e| match e {
                super::item_fd::FdError::NoItem => self.no_item(seq),
                other => Error::Failed(other.to_string()),
            })?;
        Ok(zbus::OwnedFd::from(fd))
    }

    fn no_item(&self, seq: u64) -> Error {
        Error::NotFound(format!(
            "bot {} has no chat item {seq} (GetChat lists the items)",
            self.handle.id
        ))
    }
}

/// `DeleteWith`'s work (its doc is the method's). Run in a task of its own
/// ([`DescriptorMethods::detached_call`]): it runs git (`status`, `log`) before it answers.
async fn delete_with(
    ctx: &Arc<Ctx>,
    handle: &BotHandle,
    options: Options,
    hdr: &Header<'_>,
) -> Result<()> {
    let mut r = OptionReader::new("DeleteWith", &options);
    let remove = r.boolean("remove_worktree")?.unwrap_or(false);
    let force = r.boolean("force")?.unwrap_or(false);
    r.finish()?;
    let removal = if remove {
        Some(ctx.supervisor.worktree_removal(&handle.id, force).await?)
    } else {
        None
    };
    ctx.replies.expect(hdr, &handle.id);
    ctx.supervisor.delete_with(&handle.id, removal)?;
    Ok(())
}

impl DescriptorMethods for BotObject {
    fn promised_call(
        &self,
        msg: &zbus::Message,
        name: &zbus::names::MemberName<'_>,
    ) -> Option<PromisedCall<'_>> {
        if name.as_str() != "Send" {
            return None;
        }
        let msg = msg.clone();
        Some(Box::new(move || {
            let (text, options): (String, Options) = msg.body().deserialize().map_err(|e| {
                Error::InvalidArgument(format!("Send takes (text s, options a{{sv}}): {e}"))
            })?;
            let (sent, answered) = tokio::sync::oneshot::channel();
            let (answer, promise) = self.queue(text, &options, Some(answered))?;
            let store = self.ctx.supervisor.store().clone();
            Ok(Promised {
                answer,
                kept: Box::pin(async move { store.keep(promise).await }),
                sent,
            })
        }))
    }

    fn detached_call(
        &self,
        conn: &zbus::Connection,
        msg: &zbus::Message,
        name: &zbus::names::MemberName<'_>,
    ) -> Option<Detached> {
        if name.as_str() != "DeleteWith" {
            return None;
        }
        let (ctx, handle) = (self.ctx.clone(), self.handle.clone());
        let (conn, msg) = (conn.clone(), msg.clone());
        Some(Box::pin(async move {
            let hdr = msg.header();
            let answer = match msg.body().deserialize::<Options>() {
                Ok(options) => delete_with(&ctx, &handle, options, &hdr).await,
                Err(e) => Err(Error::InvalidArgument(format!("DeleteWith: {e}"))),
            };
            if answer.is_ok() {
                super::schedules::after_bot_deleted(ctx.clone(), conn.clone());
            }
            super::manager::answer_with(&conn, &hdr, answer).await;
        }))
    }

    fn descriptor_call<'c>(
        &'c self,
        msg: &'c zbus::Message,
        name: &zbus::names::MemberName<'_>,
    ) -> Option<DescriptorCall<'c>> {
        if name.as_str() != "OpenChatItem" {
            return None;
        }
        Some(Box::pin(async move {
            let (seq, options): (u64, Options) = msg.body().deserialize().map_err(|e| {
                Error::InvalidArgument(format!("OpenChatItem takes (seq t, options a{{sv}}): {e}"))
            })?;
            self.chat_item_fd(seq, options).await
        }))
    }
}

/// A supervised agent: its conversation, its process and its settings.
#[interface(name = "org.botvisor.Botvisor1.Bot", spawn = false)]
impl BotObject {
    /// Queues a message and returns its turn id at once; the turn's end is the `TurnFinished`
    /// signal. Starts the agent when it is not running (resuming its conversation when the
    /// transcript exists). No options yet. Errors: InvalidArgument (empty text, or longer than
    /// 1 MiB, 1048576 bytes of UTF-8), Busy (state `failed`; or no agent runs and the working
    /// directory is gone), RuntimeUnavailable, StorageUnavailable; an error queues nothing.
    ///
    /// The reply comes once the message is on record durably (a power loss cannot take it back,
    /// issue 47); the `Send`s that come together share that wait (issue 50). The guard answers
    /// it that way ([`DescriptorMethods::promised_call`]); this body is the same for a caller
    /// that reaches the interface unguarded.
    #[zbus(out_args("turn_id"))]
    async fn send(&self, text: String, options: Options) -> Result<String> {
        let (turn_id, promise) = self.queue(text, &options, None)?;
        self.ctx.supervisor.store().keep(promise).await;
        Ok(turn_id)
    }

    /// Stops the agent gently (close stdin, SIGTERM to its process group, grace period,
    /// SIGKILL). Returns at once; `State` goes `stopping`, then `stopped`. A turn that had begun
    /// ends `interrupted`; messages not yet taken stay queued until the next `Send`.
    async fn stop(&self) -> Result<()> {
        Ok(self.handle.stop()?)
    }

    /// Asks for a permission mode; returns at once. `PermissionMode` says what is in force: it
    /// changes once the running agent took the mode (control protocol; a `system` chat item,
    /// reason `setting_applied`), or at once when no agent runs (its next start takes it). A
    /// refusal or no answer changes nothing: an `error` chat item (reason `setting_refused` or
    /// `control_timeout`) and `LastError` say why. Errors: InvalidArgument (a mode the runtime
    /// does not know), StorageUnavailable.
    async fn set_permission_mode(&self, mode: String) -> Result<()> {
        Ok(self.handle.set_permission_mode(mode)?)
    }

    /// Sets the bot's extra environment for its CLI (as `CreateBot`'s `env`), recorded before
    /// this returns, for example to rotate an API key or token without deleting the bot. By
    /// default `env` replaces it whole (`{}` removes it); options: `merge` (b): the variables of
    /// `env` are added or replace those of the same name and the others are kept; `unset` (as):
    /// these names are removed (implies `merge`; `merge` false with `unset` is refused). Taken
    /// at the next launch: a bot waiting for its login (`login_required`) goes on at once, a
    /// running agent with no turn in flight is restarted on the same conversation now, and one
    /// with a turn in flight once that turn ends (an interrupt included); the waiting messages
    /// are carried on, never ended (issue 46). A plan's limit or the budget that holds the bot
    /// holds on. Errors: InvalidArgument (a name empty or holding `=` or NUL, a value holding
    /// NUL, a `NAME=VALUE` over 131071 bytes, more than 1024 variables or 524288 bytes in all
    /// in the environment that results: what Linux would refuse to start a program with; an
    /// unknown option), NotFound, StorageUnavailable; each changes nothing.
    async fn set_environment(
        &self,
        env: crate::dbus::options::Dict<String>,
        options: crate::dbus::options::Options,
    ) -> Result<()> {
        env.refuse_repeated("SetEnvironment: variable(s) of `env`")?;
        let env: std::collections::BTreeMap<String, String> = env.into_map().into_iter().collect();
        let mut r = crate::dbus::options::OptionReader::new("SetEnvironment", &options);
        let merge = r.boolean("merge")?;
        let unset = r.strings("unset")?.unwrap_or_default();
        r.finish()?;
        if merge == Some(false) && !unset.is_empty() {
            return Err(crate::dbus::error::Error::InvalidArgument(
                "SetEnvironment: option `unset` removes variables from the environment in force, \
                 so it cannot go with `merge` false (leave `merge` out, or give the whole \
                 environment without `unset`)"
                    .into(),
            ));
        }
        crate::dbus::manager::check_env("SetEnvironment: `env`", &env)?;
        for name in &unset {
            if name.is_empty() || name.contains(['=', '\0']) {
                return Err(crate::dbus::error::Error::InvalidArgument(format!(
                    "SetEnvironment: option `unset`: {:?} is not a variable name (empty, or \
                     holding `=` or NUL)",
                    crate::text::escape(name, false)
                )));
            }
        }
        let env = if merge == Some(true) || !unset.is_empty() {
            let mut now = self.handle.snapshot().record.env;
            now.extend(env);
            for name in &unset {
                now.remove(name);
            }
            crate::dbus::manager::check_env("SetEnvironment: the environment it makes", &now)?;
            now
        } else {
            env
        };
        Ok(self.handle.set_environment(env)?)
    }

    /// Where the bot's agent takes its login from, judged now from the environment it launches
    /// with (the bot's own variables over botvisord's) and the files that exist, by variable
    /// names only (a value is never read nor said): `source` `environment` (a variable of the
    /// bot's own `env`), `botvisord` (one of botvisord's environment, which the agent inherits),
    /// `file` (the CLI's credentials file: `claude /login`, `codex login`), `provider` (Codex:
    /// a model provider that asks for no key) or `none`; with `variable`, `file`, `provider` or,
    /// for `none`, `variables` (comma-separated) and `file` (what was looked for); and `words`,
    /// for people. A method, not a property: it reads files, so it is asked for, not sent with
    /// every `GetManagedObjects`. No options are defined yet. Errors: InvalidArgument (an
    /// unknown option), NotFound.
    #[zbus(out_args("login"))]
    async fn get_login(
        &self,
        options: Options,
    ) -> Result<std::collections::BTreeMap<String, String>> {
        OptionReader::new("GetLogin", &options).finish()?;
        self.handle.check_alive()?;
        Ok(self.handle.login().to_map())
    }

    /// Renames the bot (`Name`), with a name checked as `CreateBot` checks one: at most 200
    /// characters, unique among the bots as a terminal shows them, without control, invisible or
    /// text-direction characters, blank ends, or 4 to 32 hexadecimal digits. Recorded before
    /// `PropertiesChanged` says it; the same name again changes nothing. No options are defined
    /// yet. Errors: InvalidArgument (why the name is refused; an unknown option), NotFound,
    /// StorageUnavailable; each changes nothing.
    async fn set_name(&self, name: String, options: Options) -> Result<()> {
        OptionReader::new("SetName", &options).finish()?;
        Ok(self.ctx.supervisor.rename(&self.handle.id, &name)?)
    }

    /// Sets the bot's own budget in US dollars (`BudgetUSD`), 0 for no budget whatever config
    /// `budget_usd` says. A bot held by its budget (`LimitKind` `budget`) goes on at once when
    /// its cost (`CostUSD`) is under the new one; a bot whose cost is already at the new one holds
    /// at once when no turn is in flight (else when that turn ends), and a bot a plan's limit or
    /// its login holds, when that hold ends. Errors: InvalidArgument (negative, not finite,
    /// over 1e9), StorageUnavailable; either changes nothing.
    async fn set_budget(&self, budget_usd: f64) -> Result<()> {
        Ok(self.handle.set_budget(budget_usd)?)
    }

    /// Asks for a model, as `SetPermissionMode` asks for a mode (`Model` changes once it is in
    /// force: from the agent's next request). Empty means the CLI's default (Claude Code: from
    /// the next start). Errors: InvalidArgument, StorageUnavailable.
    async fn set_model(&self, model: String) -> Result<()> {
        Ok(self.handle.set_model(model)?)
    }

    /// Stops the agent and starts it again. Options: `fresh` (b, default false): forget the
    /// conversation durably first, so that neither this start nor any later one resumes it;
    /// `fork` (b, default false): continue in a new conversation copied from it, leaving it as
    /// it is (what goes on while another process holds it, `State` `held_elsewhere`; Claude
    /// Code's fork-session option, Codex's `thread/fork`); otherwise the conversation is resumed
    /// when its transcript exists. Clears state `failed` and `LastError`. Returns at once; `State` and `ProcessId` show the progress.
    /// Errors: Busy (the working directory is gone), RuntimeUnavailable, InvalidArgument (`fresh`
    /// and `fork` together), NotSupported (`fork` on a runtime that cannot fork).
    async fn restart(&self, options: Options) -> Result<()> {
        use crate::supervisor::core::RestartMode;
        let mut r = OptionReader::new("Restart", &options);
        let fresh = r.boolean("fresh")?.unwrap_or(false);
        let fork = r.boolean("fork")?.unwrap_or(false);
        r.finish()?;
        let mode = match (fresh, fork) {
            (true, true) => {
                return Err(Error::InvalidArgument(
                    "Restart: `fresh` starts a new conversation and `fork` copies the old one; \
                     give one of them"
                        .into(),
                ));
            }
            (true, false) => RestartMode::Fresh,
            (false, true) => RestartMode::Fork,
            (false, false) => RestartMode::Resume,
        };
        Ok(self.handle.restart(mode)?)
    }

    /// Deletes the bot with its chat history. Returns at once, once the deletion is recorded (a
    /// daemon that crashes before it is done finishes it at its next start): the bot leaves
    /// `ListBots`, its agent is stopped gently, then the object goes away (`InterfacesRemoved`).
    /// Errors: StorageUnavailable (nothing changed).
    async fn delete(
        &self,
        #[zbus(header)] hdr: Header<'_>,
        #[zbus(connection)] conn: &zbus::Connection,
    ) -> Result<()> {
        // Marked first: the actor may remove the object the moment it is told.
        self.ctx.replies.expect(&hdr, &self.handle.id);
        self.ctx.supervisor.delete(&self.handle.id)?;
        super::schedules::after_bot_deleted(self.ctx.clone(), conn.clone());
        Ok(())
    }

    /// `Delete` with options: `remove_worktree` (b, default false) also removes the bot's git
    /// worktree (`Worktree`) once its agent is stopped, and its branch when every commit of it
    /// is on another branch; `force` (b, default false) removes the worktree whatever it holds
    /// (an unmerged branch is kept). Without `force` a worktree with anything uncommitted
    /// (untracked files included) or a commit on no other branch is refused: Busy says what,
    /// in git's lines, and nothing changes. A worktree removed by hand is pruned. Errors: Busy,
    /// InvalidArgument (`remove_worktree` for a bot with no worktree, a wrong option; git's
    /// words when git fails), StorageUnavailable; each changes nothing.
    async fn delete_with(&self, options: Options, #[zbus(header)] hdr: Header<'_>) -> Result<()> {
        delete_with(&self.ctx, &self.handle, options, &hdr).await
    }

    /// Takes a lease on the bot for the calling client: while any client holds it, the bot is
    /// never stopped for idleness and restarts after a crash. The lease ends with `Release` or
    /// when the client leaves the bus. Holding twice is one lease. A stopped agent is started at
    /// once when config `warm_start` is on (the default; `HoldWith` chooses per call): a client
    /// that opens a bot's chat holds it, and the first message is then answered without waiting
    /// for the CLI's start. Nothing starts while the bot is parked by `Stop`, failed, limited, in
    /// a crash backoff or waiting for another holder; a start no message reaches leaves no
    /// record (no `SessionId`). Errors: NotFound (the bot was deleted).
    async fn hold(&self, #[zbus(header)] hdr: Header<'_>) -> Result<()> {
        let warm = self.ctx.supervisor.config().warm_start;
        self.lease(&hdr, warm)
    }

    /// `Hold` with options: `warm_start` (b, default config `warm_start`): whether a stopped
    /// agent starts now. Errors: InvalidArgument (an unknown option or a wrong type; nothing
    /// changes), NotFound.
    async fn hold_with(&self, options: Options, #[zbus(header)] hdr: Header<'_>) -> Result<()> {
        let mut r = OptionReader::new("HoldWith", &options);
        let warm = r.boolean("warm_start")?;
        r.finish()?;
        let warm = warm.unwrap_or(self.ctx.supervisor.config().warm_start);
        self.lease(&hdr, warm)
    }

    /// Ends the calling client's lease. Errors: NotFound (it holds none).
    async fn release(&self, #[zbus(header)] hdr: Header<'_>) -> Result<()> {
        Ok(self.handle.release(&client_of(&hdr))?)
    }

    /// Answers an open permission request. `behavior`: `allow` or `deny`. Options:
    /// `updated_input` (s, a JSON object: the input the tool runs with, for `allow`), `message`
    /// (s, what the model is told, for `deny`), `scope` (s, for `allow`: `once`, the default,
    /// this request only; `session`, this and the requests the CLI takes as the same while its
    /// process runs; `always`, the same kept beyond it as the CLI offers; `program`, every use of
    /// the command's program, kept beyond it (Codex); the request's `permission_request` chat
    /// item lists its `scopes`, and its `reach` says what each lets run), `client` (s, a name
    /// for people of the
    /// answering program; default: its process name, where the bus can tell). The first answer
    /// wins; it is recorded in the chat with its scope and the answering client's bus name and
    /// name. Errors: NotFound (unknown or already answered request), InvalidArgument (a scope
    /// the request does not offer, a wrong option), AccessDenied (the caller is one of this
    /// bot's own processes: it carries the bot's marker or descends from its agent; a bot
    /// never answers its own permission requests).
    async fn respond_permission(
        &self,
        request_id: String,
        behavior: String,
        options: Options,
        #[zbus(header)] hdr: Header<'_>,
    ) -> Result<()> {
        let mut r = OptionReader::new("RespondPermission", &options);
        let updated_input = r.string("updated_input")?;
        let message = r.string("message")?;
        let named = r.string("client")?;
        let scope = r.string("scope")?;
        r.finish()?;
        // Wrong arguments are refused before anything is looked up.
        let answer = permission_answer(&behavior, message, updated_input, scope.as_deref())?;
        let client = client_of(&hdr);
        self.refuse_own_answer(&client).await?;
        let name = match named {
            Some(n) => super::caller::client_label(&n),
            None => super::caller::process_name(self.ctx.caller.lookup(), &client).await,
        };
        Ok(self
            .handle
            .respond_permission(&request_id, answer, &client, &name)?)
    }

    /// Ends the running turn through the CLI's control protocol; the turn ends with outcome
    /// `interrupted` and queued messages stay queued. What the turn started and the agent left
    /// running is stopped by identity (a `system` chat item, reason `interrupted_processes`,
    /// names it). Returns false (and does nothing) when no turn runs.
    #[zbus(out_args("interrupted"))]
    async fn interrupt(&self) -> Result<bool> {
        Ok(self.handle.interrupt()?)
    }

    /// Chat items with `seq > after_seq`, oldest first, as `(seq, kind, RFC 3339 time, JSON
    /// payload)`: at most `limit` (0: up to 10,000) and at most 4 MiB in all, but always at least
    /// one item when there is one, so paging with the last seq received always progresses; an
    /// empty array means there is nothing after `after_seq`. A payload over 1 MiB is served as
    /// a preview (`{"truncated": true, "size", "preview_of", "preview", …}`); read it whole with
    /// `ReadChatItem` or `OpenChatItem`.
    #[zbus(out_args("items"))]
    async fn get_chat(
        &self,
        after_seq: u64,
        limit: u32,
    ) -> Result<Vec<(u64, String, String, String)>> {
        self.handle.check_alive()?;
        let limit = if limit == 0 {
            MAX_PAGE_ITEMS
        } else {
            limit.min(MAX_PAGE_ITEMS)
        };
        let items = self
            .ctx
            .supervisor
            .store()
            .read(|c| store::chat::after(c, &self.handle.id, after_seq, limit, MAX_PAGE_BYTES))
            .map_err(|e| Error::Failed(e.to_string()))?;
        Ok(items
            .into_iter()
            .map(|i| (i.seq, i.kind, i.time, i.payload))
            .collect())
    }

    /// Bytes `offset .. offset + length` of chat item `seq`'s whole payload (its JSON text,
    /// UTF-8; a range may end inside a character), with the whole payload's size in bytes.
    /// `length` 0, or more than 4 MiB, means 4 MiB; fewer bytes come at the end, and none from
    /// `size` on. Works for every item, previewed or not. No options yet. Errors: NotFound (no
    /// item `seq`), InvalidArgument.
    #[zbus(out_args("data", "size"))]
    async fn read_chat_item(
        &self,
        seq: u64,
        offset: u64,
        length: u32,
        options: Options,
    ) -> Result<(serde_bytes::ByteBuf, u64)> {
        OptionReader::new("ReadChatItem", &options).finish()?;
        self.handle.check_alive()?;
        let length = if length == 0 {
            MAX_READ_BYTES
        } else {
            length.min(MAX_READ_BYTES)
        };
        let (bytes, size) = self
            .ctx
            .supervisor
            .store()
            .read(|c| store::chat::read(c, &self.handle.id, seq, offset, length as usize))
            .map_err(|e| Error::Failed(e.to_string()))?
            .ok_or_else(|| self.no_item(seq))?;
        Ok((serde_bytes::ByteBuf::from(bytes), size))
    }

    /// A read-only file descriptor of chat item `seq`'s whole payload (its JSON text, UTF-8):
    /// a sealed memory file, positioned at its start; its size is the payload's. The way to read
    /// a big item in one go on the same machine (`ReadChatItem` reads it in ranges, also where
    /// no descriptor can pass). No options yet. Errors: NotFound (no item `seq`),
    /// InvalidArgument, NotSupported (the caller's connection cannot receive descriptors: use
    /// `ReadChatItem`), Failed (no memory file on this system: use `ReadChatItem`).
    #[zbus(out_args("fd"))]
    async fn open_chat_item(&self, seq: u64, options: Options) -> Result<zbus::OwnedFd> {
        // Reached only by botvisord's own calls: the guard answers the bus's
        // (`DescriptorMethods`).
        self.chat_item_fd(seq, options).await
    }

    /// A chat item was committed: `(seq, kind, JSON payload)`; a payload over 1 MiB is a preview,
    /// as in `GetChat`.
    #[zbus(signal)]
    pub async fn chat_item_added(
        emitter: &SignalEmitter<'_>,
        seq: u64,
        kind: &str,
        payload: &str,
    ) -> zbus::Result<()>;

    /// A turn ended: `(turn_id, outcome)`, outcome one of `success`, `error`, `interrupted`,
    /// `crashed`, `taken_not_answered`; sent after the turn's `turn_finished` chat item.
    #[zbus(signal)]
    pub async fn turn_finished(
        emitter: &SignalEmitter<'_>,
        turn_id: &str,
        outcome: &str,
    ) -> zbus::Result<()>;

    /// The agent asks whether a tool may run: `(request_id, tool, input_json)`. Answer with
    /// `RespondPermission`. An input over 1 MiB is a preview whose `seq` is the
    /// `permission_request` chat item holding it whole.
    #[zbus(signal)]
    pub async fn permission_requested(
        emitter: &SignalEmitter<'_>,
        request_id: &str,
        tool: &str,
        input_json: &str,
    ) -> zbus::Result<()>;

    /// Assistant text as it streams, at most one signal per bot every 50 ms: `(turn_id, text)`,
    /// the text written since the previous signal (more than 1 MiB of it comes as several
    /// signals in a row, each at most 1 MiB). Not stored; the finished message is a
    /// `ChatItemAdded`.
    #[zbus(signal)]
    pub async fn text_delta(
        emitter: &SignalEmitter<'_>,
        turn_id: &str,
        text: &str,
    ) -> zbus::Result<()>;

    /// The bot id (32 hex digits).
    #[zbus(property(emits_changed_signal = "const"))]
    fn id(&self) -> String {
        self.handle.id.clone()
    }

    /// Who created the bot (issue 29): the name the creating client gave (`CreateBot` option
    /// `created_by`, for example an MCP client's name, `claude-code`); empty when none was given.
    /// `CreatedByBot` says whether a bot's agent made the call.
    #[zbus(property(emits_changed_signal = "const"))]
    fn created_by(&self) -> String {
        self.view().record.created_by.client.clone()
    }

    /// The id of the bot whose agent (or a process below it) created this bot (issue 29), read
    /// by botvisord from the calling process (its marker, or its descent from that bot's agent);
    /// empty when a program outside every bot created it.
    #[zbus(property(emits_changed_signal = "const"))]
    fn created_by_bot(&self) -> String {
        self.view().record.created_by.bot.clone()
    }

    /// A name for people.
    #[zbus(property)]
    fn name(&self) -> String {
        self.view().record.name.clone()
    }

    /// The canonical working directory.
    #[zbus(property(emits_changed_signal = "const"))]
    fn cwd(&self) -> String {
        self.view().record.cwd.clone()
    }

    /// The git worktree botvisor made for the bot (`CreateBot` option `worktree`), which is
    /// its `Cwd` for the bot's whole life; empty for a bot in a folder of the user's.
    #[zbus(property(emits_changed_signal = "const"))]
    fn worktree(&self) -> String {
        let v = self.view();
        if v.record.worktree.is_some() {
            v.record.cwd.clone()
        } else {
            String::new()
        }
    }

    /// The branch checked out in the bot's worktree (`Worktree`); empty without one.
    #[zbus(property(emits_changed_signal = "const"))]
    fn branch(&self) -> String {
        self.view()
            .record
            .worktree
            .as_ref()
            .map(|w| w.branch.clone())
            .unwrap_or_default()
    }

    /// The full hash of the commit the bot's branch started at; empty without a worktree.
    #[zbus(property(emits_changed_signal = "const"))]
    fn base_commit(&self) -> String {
        self.view()
            .record
            .worktree
            .as_ref()
            .map(|w| w.base_commit.clone())
            .unwrap_or_default()
    }

    /// The runtime, for example `claude`.
    #[zbus(property(emits_changed_signal = "const"))]
    fn runtime(&self) -> String {
        self.view().record.runtime.clone()
    }

    /// The model; empty for the CLI's default.
    #[zbus(property)]
    fn model(&self) -> String {
        self.view().record.model.clone()
    }

    /// The permission mode; empty for the CLI's default.
    #[zbus(property)]
    fn permission_mode(&self) -> String {
        self.view().record.permission_mode.clone()
    }

    /// `stopped`, `idle`, `busy`, `stopping`, `failed`, `limited` (a plan's usage limit or the
    /// budget holds: `LimitKind`, `LimitResetsAt`), `login_required` (the CLI's login expired
    /// or was refused: `LastError` gives its words; messages wait until its credentials file
    /// changes, `SetEnvironment` or `Restart`) or `held_elsewhere` (another process, such as the
    /// user's terminal, has the conversation open: `HeldBy` names it; messages wait until it
    /// exits, or `Restart` with `fork`).
    #[zbus(property)]
    fn state(&self) -> String {
        self.view().state.as_str().to_owned()
    }

    /// The recorded conversation (set once a turn began in it); empty when none.
    #[zbus(property)]
    fn session_id(&self) -> String {
        bounds::bus_text(self.view().record.session_id.as_deref().unwrap_or_default()).into_owned()
    }

    /// The agent's root process id; 0 when not running.
    #[zbus(property)]
    fn process_id(&self) -> u32 {
        self.view().process_id
    }

    /// The last error a person should know of; empty when none. At most 16 KiB (a longer one
    /// is cut and ends with `…`).
    #[zbus(property)]
    fn last_error(&self) -> String {
        let v = self.view();
        bounds::last_error(v.storage_error.as_deref().unwrap_or(&v.record.last_error))
    }

    /// Messages sent and not yet written to the agent; the one written is the turn in flight
    /// (`State` `busy`), even before the CLI shows it took it.
    #[zbus(property)]
    fn queued_messages(&self) -> u32 {
        self.view().queued
    }

    /// Open permission requests: `(request_id, tool, input_json)`. An input over 16 KiB is
    /// served as a preview whose `seq` is the `permission_request` chat item holding it whole.
    #[zbus(property)]
    fn pending_permissions(&self) -> Vec<(String, String, String)> {
        // Copied out first: the store is not read with the view held (the actor changes the
        // view while it holds the store).
        let open = self.view().pending.clone();
        bounds::pending(self.ctx.supervisor.store(), &self.handle.id, open)
    }

    /// The assistant text streamed so far in the message being written (empty between
    /// messages), at most its last 16 KiB. A client joining mid-message reads it, then follows
    /// `TextDelta`. Changes are not signalled (`TextDelta` is the change).
    #[zbus(property(emits_changed_signal = "false"))]
    fn partial_text(&self) -> String {
        bounds::partial_text(&self.view().partial_text)
    }

    /// How many clients hold the bot (`Hold`).
    #[zbus(property)]
    fn holders(&self) -> u32 {
        self.view().holders
    }

    /// The verdict of the agent's last stop: `clean` (the agent and every known descendant are
    /// proven gone), `root-exited` (survivors are named in `LastError`),
    /// `root-exited-unverified`, `root-alive` (the stop failed); empty before the first stop.
    #[zbus(property)]
    fn stop_verdict(&self) -> String {
        self.view().stop_verdict.clone()
    }

    /// How the last stop was proven: `cgroup` (the bot's cgroup was killed whole and read empty,
    /// `populated 0`), `process-tree` (the agent was reaped and each known descendant checked by
    /// identity) or `best-effort` (no subreaper on this system); empty before the first stop
    /// since botvisord started, and after a stop whose root did not exit.
    #[zbus(property)]
    fn stop_proof(&self) -> String {
        self.view().stop_proof.clone()
    }

    /// Memory the agent and its descendants use, in bytes (`memory.current` of the bot's cgroup
    /// with the memory controller, else the sum of their resident sets). Sampled every
    /// `usage_interval_s` while the bot is busy or runs background tasks; `2^64-1` (as systemd's
    /// `[not set]`) while no agent runs.
    #[zbus(property, name = "MemoryCurrent")]
    fn memory_current(&self) -> u64 {
        self.view().usage.memory_current
    }

    /// CPU time the agent and its descendants used since the agent started, in nanoseconds
    /// (`cpu.stat` `usage_usec` of the bot's cgroup, else the sum over its processes, including
    /// those that ended). Sampled as `MemoryCurrent`; `2^64-1` while no agent runs.
    #[zbus(property, name = "CPUUsageNSec")]
    fn cpu_usage_nsec(&self) -> u64 {
        self.view().usage.cpu_usage_nsec
    }

    /// The memory limit of the agent and its descendants in bytes (`memory.max` of the bot's
    /// cgroup, written before each start): the bot's own `memory_max`, else config
    /// `memory_max`; `2^64-1` (as systemd's `infinity`) when none, and wherever the memory
    /// controller is not delegated to botvisord (a limit is not applied there).
    #[zbus(property(emits_changed_signal = "const"), name = "MemoryMax")]
    fn memory_max(&self) -> u64 {
        let own = self.view().record.memory_max;
        crate::supervisor::memory_max::in_force(
            own,
            self.ctx.supervisor.config().memory_max,
            crate::process::cgroup::containment(),
        )
        .unwrap_or(crate::supervisor::memory_max::NO_LIMIT)
    }

    /// Tasks (threads) of the agent and its descendants (`pids.current` of the bot's cgroup
    /// with the pids controller, else counted). Sampled as `MemoryCurrent`; `2^64-1` while no
    /// agent runs.
    #[zbus(property, name = "TasksCurrent")]
    fn tasks_current(&self) -> u64 {
        self.view().usage.tasks_current
    }

    /// The process outside botvisor that holds the bot's conversation while `State` is
    /// `held_elsewhere`: `pid N: what: command` (what: "Claude Code in a terminal (tmux …)",
    /// "Claude Code run by another program", "Claude Code's background agent"; the command line
    /// cut to 300 characters); empty otherwise. The bot looks every second and goes on when it
    /// exits; `Restart` with `fork` continues in a copy of the conversation instead.
    #[zbus(property)]
    fn held_by(&self) -> String {
        bounds::bus_text(&self.view().held_by).into_owned()
    }

    /// The window of the plan's usage limit the bot waits for (`five_hour`, `seven_day`, …; as
    /// the CLI names it, empty when it does not), or empty when no limit holds. While one holds,
    /// `State` is `limited` (unless a turn runs or the agent is being stopped) and waiting
    /// messages go by themselves at the reset.
    #[zbus(property)]
    fn limit_kind(&self) -> String {
        bounds::bus_text(self.view().limit_kind()).into_owned()
    }

    /// When the waiting messages go, in Unix seconds: the usage limit's reset as the CLI told it,
    /// or, when it told none, one already past or more than 8 days ahead, when botvisord tries
    /// again (`limit_retry_s`, doubled each time the limit is hit again); 0 when no limit holds.
    #[zbus(property)]
    fn limit_resets_at(&self) -> u64 {
        self.view().record.limit.as_ref().map_or(0, |(_, at)| *at)
    }

    /// Where the plan's usage limit stands, as the CLI last told it: `(state, kind, utilization,
    /// resets_at)`, `state` `allowed`, `warning` (the window is nearly used) or `reached`, `kind`
    /// the window that decides (`five_hour`, …), `utilization` the share of it used (0 to 1; -1
    /// not told), `resets_at` Unix seconds (0 not told). `("", "", -1, 0)` until the CLI tells
    /// (Claude Code: with each answer of a subscription; Codex: `account/rateLimits/updated`);
    /// not kept across daemon restarts. A warning also comes as a `system` item (`reason`
    /// `limit_warning`), once per window.
    #[zbus(property)]
    fn plan_limit(&self) -> (String, String, f64, u64) {
        let (state, kind, used, at) = self.view().plan_limit_value();
        (state, bounds::bus_text(&kind).into_owned(), used, at)
    }

    /// What the bot cost since its creation, in US dollars: the sum of its turns' costs as the
    /// CLI computed them (Claude Code's `total_cost_usd`, less what the conversation had cost
    /// before); always 0 for Codex, which tells no cost.
    #[zbus(property, name = "CostUSD")]
    fn cost_usd(&self) -> f64 {
        crate::cost::usd(self.view().record.spend.cost_nanos)
    }

    /// Tokens the model read for the bot since its creation (input, cache writes and cache
    /// reads), as the CLI told them.
    #[zbus(property)]
    fn input_tokens(&self) -> u64 {
        self.view().record.spend.input_tokens
    }

    /// Tokens the model wrote for the bot since its creation, as the CLI told them.
    #[zbus(property)]
    fn output_tokens(&self) -> u64 {
        self.view().record.spend.output_tokens
    }

    /// The budget in force, in US dollars: the bot's own (`CreateBot` option `budget_usd`,
    /// `SetBudget`), else config `budget_usd`; 0 for none. When `CostUSD` reaches it after a
    /// turn, the bot is `limited` with `LimitKind` `budget` until the budget is raised or
    /// `Restart`; at 80 % a `system` item (`reason` `budget_warning`) says so.
    #[zbus(property, name = "BudgetUSD")]
    fn budget_usd(&self) -> f64 {
        crate::cost::usd(self.view().budget().unwrap_or(0))
    }
}

/// `RespondPermission`'s `behavior` with its options `message`, `updated_input` and `scope`,
/// read as an [`Answer`]. Errors: InvalidArgument naming what is wrong (`updated_input` not a
/// JSON object, a behavior other than `allow` or `deny`, an unknown scope, an option that goes
/// with the other behavior).
fn permission_answer(
    behavior: &str,
    message: Option<String>,
    updated_input: Option<String>,
    scope: Option<&str>,
) -> std::result::Result<Answer, BotError> {
    use crate::runtime::Scope;
    let updated = match &updated_input {
        None => None,
        Some(text) => match serde_json::from_str::<serde_json::Value>(text) {
            Ok(v) if v.is_object() => Some(v),
            _ => {
                return Err(BotError::InvalidArgument(
                    "option `updated_input` must be a JSON object (the tool's input)".into(),
                ));
            }
        },
    };
    let scope = match scope {
        None => Scope::Once,
        Some(text) => Scope::parse(text).ok_or_else(|| {
            BotError::InvalidArgument(format!(
                "option `scope` must be `once`, `session`, `always` or `program`, got `{text}`"
            ))
        })?,
    };
    match behavior {
        "allow" if message.is_some() => Err(BotError::InvalidArgument(
            "option `message` goes with `deny`".into(),
        )),
        "allow" => Ok(Answer::Allow {
            updated_input: updated,
            scope,
        }),
        "deny" if updated.is_some() => Err(BotError::InvalidArgument(
            "option `updated_input` goes with `allow`".into(),
        )),
        "deny" if scope != Scope::Once => Err(BotError::InvalidArgument(
            "option `scope` goes with `allow`: a deny answers this request only".into(),
        )),
        "deny" => Ok(Answer::Deny { message }),
        _ => Err(BotError::InvalidArgument(format!(
            "behavior must be `allow` or `deny`, got `{behavior}`"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(behavior: &str, message: Option<&str>, updated: Option<&str>) -> String {
        refused_with(behavior, message, updated, None)
    }

    fn refused_with(
        behavior: &str,
        message: Option<&str>,
        updated: Option<&str>,
        scope: Option<&str>,
    ) -> String {
        match permission_answer(
            behavior,
            message.map(str::to_owned),
            updated.map(str::to_owned),
            scope,
        ) {
            Err(BotError::InvalidArgument(why)) => why,
            other => panic!("not refused: {other:?}"),
        }
    }

    #[test]
    fn a_permission_answer_is_read_or_refused_by_name() {
        use crate::runtime::Scope;
        assert_eq!(
            permission_answer("allow", None, Some(r#"{"a":1}"#.into()), None).unwrap(),
            Answer::Allow {
                updated_input: Some(serde_json::json!({"a": 1})),
                scope: Scope::Once,
            }
        );
        assert_eq!(
            permission_answer("allow", None, None, Some("always")).unwrap(),
            Answer::Allow {
                updated_input: None,
                scope: Scope::Always,
            }
        );
        assert_eq!(
            permission_answer("deny", Some("no".into()), None, Some("once")).unwrap(),
            Answer::Deny {
                message: Some("no".into())
            }
        );
        assert!(refused("maybe", None, None).contains("`allow` or `deny`, got `maybe`"));
        assert!(refused("allow", None, Some("[1]")).contains("must be a JSON object"));
        assert!(refused("allow", Some("m"), None).contains("`message` goes with `deny`"));
        assert!(refused("deny", None, Some("{}")).contains("`updated_input` goes with `allow`"));
        assert!(
            refused_with("allow", None, None, Some("forever"))
                .contains("`once`, `session`, `always` or `program`, got `forever`")
        );
        assert!(
            refused_with("deny", None, None, Some("session")).contains("`scope` goes with `allow`")
        );
    }
}
