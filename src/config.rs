//! The daemon's configuration: one TOML file, every key optional, each with the default written
//! here and in `docs/configuration.md`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

pub mod mcp;
pub mod notify;
pub mod values;

/// Environment variables a bot's CLI inherits from the daemon. An entry ending in `*` is a prefix.
/// Everything else in the daemon's environment stays out; a bot's own `env` option is added on top.
pub const DEFAULT_ENV_ALLOWLIST: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "LC_*",
    "TZ",
    "TMPDIR",
    "TERM",
    "XDG_RUNTIME_DIR",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
    "XDG_CACHE_HOME",
    "XDG_STATE_HOME",
    "ANTHROPIC_*",
    "CLAUDE_*",
    "OPENAI_*",
    "CODEX_*",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
];

/// The longest stop grace period accepted, in seconds (one hour).
pub const MAX_STOP_GRACE_S: f64 = 3600.0;

/// The longest other duration accepted, in seconds (one year).
pub const MAX_SECONDS: u64 = 365 * 24 * 3600;

/// Everything the daemon reads from `config.toml`. Unknown keys are an error, so a typo never
/// silently falls back to a default.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// The Claude Code binary. Default: the environment variable `BOTVISOR_CLAUDE_BIN`, else
    /// `claude` on the daemon's `PATH`.
    pub claude_bin: Option<PathBuf>,
    /// The Codex binary (the native one, not the npm package's Node wrapper). Default: the
    /// environment variable `BOTVISOR_CODEX_BIN`, else `codex` on the daemon's `PATH`.
    pub codex_bin: Option<PathBuf>,
    /// The SQLite database. Default: `$XDG_STATE_HOME/botvisor/botvisor.db`.
    pub database: Option<PathBuf>,
    /// Model for bots created without one (empty: the CLI's own default).
    pub default_model: Option<String>,
    /// The folder that holds the git worktrees `CreateBot`'s `worktree` makes without a `path`
    /// (absolute; one folder per bot, named after it). Default: `worktrees/<repository>-<hash>/`
    /// in botvisor's state folder (`core::worktree::repository_folder`).
    pub worktrees_dir: Option<PathBuf>,
    /// Permission mode for bots created without one (empty: the CLI's own default); it applies
    /// to the bots of each runtime that accepts it (a Claude Code mode is not given to Codex).
    pub default_permission_mode: Option<String>,
    /// Seconds between SIGTERM and SIGKILL when a bot is stopped (default 5).
    pub stop_grace_s: f64,
    /// Seconds of idleness after which a bot is stopped; 0 means never (default 900).
    pub idle_timeout_s: u64,
    /// Whether a client's `Hold` on a stopped bot starts its agent at once, before any message
    /// (issue 31, a warm start: the first message is then answered at a running agent's pace,
    /// not after the CLI's own start, about 0.35 s for Claude Code). `HoldWith`'s option
    /// `warm_start` overrides it per lease. Default true.
    pub warm_start: bool,
    /// How many crashes within `crash_loop_window_s` put a bot in state `failed` (default 5).
    pub crash_loop_limit: u32,
    /// The crash-loop window in seconds (default 120).
    pub crash_loop_window_s: u64,
    /// A process that dies within this many seconds of its launch, with no turn begun, makes the
    /// next start a new conversation (default 15). The fallback of design rule 4.
    pub fresh_start_if_dies_within_s: f64,
    /// Environment variables passed from the daemon to each bot's CLI (see
    /// [`DEFAULT_ENV_ALLOWLIST`]).
    pub env_allowlist: Vec<String>,
    /// Seconds a launched CLI may print nothing at all before it is stopped and its waiting turn
    /// fails (default 60; 0: never). Claude Code answers `initialize` about 0.3 s after launch.
    pub start_timeout_s: f64,
    /// Seconds after an `Interrupt` within which the turn must end; past them the agent is
    /// stopped gently and the turn ends `interrupted` (default 10; 0: never).
    pub interrupt_grace_s: f64,
    /// Seconds within which the CLI must answer a control request (`set_model`,
    /// `set_permission_mode`); past them the change is reported as failed (default 10; 0: never).
    pub control_timeout_s: f64,
    /// Seconds between two samples of a bot's resource use (`MemoryCurrent`, `CPUUsageNSec`,
    /// `TasksCurrent`) while it is busy or runs background tasks (default 2; 0: never; at least
    /// [`MIN_USAGE_INTERVAL_S`] otherwise). Never sampled while stopped or idle.
    pub usage_interval_s: f64,
    /// The memory limit in bytes for bots created without their own `memory_max` (default: none;
    /// at least 1 MiB). Written to `memory.max` of each bot's cgroup where the memory controller
    /// is delegated; elsewhere ignored, said once in the journal at start.
    pub memory_max: Option<u64>,
    /// Seconds waited past a plan's usage-limit reset before the waiting messages go (default 5;
    /// the service's clock may be a little behind botvisord's).
    pub limit_margin_s: f64,
    /// Seconds waited for a usage limit whose reset is not known or already past, doubled each
    /// time it is hit again before a turn is answered, up to an hour (default 300; at least 1).
    pub limit_retry_s: f64,
    /// The budget of bots created without their own `budget_usd`, in US dollars (none: no
    /// budget). When a bot's cost reaches it after a turn, the bot holds (`limited`, kind
    /// `budget`) until the budget is raised or it is restarted.
    pub budget_usd: Option<f64>,
    /// Whether a turn a plan's usage limit cut after the agent called tools continues by itself
    /// at the reset, for bots created without their own `continue_after_limit` (default false:
    /// an unattended continuation spends the next window; the turn ends `limited`).
    pub continue_after_limit: bool,
    /// Whether botvisor keeps its own copy of each bot's conversation files (Claude Code's
    /// transcript), beside the database in `conversations/`, and puts it back when the CLI's is
    /// gone before a resume (default true; `supervisor::keep`).
    pub keep_conversations: bool,
    /// Whether the agents outlive botvisord's own restarts, upgrades and crashes where it runs
    /// as a systemd user unit with a file descriptor store (issue 47, `systemd::life`; default
    /// true; elsewhere a restart ends the running turns, and the next botvisord asks each taken
    /// message again).
    pub survive_restarts: bool,
    /// How many times a message the conversation took and never answered (the agent or
    /// botvisord died first) is asked again, each time by a resume that drops the unanswered
    /// attempt (issue 25; default 3; 0: never, such a turn ends `taken_not_answered`).
    pub redo_limit: u32,
    /// How long a chain of bots creating bots may be (issue 29): a bot created by a bot's agent
    /// (or a process below it) has its creator's depth plus one, and `CreateBot` refuses a depth
    /// over this (`LimitExceeded`). 0: no bot may create bots. Default 2.
    pub agent_max_depth: u32,
    /// How many bots created by bots' agents may exist at once, all creators together; one more
    /// `CreateBot` from a bot is refused (`LimitExceeded`). 0: none. Default 10.
    pub agent_max_bots: u32,
    /// Whether idle bots are stopped, the least recently used first, while the kernel reports
    /// memory pressure (issue 31; default true). Never a bot with a turn, a queued message, a
    /// permission prompt, a background task, a live descendant or a holder
    /// (`supervisor::core::evict`).
    pub stop_idle_on_memory_pressure: bool,
    /// The memory stall, in milliseconds within `memory_pressure_window_s`, that is pressure:
    /// some task of botvisord's cgroup (or of the system) waited this long for memory (default
    /// 150; from 1 to the window).
    pub memory_pressure_stall_ms: u64,
    /// The window of `memory_pressure_stall_ms`, in seconds: 2, 4, 6, 8 or 10 (default 2). At
    /// most one bot is stopped per window.
    pub memory_pressure_window_s: u64,
    /// The pressure file watched (absolute). Default: the `memory.pressure` of botvisord's
    /// cgroup, else `/proc/pressure/memory` (`process::pressure::candidates`). A FIFO is a test
    /// hook: each line written to it is one pressure event.
    pub memory_pressure_file: Option<PathBuf>,
    /// `[mcp]`: what `botvisorctl mcp` lets an agent do (botvisord only checks it).
    pub mcp: mcp::McpConfig,
    /// `[notify]`: what `botvisor-notify` shows on the desktop (botvisord only checks it).
    pub notify: notify::NotifyConfig,
    /// `[[hooks]]`: commands `botvisor-notify` runs for events (botvisord only checks them).
    pub hooks: Vec<notify::HookConfig>,
}

