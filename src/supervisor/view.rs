//! What clients may read of a bot without asking its actor ([`BotView`]), and the one way it
//! changes with its properties published in the order of the changes ([`update_view`]).

use crate::cost::usd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use super::core::State;
use super::{PropertyValue, Publication, Publisher};
use crate::process;
use crate::store::BotRecord;

/// A bot property that changes while the bot lives, as the actor and the handle publish it
/// (`PropertiesChanged`); `dbus::publisher` names each as the D-Bus interface does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Property {
    /// The bot's name.
    Name,
    /// The model (empty: the CLI's default).
    Model,
    /// The permission mode (empty: the CLI's default).
    PermissionMode,
    /// The [`State`].
    State,
    /// The recorded conversation (empty: none).
    SessionId,
    /// The root process's pid (0: none).
    ProcessId,
    /// The last error, or why the database cannot be written.
    LastError,
    /// Messages sent and not yet written to the agent.
    QueuedMessages,
    /// Clients holding the bot.
    Holders,
    /// The last stop's verdict.
    StopVerdict,
    /// Open permission requests.
    PendingPermissions,
    /// How the last stop was proven.
    StopProof,
    /// The agent's memory, in bytes.
    MemoryCurrent,
    /// The agent's CPU time, in nanoseconds.
    CpuUsageNsec,
    /// The agent's tasks (threads).
    TasksCurrent,
    /// The usage limit's window the bot waits for (empty: none).
    LimitKind,
    /// When the usage limit the bot waits for resets, Unix seconds (0: none, or not known).
    LimitResetsAt,
    /// What the bot cost since its creation, US dollars.
    CostUsd,
    /// Tokens the model read for the bot since its creation.
    InputTokens,
    /// Tokens the model wrote for the bot since its creation.
    OutputTokens,
    /// The budget in force, US dollars (0: none).
    BudgetUsd,
    /// Where the plan's usage limit stands, as the CLI last told it.
    PlanLimit,
    /// The process outside botvisor that holds the conversation (empty: none).
    HeldBy,
}

/// What clients may read of a bot without asking its actor.
#[derive(Debug, Clone)]
pub struct BotView {
    /// The stored record (kept in step with the database).
    pub record: BotRecord,
    /// The state.
    pub state: State,
    /// The root process's pid, 0 when none.
    pub process_id: u32,
    /// Messages sent and not yet written to the agent.
    pub queued: u32,
    /// Clients holding the bot (leases).
    pub holders: u32,
    /// The verdict of the last stop (`clean`, `root-exited`, …); empty before the first.
    pub stop_verdict: String,
    /// Open permission requests: `(request_id, tool, input_json)`.
    pub pending: Vec<(String, String, String)>,
    /// The assistant text streamed so far in the message being written.
    pub partial_text: String,
    /// Why botvisord cannot write its database now (design rule 15); while set, `LastError`
    /// shows it instead of the recorded last error.
    pub storage_error: Option<String>,
    /// How the last stop was proven (`cgroup`, `process-tree`, `best-effort`); empty before the
    /// first stop of this daemon run.
    pub stop_proof: String,
    /// Where the plan's usage limit stands, as the CLI last told it in this daemon run (not
    /// recorded: the CLI tells it again with each answer).
    pub plan_limit: Option<crate::runtime::LimitReport>,
    /// The daemon's budget (config `budget_usd`, nano-dollars), in force for a bot without its
    /// own.
    pub budget_default: Option<u64>,
    /// The agent's resource use, last sampled ([`process::usage::Usage::UNKNOWN`] when none).
    pub usage: process::usage::Usage,
    /// The process outside botvisor that holds the conversation while the bot waits for it
    /// (`core::Held::describe`; empty: none).
    pub held_by: String,
    /// What the bot does, as far as idleness goes, as its actor saw it after its last input
    /// (not published: the supervisor's order under memory pressure reads it, issue 31).
    pub activity: crate::supervisor::core::Activity,
    /// When the bot was last used (`core::evict`; `None`: not in this daemon run).
    pub last_used: Option<std::time::Instant>,
}

impl BotView {
    /// A stopped bot `b` with nothing on record, for tests of decisions taken from a view.
    #[cfg(test)]
    pub(crate) fn for_tests() -> BotView {
        BotView {
            record: BotRecord::new("b", "demo", "/tmp", "claude"),
            state: State::Stopped,
            process_id: 0,
            queued: 0,
            holders: 0,
            stop_verdict: String::new(),
            pending: Vec::new(),
            partial_text: String::new(),
            storage_error: None,
            stop_proof: String::new(),
            plan_limit: None,
            budget_default: None,
            usage: Default::default(),
            held_by: String::new(),
            activity: Default::default(),
            last_used: None,
        }
    }

    /// `LimitKind`: the limit the bot holds for; empty for none and for a login hold (its
    /// `State` says `login_required`).
    pub fn limit_kind(&self) -> &str {
        match &self.record.limit {
            Some((k, _)) if k != crate::supervisor::core::LOGIN => k,
            _ => "",
        }
    }

