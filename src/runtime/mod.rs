//! Runtimes: the kinds of agent CLI botvisor can supervise.
//!
//! A [`Runtime`] knows one kind of CLI: how to launch it and where it keeps transcripts; for each
//! process it opens a [`Protocol`] object ([`protocol`]) that reads and writes that process's
//! stdin/stdout and keeps its correlation state. Everything specific to one CLI lives in that
//! CLI's folder ([`claude`]); the supervisor only sees [`RuntimeEvent`]s. The resume decision of design rule 2
//! is `crate::supervisor::core::start::decide_start`, the one function every launch goes
//! through.

pub mod binary;
pub mod claude;
pub mod codex;
pub mod event;
pub mod json_line;
pub mod jsonl;
pub mod login;
pub mod protocol;

pub use event::{LimitReport, LimitState, ResultOutcome, RuntimeEvent};
pub use protocol::{Protocol, Read, Sent};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// How a process starts its conversation.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum SessionStart {
    /// A new conversation with this id, chosen by botvisor (`--session-id` for Claude Code).
    New(String),
    /// A new conversation whose id the CLI assigns and names through its protocol once it is
    /// open (Codex: the answer to `thread/start`).
    Fresh,
    /// Continue the conversation with this id (`--resume` for Claude Code).
    Resume(String),
}

impl SessionStart {
    /// The session id, when known at launch (`None` for [`SessionStart::Fresh`]).
    pub fn session_id(&self) -> Option<&str> {
        match self {
            SessionStart::New(id) | SessionStart::Resume(id) => Some(id),
            SessionStart::Fresh => None,
        }
    }
}

/// Why a recorded conversation is not resumed (the system chat item says so).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForgetReason {
    /// The runtime cannot resume conversations.
    RuntimeCannotResume,
    /// The transcript for the recorded id is not on disk.
    TranscriptMissing,
    /// It holds nothing but a first message the agent never answered, which is asked again in a
    /// new conversation (issue 25, [`Cut::Whole`]).
    OnlyUnanswered,
    /// A client's fresh Restart asked to leave it, and its forget is not on record yet
    /// (`supervisor::core::lifecycle::Lifecycle::start_decision`; never from
    /// `crate::supervisor::core::start::decide_start`).
    FreshRestart,
}

/// What a process is started with.
#[derive(Debug, Clone, PartialEq)]
pub struct LaunchCommand {
    /// The binary.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
    /// Its working directory.
    pub cwd: PathBuf,
    /// Its whole environment (nothing else is inherited).
    pub env: BTreeMap<String, String>,
}

/// The settings a launch needs.
#[derive(Debug, Clone)]
pub struct LaunchSpec<'a> {
    /// The canonical working directory.
    pub cwd: &'a Path,
    /// Model, empty for the CLI's default.
    pub model: &'a str,
    /// Permission mode, empty for the CLI's default.
    pub permission_mode: &'a str,
    /// The process's whole environment.
    pub env: &'a BTreeMap<String, String>,
    /// New conversation or resume.
    pub start: &'a SessionStart,
    /// With [`SessionStart::Resume`]: resume without the unanswered message this [`Cut`] drops,
    /// so that the message can be sent again (issue 25); `None`: resume the whole conversation.
    pub cut: Option<&'a Cut>,
    /// With [`SessionStart::Resume`]: continue in a new conversation forked from it, leaving it as
    /// it is (Claude Code: `--fork-session`).
    pub fork: bool,
}

/// A chat item a runtime event asks to record.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatPayload {
    /// The chat item kind (`assistant`, `tool_use`, `tool_result`, `system`, …).
    pub kind: &'static str,
    /// A JSON object.
    pub payload: serde_json::Value,
}

/// A conversation a CLI keeps for a folder, read from its files (issue 28).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conversation {
    /// The session id (Codex: the thread id).
    pub session_id: String,
    /// When its file was last written.
    pub modified: std::time::SystemTime,
    /// Its first user message, as written (not bounded or escaped).
    pub title: String,
}

