//! A turn's life: it begins (the replay records the session, design rule 3), ends with its
//! result, or is settled when its process is gone (design rule 8); one durable outcome each.

use super::{Actor, bot_env};
use crate::process;
use crate::process::identity::ProcessIdentity;
use crate::supervisor::core::Inflight;
use crate::supervisor::core::interrupt;
use crate::supervisor::core::limits;
use std::path::Path;
use std::time::Duration;

impl Actor {
    /// Whether the transcript of a session id exists now, for this bot's CLI (its environment
    /// and working directory), as a closure the core can call; the environment is built only if
    /// it is called.
    pub(super) fn transcript_check(&self) -> impl Fn(&str) -> bool + use<> {
        let record = self.record();
        let config = self.shared.config.clone();
        let runtime = self.shared.runtime.clone();
        move |session_id: &str| {
            let env = bot_env(&config, &record);
            runtime.transcript_exists(&env, Path::new(&record.cwd), session_id)
        }
    }

    /// At the actor's start: a usage limit recorded by an earlier run holds again, until its
    /// reset (or a retry when it is not known).
    pub(super) fn resume_limit(&mut self) {
        let Some((kind, resets_at)) = self.record().limit else {
            return;
        };
        let (cost, budget) = {
            let v = self.view.read().unwrap_or_else(|p| p.into_inner());
            (v.record.spend.cost_nanos, v.budget())
        };
        let times = super::limit_times(&self.shared.config);
        match limits::resumed(&kind, resets_at, unix_now(), times, cost, budget) {
            limits::Resumed::Wait(wait) => {
                self.core.limit_for(wait, std::time::Instant::now());
            }
            limits::Resumed::Credentials | limits::Resumed::Budget => {}
            limits::Resumed::Lift => {
                let running = self.proc.is_some();
                self.apply(limits::lifted(running));
            }
        }
    }

    /// A closure that says whether the conversation a message in flight went to holds it (the
    /// runtime's transcript, written since the message was), for the core's rule-8 decisions.
    pub(super) fn conversation_holds(&self) -> impl FnOnce(&Inflight) -> bool + use<> {
        let record = self.record();
        let config = self.shared.config.clone();
        let runtime = self.shared.runtime.clone();
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

    /// What the conversation's file holds of the message in flight (issue 25), for a stop's
    /// settling: read only when asked.
    pub(super) fn conversation_look(
        &self,
    ) -> impl FnOnce(&Inflight) -> Option<crate::runtime::TakenTurn> + use<> {
        let record = self.record();
        let config = self.shared.config.clone();
        let runtime = self.shared.runtime.clone();
        move |inf: &Inflight| {
            let env = bot_env(&config, &record);
            runtime.taken_turn(
                &env,
                Path::new(&record.cwd),
                &inf.session,
                &inf.turn.text,
                inf.written,
            )
        }
    }

    /// Stops what an interrupted turn left running, by identity (SIGTERM, `stop_grace_s`,
    /// SIGKILL), and says in the chat what was stopped and what survived (reason
    /// `interrupted_processes`).
    pub(super) async fn stop_left_by_interrupt(&mut self, turn: &str, left: Vec<ProcessIdentity>) {
        tracing::info!(bot_id = %self.id, turn_id = %turn, count = left.len(), "stopping what the interrupted turn left running");
        let grace = Duration::from_secs_f64(self.shared.config.stop_grace_s);
        let stopped = process::stop::stop_by_identity(&left, grace).await;
        let note = interrupt::stopped_note(&stopped);
        if note["survivors"].as_array().is_some_and(|s| !s.is_empty()) {
            tracing::warn!(bot_id = %self.id, turn_id = %turn, "{}", note["text"]);
        }
        self.add_item("system", Some(turn), note);
    }
}

/// Now, in Unix seconds.
pub(super) fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
