//! The rules of a process's life and end, case by case, with no bus, database or process:
//! what an exit means (`exits`), and crashes, restarts, stops and lost conversations
//! (`lives`).

mod exits;
mod lives;

use super::*;
use crate::process::ExitInfo;
use crate::runtime::ResultOutcome;
use crate::supervisor::core::QueuedTurn;
use crate::supervisor::core::effect::Write;
use crate::supervisor::core::exit::Exit;

pub(super) fn turn(id: &str) -> QueuedTurn {
    QueuedTurn {
        id: id.to_owned(),
        text: format!("text of {id}"),
        ..QueuedTurn::default()
    }
}

/// A turn `a` written to the conversation `s`, replayed when `began`, and `b` waiting.
pub(super) fn in_flight(began: bool) -> Turns {
    let mut t = Turns::default();
    t.queue(turn("a"));
    t.queue(turn("b"));
    t.deliver("s", std::time::SystemTime::UNIX_EPOCH).unwrap();
    if began {
        t.replayed("s", Some("s"), Some("s"), |_| false).unwrap();
    }
    t
}

pub(super) fn resumed(began: bool) -> Run {
    Run {
        turn_began: began,
        ..Run::new(SessionStart::Resume("s".into()))
    }
}

pub(super) fn exit(status: ExitInfo, recorded: Option<&str>, in_flight: bool) -> Exit<'_> {
    Exit {
        status,
        stderr: "",
        stderr_fatal: None,
        stderr_in_use: None,
        lived: Duration::from_secs(60),
        fresh_window: Duration::from_secs(5),
        recorded,
        in_flight,
        redo_limit: 3,
    }
}

pub(super) fn killed() -> ExitInfo {
    ExitInfo {
        code: None,
        signal: Some(9),
    }
}

pub(super) fn code(c: i32) -> ExitInfo {
    ExitInfo {
        code: Some(c),
        signal: None,
    }
}

/// Every chat item's `(kind, reason)` the effects commit, in order.
pub(super) fn items(effects: &[Effect]) -> Vec<(String, String)> {
    crate::supervisor::core::effect::writes(effects)
        .filter_map(|w| match w {
            Write::Chat { kind, payload, .. } => {
                let v: serde_json::Value = serde_json::from_str(payload).unwrap();
                let reason = v.get("reason").and_then(|r| r.as_str()).unwrap_or_default();
                Some((kind.clone(), reason.to_owned()))
            }
            _ => None,
        })
        .collect()
}

pub(super) fn has_item(effects: &[Effect], kind: &str, reason: &str) -> bool {
    items(effects).iter().any(|(k, r)| k == kind && r == reason)
}

pub(super) use crate::supervisor::core::effect::states;

pub(super) use crate::supervisor::core::effect::finished_turns as finished;

pub(super) fn forgets(effects: &[Effect]) -> bool {
    effects.iter().any(
        |e| matches!(e, Effect::Commit { writes, .. } if writes.contains(&Write::Session(None))),
    )
}

/// The result of turn `a`: a success, or an error.
pub(super) fn result(succeeded: bool) -> Ended {
    Ended {
        effects: Vec::new(),
        turn_id: Some("a".into()),
        succeeded,
        error: (!succeeded).then(|| "failed".into()),
        spend: Default::default(),
    }
}

pub(super) const LIMITS: CrashLimits = CrashLimits {
    window: Duration::from_secs(60),
    limit: 3,
};
