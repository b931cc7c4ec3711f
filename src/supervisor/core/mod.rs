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
//! Not yet one door (issue 48): beside [`BotCore::handle`] the shell still calls `steps.rs`'s
//! methods and some free functions (`decide`, `limits`, `spend`) and applies their results
//! itself. The state is the core's alone (`docs/architecture.md`, "Where a bot's state
//! changes").
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
