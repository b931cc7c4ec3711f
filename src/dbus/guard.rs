//! Design rule 14 at one door: every method call and every property read (`Get`, `GetAll`,
//! `Set`) on an interface botvisord serves passes the caller check ([`super::caller`]) before
//! the interface sees it.
//!
//! zbus answers `org.freedesktop.DBus.Properties` itself, and its `GetAll` leaves out a property
//! whose getter fails instead of failing: a check inside the getters would answer another user's
//! `GetAll` with an empty dictionary, not `AccessDenied`. [`Guarded`] wraps an interface and
//! checks in front of all of it. Calls without a header are botvisord's own (zbus reading the
//! properties for `InterfacesAdded`): they pass, with the properties left out while signals do
//! not go to everyone ([`super::audience`]).
//!
//! The wrapper implements zbus's `Interface` trait by handing everything to the wrapped
//! interface; zbus marks that trait as one that may change in a minor version, which is why
//! `Cargo.toml` keeps zbus at 6.2.

use std::collections::HashMap;
use std::sync::Arc;

use zbus::message::{Header, Message};
use zbus::names::{InterfaceName, MemberName};
use zbus::object_server::{DispatchResult, Interface, SignalEmitter};
use zbus::{BoxDBusError, Connection, ObjectServer, OwnedVariant, Variant};

use super::ctx::Ctx;
use crate::profile;

/// The methods of an interface whose answer is a file descriptor: botvisord sends those answers
/// itself ([`super::descriptors`]), so that a client that cannot take one is told so.
pub trait DescriptorMethods {
    /// The descriptor that answers `msg`, a call of `name`, when that is such a method; `None`
    /// (the default) for every other method, which zbus answers.
    fn descriptor_call<'c>(
        &'c self,
        _msg: &'c Message,
        _name: &MemberName<'_>,
    ) -> Option<DescriptorCall<'c>> {
        None
    }

    /// The answer of a call of `name`, when botvisord keeps that answer encoded (issue 50:
    /// `GetManagedObjects` at 500 bots): made after the caller check, as the reply's body and
    /// its signature, and sent as it is. `None` (the default) for every other method.
    fn encoded_call(&self, _name: &MemberName<'_>) -> Option<EncodedCall<'_>> {
        None
    }

    /// A call whose answer is a promise kept by the store (issue 50: `Send`): its work runs in
    /// the object server's task after the caller check, so calls are applied in the order they
    /// came; its answer is sent by a task of its own once the promise is kept, so the object
    /// server reads on meanwhile and the promises made together share one fsync. `None` (the
    /// default) for every other method.
    fn promised_call(&self, _msg: &Message, _name: &MemberName<'_>) -> Option<PromisedCall<'_>> {
        None
    }

    /// Design rule 15 (never off the bus): no call waits behind another client's slow one.
    ///
    /// The work of `msg`, a call of `name` on `conn`, when it may take long: run after the
    /// caller check in a task of its own, so that the object server answers other calls
    /// meanwhile (design rule 15: a slow git in one client's `CreateBot` holds no other client);
    /// `None` (the default) for a method zbus runs in the object server's task.
    fn detached_call(
        &self,
        _conn: &Connection,
        _msg: &Message,
        _name: &MemberName<'_>,
    ) -> Option<Detached> {
        None
    }
}

/// The work of a method that may take long (git run as a program, many files read), in a task of
/// its own ([`DescriptorMethods::detached_call`]): it sends its answer (or error) itself.
pub type Detached = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + 'static>>;

/// How many detached calls run at once: past that, the next waits for one to end before the
/// object server reads on (back pressure on a storm of them, never an unbounded number of git
/// processes).
pub const MAX_DETACHED: usize = 8;

/// The work of a method whose answer is a file descriptor: the descriptor, or the error to
/// answer with.
pub type DescriptorCall<'c> = std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<zbus::OwnedFd, super::error::Error>> + Send + 'c>,
>;

/// The work of a method whose answer is a promise ([`DescriptorMethods::promised_call`]): what to
/// answer once it is kept, or the error to answer at once (nothing promised).
pub type PromisedCall<'c> = Box<dyn FnOnce() -> Result<Promised, super::error::Error> + Send + 'c>;

/// A call's answer and the wait for the promise it makes.
pub struct Promised {
    /// The reply's body.
    pub answer: String,
    /// Ends once the promise is kept ([`crate::store::Store::keep`]).
    pub kept: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + 'static>>,
    /// Told once the reply is sent: what the call set going waits for it (a `Send`'s turn).
    pub sent: tokio::sync::oneshot::Sender<()>,
}

/// The work of a method whose answer botvisord keeps encoded ([`DescriptorMethods::encoded_call`]):
/// the reply's body as bytes, with its D-Bus signature, or the error to answer with.
pub type EncodedCall<'c> =
    Box<dyn FnOnce() -> Result<(Vec<u8>, &'static str), super::error::Error> + Send + 'c>;

/// Sends `body`, encoded with `signature`, as the reply to `call` on `conn`; nothing when the
/// call asked for no reply. Errors: zbus's, when the body does not fit the signature or the
/// connection cannot send.
async fn send_encoded(
    conn: &Connection,
    call: &Header<'_>,
    body: &[u8],
    signature: &str,
) -> zbus::Result<()> {
    if call
        .primary()
        .flags()
        .contains(zbus::message::Flags::NO_REPLY_EXPECTED)
    {
        return Ok(());
    }
    // A reply takes the call's byte order by default; the body is encoded in this machine's
    // (`dbus::bot::EncodedBots`), and a header that says otherwise makes the bus drop
    // botvisord's connection (a big-endian caller did).
    let mut builder = Message::method_return(call).endian(zbus::message::NATIVE_ENDIAN_SIG.into());
    if let Some(name) = conn.unique_name() {
        builder = builder.sender(name);
    }
    // SAFETY: `body` was encoded by zbus's own serializer for `signature`
    // (`dbus::bot::EncodedBots`), in this machine's byte order, with no file descriptor in it.
    let reply = unsafe { builder.build_raw_body(body, signature, Vec::new()) }?;
    conn.send(&reply).await
}

/// An interface whose every call and property read is the user's alone.
pub struct Guarded<I> {
    inner: I,
    ctx: Arc<Ctx>,
}

impl<I: Interface + DescriptorMethods> Guarded<I> {
    /// `inner`, checked with `ctx`'s caller check.
    pub fn new(inner: I, ctx: Arc<Ctx>) -> Self {
        Guarded { inner, ctx }
    }

    /// The wrapped interface, unchecked: for botvisord's own use.
    pub fn inner(&self) -> &I {
        &self.inner
    }

    fn checked<'c>(&'c self, msg: &'c Message, r: DispatchResult<'c>) -> DispatchResult<'c> {
        match r {
            DispatchResult::Async(f) => DispatchResult::Async(Box::pin(async move {
                let _running = self.ctx.replies.begin();
                let hdr = msg.header();
                self.ctx
                    .caller
                    .check(&hdr)
                    .await
                    .map_err(|e| Box::new(e) as BoxDBusError)?;
                // The handler sends the call's answer: what waited for it goes on now.
                let done = f.await;
                self.ctx.replies.sent(&hdr);
                done
            })),
            other => other,
        }
    }

    async fn check(&self, hdr: &Header<'_>) -> Result<(), super::error::Error> {
        self.ctx.caller.check(hdr).await
    }
}

