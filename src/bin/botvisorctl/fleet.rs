//! Issue 51: several hosts at once. Which hosts a command names (`--host` and `--address` given
//! several times, `--all-hosts`), and their bots read together: every host on a link of its
//! own, in a task of its own, each bounded, so that a host that is gone never holds up the
//! others.

use std::ffi::OsString;
use std::time::Duration;

use super::bots::{self, BotInfo};
use super::connect::Bus;
use super::fail::Failure;
use super::hosts::{self, LOCAL};

/// How long one host may take to be reached and to answer: an ssh login on a slow link and a
/// `GetManagedObjects` of a thousand bots fit well inside it; past it the host is `offline`
/// with that said. A host refusing the connection says so at once.
pub const HOST_BOUND: Duration = Duration::from_secs(10);

/// A host a command goes to: its name as rows show it, and its bus.
#[derive(Debug, Clone, PartialEq)]
pub struct Member {
    /// `local`, a configured host's name, or what `--host`/`--address` said.
    pub name: String,
    /// Its bus.
    pub bus: Bus,
    /// Named by an address given as it is (`--address`, no configured name): hints say
    /// `--address 'NAME'`, not `--host NAME`.
    pub by_address: bool,
}

/// The hosts named by `hosts_given` (`--host`, each a configured host's name or
/// `[USER@]HOST`), `addresses` (`--address`) and `all` (`--all-hosts`: `local` and every host
/// of `config`), in that order: `local` first, then as given, each once. `None` when they name
/// one host at most (the command goes to one bus, as before). Errors: a malformed host or
/// address (usage errors).
pub fn members(
    config: &hosts::Config,
    hosts_given: &[String],
    addresses: &[String],
    all: bool,
    env: impl Fn(&str) -> Option<OsString> + Copy,
) -> Result<Option<Vec<Member>>, Failure> {
    if !all && hosts_given.len() + addresses.len() <= 1 {
        return Ok(None);
    }
    let mut out: Vec<Member> = Vec::new();
    // Each host once: by name, and by the bus it stands for (two names of one bus).
    let mut push = |m: Member| {
        if !out.iter().any(|o| o.name == m.name || o.bus == m.bus) {
            out.push(m);
        }
    };
    if all {
        push(Member {
            name: LOCAL.into(),
            bus: Bus::choose(None, None, env)?,
            by_address: false,
        });
        for h in &config.hosts {
            push(Member {
                name: h.name.clone(),
                bus: hosts::bus_of(h, env)?,
                by_address: false,
            });
        }
    }
    for given in hosts_given {
        push(resolve(config, given, env)?);
    }
    for a in addresses {
        let configured = config
            .hosts
            .iter()
            .find(|h| h.address.as_deref() == Some(a.as_str()));
        push(Member {
            name: configured.map_or_else(|| a.clone(), |h| h.name.clone()),
            bus: Bus::choose(Some(a), None, env)?,
            by_address: configured.is_none(),
        });
    }
    Ok(Some(out))
}

/// One `--host` value: `local`, a configured host's name, or `[USER@]HOST` for ssh.
pub fn resolve(
    config: &hosts::Config,
    given: &str,
    env: impl Fn(&str) -> Option<OsString>,
) -> Result<Member, Failure> {
    if given == LOCAL {
        return Ok(Member {
            name: LOCAL.into(),
            bus: Bus::choose(None, None, env)?,
            by_address: false,
        });
    }
    if let Some(h) = config.hosts.iter().find(|h| h.name == given) {
        return Ok(Member {
            name: h.name.clone(),
            bus: hosts::bus_of(h, env)?,
            by_address: false,
        });
    }
    Ok(Member {
        name: given.to_owned(),
        bus: Bus::choose(None, Some(given), env)?,
        by_address: false,
    })
}

/// Which botvisord answered for a host: its machine's boot and its own start, as the Manager's
/// `BootId` and `Invocation` say them (empty where it does not): a boot id that changed is a
/// reboot of the host, an invocation that changed a restart of its botvisord.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Daemon {
    /// The host kernel's boot id.
    pub boot_id: String,
    /// The botvisord's invocation.
    pub invocation: String,
}

impl Daemon {
    /// What the botvisord on `conn` says, within [`PING_BOUND`]; empty fields where it
    /// answers nothing (an older one, none on that bus, or no answer in time).
    pub async fn of(conn: &zbus::Connection) -> Daemon {
        let ask = async {
            let Ok(m) = botvisor::dbus::client::ManagerProxy::new(conn).await else {
                return Daemon::default();
            };
            Daemon {
                boot_id: m.boot_id().await.unwrap_or_default(),
                invocation: m.invocation().await.unwrap_or_default(),
            }
        };
        tokio::time::timeout(PING_BOUND, ask)
            .await
            .unwrap_or_default()
    }
}

