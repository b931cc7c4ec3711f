//! Agent processes: spawn one in its own process group, read its stdout line by line, watch its
//! exit, and stop it gently (close stdin, SIGTERM the group, grace, SIGKILL).

pub mod spawn;
pub mod stop;

pub use spawn::{ExitInfo, ProcEvent, ProcessHandle, spawn};
pub use stop::signal_group;
