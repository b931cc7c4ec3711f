//! Claude Code (`@anthropic-ai/claude-code`), driven through its stream-json protocol.
//!
//! Every fact about Claude Code's files and messages lives in this folder:
//! [`launch`] (argv), [`events`] (stdout lines), [`results`] (how a turn ended, the plan's limits),
//! [`stdin`] (the lines botvisor writes), [`transcript`] (where conversations are kept).
//! The facts come from `shared/claude-code-facts.md` and were re-checked on the real CLI 2.1.328
//! by the tier-3 tests.

pub mod conversations;
pub mod events;
pub mod launch;
pub mod leaf;
pub mod protocol;
pub mod registry;
pub mod results;
pub mod scopes;
pub mod stdin;
pub mod taken;
pub mod transcript;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::{
    ChatPayload, Conversation, Grant, LaunchCommand, LaunchSpec, Protocol, Runtime, RuntimeError,
    Scope, SessionStart,
};

/// The transcript of `session_id` for a CLI started with `env` in `cwd`, if it exists now.
fn transcript_of(env: &BTreeMap<String, String>, cwd: &Path, session_id: &str) -> Option<PathBuf> {
    transcript::find(&transcript::config_dir(env)?, cwd, session_id)
}

/// The environment variable that names the binary when the config has no `claude_bin`.
pub const BIN_ENV: &str = "BOTVISOR_CLAUDE_BIN";

/// The permission modes both `--permission-mode` and the control protocol's
/// `set_permission_mode` accept in 2.1.328. (`claude --help` also lists `manual` for the flag, but
/// `set_permission_mode` refuses it, so a bot could not be switched to it live: left out.)
pub const PERMISSION_MODES: &[&str] = &[
    "default",
    "acceptEdits",
    "auto",
    "bypassPermissions",
    "dontAsk",
    "plan",
];

/// The Claude Code runtime.
#[derive(Debug, Clone)]
pub struct Claude {
    binary: super::binary::BinaryLookup,
}

/// How Claude Code's binary is named and pointed at.
const NAMES: super::binary::BinaryNames = super::binary::BinaryNames {
    command: "claude",
    product: "Claude Code",
    config_key: "claude_bin",
    env_var: BIN_ENV,
    install: "npm install -g @anthropic-ai/claude-code",
};

impl Claude {
    /// A runtime whose binary is `configured` (config key `claude_bin`), else the environment
    /// variable `BOTVISOR_CLAUDE_BIN`, else `claude` on the daemon's `PATH`.
    pub fn new(configured: Option<PathBuf>) -> Claude {
        Claude {
            binary: super::binary::BinaryLookup::new(NAMES, configured),
        }
    }
}

