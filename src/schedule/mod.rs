//! Scheduled prompts (issue 49): a bot's prompt put on a calendar, fired by the OS's own timer
//! service (a systemd user timer; launchd's `StartCalendarInterval` on macOS), exactly once per
//! due time.
//!
//! This module holds what a schedule is and the decisions about it, with no bot and no bus:
//! the calendar as systemd's own parser reads it ([`calendar`]), which due time a fire claims
//! ([`claim`]), and the text of the units ([`units`]) and of a launchd job ([`launchd`]). The
//! store keeps schedules (`store::schedules`); the supervisor fires them
//! (`supervisor::schedules`); the units are written and started through the user manager's
//! D-Bus API (`systemd::timers`).

pub mod calendar;
pub mod claim;
pub mod launchd;
pub mod units;

/// A scheduled prompt, as kept in the database (the truth the units are written from).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    /// Its id: 32 lowercase hex digits (a UUID's simple form), also in its units' names.
    pub id: String,
    /// The bot it fires into.
    pub bot_id: String,
    /// When: a calendar expression in systemd's normalized form (`OnCalendar=`, see
    /// `systemd.time(7)`), a time zone at its end when one was given.
    pub calendar: String,
    /// The prompt each fire sends, as a user's message.
    pub prompt: String,
    /// What a fire does when the bot is busy.
    pub when_busy: WhenBusy,
    /// Which conversation each fire's prompt goes to.
    pub conversation: Conversation,
    /// The timer's `RandomizedDelaySec=`, in seconds (0: none).
    pub random_delay_s: u32,
    /// A paused schedule has no timer and no fire.
    pub paused: bool,
    /// The due time of the last fire claimed, in Unix seconds (0: none yet).
    pub last_due: i64,
    /// When that fire was claimed, in Unix seconds (0: never).
    pub last_fired_at: i64,
    /// Whether a `run-now` claimed it (rather than the timer).
    pub last_run_now: bool,
    /// When it ends, in Unix seconds (0: never): no due time after it fires, and once it has
    /// passed the schedule has no units (it stays listed, ended).
    pub until: i64,
}

/// How long past its end (and its random delay) a schedule keeps its units, in seconds: the
/// timer's fire of a due time at or before the end, which the random delay holds back, still
/// finds its service (a fire that reaches botvisord later still fires that due time).
pub const END_GRACE_S: i64 = 30;

impl Schedule {
    /// Whether it has ended at `now` (Unix seconds): its end is set, and past by its random
    /// delay and [`END_GRACE_S`]; then it has no units and its timer fires nothing.
    pub fn ended(&self, now: i64) -> bool {
        self.until > 0 && now > self.until + i64::from(self.random_delay_s) + END_GRACE_S
    }

    /// Whether it fires at `now` as it is: not paused, and not past its end.
    pub fn firing(&self, now: i64) -> bool {
        !self.paused && (self.until == 0 || now <= self.until)
    }
}

/// What a fire does when its bot is busy with a turn or has messages waiting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WhenBusy {
    /// The prompt is queued behind them, like a user's message (the default).
    Queue,
    /// The fire is skipped (said in the chat).
    Skip,
}

impl WhenBusy {
    /// `queue` or `skip`.
    pub fn as_str(self) -> &'static str {
        match self {
            WhenBusy::Queue => "queue",
            WhenBusy::Skip => "skip",
        }
    }

    /// From [`WhenBusy::as_str`]'s words; `None` for any other.
    pub fn parse(s: &str) -> Option<WhenBusy> {
        match s {
            "queue" => Some(WhenBusy::Queue),
            "skip" => Some(WhenBusy::Skip),
            _ => None,
        }
    }
}

/// Which conversation a fire's prompt goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Conversation {
    /// The bot's conversation, as a user's message (the default).
    Same,
    /// A new conversation of the bot each time, begun by the fire on an idle bot (the previous
    /// one is kept in the CLI's files, as after `restart --fresh`); a busy bot's fire is
    /// skipped, since a new conversation would cut into the one in use.
    Fresh,
}

impl Conversation {
    /// `same` or `fresh`.
    pub fn as_str(self) -> &'static str {
        match self {
            Conversation::Same => "same",
            Conversation::Fresh => "fresh",
        }
    }

    /// From [`Conversation::as_str`]'s words; `None` for any other.
    pub fn parse(s: &str) -> Option<Conversation> {
        match s {
            "same" => Some(Conversation::Same),
            "fresh" => Some(Conversation::Fresh),
            _ => None,
        }
    }
}

/// Whether `id` is a schedule id: 32 lowercase hex digits. Anything else is refused before it
/// reaches a unit name or a path.
pub fn is_id(id: &str) -> bool {
    id.len() == 32
        && id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}
