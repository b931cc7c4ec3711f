//! The records and chat items the lifecycle writes, each one commit: a conversation forgotten,
//! an error said, a bot that failed.

use serde_json::json;

use super::effect::{CommitBuilder, Effect, Publish, Write};
use crate::supervisor::core::State;

/// The recorded conversation `old` is forgotten (the next start begins a new one), in one commit
/// with a `system` item that says why: `{"text", "reason", "session_id"}`.
pub fn forget(old: &str, reason: &str, text: String) -> Effect {
    let mut c = CommitBuilder::default();
    c.write(Write::Session(None))
        .then(Publish::SessionId(None))
        .item("system", None, forget_payload(old, reason, &text));
    c.build().expect("a forget writes a row")
}

/// The payload of the `system` item that says the conversation `old` was forgotten:
/// `{"text", "reason", "session_id"}`.
pub fn forget_payload(old: &str, reason: &str, text: &str) -> String {
    json!({"text": text, "reason": reason, "session_id": old}).to_string()
}

/// At a start, the recorded conversation `old` cannot be resumed (design rule 2,
/// [`super::start::decide_start`]): forgotten, with reason `transcript_missing` or
/// `runtime_cannot_resume` (the `runtime`'s name says which could not); or a fresh Restart's
/// forget, not on record yet (reason `fresh_restart`).
pub fn forget_at_start(old: &str, why: &crate::runtime::ForgetReason, runtime: &str) -> Effect {
    use crate::runtime::ForgetReason;
    let (code, why) = match why {
        ForgetReason::FreshRestart => {
            return forget(old, "fresh_restart", fresh_restart_text(old));
        }
        ForgetReason::OnlyUnanswered => {
            return forget(
                old,
                "only_unanswered",
                format!(
                    "The conversation {old} held only a message the agent never answered; it is \
                     asked again in a new conversation."
                ),
            );
        }
        ForgetReason::TranscriptMissing => (
            "transcript_missing",
            "its transcript is not on disk".to_owned(),
        ),
        ForgetReason::RuntimeCannotResume => (
            "runtime_cannot_resume",
            format!("the {runtime} runtime cannot resume"),
        ),
    };
    forget(
        old,
        code,
        format!(
            "The earlier conversation {old} could not be found ({why}); a new conversation began."
        ),
    )
}

/// The `system` item's text of a fresh Restart that forgets the conversation `old`.
pub fn fresh_restart_text(old: &str) -> String {
    format!("Restarted fresh: the conversation {old} is left for good; a new one begins.")
}

/// The agent cannot start (`text` says why; `reason` names it, as `bubblewrap_missing`): the
/// error is said, and the bot pauses until a client sends or restarts ([`Effect::Pause`]).
pub fn start_refused(text: &str, reason: Option<&str>) -> Vec<Effect> {
    vec![said_error(text, reason), Effect::Pause]
}

/// An error the user must see: an `error` item `{"text", "reason"?}` and `LastError`, in one
/// commit.
pub fn said_error(text: &str, reason: Option<&str>) -> Effect {
    let payload = match reason {
        Some(r) => json!({"text": text, "reason": r}),
        None => json!({"text": text}),
    };
    let mut c = CommitBuilder::default();
    c.item("error", None, payload.to_string())
        .write(Write::LastError(text.to_owned()))
        .then(Publish::LastError(text.to_owned()));
    c.build().expect("an error writes rows")
}

/// One chat item of `kind` with no turn (`payload` a JSON object), alone in its commit, published
/// after it.
pub fn item(kind: &str, payload: serde_json::Value) -> Effect {
    let mut c = CommitBuilder::default();
    c.item(kind, None, payload.to_string());
    c.build().expect("an item writes a row")
}

/// The bot becomes `failed` (it waits for a client's Restart, across daemon restarts too); with
/// `waiting` messages, a `system` item (reason `failed_with_queue`) says they wait for it.
pub fn failed(waiting: u32) -> Vec<Effect> {
    let mut effects = Vec::new();
    if waiting > 0 {
        effects.push(item(
            "system",
            json!({
                "text": format!(
                    "{waiting} message(s) wait; this bot takes them to the agent once a client \
                     calls Restart."
                ),
                "reason": "failed_with_queue",
                "queued": waiting,
            }),
        ));
    }
    effects.push(Effect::State(State::Failed));
    effects
}

