//! Watchdogs (design rule 15): what happens when one fires ([`crate::supervisor::core::watchdogs`] keeps
//! the deadlines).

use super::Actor;
use crate::supervisor::core::stop::StopReason;
use crate::supervisor::core::timeouts;
use crate::supervisor::core::watchdogs::Expired;

impl Actor {
    /// A watchdog caught a CLI that stopped answering: say so (chat item, `LastError`, journal)
    /// and act.
    pub(super) async fn on_watchdog(&mut self, expired: Expired) {
        match expired {
            Expired::Start => {
                tracing::warn!(bot_id = %self.id, "the agent printed nothing within start_timeout_s; stopping it");
                let recorded = self.record().session_id;
                let holds = self.conversation_holds();
                self.close_open_prompts("The turn ended before this request was answered.");
                let effects = timeouts::start_timed_out(
                    &mut self.core.turns,
                    self.shared.config.start_timeout_s,
                    recorded.as_deref(),
                    holds,
                );
                self.apply(effects);
                self.stop_process(StopReason::StartTimeout).await;
            }
            Expired::Interrupt(turn) => {
                let grace = self.shared.config.interrupt_grace_s;
                let Some(effects) =
                    timeouts::interrupt_timed_out(&mut self.core.turns, &turn, grace)
                else {
                    return;
                };
                tracing::warn!(bot_id = %self.id, turn_id = %turn, "the agent did not end the turn within interrupt_grace_s; stopping it");
                // Every item of the turn before its end: a question left open is closed first.
                self.close_open_prompts("The turn ended before this request was answered.");
                self.apply(effects);
                self.stop_process(StopReason::InterruptTimeout).await;
            }
            Expired::Control(request_id) => {
                let Some(p) = self.core.process.as_mut() else {
                    return;
                };
                let effects = p
                    .controls
                    .timed_out(&request_id, self.shared.config.control_timeout_s);
                if !effects.is_empty() {
                    tracing::warn!(bot_id = %self.id, %request_id, "a live setting was not answered (control_timeout_s)");
                }
                self.apply(effects);
            }
        }
    }
}
