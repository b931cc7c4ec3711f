//! The bot's lifecycle decisions, apart from their effects.
//!
//! Pure functions from what was observed (a recorded session id, what a transcript holds, how a
//! process exited, how long it lived) to what happens next. No I/O, no clock, no process: the
//! actor ([`crate::supervisor::bot`]) reads the world, asks here, and carries the answer out.
//! Each function carries one case of a design rule of `docs/design.md`; the one that keeps a
//! rule says `Design rule N` first (`docs/architecture.md` lists them).

use std::time::Duration;

use crate::process::ExitInfo;
use crate::runtime::{ChatPayload, Cut, TakenTurn};

/// How a turn ended, as its `turn_finished` chat item and its `TurnFinished` signal say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnOutcome {
    /// The CLI finished the turn without an error.
    Success,
    /// The CLI finished the turn with an error (its `result` has `is_error: true` or an error
    /// subtype; `is_error` wins over `subtype`).
    Error,
    /// A client interrupted the turn, or stopped the agent (or the daemon) before it finished.
    Interrupted,
    /// The agent exited by itself (or was killed by someone else) after the turn had begun.
    Crashed,
    /// The agent stopped after the message reached the conversation and before it was answered:
    /// the conversation holds the message, so it is not sent again (design rule 8).
    TakenNotAnswered,
    /// A plan's usage limit cut the turn after the agent had called tools: not sent again, since
    /// a re-sent message would redo that work in the next window (issue 24, `core::limits`).
    Limited,
}

impl TurnOutcome {
    /// The outcome's name: `success`, `error`, `interrupted`, `crashed`, `taken_not_answered`,
    /// `limited`.
    pub fn as_str(self) -> &'static str {
        match self {
            TurnOutcome::Success => "success",
            TurnOutcome::Error => "error",
            TurnOutcome::Interrupted => "interrupted",
            TurnOutcome::Crashed => "crashed",
            TurnOutcome::TakenNotAnswered => "taken_not_answered",
            TurnOutcome::Limited => "limited",
        }
    }
}

/// What becomes of a message written to a process that is gone before it replayed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UnreplayedFate {
    /// The conversation does not hold it: it goes back to the head of the queue and the next
    /// process takes it, once.
    Resend,
    /// The conversation it was written to holds it already (the CLI writes a message into its
    /// transcript before it replays it): the turn ends `taken_not_answered` and the message is
    /// not sent again. `adopt` is that conversation when it is not the recorded one (a new
    /// conversation that never replayed): it is recorded, since a turn began in it (rule 3).
    Taken {
        /// The session id to record, when it differs from the recorded one.
        adopt: Option<String>,
    },
}

/// Design rule 8, for a message whose process died (or whose daemon died) before the replay:
/// `sent_to` is the conversation the message was written to, `recorded` the bot's recorded one,
/// `conversation_holds_it` whether `sent_to`'s transcript holds the message, written since it was
/// sent. The same decision serves a CLI crash, a stop and a daemon restart.
pub fn unreplayed_message(
    recorded: Option<&str>,
    sent_to: &str,
    conversation_holds_it: bool,
) -> UnreplayedFate {
    if !conversation_holds_it {
        return UnreplayedFate::Resend;
    }
    UnreplayedFate::Taken {
        adopt: (recorded != Some(sent_to)).then(|| sent_to.to_owned()),
    }
}

/// What a conversation's file says of a turn botvisor did not see end (a daemon crash): the chat
/// items of its answer the chat lacks (`taken.answer` after the `in_chat` items already
/// recorded of it; they are recorded, marked `recovered`), and whether the answer is whole, so
/// the turn ends as the file says (`success`, reason `recovered`) instead of unanswered (issue 25,
/// "reconciled at recovery").
pub fn reconcile(taken: &TakenTurn, in_chat: usize) -> (&[ChatPayload], bool) {
    let missing = taken.answer.get(in_chat..).unwrap_or_default();
    (missing, taken.answered)
}

