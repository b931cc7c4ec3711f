//! The command line, as clap parses it (also the source of the completions and the man page).

use clap::{Parser, Subcommand, ValueEnum};

use super::fail::EXIT_CODES_HELP;

/// Drive botvisor's bots (supervised Claude Code or Codex sessions) from a terminal or a script.
///
/// A bot is named by its id, a unique id prefix (4 characters or more, as `list` shows them),
/// its name, or its D-Bus object path.
#[derive(Parser, Debug)]
#[command(name = "botvisorctl", version, after_help = EXIT_CODES_HELP)]
pub struct Args {
    /// Print JSON instead of readable text: one object per line (one per bot for `list`, one per
    /// event for `send` and `watch`, one per item for `chat`).
    #[arg(long, global = true)]
    pub json: bool,
    /// Colour: `auto` (in a terminal, unless NO_COLOR is set), `always` or `never`.
    #[arg(long, global = true, value_enum, default_value_t = Color::Auto, value_name = "WHEN")]
    pub color: Color,
    /// The bus botvisord is on: any D-Bus address (`unix:path=…`, `unixexec:path=ssh,…`, `tcp:…`).
    /// Default: DBUS_SESSION_BUS_ADDRESS, else the session bus. See docs/remote.md. `list`,
    /// `status`, `watch`, `top` and `ui` take several, with `--host` too.
    #[arg(long, global = true, value_name = "ADDRESS")]
    pub address: Vec<String>,
    /// The botvisord of another machine: its user's session bus over `ssh [USER@]HOST` and
    /// systemd-stdio-bridge (as `busctl --host`), or a host's name from `hosts list` (`local`:
    /// this machine). BOTVISOR_SSH names the ssh program to run. `list`, `status`, `watch`,
    /// `top` and `ui` take several.
    #[arg(short = 'H', long, global = true, value_name = "[USER@]HOST|NAME")]
    pub host: Vec<String>,
    /// Every host: this machine's bus (`local`) and each of `hosts list` (for `list`, `status`,
    /// `watch`, `top` and `ui`).
    #[arg(long, global = true)]
    pub all_hosts: bool,
    /// What to do.
    #[command(subcommand)]
    pub command: Cmd,
}

/// `hosts` subcommands.
#[derive(Subcommand, Debug)]
pub enum HostsCmd {
    /// Name a host: TARGET is `[USER@]HOST` for ssh, or a D-Bus address (`unix:…`,
    /// `unixexec:…`, `tcp:…`).
    Add {
        /// Its name: letters, digits, `-`, `_`, `.` (not `local`, this machine's).
        name: String,
        /// `[USER@]HOST`, or a D-Bus address.
        target: String,
    },
    /// Forget a host's name.
    Rm {
        /// Its name.
        name: String,
    },
    /// The hosts: `local` and those named.
    #[command(visible_alias = "ls")]
    List,
}

/// `schedule` subcommands.
#[derive(Subcommand, Debug)]
pub enum ScheduleCmd {
    /// Put a prompt on a calendar: BOT gets PROMPT as a message at each time of CALENDAR, a
    /// calendar expression as systemd's timers take it (`Mon..Fri 09:00`, `hourly`, `*:0/15`,
    /// `daily`, a time zone at the end: `09:00 Europe/Paris`; `man systemd.time`).
    Add {
        /// Bot id, id prefix, name or object path.
        #[arg(add = clap_complete::ArgValueCompleter::new(super::complete::bot_names))]
        bot: String,
        /// When, in systemd's calendar syntax (quote it).
        calendar: String,
        /// The message each fire sends.
        prompt: String,
        /// Skip a fire while the bot is busy (a turn running, messages waiting, a question
        /// open) instead of queueing it behind them.
        #[arg(long)]
        skip_when_busy: bool,
        /// Begin a new conversation of the bot at each fire (the previous one is kept, as after
        /// `restart --fresh`); a fire into a busy bot is then skipped.
        #[arg(long)]
        fresh: bool,
        /// End the schedule at this moment, as systemd reads a timestamp
        /// ('2027-01-01', '2026-12-31 18:00', '+2w'): no fire after it.
        #[arg(long, value_name = "WHEN", allow_hyphen_values = true)]
        until: Option<String>,
        /// Spread each fire over up to this many seconds (the timer's RandomizedDelaySec=).
        #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(u32).range(0..=86_400))]
        random_delay: Option<u32>,
    },
    /// List the schedules: id, bot, calendar, next due time, prompt (with --json: one JSON
    /// array of objects with id, bot, bot_path, calendar, prompt (its first 500 characters),
    /// prompt_cut, when_busy, conversation, until, random_delay_s, paused, next and last_fired,
    /// times in Unix seconds).
    List,
    /// Delete a schedule and its timer.
    Rm {
        /// Schedule id, or 4 or more of its first characters.
        id: String,
    },
    /// Pause a schedule: its timer is removed, nothing fires until `schedule resume`.
    Pause {
        /// Schedule id, or 4 or more of its first characters.
        id: String,
    },
    /// Resume a paused schedule.
    Resume {
        /// Schedule id, or 4 or more of its first characters.
        id: String,
    },
    /// Fire a schedule now, besides its calendar (a fire made in the last 5 s is this one:
    /// nothing more is sent).
    RunNow {
        /// Schedule id, or 4 or more of its first characters.
        id: String,
    },
}

