//! `botvisorctl`: the command-line client of botvisord. See `botvisorctl --help` and
//! docs/botvisorctl.md.
//!
//! One concern per module: the command line (`args`), failures and exit codes (`fail`), finding
//! bots (`bots`), the bus and the connection to it (`connect`), the hosts known by name
//! (`hosts`) and several of them at once (`fleet`), how items look (`show`), the
//! terminal of `send` (`term`), `send`, `watch`, `list`/`status`, `cost`, `top`, the dashboard (`ui`),
//! the MCP server for agents (`mcp`), and the other commands (`commands`).
//!
//! Nothing botvisorctl prints steers the terminal (`botvisor::text`): JSON lines go through
//! `json_line!`, and what the daemon, an agent or another program said through `show::safe`
//! before it is painted: on one line (names, folders, states, ids, errors, chat items' headers),
//! or with its newlines kept where it is a text of several lines (`show::safe_text`: chat
//! messages' bodies, streamed text).

/// Prints to stdout as `anstream::println!` does; a reader that went away (`botvisorctl chat |
/// head`) ends botvisorctl quietly ([`fail::stdout_failed`]) instead of a panic.
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if let Err(e) = writeln!(anstream::stdout(), $($arg)*) {
            crate::fail::stdout_failed(&e)
        }
    }};
}

/// As [`outln!`], without the newline.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if let Err(e) = write!(anstream::stdout(), $($arg)*) {
            crate::fail::stdout_failed(&e)
        }
    }};
}

/// Prints a JSON value as one line; control, invisible and text-direction characters inside its
/// strings become `\uXXXX` (the value is unchanged).
macro_rules! json_line {
    ($v:expr) => {
        outln!("{}", botvisor::text::escape_json(&$v.to_string()))
    };
}

mod args;
mod bots;
mod commands;
mod complete;
mod connect;
mod cost;
mod doctor;
mod drain;
mod fail;
mod fleet;
mod hint;
mod hosts;
mod list;
mod mcp;
mod schedule;
mod send;
mod show;
mod term;
mod top;
mod ui;
mod watch;

use std::io::Read;

use clap::{CommandFactory, Parser};
use serde_json::Value;
use zbus::Connection;

use args::{Args, Cmd, Color, HostsCmd, ScheduleCmd};
use botvisor::dbus::client::BotProxy;
use connect::Bus;
use fail::{Failure, describe};

