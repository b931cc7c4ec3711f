//! One process of a bot, as the lifecycle core knows it, with no I/O: how it was launched and
//! what it showed since (a turn begun, a lost conversation, an id in use, a stop under way, a
//! session it reported, a failure restarting cannot fix). It ends with its process.

use super::effect::{CommitBuilder, Effect, Publish, Write};
use crate::runtime::{Cut, SessionStart};

/// What one process of the bot showed, from its launch to its end.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Run {
    /// How it was launched: a resume of a recorded conversation, or a new one.
    pub start: SessionStart,
    /// The unanswered attempt its resume dropped (issue 25), if it was launched to ask a message
    /// again.
    pub cut: Option<Cut>,
    /// A turn began in it (a message was replayed).
    pub turn_began: bool,
    /// botvisor is stopping it.
    pub stopping: bool,
    /// It reported its conversation lost (design rule 4).
    pub lost: bool,
    /// It refused a new conversation because this id is in use.
    pub in_use: Option<String>,
    /// A session id it reported instead of the launched one, recorded once its transcript exists
    /// (design rule 3).
    pub reported_session: Option<String>,
    /// A failure restarting cannot fix that a turn's result named (`"<kind> error: <text>"`): its
    /// exit fails the bot. It belongs to this process only.
    pub fatal: Option<String>,
    /// An error result ended the turn waiting for it before any turn began: it refused the
    /// conversation in words botvisor may not know (design rule 4's fallback).
    pub refused: bool,
}

impl Run {
    /// A process just launched with `start`.
    pub fn new(start: SessionStart) -> Run {
        Run {
            start,
            cut: None,
            turn_began: false,
            stopping: false,
            lost: false,
            in_use: None,
            reported_session: None,
            fatal: None,
            refused: false,
        }
    }

    /// A process launched with `start`, resuming without what `cut` drops.
    pub fn with_cut(start: SessionStart, cut: Option<Cut>) -> Run {
        Run {
            cut,
            ..Run::new(start)
        }
    }

    /// Its message was replayed: a turn began in it (design rule 3). `reported_later` is a session
    /// id it reported instead of the launched one, kept until its transcript exists.
    pub fn began(&mut self, reported_later: Option<String>) {
        self.turn_began = true;
        if reported_later.is_some() {
            self.reported_session = reported_later;
        }
    }

    /// It said the new conversation's id `session_id` is in use (its exit resumes that id once,
    /// [`super::lifecycle::Lifecycle::exited`]).
    pub fn session_in_use(&mut self, session_id: String) {
        self.in_use = Some(session_id);
    }

    /// Whether it may take a message: not being stopped, its conversation neither lost nor
    /// refused.
    pub fn usable(&self) -> bool {
        !self.stopping && !self.lost && self.in_use.is_none()
    }

    /// The CLI reported the conversation `reported` at a turn's end while holding `conversation`
    /// (it may have forked or cleared it). Once a turn began in this process, another id is kept
    /// to be recorded when its transcript exists ([`Run::adopt_reported`]).
    pub fn reported(&mut self, reported: Option<String>, conversation: Option<&str>) {
        if !self.turn_began {
            return;
        }
        if let Some(r) = reported.filter(|r| !r.is_empty() && Some(r.as_str()) != conversation) {
            self.reported_session = Some(r);
        }
    }

    /// The reported session is recorded when it is not already and its transcript exists
    /// (design rule 3, [`crate::supervisor::core::decide::session_to_record`]): one commit that says `SessionId`. Returns
    /// the id recorded with its effect.
    pub fn adopt_reported(
        &self,
        recorded: Option<&str>,
        transcript_exists: impl Fn(&str) -> bool,
    ) -> Option<(String, Effect)> {
        let reported = self.reported_session.as_deref()?;
        if recorded == Some(reported) || !transcript_exists(reported) {
            return None;
        }
        let mut c = CommitBuilder::default();
        c.write(Write::Session(Some(reported.to_owned())))
            .then(Publish::SessionId(Some(reported.to_owned())));
        Some((reported.to_owned(), c.build()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resumed(began: bool) -> Run {
        Run {
            turn_began: began,
            ..Run::new(SessionStart::Resume("s".into()))
        }
    }

    #[test]
    fn a_process_whose_conversation_is_lost_or_in_use_takes_no_message() {
        assert!(resumed(false).usable());
        for run in [
            Run {
                in_use: Some("x".into()),
                ..resumed(false)
            },
            Run {
                lost: true,
                ..resumed(false)
            },
            Run {
                stopping: true,
                ..resumed(false)
            },
        ] {
            assert!(!run.usable(), "{run:?}");
        }
    }

    #[test]
    fn rule_3_a_session_reported_before_a_turn_began_is_not_kept() {
        let mut run = resumed(false);
        run.reported(Some("t".into()), Some("s"));
        assert_eq!(run.reported_session, None);
        let mut run = resumed(true);
        run.reported(Some("s".into()), Some("s"));
        assert_eq!(run.reported_session, None, "the same conversation");
    }

    #[test]
    fn rule_3_a_reported_session_already_on_record_is_not_recorded_again() {
        let mut run = resumed(true);
        run.reported(Some("t".into()), Some("s"));
        assert_eq!(run.adopt_reported(Some("t"), |_| true), None);
        assert!(run.adopt_reported(Some("s"), |_| true).is_some());
    }

    #[test]
    fn a_replay_begins_the_turn_and_keeps_a_reported_id_for_later() {
        let mut run = resumed(false);
        run.began(Some("t".into()));
        assert!(run.turn_began);
        assert_eq!(run.reported_session.as_deref(), Some("t"));
        run.began(None);
        assert_eq!(run.reported_session.as_deref(), Some("t"), "kept");
    }
}
