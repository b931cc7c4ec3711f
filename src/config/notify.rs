//! The configuration of `botvisor-notify`: the `[notify]` table (what the desktop's notification
//! server is told) and the `[[hooks]]` entries (commands run for events), in botvisor's one
//! configuration file. botvisord reads and checks them (`--check-config`) but does not use them.
//! See `docs/notifications.md`.

use serde::Deserialize;

/// The states a bot may enter that notify by default: it needs its user there.
pub const DEFAULT_STATES: &[&str] = &["failed", "limited", "login_required", "held_elsewhere"];

/// The events a hook may ask for, besides [`STATE_EVENTS`] and `*` (every event).
pub const EVENTS: &[&str] = &[
    "permission_requested",
    "permission_answered",
    "turn_finished",
    "state_changed",
    "bot_added",
    "bot_removed",
    "daemon_left",
    "daemon_back",
    "schedule_fired",
    "schedule_skipped",
    "schedule_failed",
];

/// States whose entry is an event of its own, named after the state (as well as a
/// `state_changed`).
pub const STATE_EVENTS: &[&str] = &["failed", "limited", "login_required", "held_elsewhere"];

/// The longest a hook may run, in seconds (one hour).
pub const MAX_HOOK_TIMEOUT_S: f64 = 3600.0;

/// The shortest `timeout_s` of a hook, seconds: a program is not started and ended in less.
pub const MIN_HOOK_TIMEOUT_S: f64 = 0.01;

/// The most events a hook's queue may hold.
pub const MAX_HOOK_QUEUE: usize = 10_000;

/// `[notify]`: what `botvisor-notify` shows on the desktop. Unknown keys are an error.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct NotifyConfig {
    /// Whether anything is shown on the desktop (default true; false: the hooks alone).
    pub desktop: bool,
    /// Whether a permission request is shown, with Allow and Deny (default true).
    pub permissions: bool,
    /// The states that are shown when a bot enters them, by name (default [`DEFAULT_STATES`]).
    /// Any state name is taken, so a state botvisord adds later can be named.
    pub states: Vec<String>,
    /// Whether a turn's end is shown when no client holds the bot (default true). A turn
    /// `interrupted` is never shown: someone interrupted or stopped it.
    pub turn_finished: bool,
    /// Whether bots a client holds (`Holders` > 0: someone has the bot open) are shown too
    /// (default false).
    pub when_held: bool,
    /// The command the notification's default action runs (a click on its body), as a list:
    /// the program and its arguments, run without a shell; `{bot}` (the bot's id), `{name}` and
    /// `{path}` (its object path) in them are replaced. Default: a terminal running
    /// `botvisorctl watch {bot}` (the first of `xdg-terminal-exec`, `x-terminal-emulator`,
    /// `gnome-terminal`, `konsole`, `xterm` on `PATH`).
    pub open_command: Option<Vec<String>>,
}

impl Default for NotifyConfig {
    fn default() -> Self {
        NotifyConfig {
            desktop: true,
            permissions: true,
            states: DEFAULT_STATES.iter().map(|s| (*s).to_owned()).collect(),
            turn_finished: true,
            when_held: false,
            open_command: None,
        }
    }
}

/// One `[[hooks]]` entry: a command run for each event it asks for, with the event as one JSON
/// object on its standard input. Unknown keys are an error.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HookConfig {
    /// A name for the log (default: the program's file name).
    #[serde(default)]
    pub name: Option<String>,
    /// The program and its arguments, run without a shell (`["sh", "-c", "…"]` for one).
    pub command: Vec<String>,
    /// The events it wants ([`EVENTS`], [`STATE_EVENTS`], or `*` for all).
    pub events: Vec<String>,
    /// Seconds it may run; past them its process group is killed (default 30; at most 3600).
    #[serde(default = "default_hook_timeout")]
    pub timeout_s: f64,
    /// How many events may wait while it runs (default 64); more are dropped, and the log says
    /// how many (at most 10,000).
    #[serde(default = "default_hook_queue")]
    pub queue: usize,
    /// Whether it runs for bots a client holds too (default false, as the desktop).
    #[serde(default)]
    pub when_held: bool,
}

