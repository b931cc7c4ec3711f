//! What the real CLIs were seen to do, measured on the versions under test and printed
//! (`cargo test --test facts -- --nocapture`): the facts botvisor relies on, each asserted, so that
//! a new CLI version that changes one fails here first (`docs/cli-versions.md`).
//!
//! `claude` needs `BOTVISOR_TEST_CLAUDE_BIN`, `codex` needs `BOTVISOR_TEST_CODEX_BIN`.

mod claude;
mod codex;
