//! The optional per-bot memory limit (`memory_max`, issue 15): a bot's own limit (the `CreateBot`
//! option, stored with the bot) or else the daemon's default (config `memory_max`), written to
//! `memory.max` of the bot's cgroup before its agent starts. It needs the memory controller
//! delegated to botvisord ([`memory_controller`]): elsewhere a bot's own limit is refused
//! (`NotSupported`, nothing is created) and the default is ignored, said once in the journal.

use crate::config::Config;
use crate::process::cgroup::Containment;
use crate::store::BotRecord;

use super::BotError;

pub use crate::config::values::{MAX_MEMORY_MAX, MIN_MEMORY_MAX, NO_LIMIT};

/// Whether `containment` lets botvisord limit a bot's memory: `Ok` when each bot has its own
/// cgroup with the `memory` controller enabled, else why not (for an error or the journal).
pub fn memory_controller(containment: &Containment) -> Result<(), String> {
    match containment {
        Containment::Cgroup(s) if s.has("memory") => Ok(()),
        Containment::Cgroup(s) => Err(format!(
            "the memory controller is not delegated to botvisord (its cgroup {} gives the \
             controllers `{}`; with systemd, a user unit with `Delegate=yes` on a system whose \
             user manager has the memory controller gives it)",
            s.root.display(),
            s.controllers.join(" ")
        )),
        Containment::ProcessTree { reason } => Err(format!(
            "botvisord has no cgroup of its own to limit a bot's memory in ({reason})"
        )),
    }
}

/// Decides `CreateBot`'s `memory_max` (bytes): `Ok(None)` without a limit, `Ok(Some(bytes))` to
/// store with the bot. Errors: `InvalidArgument` out of range, `NotSupported` (saying why) where
/// the memory controller is not delegated.
pub fn decide(requested: Option<u64>, containment: &Containment) -> Result<Option<u64>, BotError> {
    let Some(bytes) = requested else {
        return Ok(None);
    };
    let Some(bytes) = crate::config::values::check_memory_max("option `memory_max`", bytes)
        .map_err(BotError::InvalidArgument)?
    else {
        return Ok(None);
    };
    memory_controller(containment).map_err(|why| {
        BotError::NotSupported(format!(
            "option `memory_max` cannot be applied: {why}; create the bot without it"
        ))
    })?;
    Ok(Some(bytes))
}

/// The limit in force for a bot, in bytes: its own, else the daemon's default; `None` where
/// the memory controller is not delegated or neither is set.
pub fn in_force(own: Option<u64>, default: Option<u64>, containment: &Containment) -> Option<u64> {
    memory_controller(containment).ok()?;
    own.or(default)
}

/// Says once in the journal, at start, which limits cannot be applied here: the config default
/// and the limits stored with `bots` (created where the memory controller was delegated). They
/// are ignored while the daemon runs like this.
pub fn report_at_start(config: &Config, bots: &[BotRecord], containment: &Containment) {
    let Err(why) = memory_controller(containment) else {
        return;
    };
    if let Some(bytes) = config.memory_max {
        tracing::warn!(memory_max = bytes, "config `memory_max` is ignored: {why}");
    }
    for b in bots.iter().filter(|b| b.memory_max.is_some()) {
        tracing::warn!(
            bot_id = %b.id,
            memory_max = b.memory_max,
            "the bot's `memory_max` is not applied while botvisord runs like this: {why}"
        );
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::process::cgroup::Subtree;

    fn cgroup(controllers: &[&str]) -> Containment {
        Containment::Cgroup(Subtree {
            root: PathBuf::from("/sys/fs/cgroup/app.slice/botvisord.service"),
            controllers: controllers.iter().map(|c| c.to_string()).collect(),
        })
    }

    fn process_tree() -> Containment {
        Containment::ProcessTree {
            reason: "the cgroup2 hierarchy is mounted read-only".into(),
        }
    }

    #[test]
    fn a_limit_is_applied_where_the_memory_controller_is_delegated() {
        assert_eq!(
            decide(Some(512 << 20), &cgroup(&["memory", "pids"])),
            Ok(Some(512 << 20))
        );
        assert_eq!(
            in_force(Some(512 << 20), Some(1 << 30), &cgroup(&["memory"])),
            Some(512 << 20),
            "the bot's own limit wins over the default"
        );
        assert_eq!(
            in_force(None, Some(1 << 30), &cgroup(&["memory"])),
            Some(1 << 30)
        );
    }

    #[test]
    fn a_limit_is_refused_without_the_memory_controller_and_says_why() {
        for (containment, says) in [
            (process_tree(), "mounted read-only"),
            (cgroup(&["pids", "cpu"]), "controllers `pids cpu`"),
            (cgroup(&[]), "memory controller is not delegated"),
        ] {
            match decide(Some(512 << 20), &containment) {
                Err(BotError::NotSupported(m)) => assert!(m.contains(says), "{m}"),
                other => panic!("{containment:?}: {other:?}"),
            }
            assert_eq!(in_force(Some(512 << 20), Some(1 << 30), &containment), None);
        }
    }

    #[test]
    fn no_limit_is_never_refused() {
        assert_eq!(decide(None, &process_tree()), Ok(None));
        assert_eq!(decide(Some(NO_LIMIT), &process_tree()), Ok(None));
        assert_eq!(in_force(None, None, &cgroup(&["memory"])), None);
    }

    #[test]
    fn a_limit_out_of_range_is_an_invalid_argument() {
        for bytes in [0, MIN_MEMORY_MAX - 1, MAX_MEMORY_MAX + 1] {
            assert!(
                matches!(
                    decide(Some(bytes), &cgroup(&["memory"])),
                    Err(BotError::InvalidArgument(_))
                ),
                "{bytes}"
            );
        }
        assert_eq!(
            decide(Some(MIN_MEMORY_MAX), &cgroup(&["memory"])),
            Ok(Some(MIN_MEMORY_MAX))
        );
    }
}