fn default_hook_timeout() -> f64 {
    30.0
}

fn default_hook_queue() -> usize {
    64
}

impl HookConfig {
    /// The name the log gives this hook: `name`, else the program's file name.
    pub fn label(&self) -> String {
        match &self.name {
            Some(n) => n.clone(),
            None => self
                .command
                .first()
                .map(|p| p.rsplit('/').next().unwrap_or(p).to_owned())
                .unwrap_or_default(),
        }
    }

    /// Whether the hook asked for `event`.
    pub fn wants(&self, event: &str) -> bool {
        self.events.iter().any(|e| e == "*" || e == event)
    }
}

/// Checks `[notify]` and `[[hooks]]`; the error names the key (and the hook, by its number from
/// 1 and its name) and what it takes.
pub fn validate(notify: &NotifyConfig, hooks: &[HookConfig]) -> Result<(), String> {
    for s in &notify.states {
        if s.is_empty() || !s.chars().all(|c| c.is_ascii_lowercase() || c == '_') {
            return Err(format!(
                "key `notify.states`: `{}` is not a state name (lowercase letters and `_`, such as \
                 {})",
                s.escape_debug(),
                DEFAULT_STATES.join(", ")
            ));
        }
    }
    if let Some(cmd) = &notify.open_command
        && cmd.first().is_none_or(|p| p.is_empty())
    {
        return Err(
            "key `notify.open_command` must name a program first (a list such as \
             [\"xterm\", \"-e\", \"botvisorctl\", \"watch\", \"{bot}\"])"
                .into(),
        );
    }
    for (i, h) in hooks.iter().enumerate() {
        let which = match &h.name {
            Some(n) => format!("hook {} (`{}`)", i + 1, n.escape_debug()),
            None => format!("hook {}", i + 1),
        };
        if h.command.first().is_none_or(|p| p.is_empty()) {
            return Err(format!(
                "{which}: key `command` must name a program first (a list such as [\"sh\", \
                 \"-c\", \"curl …\"])"
            ));
        }
        if h.command.iter().any(|a| a.contains('\0')) {
            return Err(format!("{which}: key `command` holds a NUL character"));
        }
        if h.events.is_empty() {
            return Err(format!(
                "{which}: key `events` is empty; name some of {}, {} or \"*\"",
                EVENTS.join(", "),
                STATE_EVENTS.join(", ")
            ));
        }
        for e in &h.events {
            if e != "*" && !EVENTS.contains(&e.as_str()) && !STATE_EVENTS.contains(&e.as_str()) {
                return Err(format!(
                    "{which}: unknown event `{}` in `events`; the events are {}, {} and \"*\" \
                     (all)",
                    e.escape_debug(),
                    EVENTS.join(", "),
                    STATE_EVENTS.join(", ")
                ));
            }
        }
        if !(h.timeout_s.is_finite()
            && (MIN_HOOK_TIMEOUT_S..=MAX_HOOK_TIMEOUT_S).contains(&h.timeout_s))
        {
            return Err(format!(
                "{which}: key `timeout_s` must be from {MIN_HOOK_TIMEOUT_S} to \
                 {MAX_HOOK_TIMEOUT_S} seconds, got {}",
                // A number far from a second in a few digits, not hundreds.
                if (1e-3..1e6).contains(&h.timeout_s.abs()) {
                    h.timeout_s.to_string()
                } else {
                    format!("{:e}", h.timeout_s)
                }
            ));
        }
        if !(1..=MAX_HOOK_QUEUE).contains(&h.queue) {
            return Err(format!(
                "{which}: key `queue` must be from 1 to {MAX_HOOK_QUEUE}, got {}",
                h.queue
            ));
        }
    }
    Ok(())
}

