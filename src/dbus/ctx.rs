//! What every object of the D-Bus service shares ([`Ctx`]): the bots, the caller check, who
//! hears signals, the calls whose effects wait for their answer, the answers carrying a
//! descriptor, and the permits of the calls that run in a task of their own. Made by
//! `service.rs`; named by every object, so that no object names the service.

use std::sync::Arc;

use super::audience::Audience;
use super::caller::CallerCheck;
use crate::supervisor::Supervisor;

/// What every object of the service shares.
pub struct Ctx {
    /// The bots.
    pub supervisor: Arc<Supervisor>,
    /// The caller check of design rule 14: who each connection on the bus is.
    pub caller: Arc<CallerCheck>,
    /// Who hears the signals (design rule 14 for signals).
    pub audience: Audience,
    /// The calls not yet answered whose effects wait for their answer: a deleted bot's object
    /// goes (with `InterfacesRemoved`) only once its `Delete` was answered.
    pub replies: super::replies::Replies,
    /// The answers carrying a file descriptor, until the bus could refuse them.
    pub descriptors: Arc<super::descriptors::DescriptorReplies>,
    /// Permits for the calls that run in a task of their own ([`super::guard::Detached`]).
    pub detached: Arc<tokio::sync::Semaphore>,
    /// `GetManagedObjects`' answer, kept encoded bot by bot.
    pub managed: super::bot::EncodedBots,
    /// `ListBots`' answer, kept while no bot came or went.
    pub listed: super::paths::ListedPaths,
}
