//! The default action of a notification (a click on it): a command for the bot, by default a
//! terminal running `botvisorctl watch BOT`. It is run without a shell, each `{bot}`, `{name}`
//! and `{path}` in its words replaced, in a process group of its own, and reaped when it ends;
//! its output goes nowhere (a terminal shows its own).

use std::process::Stdio;

use super::model::BotRef;

/// Terminals tried in order for the default command: the program and the words before the
/// command it runs.
const TERMINALS: &[&[&str]] = &[
    &["xdg-terminal-exec"],
    &["x-terminal-emulator", "-e"],
    &["gnome-terminal", "--"],
    &["konsole", "-e"],
    &["xterm", "-e"],
];

/// Runs the default action's command.
pub struct Opener {
    configured: Option<Vec<String>>,
    /// `--address` given to botvisor-notify, passed on to `botvisorctl`.
    address: Option<String>,
}

impl Opener {
    /// `configured`: `[notify] open_command`; `address`: the bus botvisor-notify was told.
    pub fn new(configured: Option<Vec<String>>, address: Option<String>) -> Opener {
        Opener {
            configured,
            address,
        }
    }

    /// The command for `bot`, on another host named `host` (`--all-hosts`) or on this
    /// machine's bus (`None`): the configured one with its placeholders replaced (`{host}` is
    /// the host's name, `local` for this machine), else a terminal on `botvisorctl watch ID`
    /// (`botvisorctl --host HOST watch ID` for another host); `None` when no terminal is found.
    pub fn command(&self, bot: &BotRef, host: Option<&str>) -> Option<Vec<String>> {
        if let Some(words) = &self.configured {
            return Some(
                words
                    .iter()
                    .map(|w| {
                        w.replace("{bot}", &bot.id)
                            .replace("{name}", &bot.name)
                            .replace("{path}", &bot.path)
                            .replace("{host}", host.unwrap_or(botvisor::remote::hosts::LOCAL))
                    })
                    .collect(),
            );
        }
        let terminal = TERMINALS
            .iter()
            .find(|t| botvisor::config::notify::find_program(t[0]).is_some())?;
        let mut cmd: Vec<String> = terminal.iter().map(|w| (*w).to_owned()).collect();
        cmd.push(botvisorctl());
        if let Some(h) = host {
            cmd.push("--host".to_owned());
            cmd.push(h.to_owned());
        } else if let Some(a) = &self.address {
            cmd.push("--address".to_owned());
            cmd.push(a.clone());
        }
        cmd.push("watch".to_owned());
        cmd.push(bot.id.clone());
        Some(cmd)
    }

    /// Runs the command for `bot` (on `host`, as [`Opener::command`] takes it), without
    /// waiting for it; a failure is logged.
    pub fn open(&self, bot: &BotRef, host: Option<&str>) {
        let Some(cmd) = self.command(bot, host) else {
            tracing::warn!(
                "no terminal found (xdg-terminal-exec, x-terminal-emulator, gnome-terminal, \
                 konsole, xterm): set [notify] open_command"
            );
            return;
        };
        let spawned = tokio::process::Command::new(&cmd[0])
            .args(&cmd[1..])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn();
        match spawned {
            Ok(mut child) => {
                tracing::info!(bot = %bot.path, command = ?cmd, "opened");
                // Reaped when it ends, however long the user keeps it.
                tokio::spawn(async move {
                    let _ = child.wait().await;
                });
            }
            Err(e) => tracing::warn!(command = ?cmd, "cannot run the open command: {e}"),
        }
    }
}

/// `botvisorctl` beside this program when it is there (a service may not have its folder on
/// `PATH`), else as `PATH` finds it.
fn botvisorctl() -> String {
    std::env::current_exe()
        .ok()
        .and_then(|p| Some(p.parent()?.join("botvisorctl")))
        .filter(|p| botvisor::runtime::is_executable(p))
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_else(|| "botvisorctl".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_words_not_shell() {
        let o = Opener::new(
            Some(vec![
                "term".into(),
                "-t".into(),
                "{name}".into(),
                "{bot}".into(),
                "{host}".into(),
            ]),
            None,
        );
        let bot = BotRef {
            path: "/org/botvisor/Botvisor1/ab".into(),
            id: "ab".into(),
            name: "x; rm -rf ~ $(id)".into(),
        };
        assert_eq!(
            o.command(&bot, None).unwrap(),
            ["term", "-t", "x; rm -rf ~ $(id)", "ab", "local"]
        );
        assert_eq!(o.command(&bot, Some("buildbox")).unwrap()[4], "buildbox");
    }
}