fn main() {
    // A shell asking for completions (`COMPLETE=bash botvisorctl -- …`): answered, then exit.
    clap_complete::CompleteEnv::with_factory(Args::command).complete();
    let args = Args::parse();
    match args.color {
        Color::Auto => {}
        Color::Always => anstream::ColorChoice::Always.write_global(),
        Color::Never => anstream::ColorChoice::Never.write_global(),
    }
    // Commands that need no bus.
    match &args.command {
        Cmd::Completions { shell } => {
            // The dynamic registration: each Tab asks botvisorctl, which names the bots too.
            use clap_complete::env::EnvCompleter;
            let registration: &dyn EnvCompleter = match shell {
                clap_complete::Shell::Bash => &clap_complete::env::Bash,
                clap_complete::Shell::Zsh => &clap_complete::env::Zsh,
                clap_complete::Shell::Fish => &clap_complete::env::Fish,
                clap_complete::Shell::Elvish => &clap_complete::env::Elvish,
                _ => &clap_complete::env::Powershell,
            };
            let mut out = std::io::stdout();
            if let Err(e) = registration.write_registration(
                "COMPLETE",
                "botvisorctl",
                "botvisorctl",
                "botvisorctl",
                &mut out,
            ) {
                eprintln!("botvisorctl: {e}");
                std::process::exit(fail::FAILED.into());
            }
            return;
        }
        Cmd::Man => {
            let man = clap_mangen::Man::new(Args::command());
            if let Err(e) = man.render(&mut std::io::stdout()) {
                eprintln!("botvisorctl: {e}");
                std::process::exit(fail::FAILED.into());
            }
            return;
        }
        _ => {}
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("botvisorctl: cannot start: {e}");
            std::process::exit(fail::FAILED.into());
        }
    };
    let code = runtime.block_on(async {
        if let Cmd::Hosts { what } = &args.command {
            return match what {
                HostsCmd::Add { name, target } => hosts::add(name, target, args.json),
                HostsCmd::Rm { name } => hosts::remove(name, args.json),
                HostsCmd::List => hosts::list(args.json),
            };
        }
        let config = if args.host.is_empty() && !args.all_hosts {
            hosts::Config::default()
        } else {
            hosts::load()?
        };
        let env = |k: &str| std::env::var_os(k);
        if let Some(members) =
            fleet::members(&config, &args.host, &args.address, args.all_hosts, env)?
        {
            return match args.command {
                Cmd::List => list::fleet(&members, args.json).await,
                Cmd::Watch { bot: None } => fleet::watch(&members, args.json).await,
                Cmd::Top {
                    interval,
                    iterations,
                } => top::run_fleet(&members, interval, iterations, args.json).await,
                Cmd::Ui => ui::run_fleet(&members).await,
                Cmd::Status { bot } => list::status_fleet(&members, &bot, args.json).await,
                Cmd::Watch { bot: Some(_) } => Err(Failure::usage(
                    "`watch BOT` follows one bot: name its host with one --host",
                )),
                _ => Err(Failure::usage(
                    "only `list`, `status`, `watch`, `top` and `ui` take several hosts \
                     (--all-hosts, or --host or --address given more than once): name one host \
                     for this command",
                )),
            };
        }
        let (host, address) = (args.host.first(), args.address.first());
        // One host at most: `--host` may name a configured host.
        let chosen = match host {
            Some(given) => fleet::resolve(&config, given, env).map(|m| m.bus),
            None => Bus::choose(address.map(String::as_str), None, env),
        };
        // A bus address that cannot be read is one of the doctor's findings too.
        let bus = match chosen {
            Err(f) if matches!(args.command, Cmd::Doctor) => {
                return doctor::run(Err(f), host.is_some(), args.json).await;
            }
            chosen => chosen?,
        };
        hint::set(host.map(String::as_str), address.map(String::as_str), &bus);
        if matches!(args.command, Cmd::Doctor) {
            // A bus that cannot be reached is one of the doctor's findings.
            let remote = matches!(bus, Bus::Host(..));
            return doctor::run(bus.connect().await, remote, args.json).await;
        }
        let conn = bus.connect().await?;
        run(&conn, args).await
    });
    let code = match code {
        Ok(code) => code,
        Err(Failure { text, code }) => {
            anstream::eprintln!(
                "botvisorctl: {}",
                // What botvisord said is escaped where it was put into the text (one line).
                show::paint(show::ERROR, &show::safe_text(&text))
            );
            code
        }
    };
    // The tasks still there (hosts of several, given up or stopped) are dropped, and with them
    // their links, whose programs end before botvisorctl does.
    runtime.shutdown_timeout(std::time::Duration::from_millis(100));
    connect::finish_links();
    use std::io::Write;
    let _ = std::io::stdout().flush();
    // Without waiting for a terminal line nobody will type (the reader thread of `send`).
    std::process::exit(code.into());
}

