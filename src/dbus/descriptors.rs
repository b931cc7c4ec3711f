//! Answers that carry a file descriptor (`OpenChatItem`), to clients that may not take one.
//!
//! A connection says in its handshake whether it takes descriptors; dbus-next without its
//! native module, GLib over TCP and other transports do not, and the bus does not tell us who
//! does. The bus refuses to pass such an answer on: it sends botvisord an
//! `org.freedesktop.DBus.Error.NotSupported` error ("Tried to send message with Unix file
//! descriptors to a client that doesn't support that") whose reply serial is our answer's, and
//! the caller hears nothing (issue 23: GLib waited its 25 s timeout, dbus-next for ever).
//!
//! So botvisord sends these answers itself ([`DescriptorReplies::answer`]), remembers each one's
//! serial for a while, and [`watch_refusals`] answers the call again, with
//! `org.botvisor.Botvisor1.Error.NotSupported` naming `ReadChatItem`, when the bus refuses the
//! first answer. dbus-daemon passes that second answer on: it still awaits one for the call, as
//! the refused answer never reached the caller (tests/fake/sizes.rs
//! `open_chat_item_to_a_client_without_descriptors_is_a_named_error`).

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use zbus::message::{Message, Type};
use zbus::{Connection, MatchRule, MessageStream};

/// How long an answer's refusal is waited for. The bus refuses while it routes the answer, so
/// the error comes back within a round trip; this is far beyond any such trip.
const REFUSAL_WINDOW: Duration = Duration::from_secs(60);

/// At most this many answers are remembered (the oldest go first): a bound on memory whatever
/// the rate of calls (each holds its call, a few hundred bytes). Once the bus refused one answer
/// to a connection, its later calls are answered at once ([`DescriptorReplies::answer`]), so a
/// flood from it does not push other clients' answers out (issue 23: 12,000 calls in a row from
/// one connection left 6,543 unanswered at 4,096 remembered).
const REMEMBERED: usize = 16_384;

/// The error the bus sends when it will not pass descriptors on.
const BUS_NOT_SUPPORTED: &str = "org.freedesktop.DBus.Error.NotSupported";

/// What the caller is told instead of a descriptor.
pub const NO_DESCRIPTORS: &str = "this connection cannot receive file descriptors (the bus \
     refused to pass one on); read the chat item with ReadChatItem, in ranges";

/// The descriptor answers sent recently, by serial, and the connections known not to take
/// descriptors.
#[derive(Default)]
pub struct DescriptorReplies {
    sent: Mutex<VecDeque<Sent>>,
    /// Unique names the bus refused a descriptor to, while they are on the bus.
    refusing: Mutex<std::collections::HashSet<String>>,
}

struct Sent {
    /// Our answer's serial.
    serial: u32,
    at: Instant,
    /// The call it answered.
    call: Message,
}

impl DescriptorReplies {
    /// Answers `call` with `fd`, the call's only out argument, remembering the answer until the
    /// bus could refuse it; a connection the bus refused a descriptor to before gets the
    /// `NotSupported` answer at once. A call that asked for no reply gets none.
    ///
    /// Errors: the connection's, when it cannot send.
    pub async fn answer(
        &self,
        conn: &Connection,
        call: &Message,
        fd: zbus::OwnedFd,
    ) -> zbus::Result<()> {
        let hdr = call.header();
        if hdr
            .primary()
            .flags()
            .contains(zbus::message::Flags::NO_REPLY_EXPECTED)
        {
            return Ok(());
        }
        let refusing = hdr
            .sender()
            .is_some_and(|s| lock(&self.refusing).contains(s.as_str()));
        if refusing {
            return not_supported(conn, call).await;
        }
        let mut builder = Message::method_return(&hdr);
        if let Some(name) = conn.unique_name() {
            builder = builder.sender(name);
        }
        let answer = builder.build(&(zbus::Fd::from(&fd),))?;
        self.remember(answer.primary_header().serial_num().get(), call.clone());
        conn.send(&answer).await
    }

    fn remember(&self, serial: u32, call: Message) {
        let now = Instant::now();
        let mut sent = lock(&self.sent);
        while sent
            .front()
            .is_some_and(|s| now.duration_since(s.at) > REFUSAL_WINDOW || sent.len() >= REMEMBERED)
        {
            sent.pop_front();
        }
        sent.push_back(Sent {
            serial,
            at: now,
            call,
        });
    }

    /// The call whose answer, serial `serial`, the bus refused; forgotten once taken. Its
    /// caller is known from now on not to take descriptors.
    fn refused(&self, serial: u32) -> Option<Message> {
        let call = {
            let mut sent = lock(&self.sent);
            let at = sent.iter().position(|s| s.serial == serial)?;
            sent.remove(at).map(|s| s.call)?
        };
        if let Some(sender) = call.header().sender() {
            lock(&self.refusing).insert(sender.to_string());
        }
        Some(call)
    }

    /// The connection `name` left the bus: nothing is kept of it.
    pub fn forget(&self, name: &str) {
        let mut refusing = lock(&self.refusing);
        if !refusing.is_empty() {
            refusing.remove(name);
        }
    }
}

/// Answers `call` with `org.botvisor.Botvisor1.Error.NotSupported` ([`NO_DESCRIPTORS`]).
async fn not_supported(conn: &Connection, call: &Message) -> zbus::Result<()> {
    let err = super::error::Error::NotSupported(NO_DESCRIPTORS.into());
    conn.reply_dbus_error(&call.header(), err).await
}

/// The refusals the bus sends `conn`, and an answer for each refused call. Subscribes before
/// it returns; reads in a task of its own, which never awaits the bus: each new answer is sent
/// from a task of its own.
///
/// Errors: the bus's, when it refuses the match rule.
pub async fn watch_refusals(
    conn: &Connection,
    descriptors: std::sync::Arc<DescriptorReplies>,
) -> zbus::Result<()> {
    let rule = MatchRule::builder()
        .msg_type(Type::Error)
        .sender("org.freedesktop.DBus")
        .build()?;
    let mut errors = MessageStream::for_match_rule(rule, conn, None).await?;
    let conn = conn.clone();
    tokio::spawn(async move {
        while let Some(Ok(msg)) = errors.next().await {
            let hdr = msg.header();
            if hdr.error_name().map(|n| n.as_str()) != Some(BUS_NOT_SUPPORTED) {
                continue;
            }
            let Some(call) = hdr
                .reply_serial()
                .and_then(|s| descriptors.refused(s.get()))
            else {
                continue;
            };
            let conn = conn.clone();
            tokio::spawn(async move {
                let call_hdr = call.header();
                tracing::info!(
                    client = ?call_hdr.sender().map(|s| s.as_str()),
                    member = ?call_hdr.member().map(|m| m.as_str()),
                    "the bus refused a file descriptor to a client that cannot take one; \
                     answered NotSupported"
                );
                if let Err(e) = not_supported(&conn, &call).await {
                    tracing::debug!(error = %e, "the NotSupported answer was not sent");
                }
            });
        }
    });
    Ok(())
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
