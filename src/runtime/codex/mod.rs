//! OpenAI Codex (`@openai/codex`), driven through `codex app-server` (JSON-RPC over stdio).
//!
//! Every fact about Codex's files and messages lives in this folder: [`launch`] (argv),
//! [`protocol`] (the JSON-RPC lines), [`rollout`] (where threads are kept), [`sandbox`] (bubblewrap), [`settings`] (the
//! permission setting: approval policy and sandbox). The facts come from `shared/codex-facts.md`
//! and are re-checked on the real CLI 0.171.0 by tests/codex_facts.rs.

pub mod config;
pub mod launch;
pub mod native;
pub mod protocol;
pub mod rollout;
pub mod sandbox;
pub mod scopes;
pub mod settings;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::{LaunchCommand, LaunchSpec, Protocol, Runtime, RuntimeError, SessionStart};

/// The environment variable that names the binary when the config has no `codex_bin`.
pub const BIN_ENV: &str = "BOTVISOR_CODEX_BIN";

/// The Codex runtime.
#[derive(Debug, Clone)]
pub struct Codex {
    binary: super::binary::BinaryLookup,
}

/// How Codex's binary is named and pointed at.
const NAMES: super::binary::BinaryNames = super::binary::BinaryNames {
    command: "codex",
    product: "Codex",
    config_key: "codex_bin",
    env_var: BIN_ENV,
    install: "npm install -g @openai/codex",
};

impl Codex {
    /// A runtime whose binary is `configured` (config key `codex_bin`), else the environment
    /// variable `BOTVISOR_CODEX_BIN`, else `codex` on the daemon's `PATH`. The npm package's
    /// `codex` (a Node wrapper) is taken for the native binary it would run
    /// (`…/@openai/codex-linux-x64/vendor/<triple>/bin/codex`, [`native::native_binary`]).
    pub fn new(configured: Option<PathBuf>) -> Codex {
        Codex {
            binary: super::binary::BinaryLookup::new(NAMES, configured),
        }
    }
}

