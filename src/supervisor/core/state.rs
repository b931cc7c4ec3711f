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
}

impl State {
    /// The property value: `stopped`, `idle`, `busy`, `stopping`, `failed`.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Stopped => "stopped",
            State::Idle => "idle",
            State::Busy => "busy",
            State::Stopping => "stopping",
            State::Failed => "failed",
        }
    }
}
