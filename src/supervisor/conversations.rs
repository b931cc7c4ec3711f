//! The conversations the CLIs keep for a folder, as `ListConversations` lists them (issue 28):
//! read from their files, owned by a bot or held by a process outside botvisor.

use std::collections::BTreeMap;
use std::path::Path;

use super::{BotError, Supervisor, bot, canonical_cwd};
use crate::config::Config;
use crate::store::BotRecord;

/// The most characters of a conversation's title (its first user message) that
/// [`Supervisor::conversations`] gives.
pub const MAX_TITLE_CHARS: usize = 200;

/// A conversation a CLI keeps for a folder, as `ListConversations` gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// The runtime's name.
    pub runtime: String,
    /// The session (Codex: thread) id.
    pub session_id: String,
    /// When its file was last written, Unix seconds.
    pub modified_s: i64,
    /// Its first user message, escaped ([`crate::text::escape`]) and cut to
    /// [`MAX_TITLE_CHARS`] (then ending with `…`).
    pub title: String,
    /// The bot that owns it (its session is recorded), if any.
    pub bot_id: Option<String>,
    /// A live process outside botvisor that holds it, in words, if any.
    pub held_by: Option<String>,
}

/// The environment a CLI of `record` would have, without a bot's marker: what a listing or an
/// adoption reads the CLIs' folders and holders with (no process is any bot's own here).
fn listing_env(config: &Config, record: &BotRecord) -> BTreeMap<String, String> {
    let mut env = bot::bot_env(config, record);
    env.remove(crate::process::tree::BOT_MARKER);
    env
}

/// A title read from a transcript, made safe to show: escaped, one line, bounded.
fn bounded_title(title: &str) -> String {
    let escaped = crate::text::escape(title.trim(), false);
    match escaped.char_indices().nth(MAX_TITLE_CHARS) {
        Some((at, _)) => format!("{}…", &escaped[..at]),
        None => escaped.into_owned(),
    }
}

impl Supervisor {
    /// The conversations the CLIs keep for the folder `cwd` (canonicalised), read from their
    /// files as a CLI started with the daemon's environment plus `env` finds them, of the runtime
    /// `runtime` only when given; newest first, then by id. Errors: InvalidArgument (a `cwd`
    /// `CreateBot` would refuse, an unknown runtime).
    pub fn conversations(
        &self,
        cwd: &str,
        runtime: Option<&str>,
        env: &BTreeMap<String, String>,
    ) -> Result<Vec<Listed>, BotError> {
        let cwd = canonical_cwd(cwd)?;
        if let Some(r) = runtime
            && !self.runtimes.contains_key(r)
        {
            return Err(BotError::InvalidArgument(format!(
                "unknown runtime `{}`; known runtimes: {}",
                crate::text::escape(r, false),
                self.runtime_names().join(", ")
            )));
        }
        let bots = self.list();
        let mut out = Vec::new();
        for (name, rt) in &self.runtimes {
            if runtime.is_some_and(|r| r != *name) {
                continue;
            }
            let record = BotRecord {
                env: env.clone(),
                ..BotRecord::new("", "", &cwd, name)
            };
            let full_env = listing_env(&self.config, &record);
            for c in rt.conversations(&full_env, Path::new(&cwd)) {
                let bot_id = bots
                    .iter()
                    .find(|h| {
                        let r = h.snapshot().record;
                        r.runtime == *name && r.session_id.as_deref() == Some(&c.session_id)
                    })
                    .map(|h| h.id.clone());
                out.push(Listed {
                    runtime: name.to_string(),
                    modified_s: c
                        .modified
                        .duration_since(std::time::UNIX_EPOCH)
                        .map(|d| d.as_secs() as i64)
                        .unwrap_or(0),
                    title: bounded_title(&c.title),
                    bot_id,
                    held_by: None,
                    session_id: c.session_id,
                });
            }
        }
        out.sort_by(|a, b| {
            b.modified_s
                .cmp(&a.modified_s)
                .then_with(|| a.session_id.cmp(&b.session_id))
        });
        Ok(out)
    }

    /// Who outside botvisor holds the conversation `session_id` of `runtime` in `cwd` now, in
    /// words (`pid N: what`); `None` when nobody does.
    pub fn held_by(
        &self,
        runtime: &str,
        cwd: &str,
        session_id: &str,
        env: &BTreeMap<String, String>,
    ) -> Option<String> {
        let rt = self.runtimes.get(runtime)?;
        let record = BotRecord {
            env: env.clone(),
            ..BotRecord::new("", "", cwd, runtime)
        };
        let full_env = listing_env(&self.config, &record);
        rt.holders(&full_env, Path::new(cwd), session_id)
            .first()
            .map(|h| format!("pid {}: {}", h.identity.pid, h.what))
    }
}