/// What becomes of a turn whose message the conversation took (its file holds the message)
/// when its process ended unasked or botvisord died before its answer was seen (issue 25).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TakenFate {
    /// The file holds the whole answer: what the chat lacks of it is recorded and the turn ends
    /// `success` (reason `recovered`).
    Answered,
    /// Asked again: the next resume drops the unanswered attempt as the [`Cut`] says, and the
    /// message is written again, so the model sees it once and the user gets an answer.
    Redo(Cut),
    /// It ends unanswered, for this reason.
    Unanswered(NoRedo),
}

/// Why a taken message is not asked again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoRedo {
    /// The agent called a tool in the turn: its work began, and doing it again could repeat what
    /// the tool did (a file appended to twice, a command run twice).
    ToolCalled,
    /// The runtime could not say where to cut the conversation to drop the attempt.
    CannotCut,
    /// The message was asked again `redo_limit` times already.
    Limit,
    /// Its end was asked for (a Stop, a Restart, a Delete, a watchdog): nothing is asked again.
    NotAsked,
    /// `redo_limit` is 0: nothing is ever asked again.
    Off,
}

impl NoRedo {
    /// Why, in words that finish "it is not asked again: …".
    pub fn words(self) -> &'static str {
        match self {
            NoRedo::ToolCalled => "the agent had begun its work (it called a tool)",
            NoRedo::CannotCut => "this runtime cannot drop the unanswered attempt",
            NoRedo::Limit => "it was asked again as many times as redo_limit allows",
            NoRedo::NotAsked => "the agent was stopped",
            NoRedo::Off => "redo_limit is 0",
        }
    }
}

/// Issue 25's "every message answered once", for a message the conversation took: a whole
/// answer in the file is the turn's answer; otherwise the message is asked again while the
/// agent did no work in the turn (no tool called), the runtime can drop the unanswered attempt
/// (`taken.cut`), and it was asked again fewer than `redo_limit` times (`redos`); a
/// `redo_limit` of 0 asks nothing again.
pub fn taken_fate(taken: &TakenTurn, redos: u32, redo_limit: u32) -> TakenFate {
    if taken.answered {
        return TakenFate::Answered;
    }
    if redo_limit == 0 {
        return TakenFate::Unanswered(NoRedo::Off);
    }
    if taken.tool_called {
        return TakenFate::Unanswered(NoRedo::ToolCalled);
    }
    let Some(cut) = &taken.cut else {
        return TakenFate::Unanswered(NoRedo::CannotCut);
    };
    if redos >= redo_limit {
        return TakenFate::Unanswered(NoRedo::Limit);
    }
    TakenFate::Redo(cut.clone())
}

/// Whether the process chose to exit: an exit code from 1 to 127. A death by a signal, or an
/// exit code of 128 or more (a shell's or runtime's report of a signal, `128 + n`), is not the
/// CLI's choice; neither is a clean exit (code 0).
pub fn exited_by_choice(exit: &ExitInfo) -> bool {
    exit.signal.is_none() && matches!(exit.code, Some(1..=127))
}

/// Design rule 4's fallback: whether a process that exited unasked makes the next start a new
/// conversation. Only a resumed process that first failed the turn waiting for it (`refused`: an
/// error result before any turn began, the words of a "not found" botvisor does not know), then
/// exited by its own choice (see [`exited_by_choice`]) within `window` of its launch, with no
/// turn begun and no message taken into the conversation, counts as a CLI that could not resume
/// ("a failed turn, then a fresh start"). An exit with no such result (a broken install, `node`
/// not found: exit 127, a wrapper that fails) is a crash, as is a death by a signal (SIGKILL,
/// another's SIGTERM, the OOM killer): neither gives up a conversation whose transcript exists.
pub fn forget_after_early_exit(
    resumed: bool,
    refused: bool,
    turn_began: bool,
    message_taken: bool,
    exit: &ExitInfo,
    lived: Duration,
    window: Duration,
) -> bool {
    resumed && refused && !turn_began && !message_taken && exited_by_choice(exit) && lived < window
}

/// Which session id to record when a turn begins (design rule 3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionChoice {
    /// The id the process was launched with.
    Launched,
    /// The id the CLI reported: its transcript exists.
    Reported(String),
    /// The launched id for now; the reported id is checked again later (its transcript may not
    /// be written yet).
    LaunchedUntil(String),
}

