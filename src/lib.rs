//! botvisor: a per-user OS service that supervises coding-agent CLI sessions ("bots") and serves
//! them over D-Bus as `org.botvisor.Botvisor1`.
//!
//! "Design rule N" and "rule N", wherever they are cited, are the numbered rules of
//! `docs/design.md`. The code that keeps a rule begins its doc comment with `Design rule N`, and
//! `docs/architecture.md` lists those places (a test holds the two together).
//!
//! The data flows one way (see `docs/architecture.md` and the design):
//! D-Bus call → [`dbus`] → [`supervisor`] (one actor per bot) → [`runtime`] (argv, resume
//! decision, stream-json codec) → [`process`] (spawn, read lines, stop). A CLI stdout line flows
//! back: [`runtime`] parse → [`supervisor`] → [`store`] commit → [`dbus`] signal.

pub mod config;
pub mod cost;
pub mod daemon;
pub mod dbus;
pub mod files;
pub mod logging;
pub mod preview;
pub mod process;
pub mod profile;
pub mod queued;
pub mod remote;
pub mod runtime;
pub mod schedule;
pub mod sizes;
pub mod store;
pub mod supervisor;
pub mod systemd;
pub mod text;
pub mod time;
pub mod worktree;
