//! The lifecycle core: the bot's rules as plain data and functions, with no I/O.
//!
//! Each function takes the core's state and one input (a client's command, a runtime event, a
//! process's exit, a deadline) and returns the state's next value plus a list of [`Effect`]s:
//! commit these rows then publish these items, update this property. The async shell
//! (`supervisor::bot`) executes the effects in order and feeds their results back; it holds no
//! decision. The shape follows the sans-I/O cores of `quinn-proto` and `rustls` (a core that is
//! driven, never drives) and Horust's `handle_event`, which returns events instead of acting.
//!
//! - [`adopt`]: whether a conversation begun elsewhere may be adopted (issue 28, rules 2
//!   and 7).
//! - [`worktree`]: a bot's git worktree: its default branch and whether `DeleteWith` may
//!   remove it (issue 28).
//! - [`bot_core`]: one bot's core state and timers, with the one next deadline of them all.
//! - [`machine`]: the driven machine: [`Input`] in through `BotCore::handle`, effects out through
//!   `BotCore::poll_effect`, what only the shell can read asked through [`Facts`] (issue 27).
//! - [`due`]: a deadline that came: streamed text, a look after a tool, a watchdog, the
//!   backoff, the idle deadline, a limit's end, a look at a holder.
//! - [`events`]: what the running CLI says, read by the core: a chat line, a replay, a result
//!   (a usage limit, an expired login, a turn's end), a control answer, streamed text.
//! - [`turns`]: the queue, the message in flight, and what a replay, a result, a crash or a lost
//!   conversation means for them (design rules 3, 4, 7, 8).
//! - [`commands`]: a client's commands that change no process's life: a message queued, a
//!   budget, a live setting, an interrupt (issue 27).
//! - [`control`]: live settings sent to the CLI and what their answer, refusal or silence means
//!   (design rules 6 and 15).
//! - [`crash`]: after a crash, a restart with a growing backoff or, in a crash loop, none
//!   (design rule 11).
//! - [`exit`]: what a process's exit means: released after a stop, a conversation that never
//!   started (lost, or an id in use), a clean end or a crash (design rules 4, 8, 11); and the
//!   exit as an input of the machine: decided, the tree cleaned up by the shell, then what
//!   follows and a crash's backoff (issue 27).
//! - [`lifecycle`]: what the bot keeps between processes, and what an exit, a lost
//!   conversation, a stop, a crash, a Restart or a turn's result
//!   means for the turn, the session record, the state and the next start (design rules 3, 4, 8,
//!   9, 11).
//! - [`run`]: one process as the core knows it: how it was launched and what it showed.
//! - [`records`]: the records and items the lifecycle writes (a conversation forgotten, an error
//!   said, a bot that failed).
//! - [`spend`]: what a turn cost (nano-dollars, tokens) from what the CLI tells, and the budget's
//!   steps (issue 24).
//! - [`limits`]: a plan's usage limit or an expired login as a state (`limited`,
//!   `login_required`): the refused message waits, the reset or new credentials let it go
//!   (issue 24).
//! - [`budget`]: the bot's budget as a hold once its cost reaches it (issue 24).
//! - [`left_turns`]: what the previous run left after a daemon crash: ended once or delivered once
//!   (design rule 8).
//! - [`taken`]: a message the conversation took and botvisor did not see answered: its answer
//!   read back, the message asked again without the unanswered attempt, or ended unanswered
//!   (issue 25, design rule 8).
//! - [`attempt`]: a failed attempt (a usage limit, an expired login, an API error) dropped
//!   from the conversation before the next message goes (issue 45, design rule 8).
//! - [`timeouts`]: what a watchdog's end or a refused handshake means (design rule 15).
//! - [`held`]: a conversation another process holds: named, waited for, never a crash
//!   (design rule 7, issue 25).
//! - [`idle`]: when a bot is idle and whether its idle deadline stops it (design rules 12, 13).
//! - [`evict`]: under memory pressure, which idle bots may be stopped and in which order (least
//!   recently used first), and what a bot asked to stop does (issue 31, rules 12, 13).
//! - [`prompts`]: a permission request recorded before it is signalled, and closed as denied
//!   when nobody can answer it any more.
//! - [`pump`]: after every input, whether to start the agent and write it the next message.
//! - [`snapshots`]: when to look for descendants again after a tool (design rule 9).
//! - [`stop`]: the stop sequence: SIGTERM, the grace, SIGKILL, the bounded wait (design rule 9).
//! - [`stream`]: streamed text let out at most once per interval.
//! - [`effect`]: what the core asks of its shell.
//! - [`decide`]: the single decisions the others share (how a turn ended, what becomes of a
//!   message not replayed, which conversation to record, whether an exit was the CLI's choice).
//! - [`start`]: design rule 2, the resume decision every launch goes through.
//! - [`state`]: the bot's [`State`].
//! - [`watchdogs`]: the deadlines of rule 15 (a launch, an interrupt, a control request).
//! - [`retry`]: what a person is told when the CLI retries a model request, and how often.
//!
//! The core is self-contained: it names no shell (`supervisor::bot`, the store, D-Bus, the
//! configuration), no tokio, no file system, no process and no clock; time is always an
//! argument. The vocabulary it shares with the runtimes (`crate::runtime`'s events and
//! requests), a process's exit status and identity, and `crate::text` are the only other parts
//! of the crate it names. `tests::the_core_names_no_shell` holds it to that.

