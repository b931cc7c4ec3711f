//! What the lifecycle core asks its shell to do: plain data, executed in order by
//! `supervisor::bot::effects` and never decided there.

use super::decide::TurnOutcome;
use super::spend::Spend;
use crate::process::identity::ProcessIdentity;
use crate::runtime::Cut;
use crate::supervisor::core::State;

/// One row change in the bot's database, applied inside a [`Effect::Commit`]'s transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Write {
    /// Append a chat item: its kind (`system`, `error`, `result`, `turn_finished`, …), the turn
    /// it belongs to, and its JSON payload.
    Chat {
        /// The chat item kind.
        kind: String,
        /// The turn, if any.
        turn_id: Option<String>,
        /// A JSON object, as text.
        payload: String,
    },
    /// The turn began (its message was replayed): status `running`.
    TurnRunning(String),
    /// The turn ended with this outcome.
    TurnFinished {
        /// The turn.
        turn_id: String,
        /// Its outcome.
        outcome: TurnOutcome,
    },
    /// Which conversation a message goes to, recorded before it is written (design rule 8).
    Delivery {
        /// The turn.
        turn_id: String,
        /// The conversation.
        session_id: String,
        /// When it is written, to the millisecond (as the table keeps it).
        at: std::time::SystemTime,
    },
    /// The delivery record of a turn is no longer needed (it began or was settled).
    DeliveryDone(String),
    /// The bot's recorded conversation (design rule 3), `None` to forget it.
    Session(Option<String>),
    /// The bot's `LastError`.
    LastError(String),
    /// Whether the bot is `failed`: that state waits for an explicit Restart, across daemon
    /// restarts too.
    Failed(bool),
    /// A setting now in force (design rule 6): taken by the running agent, or, with none
    /// running, for its next start.
    Setting(Setting),
    /// Whether a client's Stop parked the bot (its waiting messages wait for a Send or a
    /// Restart), kept across daemon restarts.
    Parked(bool),
    /// A process of the bot's agent, by identity (`root`: the CLI itself, else a descendant),
    /// for the next start after a daemon crash (design rule 9).
    Process {
        /// The process.
        identity: ProcessIdentity,
        /// Whether it is the agent's root process.
        root: bool,
    },
    /// The bot's agent is released: its process records go.
    ProcessesReleased,
    /// The verdict of the last stop (`clean`, `root-exited`, …).
    StopVerdict(String),
    /// The bot and everything of it are deleted.
    BotDeleted,
    /// A running turn goes back to the queue in its place: a usage limit refused its message.
    TurnRequeued(String),
    /// A turn whose message the conversation took and never answered goes back to the queue in
    /// its place, asked once more, the next resume dropping the unanswered attempt as `cut` says
    /// (issue 25).
    TurnRedo {
        /// The turn.
        turn_id: String,
        /// Where the next resume cuts its conversation; `None`: resumed whole.
        cut: Option<Cut>,
    },
    /// A turn's redo goes without its cut (the CLI refused it).
    TurnUncut(String),
    /// A running turn a usage limit cut goes back to the queue in its place, to go as this text
    /// (a request to continue) instead of its message.
    TurnContinued(String, String),
    /// The usage limit the bot waits for (kind, reset in Unix seconds), or none.
    Limit(Option<(String, u64)>),
    /// The failed attempt the bot's conversation holds, which the next start resumes without
    /// (issue 45, [`super::attempt`]), or none.
    AttemptCut(Option<Cut>),
    /// A turn's spend, added to the bot's, with its conversation's total when the CLI told one
    /// (session, nano-dollars).
    Spend {
        /// What the turn cost.
        spend: Spend,
        /// The conversation's total to record.
        conversation: Option<(String, u64)>,
    },
    /// The bot's own budget in nano-dollars (`None`: the daemon's).
    Budget(Option<u64>),
}

/// A setting of the bot's record that the running agent can take live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Setting {
    /// The `PermissionMode` property (empty: the CLI's default).
    PermissionMode(String),
    /// The `Model` property (empty: the CLI's default).
    Model(String),
}

