//! Failures, their words and the exit codes.

/// The command did what it was asked (for `send`: the turn ended with outcome `success`).
pub const OK: u8 = 0;
/// The operation failed: botvisord refused or is not running, the bus failed, the bot failed or
/// (for `send`) was deleted.
pub const FAILED: u8 = 1;
/// Usage: unknown flags or commands, missing or malformed arguments.
pub const USAGE: u8 = 2;
/// `send`: the turn ended with an error (outcome `error` or `crashed`).
pub const TURN_ERROR: u8 = 3;
/// `send`: the turn ended without its answer (outcome `interrupted`, `taken_not_answered` or
/// `limited`) and the bot is still there.
pub const TURN_INTERRUPTED: u8 = 4;
/// Ctrl-C ended `send` before its turn did (the turn goes on).
pub const CTRL_C: u8 = 130;

/// The exit codes, as `--help` shows them (and docs/botvisorctl.md).
pub const EXIT_CODES_HELP: &str = "\
Exit codes:
  0    done (send: the turn ended with outcome success)
  1    the operation failed (botvisord refused it or is not running, the bus failed, the bot failed
       or, for send, was deleted)
  2    usage: a wrong command, flag or argument
  3    send: the turn ended with an error (outcome error or crashed)
  4    send: the turn ended without its answer (outcome interrupted, taken_not_answered or limited)
       and the bot is still there
  130  send: Ctrl-C left before the turn ended (the turn goes on)";

/// Writing to stdout failed. A reader that went away (a closed pipe: `| head`) ends botvisorctl
/// at once with exit 0, as it has said all anyone reads; any other failure is said on stderr and
/// ends it with exit 1.
pub fn stdout_failed(e: &std::io::Error) -> ! {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        std::process::exit(0);
    }
    eprintln!("botvisorctl: cannot write to stdout: {e}");
    std::process::exit(1);
}

/// The exit code of `send` for a turn's outcome (see `TurnFinished` in docs/dbus-api.md).
pub fn turn_exit_code(outcome: &str) -> u8 {
    match outcome {
        "success" => OK,
        "interrupted" | "taken_not_answered" | "limited" => TURN_INTERRUPTED,
        _ => TURN_ERROR,
    }
}

/// A failure to report on stderr, with the exit code.
#[derive(Debug)]
pub struct Failure {
    /// What a person reads.
    pub text: String,
    /// The exit code.
    pub code: u8,
}

impl Failure {
    /// An operation that failed (exit code 1).
    pub fn failed(text: impl Into<String>) -> Failure {
        Failure {
            text: text.into(),
            code: FAILED,
        }
    }

    /// A usage error (exit code 2).
    pub fn usage(text: impl Into<String>) -> Failure {
        Failure {
            text: text.into(),
            code: USAGE,
        }
    }
}

impl From<zbus::Error> for Failure {
    fn from(e: zbus::Error) -> Self {
        Failure::failed(describe(&e))
    }
}

impl From<zbus::fdo::Error> for Failure {
    fn from(e: zbus::fdo::Error) -> Self {
        Failure::failed(describe(&zbus::Error::from(e)))
    }
}

/// What to say when botvisord is not on the bus.
pub const NOT_RUNNING: &str = "botvisord is not running on this session bus; start it with \
                               `botvisord` (or `systemctl --user start botvisord`)";

/// The name of a botvisor error without its prefix (`NotFound`), if `e` is one.
pub fn error_name(e: &zbus::Error) -> Option<&str> {
    match e {
        zbus::Error::MethodError(name, _, _) => {
            name.as_str().strip_prefix("org.botvisor.Botvisor1.Error.")
        }
        _ => None,
    }
}

/// A D-Bus error in words, naming botvisorctl commands rather than D-Bus methods.
pub fn describe(e: &zbus::Error) -> String {
    match e {
        zbus::Error::FDO(fdo)
            if matches!(
                **fdo,
                zbus::fdo::Error::ServiceUnknown(_) | zbus::fdo::Error::NameHasNoOwner(_)
            ) =>
        {
            NOT_RUNNING.into()
        }
        zbus::Error::MethodError(name, text, _) => method_error(name.as_str(), text.as_deref()),
        e if is_lost(e) => format!(
            "{} was lost ({})",
            super::hint::link(),
            super::show::safe(&e.to_string())
        ),
        other => super::show::safe(&other.to_string()),
    }
}

/// Whether `e` means that the connection to the bus is gone: its socket closed or failed (the
/// ssh link or the bridge of `--host` ended, the bus went away).
pub fn is_lost(e: &zbus::Error) -> bool {
    matches!(e, zbus::Error::InputOutput(_))
}

