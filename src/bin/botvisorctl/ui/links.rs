//! The dashboard's links to its hosts, each followed by a task of its own that feeds one
//! channel ([`Feed`]): a link up (with its connection, on which the dashboard's calls to that
//! host go), every signal of its botvisord, and a link down (why, in words). The dashboard's
//! loop never waits on a host: a host that is gone holds up nobody.
//!
//! On one bus (`ui`) the link is the command's own connection; its loss ends the dashboard. Over
//! several hosts (`ui --all-hosts`, issue 51) each host's link is made, checked and made again
//! by itself, with backoff, for the dashboard's whole life.

use tokio::sync::mpsc::UnboundedSender;
use zbus::Connection;

use crate::drain::{BotvisorSignals, Drained, botvisor_signals};
use crate::fail::{Failure, describe, is_lost};
use crate::fleet::{Backoff, Daemon, HOST_BOUND, Member, stops_answering};

/// One of botvisord's signals, or a change of its bus name's owner, as [`botvisor_signals`]
/// gives them.
pub type Event = Drained<zbus::Result<zbus::Message>, zbus::fdo::NameOwnerChanged>;

/// What the links tell the dashboard, each about one host (its index among the hosts).
pub enum Feed {
    /// The host's link is up, subscribed to its botvisord's signals: the connection the
    /// dashboard's calls to it go on, and which botvisord answered.
    Up(usize, Connection, Daemon),
    /// A signal of the host's botvisord (or its bus name's owner changed).
    Bus(usize, Event),
    /// The host's link is down: why, in words. Over several hosts it is tried again by itself.
    Down(usize, String),
}

/// The dashboard on one bus: `conn` subscribed (before anything is read: nothing falls
/// between), [`Feed::Up`] sent, and its signals fed to `tx` by a task until the connection is
/// lost ([`Feed::Down`]). Errors: the bus's, subscribing.
pub async fn one(conn: &Connection, tx: UnboundedSender<Feed>) -> Result<(), Failure> {
    let signals = botvisor_signals(conn).await?;
    let _ = tx.send(Feed::Up(0, conn.clone(), Daemon::default()));
    tokio::spawn(async move {
        // The local bus is not checked: its loss is seen as the connection's end.
        let why = follow(0, signals, std::future::pending(), &tx).await;
        let _ = tx.send(Feed::Down(0, why));
    });
    Ok(())
}

/// The dashboard over several hosts: every member linked, followed and linked again by a task
/// of its own (host `i` is `members[i]`), until `tx`'s receiver is dropped.
pub fn fleet(members: &[Member], tx: &UnboundedSender<Feed>) {
    for (host, m) in members.iter().enumerate() {
        tokio::spawn(keep(host, m.clone(), tx.clone()));
    }
}

/// One host of several, for ever: linked within [`HOST_BOUND`], followed while its link
/// answers ([`stops_answering`]), then, down, tried again after a wait that doubles
/// ([`Backoff`]; back to the first once it was up).
async fn keep(host: usize, m: Member, tx: UnboundedSender<Feed>) {
    let mut backoff = Backoff::default();
    loop {
        let reach = async {
            let (conn, link) = m.bus.connect_link(Some(&m.name)).await?;
            let signals = botvisor_signals(&conn).await?;
            Ok::<_, Failure>((conn, link, signals))
        };
        let why = match tokio::time::timeout(HOST_BOUND, reach).await {
            Err(_) => format!("no answer within {} s", HOST_BOUND.as_secs()),
            Ok(Err(f)) => f.text,
            // The link (its program) ends with this round, before the next is tried.
            Ok(Ok((conn, _link, signals))) => {
                let which = Daemon::of(&conn).await;
                if tx.send(Feed::Up(host, conn.clone(), which)).is_err() {
                    return;
                }
                backoff.reset();
                follow(host, signals, stops_answering(&conn), &tx).await
            }
        };
        if tx.send(Feed::Down(host, why)).is_err() {
            return;
        }
        backoff.wait().await;
    }
}

/// Feeds host `host`'s `signals` to `tx` until the link is lost or `check` says it stopped
/// answering: why, in words (empty once nobody reads `tx`).
async fn follow(
    host: usize,
    mut signals: BotvisorSignals,
    check: impl std::future::Future<Output = String>,
    tx: &UnboundedSender<Feed>,
) -> String {
    tokio::pin!(check);
    loop {
        tokio::select! {
            event = signals.recv() => match event {
                None => return "the link closed".into(),
                Some(Drained::First(Err(e))) if is_lost(&e) => {
                    return format!("the link was lost: {}", describe(&e));
                }
                Some(e) => {
                    if tx.send(Feed::Bus(host, e)).is_err() {
                        return String::new();
                    }
                }
            },
            why = &mut check => return why,
        }
    }
}
