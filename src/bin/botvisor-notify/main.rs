//! `botvisor-notify`: tells the user when a bot needs them (design rule 17). It watches every bot
//! of botvisord over D-Bus and speaks `org.freedesktop.Notifications`, the desktop's own
//! notification server: a permission request with Allow and Deny, a bot that failed, waits for a
//! limit or a login, a turn that ended while nobody was looking; and it runs the configured
//! `[[hooks]]` for events. See docs/notifications.md.
//!
//! One concern per module: the bus and the order of what it says (`bus`), what is known of the
//! bots and what they need (`model`), the words of a notification (`note`), the notification
//! server (`desktop`), the hooks (`hooks`), the default action's command (`open`).
//!
//! Three tasks, none of which waits for another: `bus::read` moves every message the connection
//! receives into an unbounded queue at once; the main loop (`run`) keeps the model and hands
//! what each bot should show to the desktop task (`desktop::Desk`, latest wins) and the events to
//! the hooks' bounded queues (dropped when full); the desktop task alone calls the notification
//! server, so a server that hangs holds up nothing but notifications.

mod bus;
mod desktop;
mod hooks;
mod model;
mod note;
mod open;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use tokio::sync::mpsc;
use zbus::Connection;

use botvisor::config::{Config, paths};

use bus::Input;
use desktop::Desk;
use model::{Kind, Model};

/// Shows botvisor's bots that need you as desktop notifications (permission requests with Allow
/// and Deny, failures, limits, logins, turns that ended unattended) and runs the configured
/// hooks. Reads the [notify] table and [[hooks]] of botvisor's configuration file.
#[derive(Parser, Debug)]
#[command(name = "botvisor-notify", version)]
struct Args {
    /// Configuration file [default: $XDG_CONFIG_HOME/botvisor/config.toml; a missing default
    /// file means all defaults].
    #[arg(long, value_name = "PATH")]
    config: Option<PathBuf>,
    /// The D-Bus address of the bus where botvisord and the notification server are [default:
    /// the session bus, DBUS_SESSION_BUS_ADDRESS].
    #[arg(long, value_name = "ADDRESS")]
    address: Option<String>,
    /// Check the configuration file and exit: 0 when valid, 1 with the error otherwise.
    #[arg(long)]
    check_config: bool,
    /// Append the log to this file instead of stderr (ignored under systemd, where the journal
    /// takes it).
    #[arg(long, value_name = "PATH")]
    log_file: Option<PathBuf>,
    /// More logging (-v debug, -vv trace); RUST_LOG wins when set.
    #[arg(short, long, action = clap::ArgAction::Count)]
    verbose: u8,
}

/// The `client` name botvisor-notify gives `RespondPermission` (the `permission_answer` item
/// says it).
pub const CLIENT: &str = "botvisor-notify";

/// How long an answer (`RespondPermission`) may take: botvisord answers at once (it commits the
/// answer and queues it for the agent), so a longer wait means it is stuck, and the answer is
/// given up (logged) rather than kept pending for ever.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

