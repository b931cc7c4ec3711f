//! `/org/botvisor/Botvisor1/<id>`: the `org.botvisor.Botvisor1.Bot` interface.

use std::sync::Arc;

use zbus::interface;
use zbus::message::Header;
use zbus::object_server::SignalEmitter;

use super::error::{Error, Result};
use super::guard::Guarded;
use super::options::{OptionReader, Options};
use super::service::Ctx;
use crate::store;
use crate::supervisor::BotHandle;

/// The most chat items one `GetChat` returns; a `limit` of 0 means this many.
pub const MAX_CHAT_PAGE: u32 = 10_000;

/// The caller's unique bus name (empty on a peer-to-peer connection).
fn client_of(hdr: &Header<'_>) -> String {
    hdr.sender().map(|s| s.to_string()).unwrap_or_default()
}

/// One bot object.
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

    fn view(&self) -> crate::supervisor::BotView {
        self.handle.snapshot()
    }
}

/// A supervised agent: its conversation, its process and its settings.
#[interface(name = "org.botvisor.Botvisor1.Bot", spawn = false)]
impl BotObject {
    /// Queues a message and returns its turn id at once; the turn's end is the `TurnFinished`
    /// signal. Starts the agent when it is not running (resuming its conversation when the
    /// transcript exists). No options yet. Errors: InvalidArgument (empty text), Busy (state
    /// `failed`; or no agent runs and the working directory is gone), RuntimeUnavailable; an
    /// error queues nothing.
    #[zbus(out_args("turn_id"))]
    async fn send(&self, text: String, options: Options) -> Result<String> {
        OptionReader::new("Send", &options).finish()?;
        Ok(self.handle.send(text)?)
    }

    /// Stops the agent gently (close stdin, SIGTERM to its process group, grace period,
    /// SIGKILL). Returns at once; `State` goes `stopping`, then `stopped`. A turn that had begun
    /// ends `interrupted`; messages not yet taken stay queued until the next `Send`.
    async fn stop(&self) -> Result<()> {
        Ok(self.handle.stop()?)
    }

    /// Sets the permission mode: on the running agent at once (control protocol), and for every
    /// later start. Errors: InvalidArgument (a mode the runtime does not know).
    async fn set_permission_mode(&self, mode: String) -> Result<()> {
        Ok(self.handle.set_permission_mode(mode)?)
    }

    /// Sets the model: on the running agent for its next request, and for every later start.
    /// Empty means the CLI's default (from the next start). Errors: InvalidArgument.
    async fn set_model(&self, model: String) -> Result<()> {
        Ok(self.handle.set_model(model)?)
    }

    /// Stops the agent and starts it again. Options: `fresh` (b, default false): forget the
    /// conversation durably first, so that neither this start nor any later one resumes it;
    /// otherwise the conversation is resumed when its transcript exists. Clears state `failed`.
    /// Returns at once; `State` and `ProcessId` show the progress. Errors: Busy (the working
    /// directory is gone), RuntimeUnavailable, InvalidArgument.
    async fn restart(&self, options: Options) -> Result<()> {
        let mut r = OptionReader::new("Restart", &options);
        let fresh = r.boolean("fresh")?.unwrap_or(false);
        r.finish()?;
        Ok(self.handle.restart(fresh)?)
    }

    /// Deletes the bot with its chat history. Returns at once: the bot leaves `ListBots`, its
    /// agent is stopped gently, then the object goes away (`InterfacesRemoved`).
    async fn delete(&self) -> Result<()> {
        Ok(self.ctx.supervisor.delete(&self.handle.id)?)
    }

    /// Takes a lease on the bot for the calling client: while any client holds it, the bot is
    /// never stopped for idleness and restarts after a crash. The lease ends with `Release` or
    /// when the client leaves the bus. Holding twice is one lease.
    async fn hold(&self, #[zbus(header)] hdr: Header<'_>) -> Result<()> {
        Ok(self.handle.hold(&client_of(&hdr))?)
    }

    /// Ends the calling client's lease. Errors: NotFound (it holds none).
    async fn release(&self, #[zbus(header)] hdr: Header<'_>) -> Result<()> {
        Ok(self.handle.release(&client_of(&hdr))?)
    }

