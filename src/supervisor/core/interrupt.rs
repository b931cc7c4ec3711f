//! What an interrupted turn left running, with no I/O (issue 23: after `Interrupt` on a Codex
//! bot, the turn ended `interrupted` and the command it ran, `sleep 300` under bubblewrap,
//! lived on). A user reads "interrupted" as "the command was stopped": the processes that
//! appeared under the agent while the turn ran, and still run when it ends, are stopped by
//! identity (SIGTERM, grace, SIGKILL) and the chat says which, and which survived.

use serde_json::{Value, json};

use crate::process::identity::{Liveness, ProcessIdentity};

/// The processes of `now` (the agent's descendants as the interrupted turn ended) that were
/// not among `before` (its descendants when the turn began, at its replay): what the turn
/// started. The agent's own helpers from before the turn are left alone; a turn interrupted
/// before its replay has no `before`, and nothing is stopped for it.
pub fn left_by_turn(before: &[ProcessIdentity], now: Vec<ProcessIdentity>) -> Vec<ProcessIdentity> {
    now.into_iter().filter(|id| !before.contains(id)).collect()
}

/// The payload of the `system` item (reason `interrupted_processes`) that says what was stopped:
/// `pids` (every process the turn left) and `survivors` (those still alive, or that could not
/// be checked, after SIGKILL).
pub fn stopped_note(stopped: &[(ProcessIdentity, Liveness)]) -> Value {
    let pids: Vec<u32> = stopped.iter().map(|(id, _)| id.pid).collect();
    let survivors: Vec<u32> = stopped
        .iter()
        .filter(|(_, l)| *l != Liveness::Gone)
        .map(|(id, _)| id.pid)
        .collect();
    let text = if survivors.is_empty() {
        format!(
            "The interrupted turn left {} process(es) running ({}); botvisord stopped them.",
            pids.len(),
            list(&pids)
        )
    } else {
        format!(
            "The interrupted turn left {} process(es) running ({}); {} still run(s) after \
             SIGKILL ({}).",
            pids.len(),
            list(&pids),
            survivors.len(),
            list(&survivors)
        )
    };
    json!({"text": text, "reason": "interrupted_processes", "pids": pids, "survivors": survivors})
}

fn list(pids: &[u32]) -> String {
    pids.iter()
        .map(|p| format!("pid {p}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(pid: u32, start_time: u64) -> ProcessIdentity {
        ProcessIdentity {
            pid,
            start_time,
            boot_id: "b".into(),
        }
    }

    #[test]
    fn only_what_appeared_during_the_turn_is_the_turns() {
        let before = [id(10, 1), id(11, 1)];
        // 11 is a new process on a reused pid: another identity.
        let left = left_by_turn(&before, vec![id(10, 1), id(11, 9), id(12, 5)]);
        assert_eq!(left, [id(11, 9), id(12, 5)]);
        assert!(left_by_turn(&before, before.to_vec()).is_empty());
    }

    #[test]
    fn the_note_names_what_was_stopped_and_what_survived() {
        let note = stopped_note(&[(id(5, 1), Liveness::Gone), (id(6, 1), Liveness::Alive)]);
        assert_eq!(note["reason"], "interrupted_processes");
        assert_eq!(note["pids"], json!([5, 6]));
        assert_eq!(note["survivors"], json!([6]));
        assert!(note["text"].as_str().unwrap().contains("still run"));
        let clean = stopped_note(&[(id(5, 1), Liveness::Gone)]);
        assert_eq!(clean["survivors"], json!([]));
        assert!(clean["text"].as_str().unwrap().contains("stopped them"));
    }
}