/// What is published once a commit succeeded (design rule 1: persist, then publish).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Publish {
    /// The `n`-th chat item this commit appended (`ChatItemAdded`).
    Item(usize),
    /// The `SessionId` property.
    SessionId(Option<String>),
    /// The `LastError` property.
    LastError(String),
    /// The `State` property (a change the commit made durable: into or out of `failed`).
    State(State),
    /// The `PermissionMode` or `Model` property.
    Setting(Setting),
    /// The `PermissionRequested` signal.
    PermissionRequested {
        /// The CLI's request id.
        request_id: String,
        /// The tool.
        tool: String,
        /// The tool's input, as JSON text.
        input: String,
    },
    /// The bot's parked flag, in its view (no property shows it).
    Parked(bool),
    /// The `StopVerdict` and `StopProof` properties.
    StopVerdict {
        /// The verdict's name.
        verdict: String,
        /// How it was proven (`cgroup`, `process-tree`, `best-effort`; empty when not).
        proof: String,
    },
    /// The bot is gone (`InterfacesRemoved`).
    BotRemoved,
    /// The `LimitKind` and `LimitResetsAt` properties (none: empty and 0).
    Limit(Option<(String, u64)>),
    /// `CostUSD`, `InputTokens` and `OutputTokens`: this much more was spent.
    Spend(Spend),
    /// The `BudgetUSD` property: the bot's own budget (nano-dollars; `None`: the daemon's).
    Budget(Option<u64>),
    /// The `TurnFinished` signal.
    TurnFinished {
        /// The turn.
        turn_id: String,
        /// Its outcome.
        outcome: TurnOutcome,
    },
}

/// What the core asks to be written to the running CLI, through its protocol.
#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    /// A control request (a live setting, an interrupt); the shell reports how it went with
    /// `Input::ControlWritten`.
    Control(crate::runtime::ControlRequest),
    /// A client's answer to the CLI's permission request `request_id`.
    Permission {
        /// The CLI's request id.
        request_id: String,
        /// The answer.
        answer: crate::runtime::PermissionAnswer,
    },
    /// The message in flight, written to the agent's stdin as the runtime's user message; the
    /// shell says how the write went with `Input::Written`.
    Message {
        /// The turn whose message it is.
        turn_id: String,
        /// The message as the user sent it.
        text: String,
    },
    /// Refuse a request of the CLI's own (`request_id`) with `message`.
    Refuse {
        /// The CLI's request id.
        request_id: String,
        /// Why, in words.
        message: String,
    },
}

/// Streamed assistant text, as the core paces it ([`super::stream::DeltaPacer`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Streamed {
    /// Text came: `PartialText` (what a late client reads) grows by it.
    Append(String),
    /// Signal `TextDelta` with `text` for `turn_id` (empty: no turn).
    Signal {
        /// The turn the text belongs to.
        turn_id: String,
        /// The text let out.
        text: String,
    },
    /// The message is complete or a new one begins: `PartialText` starts over.
    Clear,
}

/// One thing the core asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// Commit `writes` in one transaction; when it succeeded, publish `publish` in order. When it
    /// failed, nothing is published (the journal says why).
    Commit {
        /// The rows, in order.
        writes: Vec<Write>,
        /// What to say once they are durable.
        publish: Vec<Publish>,
    },
    /// The `QueuedMessages` property: messages sent and not yet written to the agent.
    Queued(u32),
    /// The `HeldBy` property: the process outside botvisor that holds the conversation (empty:
    /// none; `core::held`).
    HeldBy(String),
    /// The bot's `State`: a change, shown as it is (the core keeps it in
    /// [`super::state::Standing`]; a change into or out of `failed` comes as a commit instead).
    State(State),
    /// The `PendingPermissions` property: `(request_id, tool, input_json)` of each open prompt.
    Pending(Vec<(String, String, String)>),
    /// The bot was parked (`true`: waiting messages wait for a client's Send or Restart) or let
    /// go; the core keeps it, and its commit comes before when the record changes. The shell
    /// answers [`super::Input::ParkChanged`] with whether an agent runs.
    Park(bool),
    /// The agent cannot start now: nothing starts again until a client sends or restarts. Not
    /// recorded: a daemon restart tries once more. The core's own: [`BotCore::emit`] keeps it
    /// in [`super::state::Standing`], and the shell never gets it.
    ///
    /// [`BotCore::emit`]: super::BotCore
    Pause,
    /// Start the agent now (a client's Restart).
    Start,
    /// Launch the agent on the conversation `decision` names (design rule 2): the shell looks
    /// for another process holding a resumed conversation (then [`super::Input::HolderFound`]),
    /// readies the conversation's files, spawns the CLI, and answers
    /// [`super::Input::Launched`] or [`super::Input::LaunchFailed`].
    Spawn(super::start::StartDecision),
    /// Write this to the running CLI.
    Send(Request),
    /// Stop the running process (design rule 9), once the input's other effects are carried out.
    Stop(super::stop::StopReason),
    /// Streamed text.
    Stream(Streamed),
    /// Look for the agent's descendants now (a tool started or ended, a background task moved;
    /// design rule 9).
    LookForDescendants,
    /// Look at the world and answer [`super::Input::Looked`] ([`super::look`]).
    Look(super::look::Look),
    /// A turn began: what the agent runs from now on is the turn's (an interrupt stops what it
    /// left: [`Effect::InterruptEnded`]).
    TurnBegan,
    /// The CLI took the message in flight and has not replayed it yet (Claude Code: its
    /// `system`/`init`, printed before it asks the model: 475 ms after the spawn against 517 ms
    /// for the request and 1,522 ms for the replay in `tests/facts/claude.rs`' first turn on
    /// 2.1.328): what the agent runs now is its own, what appears from now on the turn's. The
    /// shell looks unless it did as the message was written.
    LookBeforeTurn,
    /// The turn an interrupt was sent for ended: what it started and left running is stopped
    /// (`core::interrupt::left_by_turn`).
    InterruptEnded(String),
    /// The CLI asks whether a tool may run: open the request for clients to answer
    /// (`core::prompts::opened`), as a request of `turn_id`.
    OpenPrompt {
        /// The request.
        asked: super::prompts::Asked,
        /// The turn it belongs to.
        turn_id: Option<String>,
    },
    /// Close every open permission request as denied by botvisord, with this message in the
    /// chat (`core::prompts::close_all`).
    ClosePrompts(String),
    /// The `PlanLimit` property: where the plan's usage limit stands, as the CLI told it.
    PlanLimit(crate::runtime::LimitReport),
    /// Watch the CLI's credentials file: the bot waits for its login (`core::limits`).
    FollowCredentials,
    /// Bring botvisor's copy of the conversation up to date (a turn ended; `supervisor::keep`).
    KeepConversation,
    /// The process is gone: `ProcessId` is 0.
    ProcessGone,
    /// Clean up what is left of the exited process's tree (design rule 9), for this reason; the
    /// shell says when it is done (`Input::CleanedUp`).
    CleanUp(super::stop::StopReason),
    /// Say how the commit just before this effect went (`Input::Committed`): what follows it
    /// depends on whether it is durable.
    ReportCommit(Awaited),
    /// Remove botvisor's copy of the conversation (a fresh restart, a Delete: design rule 5).
    ForgetKept,
    /// The bot's supervision ends (it was deleted, or botvisord shuts down): its actor stops
    /// once this input is handled.
    End,
}