/// The largest budget accepted, in US dollars (config `budget_usd`, `CreateBot`'s `budget_usd`,
/// `SetBudget`).
pub const MAX_BUDGET_USD: f64 = 1e9;

/// The shortest `usage_interval_s` accepted (other than 0), in seconds.
pub const MIN_USAGE_INTERVAL_S: f64 = 0.1;

/// The most `agent_max_depth` may be: a deeper chain of bots creating bots is a runaway.
pub const MAX_AGENT_DEPTH: u32 = 16;

/// The most `redo_limit` may be: each redo is one more request to the model.
pub const MAX_REDO_LIMIT: u32 = 20;

impl Default for Config {
    fn default() -> Self {
        Config {
            claude_bin: None,
            codex_bin: None,
            database: None,
            default_model: None,
            worktrees_dir: None,
            default_permission_mode: None,
            stop_grace_s: 5.0,
            idle_timeout_s: 900,
            warm_start: true,
            crash_loop_limit: 5,
            crash_loop_window_s: 120,
            fresh_start_if_dies_within_s: 15.0,
            env_allowlist: DEFAULT_ENV_ALLOWLIST
                .iter()
                .map(|s| s.to_string())
                .collect(),
            start_timeout_s: 60.0,
            interrupt_grace_s: 10.0,
            control_timeout_s: 10.0,
            usage_interval_s: 2.0,
            memory_max: None,
            limit_margin_s: 5.0,
            limit_retry_s: 300.0,
            budget_usd: None,
            continue_after_limit: false,
            keep_conversations: true,
            survive_restarts: true,
            redo_limit: 3,
            agent_max_depth: 2,
            agent_max_bots: 10,
            stop_idle_on_memory_pressure: true,
            memory_pressure_stall_ms: 150,
            memory_pressure_window_s: 2,
            memory_pressure_file: None,
            mcp: mcp::McpConfig::default(),
            notify: notify::NotifyConfig::default(),
            hooks: Vec::new(),
        }
    }
}

