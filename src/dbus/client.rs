//! Client proxies for the API, used by `botvisorctl` and the tests.

use std::collections::HashMap;

use zbus::{OwnedObjectPath, Variant, proxy};

/// The whole payload of chat item `seq`, read with `ReadChatItem` in ranges of up to 4 MiB
/// (works over any transport, also where no file descriptor can pass).
pub async fn read_whole_item(bot: &BotProxy<'_>, seq: u64) -> zbus::Result<String> {
    let mut whole = Vec::new();
    loop {
        let (bytes, size) = bot
            .read_chat_item(seq, whole.len() as u64, 0, HashMap::new())
            .await?;
        if bytes.is_empty() {
            break;
        }
        whole.extend_from_slice(&bytes);
        if whole.len() as u64 >= size {
            break;
        }
    }
    String::from_utf8(whole)
        .map_err(|e| zbus::Error::Failure(format!("chat item {seq} is not UTF-8: {e}")))
}

/// `org.botvisor.Botvisor1.Schedules` at `/org/botvisor/Botvisor1` (issue 49).
#[proxy(
    interface = "org.botvisor.Botvisor1.Schedules",
    default_service = "org.botvisor.Botvisor1",
    default_path = "/org/botvisor/Botvisor1"
)]
pub trait Schedules {
    /// See the service's `CreateSchedule`: the new schedule's id.
    fn create_schedule(
        &self,
        bot: &zbus::ObjectPath<'_>,
        calendar: &str,
        prompt: &str,
        options: HashMap<&str, Variant<'_>>,
    ) -> zbus::Result<String>;
    /// See the service's `UpdateSchedule`.
    fn update_schedule(&self, id: &str, options: HashMap<&str, Variant<'_>>) -> zbus::Result<()>;
    /// See the service's `PauseSchedule`.
    fn pause_schedule(&self, id: &str, paused: bool) -> zbus::Result<()>;
    /// See the service's `DeleteSchedule`.
    fn delete_schedule(&self, id: &str) -> zbus::Result<()>;
    /// See the service's `FireSchedule`: (outcome, turn id, due time in Unix seconds).
    fn fire_schedule(
        &self,
        id: &str,
        options: HashMap<&str, Variant<'_>>,
    ) -> zbus::Result<(String, String, i64)>;
    /// See the service's `Schedules`.
    #[zbus(property)]
    fn schedules(&self) -> zbus::Result<Vec<HashMap<String, zbus::OwnedVariant>>>;
    /// See the service's `ScheduleFired`: id, bot, due time, outcome, turn id.
    #[zbus(signal)]
    fn schedule_fired(
        &self,
        id: String,
        bot: OwnedObjectPath,
        due: i64,
        outcome: String,
        turn_id: String,
    ) -> zbus::Result<()>;
}

/// `org.botvisor.Botvisor1.Manager` at `/org/botvisor/Botvisor1`.
#[proxy(
    interface = "org.botvisor.Botvisor1.Manager",
    default_service = "org.botvisor.Botvisor1",
    default_path = "/org/botvisor/Botvisor1"
)]
pub trait Manager {
    /// See the service's `CreateBot`.
    fn create_bot(&self, options: HashMap<&str, Variant<'_>>) -> zbus::Result<OwnedObjectPath>;
    /// See the service's `ListConversations`: `(runtime, session id, last written in Unix
    /// seconds, title, details)`, newest first.
    #[allow(clippy::type_complexity)]
    fn list_conversations(
        &self,
        cwd: &str,
        options: HashMap<&str, Variant<'_>>,
    ) -> zbus::Result<
        Vec<(
            String,
            String,
            i64,
            String,
            HashMap<String, zbus::OwnedVariant>,
        )>,
    >;
    /// See the service's `ListSpend`: `(bot id, name, runtime, UTC day, US dollars (-1: not
    /// told), input tokens, output tokens)`, oldest first, a page at a time.
    #[allow(clippy::type_complexity)]
    fn list_spend(
        &self,
        options: HashMap<&str, Variant<'_>>,
    ) -> zbus::Result<Vec<(String, String, String, String, f64, u64, u64)>>;
    /// See the service's `GetBot`.
    fn get_bot(&self, id_or_name: &str) -> zbus::Result<OwnedObjectPath>;
    /// See the service's `ListBots`.
    fn list_bots(&self) -> zbus::Result<Vec<OwnedObjectPath>>;
    /// The API version.
    #[zbus(property)]
    fn version(&self) -> zbus::Result<String>;
    /// The runtimes.
    #[zbus(property)]
    fn runtimes(&self) -> zbus::Result<Vec<String>>;
    /// Permission modes by runtime.
    #[zbus(property)]
    fn permission_modes(&self) -> zbus::Result<HashMap<String, Vec<String>>>;
    /// Why the database cannot be written now; empty while it can.
    #[zbus(property)]
    fn storage_error(&self) -> zbus::Result<String>;
    /// How bots are contained: `cgroup` or `process-tree`.
    #[zbus(property)]
    fn containment(&self) -> zbus::Result<String>;
    /// The kernel's boot id; it changes only at a reboot.
    #[zbus(property, name = "BootId")]
    fn boot_id(&self) -> zbus::Result<String>;
    /// This botvisord's invocation; it changes at each of its starts.
    #[zbus(property)]
    fn invocation(&self) -> zbus::Result<String>;
    /// `keep (<unit>, <slice>)` or `off: <why>`: whether the agents outlive its restarts.
    #[zbus(property)]
    fn survival(&self) -> zbus::Result<String>;
}

/// `org.botvisor.Botvisor1.Bot` at `/org/botvisor/Botvisor1/<id>`.
#[proxy(
    interface = "org.botvisor.Botvisor1.Bot",
    default_service = "org.botvisor.Botvisor1"
)]
pub trait Bot {
    /// Queue a message; returns the turn id.
    fn send(&self, text: &str, options: HashMap<&str, Variant<'_>>) -> zbus::Result<String>;
    /// Set the permission mode.
    fn set_permission_mode(&self, mode: &str) -> zbus::Result<()>;
    /// Set the model.
    fn set_model(&self, model: &str) -> zbus::Result<()>;
    /// Where the bot's agent takes its login from: `source` (`environment`, `botvisord`, `file`,
    /// `provider`, `none`), `variable`, `file`, `provider`, `variables`, `words` (options: none
    /// yet).
    fn get_login(
        &self,
        options: HashMap<&str, Variant<'_>>,
    ) -> zbus::Result<std::collections::BTreeMap<String, String>>;
    /// Rename the bot (options: none yet).
    fn set_name(&self, name: &str, options: HashMap<&str, Variant<'_>>) -> zbus::Result<()>;
    /// Set the bot's budget, US dollars (0: none).
    fn set_budget(&self, budget_usd: f64) -> zbus::Result<()>;
    /// Set the bot's extra environment (options: `merge` b, `unset` as).
    fn set_environment(
        &self,
        env: HashMap<&str, &str>,
        options: HashMap<&str, Variant<'_>>,
    ) -> zbus::Result<()>;
    /// Restart (`fresh`: b).
    fn restart(&self, options: HashMap<&str, Variant<'_>>) -> zbus::Result<()>;
    /// Answer a permission request.
    fn respond_permission(
        &self,
        request_id: &str,
        behavior: &str,
        options: HashMap<&str, Variant<'_>>,
    ) -> zbus::Result<()>;
    /// Interrupt the running turn.
    fn interrupt(&self) -> zbus::Result<bool>;
    /// A permission request.
    #[zbus(signal)]
    fn permission_requested(
        &self,
        request_id: String,
        tool: String,
        input_json: String,
    ) -> zbus::Result<()>;
    /// Streamed text.
    #[zbus(signal)]
    fn text_delta(&self, turn_id: String, text: String) -> zbus::Result<()>;
    /// Open permission requests.
    #[zbus(property)]
    fn pending_permissions(&self) -> zbus::Result<Vec<(String, String, String)>>;
    /// Text streamed so far.
    #[zbus(property)]
    fn partial_text(&self) -> zbus::Result<String>;
    /// Take a lease (a stopped agent starts at once when config `warm_start` is on).
    fn hold(&self) -> zbus::Result<()>;
    /// Take a lease with options (`warm_start`: b).
    fn hold_with(&self, options: HashMap<&str, Variant<'_>>) -> zbus::Result<()>;
    /// End the lease.
    fn release(&self) -> zbus::Result<()>;
    /// Stop the agent.
    fn stop(&self) -> zbus::Result<()>;
    /// Delete the bot.
    fn delete(&self) -> zbus::Result<()>;
    /// Delete the bot with options (`remove_worktree`: b, `force`: b).
    fn delete_with(&self, options: HashMap<&str, Variant<'_>>) -> zbus::Result<()>;
    /// Chat items after `after_seq` (a page: at most `limit` and 4 MiB).
    fn get_chat(
        &self,
        after_seq: u64,
        limit: u32,
    ) -> zbus::Result<Vec<(u64, String, String, String)>>;
    /// A range of an item's whole payload, and the payload's size.
    fn read_chat_item(
        &self,
        seq: u64,
        offset: u64,
        length: u32,
        options: HashMap<&str, Variant<'_>>,
    ) -> zbus::Result<(serde_bytes::ByteBuf, u64)>;
    /// An item's whole payload as a sealed memory file.
    fn open_chat_item(
        &self,
        seq: u64,
        options: HashMap<&str, Variant<'_>>,
    ) -> zbus::Result<zbus::OwnedFd>;
    /// A chat item was added.
    #[zbus(signal)]
    fn chat_item_added(&self, seq: u64, kind: String, payload: String) -> zbus::Result<()>;
    /// A turn finished.
    #[zbus(signal)]
    fn turn_finished(&self, turn_id: String, outcome: String) -> zbus::Result<()>;
    /// Bot id.
    #[zbus(property)]
    fn id(&self) -> zbus::Result<String>;
    /// The name the creating client gave; empty when none.
    #[zbus(property)]
    fn created_by(&self) -> zbus::Result<String>;
    /// The bot whose agent created this bot; empty when none.
    #[zbus(property)]
    fn created_by_bot(&self) -> zbus::Result<String>;
    /// Name.
    #[zbus(property)]
    fn name(&self) -> zbus::Result<String>;
    /// Working directory.
    #[zbus(property)]
    fn cwd(&self) -> zbus::Result<String>;
    /// The git worktree botvisor made for the bot; empty without one.
    #[zbus(property)]
    fn worktree(&self) -> zbus::Result<String>;
    /// The branch of its worktree.
    #[zbus(property)]
    fn branch(&self) -> zbus::Result<String>;
    /// The commit its branch started at.
    #[zbus(property)]
    fn base_commit(&self) -> zbus::Result<String>;
    /// Runtime.
    #[zbus(property)]
    fn runtime(&self) -> zbus::Result<String>;
    /// Model.
    #[zbus(property)]
    fn model(&self) -> zbus::Result<String>;
    /// Permission mode.
    #[zbus(property)]
    fn permission_mode(&self) -> zbus::Result<String>;
    /// State.
    #[zbus(property)]
    fn state(&self) -> zbus::Result<String>;
    /// Session id.
    #[zbus(property)]
    fn session_id(&self) -> zbus::Result<String>;
    /// Process id.
    #[zbus(property)]
    fn process_id(&self) -> zbus::Result<u32>;
    /// Last error.
    #[zbus(property)]
    fn last_error(&self) -> zbus::Result<String>;
    /// Queued messages.
    #[zbus(property)]
    fn queued_messages(&self) -> zbus::Result<u32>;
    /// Lease holders.
    #[zbus(property)]
    fn holders(&self) -> zbus::Result<u32>;
    /// Verdict of the last stop.
    #[zbus(property)]
    fn stop_verdict(&self) -> zbus::Result<String>;
    /// How the last stop was proven: `cgroup`, `process-tree` or `best-effort`.
    #[zbus(property)]
    fn stop_proof(&self) -> zbus::Result<String>;
    /// Memory in use, bytes (`u64::MAX`: no agent runs).
    #[zbus(property, name = "MemoryCurrent")]
    fn memory_current(&self) -> zbus::Result<u64>;
    /// CPU time since the agent started, nanoseconds (`u64::MAX`: no agent runs).
    #[zbus(property, name = "CPUUsageNSec")]
    fn cpu_usage_nsec(&self) -> zbus::Result<u64>;
    /// Tasks (threads) now (`u64::MAX`: no agent runs).
    #[zbus(property, name = "TasksCurrent")]
    fn tasks_current(&self) -> zbus::Result<u64>;
    /// The memory limit in force, bytes (`u64::MAX`: none).
    #[zbus(property, name = "MemoryMax")]
    fn memory_max(&self) -> zbus::Result<u64>;
    /// The window of the usage limit the bot waits for (`five_hour`, …; empty: none).
    #[zbus(property)]
    fn limit_kind(&self) -> zbus::Result<String>;
    /// `HeldBy`.
    #[zbus(property)]
    fn held_by(&self) -> zbus::Result<String>;
    /// When that limit resets, Unix seconds (0: none or not known).
    #[zbus(property)]
    fn limit_resets_at(&self) -> zbus::Result<u64>;
    /// What the bot cost since its creation, US dollars.
    #[zbus(property, name = "CostUSD")]
    fn cost_usd(&self) -> zbus::Result<f64>;
    /// Tokens the model read for the bot.
    #[zbus(property)]
    fn input_tokens(&self) -> zbus::Result<u64>;
    /// Tokens the model wrote for the bot.
    #[zbus(property)]
    fn output_tokens(&self) -> zbus::Result<u64>;
    /// The budget in force, US dollars (0: none).
    #[zbus(property, name = "BudgetUSD")]
    fn budget_usd(&self) -> zbus::Result<f64>;
    /// Where the plan's usage limit stands: (state, kind, utilization, resets_at).
    #[zbus(property)]
    fn plan_limit(&self) -> zbus::Result<(String, String, f64, u64)>;
}
