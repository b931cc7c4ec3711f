//! The lifecycle core: the bot's rules as plain data and functions, with no I/O.
//!
//! Each function takes the core's state and one input (a client's command, a runtime event, a
//! process's exit, a deadline) and returns the state's next value plus a list of [`Effect`]s:
//! commit these rows then publish these items, update this property. The async shell
//! (`supervisor::bot`) executes the effects in order and feeds their results back. The shape follows the sans-I/O cores of `quinn-proto` and `rustls` (a core that is
//! driven, never drives) and Horust's `handle_event`, which returns events instead of acting.
//!
//! Where to start reading: [`machine`] (the machine's [`Input`]s and what it asks the shell
//! through [`Facts`]), [`bot_core`] (one bot's core state and its one next deadline) and
//! [`effect`] (what it asks of the shell). The other modules are one concept each, named for it;
//! each says what it decides in its own first line, which rustdoc's module list shows. They fall
//! in four groups: a turn's life (`turns`, `events`, `attempt`, `taken`, `left_turns`, `decide`,
//! `prompts`, `stream`, `retry`); a process's life (`start`, `pump`, `exit`, `crash`, `stop`,
//! `snapshots`, `watchdogs`, `timeouts`, `held`, `idle`, `evict`, `lifecycle`, `run`,
//! `records`, `due`); what a client changes (`commands`, `control`, `adopt`, `worktree`); and
//! conditions that hold a bot (`limits`, `budget`, `spend`, `state`).
//!
//! One door (issue 48): the modules are private, and what the rest of the crate may name is the
//! list of `pub use` below: the machine ([`BotCore`], [`Input`], [`Effect`], [`Facts`],
//! [`State`], [`Cmd`]), what its inputs and effects carry, the questions that change nothing
//! (`steps.rs`: the pump's plan, the bot's activity), two pure decisions on what only the shell
//! sees (what an interrupt left running, and its words) and the words of a forget. Every change to the bot's core state is an input
//! to [`BotCore::handle`], but the idle deadline ([`BotCore::rearm_idle`], re-armed once per
//! turn of the actor's loop). Six modules stay public because the rest of the crate decides
//! with them outside any one bot's machine: [`spend`] (money and tokens, also the store's),
//! [`prompts`] (the prompt book clients answer through), [`stop`] (the stop sequence the shell
//! carries out), [`worktree`] and [`adopt`] (at a bot's creation and deletion) and [`evict`]
//! (which bot the supervisor stops under memory pressure).
//!
//! The core is self-contained: it names no shell (`supervisor::bot`, the store, D-Bus, the
//! configuration), no tokio, no file system, no process and no clock; time is always an
//! argument. The vocabulary it shares with the runtimes (`crate::runtime`'s events and
//! requests), a process's exit status and identity, and `crate::text` are the only other parts
//! of the crate it names. `tests::the_core_names_no_shell` holds it to that.

pub mod adopt;
mod attempt;
mod bot_core;
mod budget;
mod commands;
mod control;
mod crash;
mod decide;
mod due;
mod effect;
mod events;
pub mod evict;
mod exit;
mod held;
mod idle;
mod interrupt;
mod left_turns;
mod lifecycle;
mod limit_warning;
mod limits;
mod look;
mod machine;
pub mod prompts;
mod pump;
mod reattach;
mod records;
mod retry;
mod run;
mod snapshots;
pub mod spend;
mod start;
mod state;
mod steps;
pub mod stop;
mod stream;
mod taken;
mod timeouts;
mod turns;
mod watchdogs;
pub mod worktree;

// The door: the machine, what goes in and what comes out. Nothing else of the modules above
// is reachable from outside the core; the compiler keeps the shell to this list.
pub use bot_core::{BotCore, Due, Process, Settings};
pub use commands::Cmd;
pub use effect::{Awaited, CommitBuilder, Effect, Publish, Request, Setting, Streamed, Write};
pub use look::{Look, Looked};
pub use machine::{Bounds, Facts, Input, Words};
pub use state::{OnRecord, Standing, State};
// What the inputs and effects carry, and the questions the shell asks between inputs
// (`steps.rs`).
pub use exit::ExitSettings;
pub use held::{Held, LOOK_EVERY};
pub use idle::Activity;
pub use left_turns::{Left, LeftRunning};
pub use lifecycle::{CrashLimits, RestartMode, Run};
pub use limits::{CONTINUE_TEXT, LOGIN, LimitTimes};
pub use pump::PumpPlan;
pub use start::StartDecision;
pub use turns::{Inflight, QueuedTurn};
// Pure decisions on what only the shell sees: what an interrupt left running, and the words
// said of it.
pub use interrupt::{left_by_turn, stopped_note};
// The words of a conversation forgotten, for the one said outside a launch (a fresh Restart
// before the bot's actor runs).
pub use records::{forget_payload, fresh_restart_text};

#[cfg(test)]
mod tests {
    /// What a core file may name of the rest of the crate: the core itself, the runtimes'
    /// vocabulary (events, requests, how a session starts), a process's exit and identity (data,
    /// not the functions that read `/proc`), text helpers, and the units of cost.
    const ALLOWED: &[&str] = &[
        "crate::cost",
        "crate::queued",
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
