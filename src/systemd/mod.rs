//! botvisord under a systemd user manager (issue 47: a running turn survives botvisord itself).
//!
//! Where botvisord runs as the user unit `scripts/install.sh` installs (`botvisord.service`,
//! with `FileDescriptorStoreMax=` and `NotifyAccess=main`), a restart, an upgrade or a crash of
//! the daemon no longer stops the agents:
//!
//! - each agent runs in a transient scope of its own, `botvisor-bot-<id>.scope` under
//!   `botvisor.slice`, asked of the user manager over its D-Bus API ([`api`], [`life`]), so
//!   that stopping the service touches no agent;
//! - each agent's pipes (stdin, stdout, stderr) and a pidfd are kept in the service's file
//!   descriptor store from its launch until its stop ([`fdstore`]): a new botvisord takes them
//!   back from `LISTEN_FDS` and reads on from where the stream stands;
//! - a restart is told from a stop by the unit's queued job ([`life::Keeper::restarting`]);
//! - the kernel's boot id and the daemon's invocation are recorded, so that a reboot is never
//!   taken for a restart.
//!
//! Elsewhere (botvisord from a terminal, a desktop without systemd, macOS) [`life::Survival`]
//! says why not, and a restart still ends the turns (each taken message asked again by the next
//! botvisord, issue 45).

pub mod api;
pub mod fdstore;
pub mod life;
pub mod timers;
