//! A message waiting in a bot's queue, in the one shape the store keeps it in and the
//! supervisor's core delivers it in (`store::turns::queued`, `supervisor::core::Turns`): so
//! the store names no supervisor.

use crate::runtime::Cut;

/// A message waiting for a process to take it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct QueuedTurn {
    /// The turn id `Send` returned.
    pub id: String,
    /// The user's text.
    pub text: String,
    /// How many times it was asked again after its conversation took it unanswered (issue 25).
    pub redos: u32,
    /// Where the resume that asks it again cuts its conversation, to drop the unanswered
    /// attempt; `None` once that attempt is gone (the message was replayed) or for a first ask.
    pub cut: Option<Cut>,
}

impl QueuedTurn {
    /// A message sent as `text`, asked for the first time.
    pub fn new(id: impl Into<String>, text: impl Into<String>) -> QueuedTurn {
        QueuedTurn {
            id: id.into(),
            text: text.into(),
            ..QueuedTurn::default()
        }
    }
}
