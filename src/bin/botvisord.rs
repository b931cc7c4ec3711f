//! `botvisord`: the botvisor service. See `botvisord --help`. It reads its arguments and its
//! configuration; what starts, in which order, is `botvisor::daemon::run`'s.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

use botvisor::config::{Config, paths};

/// Supervises coding-agent CLI sessions ("bots") and serves them over D-Bus as
/// org.botvisor.Botvisor1 on the session bus.
#[derive(Parser, Debug)]
#[command(name = "botvisord", version)]
struct Args {
    /// Configuration file [default: $XDG_CONFIG_HOME/botvisor/config.toml; a missing default
    /// file means all defaults].
    #[arg(long, value_name = "PATH")]
    config: Option<PathBuf>,
    /// SQLite database [default: config `database`, else $XDG_STATE_HOME/botvisor/botvisor.db].
    #[arg(long, value_name = "PATH")]
    database: Option<PathBuf>,
    /// Check the configuration file and exit: 0 when valid, 1 with the error otherwise.
    #[arg(long)]
    check_config: bool,
    /// Append the log to this file instead of stderr (ignored under systemd, where the journal
    /// takes it). The D-Bus activation file installed without systemd uses it.
    #[arg(long, value_name = "PATH")]
    log_file: Option<PathBuf>,
    /// More logging (-v debug, -vv trace); RUST_LOG wins when set.
    #[arg(short, long, action = clap::ArgAction::Count)]
    verbose: u8,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let (config_path, required) = match &args.config {
        Some(p) => (p.clone(), true),
        None => (paths::default_config(), false),
    };
    let config = match Config::load(&config_path, required) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("botvisord: {e}");
            return ExitCode::FAILURE;
        }
    };
    if args.check_config {
        return check_config(&config_path, &config);
    }
    botvisor::logging::init(args.verbose, args.log_file.as_deref());
    if config_path.exists() {
        tracing::info!(config = %config_path.display(), "configuration read");
    } else {
        tracing::info!(config = %config_path.display(), "no configuration file: all defaults");
    }
    let database = args
        .database
        .or_else(|| config.database.clone())
        .unwrap_or_else(paths::default_database);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("botvisord: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let ran = runtime.block_on(botvisor::daemon::run(config, database));
    botvisor::profile::dump();
    match ran {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("botvisord: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `--check-config`: the file parses and validates (else `main` has already said why), and every
/// runtime's binary exists and is executable. 0 when the daemon could run bots with it, 1 (with
/// the reason) when not.
fn check_config(config_path: &std::path::Path, config: &Config) -> ExitCode {
    use botvisor::runtime::Runtime;
    let mut ok = true;
    if config_path.exists() {
        println!("{}: valid", config_path.display());
    } else {
        println!(
            "{}: no such file; all defaults apply (docs/configuration.md)",
            config_path.display()
        );
    }
    let claude = botvisor::runtime::claude::Claude::new(config.claude_bin.clone());
    // A binary the configuration (or BOTVISOR_CLAUDE_BIN) names must be there; `claude` looked
    // up on PATH may be installed later, so its absence is only a warning.
    let configured = config.claude_bin.is_some()
        || std::env::var_os(botvisor::runtime::claude::BIN_ENV).is_some_and(|v| !v.is_empty());
    match claude.binary() {
        Ok(path) => println!("runtime claude: {}", path.display()),
        Err(e) if configured => {
            println!("runtime claude: error: {e}");
            ok = false;
        }
        Err(e) => println!("runtime claude: warning: {e}"),
    }
    let codex = botvisor::runtime::codex::Codex::new(config.codex_bin.clone());
    let configured = config.codex_bin.is_some()
        || std::env::var_os(botvisor::runtime::codex::BIN_ENV).is_some_and(|v| !v.is_empty());
    match codex.binary() {
        Ok(path) => println!("runtime codex: {}", path.display()),
        Err(e) if configured => {
            println!("runtime codex: error: {e}");
            ok = false;
        }
        Err(e) => println!("runtime codex: warning: {e}"),
    }
    // What botvisor-notify will do with this file (docs/notifications.md).
    for line in botvisor::config::notify::check_lines(&config.notify, &config.hooks) {
        println!("{line}");
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
