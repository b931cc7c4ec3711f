//! Logging: to the journal when the service runs under systemd (its stderr is the journal, named
//! by `JOURNAL_STREAM`), else to the file given with `--log-file`, else to stderr. `RUST_LOG` or `-v` sets the level.

use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// The syslog identifier of botvisord in the journal.
pub const SYSLOG_IDENTIFIER: &str = "botvisord";

/// Installs the global subscriber. `verbosity` 0 is `info`, 1 `debug`, 2 or more `trace`;
/// `RUST_LOG`, when set, wins. With `log_file` the log is appended to that file (its folder is
/// made), unless the journal takes it; a file that cannot be opened leaves the log on stderr,
/// with a line saying why.
pub fn init(verbosity: u8, log_file: Option<&std::path::Path>) {
    init_as(SYSLOG_IDENTIFIER, verbosity, log_file)
}

/// As [`init`], for the program whose syslog identifier in the journal is `identifier`
/// (`botvisor-notify`).
pub fn init_as(identifier: &str, verbosity: u8, log_file: Option<&std::path::Path>) {
    let default = match verbosity {
        0 => "info",
        1 => "botvisor=debug,info",
        _ => "trace",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    if std::env::var_os("JOURNAL_STREAM").is_some()
        && let Ok(journald) = tracing_journald::layer()
    {
        let journald = journald.with_syslog_identifier(identifier.to_owned());
        let _ = tracing_subscriber::registry()
            .with(filter)
            .with(journald)
            .try_init();
        return;
    }
    let mut why_not_file = None;
    if let Some(path) = log_file {
        let file = path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| {
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
            });
        match file {
            Ok(file) => {
                let _ = tracing_subscriber::registry()
                    .with(filter)
                    .with(
                        tracing_subscriber::fmt::layer()
                            .with_writer(std::sync::Mutex::new(file))
                            .with_ansi(false)
                            .with_target(false),
                    )
                    .try_init();
                return;
            }
            Err(e) => why_not_file = Some(format!("cannot log to {}: {e}", path.display())),
        }
    }
    let _ = tracing_subscriber::registry()
        .with(filter)
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
                .with_target(false),
        )
        .try_init();
    if let Some(why) = why_not_file {
        tracing::warn!("{why}; logging to stderr");
    }
}
