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
mod hosts;
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
    /// Also follow every host botvisorctl knows by name (`botvisorctl hosts add`; its hosts
    /// file), each on a link of its own: a permission question from any host is shown here
    /// with Allow and Deny, and answered on that host. A host that is gone is tried again by
    /// itself; the others go on.
    #[arg(long)]
    all_hosts: bool,
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
    let hosts = if args.all_hosts {
        match botvisor::remote::hosts::read() {
            Ok(file) => file.hosts,
            Err(e) => {
                eprintln!("botvisor-notify: {e}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        Vec::new()
    };
    let code = match runtime.block_on(run(config, args.address, hosts)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            eprintln!("botvisor-notify: {e}");
            ExitCode::FAILURE
        }
    };
    // The hosts' tasks are dropped, and with them their links, whose programs (ssh) end
    // before botvisor-notify does.
    runtime.shutdown_timeout(Duration::from_millis(100));
    botvisor::remote::link::finish_links();
    code
}

/// What is known of one host followed: its name (`local` for this machine's bus), its
/// connection while linked, its botvisord, and its bots.
struct Side {
    name: String,
    conn: Option<Connection>,
    daemon: bus::Daemon,
    model: Model,
    /// The number of the last read of its botvisord asked for (`Input::Snapshot`).
    generation: u64,
    /// While a read is under way, the signals received meanwhile, in order, to be taken once
    /// it is in (those it holds already are then skipped). Bounded by what botvisord signals in
    /// the read's bound (30 s).
    reading: Option<Vec<(zbus::message::Sequence, String, model::Signal)>>,
}

impl Side {
    fn new(name: &str, conn: Option<Connection>, config: &Config) -> Side {
        Side {
            name: name.to_owned(),
            conn,
            daemon: bus::Daemon::default(),
            model: Model::new(config.notify.clone()),
            generation: 0,
            reading: None,
        }
    }

    /// Its botvisord is gone, or another one came: what was being read is not awaited.
    fn forget(&mut self) {
        self.daemon.left();
        self.generation += 1;
        self.reading = None;
    }
}

/// Connects, follows botvisord (and, with `--all-hosts`, every one of `hosts`: index 1 on) until
/// SIGTERM or SIGINT (then closes its notifications) or until this machine's bus connection
/// ends (an error, so that a service manager starts it again).
async fn run(
    config: Config,
    address: Option<String>,
    hosts: Vec<botvisor::remote::hosts::HostEntry>,
) -> Result<(), String> {
    let conn = bus::connect(address.as_deref()).await?;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (server_tx, server_rx) = mpsc::unbounded_channel();
    // The stream is read from before the rules are added, and both before anything is read
    // from botvisord: nothing falls between.
    let stream = zbus::MessageStream::from(&conn);
    let reader = tokio::spawn(bus::read(0, stream, tx.clone(), server_tx));
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
    let mut sides = vec![Side::new(
        botvisor::remote::hosts::LOCAL,
        Some(conn.clone()),
        &config,
    )];
    let mut followers = Vec::new();
    for (i, entry) in hosts.into_iter().enumerate() {
        sides.push(Side::new(&entry.name, None, &config));
        followers.push(tokio::spawn(hosts::follow(i + 1, entry, tx.clone())));
    }
    let fleet = sides.len() > 1;
    if let Some(owner) = bus::daemon_owner(&conn).await {
        tx.send(Input::DaemonOwner(0, Some(owner))).ok();
    } else {
        tracing::info!("botvisord is not on the bus; waiting for it");
    }
    tracing::info!(
        hooks = config.hooks.len(),
        desktop = config.notify.desktop,
        hosts = sides.len(),
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
            Input::Lost(0, why) => break Err(format!("the bus connection ended: {why}")),
            Input::Lost(host, why) => {
                let Some(side) = sides.get_mut(host) else {
                    continue;
                };
                // A host never reached, or already down, has nothing to withdraw or tell.
                let was_linked = side.conn.take().is_some();
                side.forget();
                if !was_linked {
                    tracing::info!(host = %side.name, "still offline: {why}");
                    continue;
                }
                let out = side.model.daemon_left();
                tracing::warn!(host = %side.name, "its questions are withdrawn: {why}");
                tell(&hooks, side, &out.happenings, fleet);
                show(&sides, host, &desk, &out.touched, fleet);
            }
            Input::Linked(host, link) => {
                if let Some(side) = sides.get_mut(host) {
                    side.conn = Some(link);
                }
            }
            Input::Signal(host, pos, sender, signal) => {
                let Some(side) = sides.get_mut(host) else {
                    continue;
                };
                if let Some(waiting) = &mut side.reading {
                    waiting.push((pos, sender, signal));
                    continue;
                }
                if !side.daemon.accepts(&sender, pos) {
                    continue;
                }
                let out = side.model.apply(signal);
                tell(&hooks, side, &out.happenings, fleet);
                show(&sides, host, &desk, &out.touched, fleet);
            }
            Input::DaemonOwner(host, owner) => {
                let Some(side) = sides.get_mut(host) else {
                    continue;
                };
                side.forget();
                match (owner, side.conn.clone()) {
                    // Read by a task of its own: a botvisord that is stuck holds up no other
                    // host, and no notification (a hostile run saw 28 s of nothing).
                    (Some(owner), Some(link)) => {
                        side.reading = Some(Vec::new());
                        let (generation, tx) = (side.generation, tx.clone());
                        tokio::spawn(async move {
                            let read = bus::snapshot(&link, owner).await;
                            let _ = tx.send(Input::Snapshot(host, generation, read));
                        });
                    }
                    (Some(_), None) => {}
                    (None, _) => {
                        let out = side.model.daemon_left();
                        tell(&hooks, side, &out.happenings, fleet);
                        show(&sides, host, &desk, &out.touched, fleet);
                    }
                }
            }
            Input::Snapshot(host, generation, read) => {
                let Some(side) = sides.get_mut(host) else {
                    continue;
                };
                if generation != side.generation {
                    continue;
                }
                let waiting = side.reading.take().unwrap_or_default();
                // Not answered: it waits for botvisord to come back, as before.
                let Some(read) = read else {
                    continue;
                };
                side.daemon.took(&read);
                let mut out = side.model.daemon_back(read.bots);
                for (pos, sender, signal) in waiting {
                    if side.daemon.accepts(&sender, pos) {
                        let more = side.model.apply(signal);
                        out.happenings.extend(more.happenings);
                        out.touched.extend(more.touched);
                    }
                }
                tell(&hooks, side, &out.happenings, fleet);
                show(&sides, host, &desk, &out.touched, fleet);
            }
            Input::Action { key, action } => {
                let Some(side) = sides.get_mut(key.host) else {
                    continue;
                };
                match side.model.action(&key, &action) {
                    Some(model::Do::Answer {
                        path,
                        request_id,
                        behavior,
                    }) => {
                        match &side.conn {
                            Some(link) => answer(link, &side.daemon, path, request_id, behavior),
                            None => tracing::warn!(
                                host = %side.name, bot = %path,
                                "cannot answer: the host is offline"
                            ),
                        }
                        show_key(&sides, &desk, &key, fleet);
                    }
                    Some(model::Do::Open(bot)) => {
                        let on = (key.host > 0).then_some(side.name.as_str());
                        opener.open(&bot, on);
                    }
                    None => {}
                }
            }
            Input::Dismissed { key, tag } => {
                let Some(side) = sides.get_mut(key.host) else {
                    continue;
                };
                side.model.dismissed(&key, &tag);
                show_key(&sides, &desk, &key, fleet);
            }
        }
    };
    reader.abort();
    for f in followers {
        f.abort();
    }
    // Notifications nobody can act on once botvisor-notify is gone are taken away.
    desk.close_all_and_stop();
    let _ = tokio::time::timeout(desktop::CALL_TIMEOUT * 2, desktop).await;
    ended
}

