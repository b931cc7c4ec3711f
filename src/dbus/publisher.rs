//! Turns committed changes ([`Publication`]s) into D-Bus signals, in the order they were made,
//! each within the bounds of [`super::bounds`], for the audience [`super::audience`] decides:
//! everyone, or each connection of the user.

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::mpsc;
use zbus::Connection;
use zbus::Variant;
use zbus::names::InterfaceName;
use zbus::object_server::SignalEmitter;

use super::BOT_INTERFACE;
use super::bot::BotObject;
use super::bounds;
use super::ctx::Ctx;
use super::guard::Guarded;
use super::paths::bot_path;
use crate::sizes::MAX_ITEM_BYTES;
use crate::supervisor::{Property, PropertyValue, Publication};

/// Asks the publisher to send every publication queued so far; the answer comes once they are
/// written to the connection. The daemon's shutdown uses it so that the bots' final changes are
/// signalled before the bus name is released.
pub type Flush = tokio::sync::oneshot::Sender<()>;

/// Runs until the channel closes. A [`Flush`] request on `flush` is answered once everything
/// queued before it is sent.
pub async fn run(
    conn: Connection,
    ctx: Arc<Ctx>,
    mut rx: mpsc::UnboundedReceiver<Publication>,
    mut flush: mpsc::UnboundedReceiver<Flush>,
) {
    loop {
        tokio::select! {
            biased;
            p = rx.recv() => match p {
                Some(p) => send(&conn, &ctx, p).await,
                None => return,
            },
            Some(done) = flush.recv() => {
                while let Ok(p) = rx.try_recv() {
                    send(&conn, &ctx, p).await;
                }
                let _ = done.send(());
            }
        }
    }
}

/// Sends one publication, bounded, to the audience of design rule 14.
async fn send(conn: &Connection, ctx: &Ctx, p: Publication) {
    let item = match &p {
        Publication::ChatItemAdded { seq, .. } => Some(*seq),
        _ => None,
    };
    if let Some(seq) = item {
        crate::profile::stamp("publisher.took", || format!("item:{seq}"));
    }
    if let Publication::BotRemoved { bot_id } = &p {
        ctx.replies.answered(bot_id).await;
        ctx.managed.gone(bot_id);
        if let Err(e) = conn
            .object_server()
            .remove::<Guarded<BotObject>, _>(bot_path(bot_id))
            .await
        {
            tracing::debug!(error = %e, "bot object not removed");
        }
        return;
    }
    let p = bounded(ctx, p);
    let path = bot_path(bot_of(&p));
    let emitters = match ctx.audience.emitters(conn, &path) {
        Ok(e) => e,
        Err(e) => {
            tracing::debug!(error = %e, "signal not sent");
            return;
        }
    };
    for emitter in &emitters {
        if let Err(e) = publish(emitter, &p).await {
            tracing::debug!(error = %e, "signal not sent");
        }
    }
    if let Some(seq) = item {
        crate::profile::stamp("publisher.sent", || format!("item:{seq}"));
    }
}

fn bot_of(p: &Publication) -> &str {
    match p {
        Publication::ChatItemAdded { bot_id, .. }
        | Publication::TurnFinished { bot_id, .. }
        | Publication::PermissionRequested { bot_id, .. }
        | Publication::TextDelta { bot_id, .. }
        | Publication::BotRemoved { bot_id }
        | Publication::PropertiesChanged { bot_id, .. } => bot_id,
    }
}

