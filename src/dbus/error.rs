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
    /// The bot's error as botvisord's D-Bus error. Its message may quote what a CLI or a file
    /// wrote (a last error, a request id, a holder's command line): each NUL is U+FFFD
    /// ([`super::bounds::bus_text`]), as the bus drops a connection that sends one.
    fn from(e: BotError) -> Self {
        let e = match e {
            BotError::NotFound(m) => BotError::NotFound(text(m)),
            BotError::InvalidArgument(m) => BotError::InvalidArgument(text(m)),
            BotError::Busy(m) => BotError::Busy(text(m)),
            BotError::RuntimeUnavailable(m) => BotError::RuntimeUnavailable(text(m)),
            BotError::StorageUnavailable(m) => BotError::StorageUnavailable(text(m)),
            BotError::NotSupported(m) => BotError::NotSupported(text(m)),
            BotError::LimitExceeded(m) => BotError::LimitExceeded(text(m)),
            BotError::Failed(m) => BotError::Failed(text(m)),
        };
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

fn text(m: String) -> String {
    match super::bounds::bus_text(&m) {
        std::borrow::Cow::Borrowed(_) => m,
        std::borrow::Cow::Owned(t) => t,
    }
}

/// The result of a botvisor method.
pub type Result<T> = std::result::Result<T, Error>;

#[cfg(test)]
mod tests {
    use super::*;

    /// A bot's error that quotes what a CLI wrote (a last error with a NUL, found by a hostile
    /// helper: `Send` to a failed bot dropped botvisord) carries no NUL onto the bus.
    #[test]
    fn a_bot_error_quoting_a_nul_carries_none() {
        let all = [
            BotError::NotFound("a\0b".into()),
            BotError::InvalidArgument("a\0b".into()),
            BotError::Busy("a\0b".into()),
            BotError::RuntimeUnavailable("a\0b".into()),
            BotError::StorageUnavailable("a\0b".into()),
            BotError::NotSupported("a\0b".into()),
            BotError::LimitExceeded("a\0b".into()),
            BotError::Failed("a\0b".into()),
        ];
        for e in all {
            let text = zbus::DBusError::description(&Error::from(e))
                .unwrap_or_default()
                .to_owned();
            assert_eq!(text, "a\u{FFFD}b");
        }
    }
}
