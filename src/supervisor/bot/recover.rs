//! Start-up recovery after a daemon crash: the shell reads what the previous run left and carries
//! out `left_turns::recover` (design rule 8).

use super::Actor;
use crate::store;
use crate::supervisor::BotError;
use crate::supervisor::core::{Left, LeftRunning};

impl Actor {
    /// At daemon start, after the previous run's processes were stopped: every turn it left
    /// open is settled or delivered once (`left_turns::recover`).
    ///
    pub(super) fn recover(&mut self) -> Result<(), BotError> {
        let left = self.left()?;
        self.handle(crate::supervisor::core::Input::Recover(left));
        Ok(())
    }

    /// What the previous run left of this bot's turns in the store: its open requests, its
    /// turns `running` and `queued` (with where each was delivered).
    pub(super) fn left(&self) -> Result<Left, BotError> {
        // One read: the four as one moment left them.
        let (open_prompts, running, queued, deliveries) = self.shared.store.read(|c| {
            Ok((
                store::chat::unanswered_permission_requests(c, &self.id)?,
                store::turns::running(c, &self.id)?,
                store::turns::queued(c, &self.id)?,
                store::deliveries::of_bot(c, &self.id)?,
            ))
        })?;
        let left = Left {
            open_prompts,
            running: running
                .into_iter()
                .map(|r| LeftRunning {
                    turn: r.turn,
                    sent_at: r.sent_at,
                    in_chat: r.answer_items,
                    worked: r.worked,
                })
                .collect(),
            queued: queued
                .into_iter()
                .map(|t| {
                    let sent = deliveries
                        .get(&t.id)
                        .map(|d| (d.session_id.clone(), d.written_at));
                    (t, sent)
                })
                .collect(),
        };
        Ok(left)
    }
}
