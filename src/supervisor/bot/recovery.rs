//! Start-up recovery after a daemon crash (design rule 8, [`crate::supervisor::decide::left_turn`]).

use super::*;

impl Actor {
    /// At daemon start, after the previous run's processes were stopped: every turn it left
    /// open is settled or delivered once ([`decide::left_turn`], design rule 8). A turn that had
    /// begun ends `interrupted`; a message written to a process whose conversation holds it ends
    /// `taken_not_answered`; every other queued message is delivered.
    pub(super) fn recover(&mut self) -> Result<(), BotError> {
        // Permission requests the previous run left open: nobody can answer them now.
        let open = self
            .store
            .read(|c| store::chat::unanswered_permission_requests(c, &self.id))?;
        for (request_id, tool) in open {
            self.add_item(
                "permission_answer",
                None,
                json!({
                    "request_id": request_id, "tool": tool, "behavior": "deny",
                    "by": "botvisord",
                    "message": "botvisord stopped before this request was answered.",
                }),
            );
        }
        let running = self.store.read(|c| store::turns::running(c, &self.id))?;
        for turn_id in running {
            self.apply(vec![Turns::finish(
                &turn_id,
                TurnOutcome::Interrupted,
                "daemon_restarted",
                Some((
                    "system",
                    json!({"text": "botvisord stopped before the turn finished."}),
                )),
                None,
            )]);
        }
        let queued = self.store.read(|c| store::turns::queued(c, &self.id))?;
        let deliveries = self
            .store
            .read(|c| store::deliveries::of_bot(c, &self.id))?;
        let record = self.record();
        let env = self.build_env(&record);
        for turn in queued {
            let delivery = deliveries.get(&turn.id);
            let left = decide::left_turn(
                false,
                record.session_id.as_deref(),
                delivery.map(|d| d.session_id.as_str()),
                |session| {
                    delivery.is_some_and(|d| {
                        self.runtime.conversation_has_message(
                            &env,
                            Path::new(&record.cwd),
                            session,
                            &turn.text,
                            d.written_at,
                        )
                    })
                },
            );
            match left {
                decide::LeftTurn::Unreplayed(UnreplayedFate::Taken { adopt }) => {
                    tracing::info!(bot_id = %self.id, turn_id = %turn.id, "a message the previous run wrote is in the conversation: not sent again");
                    self.apply(vec![Turns::finish(
                        &turn.id,
                        TurnOutcome::TakenNotAnswered,
                        "taken_not_answered",
                        Some(("system", crate::supervisor::core::turns::taken_note())),
                        adopt.as_deref(),
                    )]);
                }
                _ => self.turns.queue.push_back(turn),
            }
        }
        self.publish_queue();
        Ok(())
    }
}
