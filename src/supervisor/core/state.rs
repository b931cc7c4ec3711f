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

/// What the bot's record says of where it stands, as botvisord loads it (the `bots` row's
/// `failed`, `parked`, `limit_kind`/`limit_resets_at`, `cost_nanos`, `budget_nanos` and
/// `continue_after_limit`), and as the core keeps it since: each field changes only with the
/// commit that records it ([`Standing::note`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OnRecord {
    /// The bot is `failed` (a crash loop, a stop that failed): nothing starts until a Restart.
    pub failed: bool,
    /// A client's Stop parked the bot: its messages wait for a Send or a Restart.
    pub parked: bool,
    /// The hold on record: a limit's kind, `login` or `budget`, and its reset in Unix seconds
    /// (0: unknown).
    pub hold: Option<(String, u64)>,
    /// What the bot cost so far, in nano-dollars.
    pub cost_nanos: u64,
    /// The bot's own budget in nano-dollars (`None`: the daemon's is in force).
    pub budget: Option<u64>,
    /// The bot's own `continue_after_limit` (`None`: the daemon's is in force).
    pub continue_after_limit: Option<bool>,
}

/// Where the bot stands, owned by the core ([`super::BotCore`]): the state clients see, whether
/// it waits for a client, and its record's hold, spend and budget. The shell's view is written
/// from the core's effects only ([`super::Effect::State`], a commit's [`super::Publish`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Standing {
    /// The state as last shown (`State` property).
    pub(super) state: State,
    /// Nothing starts until a client sends or restarts: a Stop's park (recorded), or a start
    /// that cannot succeed now ([`super::Effect::Pause`], not recorded).
    pub(super) parked: bool,
    /// The record, as committed.
    pub(super) record: OnRecord,
}

impl Standing {
    /// Where a bot loaded from `record` stands: `failed` as recorded; a parked bot `stopped`; a
    /// bot under a hold `limited` or `login_required` ([`State::while_held`]); else `stopped`.
    pub fn loaded(record: OnRecord) -> Standing {
        let state = if record.failed {
            State::Failed
        } else if record.parked {
            State::Stopped
        } else {
            State::Stopped.while_held(record.hold.as_ref().map(|(k, _)| k.as_str()))
        };
        Standing {
            state,
            parked: record.parked,
            record,
        }
    }

    /// The state as last shown.
    pub fn state(&self) -> State {
        self.state
    }

    /// The state shown when the rules ask for `asked`: while a hold is on record, a bot that is
    /// not parked and has nothing to do says it waits for the hold ([`State::while_held`]); a
    /// parked one says it is stopped (nothing goes at the reset).
    pub(super) fn shown(&self, asked: State) -> State {
        let hold = self.record.hold.as_ref().map(|(k, _)| k.as_str());
        asked.while_held(hold.filter(|_| !self.parked))
    }

    /// What a commit's publication `p` says is now on record (called as the core asks for the
    /// commit: the shell tells the core what stands instead when it fails, [`super::Input::Recorded`]).
    pub(super) fn note(&mut self, p: &super::Publish) {
        use super::Publish;
        match p {
            Publish::Limit(hold) => self.record.hold = hold.clone(),
            Publish::Spend(s) => {
                self.record.cost_nanos = self.record.cost_nanos.saturating_add(s.cost_nanos)
            }
            Publish::Budget(b) => self.record.budget = *b,
            Publish::Parked(p) => self.record.parked = *p,
            Publish::State(s) => {
                self.state = *s;
                self.record.failed = *s == State::Failed;
            }
            _ => {}
        }
    }
}
