//! A daemon whose bots may be Codex bots, and the Responses API stand-in they talk to
//! ([`super::responses_api`]); waits shared by the Codex test binaries (tests/real/codex/chat.rs,
//! tests/real/codex/kills.rs).

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use futures_util::StreamExt;
use zbus::Variant;

use botvisor::dbus::client::BotProxy;

use super::responses_api::{ResponsesApi, Script, codex_env, codex_home};
use super::{Daemon, DaemonConfig, EVENT_TIMEOUT, TestEnv, create_options, write_config};

/// A daemon whose bots may be Codex bots, and the stand-in they talk to.
pub struct CodexSetup {
    /// The Responses API stand-in.
    pub api: ResponsesApi,
    /// The daemon.
    pub daemon: Daemon,
    /// The daemon's configuration.
    pub cfg: DaemonConfig,
    /// The scratch `CODEX_HOME` the bots use.
    pub codex_home: PathBuf,
    /// The environment a Codex bot needs to reach the stand-in.
    pub bot_env: HashMap<String, String>,
}

impl CodexSetup {
    /// The stand-in answering with `script`, and a daemon running `codex`.
    pub async fn start(env: &TestEnv, codex: PathBuf, script: Script) -> CodexSetup {
        CodexSetup::start_with(env, codex, script, "").await
    }

    /// With `provider_extra` added to the stand-in provider's table.
    pub async fn start_with(
        env: &TestEnv,
        codex: PathBuf,
        script: Script,
        provider_extra: &str,
    ) -> CodexSetup {
        CodexSetup::start_configured(env, codex, script, provider_extra, "").await
    }

    /// With `provider_extra` added to the stand-in provider's table and a daemon configuration
    /// file holding `daemon_config` (TOML; none when empty).
    pub async fn start_configured(
        env: &TestEnv,
        codex: PathBuf,
        script: Script,
        provider_extra: &str,
        daemon_config: &str,
    ) -> CodexSetup {
        let api = ResponsesApi::start(script).await;
        let codex_home = codex_home(&env.home, &api.base_url, provider_extra);
        let mut cfg = env.daemon_config(None);
        cfg.codex_bin = Some(codex);
        if !daemon_config.is_empty() {
            cfg.config = Some(write_config(env.dir.path(), daemon_config));
        }
        let daemon = Daemon::start(&cfg, &env.conn).await;
        let bot_env = codex_env(&env.home, &codex_home, &env.marker);
        CodexSetup {
            api,
            daemon,
            cfg,
            codex_home,
            bot_env,
        }
    }

    /// Creates a Codex bot in `env.work` with `permission_mode` ("" for the CLI's default).
    pub async fn bot(&self, env: &TestEnv, permission_mode: &str) -> BotProxy<'static> {
        let work = env.work.to_str().unwrap().to_owned();
        let mut o = create_options(&work, &self.bot_env);
        o.insert("runtime", Variant::from("codex"));
        o.insert("permission_mode", Variant::from(permission_mode));
        let path = env
            .manager()
            .await
            .create_bot(o)
            .await
            .unwrap_or_else(|e| panic!("CreateBot codex: {e}"));
        env.bot(&path).await
    }

    /// The rollout of `thread` in the scratch `CODEX_HOME`, if it exists now.
    pub fn rollout(&self, thread: &str) -> Option<PathBuf> {
        botvisor::runtime::codex::rollout::find(&self.codex_home, thread)
    }
}

impl Drop for CodexSetup {
    /// Issue 45: no request the model was sent holds one of the test's messages more often than
    /// the test sent it ([`super::repeats`]).
    fn drop(&mut self) {
        let requests: Vec<Vec<String>> =
            self.api.requests().iter().map(|r| r.user_texts()).collect();
        super::repeats::assert_none(&self.cfg.database, &requests);
    }
}

/// Waits until no process of the test runs. A Codex that was told to stop can still be winding
/// down its threads for a moment after its main thread exited (seen as `Zl` in ps, but `S` when
/// read an instant earlier): what counts is that nothing stays.
pub async fn wait_no_leftovers(env: &TestEnv) {
    let waited = tokio::time::timeout(EVENT_TIMEOUT, async {
        while !env.leftovers().is_empty() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    if waited.is_err() {
        env.assert_no_leftovers();
    }
}

/// Waits until the bot records a conversation (at `turn/started`); returns it.
pub async fn wait_session(bot: &BotProxy<'_>) -> String {
    let bot = super::watching(bot).await;
    let mut changes = bot.receive_session_id_changed().await;
    let now = bot.session_id().await.unwrap();
    if !now.is_empty() {
        return now;
    }
    tokio::time::timeout(EVENT_TIMEOUT, async {
        while let Some(c) = changes.next().await {
            let id = c.get().await.unwrap();
            if !id.is_empty() {
                return id;
            }
        }
        panic!("SessionId stream ended")
    })
    .await
    .expect("the thread is recorded once its first turn began")
}
