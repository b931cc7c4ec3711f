//! `GetManagedObjects`' answer, written straight from each bot's properties (issue 31: 500 bots
//! under 5 ms) and kept encoded bot by bot (issue 50).
//!
//! zbus's way builds a map of owned variants per bot, converting every value by a serializer of
//! its own, then serializes and drops the maps; [`ManagedBots`] writes each property's value
//! into the reply once, with the same getters `Get` and `GetAll` use. [`EncodedBots`] keeps each
//! bot's part of the answer as those bytes, made again only once the bot's view changed
//! ([`crate::supervisor::SharedView::version`]): an answer at 500 bots is 500 copies of bytes,
//! with no lock an actor or a create holds.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde::ser::{Serialize, SerializeMap, Serializer};
use zbus::as_variant::Serialize as AsVariant;
use zbus::fdo::ManagedObjects;
use zbus::wire::serialized::Context;
use zbus::wire::{OwnedObjectPath, Signature, Type};

use super::BotObject;
use crate::dbus::BOT_INTERFACE;
use crate::dbus::ctx::Ctx;
use crate::dbus::paths::bot_path;
use crate::supervisor::BotHandle;

/// `a{oa{sa{sv}}}`: each bot's object path, with the one interface and its properties.
pub struct ManagedBots(pub Vec<(OwnedObjectPath, BotObject)>);

impl Type for ManagedBots {
    const SIGNATURE: &'static Signature = ManagedObjects::SIGNATURE;
}

impl Serialize for ManagedBots {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (path, bot) in &self.0 {
            map.serialize_entry(path, &Interfaces(bot))?;
        }
        map.end()
    }
}

/// `a{sa{sv}}`: the bot interface and its properties.
struct Interfaces<'a>(&'a BotObject);

impl Serialize for Interfaces<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(1))?;
        map.serialize_entry(BOT_INTERFACE, &Properties(self.0))?;
        map.end()
    }
}

/// `a{sv}`: every property of `org.botvisor.Botvisor1.Bot`, as `GetAll` gives it.
struct Properties<'a>(&'a BotObject);

/// The properties by their D-Bus names, with the getter of each (the test
/// `every_property_as_get_all_gives_it` checks this list against `GetAll`).
macro_rules! properties {
    ($map:ident, $bot:expr, $($name:literal => $getter:ident),* $(,)?) => {
        $( $map.serialize_entry($name, &AsVariant(&$bot.$getter()))?; )*
    };
}

impl Serialize for Properties<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let bot = self.0;
        let mut map = s.serialize_map(None)?;
        properties!(map, bot,
            "Id" => id,
            "CreatedBy" => created_by,
            "CreatedByBot" => created_by_bot,
            "Name" => name,
            "Cwd" => cwd,
            "Worktree" => worktree,
            "Branch" => branch,
            "BaseCommit" => base_commit,
            "Runtime" => runtime,
            "Model" => model,
            "PermissionMode" => permission_mode,
            "State" => state,
            "SessionId" => session_id,
            "ProcessId" => process_id,
            "LastError" => last_error,
            "QueuedMessages" => queued_messages,
            "PendingPermissions" => pending_permissions,
            "PartialText" => partial_text,
            "Holders" => holders,
            "StopVerdict" => stop_verdict,
            "StopProof" => stop_proof,
            "MemoryCurrent" => memory_current,
            "CPUUsageNSec" => cpu_usage_nsec,
            "MemoryMax" => memory_max,
            "TasksCurrent" => tasks_current,
            "HeldBy" => held_by,
            "LimitKind" => limit_kind,
            "LimitResetsAt" => limit_resets_at,
            "PlanLimit" => plan_limit,
            "CostUSD" => cost_usd,
            "InputTokens" => input_tokens,
            "OutputTokens" => output_tokens,
            "BudgetUSD" => budget_usd,
        );
        map.end()
    }
}

impl Type for Properties<'_> {
    const SIGNATURE: &'static Signature =
        <std::collections::HashMap<String, zbus::OwnedVariant>>::SIGNATURE;
}