    /// `PlanLimit`'s value: `(state, kind, utilization, resets_at)`; `("", "", -1, 0)` before the
    /// CLI told anything, -1 for a utilization not told.
    pub fn plan_limit_value(&self) -> (String, String, f64, u64) {
        match &self.plan_limit {
            None => (String::new(), String::new(), -1.0, 0),
            Some(r) => (
                r.state.as_str().to_owned(),
                r.kind.clone(),
                r.utilization.unwrap_or(-1.0),
                r.resets_at,
            ),
        }
    }

    /// The budget in force, nano-dollars: the bot's own, else the daemon's; `None` for none.
    pub fn budget(&self) -> Option<u64> {
        crate::supervisor::core::spend::in_force(self.record.budget, self.budget_default)
    }

    /// The value of a property, as it is published.
    pub fn value(&self, property: Property) -> PropertyValue {
        let s = |v: &str| PropertyValue::Str(v.to_owned());
        match property {
            Property::Name => s(&self.record.name),
            Property::Model => s(&self.record.model),
            Property::PermissionMode => s(&self.record.permission_mode),
            Property::State => s(self.state.as_str()),
            Property::SessionId => s(self.record.session_id.as_deref().unwrap_or_default()),
            Property::ProcessId => PropertyValue::U32(self.process_id),
            Property::LastError => s(self
                .storage_error
                .as_deref()
                .unwrap_or(&self.record.last_error)),
            Property::QueuedMessages => PropertyValue::U32(self.queued),
            Property::Holders => PropertyValue::U32(self.holders),
            Property::StopVerdict => s(&self.stop_verdict),
            Property::PendingPermissions => PropertyValue::Triples(self.pending.clone()),
            Property::StopProof => s(&self.stop_proof),
            Property::MemoryCurrent => PropertyValue::U64(self.usage.memory_current),
            Property::CpuUsageNsec => PropertyValue::U64(self.usage.cpu_usage_nsec),
            Property::TasksCurrent => PropertyValue::U64(self.usage.tasks_current),
            Property::LimitKind => s(self.limit_kind()),
            Property::LimitResetsAt => {
                PropertyValue::U64(self.record.limit.as_ref().map_or(0, |(_, at)| *at))
            }
            Property::CostUsd => PropertyValue::F64(usd(self.record.spend.cost_nanos)),
            Property::InputTokens => PropertyValue::U64(self.record.spend.input_tokens),
            Property::OutputTokens => PropertyValue::U64(self.record.spend.output_tokens),
            Property::BudgetUsd => PropertyValue::F64(usd(self.budget().unwrap_or(0))),
            Property::PlanLimit => PropertyValue::PlanLimit(self.plan_limit_value()),
            Property::HeldBy => s(&self.held_by),
        }
    }
}

/// A bot's [`BotView`] as its actor and its handle share it, with a version that grows at each
/// change: a reader that keeps something made from the view (`GetManagedObjects`' encoded
/// answer, issue 50) knows whether it is still the view's without taking the view's lock.
#[derive(Debug)]
pub struct SharedView {
    view: RwLock<BotView>,
    version: AtomicU64,
}

impl SharedView {
    /// `view` at version 0.
    pub fn new(view: BotView) -> SharedView {
        SharedView {
            view: RwLock::new(view),
            version: AtomicU64::new(0),
        }
    }

    /// The view, read in place: hold it for no longer than a copy would take (the actor waits
    /// to change it meanwhile), and across no `.await`. A poisoned lock is read as it stands.
    pub fn read(&self) -> RwLockReadGuard<'_, BotView> {
        self.view.read().unwrap_or_else(|p| p.into_inner())
    }

    /// The view, to change: its version grows when the guard goes, before the lock is let go,
    /// so a reader that reads the version and then the view reads a view at least that new.
    pub fn write(&self) -> ViewWrite<'_> {
        ViewWrite {
            guard: self.view.write().unwrap_or_else(|p| p.into_inner()),
            version: &self.version,
        }
    }

    /// How many changes the view has had: a value read before [`SharedView::read`] names a view
    /// no newer than the one read.
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }
}

/// A [`SharedView`] being changed ([`SharedView::write`]).
pub struct ViewWrite<'a> {
    guard: RwLockWriteGuard<'a, BotView>,
    version: &'a AtomicU64,
}

impl std::ops::Deref for ViewWrite<'_> {
    type Target = BotView;
    fn deref(&self) -> &BotView {
        &self.guard
    }
}

impl std::ops::DerefMut for ViewWrite<'_> {
    fn deref_mut(&mut self) -> &mut BotView {
        &mut self.guard
    }
}

impl Drop for ViewWrite<'_> {
    fn drop(&mut self) {
        // Runs before the guard (a field) is dropped: the lock is still held.
        self.version.fetch_add(1, Ordering::Release);
    }
}

/// Updates a bot's view and publishes the named properties with their new values, under the
/// view's lock so that publications follow the order of the updates.
pub fn update_view(
    view: &SharedView,
    publisher: &Publisher,
    bot_id: &str,
    names: Vec<Property>,
    f: impl FnOnce(&mut BotView),
) {
    let mut v = view.write();
    f(&mut v);
    if !names.is_empty() {
        let changed = names.into_iter().map(|n| (n, v.value(n))).collect();
        let _ = publisher.send(Publication::PropertiesChanged {
            bot_id: bot_id.to_owned(),
            changed,
        });
    }
}