/// A client's Stop with messages waiting (their turns' ids, `waiting`): a `system` item (reason
/// `stopped_with_queue`, with `queued` and `turn_ids`, so a client following one of them knows)
/// says they no longer go by themselves, not even at a limit's reset, but at the next `Send` or
/// `Restart`. Nothing with none waiting.
pub fn stopped_with_queue(waiting: &[String]) -> Vec<Effect> {
    if waiting.is_empty() {
        return Vec::new();
    }
    let turn_ids = waiting;
    let waiting = waiting.len();
    vec![item(
        "system",
        json!({
            "text": format!(
                "The bot was stopped: {waiting} waiting message(s) no longer go by themselves (not \
                 even at a usage limit's reset); they go at the next Send or Restart."
            ),
            "reason": "stopped_with_queue",
            "queued": waiting,
            "turn_ids": turn_ids,
        }),
    )]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn has_item(effects: &[Effect], kind: &str, reason: &str) -> bool {
        effects.iter().any(|e| {
            matches!(e, Effect::Commit { writes, .. } if writes.iter().any(|w| matches!(w,
                Write::Chat { kind: k, payload, .. } if k == kind && payload.contains(reason))))
        })
    }

    #[test]
    fn an_error_is_said_in_one_commit_item_first_then_last_error() {
        let Effect::Commit { writes, publish } = said_error("boom", None) else {
            panic!("a commit");
        };
        assert!(matches!(&writes[0], Write::Chat { kind, payload, .. }
            if kind == "error" && payload == r#"{"text":"boom"}"#));
        assert_eq!(writes[1], Write::LastError("boom".into()));
        assert_eq!(
            publish,
            [
                crate::supervisor::core::Publish::Item(0),
                crate::supervisor::core::Publish::LastError("boom".into())
            ]
        );
    }

    #[test]
    fn a_forgotten_conversation_is_cleared_with_an_item_naming_it() {
        let Effect::Commit { writes, .. } = forget("s", "why", "text".into()) else {
            panic!("a commit");
        };
        assert_eq!(writes[0], Write::Session(None));
        let Write::Chat { payload, .. } = &writes[1] else {
            panic!("an item");
        };
        let v: serde_json::Value = serde_json::from_str(payload).unwrap();
        assert_eq!(v["session_id"], "s");
        assert_eq!(v["reason"], "why");
    }

    #[test]
    fn a_bot_that_fails_says_how_many_messages_wait_for_its_restart() {
        assert_eq!(failed(0), [Effect::State(State::Failed)]);
        let with = failed(2);
        assert!(has_item(&with, "system", "failed_with_queue"));
        assert_eq!(with.last(), Some(&Effect::State(State::Failed)));
    }

    #[test]
    fn rule_2_a_conversation_that_cannot_resume_is_forgotten_with_its_reason() {
        use crate::runtime::ForgetReason;
        for (why, code, words) in [
            (
                ForgetReason::TranscriptMissing,
                "transcript_missing",
                "its transcript is not on disk",
            ),
            (
                ForgetReason::RuntimeCannotResume,
                "runtime_cannot_resume",
                "the codex runtime cannot resume",
            ),
        ] {
            let effect = forget_at_start("s", &why, "codex");
            let effects = [effect];
            assert!(has_item(&effects, "system", code));
            assert!(has_item(&effects, "system", words));
        }
    }

    #[test]
    fn a_refused_start_is_said_and_pauses_the_bot() {
        let effects = start_refused("cannot start the agent: no codex", Some("x"));
        assert!(has_item(&effects, "error", "no codex"));
        assert_eq!(effects.last(), Some(&Effect::Pause));
    }

    #[test]
    fn a_stop_with_waiting_messages_says_they_no_longer_go_by_themselves() {
        assert!(stopped_with_queue(&[]).is_empty());
        let said = stopped_with_queue(&["t1".into(), "t2".into()]);
        assert!(has_item(&said, "system", "stopped_with_queue"));
        assert!(has_item(&said, "system", r#""turn_ids":["t1","t2"]"#));
    }
}