/// What `--check-config` says of `[notify]` and each hook: one line each, and whether a hook's
/// program could not be found (a warning: a service may see another `PATH`).
pub fn check_lines(notify: &NotifyConfig, hooks: &[HookConfig]) -> Vec<String> {
    let mut lines = Vec::new();
    if notify.desktop {
        lines.push(format!(
            "notify: desktop notifications for permission requests ({}), states {}, turn ends \
             ({}), held bots ({})",
            on(notify.permissions),
            if notify.states.is_empty() {
                "none".to_owned()
            } else {
                notify.states.join(", ")
            },
            on(notify.turn_finished),
            on(notify.when_held)
        ));
    } else {
        lines.push("notify: no desktop notifications (desktop = false)".to_owned());
    }
    for h in hooks {
        let program = &h.command[0];
        let found = find_program(program);
        let mut line = format!(
            "hook {}: {} for {} (timeout {} s, queue {})",
            crate::text::escape(&h.label(), false),
            crate::text::escape(&h.command.join(" "), false),
            h.events.join(", "),
            h.timeout_s,
            h.queue
        );
        if found.is_none() {
            line.push_str(&format!(
                "; warning: `{program}` is not an executable file{}",
                if program.contains('/') {
                    ""
                } else {
                    " on PATH"
                }
            ));
        }
        lines.push(line);
    }
    lines
}

fn on(b: bool) -> &'static str {
    if b { "on" } else { "off" }
}

/// `program` as `PATH` finds it (a name with a `/` as it is), if it is an executable file.
pub fn find_program(program: &str) -> Option<std::path::PathBuf> {
    if program.contains('/') {
        let p = std::path::PathBuf::from(program);
        return crate::runtime::is_executable(&p).then_some(p);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(program))
        .find(|p| crate::runtime::is_executable(p))
}

#[cfg(test)]
mod tests {
    use super::super::Config;
    use std::path::Path;

    #[test]
    fn defaults_and_a_hook() {
        let c = Config::from_toml(
            "[notify]\nwhen_held = true\n\n[[hooks]]\ncommand = [\"sh\", \"-c\", \"cat\"]\n\
             events = [\"permission_requested\", \"limited\"]\n",
            Path::new("c.toml"),
        )
        .unwrap();
        assert!(c.notify.when_held && c.notify.desktop);
        assert_eq!(c.notify.states, super::DEFAULT_STATES);
        assert_eq!(c.hooks.len(), 1);
        assert_eq!(c.hooks[0].timeout_s, 30.0);
        assert_eq!(c.hooks[0].queue, 64);
        assert_eq!(c.hooks[0].label(), "sh");
        assert!(c.hooks[0].wants("limited") && !c.hooks[0].wants("turn_finished"));
    }

    #[test]
    fn bad_hooks_and_notify_keys_are_named() {
        for (text, want) in [
            (
                "[[hooks]]\ncommand = []\nevents = [\"*\"]",
                "hook 1: key `command`",
            ),
            (
                "[[hooks]]\nname = \"phone\"\ncommand = [\"x\"]\nevents = [\"turn_ended\"]",
                "hook 1 (`phone`): unknown event `turn_ended`",
            ),
            (
                "[[hooks]]\ncommand = [\"x\"]\nevents = []",
                "key `events` is empty",
            ),
            (
                "[[hooks]]\ncommand = [\"x\"]\nevents = [\"*\"]\ntimeout_s = 0",
                "key `timeout_s`",
            ),
            (
                "[[hooks]]\ncommand = [\"x\"]\nevents = [\"*\"]\ntimeout_s = 1e-300",
                "from 0.01 to 3600 seconds, got 1e-300",
            ),
            (
                "[[hooks]]\ncommand = [\"x\"]\nevents = [\"*\"]\nqueue = 0",
                "key `queue`",
            ),
            (
                "[[hooks]]\ncommand = [\"x\"]\nevents = [\"*\"]\nevnts = 1",
                "evnts",
            ),
            ("[[hooks]]\nevents = [\"*\"]", "command"),
            ("[notify]\nstates = [\"Failed!\"]", "key `notify.states`"),
            ("[notify]\nopen_command = []", "key `notify.open_command`"),
            ("[notify]\nsound = true", "sound"),
        ] {
            let err = Config::from_toml(text, Path::new("c.toml"))
                .unwrap_err()
                .to_string();
            assert!(err.contains(want), "{text}: {err}");
        }
    }
}
