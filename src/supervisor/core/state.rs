//! The bot's state, as the core decides it and the `State` property shows it.

/// A bot's state, as the `State` property shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// No process.
    Stopped,
    /// A process is running and no turn is.
    Idle,
    /// A process is running a turn.
    Busy,
    /// The process is being stopped.
    Stopping,
    /// Crash loop or a stop that failed: waits for an explicit restart.
    Failed,
    /// A plan's usage limit is reached: messages wait for its reset, then go by themselves
    /// (issue 24; `core::limits`).
    Limited,
}

impl State {
    /// The property value: `stopped`, `idle`, `busy`, `stopping`, `failed`, `limited`.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Stopped => "stopped",
            State::Idle => "idle",
            State::Busy => "busy",
            State::Stopping => "stopping",
            State::Failed => "failed",
            State::Limited => "limited",
        }
    }

    /// The state shown while a usage limit holds (`limited`): `limited` for a bot that is
    /// `idle` or `stopped`, as is; the other states say what the bot does.
    pub fn while_limited(self, limited: bool) -> State {
        match self {
            State::Idle | State::Stopped if limited => State::Limited,
            s => s,
        }
    }
}