/// Hands what each bot of host `host` in `touched` should show now to the desktop task; over
/// several hosts (`fleet`) each summary begins with the bot's host (`buildbox:demo asks …`).
fn show(sides: &[Side], host: usize, desk: &Desk, touched: &[String], fleet: bool) {
    let Some(side) = sides.get(host) else {
        return;
    };
    for path in touched {
        for kind in Kind::ALL {
            let note = side.model.note(path, kind).map(|mut n| {
                if fleet {
                    // Cut again with the host: a summary stays within its bound.
                    n.summary =
                        note::line(&format!("{}:{}", side.name, n.summary), note::SUMMARY_CHARS);
                }
                n
            });
            desk.set(model::Key::on(host, path, kind), note);
        }
    }
}

/// [`show`] for the bot of `key` alone (an action on its notification, or its dismissal).
fn show_key(sides: &[Side], desk: &Desk, key: &model::Key, fleet: bool) {
    show(sides, key.host, desk, std::slice::from_ref(&key.bot), fleet);
}

/// Tells the hooks what happened on `side`; over several hosts (`fleet`) each event names its
/// host (`host`).
fn tell(hooks: &hooks::Hooks, side: &Side, happenings: &[model::Happening], fleet: bool) {
    if !fleet {
        hooks.send(happenings);
        return;
    }
    let named: Vec<model::Happening> = happenings
        .iter()
        .cloned()
        .map(|mut h| {
            h.json["host"] = side.name.clone().into();
            h
        })
        .collect();
    hooks.send(&named);
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
