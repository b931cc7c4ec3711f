//! A failed attempt is never left in the conversation the model is sent (issue 45: the model
//! never sees a message twice), with no I/O.
//!
//! When a turn's message reached the conversation and the model gave no answer to it (a usage
//! limit, an expired login, an API error), the CLI keeps the attempt: Claude Code 2.1.328 joins
//! its text with the next message's into one user turn ("first job\n first job" when the same
//! message goes again), Codex 0.171.0 keeps it as a failed turn whose message the next request
//! carries again. So such an attempt is dropped before anything more goes: the agent is stopped
//! (its process holds the attempt in memory; a gentle stop also writes its file whole), the
//! conversation's file names where to cut ([`crate::runtime::Runtime::taken_turn`]), the cut is
//! recorded with the bot (`bots.attempt_cut`, so that a daemon restart keeps it), and the next
//! start resumes the conversation without the attempt (Claude Code: `--resume-session-at` with
//! `--resume-drops-turn`; Codex: `thread/revert` with `beforeTurnId`), whichever message goes
//! next: the one a hold put back first in the queue, or the user's next one after an error. The
//! cut ends once a turn began on the conversation it made, or with a start that is not a resume.

use super::bot_core::BotCore;
use super::effect::{CommitBuilder, Effect, Write};
use super::machine::Facts;
use super::stop::StopReason;
use super::turns::Inflight;
use crate::runtime::Cut;

impl BotCore {
    /// Design rule 8 ("nothing sent twice") for an attempt that failed: the agent holding it
    /// is stopped (`StopReason::Recut`); once it is, [`BotCore::recut`] reads where to cut.
    /// `inf` is the turn as it was in flight; nothing is done unless its message reached the
    /// conversation (replayed) and the agent did no work on it (no tool called). `goes_again`:
    /// the message itself waits to go again (a hold put it back), so whatever the attempt holds
    /// goes; otherwise (the turn ended) only an attempt the model said nothing to is dropped.
    pub(super) fn drop_attempt(&mut self, inf: Inflight, goes_again: bool) {
        if !inf.replayed || inf.worked || (!goes_again && inf.answer_items > 0) {
            return;
        }
        tracing::info!(
            turn_id = %inf.turn.id,
            "the attempt failed with no answer; the agent restarts without it before the next message"
        );
        self.recut = Some(inf);
        self.emit([Effect::Stop(StopReason::Recut)]);
    }

    /// The agent that held a failed attempt is stopped: where the conversation's file cuts it
    /// becomes the next start's ([`BotCore::attempt`]), durably. A file that does not hold the
    /// attempt (the CLI never wrote it down) needs no cut.
    pub(super) fn recut(&mut self, facts: &dyn Facts) {
        let Some(inf) = self.recut.take() else {
            return;
        };
        let Some(cut) = facts.taken_turn(&inf).and_then(|t| t.cut) else {
            tracing::info!(turn_id = %inf.turn.id, "the conversation's file does not hold the failed attempt");
            return;
        };
        self.set_attempt(Some(cut));
    }

    /// The cut the next start makes when no waiting message asks for one of its own.
    pub(super) fn attempt_cut(&self) -> Option<Cut> {
        self.attempt.clone()
    }

    /// A process started with `launched` (its resume's cut, `None` for none) and `resumed`
    /// (whether it resumes the recorded conversation): a start that is not a resume leaves the
    /// attempt in a conversation no longer used, so it ends.
    pub(super) fn attempt_launched(&mut self, resumed: bool) {
        if self.attempt.is_some() && !resumed {
            self.set_attempt(None);
        }
    }

    /// A turn began on a process: the attempt is gone from the conversation when that process
    /// was launched without it (`launched`, its resume's cut).
    pub(super) fn attempt_turn_began(&mut self, launched: Option<&Cut>) {
        if self.attempt.is_some() && self.attempt.as_ref() == launched {
            self.set_attempt(None);
        }
    }

    /// A process launched without the attempt ended before a turn began in it (the CLI refused
    /// the cut, or it died at once): the attempt is not cut again, so that the bot is not held in
    /// a loop; the next start resumes the whole conversation.
    pub(super) fn attempt_not_taken(&mut self, launched: Option<&Cut>, turn_began: bool) {
        if !turn_began && self.attempt.is_some() && self.attempt.as_ref() == launched {
            tracing::warn!(
                "the resume without the failed attempt ended before a turn; it is not tried again"
            );
            self.set_attempt(None);
        }
    }

    fn set_attempt(&mut self, cut: Option<Cut>) {
        self.attempt = cut.clone();
        let mut c = CommitBuilder::default();
        c.write(Write::AttemptCut(cut));
        self.emit(c.build());
    }
}