impl Runtime for Claude {
    fn name(&self) -> &'static str {
        "claude"
    }

    fn api_hint(&self) -> &'static str {
        "Check ANTHROPIC_BASE_URL (if the bot sets one), the network or proxy, and the \
         credentials (ANTHROPIC_API_KEY, or `claude /login`)."
    }

    fn login_hint(&self, env: &BTreeMap<String, String>) -> String {
        // The credential the CLI takes first (the order of `login` below): a new one of it is
        // what works.
        for (name, what) in [
            ("ANTHROPIC_AUTH_TOKEN", "token"),
            ("ANTHROPIC_API_KEY", "key"),
            ("CLAUDE_CODE_OAUTH_TOKEN", "token"),
        ] {
            if env.get(name).is_some_and(|v| !v.is_empty()) {
                return format!(
                    "The bot logs in with its own {name}: give it a new {what} with \
                     SetEnvironment (`merge`) with `{name}=…` (its other variables are kept)."
                );
            }
        }
        "Log in again with `claude /login` in a terminal, as the user botvisord runs as (with \
         the bot's CLAUDE_CONFIG_DIR, if it sets one), or give the bot a key with \
         SetEnvironment (`merge`) with `ANTHROPIC_API_KEY=…`."
            .to_owned()
    }

    fn scopes(&self, request: &serde_json::Value) -> Vec<Scope> {
        scopes::scopes(request)
    }

    fn grant(&self, request: &serde_json::Value, scope: Scope) -> Grant {
        scopes::grant(request, scope)
    }

    fn reach(&self, request: &serde_json::Value, scope: Scope) -> String {
        scopes::reach(request, scope)
    }

    fn can_resume(&self) -> bool {
        true
    }

    fn binary(&self) -> Result<PathBuf, RuntimeError> {
        self.binary.find()
    }

    fn permission_modes(&self) -> &'static [&'static str] {
        PERMISSION_MODES
    }

    fn transcript_exists(
        &self,
        env: &BTreeMap<String, String>,
        cwd: &Path,
        session_id: &str,
    ) -> bool {
        transcript_of(env, cwd, session_id).is_some()
    }

    fn can_fork(&self) -> bool {
        true
    }

    fn conversations(&self, env: &BTreeMap<String, String>, cwd: &Path) -> Vec<Conversation> {
        transcript::config_dir(env)
            .map(|dir| conversations::list(&dir, cwd))
            .unwrap_or_default()
    }

    fn history(
        &self,
        env: &BTreeMap<String, String>,
        cwd: &Path,
        session_id: &str,
    ) -> Vec<ChatPayload> {
        transcript_of(env, cwd, session_id)
            .map(|path| conversations::history(&path))
            .unwrap_or_default()
    }

    fn holder(
        &self,
        env: &BTreeMap<String, String>,
        cwd: &Path,
        session_id: &str,
    ) -> Option<super::Holder> {
        self.holders(env, cwd, session_id).into_iter().next()
    }

    fn holders(
        &self,
        env: &BTreeMap<String, String>,
        _cwd: &Path,
        session_id: &str,
    ) -> Vec<super::Holder> {
        let marker = env
            .get(crate::process::tree::BOT_MARKER)
            .map(String::as_str);
        transcript::config_dir(env)
            .map(|dir| registry::holders(&dir, session_id, marker))
            .unwrap_or_default()
    }

    fn before_resume(
        &self,
        env: &BTreeMap<String, String>,
        cwd: &Path,
        session_id: &str,
    ) -> std::io::Result<bool> {
        let Some(path) = transcript_of(env, cwd, session_id) else {
            return Ok(false);
        };
        let content = std::fs::read_to_string(&path)?;
        let Some(record) = leaf::record_to_append(&content, session_id) else {
            return Ok(false);
        };
        let mut file = std::fs::OpenOptions::new().append(true).open(&path)?;
        let sep = if content.ends_with('\n') || content.is_empty() {
            ""
        } else {
            "\n"
        };
        std::io::Write::write_all(&mut file, format!("{sep}{record}\n").as_bytes())?;
        Ok(true)
    }

    fn conversation_files(
        &self,
        env: &BTreeMap<String, String>,
        cwd: &Path,
        session_id: &str,
    ) -> Vec<PathBuf> {
        transcript_of(env, cwd, session_id).into_iter().collect()
    }

    fn conversation_target(
        &self,
        env: &BTreeMap<String, String>,
        cwd: &Path,
        session_id: &str,
    ) -> Option<PathBuf> {
        transcript::target(&transcript::config_dir(env)?, cwd, session_id)
    }

    fn conversation_has_message(
        &self,
        env: &BTreeMap<String, String>,
        cwd: &Path,
        session_id: &str,
        text: &str,
        since: std::time::SystemTime,
    ) -> bool {
        transcript_of(env, cwd, session_id)
            .is_some_and(|path| transcript::has_user_message_since(&path, text, since))
    }

    fn taken_turn(
        &self,
        env: &BTreeMap<String, String>,
        cwd: &Path,
        session_id: &str,
        text: &str,
        since: std::time::SystemTime,
    ) -> Option<super::TakenTurn> {
        transcript_of(env, cwd, session_id).and_then(|path| taken::read(&path, text, since))
    }

    fn reopen(
        &self,
        spec: &LaunchSpec<'_>,
        _turn: Option<&super::Cut>,
        _open: &[String],
    ) -> Option<Box<dyn Protocol>> {
        spec.start.session_id()?;
        Some(Box::new(protocol::ClaudeProtocol::reopened(spec.start)))
    }

    fn restore(&self, saved: &serde_json::Value) -> Option<Box<dyn Protocol>> {
        serde_json::from_value::<protocol::ClaudeProtocol>(saved.clone())
            .ok()
            .map(|p| Box::new(p) as Box<dyn Protocol>)
    }

    fn added_since(&self, file: &Path, from: u64, own: &[String]) -> Vec<ChatPayload> {
        conversations::added_since(file, from, own)
    }

    fn cost_baseline(
        &self,
        env: &BTreeMap<String, String>,
        cwd: &Path,
        session_id: &str,
    ) -> Option<f64> {
        let path = transcript_of(env, cwd, session_id)?;
        let content = std::fs::read_to_string(path).ok()?;
        transcript::last_cost(&content, session_id)
    }

    fn command(&self, program: PathBuf, spec: &LaunchSpec<'_>) -> LaunchCommand {
        launch::command(program, spec)
    }

    fn fresh_start(&self) -> SessionStart {
        SessionStart::New(uuid::Uuid::new_v4().to_string())
    }

    fn open(&self, spec: &LaunchSpec<'_>) -> Box<dyn Protocol> {
        Box::new(protocol::ClaudeProtocol::new(spec.start))
    }

    fn fatal_reason(&self, text: &str) -> Option<&'static str> {
        results::fatal_reason(text)
    }

    /// `$CLAUDE_CONFIG_DIR/.credentials.json` (default `~/.claude`), where `claude /login`
    /// writes a subscription's OAuth tokens on Linux.
    fn credentials_file(&self, env: &BTreeMap<String, String>) -> Option<PathBuf> {
        transcript::config_dir(env).map(|d| d.join(".credentials.json"))
    }

    fn session_in_use(&self, stderr: &str) -> Option<String> {
        stderr.lines().find_map(events::session_in_use)
    }

    /// In the order Claude Code takes them: a cloud provider (`CLAUDE_CODE_USE_BEDROCK`,
    /// `…_VERTEX`, `…_FOUNDRY`), `ANTHROPIC_AUTH_TOKEN`, `ANTHROPIC_API_KEY`,
    /// `CLAUDE_CODE_OAUTH_TOKEN`, then the credentials file `claude /login` writes.
    fn login(
        &self,
        own: &BTreeMap<String, String>,
        env: &BTreeMap<String, String>,
    ) -> crate::runtime::login::Login {
        use crate::runtime::login::{Login, Source};
        const VARIABLES: [&str; 6] = [
            "CLAUDE_CODE_USE_BEDROCK",
            "CLAUDE_CODE_USE_VERTEX",
            "CLAUDE_CODE_USE_FOUNDRY",
            "ANTHROPIC_AUTH_TOKEN",
            "ANTHROPIC_API_KEY",
            "CLAUDE_CODE_OAUTH_TOKEN",
        ];
        let file = self.credentials_file(env);
        let source = Login::variable(&VARIABLES, own, env)
            .or_else(|| file.clone().filter(|f| f.is_file()).map(Source::File))
            .unwrap_or(Source::None);
        Login {
            source,
            variables: VARIABLES[3..].iter().map(|v| (*v).to_owned()).collect(),
            file,
            how: self.login_hint(env),
        }
    }
}
