//! Turns committed changes ([`Publication`]s) into D-Bus signals, in the order they were made,
//! each within the bounds of [`super::bounds`].

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
use super::paths::bot_path;
use crate::limits::MAX_ITEM_BYTES;
use crate::store::Store;
use crate::supervisor::{PropertyValue, Publication};

/// Asks the publisher to send every publication queued so far; the answer comes once they are
/// written to the connection. The daemon's shutdown uses it so that the bots' final changes are
/// signalled before the bus name is released.
pub type Flush = tokio::sync::oneshot::Sender<()>;

/// Runs until the channel closes. `store` finds where a previewed permission input is whole.
/// A [`Flush`] request on `flush` is answered once everything queued before it is sent.
pub async fn run(
    conn: Connection,
    store: Arc<Store>,
    mut rx: mpsc::UnboundedReceiver<Publication>,
    mut flush: mpsc::UnboundedReceiver<Flush>,
) {
    loop {
        tokio::select! {
            biased;
            p = rx.recv() => match p {
                Some(p) => send(&conn, &store, p).await,
                None => return,
            },
            Some(done) = flush.recv() => {
                while let Ok(p) = rx.try_recv() {
                    send(&conn, &store, p).await;
                }
                let _ = done.send(());
            }
        }
    }
}

async fn send(conn: &Connection, store: &Store, p: Publication) {
    if let Err(e) = publish(conn, store, p).await {
        tracing::debug!(error = %e, "signal not sent");
    }
}

async fn publish(conn: &Connection, store: &Store, p: Publication) -> zbus::Result<()> {
    match p {
        Publication::ChatItemAdded {
            bot_id,
            seq,
            kind,
            payload,
        } => {
            let emitter = SignalEmitter::new(conn, bot_path(&bot_id))?;
            // Stored payloads are bounded already (store::chat); this keeps any other within.
            let payload = crate::preview::bounded(&payload, MAX_ITEM_BYTES, &[]);
            BotObject::chat_item_added(&emitter, seq, &kind, &payload).await
        }
        Publication::TurnFinished {
            bot_id,
            turn_id,
            outcome,
        } => {
            let emitter = SignalEmitter::new(conn, bot_path(&bot_id))?;
            BotObject::turn_finished(&emitter, &turn_id, &outcome).await
        }
        Publication::PermissionRequested {
            bot_id,
            request_id,
            tool,
            input,
        } => {
            let emitter = SignalEmitter::new(conn, bot_path(&bot_id))?;
            let input = bounds::requested_input(store, &bot_id, &request_id, &input);
            BotObject::permission_requested(&emitter, &request_id, &tool, &input).await
        }
        Publication::TextDelta {
            bot_id,
            turn_id,
            text,
        } => {
            let emitter = SignalEmitter::new(conn, bot_path(&bot_id))?;
            for piece in bounds::text_delta_pieces(&text) {
                BotObject::text_delta(&emitter, &turn_id, piece).await?;
            }
            Ok(())
        }
        Publication::BotRemoved { bot_id } => {
            conn.object_server()
                .remove::<BotObject, _>(bot_path(&bot_id))
                .await?;
            Ok(())
        }
        Publication::PropertiesChanged { bot_id, changed } => {
            let emitter = SignalEmitter::new(conn, bot_path(&bot_id))?;
            let mut map: HashMap<&str, Variant<'_>> = HashMap::new();
            for (name, value) in changed {
                // The values the property getters serve (dbus/bot.rs), bounded the same way.
                let v = match (name, value) {
                    ("LastError", PropertyValue::Str(s)) => Variant::from(bounds::last_error(&s)),
                    (_, PropertyValue::Str(s)) => Variant::from(s),
                    (_, PropertyValue::U32(n)) => Variant::from(n),
                    ("PendingPermissions", PropertyValue::Triples(v)) => {
                        Variant::from(bounds::pending(store, &bot_id, v))
                    }
                    (_, PropertyValue::Triples(v)) => Variant::from(v),
                };
                map.insert(name, v);
            }
            zbus::fdo::Properties::properties_changed(
                &emitter,
                InterfaceName::from_static_str_unchecked(BOT_INTERFACE),
                map,
                std::borrow::Cow::Borrowed(&[]),
            )
            .await
        }
    }
}
