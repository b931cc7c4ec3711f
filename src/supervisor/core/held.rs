//! A conversation another process holds (design rule 7, issue 25), with no I/O: the user's
//! terminal, another program or the vendor's own background agent has it open. botvisor does not
//! start a second writer on it (two writers fork one transcript): the bot waits in state
//! `held_elsewhere`, its messages queued, names the holder (`HeldBy`), looks at it every
//! [`LOOK_EVERY`], and goes on by itself when it exits. It is never counted as a crash or a lost
//! conversation. `Restart` with `fork` continues in a copy instead.

use std::time::{Duration, Instant};

use serde_json::json;

use super::effect::Effect;
use super::records::item;
use super::state::State;
use crate::process::identity::ProcessIdentity;

/// How often a bot held elsewhere looks whether the holder is still there.
pub const LOOK_EVERY: Duration = Duration::from_secs(1);

/// The process that holds the bot's conversation, as the bot waits for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    /// The conversation.
    pub session_id: String,
    /// The holder, by identity.
    pub identity: ProcessIdentity,
    /// What it is, in words.
    pub what: String,
    /// Its command line (bounded by the runtime).
    pub command: String,
    /// When to look at it next.
    pub look_at: Instant,
}

impl Held {
    /// The `HeldBy` property: `pid N: what: command`.
    pub fn describe(&self) -> String {
        format!("pid {}: {}: {}", self.identity.pid, self.what, self.command)
    }
}

/// Design rule 7 (one owner per conversation) on the whole machine: a conversation another
/// process holds is not resumed beside it.
///
/// A start found the conversation held by `held`: the bot says so (a `system` item, reason
/// `held_elsewhere`, with `session_id`, `pid`, `what`, `command`), shows `HeldBy` and waits in
/// state `held_elsewhere`; no process starts.
pub fn held(held: &Held) -> Vec<Effect> {
    vec![
        item(
            "system",
            json!({
                "text": format!(
                    "The conversation {} is open in another process ({}, pid {}); botvisor \
                     does not start a second writer on it. The messages wait and go on by \
                     themselves when it exits; Restart with fork continues in a copy instead.",
                    held.session_id, held.what, held.identity.pid
                ),
                "reason": "held_elsewhere",
                "session_id": held.session_id,
                "pid": held.identity.pid,
                "what": held.what,
                "command": held.command,
            }),
        ),
        Effect::HeldBy(held.describe()),
        Effect::State(State::HeldElsewhere),
    ]
}

/// The holder exited: the bot says so (reason `held_elsewhere_ended`), `HeldBy` is empty, and it
/// is `stopped`, so that the waiting messages go (the next start looks for a holder again).
pub fn released(held: &Held) -> Vec<Effect> {
    vec![
        item(
            "system",
            json!({
                "text": format!(
                    "The other process on the conversation {} (pid {}) exited; the waiting \
                     messages go on.",
                    held.session_id, held.identity.pid
                ),
                "reason": "held_elsewhere_ended",
                "session_id": held.session_id,
                "pid": held.identity.pid,
            }),
        ),
        Effect::HeldBy(String::new()),
        Effect::State(State::Stopped),
    ]
}

/// The bot stops waiting without the holder's exit (a client's Stop, Restart or a fresh
/// conversation): `HeldBy` is empty; the state is the caller's.
pub fn dropped() -> Vec<Effect> {
    vec![Effect::HeldBy(String::new())]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::supervisor::core::effect::Write;

    fn held_by() -> Held {
        Held {
            session_id: "s".into(),
            identity: ProcessIdentity {
                pid: 42,
                start_time: 7,
                boot_id: "b".into(),
            },
            what: "Claude Code in a terminal".into(),
            command: "claude --resume s".into(),
            look_at: Instant::now(),
        }
    }

    fn reasons(effects: &[Effect]) -> Vec<String> {
        crate::supervisor::core::effect::writes(effects)
            .filter_map(|w| match w {
                Write::Chat { payload, .. } => serde_json::from_str::<serde_json::Value>(payload)
                    .ok()
                    .and_then(|v| v["reason"].as_str().map(str::to_owned)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn rule_7_a_held_conversation_is_named_and_waited_for_never_a_crash() {
        let effects = held(&held_by());
        assert_eq!(reasons(&effects), ["held_elsewhere"]);
        assert!(effects.contains(&Effect::HeldBy(
            "pid 42: Claude Code in a terminal: claude --resume s".into()
        )));
        assert_eq!(effects.last(), Some(&Effect::State(State::HeldElsewhere)));
        assert!(
            !effects.iter().any(|e| matches!(e, Effect::Start)),
            "no crash backoff, no start"
        );
    }

    #[test]
    fn rule_7_the_holders_exit_lets_the_messages_go() {
        let effects = released(&held_by());
        assert_eq!(reasons(&effects), ["held_elsewhere_ended"]);
        assert!(effects.contains(&Effect::HeldBy(String::new())));
        assert_eq!(effects.last(), Some(&Effect::State(State::Stopped)));
    }
}
