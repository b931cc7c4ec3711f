//! Turns committed changes ([`Publication`]s) into D-Bus signals, in the order they were made.

use std::collections::HashMap;

use tokio::sync::mpsc;
use zbus::Connection;
use zbus::Variant;
use zbus::names::InterfaceName;
use zbus::object_server::SignalEmitter;

use super::BOT_INTERFACE;
use super::bot::BotObject;
use super::paths::bot_path;
use crate::supervisor::{PropertyValue, Publication};

/// Runs until the channel closes.
pub async fn run(conn: Connection, mut rx: mpsc::UnboundedReceiver<Publication>) {
    while let Some(p) = rx.recv().await {
        if let Err(e) = publish(&conn, p).await {
            tracing::debug!(error = %e, "signal not sent");
        }
    }
}

async fn publish(conn: &Connection, p: Publication) -> zbus::Result<()> {
    match p {
        Publication::ChatItemAdded {
            bot_id,
            seq,
            kind,
            payload,
        } => {
            let emitter = SignalEmitter::new(conn, bot_path(&bot_id))?;
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
            BotObject::permission_requested(&emitter, &request_id, &tool, &input).await
        }
        Publication::TextDelta {
            bot_id,
            turn_id,
            text,
        } => {
            let emitter = SignalEmitter::new(conn, bot_path(&bot_id))?;
            BotObject::text_delta(&emitter, &turn_id, &text).await
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
            for (name, value) in &changed {
                let v = match value {
                    PropertyValue::Str(s) => Variant::from(s.as_str()),
                    PropertyValue::U32(n) => Variant::from(*n),
                    PropertyValue::Triples(v) => Variant::from(v.clone()),
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