pub mod adopt;
pub mod attempt;
pub mod bot_core;
pub mod budget;
pub mod commands;
pub mod control;
pub mod crash;
pub mod decide;
pub mod due;
pub mod effect;
pub mod events;
pub mod evict;
pub mod exit;
pub mod held;
pub mod idle;
pub mod interrupt;
pub mod left_turns;
pub mod lifecycle;
pub mod limit_warning;
pub mod limits;
pub mod machine;
pub mod prompts;
pub mod pump;
pub mod reattach;
pub mod records;
pub mod retry;
pub mod run;
pub mod snapshots;
pub mod spend;
pub mod start;
pub mod state;
pub mod steps;
pub mod stop;
pub mod stream;
pub mod taken;
pub mod timeouts;
pub mod turns;
pub mod watchdogs;
pub mod worktree;

pub use bot_core::{BotCore, Due, Process};
pub use effect::{CommitBuilder, Effect, Publish, Setting, Write};
pub use machine::{Bounds, Facts, Input};
pub use state::State;
pub use turns::{Ended, Inflight, QueuedTurn, Replayed, Settled, Turns};

#[cfg(test)]
mod tests {
    /// What a core file may name of the rest of the crate: the core itself, the runtimes'
    /// vocabulary (events, requests, how a session starts), a process's exit and identity (data,
    /// not the functions that read `/proc`), and text helpers.
    const ALLOWED: &[&str] = &[
        "crate::supervisor::core",
        "crate::runtime::{",
        "crate::runtime::ResultOutcome",
        "crate::runtime::SessionStart",
        "crate::runtime::ForgetReason",
        "crate::runtime::ControlRequest",
        "crate::runtime::RuntimeEvent",
        "crate::runtime::PermissionAnswer",
        "crate::runtime::LimitReport",
        "crate::runtime::TakenTurn",
        "crate::runtime::Cut",
        "crate::process::ExitInfo",
        "crate::process::identity::{Liveness, ProcessIdentity}",
        "crate::process::identity::ProcessIdentity",
        "crate::text",
    ];

    /// What no core file may name outside its tests: the shell's runtime, I/O and clocks.
    const FORBIDDEN: &[&str] = &[
        "tokio",
        "zbus",
        "rusqlite",
        "std::fs",
        "std::process",
        "std::net",
        "std::thread",
        "std::env",
        "Instant::now",
        "SystemTime::now",
        "super::super::",
    ];

    /// Every `.rs` file under `dir`, recursively.
    fn rust_files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                rust_files(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }

    #[test]
    fn the_core_names_no_shell() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/supervisor/core");
        let mut files = Vec::new();
        rust_files(&dir, &mut files);
        let mut found = Vec::new();
        for file in &files {
            let name = file.strip_prefix(&dir).unwrap().display().to_string();
            // A file's tests in a file of their own: `<file>/tests.rs` or `<file>/tests/`.
            if name.ends_with("/tests.rs") || name.contains("/tests/") {
                continue;
            }
            let text = std::fs::read_to_string(file).unwrap();
            // A file's own tests start at its first `#[cfg(test)]`: they may use clocks.
            let code = text.split("#[cfg(test)]").next().unwrap_or_default();
            for (n, line) in code.lines().enumerate() {
                let code_part = line.split("//").next().unwrap_or_default();
                for word in FORBIDDEN {
                    if code_part.contains(word) {
                        found.push(format!("{name}:{}: names `{word}`: {line}", n + 1));
                    }
                }
                let mut rest = code_part;
                while let Some(at) = rest.find("crate::") {
                    let path = &rest[at..];
                    if !ALLOWED.iter().any(|a| path.starts_with(a)) {
                        found.push(format!("{name}:{}: names {path}", n + 1));
                    }
                    rest = &rest[at + "crate::".len()..];
                }
            }
        }
        assert!(
            found.is_empty(),
            "the core must name no shell, store, tokio, file system or clock:\n{}",
            found.join("\n")
        );
    }
}