/// Design rule 3 with rule 2's caution: a CLI may report another session id than the one it was
/// launched with (`/clear`, `--fork-session`, or a resumed CLI that keeps writing to the launched
/// transcript). The reported id is adopted only once its transcript exists; otherwise the
/// launched one stays recorded and the reported one is looked at again later.
pub fn session_to_record(
    launched: &str,
    reported: Option<&str>,
    reported_transcript_exists: impl FnOnce(&str) -> bool,
) -> SessionChoice {
    match reported {
        None => SessionChoice::Launched,
        Some(r) if r == launched || r.is_empty() => SessionChoice::Launched,
        Some(r) if reported_transcript_exists(r) => SessionChoice::Reported(r.to_owned()),
        Some(r) => SessionChoice::LaunchedUntil(r.to_owned()),
    }
}

/// What start-up recovery does with a turn the previous daemon left open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeftTurn {
    /// It had begun (replayed): it ends `interrupted`; its message is in the conversation.
    Interrupted,
    /// Not replayed, never written to a process: delivered by this daemon, once.
    Deliver,
    /// Not replayed, written to a process: as [`unreplayed_message`] says.
    Unreplayed(UnreplayedFate),
}

/// Design rule 8 across a daemon crash: a turn left `running` ends `interrupted`; a `queued` one
/// that was written to a process goes through [`unreplayed_message`] (`sent_to` and whether that
/// conversation holds it); one never written is delivered.
pub fn left_turn(
    running: bool,
    recorded: Option<&str>,
    sent_to: Option<&str>,
    conversation_holds_it: impl FnOnce(&str) -> bool,
) -> LeftTurn {
    if running {
        return LeftTurn::Interrupted;
    }
    match sent_to {
        None => LeftTurn::Deliver,
        Some(s) => LeftTurn::Unreplayed(unreplayed_message(recorded, s, conversation_holds_it(s))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(c: i32) -> ExitInfo {
        ExitInfo {
            code: Some(c),
            signal: None,
        }
    }

    fn signal(s: i32) -> ExitInfo {
        ExitInfo {
            code: None,
            signal: Some(s),
        }
    }

    const WINDOW: Duration = Duration::from_secs(15);
    const SOON: Duration = Duration::from_secs(1);

    #[test]
    fn rule_8_a_message_the_conversation_holds_is_not_sent_again() {
        assert_eq!(
            unreplayed_message(Some("a"), "a", true),
            UnreplayedFate::Taken { adopt: None }
        );
    }

    #[test]
    fn rule_8_a_message_the_conversation_lacks_is_sent_again() {
        assert_eq!(
            unreplayed_message(Some("a"), "a", false),
            UnreplayedFate::Resend
        );
        assert_eq!(unreplayed_message(None, "n", false), UnreplayedFate::Resend);
    }

    #[test]
    fn rule_3_a_new_conversation_that_took_the_message_is_recorded() {
        assert_eq!(
            unreplayed_message(None, "n", true),
            UnreplayedFate::Taken {
                adopt: Some("n".into())
            }
        );
        assert_eq!(
            unreplayed_message(Some("old"), "n", true),
            UnreplayedFate::Taken {
                adopt: Some("n".into())
            }
        );
    }

    #[test]
    fn rule_4_an_early_exit_without_a_failed_turn_never_gives_a_conversation_up() {
        for c in [1, 7, 127] {
            assert!(!forget_after_early_exit(
                true,
                false,
                false,
                false,
                &code(c),
                SOON,
                WINDOW
            ));
        }
    }

    #[test]
    fn rule_4_a_signal_never_gives_a_conversation_up() {
        for s in [libc::SIGKILL, libc::SIGTERM, libc::SIGSEGV] {
            assert!(!forget_after_early_exit(
                true,
                true,
                false,
                false,
                &signal(s),
                SOON,
                WINDOW
            ));
        }
        // A runtime that reports a signal as 128 + n.
        assert!(!forget_after_early_exit(
            true,
            true,
            false,
            false,
            &code(137),
            SOON,
            WINDOW
        ));
    }

    #[test]
    fn rule_4_fallback_fires_only_for_a_resumed_cli_that_chose_to_exit_early() {
        assert!(forget_after_early_exit(
            true,
            true,
            false,
            false,
            &code(1),
            SOON,
            WINDOW
        ));
        // Not resumed, a turn began, the message was taken, too late, a clean exit: no.
        assert!(!forget_after_early_exit(
            false,
            true,
            false,
            false,
            &code(1),
            SOON,
            WINDOW
        ));
        assert!(!forget_after_early_exit(
            true,
            true,
            true,
            false,
            &code(1),
            SOON,
            WINDOW
        ));
        assert!(!forget_after_early_exit(
            true,
            true,
            false,
            true,
            &code(1),
            SOON,
            WINDOW
        ));
        assert!(!forget_after_early_exit(
            true,
            true,
            false,
            false,
            &code(1),
            WINDOW,
            WINDOW
        ));
        assert!(!forget_after_early_exit(
            true,
            true,
            false,
            false,
            &code(0),
            SOON,
            WINDOW
        ));
    }

    #[test]
    fn rule_3_a_reported_id_is_adopted_only_once_its_transcript_exists() {
        assert_eq!(
            session_to_record("x", None, |_| panic!("not asked")),
            SessionChoice::Launched
        );
        assert_eq!(
            session_to_record("x", Some("x"), |_| panic!("not asked")),
            SessionChoice::Launched
        );
        assert_eq!(
            session_to_record("x", Some("y"), |id| id == "y"),
            SessionChoice::Reported("y".into())
        );
        assert_eq!(
            session_to_record("x", Some("y"), |_| false),
            SessionChoice::LaunchedUntil("y".into())
        );
    }

    fn taken(answered: bool, tool_called: bool, cut: Option<Cut>) -> TakenTurn {
        TakenTurn {
            cut,
            answer: Vec::new(),
            answered,
            tool_called,
        }
    }

    fn at() -> Option<Cut> {
        Some(Cut::At {
            at: "p".into(),
            drops: "u".into(),
        })
    }

    #[test]
    fn issue_25_a_whole_answer_in_the_file_is_the_turns_answer() {
        assert_eq!(
            taken_fate(&taken(true, true, None), 9, 0),
            TakenFate::Answered
        );
    }

    #[test]
    fn issue_25_a_taken_message_without_work_is_asked_again_up_to_the_limit() {
        assert_eq!(
            taken_fate(&taken(false, false, at()), 0, 3),
            TakenFate::Redo(at().unwrap())
        );
        assert_eq!(
            taken_fate(&taken(false, false, Some(Cut::Whole)), 2, 3),
            TakenFate::Redo(Cut::Whole)
        );
        assert_eq!(
            taken_fate(&taken(false, false, at()), 3, 3),
            TakenFate::Unanswered(NoRedo::Limit)
        );
    }

    #[test]
    fn issue_25_work_begun_a_runtime_that_cannot_cut_or_a_stop_asks_nothing_again() {
        assert_eq!(
            taken_fate(&taken(false, true, at()), 0, 3),
            TakenFate::Unanswered(NoRedo::ToolCalled)
        );
        assert_eq!(
            taken_fate(&taken(false, false, None), 0, 3),
            TakenFate::Unanswered(NoRedo::CannotCut)
        );
        assert_eq!(
            taken_fate(&taken(false, false, at()), 0, 0),
            TakenFate::Unanswered(NoRedo::Off)
        );
    }

    #[test]
    fn rule_8_at_start_up_each_left_turn_is_settled_or_delivered_once() {
        assert_eq!(
            left_turn(true, Some("a"), Some("a"), |_| panic!("not asked")),
            LeftTurn::Interrupted
        );
        assert_eq!(
            left_turn(false, Some("a"), None, |_| panic!("not asked")),
            LeftTurn::Deliver
        );
        assert_eq!(
            left_turn(false, Some("a"), Some("a"), |_| true),
            LeftTurn::Unreplayed(UnreplayedFate::Taken { adopt: None })
        );
        assert_eq!(
            left_turn(false, Some("a"), Some("a"), |_| false),
            LeftTurn::Unreplayed(UnreplayedFate::Resend)
        );
    }
}
