//! A turn's life: it begins (the replay records the session, design rule 3), ends with its
//! result, or is settled when its process is gone (design rule 8); one durable outcome each.

use super::*;

impl Actor {
    pub(super) fn on_replay(&mut self, session_id: Option<String>) {
        let Some(proc) = self.proc.as_ref() else {
            return;
        };
        if self.inflight.as_ref().is_none_or(|i| i.replayed) {
            return;
        }
        let launched = proc.protocol.conversation().unwrap_or_default().to_owned();
        let record = self.record();
        // The transcript is looked at only when the CLI reports another id than the launched.
        let choice = decide::session_to_record(&launched, session_id.as_deref(), |r| {
            self.transcript_exists(r)
        });
        let sid = match &choice {
            SessionChoice::Reported(r) => r.clone(),
            SessionChoice::Launched | SessionChoice::LaunchedUntil(_) => launched,
        };
        let Some(proc) = self.proc.as_mut() else {
            return;
        };
        proc.turn_began = true;
        if let SessionChoice::LaunchedUntil(r) = choice {
            tracing::info!(bot_id = %self.id, reported = %r, launched = %sid, "the CLI reports another session id; kept until its transcript exists");
            proc.reported_session = Some(r);
        }
        let Some(inf) = self.inflight.as_mut() else {
            return;
        };
        inf.replayed = true;
        let turn_id = inf.turn.id.clone();
        let changed = record.session_id.as_deref() != Some(sid.as_str());
        let r = self.store.tx(|tx| {
            store::turns::set_running(tx, &turn_id)?;
            store::deliveries::forget(tx, &self.id, &turn_id)?;
            if changed {
                store::bots::set_session(tx, &self.id, Some(&sid))?;
            }
            Ok(())
        });
        if let Err(e) = r {
            tracing::error!(bot_id = %self.id, error = %e, "cannot record the turn start");
            return;
        }
        if changed {
            tracing::info!(bot_id = %self.id, session_id = %sid, "session recorded");
            self.update(vec!["SessionId"], |v| v.record.session_id = Some(sid));
        }
        self.publish_queue();
    }

    /// A session id the CLI reported instead of the launched one is recorded once its transcript
    /// exists (design rule 3, [`decide::session_to_record`]); until then the launched one stays.
    pub(super) fn adopt_reported_session(&self, proc: &Proc) {
        let Some(reported) = proc.reported_session.as_deref() else {
            return;
        };
        if self.record().session_id.as_deref() == Some(reported)
            || !self.transcript_exists(reported)
        {
            return;
        }
        match self
            .store
            .tx(|tx| store::bots::set_session(tx, &self.id, Some(reported)))
        {
            Ok(()) => {
                tracing::info!(bot_id = %self.id, session_id = %reported, "session recorded: the reported conversation's transcript exists");
                self.update(vec!["SessionId"], |v| {
                    v.record.session_id = Some(reported.to_owned())
                });
            }
            Err(e) => tracing::error!(bot_id = %self.id, error = %e, "cannot record the session"),
        }
    }

    /// A session id the CLI reported at a turn's end (it may have forked or cleared its
    /// conversation): once a turn began in this process, it is recorded when its transcript
    /// exists, at once or at the process's end.
    pub(super) fn note_reported_session(&mut self, reported: Option<String>) {
        let Some(proc) = self.proc.as_mut() else {
            return;
        };
        if !proc.turn_began {
            return;
        }
        if let Some(r) =
            reported.filter(|r| !r.is_empty() && Some(r.as_str()) != proc.protocol.conversation())
        {
            proc.reported_session = Some(r);
        }
        if let Some(proc) = &self.proc {
            self.adopt_reported_session(proc);
        }
    }

    /// Whether the transcript of `session_id` exists now, for this bot's CLI (its environment
    /// and working directory).
    pub(super) fn transcript_exists(&self, session_id: &str) -> bool {
        let record = self.record();
        let env = self.build_env(&record);
        self.runtime
            .transcript_exists(&env, Path::new(&record.cwd), session_id)
    }