/// When to colour the output.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq)]
pub enum Color {
    /// In a terminal, unless `NO_COLOR` is set (`CLICOLOR_FORCE` forces it).
    Auto,
    /// Always.
    Always,
    /// Never.
    Never,
}

/// The subcommands.
#[derive(Subcommand, Debug)]
pub enum Cmd {
    /// Create a bot working in a folder; prints its id, name and folder.
    Create {
        /// The bot's working directory (made absolute).
        #[arg(long, default_value = ".", value_hint = clap::ValueHint::DirPath)]
        cwd: std::path::PathBuf,
        /// A name for people (default: the folder's name, with -2, -3, … when taken).
        #[arg(long)]
        name: Option<String>,
        /// Runtime: claude (Claude Code, the default) or codex (OpenAI Codex).
        #[arg(long)]
        runtime: Option<String>,
        /// Model (default: the CLI's).
        #[arg(long)]
        model: Option<String>,
        /// Permission mode. Claude Code: default, acceptEdits, auto, bypassPermissions, dontAsk or
        /// plan. Codex: an approval policy (untrusted, on-request or never), alone or as
        /// POLICY:SANDBOX with a sandbox (read-only, workspace-write or danger-full-access).
        /// Default: the CLI's own.
        #[arg(long)]
        permission_mode: Option<String>,
        /// Extra environment for the agent, KEY=VALUE (repeatable).
        #[arg(long = "env", value_name = "KEY=VALUE")]
        env: Vec<String>,
        /// Stop the agent after this many idle seconds (0: never).
        #[arg(long, value_name = "SECONDS")]
        idle_timeout: Option<u32>,
        /// Limit the memory of the agent and everything it starts (its cgroup's memory.max), as
        /// systemd's MemoryMax=: bytes, or with a suffix K, M, G or T (powers of 1024), or
        /// `infinity`. Default: botvisord's config `memory_max`.
        #[arg(long, value_name = "BYTES", value_parser = memory_max)]
        memory_max: Option<u64>,
        /// Give the bot a git worktree of its own, made from the repository that holds --cwd
        /// (`git worktree add`): its folder is the bot's for its whole life. Default branch
        /// botvisor/NAME, from HEAD, in botvisor's state folder
        /// (~/.local/state/botvisor/worktrees/REPOSITORY-HASH/NAME) or botvisord's config
        /// `worktrees_dir`.
        #[arg(long, conflicts_with = "adopt")]
        worktree: bool,
        /// The worktree's branch (with --worktree; default botvisor/NAME).
        #[arg(long, requires = "worktree", value_name = "BRANCH")]
        branch: Option<String>,
        /// The commit the worktree's branch starts at, anything git rev-parse reads (with
        /// --worktree; default HEAD).
        #[arg(long, requires = "worktree", value_name = "REV")]
        base: Option<String>,
        /// Where the worktree goes (with --worktree; must not exist).
        #[arg(long, requires = "worktree", value_name = "PATH", value_hint = clap::ValueHint::DirPath)]
        worktree_path: Option<std::path::PathBuf>,
        /// Adopt a conversation begun elsewhere (its session or thread id, as `conversations`
        /// lists them for --cwd): the bot resumes it, its earlier turns imported into the chat.
        #[arg(long, value_name = "SESSION_ID")]
        adopt: Option<String>,
    },
    /// List the conversations the CLIs keep for a folder (Claude Code's transcripts, Codex's
    /// rollouts), newest first: runtime, session id, when last written, which bot owns it or
    /// which process holds it, and its first message. `create --adopt ID` takes one in.
    Conversations {
        /// The folder (made absolute).
        #[arg(long, default_value = ".", value_hint = clap::ValueHint::DirPath)]
        cwd: std::path::PathBuf,
        /// Only this runtime's (claude or codex).
        #[arg(long)]
        runtime: Option<String>,
        /// Extra environment to find the CLI's folder, KEY=VALUE (repeatable), as a bot's
        /// (CLAUDE_CONFIG_DIR, CODEX_HOME).
        #[arg(long = "env", value_name = "KEY=VALUE")]
        env: Vec<String>,
        /// At most this many (at most 500).
        #[arg(long, default_value_t = 50)]
        limit: u32,
    },
    /// List the bots: short id, name, state (and open permission prompts), runtime, cost
    /// (`-`: the CLI tells none, as Codex), folder.
    #[command(visible_alias = "ls")]
    List,
    /// The hosts botvisorctl knows by name (docs/remote.md): `--host NAME` and `--all-hosts`
    /// take them.
    Hosts {
        /// What to do with them.
        #[command(subcommand)]
        what: HostsCmd,
    },
    /// What every bot ever made spent, deleted bots included: per bot and in all, and today's
    /// total (days are UTC). A bot whose CLI tells no cost (Codex) shows `-` and only tokens.
    Cost {
        /// Only what was spent on this day (YYYY-MM-DD, UTC) and later.
        #[arg(long, value_name = "DAY", value_parser = day)]
        since: Option<String>,
    },
    /// Show one bot: its settings, state, last error and open permission prompts.
    Status {
        /// Bot id, id prefix, name or object path.
        #[arg(add = clap_complete::ArgValueCompleter::new(super::complete::bot_names))]
        bot: String,
    },
    /// Send a message and print this turn's reply as it arrives; returns at the turn's end with
    /// an exit code that says how it ended (0 success, 3 error, 4 interrupted).
    Send {
        /// Bot id, id prefix, name or object path.
        #[arg(add = clap_complete::ArgValueCompleter::new(super::complete::bot_names))]
        bot: String,
        /// The message; `-` reads it from stdin. It may begin with `-` (`send demo -x`).
        #[arg(allow_hyphen_values = true)]
        text: String,
    },
    /// Print a bot's chat history (big items whole).
    Chat {
        /// Bot id, id prefix, name or object path.
        #[arg(add = clap_complete::ArgValueCompleter::new(super::complete::bot_names))]
        bot: String,
        /// Only items after this sequence number.
        #[arg(long, default_value_t = 0)]
        after: u64,
        /// At most this many items (0: all of them).
        #[arg(long, default_value_t = 0)]
        limit: u32,
        /// Only the item with this sequence number, whole.
        #[arg(long, conflicts_with_all = ["after", "limit"])]
        seq: Option<u64>,
    },
    /// Stop a bot's agent gently; returns once it is stopped, with the stop's verdict.
    Stop {
        /// Bot id, id prefix, name or object path.
        #[arg(add = clap_complete::ArgValueCompleter::new(super::complete::bot_names))]
        bot: String,
    },
    /// Follow one bot (or all) live: state changes, chat items, text as it streams, permission
    /// prompts (open ones first), botvisord leaving and coming back. Ctrl-C ends it; it ends by
    /// itself when its bot is deleted.
    Watch {
        /// Bot id, id prefix, name or object path; all bots when left out.
        #[arg(add = clap_complete::ArgValueCompleter::new(super::complete::bot_names))]
        bot: Option<String>,
    },
    /// Answer a permission prompt: `answer BOT allow` answers the bot's only open prompt;
    /// `answer BOT REQUEST allow` names it by its id or a unique start of it (shown by `send`,
    /// `watch`, `list`, `status` and `chat`).
    #[command(override_usage = "botvisorctl answer [OPTIONS] <BOT> [REQUEST] <allow|deny>")]
    Answer {
        /// Bot id, id prefix, name or object path.
        #[arg(add = clap_complete::ArgValueCompleter::new(super::complete::bot_names))]
        bot: String,
        /// `[REQUEST] allow|deny`: the request id (or a unique start of it; left out: the only
        /// open prompt), then `allow` or `deny`.
        #[arg(num_args = 1..=2, value_name = "[REQUEST] allow|deny", required = true)]
        words: Vec<String>,
        /// What the model is told (with deny).
        #[arg(long)]
        message: Option<String>,
        /// The input the tool runs with instead, as a JSON object (with allow).
        #[arg(long, value_name = "JSON")]
        updated_input: Option<String>,
        /// Allow this and what the CLI takes as the same from now on (Claude Code: a file edit
        /// makes the bot's permission mode acceptEdits; Codex: the rule it proposed for a
        /// command, which is often the exact command). The request says what each scope lets
        /// run (`watch`, `chat`).
        #[arg(long, conflicts_with_all = ["session", "scope"])]
        always: bool,
        /// Allow this and what the CLI takes as the same while the agent's process runs (Codex:
        /// the exact command again).
        #[arg(long, conflicts_with = "scope")]
        session: bool,
        /// How far an allow reaches: once (the default), session, always, or program (Codex:
        /// every use of the command's program, whatever its arguments, from now on).
        #[arg(long, value_parser = ["once", "session", "always", "program"])]
        scope: Option<String>,
    },
    /// Rename a bot (names are checked as `create` checks them).
    Rename {
        /// Bot id, id prefix, name or object path.
        #[arg(add = clap_complete::ArgValueCompleter::new(super::complete::bot_names))]
        bot: String,
        /// The new name.
        name: String,
    },
    /// End the running turn; queued messages stay queued.
    Interrupt {
        /// Bot id, id prefix, name or object path.
        #[arg(add = clap_complete::ArgValueCompleter::new(super::complete::bot_names))]
        bot: String,
    },
    /// Change the permission mode, the model, the budget and/or the agent's extra environment,
    /// live when the agent runs (waiting for its answer: a setting it refuses fails and changes
    /// nothing).
    Set {
        /// Bot id, id prefix, name or object path.
        #[arg(add = clap_complete::ArgValueCompleter::new(super::complete::bot_names))]
        bot: String,
        /// Permission mode, of the bot's runtime. Claude Code: default, acceptEdits, auto,
        /// bypassPermissions, dontAsk or plan. Codex: untrusted, on-request or never, alone or as
        /// POLICY:SANDBOX with read-only, workspace-write or danger-full-access.
        #[arg(long, alias = "mode")]
        permission_mode: Option<String>,
        /// Model (empty: the CLI's default from the next start).
        #[arg(long)]
        model: Option<String>,
        /// The bot's budget in US dollars (0: none): once its cost reaches it after a turn, no
        /// new turn starts until the budget is raised or the bot restarted.
        #[arg(long, value_name = "USD")]
        budget: Option<f64>,
        /// Add or change one variable of the agent's extra environment (repeatable; the others
        /// are kept), for example a new API key or token: a bot waiting for its login goes on,
        /// an idle agent restarts with it now on the same conversation, a busy one once its
        /// turn ends.
        #[arg(long = "env", value_name = "KEY=VALUE")]
        env: Vec<String>,
        /// Remove one variable of the agent's extra environment (repeatable).
        #[arg(long = "unset-env", value_name = "KEY", conflicts_with_all = ["clear_env", "replace_env"])]
        unset_env: Vec<String>,
        /// With --env: the extra environment becomes exactly these variables (the ones given
        /// before are not kept).
        #[arg(long, requires = "env")]
        replace_env: bool,
        /// Remove the agent's whole extra environment.
        #[arg(long, conflicts_with = "env")]
        clear_env: bool,
    },
    /// Restart a bot's agent (also after state `failed`).
    Restart {
        /// Bot id, id prefix, name or object path.
        #[arg(add = clap_complete::ArgValueCompleter::new(super::complete::bot_names))]
        bot: String,
        /// Forget the conversation: the next one is new.
        #[arg(long, conflicts_with = "fork")]
        fresh: bool,
        /// Continue in a copy of the conversation, leaving it as it is (for one another process
        /// has open: state held_elsewhere).
        #[arg(long)]
        fork: bool,
    },
    /// A dashboard in the terminal: every bot (state, runtime, cost, open prompts, last
    /// activity), the chosen bot's chat as it happens, its prompt answered with a key (y allow,
    /// a always, n deny), a message written with Enter; x interrupts, S stops, R restarts, q
    /// quits, ? lists the keys.
    Ui,
    /// Every bot's memory, CPU and tasks, refreshed in place until q or Ctrl-C; with --json or
    /// without a terminal, one JSON line per refresh.
    Top {
        /// Seconds between refreshes (0.1 to 3600). botvisord samples a busy bot every
        /// `usage_interval_s` (2 s by default), never an idle or stopped one.
        #[arg(long, value_name = "SECONDS", default_value_t = 2.0, value_parser = interval)]
        interval: f64,
        /// Stop after this many refreshes, 1 or more (default: until q or Ctrl-C).
        #[arg(short = 'n', long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
        iterations: Option<u64>,
    },
    /// Serve the bots to an agent: a Model Context Protocol (MCP) server on stdin and stdout,
    /// for Claude Code's `--mcp-config` or `claude mcp add`, Codex's `mcp_servers`, or any MCP
    /// client. Its tools list, create and drive bots through botvisord's D-Bus API; `[mcp]` of
    /// botvisor's configuration file says which tools and folders it allows. See docs/mcp.md.
    Mcp {
        /// botvisor's configuration file, for its `[mcp]` table (default:
        /// $XDG_CONFIG_HOME/botvisor/config.toml, which may be missing).
        #[arg(long, value_name = "PATH", value_hint = clap::ValueHint::FilePath)]
        config: Option<std::path::PathBuf>,
    },
    /// Delete a bot and its history (what it cost stays: `cost` counts it); asks first unless --yes.
    Delete {
        /// Bot id, id prefix, name or object path.
        #[arg(add = clap_complete::ArgValueCompleter::new(super::complete::bot_names))]
        bot: String,
        /// Do not ask.
        #[arg(short, long)]
        yes: bool,
        /// Remove the bot's git worktree too, and its branch when merged; refused while it holds
        /// uncommitted changes or unmerged commits (they are named), unless --force.
        #[arg(long)]
        remove_worktree: bool,
        /// With --remove-worktree: remove it whatever it holds (an unmerged branch is kept).
        #[arg(long, requires = "remove_worktree")]
        force: bool,
    },
    /// Scheduled prompts: a bot's prompt on a calendar, fired by a systemd user timer
    /// (`botvisor-schedule-<id>.timer`, shown by `systemctl --user list-timers`), each due
    /// time once, with no app open. See docs/schedules.md.
    Schedule {
        /// What to do.
        #[command(subcommand)]
        action: ScheduleCmd,
    },
    /// Fire schedule ID now, as its timer does (what the timer's service runs; a due time
    /// already fired sends nothing). Exit 1 when the fire failed (the bot's chat says why).
    Fire {
        /// The schedule's id (32 hex digits).
        id: String,
    },
    /// Check what botvisor needs, each with what was found and the command that fixes it: the
    /// bus, botvisord on it or its activation, the configuration, the state folder, each CLI and
    /// its login. Exit 0 only when every check passes.
    Doctor,
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff).
    #[command(hide = true)]
    Man,
}