/// Each bot whose object is on the bus, with its entry of `GetManagedObjects`' answer as it was
/// last encoded. A bot is here from its object's `at` to its removal, so the answer names the
/// objects a client can call, as zbus's own `GetManagedObjects` did.
#[derive(Default)]
pub struct EncodedBots {
    bots: Mutex<HashMap<String, Entry>>,
}

struct Entry {
    handle: BotHandle,
    /// The view's version the bytes were made from, and the bytes: one `{oa{sa{sv}}}` dict
    /// entry encoded at an offset that is a multiple of 8, as every entry of the answer's
    /// array begins at one (so the bytes stand as they are anywhere in the answer).
    kept: Option<(u64, Vec<u8>)>,
}

/// The bytes of one bot's dict entry, as [`ManagedBots`] encodes it.
fn entry_bytes(path: OwnedObjectPath, bot: BotObject) -> zbus::Result<Vec<u8>> {
    let ctxt = Context::new(zbus::message::NATIVE_ENDIAN_SIG.into(), 0);
    let one = zbus::wire::to_bytes(ctxt, &ManagedBots(vec![(path, bot)]))?;
    // The array's length (4 bytes) and the padding to its first entry (4 bytes) go.
    Ok(one.bytes()[8..].to_vec())
}

impl EncodedBots {
    /// The bot `handle`'s object is on the bus now.
    pub fn served(&self, handle: BotHandle) {
        let id = handle.id.clone();
        lock(&self.bots).insert(id, Entry { handle, kept: None });
    }

    /// The bot `id`'s object left the bus.
    pub fn gone(&self, id: &str) {
        lock(&self.bots).remove(id);
    }

    /// `GetManagedObjects`' answer as its body's bytes (signature `a{oa{sa{sv}}}`): the bots
    /// whose objects are on the bus, oldest first, each bot's entry made again only when its
    /// view changed since it was last made. Errors: zbus's, when a property cannot be encoded
    /// (none is expected: every value is a plain D-Bus value).
    pub fn answer(&self, ctx: &Arc<Ctx>) -> zbus::Result<Vec<u8>> {
        let listed = ctx.supervisor.list();
        let mut bots = lock(&self.bots);
        if bots.is_empty() {
            let ctxt = Context::new(zbus::message::NATIVE_ENDIAN_SIG.into(), 0);
            return Ok(zbus::wire::to_bytes(ctxt, &ManagedBots(Vec::new()))?
                .bytes()
                .to_vec());
        }
        // The array's length, filled in at the end, and the padding to its first entry.
        let mut body = vec![0u8; 8];
        for handle in listed.iter() {
            let Some(entry) = bots.get_mut(&handle.id) else {
                continue;
            };
            // Read before the view: bytes kept with this version are no older than it.
            let version = entry.handle.view.version();
            let fresh = matches!(&entry.kept, Some((v, _)) if *v == version);
            if !fresh {
                let bot = BotObject {
                    handle: entry.handle.clone(),
                    ctx: ctx.clone(),
                };
                entry.kept = Some((version, entry_bytes(bot_path(&handle.id), bot)?));
            }
            let Some((_, bytes)) = &entry.kept else {
                continue;
            };
            body.resize(body.len().next_multiple_of(8), 0);
            body.extend_from_slice(bytes);
        }
        let len = u32::try_from(body.len() - 8).map_err(|_| zbus::Error::ExcessData)?;
        body[..4].copy_from_slice(&len.to_ne_bytes());
        Ok(body)
    }

    /// The same answer as [`EncodedBots::answer`], for zbus to encode: what the interface's
    /// method returns when it is called past botvisord's own answer (never on the bus).
    pub fn objects(&self, ctx: &Arc<Ctx>) -> ManagedBots {
        let listed = ctx.supervisor.list();
        let bots = lock(&self.bots);
        ManagedBots(
            listed
                .iter()
                .filter(|h| bots.contains_key(&h.id))
                .map(|h| {
                    let bot = BotObject {
                        handle: h.clone(),
                        ctx: ctx.clone(),
                    };
                    (bot_path(&h.id), bot)
                })
                .collect(),
        )
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
