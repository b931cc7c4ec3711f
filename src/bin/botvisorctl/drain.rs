//! Signal streams read by a task of their own. zbus hands each stream's messages to a queue of
//! bounded length and, when it is full, waits for room before it reads the next message off
//! the connection, replies included: a loop that awaits a call (reading a big item whole,
//! listing the bots) while its stream fills would wait for a reply zbus does not read. A
//! drained stream never fills: its task moves every message on at once.

use futures_util::{Stream, StreamExt};
use tokio::sync::mpsc;

/// What one of the streams [`drained`] reads gave.
pub enum Drained<A, B> {
    /// From the first stream.
    First(A),
    /// From the second stream.
    Second(B),
}

/// The items of `first` and `second`, through one unbounded queue, in the order zbus received
/// them: zbus fills each stream's queue in the connection's order, and the task takes from
/// `first` whenever it has something, so what `first` received before an item of `second`
/// comes before it. The receiver ends when `first` does (or the receiver is dropped).
pub fn drained<A, B, SA, SB>(
    mut first: SA,
    mut second: SB,
) -> mpsc::UnboundedReceiver<Drained<A, B>>
where
    SA: Stream<Item = A> + Send + Unpin + 'static,
    SB: Stream<Item = B> + Send + Unpin + 'static,
    A: Send + 'static,
    B: Send + 'static,
{
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut second_open = true;
        loop {
            let item = tokio::select! {
                biased;
                a = first.next() => match a {
                    Some(a) => Drained::First(a),
                    None => return,
                },
                b = second.next(), if second_open => match b {
                    Some(b) => Drained::Second(b),
                    None => {
                        second_open = false;
                        continue;
                    }
                },
            };
            if tx.send(item).is_err() {
                return;
            }
        }
    });
    rx
}

/// What [`botvisor_signals`] gives: every signal botvisord sends, and the changes of the bus
/// name's owner (botvisord leaving or coming back).
pub type BotvisorSignals =
    mpsc::UnboundedReceiver<Drained<zbus::Result<zbus::Message>, zbus::fdo::NameOwnerChanged>>;

/// Subscribes to every signal botvisord sends and to its bus name's owner, both read by a task
/// of their own ([`drained`]). Subscribed before anything is read, so nothing falls between a
/// read and its changes. The signal stream's queue holds 65,536 messages (never filled: the
/// task moves them on at once). Errors: the bus's, as a [`super::fail::Failure`].
pub async fn botvisor_signals(
    conn: &zbus::Connection,
) -> Result<BotvisorSignals, super::fail::Failure> {
    let rule = zbus::MatchRule::builder()
        .msg_type(zbus::message::Type::Signal)
        .sender(botvisor::dbus::BUS_NAME)
        .build()?;
    let stream =
        zbus::MessageStream::for_match_rule(rule, conn, std::num::NonZeroUsize::new(1 << 16))
            .await?;
    let owner = zbus::fdo::DBusProxy::new(conn)
        .await?
        .receive_name_owner_changed_with_args(&[(0, botvisor::dbus::BUS_NAME)])
        .await?;
    Ok(drained(stream, owner))
}
