//! Design rule 2 (resume only what exists) as one decision every launch goes through.

use crate::runtime::{Cut, ForgetReason, SessionStart};

/// The outcome of [`decide_start`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartDecision {
    /// What the process is launched with.
    pub start: SessionStart,
    /// A recorded session id that must be cleared, in the same transaction as a system chat item
    /// that says why, before the process starts.
    pub forget: Option<(String, ForgetReason)>,
    /// With a resume: the unanswered attempt it drops, so that the message asked again is in
    /// the conversation once (issue 25, [`with_cut`]).
    pub cut: Option<Cut>,
    /// With a resume: continue in a copy of the conversation, which is left as it is (a Restart
    /// with `fork`, `core::lifecycle::RestartMode::Fork`).
    pub fork: bool,
}

/// The start `decision` for a first waiting message that is asked again with `cut` (issue 25):
/// a resume drops the unanswered attempt ([`Cut::At`], [`Cut::BeforeTurn`]); a conversation that held nothing but
/// that message ([`Cut::Whole`]) is left for a new one, `fresh()`, its record forgotten. A new
/// conversation needs no cut: the message goes to it as a first ask.
pub fn with_cut(
    decision: StartDecision,
    cut: Option<&Cut>,
    fresh: impl FnOnce() -> SessionStart,
) -> StartDecision {
    match (cut, &decision.start) {
        (Some(Cut::At { .. } | Cut::BeforeTurn { .. }), SessionStart::Resume(_)) => StartDecision {
            cut: cut.cloned(),
            ..decision
        },
        (Some(Cut::Whole), SessionStart::Resume(id)) => StartDecision {
            forget: Some((id.clone(), ForgetReason::OnlyUnanswered)),
            start: fresh(),
            cut: None,
            fork: false,
        },
        _ => decision,
    }
}

/// Design rule 2, in one function: resume only when a session id is recorded, the runtime can
/// resume, and the runtime's transcript for that id exists on disk now; otherwise a new
/// conversation, `fresh()` ([`Runtime::fresh_start`]), and the old record is to be forgotten.
///
/// `transcript_exists` is only asked when the other two conditions hold.
///
/// [`Runtime::fresh_start`]: crate::runtime::Runtime::fresh_start
pub fn decide_start(
    recorded: Option<&str>,
    can_resume: bool,
    transcript_exists: impl FnOnce(&str) -> bool,
    fresh: impl FnOnce() -> SessionStart,
) -> StartDecision {
    match recorded {
        None => StartDecision {
            start: fresh(),
            forget: None,
            cut: None,
            fork: false,
        },
        Some(id) if !can_resume => StartDecision {
            start: fresh(),
            forget: Some((id.to_owned(), ForgetReason::RuntimeCannotResume)),
            cut: None,
            fork: false,
        },
        Some(id) if transcript_exists(id) => StartDecision {
            start: SessionStart::Resume(id.to_owned()),
            forget: None,
            cut: None,
            fork: false,
        },
        Some(id) => StartDecision {
            start: fresh(),
            forget: Some((id.to_owned(), ForgetReason::TranscriptMissing)),
            cut: None,
            fork: false,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn new_id() -> SessionStart {
        SessionStart::New("new".to_owned())
    }

    #[test]
    fn no_record_starts_new() {
        let d = decide_start(None, true, |_| panic!("not asked"), new_id);
        assert_eq!(d.start, SessionStart::New("new".into()));
        assert_eq!(d.forget, None);
    }

    #[test]
    fn record_and_transcript_resumes() {
        let d = decide_start(Some("old"), true, |id| id == "old", new_id);
        assert_eq!(d.start, SessionStart::Resume("old".into()));
        assert_eq!(d.forget, None);
    }

    #[test]
    fn record_without_transcript_starts_new_and_forgets() {
        let d = decide_start(Some("old"), true, |_| false, new_id);
        assert_eq!(d.start, SessionStart::New("new".into()));
        assert_eq!(
            d.forget,
            Some(("old".into(), ForgetReason::TranscriptMissing))
        );
    }

    #[test]
    fn runtime_that_cannot_resume_starts_new() {
        let d = decide_start(Some("old"), false, |_| panic!("not asked"), new_id);
        assert_eq!(d.start, SessionStart::New("new".into()));
        assert_eq!(
            d.forget,
            Some(("old".into(), ForgetReason::RuntimeCannotResume))
        );
    }

    #[test]
    fn issue_25_a_redo_resumes_without_the_attempt_or_leaves_a_conversation_of_it_alone() {
        let at = Cut::At {
            at: "p".into(),
            drops: "u".into(),
        };
        let resume = || decide_start(Some("old"), true, |_| true, new_id);
        let d = with_cut(resume(), Some(&at), new_id);
        assert_eq!(
            (d.start, d.cut, d.forget),
            (SessionStart::Resume("old".into()), Some(at.clone()), None)
        );
        let before = Cut::BeforeTurn {
            turn_id: "t".into(),
        };
        let d = with_cut(resume(), Some(&before), new_id);
        assert_eq!(
            (d.start, d.cut, d.forget),
            (SessionStart::Resume("old".into()), Some(before), None)
        );
        let d = with_cut(resume(), Some(&Cut::Whole), new_id);
        assert_eq!(
            (d.start, d.cut, d.forget),
            (
                SessionStart::New("new".into()),
                None,
                Some(("old".into(), ForgetReason::OnlyUnanswered))
            )
        );
        // A conversation that is gone: a first ask in the new one, no cut.
        let gone = decide_start(Some("old"), true, |_| false, new_id);
        let d = with_cut(gone.clone(), Some(&at), new_id);
        assert_eq!(d, gone);
        assert_eq!(with_cut(resume(), None, new_id), resume());
    }
}
