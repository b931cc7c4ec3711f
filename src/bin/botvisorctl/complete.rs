//! Shell completion (clap_complete's dynamic completion, `COMPLETE=<shell> botvisorctl -- …`):
//! flags and commands from the command line's definition, and the names and short ids of the
//! bots of the running botvisord for every BOT argument.
//!
//! `botvisorctl completions SHELL` prints the script that registers it with the shell; at each
//! Tab the shell runs botvisorctl with `COMPLETE` set, which answers and exits before anything
//! else runs.

use std::ffi::OsStr;
use std::time::Duration;

use clap_complete::engine::CompletionCandidate;

/// How long a completion may wait for botvisord: a shell waits for it at every Tab.
const WAIT: Duration = Duration::from_secs(2);

/// The bus the command line being completed names (`--address`, `--host`/`-H`, the first of
/// each), else the environment's.
fn bus_of_command_line() -> Option<super::connect::Bus> {
    let args: Vec<String> = std::env::args().collect();
    let value = |names: &[&str]| {
        args.iter().enumerate().find_map(|(i, a)| {
            names.iter().find_map(|n| {
                a.strip_prefix(&format!("{n}="))
                    .map(str::to_owned)
                    .or_else(|| (a == n).then(|| args.get(i + 1).cloned()).flatten())
            })
        })
    };
    let address = value(&["--address"]);
    let env = |k: &str| std::env::var_os(k);
    match value(&["--host", "-H"]) {
        // A host's name from `hosts list` stands for its target.
        Some(host) => {
            let config = super::hosts::load().unwrap_or_default();
            super::fleet::resolve(&config, &host, env)
                .ok()
                .map(|m| m.bus)
        }
        None => super::connect::Bus::choose(address.as_deref(), None, env).ok(),
    }
}

/// The bots whose name or short id begins with `current`: each name (with its state and folder
/// as help) and each short id (with its name). Nothing when botvisord cannot be asked in time.
pub fn bot_names(current: &OsStr) -> Vec<CompletionCandidate> {
    let Some(current) = current.to_str() else {
        return Vec::new();
    };
    let Some(bus) = bus_of_command_line() else {
        return Vec::new();
    };
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return Vec::new();
    };
    let bots = runtime.block_on(async {
        tokio::time::timeout(WAIT, async {
            let conn = bus.connect().await.ok()?;
            super::bots::all(&conn).await.ok()
        })
        .await
        .ok()
        .flatten()
    });
    let mut out = Vec::new();
    for b in bots.unwrap_or_default() {
        // The shell inserts a completion as it is, unquoted: a name is offered only when every
        // character of it means nothing to a shell (letters and digits of any script and
        // `-_.+,@%`); any other (`;`, `>`, `&`, `|`, `*`, `~`, `!`, quotes, blanks) would run or
        // expand something, so that bot is offered by its id.
        let plain = b
            .name
            .chars()
            .all(|c| c.is_alphanumeric() || "-_.+,@%".contains(c))
            && botvisor::text::first_unsafe(&b.name).is_none();
        if plain && b.name.starts_with(current) {
            let help = format!("{} in {}", b.state, b.cwd);
            out.push(CompletionCandidate::new(&b.name).help(Some(help.into())));
        }
        if b.short.starts_with(current) {
            let help = super::show::safe(&b.name);
            out.push(CompletionCandidate::new(&b.short).help(Some(help.into())));
        }
    }
    out
}