    /// Answers an open permission request. `behavior`: `allow` or `deny`. Options:
    /// `updated_input` (s, a JSON object: the input the tool runs with, for `allow`), `message`
    /// (s, what the model is told, for `deny`). The first answer wins; it is recorded in the chat
    /// with the answering client's bus name. Errors: NotFound (unknown or already answered
    /// request), InvalidArgument.
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
        r.finish()?;
        Ok(self.handle.respond_permission(
            &request_id,
            &behavior,
            message,
            updated_input,
            &client_of(&hdr),
        )?)
    }

    /// Ends the running turn through the CLI's control protocol; the turn ends with outcome
    /// `interrupted` and queued messages stay queued. Returns false (and does nothing) when no
    /// turn runs.
    #[zbus(out_args("interrupted"))]
    async fn interrupt(&self) -> Result<bool> {
        Ok(self.handle.interrupt()?)
    }

    /// Chat items with `seq > after_seq`, at most `limit` (0: up to 10,000), in order, as
    /// `(seq, kind, RFC 3339 time, JSON payload)`.
    #[zbus(out_args("items"))]
    async fn get_chat(
        &self,
        after_seq: u64,
        limit: u32,
    ) -> Result<Vec<(u64, String, String, String)>> {
        self.handle.check_alive()?;
        let limit = if limit == 0 {
            MAX_CHAT_PAGE
        } else {
            limit.min(MAX_CHAT_PAGE)
        };
        let items = self
            .ctx
            .supervisor
            .store()
            .read(|c| store::chat::after(c, &self.handle.id, after_seq, limit))
            .map_err(|e| Error::Failed(e.to_string()))?;
        Ok(items
            .into_iter()
            .map(|i| (i.seq, i.kind, i.time, i.payload))
            .collect())
    }

    /// A chat item was committed: `(seq, kind, JSON payload)`.
    #[zbus(signal)]
    pub async fn chat_item_added(
        emitter: &SignalEmitter<'_>,
        seq: u64,
        kind: &str,
        payload: &str,
    ) -> zbus::Result<()>;

    /// A turn ended: `(turn_id, outcome)`, outcome one of `success`, `error`, `crashed`,
    /// `interrupted`.
    #[zbus(signal)]
    pub async fn turn_finished(
        emitter: &SignalEmitter<'_>,
        turn_id: &str,
        outcome: &str,
    ) -> zbus::Result<()>;

    /// The agent asks whether a tool may run: `(request_id, tool, input_json)`. Answer with
    /// `RespondPermission`.
    #[zbus(signal)]
    pub async fn permission_requested(
        emitter: &SignalEmitter<'_>,
        request_id: &str,
        tool: &str,
        input_json: &str,
    ) -> zbus::Result<()>;

    /// Assistant text as it streams, at most one signal per bot every 50 ms: `(turn_id, text)`,
    /// the text written since the previous signal. Not stored; the finished message is a
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

    /// A name for people.
    #[zbus(property)]
    fn name(&self) -> String {
        self.view().record.name
    }

    /// The canonical working directory.
    #[zbus(property(emits_changed_signal = "const"))]
    fn cwd(&self) -> String {
        self.view().record.cwd
    }

    /// The runtime, for example `claude`.
    #[zbus(property(emits_changed_signal = "const"))]
    fn runtime(&self) -> String {
        self.view().record.runtime
    }

    /// The model; empty for the CLI's default.
    #[zbus(property)]
    fn model(&self) -> String {
        self.view().record.model
    }

    /// The permission mode; empty for the CLI's default.
    #[zbus(property)]
    fn permission_mode(&self) -> String {
        self.view().record.permission_mode
    }

    /// `stopped`, `idle`, `busy`, `stopping` or `failed`.
    #[zbus(property)]
    fn state(&self) -> String {
        self.view().state.as_str().to_owned()
    }

    /// The recorded conversation (set once a turn began in it); empty when none.
    #[zbus(property)]
    fn session_id(&self) -> String {
        self.view().record.session_id.unwrap_or_default()
    }

    /// The agent's root process id; 0 when not running.
    #[zbus(property)]
    fn process_id(&self) -> u32 {
        self.view().process_id
    }

    /// The last error a person should know of; empty when none.
    #[zbus(property)]
    fn last_error(&self) -> String {
        self.view().record.last_error
    }

    /// Messages sent and not yet taken by the agent.
    #[zbus(property)]
    fn queued_messages(&self) -> u32 {
        self.view().queued
    }

    /// Open permission requests: `(request_id, tool, input_json)`.
    #[zbus(property)]
    fn pending_permissions(&self) -> Vec<(String, String, String)> {
        self.view().pending
    }

    /// The assistant text streamed so far in the message being written (empty between
    /// messages). A client joining mid-message reads it, then follows `TextDelta`. Changes are
    /// not signalled (`TextDelta` is the change).
    #[zbus(property(emits_changed_signal = "false"))]
    fn partial_text(&self) -> String {
        self.view().partial_text
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
        self.view().stop_verdict
    }
}
