//! The daemon's integration tests that need no real agent CLI: `botvisord` on a private
//! `dbus-daemon` per test, with the scripted fake CLI (`tests/fake_cli/fake_claude.py`) for the
//! faults a real CLI will not produce on demand, or with no CLI at all (the API's contract, the
//! service, storage, storms, `botvisorctl`, `install.sh`, and `install.sh` into a real
//! `systemd --user`: `user_manager`). Three subjects keep one real-CLI test
//! each beside their fake ones, because they share the subject's helpers: `access` (another user
//! on the bus), `cgroup` (a real CLI's background job in the bot's cgroup) and `notify` (dunst
//! answering the real CLI); each is ignored, with the reason, when `BOTVISOR_TEST_CLAUDE_BIN` is
//! not set.
//!
//! `cargo test --test fake`; one subject: `cargo test --test fake storms::`.

mod access;
mod api;
mod cgroup;
mod codegen;
mod contract;
mod costs;
mod ctl;
mod doc_names;
mod environment;
mod fleet;
mod group_commit;
mod install;
mod layers;
mod mcp;
mod memory;
mod notify;
mod notify_stand_in;
mod promises;
mod remote;
mod repeats;
mod schedules;
mod scopes;
mod service;
mod sessions;
mod sizes;
mod stand_ins;
mod storage_faults;
mod storms;
mod supervision;
mod ui;
mod user_manager;
mod warm_start;
mod watchdogs;
mod worktrees;