/// A D-Bus method's error `name` and its `text` in words, on one line.
fn method_error(name: &str, text: Option<&str>) -> String {
    match name {
        "org.freedesktop.DBus.Error.ServiceUnknown"
        | "org.freedesktop.DBus.Error.NameHasNoOwner" => return NOT_RUNNING.into(),
        "org.freedesktop.DBus.Error.UnknownObject" | "org.freedesktop.DBus.Error.UnknownMethod" => {
            return format!(
                "that bot is gone (deleted); `{} list` shows the bots",
                super::hint::ctl()
            );
        }
        _ => {}
    }
    let short = name
        .strip_prefix("org.botvisor.Botvisor1.Error.")
        .unwrap_or(name);
    // botvisord's own errors are sentences that say what is wrong; their D-Bus names are for
    // programs (`--json` scripts read the exit code).
    match text {
        Some(t) if name.starts_with("org.botvisor.Botvisor1.Error.") => {
            in_ctl_words(&super::show::safe(t))
        }
        Some(t) => format!("{short}: {}", in_ctl_words(&super::show::safe(t))),
        None => short.to_owned(),
    }
}

/// botvisord's messages speak of D-Bus methods; a terminal user runs commands (with the bus
/// they chose: [`super::hint::ctl`]).
pub fn in_ctl_words(text: &str) -> String {
    let ctl = super::hint::ctl();
    let words = [
        (
            "ListBots shows them all",
            format!("`{ctl} list` shows them all"),
        ),
        ("until Restart", format!("until `{ctl} restart`")),
        ("Call Restart", format!("Run `{ctl} restart`")),
        ("call Restart", format!("run `{ctl} restart`")),
        ("call `Restart`", format!("run `{ctl} restart`")),
        (
            "SetEnvironment (`merge`) with `",
            format!("`{ctl} set BOT --env "),
        ),
        ("with RespondPermission", format!("with `{ctl} answer`")),
        (
            "Restart with fork continues",
            format!("`{ctl} restart BOT --fork` continues"),
        ),
        (
            "until the next `Send` or `Restart`",
            format!("until the next `{ctl} send` or `restart`"),
        ),
        // `DeleteWith`'s refusal of a worktree that holds work.
        (
            "delete with `force: true`",
            format!("run `{ctl} delete BOT --yes --remove-worktree --force`"),
        ),
    ];
    let mut out = text.to_owned();
    for (from, to) in words {
        out = out.replace(from, &to);
    }
    // `(SetPermissionMode "on-request:danger-full-access")` is a command line here.
    while let Some(at) = out.find("SetPermissionMode \"") {
        let value_at = at + "SetPermissionMode \"".len();
        let Some(len) = out[value_at..].find('"') else {
            break;
        };
        let value = out[value_at..value_at + len].to_owned();
        out.replace_range(
            at..value_at + len + 1,
            &format!("`{ctl} set BOT --permission-mode {value}`"),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_have_their_codes() {
        assert_eq!(turn_exit_code("success"), OK);
        assert_eq!(turn_exit_code("error"), TURN_ERROR);
        assert_eq!(turn_exit_code("crashed"), TURN_ERROR);
        assert_eq!(turn_exit_code("interrupted"), TURN_INTERRUPTED);
        assert_eq!(turn_exit_code("taken_not_answered"), TURN_INTERRUPTED);
        assert_eq!(turn_exit_code("limited"), TURN_INTERRUPTED);
    }

    #[test]
    fn a_daemon_error_is_one_line_with_its_controls_escaped() {
        let t = method_error(
            "org.botvisor.Botvisor1.Error.InvalidArgument",
            Some("invalid model name `bad\nmodel\u{1b}[2J\u{202e}`"),
        );
        assert_eq!(t, "invalid model name `bad\\nmodel\\u{1b}[2J\\u{202e}`");
    }

    #[test]
    fn daemon_words_become_commands() {
        let t = in_ctl_words("no bot has the id or name `we`; ListBots shows them all");
        assert_eq!(
            t,
            "no bot has the id or name `we`; `botvisorctl list` shows them all"
        );
        assert!(in_ctl_words("takes no message until Restart: x").contains("botvisorctl restart"));
        assert_eq!(
            in_ctl_words("or choose danger-full-access (SetPermissionMode \"on-request:x\"), then"),
            "or choose danger-full-access (`botvisorctl set BOT --permission-mode on-request:x`), then"
        );
        assert!(in_ctl_words("Fix it, then call Restart.").contains("run `botvisorctl restart`"));
        // Issue 46: the login note's advice is the command that works, one variable changed.
        assert_eq!(
            in_ctl_words("give it a new token with SetEnvironment (`merge`) with `TOKEN=…` (its"),
            "give it a new token with `botvisorctl set BOT --env TOKEN=…` (its"
        );
        let refused = in_ctl_words(
            "branch b has 1 commit(s) on no other branch (git log: x); commit and merge them, \
             or delete with `force: true` to remove the worktree anyway",
        );
        assert!(
            refused.contains(
                "or run `botvisorctl delete BOT --yes --remove-worktree --force` to remove"
            ) && !refused.contains("force: true"),
            "{refused}"
        );
    }
}
