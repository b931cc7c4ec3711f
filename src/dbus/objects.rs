//! `org.freedesktop.DBus.ObjectManager` at `/org/botvisor/Botvisor1`: the bots with all their
//! properties in one call.
//!
//! botvisord serves it itself rather than with zbus's `fdo::ObjectManager`, which reads every
//! object's properties as the daemon, whoever asked: here `GetManagedObjects` passes the caller
//! check `GetAll` passes ([`super::guard`]), once, and its answer is written straight from each
//! bot's properties ([`super::bot::ManagedBots`], issue 31). zbus still
//! sees an interface of this name above the bots, so it emits `InterfacesAdded` and
//! `InterfacesRemoved` as before.

use std::collections::HashMap;
use std::sync::Arc;

use zbus::ObjectPath;
use zbus::names::InterfaceName;
use zbus::object_server::{Interface, SignalEmitter};
use zbus::{Connection, Variant, interface};

use super::BOT_INTERFACE;
use super::bot::{BotObject, ManagedBots};
use super::ctx::Ctx;
use super::error::Result;
use super::guard::{DescriptorMethods, EncodedCall, Guarded};

/// The ObjectManager of the bots.
pub struct BotObjects {
    ctx: Arc<Ctx>,
}

impl BotObjects {
    /// The ObjectManager, behind the caller check.
    pub fn guarded(ctx: Arc<Ctx>) -> Guarded<BotObjects> {
        Guarded::new(BotObjects { ctx: ctx.clone() }, ctx)
    }
}

impl DescriptorMethods for BotObjects {
    fn encoded_call(&self, name: &zbus::names::MemberName<'_>) -> Option<EncodedCall<'_>> {
        (name.as_str() == "GetManagedObjects").then(|| {
            Box::new(move || {
                let body = self.ctx.managed.answer(&self.ctx)?;
                Ok((body, "a{oa{sa{sv}}}"))
            }) as EncodedCall<'_>
        })
    }
}

#[interface(
    name = "org.freedesktop.DBus.ObjectManager",
    introspection_docs = false,
    spawn = false
)]
impl BotObjects {
    /// Every bot's object path with its `org.botvisor.Botvisor1.Bot` properties, as `GetAll`
    /// gives them to this caller. On the bus botvisord answers with the answer it keeps
    /// encoded ([`DescriptorMethods::encoded_call`]); this is the same answer, for zbus.
    async fn get_managed_objects(&self) -> Result<ManagedBots> {
        Ok(self.ctx.managed.objects(&self.ctx))
    }

    /// An object was added (or gained interfaces): its path, and its interfaces with their
    /// properties.
    #[zbus(signal)]
    pub async fn interfaces_added(
        emitter: &SignalEmitter<'_>,
        object_path: ObjectPath<'_>,
        interfaces_and_properties: HashMap<InterfaceName<'_>, HashMap<&str, Variant<'_>>>,
    ) -> zbus::Result<()>;

    /// An object was removed (or lost interfaces): its path and the interfaces.
    #[zbus(signal)]
    pub async fn interfaces_removed(
        emitter: &SignalEmitter<'_>,
        object_path: ObjectPath<'_>,
        interfaces: std::borrow::Cow<'_, [InterfaceName<'_>]>,
    ) -> zbus::Result<()>;
}

/// After a bot object was added at `path`: while signals go only to the user's connections,
/// zbus's broadcast `InterfacesAdded` carried no properties, so each of those connections gets
/// an `InterfacesAdded` with all of them. Does nothing while signals are broadcast.
pub async fn announce(ctx: &Ctx, conn: &Connection, path: &ObjectPath<'_>) -> zbus::Result<()> {
    if !ctx.audience.restricted() {
        return Ok(());
    }
    let server = conn.object_server();
    let object = server.interface::<_, Guarded<BotObject>>(path).await?;
    let emitter = SignalEmitter::new(conn, path.to_owned())?;
    let owned = object
        .get()
        .await
        .inner()
        .get_all(server, conn, None, &emitter)
        .await?;
    let root = ObjectPath::from_static_str_unchecked(super::ROOT_PATH);
    for emitter in ctx.audience.emitters(conn, &root)? {
        let props: HashMap<&str, Variant<'_>> = owned
            .iter()
            .map(|(k, v)| Ok((k.as_str(), Variant::try_from(v)?)))
            .collect::<zbus::Result<_>>()?;
        let interfaces = HashMap::from([(
            InterfaceName::from_static_str_unchecked(BOT_INTERFACE),
            props,
        )]);
        if let Err(e) = BotObjects::interfaces_added(&emitter, path.clone(), interfaces).await {
            tracing::debug!(error = %e, "InterfacesAdded not sent");
        }
    }
    Ok(())
}
