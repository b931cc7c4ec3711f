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
    /// The CLI's login expired or was refused: messages wait until its credentials change or a
    /// client changes the bot's environment (issue 24; `core::limits`).
    LoginRequired,
    /// Another process (the user's terminal, another program, the vendor's background agent)
    /// holds the conversation: messages wait until it exits (issue 25; `core::held`).
    HeldElsewhere,
}

impl State {
    /// The property value: `stopped`, `idle`, `busy`, `stopping`, `failed`, `limited`,
    /// `login_required`, `held_elsewhere`.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Stopped => "stopped",
            State::Idle => "idle",
            State::Busy => "busy",
            State::Stopping => "stopping",
            State::Failed => "failed",
            State::Limited => "limited",
            State::LoginRequired => "login_required",
            State::HeldElsewhere => "held_elsewhere",
        }
    }

    /// The state shown while the bot holds for `hold` (a limit's kind; `login` for an expired
    /// login; `None`: no hold): `limited` or `login_required` for a bot that is `idle` or
    /// `stopped`; the other states say what the bot does.
    pub fn while_held(self, hold: Option<&str>) -> State {
        match (self, hold) {
            (State::Idle | State::Stopped, Some(super::limits::LOGIN)) => State::LoginRequired,
            (State::Idle | State::Stopped, Some(_)) => State::Limited,
            (s, _) => s,
        }
    }
}