/// What one host answered.
#[derive(Debug)]
pub enum HostBots {
    /// Reached: its bots, and which botvisord.
    Online(Vec<BotInfo>, Daemon),
    /// Not reached, or no answer within [`HOST_BOUND`]: why, in words.
    Offline(String),
}

/// Every member's bots, read at once (each host on a link and a task of its own, bounded by
/// [`HOST_BOUND`]), in the members' order. Errors: Ctrl-C (exit code 130; every link ended).
pub async fn read_all(members: &[Member]) -> Result<Vec<(Member, HostBots)>, Failure> {
    let read = on_each(members, |conn| async move {
        let bots = bots::all(&conn).await?;
        Ok((bots, Daemon::of(&conn).await))
    })
    .await?;
    Ok(read
        .into_iter()
        .map(|(m, got)| match got {
            Ok((bots, daemon)) => (m, HostBots::Online(bots, daemon)),
            Err(why) => (m, HostBots::Offline(why)),
        })
        .collect())
}

/// `work` done on every member at once, each on a link and a task of its own, the link made
/// and the work done within [`HOST_BOUND`]: what each came to, in the members' order (why in
/// words where it failed or took too long). Errors: Ctrl-C (exit code 130; every link ended).
pub async fn on_each<T, W, F>(
    members: &[Member],
    work: W,
) -> Result<Vec<(Member, Result<T, String>)>, Failure>
where
    T: Send + 'static,
    W: Fn(zbus::Connection) -> F + Clone + Send + Sync + 'static,
    F: std::future::Future<Output = Result<T, Failure>> + Send + 'static,
{
    let tasks: Vec<_> = members
        .iter()
        .cloned()
        .map(|m| {
            let work = work.clone();
            tokio::spawn(async move {
                let read = async {
                    // The link ends with this task (its program is ended).
                    let (conn, _link) = m.bus.connect_link(Some(&m.name)).await?;
                    work(conn).await
                };
                let got = match tokio::time::timeout(HOST_BOUND, read).await {
                    Ok(Ok(v)) => Ok(v),
                    Ok(Err(f)) => Err(f.text),
                    Err(_) => Err(format!("no answer within {} s", HOST_BOUND.as_secs())),
                };
                (m, got)
            })
        })
        .collect();
    let aborts: Vec<_> = tasks.iter().map(|t| t.abort_handle()).collect();
    let gather =
        async {
            let mut out = Vec::new();
            for (t, m) in tasks.into_iter().zip(members) {
                out.push(t.await.unwrap_or_else(|e| {
                    (m.clone(), Err(format!("botvisorctl's task failed: {e}")))
                }));
            }
            out
        };
    tokio::select! {
        out = gather => Ok(out),
        _ = tokio::signal::ctrl_c() => {
            // The tasks' links end with them.
            for a in aborts {
                a.abort();
            }
            Err(Failure {
                text: "stopped (Ctrl-C) before every host answered".into(),
                code: super::fail::CTRL_C,
            })
        }
    }
}

/// A host's link kept open from one read to the next (`top`): made again, bounded, when it is
/// missing or failed; dropped (its program ended) when a read fails, so the next read starts a
/// fresh one.
pub struct Kept {
    /// The host.
    pub member: Member,
    link: Option<(zbus::Connection, super::connect::Link)>,
}

impl Kept {
    /// `member`, not linked yet.
    pub fn new(member: Member) -> Kept {
        Kept { member, link: None }
    }

    /// The host's bots now, within `bound` (the link made first when there is none): online,
    /// or offline with why.
    pub async fn read(&mut self, bound: Duration) -> HostBots {
        let read = async {
            if self.link.is_none() {
                self.link = Some(
                    self.member
                        .bus
                        .connect_link(Some(&self.member.name))
                        .await?,
                );
            }
            let (conn, _) = self.link.as_ref().expect("linked just above");
            let bots = bots::all(conn).await?;
            Ok::<_, Failure>((bots, Daemon::of(conn).await))
        };
        let got = match tokio::time::timeout(bound, read).await {
            Ok(Ok((bots, daemon))) => return HostBots::Online(bots, daemon),
            Ok(Err(f)) => f.text,
            Err(_) => format!("no answer within {:.1} s", bound.as_secs_f64()),
        };
        self.link = None;
        HostBots::Offline(got)
    }
}

pub use botvisor::remote::link::{Backoff, PING_BOUND, stops_answering};

/// `watch` over several hosts (issue 51): every bot of every host live, each host on a link and
/// a task of its own. A host that cannot be reached, or whose link stops answering, is said
/// `offline` (since when, and why) and tried again by itself with backoff; when it answers
/// again it is said `online` and followed again. Ends at Ctrl-C (exit 0).
pub async fn watch(members: &[Member], json: bool) -> Result<u8, Failure> {
    let tasks: Vec<_> = members
        .iter()
        .cloned()
        .map(|m| tokio::spawn(follow_host(m, json)))
        .collect();
    let _ = tokio::signal::ctrl_c().await;
    for t in tasks {
        t.abort();
    }
    Ok(super::fail::OK)
}

