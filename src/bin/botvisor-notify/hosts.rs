//! `--all-hosts` (issue 51): every host of the hosts file botvisorctl keeps
//! ([`botvisor::remote::hosts`]), followed beside this machine's bus, each by a task of its own
//! on a link of its own (ssh and `systemd-stdio-bridge`, or the address the file gives). A
//! host's task makes its link, subscribes, tells the main loop ([`Input::Linked`]) and reads it
//! as this machine's bus is read ([`bus::read`]); when the link ends or stops answering
//! ([`stops_answering`]) it says so ([`Input::Lost`]) and makes it again after a wait that
//! doubles, so a host that is gone holds up nobody and comes back by itself.

use std::time::Duration;

use tokio::sync::mpsc::{self, UnboundedSender};
use zbus::Connection;
use zbus::address::transport::Transport;

use botvisor::remote::hosts::HostEntry;
use botvisor::remote::link::{Backoff, Link, run_program, stops_answering};

use super::bus::{self, Input};

/// How long one host may take to be linked and subscribed: an ssh login on a slow link fits
/// well inside it.
pub const LINK_BOUND: Duration = Duration::from_secs(10);

/// Follows `entry` as host `host` until `tx`'s receiver is dropped (see the module).
pub async fn follow(host: usize, entry: HostEntry, tx: UnboundedSender<Input>) {
    let mut backoff = Backoff::default();
    loop {
        let why = match tokio::time::timeout(LINK_BOUND, link(&entry)).await {
            Err(_) => Some(format!("no answer within {} s", LINK_BOUND.as_secs())),
            Ok(Err(why)) => Some(why),
            // The link (its program) ends with this round, before the next is tried.
            Ok(Ok((conn, _link, stream))) => {
                if tx.send(Input::Linked(host, conn.clone())).is_err() {
                    return;
                }
                backoff.reset();
                tracing::info!(host = %entry.name, "linked");
                if let Some(owner) = bus::daemon_owner(&conn).await {
                    let _ = tx.send(Input::DaemonOwner(host, Some(owner)));
                }
                // What the host's notification server says is not ours to hear.
                let (server, _) = mpsc::unbounded_channel();
                tokio::select! {
                    // The link ended: `read` says so itself (Input::Lost).
                    () = bus::read(host, stream, tx.clone(), server) => None,
                    why = stops_answering(&conn) => Some(why),
                }
            }
        };
        match why {
            Some(why) => {
                tracing::warn!(host = %entry.name, "offline: {why}; tried again in {:?}", backoff.next());
                if tx.send(Input::Lost(host, why)).is_err() {
                    return;
                }
            }
            None => tracing::warn!(host = %entry.name, "offline: its link ended"),
        }
        if tx.is_closed() {
            return;
        }
        backoff.wait().await;
    }
}

/// `entry`'s bus, linked and subscribed, its stream read from before the match rules were
/// added (nothing falls between). Errors: why, in words (what its program printed last is
/// logged).
async fn link(entry: &HostEntry) -> Result<(Connection, Link, zbus::MessageStream), String> {
    let address = entry.bus_address(|k| std::env::var_os(k))?;
    let (conn, link) = match address.transport() {
        Transport::Unixexec(exec) => {
            let name = entry.name.clone();
            let program = run_program(exec, true, move |line| {
                tracing::warn!(host = %name, "{}", botvisor::text::escape(line, false));
            })
            .map_err(|e| format!("cannot run {}: {e}", exec.path().display()))?;
            let stream = program
                .stream
                .try_clone()
                .map_err(|e| format!("cannot use the link: {e}"))?;
            match zbus::connection::Builder::unix_stream(stream).build().await {
                Ok(conn) => (conn, program.link),
                Err(e) => {
                    let ended = program.end_after_failure().await;
                    return Err(format!("cannot reach its bus ({e}); {ended}"));
                }
            }
        }
        _ => {
            let conn = zbus::connection::Builder::address(address.clone())
                .build()
                .await
                .map_err(|e| format!("cannot connect to {address}: {e}"))?;
            (conn, Link::none())
        }
    };
    let stream = zbus::MessageStream::from(&conn);
    bus::subscribe(&conn).await?;
    Ok((conn, link, stream))
}
