//! The stop verdict: what was observed after a stop, turned into one answer by one function,
//! [`verdict`], that every caller (Stop, Restart, Delete, idle stop, crash, shutdown) reads the
//! same way (design rule 9).

use super::identity::{Liveness, ProcessIdentity};

/// How "gone" was proven.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proof {
    /// Linux: the root was reaped by the daemon; each known descendant (found by walking
    /// `/proc/<pid>/task/*/children` before the stop, plus orphans the daemon adopted as child
    /// subreaper that carry the bot's marker) was checked by identity.
    ProcessTree,
    /// Linux in a delegated cgroup v2 subtree (design rule 10): the process-tree sequence, then
    /// the bot's cgroup killed whole (`cgroup.kill`) and read empty (`cgroup.events`
    /// `populated 0`), which covers processes botvisor never saw.
    Cgroup,
    /// Elsewhere: the root was reaped; descendants were checked by identity where the system
    /// showed them, with no subreaper to catch escapees.
    BestEffort,
}

impl Proof {
    /// `process-tree`, `cgroup` or `best-effort`.
    pub fn as_str(self) -> &'static str {
        match self {
            Proof::ProcessTree => "process-tree",
            Proof::Cgroup => "cgroup",
            Proof::BestEffort => "best-effort",
        }
    }
}

/// What a stop observed, after escalation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StopObservation {
    /// Whether the root process exited (and was reaped).
    pub root_exited: bool,
    /// Each known descendant and whether it is still alive.
    pub descendants: Vec<(ProcessIdentity, Liveness)>,
    /// How it was checked.
    pub proof: Proof,
}

/// The answer every caller of a stop reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopVerdict {
    /// The root and every known descendant are proven gone.
    Clean {
        /// How.
        proof: Proof,
    },
    /// The root is gone; these descendants are still alive after SIGTERM and SIGKILL.
    RootExited {
        /// The survivors.
        survivors: Vec<ProcessIdentity>,
        /// How the rest was proven.
        proof: Proof,
    },
    /// The root is gone; some descendants could not be checked.
    RootExitedUnverified {
        /// Those that could not be checked, with why.
        unverified: Vec<(ProcessIdentity, String)>,
        /// Those seen alive.
        survivors: Vec<ProcessIdentity>,
        /// How the rest was proven.
        proof: Proof,
    },
    /// The root did not exit: the stop failed and the bot is not released.
    RootAlive,
}

/// Design rule 9 (stop gently, prove, then release): what a stop proved, and whether the bot
/// is released.
///
/// Turns an observation into the verdict.
pub fn verdict(obs: &StopObservation) -> StopVerdict {
    if !obs.root_exited {
        return StopVerdict::RootAlive;
    }
    let survivors: Vec<ProcessIdentity> = obs
        .descendants
        .iter()
        .filter(|(_, l)| *l == Liveness::Alive)
        .map(|(id, _)| id.clone())
        .collect();
    let unverified: Vec<(ProcessIdentity, String)> = obs
        .descendants
        .iter()
        .filter_map(|(id, l)| match l {
            Liveness::Unknown(e) => Some((id.clone(), e.clone())),
            _ => None,
        })
        .collect();
    if !unverified.is_empty() {
        StopVerdict::RootExitedUnverified {
            unverified,
            survivors,
            proof: obs.proof,
        }
    } else if !survivors.is_empty() {
        StopVerdict::RootExited {
            survivors,
            proof: obs.proof,
        }
    } else {
        StopVerdict::Clean { proof: obs.proof }
    }
}

impl StopVerdict {
    /// Whether the bot may start again: its root is proven gone.
    pub fn released(&self) -> bool {
        !matches!(self, StopVerdict::RootAlive)
    }

    /// How it was proven (`None` for a root that did not exit).
    pub fn proof(&self) -> Option<Proof> {
        match self {
            StopVerdict::Clean { proof }
            | StopVerdict::RootExited { proof, .. }
            | StopVerdict::RootExitedUnverified { proof, .. } => Some(*proof),
            StopVerdict::RootAlive => None,
        }
    }

    /// `clean`, `root-exited`, `root-exited-unverified` or `root-alive`.
    pub fn name(&self) -> &'static str {
        match self {
            StopVerdict::Clean { .. } => "clean",
            StopVerdict::RootExited { .. } => "root-exited",
            StopVerdict::RootExitedUnverified { .. } => "root-exited-unverified",
            StopVerdict::RootAlive => "root-alive",
        }
    }

    /// A sentence for `LastError`, the chat and the journal; `None` for a clean stop.
    pub fn report(&self, root_pid: u32) -> Option<String> {
        let pids = |v: &[ProcessIdentity]| {
            v.iter()
                .map(|p| p.pid.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        };
        match self {
            StopVerdict::Clean { .. } => None,
            StopVerdict::RootExited { survivors, .. } => Some(format!(
                "The agent (pid {root_pid}) stopped, but {} of its processes survived SIGKILL: pid {}.",
                survivors.len(),
                pids(survivors)
            )),
            StopVerdict::RootExitedUnverified {
                unverified,
                survivors,
                ..
            } => {
                let list: Vec<String> = unverified
                    .iter()
                    .map(|(p, why)| format!("pid {} ({why})", p.pid))
                    .collect();
                let mut text = format!(
                    "The agent (pid {root_pid}) stopped, but botvisor could not check {}.",
                    list.join(", ")
                );
                if !survivors.is_empty() {
                    text.push_str(&format!(" Still alive: pid {}.", pids(survivors)));
                }
                Some(text)
            }
            StopVerdict::RootAlive => Some(format!(
                "The agent process {root_pid} did not exit after SIGKILL; the bot is not released."
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(pid: u32) -> ProcessIdentity {
        ProcessIdentity {
            pid,
            start_time: 7,
            boot_id: "b".into(),
        }
    }

    fn obs(root_exited: bool, d: Vec<(u32, Liveness)>) -> StopVerdict {
        verdict(&StopObservation {
            root_exited,
            descendants: d.into_iter().map(|(p, l)| (id(p), l)).collect(),
            proof: Proof::ProcessTree,
        })
    }

    #[test]
    fn every_case() {
        assert_eq!(
            obs(true, vec![]),
            StopVerdict::Clean {
                proof: Proof::ProcessTree
            }
        );
        assert_eq!(
            obs(true, vec![(5, Liveness::Gone)]),
            StopVerdict::Clean {
                proof: Proof::ProcessTree
            }
        );
        assert_eq!(
            obs(true, vec![(5, Liveness::Gone), (6, Liveness::Alive)]),
            StopVerdict::RootExited {
                survivors: vec![id(6)],
                proof: Proof::ProcessTree
            }
        );
        assert!(matches!(
            obs(true, vec![(6, Liveness::Alive), (7, Liveness::Unknown("EPERM".into()))]),
            StopVerdict::RootExitedUnverified { ref unverified, ref survivors, .. }
                if unverified.len() == 1 && survivors == &vec![id(6)]
        ));
        assert_eq!(
            obs(false, vec![(5, Liveness::Gone)]),
            StopVerdict::RootAlive
        );
        assert!(!StopVerdict::RootAlive.released());
        assert!(obs(true, vec![(6, Liveness::Alive)]).released());
        assert!(obs(true, vec![]).report(1).is_none());
        assert!(
            obs(true, vec![(6, Liveness::Alive)])
                .report(1)
                .unwrap()
                .contains("pid 6")
        );
    }
}