#[async_trait::async_trait]
impl<I: Interface + DescriptorMethods> Interface for Guarded<I> {
    fn name() -> InterfaceName<'static> {
        I::name()
    }

    fn spawn_tasks_for_methods(&self) -> bool {
        self.inner.spawn_tasks_for_methods()
    }

    async fn get(
        &self,
        property_name: &str,
        server: &ObjectServer,
        connection: &Connection,
        header: Option<&Header<'_>>,
        emitter: &SignalEmitter<'_>,
    ) -> Option<Result<OwnedVariant, BoxDBusError>> {
        if let Some(hdr) = header
            && let Err(e) = self.check(hdr).await
        {
            return Some(Err(Box::new(e)));
        }
        self.inner
            .get(property_name, server, connection, header, emitter)
            .await
    }

    async fn get_all(
        &self,
        server: &ObjectServer,
        connection: &Connection,
        header: Option<&Header<'_>>,
        emitter: &SignalEmitter<'_>,
    ) -> zbus::fdo::Result<HashMap<String, OwnedVariant>> {
        match header {
            Some(hdr) => {
                // `Properties.GetAll` can only fail with a standard error:
                // org.freedesktop.DBus.Error.AccessDenied, with the same message.
                if let Err(e) = self.check(hdr).await {
                    let text = zbus::DBusError::description(&e)
                        .unwrap_or_default()
                        .to_owned();
                    return Err(zbus::fdo::Error::AccessDenied(text));
                }
            }
            None if self.ctx.audience.restricted() => return Ok(HashMap::new()),
            None => {}
        }
        self.inner
            .get_all(server, connection, header, emitter)
            .await
    }

    fn set<'call>(
        &'call self,
        property_name: &'call str,
        value: &'call Variant<'_>,
        server: &'call ObjectServer,
        connection: &'call Connection,
        header: Option<&'call Header<'_>>,
        emitter: &'call SignalEmitter<'_>,
    ) -> DispatchResult<'call> {
        match self
            .inner
            .set(property_name, value, server, connection, header, emitter)
        {
            DispatchResult::Async(f) => DispatchResult::Async(Box::pin(async move {
                if let Some(hdr) = header {
                    self.check(hdr)
                        .await
                        .map_err(|e| Box::new(e) as BoxDBusError)?;
                }
                f.await
            })),
            other => other,
        }
    }

    async fn set_mut(
        &mut self,
        property_name: &str,
        value: &Variant<'_>,
        server: &ObjectServer,
        connection: &Connection,
        header: Option<&Header<'_>>,
        emitter: &SignalEmitter<'_>,
    ) -> Option<Result<(), BoxDBusError>> {
        if let Some(hdr) = header
            && let Err(e) = self.check(hdr).await
        {
            return Some(Err(Box::new(e)));
        }
        self.inner
            .set_mut(property_name, value, server, connection, header, emitter)
            .await
    }

    fn call<'call>(
        &'call self,
        server: &'call ObjectServer,
        connection: &'call Connection,
        msg: &'call Message,
        name: MemberName<'call>,
    ) -> DispatchResult<'call> {
        if let Some(work) = self.inner.detached_call(connection, msg, &name) {
            return DispatchResult::Async(Box::pin(async move {
                let hdr = msg.header();
                self.check(&hdr)
                    .await
                    .map_err(|e| Box::new(e) as BoxDBusError)?;
                // A permit before the task: at most MAX_DETACHED run, the next one waits here.
                let permit = self.ctx.detached.clone().acquire_owned().await;
                let (ctx, msg) = (self.ctx.clone(), msg.clone());
                tokio::spawn(async move {
                    let _running = ctx.replies.begin();
                    work.await;
                    ctx.replies.sent(&msg.header());
                    drop(permit);
                });
                Ok(())
            }));
        }
        if let Some(work) = self.inner.promised_call(msg, &name) {
            return DispatchResult::Async(Box::pin(async move {
                let began = profile::now();
                let running =
                    super::replies::Replies::begin_owned(self.ctx.clone(), |c| &c.replies);
                let hdr = msg.header();
                self.check(&hdr)
                    .await
                    .map_err(|e| Box::new(e) as BoxDBusError)?;
                let promised = work().map_err(|e| Box::new(e) as BoxDBusError)?;
                profile::stamp_at(
                    "send.handler",
                    || format!("turn:{}", promised.answer),
                    began,
                );
                profile::stamp("send.committed", || format!("turn:{}", promised.answer));
                let (ctx, conn, msg) = (self.ctx.clone(), connection.clone(), msg.clone());
                tokio::spawn(async move {
                    promised.kept.await;
                    profile::stamp("send.kept", || format!("turn:{}", promised.answer));
                    let hdr = msg.header();
                    super::manager::answer_with(&conn, &hdr, Ok(promised.answer.as_str())).await;
                    profile::stamp("send.replied", || format!("turn:{}", promised.answer));
                    let _ = promised.sent.send(());
                    ctx.replies.sent(&hdr);
                    drop(running);
                });
                Ok(())
            }));
        }
        if let Some(work) = self.inner.encoded_call(&name) {
            return DispatchResult::Async(Box::pin(async move {
                let _running = self.ctx.replies.begin();
                let hdr = msg.header();
                self.check(&hdr)
                    .await
                    .map_err(|e| Box::new(e) as BoxDBusError)?;
                let (body, signature) = work().map_err(|e| Box::new(e) as BoxDBusError)?;
                let sent = send_encoded(connection, &hdr, &body, signature).await;
                self.ctx.replies.sent(&hdr);
                sent.map_err(|e| Box::new(zbus::fdo::Error::from(e)) as BoxDBusError)
            }));
        }
        if let Some(work) = self.inner.descriptor_call(msg, &name) {
            return DispatchResult::Async(Box::pin(async move {
                let _running = self.ctx.replies.begin();
                let hdr = msg.header();
                self.check(&hdr)
                    .await
                    .map_err(|e| Box::new(e) as BoxDBusError)?;
                // An error is answered by zbus; a descriptor by us, watching for the bus's refusal.
                let fd = work.await.map_err(|e| Box::new(e) as BoxDBusError)?;
                let sent = self.ctx.descriptors.answer(connection, msg, fd).await;
                self.ctx.replies.sent(&hdr);
                sent.map_err(|e| Box::new(zbus::fdo::Error::from(e)) as BoxDBusError)
            }));
        }
        let r = self.inner.call(server, connection, msg, name);
        self.checked(msg, r)
    }

    fn call_mut<'call>(
        &'call mut self,
        server: &'call ObjectServer,
        connection: &'call Connection,
        msg: &'call Message,
        name: MemberName<'call>,
    ) -> DispatchResult<'call> {
        let ctx = self.ctx.clone();
        match self.inner.call_mut(server, connection, msg, name) {
            DispatchResult::Async(f) => DispatchResult::Async(Box::pin(async move {
                ctx.caller
                    .check(&msg.header())
                    .await
                    .map_err(|e| Box::new(e) as BoxDBusError)?;
                f.await
            })),
            other => other,
        }
    }

    fn introspect_to_writer(&self, writer: &mut dyn std::fmt::Write, level: usize) {
        self.inner.introspect_to_writer(writer, level)
    }
}
