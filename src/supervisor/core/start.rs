//! Design rule 2 (resume only what exists) as one decision every launch goes through.

use crate::runtime::{ForgetReason, SessionStart};

/// The outcome of [`decide_start`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartDecision {
    /// What the process is launched with.
    pub start: SessionStart,
    /// A recorded session id that must be cleared, in the same transaction as a system chat item
    /// that says why, before the process starts.
    pub forget: Option<(String, ForgetReason)>,
}

/// Design rule 2, in one function: resume only when a session id is recorded, the runtime can
/// resume, and the runtime's transcript for that id exists on disk now; otherwise a new
/// conversation, `fresh()` ([`Runtime::fresh_start`]), and the old record is to be forgotten.
///
/// `transcript_exists` is only asked when the other two conditions hold.
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
        },
        Some(id) if !can_resume => StartDecision {
            start: fresh(),
            forget: Some((id.to_owned(), ForgetReason::RuntimeCannotResume)),
        },
        Some(id) if transcript_exists(id) => StartDecision {
            start: SessionStart::Resume(id.to_owned()),
            forget: None,
        },
        Some(id) => StartDecision {
            start: fresh(),
            forget: Some((id.to_owned(), ForgetReason::TranscriptMissing)),
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
}
