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
    /// Calls whose handler (which sends the answer) runs now: botvisord waits for them before
    /// it leaves the bus, so that a call it acted on is answered ([`Replies::all_sent`]).
    running: std::sync::atomic::AtomicUsize,
    /// Told when `running` comes down to 0.
    none_running: tokio::sync::Notify,
    /// By effect key (a bot id): what its effect waits for.
    waits: Mutex<HashMap<String, Vec<oneshot::Receiver<()>>>>,
    /// By call: dropped once the call was answered.
    calls: Mutex<HashMap<CallKey, Vec<oneshot::Sender<()>>>>,
}

/// A call whose handler runs ([`Replies::begin`]); its end is the call's answer sent.
pub struct Running<'a>(&'a Replies);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.end();
    }
}

/// [`Running`] for a handler whose answer is sent by a task of its own: it holds what holds the
/// replies ([`Replies::begin_owned`]).
pub struct RunningOwned<C: Send + Sync + 'static> {
    owner: std::sync::Arc<C>,
    replies: fn(&C) -> &Replies,
}

impl<C: Send + Sync + 'static> Drop for RunningOwned<C> {
    fn drop(&mut self) {
        (self.replies)(&self.owner).end();
    }
}

impl Replies {
    /// A call's handler begins; it ends (and its answer is sent) when the token is dropped.
    pub fn begin(&self) -> Running<'_> {
        self.running
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Running(self)
    }

    /// [`Replies::begin`], the token holding `owner`, whose replies `replies` finds: for a
    /// handler that goes on in a task of its own.
    pub fn begin_owned<C: Send + Sync + 'static>(
        owner: std::sync::Arc<C>,
        replies: fn(&C) -> &Replies,
    ) -> RunningOwned<C> {
        replies(&owner)
            .running
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        RunningOwned { owner, replies }
    }

    fn end(&self) {
        use std::sync::atomic::Ordering;
        if self.running.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.none_running.notify_waiters();
        }
    }

    /// Waits until no call's handler runs, at most `bound`; whether none does. Called as
    /// botvisord leaves the bus: a `Send` it committed while it stopped is answered, not left
    /// to look failed to a client that would send it again (a hostile run of issue 47 saw 2 of
    /// 440 sends during restarts committed and answered while their callers were told the
    /// recipient had left without replying).
    pub async fn all_sent(&self, bound: Duration) -> bool {
        let wait = async {
            loop {
                let told = self.none_running.notified();
                if self.running.load(std::sync::atomic::Ordering::SeqCst) == 0 {
                    return;
                }
                told.await;
            }
        };
        tokio::time::timeout(bound, wait).await.is_ok()
    }

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