/// A configuration file that could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file exists but could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid TOML or a key has a wrong name or type; the message names the key
    /// and the line.
    #[error("invalid configuration in {path}: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// The parser's message, with line and column.
        message: String,
    },
}

/// The longest message about a configuration, in characters: the parser quotes the line it
/// stopped at, and a line can be megabytes long.
pub const MAX_CONFIG_MESSAGE_CHARS: usize = 2000;

/// `message` cut to [`MAX_CONFIG_MESSAGE_CHARS`], saying so.
fn bounded(message: String) -> String {
    if message.chars().count() <= MAX_CONFIG_MESSAGE_CHARS {
        return message;
    }
    let cut: String = message.chars().take(MAX_CONFIG_MESSAGE_CHARS).collect();
    format!("{cut} … (cut at {MAX_CONFIG_MESSAGE_CHARS} characters)")
}

impl Config {
    /// Parses a configuration from TOML text. `path` is only used in error messages.
    pub fn from_toml(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let config: Config = toml::from_str(text).map_err(|e| ConfigError::Invalid {
            path: path.to_owned(),
            message: bounded(explain(&e, text)),
        })?;
        config.validate().map_err(|message| ConfigError::Invalid {
            path: path.to_owned(),
            message,
        })?;
        Ok(config)
    }

    /// Reads `path`. With `required` false a missing file gives the defaults.
    pub fn load(path: &Path, required: bool) -> Result<Config, ConfigError> {
        match std::fs::read_to_string(path) {
            Ok(text) => Config::from_toml(&text, path),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !required => {
                Ok(Config::default())
            }
            Err(source) => Err(ConfigError::Read {
                path: path.to_owned(),
                source,
            }),
        }
    }