/// The publication as the bus may carry it: payloads, inputs and property values within their
/// bounds (the values the property getters of dbus/bot.rs serve, bounded the same way).
fn bounded(ctx: &Ctx, p: Publication) -> Publication {
    let store = ctx.supervisor.store();
    match p {
        Publication::ChatItemAdded {
            bot_id,
            seq,
            kind,
            payload,
        } => Publication::ChatItemAdded {
            // Stored payloads are bounded already (store::chat); this keeps any other within.
            payload: crate::preview::bounded(&payload, MAX_ITEM_BYTES, &[]),
            bot_id,
            seq,
            kind,
        },
        Publication::PermissionRequested {
            bot_id,
            request_id,
            tool,
            input,
        } => Publication::PermissionRequested {
            input: bounds::requested_input(store, &bot_id, &request_id, &input),
            tool: bounds::bus_text(&tool).into_owned(),
            request_id: bounds::bus_text(&request_id).into_owned(),
            bot_id,
        },
        Publication::PropertiesChanged { bot_id, changed } => {
            let changed = changed
                .into_iter()
                .map(|(name, value)| {
                    let value = match (name, value) {
                        (Property::LastError, PropertyValue::Str(s)) => {
                            PropertyValue::Str(bounds::last_error(&s))
                        }
                        (Property::PendingPermissions, PropertyValue::Triples(v)) => {
                            PropertyValue::Triples(bounds::pending(store, &bot_id, v))
                        }
                        // What the CLI told (a session id, a limit's window) may hold a NUL.
                        (_, PropertyValue::Str(s)) => {
                            PropertyValue::Str(bounds::bus_text(&s).into_owned())
                        }
                        (_, PropertyValue::PlanLimit((state, kind, used, at))) => {
                            PropertyValue::PlanLimit((
                                bounds::bus_text(&state).into_owned(),
                                bounds::bus_text(&kind).into_owned(),
                                used,
                                at,
                            ))
                        }
                        (_, v) => v,
                    };
                    (name, value)
                })
                .collect();
            Publication::PropertiesChanged { bot_id, changed }
        }
        p => p,
    }
}

async fn publish(emitter: &SignalEmitter<'_>, p: &Publication) -> zbus::Result<()> {
    match p {
        Publication::ChatItemAdded {
            seq, kind, payload, ..
        } => BotObject::chat_item_added(emitter, *seq, kind, payload).await,
        Publication::TurnFinished {
            turn_id, outcome, ..
        } => BotObject::turn_finished(emitter, turn_id, outcome).await,
        Publication::PermissionRequested {
            request_id,
            tool,
            input,
            ..
        } => BotObject::permission_requested(emitter, request_id, tool, input).await,
        Publication::TextDelta { turn_id, text, .. } => {
            let text = bounds::bus_text(text);
            for piece in bounds::text_delta_pieces(&text) {
                BotObject::text_delta(emitter, turn_id, piece).await?;
            }
            Ok(())
        }
        Publication::BotRemoved { .. } => Ok(()),
        Publication::PropertiesChanged { changed, .. } => {
            let mut map: HashMap<&str, Variant<'_>> = HashMap::new();
            for (name, value) in changed {
                let v = match value {
                    PropertyValue::Str(s) => Variant::from(s.as_str()),
                    PropertyValue::U32(n) => Variant::from(*n),
                    PropertyValue::U64(n) => Variant::from(*n),
                    PropertyValue::Triples(v) => Variant::from(v.clone()),
                    PropertyValue::F64(v) => Variant::from(*v),
                    PropertyValue::PlanLimit(v) => Variant::from(v.clone()),
                };
                map.insert(property_name(*name), v);
            }
            zbus::fdo::Properties::properties_changed(
                emitter,
                InterfaceName::from_static_str_unchecked(BOT_INTERFACE),
                map,
                std::borrow::Cow::Borrowed(&[]),
            )
            .await
        }
    }
}

/// A bot property's name on the `org.botvisor.Botvisor1.Bot` interface (as in
/// `dbus/org.botvisor.Botvisor1.xml`).
pub fn property_name(property: Property) -> &'static str {
    match property {
        Property::Name => "Name",
        Property::Model => "Model",
        Property::PermissionMode => "PermissionMode",
        Property::State => "State",
        Property::SessionId => "SessionId",
        Property::ProcessId => "ProcessId",
        Property::LastError => "LastError",
        Property::QueuedMessages => "QueuedMessages",
        Property::Holders => "Holders",
        Property::StopVerdict => "StopVerdict",
        Property::PendingPermissions => "PendingPermissions",
        Property::StopProof => "StopProof",
        Property::MemoryCurrent => "MemoryCurrent",
        Property::CpuUsageNsec => "CPUUsageNSec",
        Property::TasksCurrent => "TasksCurrent",
        Property::LimitKind => "LimitKind",
        Property::LimitResetsAt => "LimitResetsAt",
        Property::CostUsd => "CostUSD",
        Property::InputTokens => "InputTokens",
        Property::OutputTokens => "OutputTokens",
        Property::BudgetUsd => "BudgetUSD",
        Property::PlanLimit => "PlanLimit",
        Property::HeldBy => "HeldBy",
    }
}
