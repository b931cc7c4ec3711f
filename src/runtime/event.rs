//! What a CLI says, in runtime-neutral terms: the [`RuntimeEvent`]s each runtime's protocol
//! object reads from its CLI's lines, a turn's outcome, and a plan's usage limit as told.

use super::ChatPayload;

/// How a turn ended, as the runtime reported it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResultOutcome {
    /// The turn completed.
    Success,
    /// The CLI reported an error for the turn.
    Error,
}

/// Something a CLI said, in runtime-neutral terms.
#[derive(Debug, Clone, PartialEq)]
pub enum RuntimeEvent {
    /// A turn's start-up report (Claude: `system`/`init`). Not a sign that a turn began.
    Init {
        /// The conversation.
        session_id: Option<String>,
        /// The model in use.
        model: Option<String>,
        /// The permission mode in use.
        permission_mode: Option<String>,
    },
    /// The CLI's handshake is done and the conversation `session_id` is open: user messages may
    /// be written (Codex: the answer to `thread/start` or `thread/resume`). Not a sign that a
    /// turn began: the conversation is recorded only then (design rule 3).
    Opened {
        /// The conversation, as the CLI named it.
        session_id: String,
    },
    /// The CLI's handshake was refused (Codex: `thread/start` or `thread/resume` answered with
    /// an error that is not a lost conversation): no turn can run in this process.
    OpenFailed {
        /// The CLI's words.
        error: String,
    },
    /// The CLI refused to resume without the unanswered attempt the launch's [`Cut`] names (Codex:
    /// `thread/revert` answered with an error; Claude Code refuses by exiting instead): the
    /// conversation is open whole, holding the message that was to be asked again once,
    /// unanswered, and the process goes on (issue 25).
    ///
    /// [`Cut`]: super::Cut
    CutRefused {
        /// A sentence saying who refused, in which words (`Codex said: …`, or botvisor's own
        /// reason when it did not ask the CLI).
        error: String,
    },
    /// The CLI echoed a user message: a turn began in `session_id` (design rule 3).
    UserReplay {
        /// The conversation.
        session_id: Option<String>,
        /// The message text.
        text: String,
    },
    /// Something to record in the chat.
    Chat(ChatPayload),
    /// The end of a turn.
    TurnResult {
        /// Success or error.
        outcome: ResultOutcome,
        /// The conversation.
        session_id: Option<String>,
        /// What to record as the `result` chat item (cost, usage, errors…).
        payload: serde_json::Value,
        /// A short error text when `outcome` is `Error`.
        error: Option<String>,
    },
    /// The CLI could not find the conversation it was asked to resume (design rule 4).
    ConversationNotFound {
        /// The id it named.
        session_id: String,
    },
    /// The CLI refused a new conversation because its id is already in use.
    SessionInUse {
        /// The id.
        session_id: String,
    },
    /// A line that is not the runtime's protocol; recorded as an `error` chat item.
    Unparsed {
        /// The line (lossy UTF-8, cut to a bounded length).
        line: String,
        /// Why it was not understood.
        reason: String,
    },
    /// The CLI answered one of our control requests.
    ControlResponse {
        /// The id we sent.
        request_id: String,
        /// `Ok` with the response body, or `Err` with the CLI's error text.
        result: Result<serde_json::Value, String>,
    },
    /// The CLI asks the host something over the control protocol.
    ControlRequest {
        /// The CLI's request id, to answer with.
        request_id: String,
        /// The request's `subtype`.
        subtype: String,
        /// The whole request object.
        request: serde_json::Value,
    },
    /// The CLI reported its background tasks (`Some(count)` of those running now) or a task
    /// event (`None`): a moment to look for new descendants.
    Tasks {
        /// How many background tasks run now, when the event says.
        running: Option<usize>,
    },
    /// The CLI is retrying a failed model request.
    ApiRetry {
        /// The CLI's error word, for example `authentication_failed`.
        error: String,
        /// The HTTP status, if any.
        status: Option<u64>,
        /// This attempt.
        attempt: u64,
        /// The most attempts it will make.
        max_retries: u64,
        /// How long it waits before this attempt, in milliseconds, when it says.
        delay_ms: Option<u64>,
    },
    /// Where the plan's usage limit stands (Claude Code's `rate_limit_event`; Codex's
    /// `account/rateLimits/updated`, and its `usageLimitExceeded` error as reached).
    Limit(LimitReport),
    /// A model request's tokens, told during the turn (Codex 0.171.0's
    /// `thread/tokenUsage/updated` `tokenUsage.last`: `inputTokens`, `outputTokens`); Claude Code
    /// tells them in its `result`.
    Tokens {
        /// Tokens read.
        input: u64,
        /// Tokens written.
        output: u64,
    },
    /// Assistant text as it streams (a piece of the message being written).
    TextDelta(String),
    /// A new assistant message begins streaming: the text so far starts again.
    MessageStart,
    /// The CLI asks whether a tool may run (Claude: `can_use_tool` with
    /// `--permission-prompt-tool stdio`). It waits for the answer.
    PermissionRequest {
        /// The CLI's request id, to answer with.
        request_id: String,
        /// The tool, for example `Write`.
        tool: String,
        /// The tool's input.
        input: serde_json::Value,
        /// The whole request (suggestions, tool use id, …).
        request: serde_json::Value,
    },
    /// Understood, but nothing to do.
    Ignored,
}

impl RuntimeEvent {
    /// Whether the event shows that the CLI speaks its protocol (the start watchdog's sign of
    /// life): an answer to a control request (Claude Code answers `initialize` about 0.3 s after
    /// launch), a turn's start, a replay, a chat item, a result, a request of its own. Not: a line
    /// that is not the protocol, nor one it prints on its own before it is ready (a hook's
    /// progress, for example), which a CLI hung at start-up may still print.
    pub fn is_sign_of_life(&self) -> bool {
        !matches!(
            self,
            RuntimeEvent::Ignored | RuntimeEvent::Unparsed { .. } | RuntimeEvent::Tasks { .. }
        )
    }
}

/// Where a plan's usage limit stands, as a CLI told it (docs/cli-versions.md has what each
/// version prints).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LimitReport {
    /// Whether the plan takes requests now.
    pub state: LimitState,
    /// The window that decides: `five_hour`, `seven_day`, … (Claude Code's `rateLimitType`;
    /// Codex's primary window named by its length); empty when not told.
    pub kind: String,
    /// When the window resets, in Unix seconds; 0 when not told.
    pub resets_at: u64,
    /// How much of the window is used, from 0.0 to 1.0, when told.
    pub utilization: Option<f64>,
}

/// [`LimitReport::state`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum LimitState {
    /// Requests are taken (Claude Code: `allowed`).
    Allowed,
    /// Requests are taken and the window is nearly used (Claude Code 2.1.328: `allowed_warning`
    /// in the deciding window of `unifiedWindows`, though `allowed` at the top).
    Warning,
    /// Requests are refused until the reset (Claude Code: `rejected`; Codex: a primary window
    /// 100 % used, or its `usageLimitExceeded` error).
    Reached,
}

impl LimitState {
    /// `allowed`, `warning` or `reached` (the first member of the `PlanLimit` property).
    pub fn as_str(self) -> &'static str {
        match self {
            LimitState::Allowed => "allowed",
            LimitState::Warning => "warning",
            LimitState::Reached => "reached",
        }
    }
}
