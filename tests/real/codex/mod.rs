//! On the real Codex CLI (`codex app-server`).

mod adopt;
mod chat;
mod exactly_once;
mod keep;
mod kills;
mod mcp;
mod once;
mod warm_start;
mod worktrees;
