//! Calls whose effects a client must see only after their answer: the object a `Delete` removes
//! goes, with `InterfacesRemoved`, once the `Delete` was answered (issue 23: a client that starts
//! waiting for the signal when its call returns missed it, as the actor often removed the object
//! first).
//!
//! A method marks its call ([`Replies::expect`]); [`super::guard`] says when the call's handler,
//! which sends the answer, is done ([`Replies::sent`]); the effect waits for that
//! ([`Replies::answered`]).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::oneshot;
use zbus::message::Header;

/// How long an effect waits for its call's answer. zbus sends it as soon as the method returns;
/// this bounds a wait on a connection that has stopped writing.
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);

/// A call, by its sender and serial.
type CallKey = (String, u32);

fn call_of(hdr: &Header<'_>) -> CallKey {
    let sender = hdr.sender().map(|s| s.to_string()).unwrap_or_default();
    (sender, hdr.primary().serial_num().get())
}

/// The answers not yet sent.
#[derive(Default)]
pub struct Replies {
    /// By effect key (a bot id): what its effect waits for.
    waits: Mutex<HashMap<String, Vec<oneshot::Receiver<()>>>>,
    /// By call: dropped once the call was answered.
    calls: Mutex<HashMap<CallKey, Vec<oneshot::Sender<()>>>>,
}

impl Replies {
    /// The effect named `key` of the call `hdr` waits for the call's answer. Mark the call
    /// before anything can act on it.
    pub fn expect(&self, hdr: &Header<'_>, key: &str) {
        let (tx, rx) = oneshot::channel();
        lock(&self.calls).entry(call_of(hdr)).or_default().push(tx);
        lock(&self.waits)
            .entry(key.to_owned())
            .or_default()
            .push(rx);
    }

    /// The call `hdr` was answered (its handler, which sends the answer, is done), or will never
    /// be: what waits for it goes on.
    pub fn sent(&self, hdr: &Header<'_>) {
        let mut calls = lock(&self.calls);
        // Every call passes here; almost none is marked.
        if !calls.is_empty() {
            calls.remove(&call_of(hdr));
        }
    }

    /// Waits until every call that marked `key` was answered, at most [`ANSWER_TIMEOUT`].
    pub async fn answered(&self, key: &str) {
        let waits = lock(&self.waits).remove(key).unwrap_or_default();
        if waits.is_empty() {
            return;
        }
        let all = futures_util::future::join_all(waits);
        if tokio::time::timeout(ANSWER_TIMEOUT, all).await.is_err() {
            tracing::warn!(
                key,
                "a call was not answered within {ANSWER_TIMEOUT:?}; going on"
            );
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
