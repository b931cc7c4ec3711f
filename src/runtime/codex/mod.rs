//! OpenAI Codex (`@openai/codex`), driven through `codex app-server` (JSON-RPC over stdio).
//!
//! Every fact about Codex's files and messages lives in this folder: [`launch`] (argv),
//! [`protocol`] (the JSON-RPC lines), [`rollout`] (where threads are kept), [`taken`] (what a
//! thread holds of a message), [`writer`] (who holds a thread), [`sandbox`] (bubblewrap),
//! [`settings`] (the permission setting: approval policy and sandbox). The facts come from `shared/codex-facts.md`
//! and are re-checked on the real CLI 0.171.0 by tests/facts/codex.rs.

pub mod config;
pub mod conversations;
pub mod launch;
pub mod native;
pub mod protocol;
pub mod rollout;
pub mod sandbox;
pub mod scopes;
pub mod settings;
pub mod taken;
pub mod writer;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::{
    ChatPayload, Conversation, LaunchCommand, LaunchSpec, Protocol, Runtime, RuntimeError,
    SessionStart, TakenTurn,
};

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

    fn can_fork(&self) -> bool {
        true
    }

    fn held_elsewhere(&self, error: &str) -> bool {
        writer::held_elsewhere(error)
    }

    fn holder(
        &self,
        env: &BTreeMap<String, String>,
        _cwd: &Path,
        session_id: &str,
    ) -> Option<super::Holder> {
        let home = rollout::codex_home(env)?;
        let held = writer::holder(&home, session_id)?;
        // A process of this bot's (a stop's leftover) is not another holder.
        let marker = env.get(crate::process::tree::BOT_MARKER);
        if marker.is_some_and(|m| crate::process::tree::has_marker(held.pid, m)) {
            return None;
        }
        Some(super::Holder {
            identity: crate::process::identity::identify(held.pid).ok()?,
            what: held.what.to_owned(),
            command: held.command.chars().take(300).collect(),
        })
    }

    fn transcript_exists(
        &self,
        env: &BTreeMap<String, String>,
        _cwd: &Path,
        session_id: &str,
    ) -> bool {
        rollout::codex_home(env).is_some_and(|home| rollout::find(&home, session_id).is_some())
    }

    fn conversations(&self, env: &BTreeMap<String, String>, cwd: &Path) -> Vec<Conversation> {
        rollout::codex_home(env)
            .map(|home| conversations::list(&home, cwd))
            .unwrap_or_default()
    }

    fn history(
        &self,
        env: &BTreeMap<String, String>,
        _cwd: &Path,
        session_id: &str,
    ) -> Vec<ChatPayload> {
        rollout::codex_home(env)
            .map(|home| conversations::history(&home, session_id))
            .unwrap_or_default()
    }

    fn reopen(
        &self,
        spec: &LaunchSpec<'_>,
        turn: Option<&crate::runtime::Cut>,
        open: &[String],
    ) -> Option<Box<dyn crate::runtime::Protocol>> {
        let thread = spec.start.session_id()?.to_owned();
        let turn = match turn {
            Some(crate::runtime::Cut::BeforeTurn { turn_id }) => Some(turn_id.clone()),
            _ => None,
        };
        Some(Box::new(protocol::CodexProtocol::reopened(
            spec, thread, turn, open,
        )))
    }

    fn restore(&self, saved: &serde_json::Value) -> Option<Box<dyn crate::runtime::Protocol>> {
        serde_json::from_value::<protocol::CodexProtocol>(saved.clone())
            .ok()
            .map(|p| Box::new(p) as Box<dyn crate::runtime::Protocol>)
    }

    fn added_since(&self, file: &Path, from: u64, own: &[String]) -> Vec<ChatPayload> {
        conversations::added_since(file, from, own)
    }

    fn conversation_has_message(
        &self,
        env: &BTreeMap<String, String>,
        cwd: &Path,
        session_id: &str,
        text: &str,
        since: std::time::SystemTime,
    ) -> bool {
        self.taken_turn(env, cwd, session_id, text, since).is_some()
    }

    /// Read from the thread's history as Codex resumes it ([`rollout::history`], [`taken`]): the
    /// cut is [`crate::runtime::Cut::BeforeTurn`] the turn that took the message.
    fn taken_turn(
        &self,
        env: &BTreeMap<String, String>,
        _cwd: &Path,
        session_id: &str,
        text: &str,
        since: std::time::SystemTime,
    ) -> Option<TakenTurn> {
        let history = rollout::history(&rollout::codex_home(env)?, session_id)?;
        taken::read_lines(history.lines(), text, since)
    }

    /// Every rollout file of the thread under `sessions/` that is not compressed: its root and
    /// its segments (a resume needs the newest segment and the files it continues; Codex keeps
    /// the others, and so does the copy). Codex needs nothing else to resume them: its index
    /// row is rebuilt (tests/facts/codex.rs
    /// `codex_clean_up_compresses_cold_rollouts_and_deletes_only_when_asked`).
    fn conversation_files(
        &self,
        env: &BTreeMap<String, String>,
        _cwd: &Path,
        session_id: &str,
    ) -> Vec<PathBuf> {
        let Some(home) = rollout::codex_home(env) else {
            return Vec::new();
        };
        let mut files: Vec<PathBuf> = rollout::thread_files(&home, session_id)
            .into_iter()
            .filter(|f| !f.compressed)
            .map(|f| f.path)
            .collect();
        files.sort();
        files
    }

    /// `$CODEX_HOME/sessions/YYYY/MM/DD/<name>`, the date of the file's own name (local time, as
    /// Codex named it); `None` for a name that is not one of the thread's rollout files.
    fn conversation_file_target(
        &self,
        env: &BTreeMap<String, String>,
        _cwd: &Path,
        session_id: &str,
        name: &str,
    ) -> Option<PathBuf> {
        rollout::name_of(name, session_id).filter(|(_, compressed)| !compressed)?;
        let date = name.strip_prefix("rollout-")?.get(..10)?;
        let (y, rest) = date.split_once('-')?;
        let (m, d) = rest.split_once('-')?;
        let digits = |p: &str, n: usize| p.len() == n && p.bytes().all(|b| b.is_ascii_digit());
        if !(digits(y, 4) && digits(m, 2) && digits(d, 2)) {
            return None;
        }
        Some(
            rollout::codex_home(env)?
                .join("sessions")
                .join(y)
                .join(m)
                .join(d)
                .join(name),
        )
    }

    /// `<target>.zst` (compressed by `rollout/compress`) or
    /// `$CODEX_HOME/archived_sessions/<name>` (archived), when it exists.
    fn conversation_held_otherwise(
        &self,
        env: &BTreeMap<String, String>,
        target: &Path,
    ) -> Option<PathBuf> {
        let mut compressed = target.as_os_str().to_owned();
        compressed.push(rollout::COMPRESSED);
        let compressed = PathBuf::from(compressed);
        if compressed.is_file() {
            return Some(compressed);
        }
        let archived = rollout::codex_home(env)?
            .join("archived_sessions")
            .join(target.file_name()?);
        archived.is_file().then_some(archived)
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

    fn login_hint(&self, env: &BTreeMap<String, String>) -> String {
        // Codex takes its key from the variable its model provider's `env_key` names (never
        // OPENAI_API_KEY from its environment, 0.171.0), else from `codex login`.
        let home = rollout::codex_home(env);
        if let (_, config::ProviderKey::Variable(name)) = config::provider_key(home.as_deref()) {
            return format!(
                "The bot's model provider takes its key from {name}: give it a new one with \
                 SetEnvironment (`merge`) with `{name}=…` (its other variables are kept)."
            );
        }
        "Log in again with `codex login` in a terminal, with the bot's CODEX_HOME (an API key: \
         `codex login --with-api-key` reads it on stdin)."
            .to_owned()
    }

    /// Codex's login is its model provider's (`config.toml`'s `model_provider`): the variable
    /// its `env_key` names, or for `openai` (and a provider with `requires_openai_auth`)
    /// `$CODEX_HOME/auth.json` (`codex login`); a provider without `env_key` needs none.
    fn login(
        &self,
        own: &BTreeMap<String, String>,
        env: &BTreeMap<String, String>,
    ) -> crate::runtime::login::Login {
        use crate::runtime::login::{Login, Source};
        let home = rollout::codex_home(env);
        let file = self.credentials_file(env);
        let (provider, key) = config::provider_key(home.as_deref());
        let (source, variables, file) = match key {
            config::ProviderKey::Variable(name) => (
                Login::variable(&[name.as_str()], own, env).unwrap_or(Source::None),
                vec![name],
                None,
            ),
            config::ProviderKey::None => (Source::Provider(provider), Vec::new(), None),
            config::ProviderKey::CodexLogin => (
                file.clone()
                    .filter(|f| f.is_file())
                    .map_or(Source::None, Source::File),
                Vec::new(),
                file,
            ),
        };
        Login {
            source,
            variables,
            file,
            how: self.login_hint(env),
        }
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

    fn reach(&self, request: &serde_json::Value, scope: crate::runtime::Scope) -> String {
        scopes::reach(request, scope)
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
    fn a_kept_rollout_goes_back_in_its_dates_folder_unless_codex_holds_it_otherwise() {
        let dir = tempfile::tempdir().unwrap();
        let env = BTreeMap::from([(
            "CODEX_HOME".to_owned(),
            dir.path().to_string_lossy().into_owned(),
        )]);
        let codex = Codex::new(None);
        let id = "01a24232-32c9-7083-9e2b-f1d31f7ad15e";
        let name =
            format!("rollout-2026-12-04T17-55-16-{id}_01a24232-35b6-72b1-9e0a-1e4fb7ef0f7a.jsonl");
        let target = codex
            .conversation_file_target(&env, Path::new("/w"), id, &name)
            .unwrap();
        assert_eq!(target, dir.path().join("sessions/2026/12/04").join(&name));
        for other in [
            format!("rollout-2026-12-04T17-55-16-{id}.jsonl.zst"),
            "rollout-2026-12-04T17-55-16-other.jsonl".to_owned(),
            format!("rollout-20x6-12-04T17-55-16-{id}.jsonl"),
            format!("{id}.jsonl"),
        ] {
            assert_eq!(
                codex.conversation_file_target(&env, Path::new("/w"), id, &other),
                None,
                "{other}"
            );
        }
        assert_eq!(codex.conversation_held_otherwise(&env, &target), None);
        std::fs::create_dir_all(target.parent().unwrap()).unwrap();
        let zst = target.with_extension("jsonl.zst");
        std::fs::write(&zst, "z").unwrap();
        assert_eq!(
            codex.conversation_held_otherwise(&env, &target),
            Some(zst.clone())
        );
        std::fs::remove_file(&zst).unwrap();
        let archived = dir.path().join("archived_sessions").join(&name);
        std::fs::create_dir_all(archived.parent().unwrap()).unwrap();
        std::fs::write(&archived, "{}").unwrap();
        assert_eq!(
            codex.conversation_held_otherwise(&env, &target),
            Some(archived)
        );
        // What a copy is made of: the plain files, root and segments.
        std::fs::write(&target, "{}").unwrap();
        std::fs::write(&zst, "z").unwrap();
        assert_eq!(
            codex.conversation_files(&env, Path::new("/w"), id),
            vec![target]
        );
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