impl Runtime for Codex {
    fn name(&self) -> &'static str {
        "codex"
    }

    fn can_resume(&self) -> bool {
        true
    }

    fn binary(&self) -> Result<PathBuf, RuntimeError> {
        native::native_binary(self.binary.find()?)
    }

    fn permission_modes(&self) -> &'static [&'static str] {
        settings::PERMISSION_MODES
    }

    fn check_environment(&self, env: &BTreeMap<String, String>) -> Result<(), RuntimeError> {
        let Some(home) = rollout::codex_home(env) else {
            return Err(RuntimeError::Unavailable(
                "neither CODEX_HOME nor HOME is set in the bot's environment; Codex needs its \
                 home folder (set CODEX_HOME in the bot's env)"
                    .to_owned(),
            ));
        };
        match std::fs::metadata(&home) {
            Ok(m) if m.is_dir() => Ok(()),
            Ok(_) => Err(RuntimeError::Unavailable(format!(
                "Codex's home folder {} is not a folder (CODEX_HOME, default ~/.codex); point \
                 CODEX_HOME at a folder, then Send again",
                home.display()
            ))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Err(RuntimeError::Unavailable(format!(
                    "Codex's home folder {} does not exist (CODEX_HOME, default ~/.codex); \
                     create it (mkdir -p) or point CODEX_HOME elsewhere, then Send again",
                    home.display()
                )))
            }
            Err(e) => Err(RuntimeError::Unavailable(format!(
                "Codex's home folder {} cannot be read ({e}); fix it or point CODEX_HOME \
                 elsewhere, then Send again",
                home.display()
            ))),
        }
    }

    fn check_launch(
        &self,
        program: &Path,
        permission_mode: &str,
        env: &BTreeMap<String, String>,
    ) -> Result<(), (&'static str, String)> {
        sandbox::check(program, permission_mode, env).map_err(|e| (sandbox::SANDBOX_UNAVAILABLE, e))
    }

    fn transcript_exists(
        &self,
        env: &BTreeMap<String, String>,
        _cwd: &Path,
        session_id: &str,
    ) -> bool {
        rollout::codex_home(env).is_some_and(|home| rollout::find(&home, session_id).is_some())
    }

    fn conversation_has_message(
        &self,
        env: &BTreeMap<String, String>,
        _cwd: &Path,
        session_id: &str,
        text: &str,
        since: std::time::SystemTime,
    ) -> bool {
        rollout::codex_home(env)
            .and_then(|home| rollout::find(&home, session_id))
            .is_some_and(|path| rollout::has_user_message_since(&path, text, since))
    }

    fn fresh_start(&self) -> SessionStart {
        SessionStart::Fresh
    }

    fn command(&self, program: PathBuf, spec: &LaunchSpec<'_>) -> LaunchCommand {
        launch::command(program, spec)
    }

    fn open(&self, spec: &LaunchSpec<'_>) -> Box<dyn Protocol> {
        // An empty model means config.toml's: named explicitly, because a resumed thread keeps
        // the model it last ran with.
        let default_model = config::value(rollout::codex_home(spec.env).as_deref(), "model");
        Box::new(protocol::CodexProtocol::new(spec).with_default_model(default_model))
    }

    fn can_change_tool_input(&self) -> bool {
        // An approval's answer is a decision alone (codex-facts.md, "app-server messages").
        false
    }

    fn api_hint(&self) -> &'static str {
        "Check the model provider in $CODEX_HOME/config.toml (its base_url), the network or \
         proxy, and the credentials (`codex login`, or the provider's key variable)."
    }

    fn login_hint(&self) -> &'static str {
        "Log in with `codex login` in a terminal, with the bot's CODEX_HOME, or give the bot a \
         key: `botvisorctl set BOT --env OPENAI_API_KEY=…`."
    }

    fn scopes(&self, request: &serde_json::Value) -> Vec<crate::runtime::Scope> {
        scopes::scopes(request)
    }

    fn grant(
        &self,
        request: &serde_json::Value,
        scope: crate::runtime::Scope,
    ) -> crate::runtime::Grant {
        scopes::grant(request, scope)
    }

    fn session_in_use(&self, _stderr: &str) -> Option<String> {
        // Codex names new threads itself: an id cannot be taken.
        None
    }

    /// `$CODEX_HOME/auth.json` (default `~/.codex`), where `codex login` writes its key or tokens.
    fn credentials_file(&self, env: &BTreeMap<String, String>) -> Option<PathBuf> {
        rollout::codex_home(env).map(|h| h.join("auth.json"))
    }

    fn fatal_reason(&self, text: &str) -> Option<&'static str> {
        let t = text.to_ascii_lowercase();
        if [
            "unauthorized",
            "missing environment variable",
            "invalid api key",
            "401",
        ]
        .iter()
        .any(|w| t.contains(w))
        {
            Some("authentication")
        } else if ["usagelimitexceeded", "usage limit", "quota"]
            .iter()
            .any(|w| t.contains(w))
        {
            Some("usage limit")
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_codex_home_is_named_before_the_launch() {
        let dir = tempfile::tempdir().unwrap();
        let codex = Codex::new(Some("/nonexistent/codex".into()));
        let mut env = BTreeMap::new();
        assert!(codex.check_environment(&env).is_err());
        env.insert("HOME".to_owned(), dir.path().to_string_lossy().into_owned());
        let e = codex.check_environment(&env).unwrap_err().to_string();
        assert!(e.contains(".codex") && e.contains("does not exist"), "{e}");
        std::fs::create_dir(dir.path().join(".codex")).unwrap();
        assert_eq!(codex.check_environment(&env), Ok(()));
        env.insert("CODEX_HOME".to_owned(), "/nonexistent/home".to_owned());
        assert!(codex.check_environment(&env).is_err());
    }

    #[test]
    fn a_fresh_start_lets_codex_name_the_thread() {
        assert_eq!(Codex::new(None).fresh_start(), SessionStart::Fresh);
    }

    #[test]
    fn the_binary_error_names_the_config_key() {
        let e = Codex::new(Some("/nonexistent/codex".into()))
            .binary()
            .unwrap_err()
            .to_string();
        assert!(e.contains("codex_bin") && e.contains(BIN_ENV), "{e}");
    }
}