/// `--memory-max`: bytes, with an optional suffix K, M, G or T (powers of 1024, as systemd's
/// `MemoryMax=`), or `infinity` (`u64::MAX`, no limit).
pub fn memory_max(text: &str) -> Result<u64, String> {
    if text == "infinity" {
        return Ok(u64::MAX);
    }
    let bad = || format!("`{text}` is not a size: bytes, or a number with K, M, G or T");
    let (digits, shift) = match text.char_indices().last() {
        Some((i, 'K')) => (&text[..i], 10),
        Some((i, 'M')) => (&text[..i], 20),
        Some((i, 'G')) => (&text[..i], 30),
        Some((i, 'T')) => (&text[..i], 40),
        _ => (text, 0),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let n: u64 = digits.parse().map_err(|_| bad())?;
    n.checked_mul(1 << shift)
        .filter(|b| *b < u64::MAX)
        .ok_or_else(|| format!("`{text}` is too big (say `infinity` for no limit)"))
}

/// `--interval`: seconds from 0.1 to 3600.
fn interval(text: &str) -> Result<f64, String> {
    let s: f64 = text
        .parse()
        .map_err(|_| format!("`{text}` is not a number of seconds"))?;
    if (0.1..=3600.0).contains(&s) {
        Ok(s)
    } else {
        Err(format!("{s} is not from 0.1 to 3600 seconds"))
    }
}

/// A day as `cost --since` takes it: `YYYY-MM-DD`, a date that exists.
fn day(text: &str) -> Result<String, String> {
    botvisor::time::check_day(text).map(|()| text.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_max_takes_systemds_suffixes() {
        assert_eq!(memory_max("1048576"), Ok(1 << 20));
        assert_eq!(memory_max("512K"), Ok(512 << 10));
        assert_eq!(memory_max("200M"), Ok(200 << 20));
        assert_eq!(memory_max("2G"), Ok(2 << 30));
        assert_eq!(memory_max("1T"), Ok(1 << 40));
        assert_eq!(memory_max("infinity"), Ok(u64::MAX));
        for bad in ["", "M", "1.5G", "-1", "1 G", "1g", "12X", "+5"] {
            assert!(memory_max(bad).is_err(), "{bad}");
        }
        assert!(memory_max("99999999999T").is_err());
    }

    #[test]
    fn top_refuses_zero_refreshes() {
        let e = Args::try_parse_from(["botvisorctl", "top", "-n", "0"]).unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::ValueValidation);
        assert!(Args::try_parse_from(["botvisorctl", "top", "-n", "1"]).is_ok());
    }
}
