//! A turn's life: it begins (the replay records the session, design rule 3), ends with its
//! result, or is settled when its process is gone (design rule 8); one durable outcome each.

use super::*;

impl Actor {
    /// The CLI replayed the message in flight: its turn began ([`Turns::replayed`], rule 3).
    pub(super) fn on_replay(&mut self, session_id: Option<String>) {
        let Some(proc) = self.proc.as_ref() else {
            return;
        };
        let launched = proc.protocol.conversation().unwrap_or_default().to_owned();
        let recorded = self.record().session_id;
        // The transcript is looked at only when the CLI reports another id than the launched.
        let exists = self.transcript_check();
        let Some(replayed) = self.turns.replayed(
            &launched,
            session_id.as_deref(),
            recorded.as_deref(),
            exists,
        ) else {
            return;
        };
        let Some(proc) = self.proc.as_mut() else {
            return;
        };
        proc.turn_began = true;
        if let Some(r) = replayed.reported_later {
            tracing::info!(bot_id = %self.id, reported = %r, %launched, "the CLI reports another session id; kept until its transcript exists");
            proc.reported_session = Some(r);
        }
        self.apply(replayed.effects);
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
        self.transcript_check()(session_id)
    }

    /// [`Actor::transcript_exists`] as a closure the core can call; the environment is built
    /// only if it is called.
    pub(super) fn transcript_check(&self) -> impl Fn(&str) -> bool + use<> {
        let record = self.record();
        let config = self.config.clone();
        let runtime = self.runtime.clone();
        move |session_id: &str| {
            let env = bot_env(&config, &record);
            runtime.transcript_exists(&env, Path::new(&record.cwd), session_id)
        }
    }

    /// The CLI reported a turn's result ([`Turns::result`]).
    pub(super) fn on_result(
        &mut self,
        outcome: ResultOutcome,
        payload: Value,
        error: Option<String>,
    ) {
        self.end_streamed_message();
        // A turn that ended (interrupted, failed) while the agent was asking leaves nobody
        // waiting for the answer.
        self.close_open_prompts("The turn ended before this request was answered.");
        let ended = self.turns.result(outcome, &payload, error);
        if let Some(e) = &ended.error
            && let Some(kind) = self.runtime.fatal_reason(e)
        {
            self.fatal = Some(format!("{kind} error: {e}"));
        }
        if ended.succeeded {
            // The agent works again: the next crash starts the backoff from its first step.
            self.crashes.clear();
        }
        self.apply(ended.effects);
        if self.turns.inflight.is_none() && self.proc.as_ref().is_some_and(|p| !p.stopping) {
            self.set_state(State::Idle);
        }
    }

    /// A closure that says whether the conversation a message in flight went to holds it (the
    /// runtime's transcript, written since the message was), for the core's rule-8 decisions.
    pub(super) fn conversation_holds(&self) -> impl FnOnce(&Inflight) -> bool + use<> {
        let record = self.record();
        let config = self.config.clone();
        let runtime = self.runtime.clone();
        move |inf: &Inflight| {
            let env = bot_env(&config, &record);
            runtime.conversation_has_message(
                &env,
                Path::new(&record.cwd),
                &inf.session,
                &inf.turn.text,
                inf.written,
            )
        }
    }

    /// Settles the turn in flight when its process is gone ([`Turns::settle`], design rule 8).
    pub(super) fn settle_inflight(
        &mut self,
        outcome: TurnOutcome,
        reason: &str,
        text: String,
    ) -> Settled {
        if self.turns.inflight.is_none() {
            return Settled::Nothing;
        }
        let recorded = self.record().session_id;
        let holds = self.conversation_holds();
        let (settled, effects) =
            self.turns
                .settle(outcome, reason, text, recorded.as_deref(), holds);
        self.apply(effects);
        settled
    }
}
