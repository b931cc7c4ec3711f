//! A desktop for the notification tests: Xvfb, a real dunst on the test's private bus (its own
//! record of each notification shown, and its context menu driven by a scripted dmenu),
//! `botvisor-notify` itself, and a stand-in notification server for what dunst cannot show.

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use zbus::Connection;

use super::{EVENT_TIMEOUT, TestEnv};

/// The notification server's name.
pub const NOTIFICATIONS: &str = "org.freedesktop.Notifications";

/// Whether dunst, dunstctl (and its dbus-send) and Xvfb are installed. Without them the test
/// prints `skipped: …` (to the real stdout, so that `cargo test` shows it) and returns false;
/// with `BOTVISOR_TEST_REQUIRE_DUNST` set (CI sets it) it fails instead.
pub fn desktop_or_skip() -> bool {
    let missing: Vec<&str> = ["dunst", "dunstctl", "dbus-send", "Xvfb"]
        .into_iter()
        .filter(|p| botvisor::config::notify::find_program(p).is_none())
        .collect();
    if missing.is_empty() {
        return true;
    }
    if std::env::var_os("BOTVISOR_TEST_REQUIRE_DUNST").is_some_and(|v| !v.is_empty()) {
        panic!(
            "{} not installed but BOTVISOR_TEST_REQUIRE_DUNST is set: the notification tests \
             must run here (Debian: apt-get install dunst xvfb dbus-bin)",
            missing.join(", ")
        );
    }
    let _ = writeln!(
        std::io::stdout(),
        "skipped: {} not installed (Debian: apt-get install dunst xvfb dbus-bin)",
        missing.join(", ")
    );
    false
}

/// An X server in memory.
pub struct Xvfb {
    child: Child,
    /// `:N`.
    pub display: String,
}

