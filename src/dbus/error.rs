//! The errors of the API: `org.botvisor.Botvisor1.Error.<Name>`, each with a message a person
//! can act on.

use zbus::DBusError;

use crate::supervisor::BotError;

/// An error reply of any botvisor method.
#[derive(Debug, DBusError)]
#[zbus(prefix = "org.botvisor.Botvisor1.Error")]
pub enum Error {
    /// A transport error of zbus itself.
    #[zbus(error)]
    ZBus(zbus::Error),
    /// No such bot (or request).
    NotFound(String),
    /// An argument or option is missing, of the wrong type or out of range; nothing changed.
    InvalidArgument(String),
    /// The bot cannot do this now.
    Busy(String),
    /// The runtime's CLI is not installed or not executable.
    RuntimeUnavailable(String),
    /// The caller is not the daemon's user.
    AccessDenied(String),
    /// botvisord cannot write its database now (locked by another process, disk full, I/O);
    /// nothing was changed; the call may be tried again. Reads keep answering meanwhile.
    StorageUnavailable(String),
    /// What was asked needs something botvisord was not given here (for example `memory_max`
    /// without a delegated memory controller); the message says what is missing; nothing changed.
    NotSupported(String),
    /// A limit of botvisord's configuration refuses the call (the depth or count of bots
    /// created by bots: `agent_max_depth`, `agent_max_bots`); the message names it; nothing
    /// changed.
    LimitExceeded(String),
    /// Anything else (database, I/O).
    Failed(String),
}

impl From<BotError> for Error {
    fn from(e: BotError) -> Self {
        match e {
            BotError::NotFound(m) => Error::NotFound(m),
            BotError::InvalidArgument(m) => Error::InvalidArgument(m),
            BotError::Busy(m) => Error::Busy(m),
            BotError::RuntimeUnavailable(m) => Error::RuntimeUnavailable(m),
            BotError::StorageUnavailable(m) => Error::StorageUnavailable(m),
            BotError::NotSupported(m) => Error::NotSupported(m),
            BotError::LimitExceeded(m) => Error::LimitExceeded(m),
            BotError::Failed(m) => Error::Failed(m),
        }
    }
}

/// The result of a botvisor method.
pub type Result<T> = std::result::Result<T, Error>;
