//! Connections joining and leaving the bus: a new one's user is learned (the signal audience of
//! design rule 14); one that leaves is forgotten and its leases end (design rule 13).
//!
//! The reader of `NameOwnerChanged` never waits for the bus: it files each change and goes on,
//! so zbus's queue for that stream never fills (a full queue stops zbus reading the connection
//! at all: issue 23, a storm of clients leaving hung the daemon for good). A client that leaves
//! is forgotten and its leases end there and then; who a new client is, is asked by a task of
//! its own, through [`super::lookup`], [`LEARNING_AT_ONCE`] at a time.

use std::sync::Arc;

use futures_util::StreamExt;
use tokio::sync::mpsc;

use super::ctx::Ctx;

/// Starts following `changes` (the daemon's `NameOwnerChanged` stream, subscribed before the
/// bus was asked who is on it). Returns at once; the tasks end with the stream.
pub fn follow(ctx: Arc<Ctx>, mut changes: zbus::fdo::NameOwnerChangedStream) {
    // Unbounded on purpose: its reader waits on the bus, its writer must never wait; it holds
    // one name for each connection that joined and is not yet asked about.
    let (joined_tx, mut joined_rx) = mpsc::unbounded_channel::<String>();
    let reader_ctx = ctx.clone();
    tokio::spawn(async move {
        while let Some(signal) = changes.next().await {
            let Ok(args) = signal.args() else { continue };
            let name = args.name().as_str();
            if !name.starts_with(':') {
                continue;
            }
            if args.new_owner().is_some() {
                reader_ctx.caller.joined(name);
                let _ = joined_tx.send(name.to_owned());
            } else {
                reader_ctx.caller.forget(name);
                reader_ctx.descriptors.forget(name);
                reader_ctx.supervisor.client_gone(name);
            }
        }
        tracing::warn!("no longer told of clients leaving the bus; leases end only with Release");
    });
    tokio::spawn(async move {
        let joined = futures_util::stream::poll_fn(move |cx| joined_rx.poll_recv(cx));
        joined
            .map(|name| {
                let ctx = ctx.clone();
                async move {
                    // Gone already, or asked about by one of its own calls meanwhile.
                    if ctx.caller.unknown(&name) {
                        ctx.audience.learn(&name).await;
                    }
                }
            })
            .buffer_unordered(LEARNING_AT_ONCE)
            .for_each(|()| async {})
            .await;
    });
}

/// How many connections' users are asked about at once. One at a time, a storm of 12,000
/// connections took about 80 s to learn while the bus was slow to answer, and every new
/// client's first call waited in line behind the lookups (issue 23); the bus answers questions
/// in flight together.
const LEARNING_AT_ONCE: usize = 32;

/// Learns the user of every connection on the bus now (`ListNames`): called at start, once
/// [`follow`] runs and before the first signal, so that the audience is known when the first
/// signal goes out.
pub async fn learn_present(ctx: &Ctx) -> Result<(), zbus::fdo::Error> {
    let names = ctx.caller.lookup().connections().await?;
    for name in &names {
        ctx.caller.joined(name);
    }
    futures_util::stream::iter(names)
        .map(|name| async move { ctx.audience.learn(&name).await })
        .buffer_unordered(LEARNING_AT_ONCE)
        .for_each(|()| async {})
        .await;
    Ok(())
}