async fn run(conn: &Connection, args: Args) -> Result<u8, Failure> {
    let json = args.json;
    match args.command {
        Cmd::Create {
            cwd,
            name,
            runtime,
            model,
            permission_mode,
            env,
            idle_timeout,
            memory_max,
            worktree,
            branch,
            base,
            worktree_path,
            adopt,
        } => {
            let a = commands::CreateArgs {
                cwd,
                name,
                runtime,
                model,
                permission_mode,
                env,
                idle_timeout,
                memory_max,
                worktree: worktree.then_some(commands::WorktreeArgs {
                    branch,
                    base,
                    path: worktree_path,
                }),
                adopt,
            };
            commands::create(conn, a, json).await
        }
        Cmd::List => list::list(conn, json).await,
        Cmd::Cost { since } => cost::cost(conn, since, json).await,
        Cmd::Conversations {
            cwd,
            runtime,
            env,
            limit,
        } => list::conversations(conn, &cwd, runtime, &env, limit, json).await,
        Cmd::Status { bot } => list::status(conn, &bot, json).await,
        Cmd::Send { bot, text } => {
            let text = if text == "-" { read_stdin()? } else { text };
            // Checked here: a message over the bus's own limits would cost the connection.
            if text.len() > botvisor::sizes::MAX_SEND_BYTES {
                return Err(Failure::usage(botvisor::sizes::send_too_long(text.len())));
            }
            send::run(conn, &bot, text, json).await
        }
        Cmd::Chat {
            bot,
            after,
            limit,
            seq,
        } => commands::chat(conn, &bot, after, limit, seq, json).await,
        Cmd::Stop { bot } => commands::stop(conn, &bot, json).await,
        Cmd::Watch { bot } => watch::run(conn, bot, json).await,
        Cmd::Answer {
            bot,
            words,
            message,
            updated_input,
            always,
            session,
            scope,
        } => {
            let (request, behavior) = match words.as_slice() {
                [behavior] => (None, behavior.clone()),
                [request, behavior] => (Some(request.clone()), behavior.clone()),
                _ => return Err(Failure::usage("answer takes [REQUEST] allow|deny")),
            };
            if !matches!(behavior.as_str(), "allow" | "deny") {
                return Err(Failure::usage(format!(
                    "answer: the last word must be `allow` or `deny`, not `{}` (botvisorctl \
                     answer BOT [REQUEST] allow|deny)",
                    show::safe(&behavior)
                )));
            }
            let scope = match (always, session, scope) {
                (true, _, _) => Some("always".to_owned()),
                (_, true, _) => Some("session".to_owned()),
                (_, _, s) => s,
            };
            let a = commands::AnswerArgs {
                request,
                behavior,
                message,
                updated_input,
                scope,
            };
            commands::answer(conn, &bot, a, json).await
        }
        Cmd::Rename { bot, name } => commands::rename(conn, &bot, &name, json).await,
        Cmd::Interrupt { bot } => commands::interrupt(conn, &bot, json).await,
        Cmd::Set {
            bot,
            permission_mode,
            model,
            budget,
            env,
            unset_env,
            replace_env,
            clear_env,
        } => {
            let env = match (clear_env, env.is_empty() && unset_env.is_empty()) {
                (true, _) => Some(commands::EnvChange::Replace(Default::default())),
                (false, true) => None,
                (false, false) if replace_env => {
                    Some(commands::EnvChange::Replace(commands::env_pairs(&env)?))
                }
                (false, false) => Some(commands::EnvChange::Merge {
                    set: commands::env_pairs(&env)?,
                    unset: unset_env,
                }),
            };
            let settings = commands::Settings {
                permission_mode,
                model,
                budget,
                env,
            };
            commands::set(conn, &bot, settings, json).await
        }
        Cmd::Restart { bot, fresh, fork } => commands::restart(conn, &bot, fresh, fork, json).await,
        Cmd::Ui => ui::run(conn).await,
        Cmd::Top {
            interval,
            iterations,
        } => top::run(conn, interval, iterations, json).await,
        Cmd::Delete {
            bot,
            yes,
            remove_worktree,
            force,
        } => {
            let worktree = remove_worktree.then_some(force);
            commands::delete(conn, &bot, yes, worktree, json).await
        }
        Cmd::Mcp { config } => mcp::run(conn, config).await,
        Cmd::Schedule { action } => match action {
            ScheduleCmd::Add {
                bot,
                calendar,
                prompt,
                skip_when_busy,
                fresh,
                until,
                random_delay,
            } => {
                let how = schedule::How {
                    skip_when_busy,
                    fresh,
                    until,
                    random_delay,
                };
                schedule::add(conn, &bot, &calendar, &prompt, how, json).await
            }
            ScheduleCmd::List => schedule::list(conn, json).await,
            ScheduleCmd::Rm { id } => schedule::remove(conn, &id, json).await,
            ScheduleCmd::Pause { id } => schedule::pause(conn, &id, true, json).await,
            ScheduleCmd::Resume { id } => schedule::pause(conn, &id, false, json).await,
            ScheduleCmd::RunNow { id } => schedule::fire(conn, &id, true, json).await,
        },
        Cmd::Fire { id } => schedule::fire(conn, &id, false, json).await,
        Cmd::Completions { .. } | Cmd::Man | Cmd::Doctor | Cmd::Hosts { .. } => Ok(fail::OK),
    }
}