impl Xvfb {
    /// Starts Xvfb on a free display (it names it: `-displayfd`).
    pub fn start() -> Xvfb {
        let mut child = Command::new("Xvfb")
            .args([
                "-displayfd",
                "1",
                "-screen",
                "0",
                "1280x800x24",
                "-nolisten",
                "tcp",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("Xvfb");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert!(!line.trim().is_empty(), "Xvfb named no display");
        Xvfb {
            child,
            display: format!(":{}", line.trim()),
        }
    }
}

impl Drop for Xvfb {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits until `name` has an owner on the bus of `conn` (or has none, with `owned` false).
pub async fn wait_owner(conn: &Connection, name: &str, owned: bool) {
    let dbus = zbus::fdo::DBusProxy::new(conn).await.unwrap();
    let mut changes = dbus
        .receive_name_owner_changed_with_args(&[(0, name)])
        .await
        .unwrap();
    let bus_name = zbus::names::BusName::try_from(name).unwrap();
    if dbus.name_has_owner(bus_name).await.unwrap() == owned {
        return;
    }
    tokio::time::timeout(EVENT_TIMEOUT, async {
        while let Some(c) = changes.next().await {
            if c.args().unwrap().new_owner().is_some() == owned {
                return;
            }
        }
    })
    .await
    .unwrap_or_else(|_| {
        panic!(
            "{name} never became {}",
            if owned { "owned" } else { "free" }
        )
    });
}

/// A real dunst on the test's bus and Xvfb. It records every notification it shows (a rule's
/// script, dunst's own `DUNST_*` values, one JSON line each, in `shown.jsonl`); its context
/// menu runs a scripted dmenu that records the menu (`menu.txt`) and picks the first line that
/// starts with the text in `choice`. Notifications never expire here.
pub struct Dunst {
    child: Option<Child>,
    /// Its folder.
    pub dir: PathBuf,
    bus: String,
    display: String,
}

impl Dunst {
    /// Starts dunst in `dir` on `bus` (address) and `display`, and waits until it owns
    /// `org.freedesktop.Notifications`.
    pub async fn start(dir: &Path, bus: &str, display: &str, conn: &Connection) -> Dunst {
        std::fs::create_dir_all(dir).unwrap();
        let dmenu = dir.join("dmenu.sh");
        std::fs::write(
            &dmenu,
            format!(
                "#!/bin/sh\ncat > '{d}/menu.tmp'\nmv '{d}/menu.tmp' '{d}/menu.txt'\n\
                 grep -m1 -- \"^$(cat '{d}/choice')\" '{d}/menu.txt'\nexit 0\n",
                d = dir.display()
            ),
        )
        .unwrap();
        let log = dir.join("log.py");
        std::fs::write(
            &log,
            format!(
                "#!/usr/bin/env python3\nimport json, os\n\
                 with open('{}/shown.jsonl', 'a') as f:\n    \
                 f.write(json.dumps({{k: v for k, v in os.environ.items() if k.startswith('DUNST_')}}) + '\\n')\n",
                dir.display()
            ),
        )
        .unwrap();
        for f in [&dmenu, &log] {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(f, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        std::fs::write(
            dir.join("dunstrc"),
            format!(
                "[global]\n    dmenu = {}\n    markup = full\n    font = DejaVu Sans 10\n\
                 [urgency_low]\n    timeout = 0\n[urgency_normal]\n    timeout = 0\n\
                 [urgency_critical]\n    timeout = 0\n\
                 [record]\n    summary = \"*\"\n    script = {}\n",
                dmenu.display(),
                log.display()
            ),
        )
        .unwrap();
        let mut d = Dunst {
            child: None,
            dir: dir.to_owned(),
            bus: bus.to_owned(),
            display: display.to_owned(),
        };
        d.spawn(conn).await;
        d
    }

    async fn spawn(&mut self, conn: &Connection) {
        let child = Command::new("dunst")
            .arg("-config")
            .arg(self.dir.join("dunstrc"))
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &self.dir)
            .env("DBUS_SESSION_BUS_ADDRESS", &self.bus)
            .env("DISPLAY", &self.display)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(self.dir.join("dunst.log")).unwrap())
            .spawn()
            .expect("dunst");
        self.child = Some(child);
        wait_owner(conn, NOTIFICATIONS, true).await;
    }

    /// Kills dunst (SIGKILL) and waits until its name is free.
    pub async fn kill(&mut self, conn: &Connection) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        wait_owner(conn, NOTIFICATIONS, false).await;
    }

    /// Starts dunst again after [`Dunst::kill`].
    pub async fn restart(&mut self, conn: &Connection) {
        self.spawn(conn).await;
    }

    /// Every notification dunst showed (also each replacement), in order: its `DUNST_*` values
    /// (`DUNST_ID`, `DUNST_SUMMARY`, `DUNST_BODY`, `DUNST_URGENCY`, `DUNST_CATEGORY`,
    /// `DUNST_DESKTOP_ENTRY`, …).
    pub fn shown(&self) -> Vec<HashMap<String, String>> {
        std::fs::read_to_string(self.dir.join("shown.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// Waits until dunst showed `n` notifications whose summary ends with `summary_end`, and
    /// returns them.
    pub async fn wait_shown(&self, summary_end: &str, n: usize) -> Vec<HashMap<String, String>> {
        let found = || -> Vec<HashMap<String, String>> {
            self.shown()
                .into_iter()
                .filter(|s| s["DUNST_SUMMARY"].ends_with(summary_end))
                .collect()
        };
        poll(&format!("{n} notifications ending {summary_end:?}"), || {
            let f = found();
            (f.len() >= n).then_some(f)
        })
        .await
        .unwrap_or_else(|| self.fail(&format!("no {n} notifications ending {summary_end:?}")))
    }

    /// Waits until dunst showed a notification for which `pred` holds, and returns the first.
    pub async fn wait_shown_where(
        &self,
        what: &str,
        pred: impl Fn(&HashMap<String, String>) -> bool,
    ) -> HashMap<String, String> {
        poll(what, || self.shown().into_iter().find(|s| pred(s)))
            .await
            .unwrap_or_else(|| self.fail(&format!("never shown: {what}")))
    }

    /// `dunstctl ARGS` on this bus: its output.
    pub fn ctl(&self, args: &[&str]) -> String {
        let out = Command::new("dunstctl")
            .args(args)
            .env("DBUS_SESSION_BUS_ADDRESS", &self.bus)
            .output()
            .unwrap();
        assert!(out.status.success(), "dunstctl {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// How many notifications dunst displays now.
    pub fn displayed(&self) -> usize {
        self.ctl(&["count", "displayed"]).trim().parse().unwrap()
    }

    /// The ids of the notifications in dunst's history (closed ones).
    pub fn history_ids(&self) -> Vec<String> {
        let v: serde_json::Value = serde_json::from_str(&self.ctl(&["history"])).unwrap();
        v["data"][0]
            .as_array()
            .map(|a| a.iter().map(|n| n["id"]["data"].to_string()).collect())
            .unwrap_or_default()
    }

    /// Waits until notification `id` is closed (in dunst's history).
    pub async fn wait_closed(&self, id: &str) {
        poll(&format!("notification {id} closed"), || {
            self.history_ids().iter().any(|h| h == id).then_some(())
        })
        .await
        .unwrap_or_else(|| self.fail(&format!("notification {id} was never closed")));
    }

    /// Opens dunst's context menu (`dunstctl context`), whose scripted dmenu picks the first
    /// line starting with `choice` (`#Allow `); returns the whole menu dunst offered.
    pub async fn choose(&self, choice: &str) -> String {
        let menu = self.dir.join("menu.txt");
        let _ = std::fs::remove_file(&menu);
        std::fs::write(self.dir.join("choice"), choice).unwrap();
        self.ctl(&["context"]);
        poll("the context menu", || std::fs::read_to_string(&menu).ok())
            .await
            .unwrap_or_else(|| self.fail("dunst never ran dmenu"))
    }

    fn fail(&self, what: &str) -> ! {
        panic!(
            "{what}; dunst showed: {:#?}\ndunst's log:\n{}",
            self.shown(),
            std::fs::read_to_string(self.dir.join("dunst.log")).unwrap_or_default()
        )
    }
}

impl Drop for Dunst {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Calls `f` every 20 ms until it gives something, for at most [`EVENT_TIMEOUT`]: for what
/// another program records in a file or answers on request, which sends no signal.
pub async fn poll<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let end = tokio::time::Instant::now() + EVENT_TIMEOUT;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if tokio::time::Instant::now() > end {
            eprintln!("gave up waiting for {what}");
            return None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `botvisor-notify` on the test's bus.
pub struct Notifier {
    child: Option<Child>,
    /// Its log (stderr).
    pub log: PathBuf,
}

impl Notifier {
    /// Starts botvisor-notify with `config` (TOML) on `env`'s bus and waits until it has read
    /// the bots (its log says so). `botvisord` must run.
    pub async fn start(env: &TestEnv, config: &str) -> Notifier {
        let n = Notifier::spawn(env, config);
        n.wait_log("botvisord is on the bus").await;
        n
    }

    /// Starts botvisor-notify without waiting.
    pub fn spawn(env: &TestEnv, config: &str) -> Notifier {
        Notifier::spawn_with(env, config, &[])
    }

    /// Starts botvisor-notify with `args` besides its bus and configuration, without waiting.
    pub fn spawn_with(env: &TestEnv, config: &str, args: &[&str]) -> Notifier {
        let path = env.dir.path().join("notify.toml");
        std::fs::write(&path, config).unwrap();
        let log = env.dir.path().join("botvisor-notify.log");
        let child = Command::new(super::program("botvisor-notify"))
            .arg("--address")
            .arg(&env.bus.address)
            .arg("--config")
            .arg(&path)
            .args(args)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &env.home)
            .env("RUST_LOG", "botvisor=debug,info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("botvisor-notify");
        Notifier {
            child: Some(child),
            log,
        }
    }

    /// Its connection's unique name on the bus of `conn` (found by its pid).
    pub async fn unique_name(&self, conn: &Connection) -> String {
        let pid = self.child.as_ref().expect("running").id();
        let dbus = zbus::fdo::DBusProxy::new(conn).await.unwrap();
        for name in dbus.list_names().await.unwrap() {
            if name.starts_with(':')
                && dbus
                    .get_connection_unix_process_id(name.clone().into())
                    .await
                    .ok()
                    == Some(pid)
            {
                return name.to_string();
            }
        }
        panic!("botvisor-notify (pid {pid}) is not on the bus")
    }

    /// Its log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until its log holds `text`.
    pub async fn wait_log(&self, text: &str) {
        if poll(&format!("{text:?} in botvisor-notify's log"), || {
            self.log_text().contains(text).then_some(())
        })
        .await
        .is_none()
        {
            panic!(
                "botvisor-notify never logged {text:?}:\n{}",
                self.log_text()
            );
        }
    }

    /// Sends SIGTERM and waits (at most 10 s) for it to exit; its exit status.
    pub fn terminate(&mut self) -> Option<std::process::ExitStatus> {
        let mut c = self.child.take()?;
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
        let end = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(Some(s)) = c.try_wait() {
                return Some(s);
            }
            if std::time::Instant::now() > end {
                let _ = c.kill();
                let _ = c.wait();
                panic!(
                    "botvisor-notify did not exit within 10 s of SIGTERM:\n{}",
                    self.log_text()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Notifier {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- botvisor-notify log ---\n{}", self.log_text());
        }
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// One `Notify` call the stand-in server received.
#[derive(Debug, Clone)]
pub struct Notified {
    /// The id it answered.
    pub id: u32,
    /// `replaces_id`.
    pub replaces: u32,
    /// `summary`.
    pub summary: String,
    /// `body`.
    pub body: String,
    /// `actions`.
    pub actions: Vec<String>,
    /// The hints, as text.
    pub hints: HashMap<String, String>,
}

/// What a stand-in server was asked.
#[derive(Debug, Default)]
pub struct Record {
    /// Every `Notify`, in order.
    pub notified: Vec<Notified>,
    /// Every `CloseNotification`'s id, in order.
    pub closed: Vec<u32>,
}

/// A stand-in notification server (zbus) with the capabilities it is given: for what dunst
/// cannot show (a server without `actions`, one that goes away and comes back).
pub struct StandInServer {
    conn: Connection,
    record: Arc<Mutex<Record>>,
    changed: Arc<tokio::sync::Notify>,
}

struct Server {
    caps: Vec<String>,
    next: u32,
    record: Arc<Mutex<Record>>,
    changed: Arc<tokio::sync::Notify>,
}

#[zbus::interface(name = "org.freedesktop.Notifications")]
impl Server {
    #[allow(clippy::too_many_arguments)]
    async fn notify(
        &mut self,
        _app_name: String,
        replaces_id: u32,
        _app_icon: String,
        summary: String,
        body: String,
        actions: Vec<String>,
        hints: HashMap<String, zbus::OwnedVariant>,
        _expire_timeout: i32,
    ) -> u32 {
        let id = if replaces_id != 0 {
            replaces_id
        } else {
            self.next += 1;
            self.next
        };
        let hints = hints
            .into_iter()
            .map(|(k, v)| {
                let text = match &*v {
                    zbus::Variant::Str(s) => s.to_string(),
                    zbus::Variant::U8(n) => n.to_string(),
                    other => format!("{other:?}"),
                };
                (k, text)
            })
            .collect();
        self.record.lock().unwrap().notified.push(Notified {
            id,
            replaces: replaces_id,
            summary,
            body,
            actions,
            hints,
        });
        self.changed.notify_waiters();
        id
    }

    async fn close_notification(&mut self, id: u32) {
        self.record.lock().unwrap().closed.push(id);
        self.changed.notify_waiters();
    }

    async fn get_capabilities(&self) -> Vec<String> {
        self.caps.clone()
    }

    async fn get_server_information(&self) -> (String, String, String, String) {
        (
            "stand-in".into(),
            "botvisor tests".into(),
            "1".into(),
            "1.2".into(),
        )
    }
}

impl StandInServer {
    /// Serves `org.freedesktop.Notifications` on `bus` (address) with `caps`, on a connection
    /// of its own; returns once it owns the name.
    pub async fn start(bus: &str, caps: &[&str]) -> StandInServer {
        let record = Arc::new(Mutex::new(Record::default()));
        let changed = Arc::new(tokio::sync::Notify::new());
        let server = Server {
            caps: caps.iter().map(|c| (*c).to_owned()).collect(),
            next: 0,
            record: record.clone(),
            changed: changed.clone(),
        };
        let conn = zbus::connection::Builder::address(bus)
            .serve_at("/org/freedesktop/Notifications", server)
            .name(NOTIFICATIONS)
            .build()
            .await
            .unwrap();
        StandInServer {
            conn,
            record,
            changed,
        }
    }

    /// Leaves the bus (its name with it).
    pub async fn leave(self) {
        let _ = self.conn.close().await;
    }

    /// Waits until `f` finds what it looks for in the record.
    pub async fn wait<T>(&self, what: &str, mut f: impl FnMut(&Record) -> Option<T>) -> T {
        let got = tokio::time::timeout(EVENT_TIMEOUT, async {
            loop {
                let changed = self.changed.notified();
                tokio::pin!(changed);
                changed.as_mut().enable();
                if let Some(v) = f(&self.record.lock().unwrap()) {
                    return v;
                }
                changed.await;
            }
        })
        .await;
        got.unwrap_or_else(|_| {
            panic!(
                "the stand-in server never saw {what}: {:#?}",
                self.record.lock().unwrap()
            )
        })
    }

    /// Sends `ActionInvoked(id, action)` and then `NotificationClosed(id, 2)`, as a server does
    /// when the user clicks an action.
    pub async fn invoke(&self, id: u32, action: &str) {
        let ctx =
            zbus::object_server::SignalEmitter::new(&self.conn, "/org/freedesktop/Notifications")
                .unwrap();
        ctx.emit(NOTIFICATIONS, "ActionInvoked", &(id, action))
            .await
            .unwrap();
        ctx.emit(NOTIFICATIONS, "NotificationClosed", &(id, 2u32))
            .await
            .unwrap();
    }
}