/// A commit whose outcome the core waits for ([`Effect::ReportCommit`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Awaited {
    /// The record of a Restart ([`super::lifecycle::Lifecycle::restart`]), in this mode.
    Restart(super::lifecycle::RestartMode),
    /// The bot's deletion (`Write::BotDeleted`).
    Delete,
    /// Where the message in flight goes (`Write::Delivery`): once durable it is written, never
    /// before (design rule 8).
    Delivery,
    /// A launch's forget of the conversation it leaves (design rule 5): the launch goes on
    /// either way ([`super::Input::LaunchChecked`]).
    Forget,
}

/// Builds the effects of one commit: collects writes and publications in order.
#[derive(Debug, Default)]
pub struct CommitBuilder {
    writes: Vec<Write>,
    publish: Vec<Publish>,
    items: usize,
}

impl CommitBuilder {
    /// Appends a chat item and publishes it after the commit, in this place of the order.
    pub fn item(&mut self, kind: &str, turn_id: Option<&str>, payload: String) -> &mut Self {
        self.writes.push(Write::Chat {
            kind: kind.to_owned(),
            turn_id: turn_id.map(str::to_owned),
            payload,
        });
        self.publish.push(Publish::Item(self.items));
        self.items += 1;
        self
    }

    /// A row change with nothing to publish of its own.
    pub fn write(&mut self, write: Write) -> &mut Self {
        self.writes.push(write);
        self
    }

    /// Something to publish after the commit, in this place of the order.
    pub fn then(&mut self, publish: Publish) -> &mut Self {
        self.publish.push(publish);
        self
    }

    /// The commit, or `None` when nothing was asked.
    pub fn build(self) -> Option<Effect> {
        (!self.writes.is_empty()).then_some(Effect::Commit {
            writes: self.writes,
            publish: self.publish,
        })
    }
}

/// Every row the commits among `effects` write, in order.
#[cfg(test)]
pub fn writes(effects: &[Effect]) -> impl Iterator<Item = &Write> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Commit { writes, .. } => Some(writes),
            _ => None,
        })
        .flatten()
}

/// The states `effects` show, in order.
#[cfg(test)]
pub fn states(effects: &[Effect]) -> Vec<State> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::State(s) => Some(*s),
            _ => None,
        })
        .collect()
}

/// The turns `effects` end, with their outcomes, in order (`Write::TurnFinished`).
#[cfg(test)]
pub fn finished_turns(effects: &[Effect]) -> Vec<(String, TurnOutcome)> {
    writes(effects)
        .filter_map(|w| match w {
            Write::TurnFinished { turn_id, outcome } => Some((turn_id.clone(), *outcome)),
            _ => None,
        })
        .collect()
}