/// The message from stdin, without the newline that ends its last line. One longer than
/// `Send` takes is refused here, by its size, before it is read as text.
fn read_stdin() -> Result<String, Failure> {
    let mut s = Vec::new();
    std::io::stdin()
        .read_to_end(&mut s)
        .map_err(|e| Failure::usage(format!("cannot read the message from stdin: {e}")))?;
    if s.ends_with(b"\n") {
        s.pop();
        if s.ends_with(b"\r") {
            s.pop();
        }
    }
    if s.len() > botvisor::sizes::MAX_SEND_BYTES {
        return Err(Failure::usage(botvisor::sizes::send_too_long(s.len())));
    }
    let text = String::from_utf8(s)
        .map_err(|_| Failure::usage("the message on stdin is not UTF-8 text"))?;
    match botvisor::sizes::unsendable(&text) {
        Some(why) => Err(Failure::usage(why)),
        None => Ok(text),
    }
}

/// A chat item's payload to show: a preview (an item over 1 MiB) is replaced by the whole item,
/// read with `ReadChatItem` in ranges (which works over any transport); if that fails, the
/// preview is shown, with a warning.
async fn whole_payload(bot: &BotProxy<'_>, seq: u64, payload: &str) -> Value {
    let v: Value = serde_json::from_str(payload).unwrap_or(Value::Null);
    if !botvisor::preview::is_preview(&v) {
        return v;
    }
    match botvisor::dbus::client::read_whole_item(bot, seq).await {
        Ok(text) => serde_json::from_str(&text).unwrap_or(v),
        Err(e) => {
            anstream::eprintln!(
                "botvisorctl: cannot read chat item {seq} whole ({}); showing its preview",
                show::safe(&describe(&e))
            );
            v
        }
    }
}

/// `s` as one shell word on one line: as it is when it is plain, else in single quotes, or when
/// it holds characters unsafe to print (`botvisor::text`), as a `$'…'` word of bash and zsh with
/// those characters escaped (`$'a\nb'`, `$'\u202e'`).
fn shell_word(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:@%+=,".contains(c))
    {
        return s.to_owned();
    }
    if botvisor::text::first_unsafe(s).is_none() {
        return format!("'{}'", s.replace('\'', r"'\''"));
    }
    let mut out = String::from("$'");
    for c in s.chars() {
        match c {
            '\\' => out.push_str(r"\\"),
            '\'' => out.push_str(r"\'"),
            '\n' => out.push_str(r"\n"),
            '\r' => out.push_str(r"\r"),
            '\t' => out.push_str(r"\t"),
            c if botvisor::text::is_unsafe(c) && u32::from(c) < 0x80 => {
                out.push_str(&format!("\\x{:02x}", u32::from(c)));
            }
            c if botvisor::text::is_unsafe(c) && u32::from(c) <= 0xFFFF => {
                out.push_str(&format!("\\u{:04x}", u32::from(c)));
            }
            c if botvisor::text::is_unsafe(c) => {
                out.push_str(&format!("\\U{:08x}", u32::from(c)));
            }
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

#[cfg(test)]
mod tests {
    use super::shell_word;

    #[test]
    fn shell_words_stay_on_one_line() {
        assert_eq!(shell_word("demo"), "demo");
        assert_eq!(shell_word("my bot's"), r"'my bot'\''s'");
        assert_eq!(shell_word("a\nb'\\"), r"$'a\nb\'\\'");
        assert_eq!(shell_word("x\u{1b}[2J\u{202e}"), r"$'x\x1b[2J\u202e'");
        assert_eq!(shell_word("\u{e0041}"), r"$'\U000e0041'");
    }
}
