//! Logging: to the journal when the service runs under systemd (its stderr is the journal, named
//! by `JOURNAL_STREAM`), else to stderr. `RUST_LOG` or `-v` sets the level.

use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// The syslog identifier in the journal.
pub const SYSLOG_IDENTIFIER: &str = "botvisord";

/// Installs the global subscriber. `verbosity` 0 is `info`, 1 `debug`, 2 or more `trace`;
/// `RUST_LOG`, when set, wins.
pub fn init(verbosity: u8) {
    let default = match verbosity {
        0 => "info",
        1 => "botvisor=debug,info",
        _ => "trace",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    if std::env::var_os("JOURNAL_STREAM").is_some()
        && let Ok(journald) = tracing_journald::layer()
    {
        let journald = journald.with_syslog_identifier(SYSLOG_IDENTIFIER.to_owned());
        let _ = tracing_subscriber::registry()
            .with(filter)
            .with(journald)
            .try_init();
        return;
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
}