    pub(super) fn on_result(
        &mut self,
        outcome: ResultOutcome,
        payload: Value,
        error: Option<String>,
    ) {
        // A result belongs to our message once it was replayed; an error result before the
        // replay also settles it (design rule 4's fallback: the turn fails visibly).
        let ours = match &self.inflight {
            Some(i) if i.replayed => true,
            Some(_) => outcome == ResultOutcome::Error,
            None => false,
        };
        let turn = if ours { self.inflight.take() } else { None };
        self.end_streamed_message();
        // A turn that ended (interrupted, failed) while the agent was asking leaves nobody
        // waiting for the answer.
        self.close_open_prompts("The turn ended before this request was answered.");
        let interrupted = turn.is_some()
            && self.interrupting.is_some()
            && self.interrupting.as_deref() == turn.as_ref().map(|t| t.turn.id.as_str());
        if interrupted {
            self.interrupting = None;
        }
        let error = if interrupted { None } else { error };
        if let Some(e) = &error
            && let Some(kind) = self.runtime.fatal_reason(e)
        {
            self.fatal = Some(format!("{kind} error: {e}"));
        }
        let turn_id = turn.as_ref().map(|t| t.turn.id.clone());
        if let Some(t) = &turn_id {
            self.watch.turn_ended(t);
        }
        if outcome == ResultOutcome::Success && turn_id.is_some() {
            // The agent works again: the next crash starts the backoff from its first step.
            self.crashes.clear();
        }
        let outcome = match outcome {
            _ if interrupted => TurnOutcome::Interrupted,
            ResultOutcome::Success => TurnOutcome::Success,
            ResultOutcome::Error => TurnOutcome::Error,
        };
        let reason = if interrupted {
            "interrupt".to_owned()
        } else {
            payload
                .get("subtype")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let finished = turn_id.as_deref().map(|t| {
            turn_finished_payload(t, outcome, &reason, error.as_deref().unwrap_or_default())
        });
        let payload = payload.to_string();
        let r = self.store.tx(|tx| {
            let item = store::chat::append(tx, &self.id, "result", turn_id.as_deref(), &payload)?;
            let mut last = None;
            if let (Some(t), Some(f)) = (&turn_id, &finished) {
                store::turns::finish(tx, t, outcome.as_str())?;
                last = Some(store::chat::append(
                    tx,
                    &self.id,
                    "turn_finished",
                    Some(t),
                    f,
                )?);
            }
            if let Some(e) = &error {
                store::bots::set_last_error(tx, &self.id, e)?;
            }
            Ok((item, last))
        });
        match r {
            Ok((item, last)) => {
                self.publish_item(&item);
                if let Some(e) = error {
                    self.update(vec!["LastError"], |v| v.record.last_error = e);
                }
                if let (Some(t), Some(last)) = (&turn_id, &last) {
                    self.publish_item(last);
                    self.publish_turn(t, outcome.as_str());
                }
            }
            Err(e) => tracing::error!(bot_id = %self.id, error = %e, "cannot record a result"),
        }
        if self.inflight.is_none() && self.proc.as_ref().is_some_and(|p| !p.stopping) {
            self.set_state(State::Idle);
        }
        self.publish_queue();
    }

    /// Ends a turn durably and then says so: its status, an optional chat item (`kind`,
    /// `payload`), its typed `turn_finished` item, and (with `adopt`) the conversation that took
    /// it, in one transaction; then the items, `SessionId` and `TurnFinished` are published
    /// (rules 1 and 8: every turn ends with one durable outcome).
    pub(super) fn finish_turn(
        &self,
        turn_id: &str,
        outcome: TurnOutcome,
        reason: &str,
        item: Option<(&str, Value)>,
        adopt: Option<&str>,
    ) {
        let text = item
            .as_ref()
            .and_then(|(_, p)| p.get("text").and_then(Value::as_str))
            .unwrap_or_default()
            .to_owned();
        let item = item.map(|(k, p)| (k, p.to_string()));
        let finished = turn_finished_payload(turn_id, outcome, reason, &text);
        let r = self.store.tx(|tx| {
            store::turns::finish(tx, turn_id, outcome.as_str())?;
            store::deliveries::forget(tx, &self.id, turn_id)?;
            if let Some(s) = adopt {
                store::bots::set_session(tx, &self.id, Some(s))?;
            }
            let first = match &item {
                Some((kind, payload)) => Some(store::chat::append(
                    tx,
                    &self.id,
                    kind,
                    Some(turn_id),
                    payload,
                )?),
                None => None,
            };
            let last =
                store::chat::append(tx, &self.id, "turn_finished", Some(turn_id), &finished)?;
            Ok((first, last))
        });
        match r {
            Ok((first, last)) => {
                if let Some(s) = adopt {
                    tracing::info!(bot_id = %self.id, session_id = %s, "session recorded: the conversation took the message");
                    self.update(vec!["SessionId"], |v| {
                        v.record.session_id = Some(s.to_owned())
                    });
                }
                if let Some(i) = &first {
                    self.publish_item(i);
                }
                self.publish_item(&last);
                self.publish_turn(turn_id, outcome.as_str());
            }
            Err(e) => tracing::error!(bot_id = %self.id, error = %e, "cannot settle a turn"),
        }
    }

    /// What becomes of a message written to a process that is gone before it replayed it: the
    /// transcript of the conversation it went to decides ([`decide::unreplayed_message`]).
    pub(super) fn unreplayed_fate(&self, inf: &Inflight) -> UnreplayedFate {
        let record = self.record();
        let env = self.build_env(&record);
        let holds = self.runtime.conversation_has_message(
            &env,
            Path::new(&record.cwd),
            &inf.session,
            &inf.turn.text,
            inf.written,
        );
        decide::unreplayed_message(record.session_id.as_deref(), &inf.session, holds)
    }

    /// Settles the turn in flight when its process is gone: a replayed one ends with `outcome`
    /// (and `text` in an `error` or `system` item); one not yet replayed goes back to the head of
    /// the queue, unless its conversation holds it already (design rule 8, decided by
    /// [`decide::unreplayed_message`]).
    pub(super) fn settle_inflight(
        &mut self,
        outcome: TurnOutcome,
        reason: &str,
        text: String,
    ) -> Settled {
        let Some(inf) = self.inflight.take() else {
            return Settled::Nothing;
        };
        if !inf.replayed {
            // Not replayed, but maybe taken: the CLI writes the message into its transcript
            // before it replays it. Sent again, the conversation would hold it twice.
            return match self.unreplayed_fate(&inf) {
                UnreplayedFate::Resend => {
                    self.queue.push_front(inf.turn);
                    self.publish_queue();
                    Settled::Requeued
                }
                UnreplayedFate::Taken { adopt } => {
                    self.finish_turn(
                        &inf.turn.id,
                        TurnOutcome::TakenNotAnswered,
                        "taken_not_answered",
                        Some(("system", taken_note())),
                        adopt.as_deref(),
                    );
                    self.publish_queue();
                    Settled::Taken
                }
            };
        }
        let kind = if outcome == TurnOutcome::Crashed {
            "error"
        } else {
            "system"
        };
        let item = (!text.is_empty()).then(|| (kind, json!({ "text": text })));
        self.finish_turn(&inf.turn.id, outcome, reason, item, None);
        Settled::Ended
    }
}
