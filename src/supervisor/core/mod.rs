//! The lifecycle core: the bot's rules as plain data and functions, with no I/O.
//!
//! Each function takes the core's state and one input (a client's command, a runtime event, a
//! process's exit, a deadline) and returns the state's next value plus a list of [`Effect`]s:
//! commit these rows then publish these items, update this property. The async shell
//! (`supervisor::bot`) executes the effects in order and feeds their results back; it holds no
//! decision. The shape follows the sans-I/O cores of `quinn-proto` and `rustls` (a core that is
//! driven, never drives) and Horust's `handle_event`, which returns events instead of acting.
//!
//! - [`turns`]: the queue, the message in flight, and what a replay, a result, a crash or a lost
//!   conversation means for them (design rules 3, 4, 7, 8).
//! - [`control`]: live settings sent to the CLI and what their answer, refusal or silence means
//!   (design rules 6 and 15).
//! - [`crash`]: after a crash, a restart with a growing backoff or, in a crash loop, none
//!   (design rule 11).
//! - [`exit`]: what a process's exit means: released after a stop, a conversation that never
//!   started (lost, or an id in use), a clean end or a crash (design rules 4, 8, 11).
//! - [`lifecycle`]: what the bot keeps between processes, and what an exit, a lost
//!   conversation, a stop, a crash, a Restart or a turn's result
//!   means for the turn, the session record, the state and the next start (design rules 3, 4, 8,
//!   9, 11).
//! - [`run`]: one process as the core knows it: how it was launched and what it showed.
//! - [`records`]: the records and items the lifecycle writes (a conversation forgotten, an error
//!   said, a bot that failed).
//! - [`recovery`]: what the previous run left after a daemon crash: ended once or delivered once
//!   (design rule 8).
//! - [`timeouts`]: what a watchdog's end or a refused handshake means (design rule 15).
//! - [`idle`]: when a bot is idle and whether its idle deadline stops it (design rules 12, 13).
//! - [`prompts`]: a permission request recorded before it is signalled, and closed as denied
//!   when nobody can answer it any more.
//! - [`pump`]: after every input, whether to start the agent and write it the next message.
//! - [`snapshots`]: when to look for descendants again after a tool (design rule 9).
//! - [`stop`]: the stop sequence: SIGTERM, the grace, SIGKILL, the bounded wait (design rule 9).
//! - [`stream`]: streamed text let out at most once per interval.
//! - [`effect`]: what the core asks of its shell.
//!
//! The pure decisions they use live in `supervisor::decide` and `runtime::decide_start`.

pub mod control;
pub mod crash;
pub mod effect;
pub mod exit;
pub mod idle;
pub mod interrupt;
pub mod lifecycle;
pub mod prompts;
pub mod pump;
pub mod records;
pub mod recovery;
pub mod run;
pub mod snapshots;
pub mod stop;
pub mod stream;
pub mod timeouts;
pub mod turns;

pub use effect::{CommitBuilder, Effect, Publish, Setting, Write};
pub use turns::{Ended, Inflight, Replayed, Settled, Turns};