/// Where a resume cuts a conversation to drop a message it took and did not answer, so that the
/// message can be sent again and the model sees it once (issue 25).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Cut {
    /// Resume at the line `at` (the message's parent), dropping the turn whose prompt is `drops`
    /// (Claude Code: `--resume-session-at at --resume-drops-turn drops`).
    At {
        /// The id of the last line kept.
        at: String,
        /// The id of the message's own line.
        drops: String,
    },
    /// The message is the conversation's first: nothing before it is kept, so it goes to a new
    /// conversation.
    Whole,
    /// Resume, then drop the turn `turn_id` (the message's) and every later one (Codex 0.171.0:
    /// `thread/revert` with `beforeTurnId` after `thread/resume`; tests/facts/codex.rs
    /// `a_taken_message_is_asked_again_once_after_thread_revert`). Stored as
    /// `{"before_turn":{"turn_id":"…"}}` in `turns.redo_cut`.
    BeforeTurn {
        /// The id of the turn that took the message.
        turn_id: String,
    },
}

/// What a conversation's file holds of a message written to it: the message was taken (issue 25).
#[derive(Debug, Clone, PartialEq)]
pub struct TakenTurn {
    /// How to resume without it; `None` when the runtime cannot say.
    pub cut: Option<Cut>,
    /// The chat items of its answer the file holds, in order (`assistant`, `tool_use`,
    /// `tool_result`).
    pub answer: Vec<ChatPayload>,
    /// The answer is whole: the model ended its turn.
    pub answered: bool,
    /// The agent called a tool in the turn: its work began.
    pub tool_called: bool,
}

impl TakenTurn {
    /// A message the file holds, with nothing known of its answer.
    pub fn bare() -> TakenTurn {
        TakenTurn {
            cut: None,
            answer: Vec::new(),
            answered: false,
            tool_called: false,
        }
    }
}

/// A live process outside botvisor that holds a conversation (design rule 7, issue 25): the
/// bot waits in state `held_elsewhere` until it exits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// The process, by identity: watched until it exits.
    pub identity: crate::process::identity::ProcessIdentity,
    /// What it is, in words ("Claude Code in a terminal (tmux work:@0.%0)", …).
    pub what: String,
    /// Its command line, bounded (`runtime::claude::registry`).
    pub command: String,
}

/// A request to a running CLI over its control protocol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ControlRequest {
    /// The handshake, sent once right after launch.
    Initialize,
    /// Change the permission mode of the running process.
    SetPermissionMode(String),
    /// Change the model for the next model request.
    SetModel(String),
    /// End the running turn.
    Interrupt,
}

/// How far an "allow" reaches (`RespondPermission`'s option `scope`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// This request only (the default).
    Once,
    /// This request, and those the CLI would take as the same, while the agent's process runs
    /// (Claude Code: the request's suggestions, each for the session; Codex:
    /// `acceptForSession`).
    Session,
    /// This request, and those the CLI would take as the same, kept beyond the process (Claude
    /// Code: a suggested permission mode, which botvisor keeps as the bot's; Codex: the
    /// execpolicy rule it proposed, a prefix that is often the whole command).
    Always,
    /// Every use of the command's program, whatever its arguments, kept beyond the process
    /// (Codex: an execpolicy rule of the program alone, where it proposed a longer one; issue
    /// 46).
    Program,
}

impl Scope {
    /// Every scope, narrowest first.
    pub const ALL: [Scope; 4] = [Scope::Once, Scope::Session, Scope::Always, Scope::Program];

    /// `once`, `session`, `always` or `program`.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Once => "once",
            Scope::Session => "session",
            Scope::Always => "always",
            Scope::Program => "program",
        }
    }

    /// The scope named `text` (`once`, `session`, `always`, `program`), or `None`.
    pub fn parse(text: &str) -> Option<Scope> {
        Scope::ALL.into_iter().find(|s| s.as_str() == text)
    }
}

/// What an allow with a wider [`Scope`] tells the CLI besides "allow", as a runtime words it
/// ([`Runtime::grant`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Grant {
    /// What the protocol sends with the allow (Claude Code: `updatedPermissions`; Codex: the
    /// decision); `None`: a plain allow.
    pub permissions: Option<serde_json::Value>,
    /// A permission mode the bot takes from now on, as `SetPermissionMode` gives it (Claude
    /// Code offers `acceptEdits` for file edits).
    pub mode: Option<String>,
}

/// An answer to a permission request.
#[derive(Debug, Clone, PartialEq)]
pub enum PermissionAnswer {
    /// Let the tool run, with this input.
    Allow {
        /// The input the tool runs with (the requested one unless a client changed it).
        updated_input: serde_json::Value,
        /// What is sent with the allow for a wider scope ([`Grant::permissions`]); `None` for
        /// this request only.
        grant: Option<serde_json::Value>,
    },
    /// Do not run the tool; the model is told `message`.
    Deny {
        /// What the model is told.
        message: String,
    },
}