/// One host of a `watch`: followed while its link lasts, then tried again, for ever.
async fn follow_host(m: Member, json: bool) {
    let tag = super::watch::HostTag {
        name: m.name.clone(),
        ctl: super::hint::ctl_for(&m),
    };
    let mut backoff = Backoff::default();
    // The offline state said last: said again only when its reason changes.
    let mut said: Option<String> = None;
    loop {
        // Set once this round's link was up and followed: what was said before is old news.
        let up = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let link = tokio::time::timeout(HOST_BOUND, m.bus.connect_link(Some(&m.name))).await;
        let why = match link {
            Err(_) => format!("no answer within {} s", HOST_BOUND.as_secs()),
            Ok(Err(f)) => f.text,
            // The link (its program) ends at the end of this round, before the next is tried.
            Ok(Ok((conn, _link))) => {
                let (ready, is_ready) = tokio::sync::oneshot::channel();
                let name = m.name.clone();
                let came_up = up.clone();
                let daemon = Daemon::of(&conn).await;
                let watching =
                    super::watch::follow(&conn, None, json, Some(tag.clone()), move || {
                        say_online(&name, &daemon, json);
                        came_up.store(true, std::sync::atomic::Ordering::Relaxed);
                        let _ = ready.send(());
                    });
                tokio::select! {
                    ended = watching => match ended {
                        // Ctrl-C: the whole watch ends.
                        Ok(_) => return,
                        Err(f) => f.text,
                    },
                    why = alive(&conn, is_ready) => why,
                }
            }
        };
        if up.load(std::sync::atomic::Ordering::Relaxed) {
            // It was online: its going is news, and its next try comes soon.
            said = None;
            backoff.reset();
        }
        if said.as_deref() != Some(why.as_str()) {
            say_offline(&m.name, &why, json);
            said = Some(why);
            backoff.reset();
        }
        backoff.wait().await;
    }
}

/// Waits until the link on `conn` stops answering (after `ready`, the watch subscribed):
/// why, in words.
async fn alive(conn: &zbus::Connection, ready: tokio::sync::oneshot::Receiver<()>) -> String {
    if ready.await.is_err() {
        return "the watch ended".into();
    }
    stops_answering(conn).await
}

fn say_online(name: &str, daemon: &Daemon, json: bool) {
    if json {
        json_line!(
            serde_json::json!({"event": "host", "host": name, "state": "online",
                                      "boot_id": daemon.boot_id, "invocation": daemon.invocation})
        );
    } else {
        outln!(
            "{}",
            super::show::paint(
                super::show::DIM,
                &format!(
                    "{}: online (boot {}, botvisord {})",
                    super::show::safe(name),
                    short(&daemon.boot_id),
                    short(&daemon.invocation)
                )
            )
        );
    }
}

/// The first 8 characters of an id, as people compare them (`-` for none).
pub fn short(id: &str) -> String {
    if id.is_empty() {
        return "-".to_owned();
    }
    super::show::safe(id.get(..8).unwrap_or(id))
}

fn say_offline(name: &str, why: &str, json: bool) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    if json {
        json_line!(
            serde_json::json!({"event": "host", "host": name, "state": "offline",
                                      "since": now, "error": why})
        );
    } else {
        outln!(
            "{}",
            super::show::paint(
                super::show::ERROR,
                &format!(
                    "{}: offline since {}: {}",
                    super::show::safe(name),
                    super::bots::local_time(now),
                    super::show::safe(why)
                )
            )
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env(_: &str) -> Option<OsString> {
        None
    }

    #[test]
    fn one_host_or_none_is_not_a_fleet() {
        assert_eq!(
            members(&Default::default(), &[], &[], false, no_env).unwrap(),
            None
        );
        assert_eq!(
            members(&Default::default(), &["box".into()], &[], false, no_env).unwrap(),
            None
        );
    }

    #[test]
    fn hosts_are_taken_in_order_once_each() {
        let config = hosts::Config {
            hosts: vec![hosts::HostEntry {
                name: "a".into(),
                host: Some("me@a.example".into()),
                address: None,
            }],
        };
        let got = members(
            &config,
            &["a".into(), "me@b".into(), "a".into()],
            &["unix:path=/run/x".into()],
            false,
            no_env,
        )
        .unwrap()
        .unwrap();
        let names: Vec<&str> = got.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["a", "me@b", "unix:path=/run/x"]);
        assert!(matches!(&got[0].bus, Bus::Host(h, _) if h == "me@a.example"));
        let all = members(&config, &[], &[], true, no_env).unwrap().unwrap();
        let names: Vec<&str> = all.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["local", "a"]);
        let bad = members(&config, &["-oX".into(), "b".into()], &[], false, no_env);
        assert!(bad.is_err());
    }
}