    fn validate(&self) -> Result<(), String> {
        let seconds = |key: &str, v: f64, max: f64| {
            if v.is_finite() && (0.0..=max).contains(&v) {
                Ok(())
            } else {
                Err(format!(
                    "key `{key}` must be a number of seconds from 0 to {max}, got {v}"
                ))
            }
        };
        seconds("stop_grace_s", self.stop_grace_s, MAX_STOP_GRACE_S)?;
        seconds(
            "fresh_start_if_dies_within_s",
            self.fresh_start_if_dies_within_s,
            MAX_SECONDS as f64,
        )?;
        seconds(
            "idle_timeout_s",
            self.idle_timeout_s as f64,
            MAX_SECONDS as f64,
        )?;
        seconds(
            "crash_loop_window_s",
            self.crash_loop_window_s as f64,
            MAX_SECONDS as f64,
        )?;
        seconds("start_timeout_s", self.start_timeout_s, MAX_SECONDS as f64)?;
        seconds(
            "interrupt_grace_s",
            self.interrupt_grace_s,
            MAX_SECONDS as f64,
        )?;
        seconds(
            "control_timeout_s",
            self.control_timeout_s,
            MAX_SECONDS as f64,
        )?;
        seconds("usage_interval_s", self.usage_interval_s, 3600.0)?;
        seconds("limit_margin_s", self.limit_margin_s, 3600.0)?;
        seconds("limit_retry_s", self.limit_retry_s, 3600.0)?;
        if let Some(b) = self.budget_usd
            && !(b.is_finite() && b > 0.0 && b <= MAX_BUDGET_USD)
        {
            return Err(format!(
                "key `budget_usd` must be more than 0 and at most {MAX_BUDGET_USD} (US dollars), got {b}"
            ));
        }
        if self.limit_retry_s < 1.0 {
            return Err(format!(
                "key `limit_retry_s` must be at least 1 second, got {}",
                self.limit_retry_s
            ));
        }
        if self.usage_interval_s > 0.0 && self.usage_interval_s < MIN_USAGE_INTERVAL_S {
            return Err(format!(
                "key `usage_interval_s` must be 0 (never) or at least {MIN_USAGE_INTERVAL_S} \
                 seconds, got {}",
                self.usage_interval_s
            ));
        }
        if let Some(mode) = &self.default_permission_mode
            && !mode.is_empty()
            && !crate::runtime::claude::PERMISSION_MODES.contains(&mode.as_str())
            && !crate::runtime::codex::settings::PERMISSION_MODES.contains(&mode.as_str())
        {
            return Err(format!(
                "key `default_permission_mode`: unknown mode `{mode}`; use one of {} (Claude \
                 Code) or {} (Codex)",
                crate::runtime::claude::PERMISSION_MODES.join(", "),
                crate::runtime::codex::settings::PERMISSION_MODES.join(", ")
            ));
        }
        if let Some(dir) = &self.worktrees_dir
            && !dir.is_absolute()
        {
            return Err(format!(
                "key `worktrees_dir` must be an absolute path, got `{}`",
                crate::text::escape(&dir.to_string_lossy(), false)
            ));
        }
        if let Some(model) = &self.default_model
            && !values::is_model_name(model)
        {
            return Err(format!(
                "key `default_model`: `{}` is not a model name (at most 200 characters, no blank \
                 or control character, not beginning with `-`, which the CLI would read as a \
                 flag); for example \"sonnet\", or leave it out for the CLI's default",
                crate::text::escape(model, false)
            ));
        }
        if let Some(db) = &self.database
            && let Some(fs) = kernel_file_system(db)
        {
            return Err(format!(
                "key `database`: {} is under {fs}, a file system of the kernel that can hold no \
                 database; name a file in a folder of your own (default \
                 ~/.local/state/botvisor/botvisor.db)",
                db.display()
            ));
        }
        if let Some(bytes) = self.memory_max {
            values::check_memory_max("key `memory_max`", bytes)?;
        }
        if self.redo_limit > MAX_REDO_LIMIT {
            return Err(format!(
                "key `redo_limit` must be at most {MAX_REDO_LIMIT}, got {}",
                self.redo_limit
            ));
        }
        if self.crash_loop_limit == 0 {
            return Err("key `crash_loop_limit` must be at least 1".into());
        }
        if self.agent_max_depth > MAX_AGENT_DEPTH {
            return Err(format!(
                "key `agent_max_depth` must be at most {MAX_AGENT_DEPTH}, got {}",
                self.agent_max_depth
            ));
        }
        if !(2..=10).contains(&self.memory_pressure_window_s)
            || !self.memory_pressure_window_s.is_multiple_of(2)
        {
            return Err(format!(
                "key `memory_pressure_window_s` must be 2, 4, 6, 8 or 10 (seconds: the kernel \
                 takes windows up to 10 s, and from a user other than root only whole multiples \
                 of 2 s), got {}",
                self.memory_pressure_window_s
            ));
        }
        let window_ms = self.memory_pressure_window_s * 1000;
        if !(1..=window_ms).contains(&self.memory_pressure_stall_ms) {
            return Err(format!(
                "key `memory_pressure_stall_ms` must be from 1 to {window_ms} (milliseconds of \
                 memory stall within memory_pressure_window_s = {} s), got {}",
                self.memory_pressure_window_s, self.memory_pressure_stall_ms
            ));
        }
        if let Some(file) = &self.memory_pressure_file
            && !file.is_absolute()
        {
            return Err(format!(
                "key `memory_pressure_file` must be an absolute path (for example \
                 \"/proc/pressure/memory\"), got `{}`",
                crate::text::escape(&file.to_string_lossy(), false)
            ));
        }
        mcp::validate(&self.mcp)?;
        notify::validate(&self.notify, &self.hooks)
    }

