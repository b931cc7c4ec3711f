//! Watchdogs (design rule 15): what happens when one fires ([`crate::supervisor::watchdog`] keeps
//! the deadlines).

use super::*;

impl Actor {
    /// A watchdog caught a CLI that stopped answering: say so (chat item, `LastError`, journal)
    /// and act.
    pub(super) async fn on_watchdog(&mut self, expired: Expired) {
        match expired {
            Expired::Start => {
                let text = format!(
                    "The agent printed nothing within {} s of its launch (start_timeout_s); \
                     botvisor stopped it. Send again to retry; if it keeps happening, check \
                     the CLI and the bot's environment.",
                    self.config.start_timeout_s
                );
                tracing::warn!(bot_id = %self.id, "{text}");
                // The waiting turn fails visibly; what else waits, waits for the next Send or
                // Restart (no restart loop).
                let recorded = self.record().session_id;
                let holds = self.conversation_holds();
                let mut effects = vec![lifecycle::said_error(&text, Some("start_timeout"))];
                effects.extend(self.turns.start_timed_out(recorded.as_deref(), holds));
                effects.push(Effect::Park(true));
                self.apply(effects);
                self.stop_process("start timeout").await;
            }
            Expired::Interrupt(turn) => {
                if self
                    .turns
                    .inflight
                    .as_ref()
                    .is_none_or(|i| i.turn.id != turn)
                {
                    return;
                }
                let mut text = format!(
                    "The agent did not end the turn within {} s of the interrupt \
                     (interrupt_grace_s); botvisor stopped it.",
                    self.config.interrupt_grace_s
                );
                if !self.turns.queue.is_empty() {
                    text.push_str(
                        " Waiting messages go to its next start, in the same conversation.",
                    );
                }
                tracing::warn!(bot_id = %self.id, turn_id = %turn, "{text}");
                self.set_last_error(&text);
                let effects = self.turns.interrupt_timed_out(&text);
                self.apply(effects);
                self.stop_process("interrupt timeout").await;
            }
            Expired::Control(request_id) => {
                let Some(proc) = self.proc.as_mut() else {
                    return;
                };
                let effects = proc
                    .controls
                    .timed_out(&request_id, self.config.control_timeout_s);
                if !effects.is_empty() {
                    tracing::warn!(bot_id = %self.id, %request_id, "a live setting was not answered (control_timeout_s)");
                }
                self.apply(effects);
            }
        }
    }
}