fn main() -> ExitCode {
    let args = Args::parse();
    let (config_path, required) = match &args.config {
        Some(p) => (p.clone(), true),
        None => (paths::default_config(), false),
    };
    let config = match Config::load(&config_path, required) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("botvisor-notify: {e}");
            return ExitCode::FAILURE;
        }
    };
    if args.check_config {
        if config_path.exists() {
            println!("{}: valid", config_path.display());
        } else {
            println!(
                "{}: no such file; all defaults apply (docs/notifications.md)",
                config_path.display()
            );
        }
        for line in botvisor::config::notify::check_lines(&config.notify, &config.hooks) {
            println!("{line}");
        }
        return ExitCode::SUCCESS;
    }
    botvisor::logging::init_as("botvisor-notify", args.verbose, args.log_file.as_deref());
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("botvisor-notify: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(config, args.address)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            eprintln!("botvisor-notify: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Connects, follows botvisord until SIGTERM or SIGINT (then closes its notifications) or until
/// the bus connection ends (an error, so that a service manager starts it again).
async fn run(config: Config, address: Option<String>) -> Result<(), String> {
    let conn = bus::connect(address.as_deref()).await?;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (server_tx, server_rx) = mpsc::unbounded_channel();
    // The stream is read from before the rules are added, and both before anything is read
    // from botvisord: nothing falls between.
    let stream = zbus::MessageStream::from(&conn);
    let reader = tokio::spawn(bus::read(stream, tx.clone(), server_tx));
    bus::subscribe(&conn).await?;
    let desk = Arc::new(Desk::default());
    let opener = open::Opener::new(config.notify.open_command.clone(), address.clone());
    let desktop = tokio::spawn(desktop::run(
        conn.clone(),
        desk.clone(),
        server_rx,
        tx.clone(),
        config.notify.desktop,
    ));
    let hooks = hooks::Hooks::start(&config.hooks);
    let mut model = Model::new(config.notify.clone());
    let mut daemon = bus::Daemon::default();
    if let Some(owner) = bus::daemon_owner(&conn).await {
        tx.send(Input::DaemonOwner(Some(owner))).ok();
    } else {
        tracing::info!("botvisord is not on the bus; waiting for it");
    }
    tracing::info!(
        hooks = config.hooks.len(),
        desktop = config.notify.desktop,
        "botvisor-notify watches the bots"
    );

    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| format!("cannot watch SIGTERM: {e}"))?;
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    let ended = loop {
        let input = tokio::select! {
            i = rx.recv() => i,
            _ = term.recv() => break Ok(()),
            _ = &mut ctrl_c => break Ok(()),
        };
        let Some(input) = input else {
            break Err("the bus connection ended".to_owned());
        };
        match input {
            Input::Lost(why) => break Err(format!("the bus connection ended: {why}")),
            Input::Signal(pos, sender, signal) => {
                if !daemon.accepts(&sender, pos) {
                    continue;
                }
                let out = model.apply(signal);
                hooks.send(&out.happenings);
                show(&model, &desk, &out.touched);
            }
            Input::DaemonOwner(owner) => {
                let out = match owner {
                    Some(owner) => match daemon.snapshot(&conn, owner).await {
                        Some(bots) => model.daemon_back(bots),
                        None => continue,
                    },
                    None => {
                        daemon.left();
                        model.daemon_left()
                    }
                };
                hooks.send(&out.happenings);
                show(&model, &desk, &out.touched);
            }
            Input::Action { key, action } => match model.action(&key, &action) {
                Some(model::Do::Answer {
                    path,
                    request_id,
                    behavior,
                }) => {
                    answer(&conn, &daemon, path, request_id, behavior);
                    show(&model, &desk, std::slice::from_ref(&key.bot));
                }
                Some(model::Do::Open(bot)) => opener.open(&bot),
                None => {}
            },
            Input::Dismissed { key, tag } => {
                model.dismissed(&key, &tag);
                show(&model, &desk, std::slice::from_ref(&key.bot));
            }
        }
    };
    reader.abort();
    // Notifications nobody can act on once botvisor-notify is gone are taken away.
    desk.close_all_and_stop();
    let _ = tokio::time::timeout(desktop::CALL_TIMEOUT * 2, desktop).await;
    ended
}

/// Hands what each bot in `touched` should show now to the desktop task.
fn show(model: &Model, desk: &Desk, touched: &[String]) {
    for path in touched {
        for kind in Kind::ALL {
            desk.set(model::Key::new(path, kind), model.note(path, kind));
        }
    }
}

/// Answers a permission request in a task of its own (bounded by [`ANSWER_TIMEOUT`]); the
/// result is logged: `NotFound` means another client answered first.
fn answer(
    conn: &Connection,
    daemon: &bus::Daemon,
    path: String,
    request_id: String,
    behavior: &'static str,
) {
    let Some(owner) = daemon.owner().map(str::to_owned) else {
        tracing::warn!(bot = %path, "cannot answer: botvisord is not on the bus");
        return;
    };
    let conn = conn.clone();
    tokio::spawn(async move {
        let mut options = std::collections::HashMap::new();
        options.insert("client", zbus::Variant::from(CLIENT));
        let body = (request_id.as_str(), behavior, options);
        let call = conn.call_method(
            Some(owner.as_str()),
            path.as_str(),
            Some(botvisor::dbus::BOT_INTERFACE),
            "RespondPermission",
            &body,
        );
        match tokio::time::timeout(ANSWER_TIMEOUT, call).await {
            Ok(Ok(_)) => tracing::info!(bot = %path, request = %request_id, behavior, "answered"),
            Ok(Err(e)) => {
                tracing::warn!(bot = %path, request = %request_id, behavior, "answer not taken: {e}")
            }
            Err(_) => tracing::warn!(
                bot = %path, request = %request_id, behavior,
                "botvisord did not answer RespondPermission within {ANSWER_TIMEOUT:?}"
            ),
        }
    });
}