    /// The PSI trigger of `memory_pressure_stall_ms` within `memory_pressure_window_s`.
    pub fn memory_pressure_trigger(&self) -> crate::process::pressure::Trigger {
        crate::process::pressure::Trigger {
            stall: Duration::from_millis(self.memory_pressure_stall_ms),
            window: Duration::from_secs(self.memory_pressure_window_s),
        }
    }

    /// The stop grace period.
    pub fn stop_grace(&self) -> Duration {
        Duration::from_secs_f64(self.stop_grace_s)
    }

    /// Whether the daemon environment variable `name` may pass to a bot's CLI.
    pub fn env_allowed(&self, name: &str) -> bool {
        self.env_allowlist
            .iter()
            .any(|entry| match entry.strip_suffix('*') {
                Some(prefix) => name.starts_with(prefix),
                None => entry == name,
            })
    }
}

/// The kernel's file system `path` is under (`/proc`, `/sys`), if it is: no database can live
/// there. A relative path is taken from the current folder.
pub fn kernel_file_system(path: &Path) -> Option<&'static str> {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
    // `..` is resolved by the words, not the file system: `/tmp/../proc/x` is under /proc.
    let mut parts: Vec<&std::ffi::OsStr> = Vec::new();
    for c in absolute.components() {
        match c {
            std::path::Component::ParentDir => {
                parts.pop();
            }
            std::path::Component::Normal(n) => parts.push(n),
            _ => {}
        }
    }
    let first = parts.first()?.to_str()?;
    match first {
        "proc" => Some("/proc"),
        "sys" => Some("/sys"),
        _ => None,
    }
}

/// `message`'s unknown key (serde's "unknown field `x`, expected one of `a`, `b`") in words: the
/// key, and the known key it is most likely a typo of ("did you mean `claude_bin`?").
fn unknown_key(message: &str) -> Option<String> {
    let rest = message.strip_prefix("unknown field `")?;
    let (key, rest) = rest.split_once('`')?;
    let known: Vec<&str> = rest
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|k| !k.is_empty())
        .collect();
    let guess = known
        .iter()
        .map(|k| (strsim::jaro_winkler(key, k), *k))
        .filter(|(score, _)| *score >= 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, k)| format!("; did you mean `{k}`?"))
        .unwrap_or_else(|| format!("; the keys here: {}", known.join(", ")));
    Some(format!(
        "unknown key `{key}`{guess} (docs/configuration.md lists every key)"
    ))
}

