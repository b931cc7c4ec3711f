//! Agent processes: spawn one in its own process group, read its stdout line by line, watch its
//! exit, know its descendants by identity, stop it gently and prove what is gone.

pub mod attach;
pub mod cgroup;
pub mod identity;
pub mod launch_error;
pub mod marked;
pub mod pressure;
pub mod signal;
pub mod spawn;
pub mod stop;
pub mod subreaper;
pub mod tree;
pub mod usage;
pub mod verdict;

pub use identity::{Liveness, ProcessIdentity};
pub use signal::signal_group;
pub use spawn::{ExitInfo, ProcEvent, ProcessHandle, spawn};
pub use verdict::{Proof, StopObservation, StopVerdict, verdict};
