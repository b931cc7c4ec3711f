//! The daemon's integration tests on the real agent CLIs, each run offline against a loopback
//! stand-in for its model API (`support::stand_in_api` for Claude Code's Messages API,
//! `support::responses_api` for Codex's Responses API). The CLIs come from
//! `BOTVISOR_TEST_CLAUDE_BIN` and `BOTVISOR_TEST_CODEX_BIN` (`scripts/install-test-claude.sh`,
//! `scripts/install-test-codex.sh`); without one, its tests are ignored with the reason (build.rs),
//! and with `BOTVISOR_TEST_REQUIRE_CLAUDE`/`…_CODEX` set (CI) they fail instead.
//!
//! `cargo test --test real claude::` runs what CI runs on every pinned Claude Code version;
//! `cargo test --test real codex::` the Codex ones; `ui` needs both, and so does most of
//! `survival` (issue 47: turns through restarts, upgrades and stops of the installed unit, in a
//! real `systemd --user` of the test's own); `schedules` (issue 49) runs there too.

mod claude;
mod codex;
mod schedules;
mod survival;
mod ui;