/// A TOML error in words a person reads: a wrong type or value names the key, its line, what
/// the key takes and what was found ("line 3: key `idle_timeout_s` takes a whole number of
/// seconds (0 or more, no quotes); found the text \"soon\""); any other error is the parser's
/// own message with its line and column.
fn explain(e: &toml::de::Error, text: &str) -> String {
    let message = e.message();
    if let Some(words) = unknown_key(message) {
        return match e.span() {
            Some(span) => {
                let line = text[..span.start.min(text.len())].matches('\n').count() + 1;
                format!("line {line}: {words}")
            }
            None => words,
        };
    }
    let wrong = message
        .strip_prefix("invalid type: ")
        .or_else(|| message.strip_prefix("invalid value: "));
    let (Some(wrong), Some(span)) = (wrong, e.span()) else {
        return e.to_string();
    };
    let Some((found, expected)) = wrong.rsplit_once(", expected ") else {
        return e.to_string();
    };
    let start = span.start.min(text.len());
    let line_start = text[..start].rfind('\n').map_or(0, |i| i + 1);
    let line = text[..start].matches('\n').count() + 1;
    let key = text[line_start..start]
        .split('=')
        .next()
        .unwrap_or_default()
        .trim()
        .trim_matches('"');
    let seconds = if key.ends_with("_s") {
        " of seconds"
    } else {
        ""
    };
    let takes = match expected {
        "u64" | "u32" | "u16" | "u8" | "usize" => {
            format!("a whole number{seconds} (0 or more, no quotes)")
        }
        "i64" | "i32" => format!("a whole number{seconds} (no quotes)"),
        "f64" | "f32" => format!("a number{seconds} (for example 5 or 2.5, no quotes)"),
        "path string" => "a path in quotes (for example \"/usr/local/bin/claude\")".to_owned(),
        "a string" => "text in quotes".to_owned(),
        "a sequence" => "a list in brackets (for example [\"PATH\", \"LC_*\"])".to_owned(),
        "a boolean" => "true or false".to_owned(),
        other => other.to_owned(),
    };
    let found = if let Some(s) = found.strip_prefix("string ") {
        format!("the text {s}")
    } else {
        let plain = found.replace('`', "");
        match plain.split_once(' ') {
            Some(("integer", n)) => format!("the whole number {n}"),
            Some(("floating", rest)) => {
                format!("the number {}", rest.trim_start_matches("point "))
            }
            Some(("boolean", b)) => format!("the boolean {b}"),
            _ => plain,
        }
    };
    if key.is_empty() {
        return format!("line {line}: a value must be {takes}; found {found}");
    }
    format!("line {line}: key `{key}` takes {takes}; found {found}")
}

/// Where the daemon keeps its files, after the XDG base directory specification (macOS: the
/// equivalents under `~/Library`).
pub mod paths {
    use std::path::PathBuf;

    fn dirs() -> Option<directories::ProjectDirs> {
        directories::ProjectDirs::from("org", "botvisor", "botvisor")
    }

    /// `$XDG_STATE_HOME/botvisor` (default `~/.local/state/botvisor`).
    pub fn state_dir() -> PathBuf {
        dirs()
            .and_then(|d| d.state_dir().map(|p| p.to_owned()))
            .or_else(|| dirs().map(|d| d.data_local_dir().to_owned()))
            .unwrap_or_else(|| PathBuf::from(".botvisor"))
    }

    /// The default database: `$XDG_STATE_HOME/botvisor/botvisor.db`.
    pub fn default_database() -> PathBuf {
        state_dir().join("botvisor.db")
    }

    /// Where the lock files live: `$XDG_RUNTIME_DIR/botvisor` (macOS, or without
    /// `XDG_RUNTIME_DIR`: the state folder).
    pub fn runtime_dir() -> PathBuf {
        directories::BaseDirs::new()
            .and_then(|b| b.runtime_dir().map(|r| r.join("botvisor")))
            .unwrap_or_else(state_dir)
    }

    /// The lock file that keeps two daemons from sharing `database`, even on two buses. An
    /// existing database is named by its device and inode,
    /// `<runtime_dir>/db-<device>-<inode>.lock` (hex), so every path to it, symlink or hard
    /// link, names the same lock; one not created yet by its canonical path,
    /// `<runtime_dir>/db-<FNV-1a hash of the path>.lock`, every symlink resolved (botvisord takes
    /// the inode's lock too once it has created the file).
    pub fn lock_file(database: &std::path::Path) -> PathBuf {
        use std::os::unix::fs::MetadataExt;
        if let Ok(meta) = std::fs::metadata(database) {
            return runtime_dir().join(format!("db-{:x}-{:x}.lock", meta.dev(), meta.ino()));
        }
        let absolute = std::path::absolute(database).unwrap_or_else(|_| database.to_owned());
        let absolute = std::fs::canonicalize(&absolute).unwrap_or_else(|_| {
            absolute
                .parent()
                .and_then(|p| std::fs::canonicalize(p).ok())
                .map(|p| p.join(absolute.file_name().unwrap_or_default()))
                .unwrap_or(absolute)
        });
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for b in absolute.as_os_str().as_encoded_bytes() {
            hash ^= u64::from(*b);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
        runtime_dir().join(format!("db-{hash:016x}.lock"))
    }

    /// The default configuration file: `$XDG_CONFIG_HOME/botvisor/config.toml`.
    pub fn default_config() -> PathBuf {
        dirs()
            .map(|d| d.config_dir().join("config.toml"))
            .unwrap_or_else(|| PathBuf::from("config.toml"))
    }
}

#[cfg(test)]
mod tests;
