//! Turns committed changes ([`Publication`]s) into D-Bus signals, in the order they were made.

use std::collections::HashMap;

use tokio::sync::mpsc;
use zbus::Connection;
use zbus::object_server::{InterfaceRef, SignalEmitter};

use super::bot::BotObject;
use super::paths::bot_path;
use crate::supervisor::Publication;

/// Runs until the channel closes.
pub async fn run(conn: Connection, mut rx: mpsc::UnboundedReceiver<Publication>) {
    let mut refs: HashMap<String, InterfaceRef<BotObject>> = HashMap::new();
    while let Some(p) = rx.recv().await {
        if let Err(e) = publish(&conn, &mut refs, p).await {
            tracing::debug!(error = %e, "signal not sent");
        }
    }
}

async fn publish(
    conn: &Connection,
    refs: &mut HashMap<String, InterfaceRef<BotObject>>,
    p: Publication,
) -> zbus::Result<()> {
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
        Publication::PropertiesChanged { bot_id, names } => {
            let iref = match refs.get(&bot_id) {
                Some(r) => r.clone(),
                None => {
                    let r = conn
                        .object_server()
                        .interface::<_, BotObject>(bot_path(&bot_id))
                        .await?;
                    refs.insert(bot_id.clone(), r.clone());
                    r
                }
            };
            let emitter = iref.signal_emitter();
            let iface = iref.get().await;
            for name in names {
                match name {
                    "Name" => iface.name_changed(emitter).await?,
                    "Model" => iface.model_changed(emitter).await?,
                    "PermissionMode" => iface.permission_mode_changed(emitter).await?,
                    "State" => iface.state_changed(emitter).await?,
                    "SessionId" => iface.session_id_changed(emitter).await?,
                    "ProcessId" => iface.process_id_changed(emitter).await?,
                    "LastError" => iface.last_error_changed(emitter).await?,
                    "QueuedMessages" => iface.queued_messages_changed(emitter).await?,
                    other => tracing::warn!(property = other, "unknown property"),
                }
            }
            Ok(())
        }
    }
}
