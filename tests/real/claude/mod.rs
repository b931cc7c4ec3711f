//! On the real Claude Code CLI.

mod adopt;
mod chat;
mod ctl;
mod ctl_terminals;
mod desktop;
mod exactly_once;
mod mcp;
mod once;
mod sessions;
mod stand_ins;
mod supervision;
mod usage_limits;
mod warm_start;
mod worktrees;