/// The runtime could not be used.
#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum RuntimeError {
    /// The CLI binary was not found or is not executable.
    #[error("{0}")]
    Unavailable(String),
}

/// One kind of agent CLI.
pub trait Runtime: Send + Sync + 'static {
    /// The name clients use (`claude`).
    fn name(&self) -> &'static str;
    /// Whether a conversation can be continued by a later process.
    fn can_resume(&self) -> bool;
    /// Whether a resume can continue in a copy of the conversation, leaving it as it is (Claude
    /// Code's `--fork-session`; [`LaunchSpec::fork`]).
    fn can_fork(&self) -> bool {
        false
    }
    /// Whether an allowed tool use can run with an input a client changed (Claude Code's
    /// `updatedInput`); Codex runs the command it asked for, as asked.
    fn can_change_tool_input(&self) -> bool {
        true
    }
    /// What a person checks when the model API cannot be reached or refuses the credentials,
    /// in this runtime's terms (where its address and credentials are set), one sentence.
    fn api_hint(&self) -> &'static str {
        "Check the model API's address, the network and the credentials."
    }
    /// How a person logs the CLI of a bot whose environment is `env` in again: one sentence
    /// naming what works for that bot (its own key or token, given with `SetEnvironment`'s
    /// `merge`, when it has one; else the CLI's own login), in D-Bus words (`botvisorctl`
    /// turns "SetEnvironment (`merge`) with `NAME=…`" into its `set BOT --env NAME=…`).
    fn login_hint(&self, _env: &BTreeMap<String, String>) -> String {
        "Log the CLI in again as the user botvisord runs as.".to_owned()
    }
    /// The scopes an allow of `request` (the request as the CLI sent it,
    /// [`RuntimeEvent::PermissionRequest`]'s `request`) may have, narrowest first: at least
    /// [`Scope::Once`].
    fn scopes(&self, _request: &serde_json::Value) -> Vec<Scope> {
        vec![Scope::Once]
    }
    /// What an allow of `request` with `scope` (one of [`Runtime::scopes`]) tells the CLI.
    fn grant(&self, _request: &serde_json::Value, _scope: Scope) -> Grant {
        Grant::default()
    }
    /// What an allow of `request` with `scope` (one of [`Runtime::scopes`]) lets run without
    /// asking, and for how long, in words for the person who answers (the `permission_request`
    /// item's `reach`; issue 46): one phrase, no newline.
    fn reach(&self, _request: &serde_json::Value, _scope: Scope) -> String {
        "this request, this time".to_owned()
    }
    /// The CLI binary, checked to exist and be executable now.
    fn binary(&self) -> Result<PathBuf, RuntimeError>;
    /// The permission modes the CLI accepts.
    fn permission_modes(&self) -> &'static [&'static str];
    /// Whether a CLI started with `env` can run at all, checked before each launch (Codex: its
    /// home folder must exist). An error parks the bot with the message in the chat and
    /// `LastError`, as a missing binary does, instead of a crash loop.
    fn check_environment(&self, _env: &BTreeMap<String, String>) -> Result<(), RuntimeError> {
        Ok(())
    }
    /// Whether the CLI at `program`, started with `permission_mode` and `env`, can do its work,
    /// checked before each launch after [`Runtime::check_environment`] (Codex: a sandboxed mode
    /// needs bubblewrap). `Err((reason, text))` parks the bot like a missing binary: an `error`
    /// chat item with that `reason` and `text`, and `LastError`.
    fn check_launch(
        &self,
        _program: &Path,
        _permission_mode: &str,
        _env: &BTreeMap<String, String>,
    ) -> Result<(), (&'static str, String)> {
        Ok(())
    }
    /// Whether the transcript of `session_id` exists on disk now, for a CLI started with `env`
    /// in `cwd`.
    fn transcript_exists(
        &self,
        env: &BTreeMap<String, String>,
        cwd: &Path,
        session_id: &str,
    ) -> bool;
    /// Whether the conversation `session_id` already holds the user message `text`, written at
    /// or after `since`: the CLI took it even though it did not replay it before it stopped.
    fn conversation_has_message(
        &self,
        env: &BTreeMap<String, String>,
        cwd: &Path,
        session_id: &str,
        text: &str,
        since: std::time::SystemTime,
    ) -> bool;
    /// What the conversation `session_id` holds of the user message `text`, written at or after
    /// `since`: `None` when it does not hold it. By default, [`Runtime::conversation_has_message`]
    /// with nothing known of the answer.
    fn taken_turn(
        &self,
        env: &BTreeMap<String, String>,
        cwd: &Path,
        session_id: &str,
        text: &str,
        since: std::time::SystemTime,
    ) -> Option<TakenTurn> {
        self.conversation_has_message(env, cwd, session_id, text, since)
            .then(TakenTurn::bare)
    }
    /// The live process outside botvisor that holds the conversation `session_id` now, for a CLI
    /// started with `env` in `cwd` (Claude Code: its registry of live sessions,
    /// [`claude::registry`]); `None` when none does or the runtime cannot tell. Asked before
    /// every resume: a second writer would fork the conversation.
    fn holder(
        &self,
        _env: &BTreeMap<String, String>,
        _cwd: &Path,
        _session_id: &str,
    ) -> Option<Holder> {
        None
    }
    /// Every live process outside botvisor that holds the conversation now, first found first
    /// (the candidates of [`Runtime::holder`]; by default that one alone).
    fn holders(&self, env: &BTreeMap<String, String>, cwd: &Path, session_id: &str) -> Vec<Holder> {
        self.holder(env, cwd, session_id).into_iter().collect()
    }
    /// Whether the CLI's refusal to open a conversation (`RuntimeEvent::OpenFailed`'s words)
    /// says another process holds it (Codex 0.171.0: `thread … already has an active writer`);
    /// the bot then waits for that process instead of failing the message.
    fn held_elsewhere(&self, _error: &str) -> bool {
        false
    }
    /// Readies the conversation `session_id`'s files for a process that resumes it, so that it
    /// continues the conversation's newest branch (Claude Code: a `last-prompt` record naming
    /// the newest entry, when a truncating resume left the last record naming a dropped attempt;
    /// [`claude::leaf`]). `Ok(true)` when something was written. Called only while no process
    /// of the bot runs.
    fn before_resume(
        &self,
        _env: &BTreeMap<String, String>,
        _cwd: &Path,
        _session_id: &str,
    ) -> std::io::Result<bool> {
        Ok(false)
    }
    /// The files that hold the conversation `session_id` now, for a CLI started with `env` in
    /// `cwd`, which botvisor keeps a copy of (`supervisor::keep`); empty when none exists.
    fn conversation_files(
        &self,
        _env: &BTreeMap<String, String>,
        _cwd: &Path,
        _session_id: &str,
    ) -> Vec<PathBuf> {
        Vec::new()
    }
    /// Where a CLI started with `env` in `cwd` looks for the file of `session` now, whether or
    /// not it is there (botvisor puts its copy back there); `None` when that cannot be told
    /// (Claude Code: a working directory whose slug is cut and hashed, with no folder yet).
    fn conversation_target(
        &self,
        _env: &BTreeMap<String, String>,
        _cwd: &Path,
        _session_id: &str,
    ) -> Option<PathBuf> {
        None
    }
    /// Where a CLI started with `env` in `cwd` looks for the file named `name` (a name
    /// [`Runtime::conversation_files`] gave) of `session` now, for a runtime that keeps a
    /// conversation in several files (Codex: a rollout and its segments); by default
    /// [`Runtime::conversation_target`].
    fn conversation_file_target(
        &self,
        env: &BTreeMap<String, String>,
        cwd: &Path,
        session_id: &str,
        _name: &str,
    ) -> Option<PathBuf> {
        self.conversation_target(env, cwd, session_id)
    }
    /// Where the CLI started with `env` keeps the file botvisor would put back at `target` in
    /// another form now (Codex: compressed as `<target>.zst`, or moved to `archived_sessions/`):
    /// the conversation is not gone, and botvisor's copy is not put back. `None` by default.
    fn conversation_held_otherwise(
        &self,
        _env: &BTreeMap<String, String>,
        _target: &Path,
    ) -> Option<PathBuf> {
        None
    }
    /// The conversations a CLI started with `env` keeps for `cwd` now, read from the files that
    /// exist (Claude Code: its transcripts of that folder), in no order; empty by default.
    fn conversations(&self, _env: &BTreeMap<String, String>, _cwd: &Path) -> Vec<Conversation> {
        Vec::new()
    }
    /// The earlier turns of the conversation `session_id` as chat items to import, in order,
    /// each payload marked `imported: true`; empty by default or when it is gone.
    fn history(
        &self,
        _env: &BTreeMap<String, String>,
        _cwd: &Path,
        _session_id: &str,
    ) -> Vec<ChatPayload> {
        Vec::new()
    }
    /// What the file `file` of the conversation `session_id` holds past its first `from` bytes,
    /// as chat items to import, in order, each payload marked `imported: true` (issue 46: what
    /// another process added to the conversation while it held it). Turns whose prompt is one
    /// of `own` (the bot's own messages, whose items the chat has) are left out with their
    /// answers. Empty by default.
    fn added_since(&self, _file: &Path, _from: u64, _own: &[String]) -> Vec<ChatPayload> {
        Vec::new()
    }
    /// The protocol object of a process another botvisord started and handed over (issue 47):
    /// its state as [`Protocol::save`] gave it; `None` when it cannot be read (the process is
    /// then not taken over).
    fn restore(&self, _saved: &serde_json::Value) -> Option<Box<dyn Protocol>> {
        None
    }
    /// The protocol object of a process a previous botvisord started and did not hand over (it
    /// was killed, issue 47): rebuilt from what is known, `spec` (its conversation), the turn
    /// it answers as its conversation's file names it (`turn`: the cut of its attempt) and the
    /// permission requests open (`open`, ids as this runtime gave them). `None` when this
    /// runtime cannot (the process is then stopped, and its turn recovered as after a crash).
    fn reopen(
        &self,
        _spec: &LaunchSpec<'_>,
        _turn: Option<&Cut>,
        _open: &[String],
    ) -> Option<Box<dyn Protocol>> {
        None
    }
    /// A new conversation as this runtime starts one: [`SessionStart::New`] with a fresh id
    /// when botvisor names it (Claude Code), [`SessionStart::Fresh`] when the CLI does (Codex).
    fn fresh_start(&self) -> SessionStart;
    /// The command for a launch.
    fn command(&self, program: PathBuf, spec: &LaunchSpec<'_>) -> LaunchCommand;
    /// The protocol object of a process launched with `spec` (see [`protocol`]).
    fn open(&self, spec: &LaunchSpec<'_>) -> Box<dyn Protocol>;
    /// The session id a process refused to start a new conversation on because it is already in
    /// use, read from what it wrote to stderr before it exited; `None` when it said no such thing.
    fn session_in_use(&self, stderr: &str) -> Option<String>;
    /// Whether an error text means a failure that restarting cannot fix: `Some("authentication")`
    /// or `Some("usage limit")`.
    fn fatal_reason(&self, text: &str) -> Option<&'static str>;
    /// What the conversation `session_id` had cost (US dollars) when its last process ended,
    /// as the CLI records it: the total a process resumed on it starts counting from, so that a
    /// turn's cost is its total less this (issue 46: never a total that began outside botvisor,
    /// a terminal's turns or an adopted conversation's earlier ones). `None`: the runtime tells
    /// no cost, or the conversation's file records none (its first process then starts from 0).
    fn cost_baseline(
        &self,
        _env: &BTreeMap<String, String>,
        _cwd: &Path,
        _session_id: &str,
    ) -> Option<f64> {
        None
    }
    /// The file the CLI keeps its login in, for a process started with `env` (a bot whose login
    /// expired waits for it to change); `None` when the runtime has none or `env` does not say.
    fn credentials_file(&self, _env: &BTreeMap<String, String>) -> Option<PathBuf> {
        None
    }
    /// Where a CLI started with `env` (botvisord's environment with the bot's own, `own`, over
    /// it) takes its login from (`GetLogin`): judged from the names of the variables set and
    /// the files that exist, never from a value. By default its credentials file, if it exists.
    fn login(
        &self,
        _own: &BTreeMap<String, String>,
        env: &BTreeMap<String, String>,
    ) -> login::Login {
        let file = self.credentials_file(env);
        login::Login {
            source: file
                .clone()
                .filter(|f| f.is_file())
                .map_or(login::Source::None, login::Source::File),
            variables: Vec::new(),
            file,
            how: self.login_hint(env),
        }
    }
}

/// Looks `name` up on `path` (a `PATH`-style list) and returns the first executable file.
pub fn find_on_path(name: &str, path: Option<&std::ffi::OsStr>) -> Option<PathBuf> {
    let path = path?;
    std::env::split_paths(path)
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

/// Whether `path` is a regular file with an execute bit.
pub fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}
