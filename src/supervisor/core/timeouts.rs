//! What a watchdog's end or a refused handshake means, with no I/O (design rule 15: never stuck;
//! rule 8: the turn waiting ends once, visibly). The deadlines themselves are kept by
//! [`super::watchdogs::Watchdogs`]; the shell stops the process after these effects.

use super::effect::{CommitBuilder, Effect, Publish, Write};
use super::records::said_error;
use super::turns::{Inflight, Turns};

/// The CLI printed nothing within `start_timeout_s` of its launch: the error is said (reason
/// `start_timeout`), the waiting turn fails ([`Turns::start_timed_out`]), and the bot is parked:
/// what else waits, waits for a client's Send or Restart (no restart loop).
pub fn start_timed_out(
    turns: &mut Turns,
    start_timeout_s: f64,
    recorded: Option<&str>,
    holds: impl FnOnce(&Inflight) -> bool,
) -> Vec<Effect> {
    let text = format!(
        "The agent printed nothing within {start_timeout_s} s of its launch (start_timeout_s); \
         botvisor stopped it. Send again to retry; if it keeps happening, check the CLI and the \
         bot's environment."
    );
    let mut effects = vec![said_error(&text, Some("start_timeout"))];
    effects.extend(turns.start_timed_out(recorded, holds));
    effects.push(Effect::Park(true));
    effects
}

/// The CLI refused to open its conversation (`error`, in its words): said (reason
/// `open_failed`), the waiting turn fails ([`Turns::start_failed`]), and the bot is parked until a
/// client sends or restarts. The shell stops the process.
pub fn open_failed(
    turns: &mut Turns,
    error: &str,
    recorded: Option<&str>,
    holds: impl FnOnce(&Inflight) -> bool,
) -> Vec<Effect> {
    let text = format!("The agent could not open its conversation: {error}");
    let mut effects = vec![said_error(&text, Some("open_failed"))];
    effects.extend(turns.start_failed("open_failed", recorded, holds));
    effects.push(Effect::Park(true));
    effects
}

/// The interrupt's grace for `turn` ended. `None` when that turn is no longer in flight (it ended
/// in time): nothing to do. Otherwise `LastError` says so, the turn ends `interrupted` (reason
/// `interrupt_timeout`, [`Turns::interrupt_timed_out`]), and the shell stops the process; waiting
/// messages go to its next start, in the same conversation.
pub fn interrupt_timed_out(
    turns: &mut Turns,
    turn: &str,
    interrupt_grace_s: f64,
) -> Option<Vec<Effect>> {
    if turns.inflight.as_ref().is_none_or(|i| i.turn.id != turn) {
        return None;
    }
    let mut text = format!(
        "The agent did not end the turn within {interrupt_grace_s} s of the interrupt \
         (interrupt_grace_s); botvisor stopped it."
    );
    if !turns.queue.is_empty() {
        text.push_str(" Waiting messages go to its next start, in the same conversation.");
    }
    let mut c = CommitBuilder::default();
    c.write(Write::LastError(text.clone()))
        .then(Publish::LastError(text.clone()));
    let mut effects: Vec<Effect> = c.build().into_iter().collect();
    effects.extend(turns.interrupt_timed_out(&text));
    Some(effects)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::supervisor::core::QueuedTurn;
    use crate::supervisor::core::decide::TurnOutcome;

    fn turns(ids: &[&str]) -> Turns {
        let mut t = Turns::default();
        for id in ids {
            t.queue(QueuedTurn {
                id: (*id).to_owned(),
                text: String::new(),
                ..QueuedTurn::default()
            });
        }
        t
    }

    use crate::supervisor::core::effect::finished_turns as ended;

    #[test]
    fn rule_15_a_silent_start_fails_the_waiting_turn_once_and_parks_the_bot() {
        let mut t = turns(&["a", "b"]);
        t.deliver("s", std::time::SystemTime::UNIX_EPOCH);
        let effects = start_timed_out(&mut t, 30.0, Some("s"), |_| false);
        assert_eq!(ended(&effects), [("a".into(), TurnOutcome::Error)]);
        assert_eq!(effects.last(), Some(&Effect::Park(true)));
        assert_eq!(t.queue.len(), 1, "what else waits, waits");
    }

    #[test]
    fn a_refused_handshake_fails_the_turn_waiting_for_it_and_parks_the_bot() {
        let mut t = turns(&["a"]);
        let effects = open_failed(&mut t, "no such thread", None, |_| false);
        assert_eq!(ended(&effects), [("a".into(), TurnOutcome::Error)]);
        assert!(effects.contains(&Effect::Park(true)));
        assert!(matches!(&effects[0], Effect::Commit { publish, .. }
            if publish.contains(&Publish::LastError(
                "The agent could not open its conversation: no such thread".into()))));
    }

    #[test]
    fn rule_15_an_interrupt_not_honoured_ends_the_turn_interrupted() {
        let mut t = turns(&["a", "b"]);
        t.deliver("s", std::time::SystemTime::UNIX_EPOCH);
        t.replayed("s", Some("s"), Some("s"), |_| false);
        let effects = interrupt_timed_out(&mut t, "a", 5.0).unwrap();
        assert_eq!(ended(&effects), [("a".into(), TurnOutcome::Interrupted)]);
        assert!(matches!(&effects[0], Effect::Commit { writes, .. }
            if matches!(&writes[0], Write::LastError(e) if e.contains("Waiting messages"))));
    }

    #[test]
    fn an_interrupt_timeout_for_a_turn_that_ended_in_time_does_nothing() {
        let mut t = turns(&["a"]);
        t.deliver("s", std::time::SystemTime::UNIX_EPOCH);
        assert_eq!(interrupt_timed_out(&mut t, "other", 5.0), None);
        assert!(t.inflight.is_some());
    }

    #[test]
    fn an_interrupt_timeout_with_nothing_waiting_does_not_speak_of_waiting_messages() {
        let mut t = turns(&["a"]);
        t.deliver("s", std::time::SystemTime::UNIX_EPOCH);
        let effects = interrupt_timed_out(&mut t, "a", 5.0).unwrap();
        assert!(matches!(&effects[0], Effect::Commit { writes, .. }
            if matches!(&writes[0], Write::LastError(e) if !e.contains("Waiting messages"))));
    }
}
