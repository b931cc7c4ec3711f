//! What clients see of the actor: its record and view, state changes, chat items and the
//! signals that follow their commits (design rule 1).

use super::{Actor, BotView, publish_item, update_view};
use crate::store::BotRecord;
use crate::store::ChatItem;
use crate::supervisor::Property;
use crate::supervisor::Publication;
use crate::supervisor::core::Effect;
use crate::supervisor::core::{CommitBuilder, Publish, Write};
use crate::supervisor::core::{OnRecord, State};
use serde_json::Value;

impl Actor {
    /// What stands on record, as the view shows it (only what is durable, design rule 1):
    /// the state shown and the record's fields the core keeps
    /// ([`crate::supervisor::core::Input::Recorded`]).
    pub(super) fn on_record(&self) -> (State, OnRecord) {
        let v = self.view.read();
        (v.state, on_record(&v.record))
    }

    /// The bot waits for its login (a hold of kind `core::LOGIN`).
    pub(super) fn limit_holds_login(&self) -> bool {
        self.view
            .read()
            .record
            .limit
            .as_ref()
            .is_some_and(|(k, _)| k == crate::supervisor::core::LOGIN)
    }

    pub(super) fn record(&self) -> BotRecord {
        self.view.read().record.clone()
    }

    pub(super) fn update(&self, names: Vec<Property>, f: impl FnOnce(&mut BotView)) {
        update_view(&self.view, &self.shared.publisher, &self.id, names, f);
    }

    pub(super) fn state(&self) -> State {
        self.view.read().state
    }

    pub(super) fn publish_item(&self, item: &ChatItem) {
        if let Some(line) = self.group.began {
            crate::profile::stamp_at("actor.line", || format!("item:{}", item.seq), line);
            crate::profile::stamp("actor.committed", || format!("item:{}", item.seq));
        }
        publish_item(&self.shared.publisher, &self.id, item);
    }

    pub(super) fn publish_turn(&self, turn_id: &str, outcome: &str) {
        let _ = self.shared.publisher.send(Publication::TurnFinished {
            bot_id: self.id.clone(),
            turn_id: turn_id.to_owned(),
            outcome: outcome.to_owned(),
        });
    }

    /// Commits one chat item and publishes it.
    pub(super) fn add_item(&self, kind: &str, turn_id: Option<&str>, payload: Value) {
        let mut c = CommitBuilder::default();
        c.item(kind, turn_id, payload.to_string());
        let Some(Effect::Commit { writes, publish }) = c.build() else {
            return;
        };
        if let Err(e) = self.commit(&writes, &publish) {
            tracing::error!(bot_id = %self.id, error = %e, "cannot record a chat item");
        }
    }

    /// Sets `LastError`, durably first (design rule 1): published only once committed.
    pub(super) fn set_last_error(&self, text: &str) {
        let (write, publish) = (
            Write::LastError(text.into()),
            Publish::LastError(text.into()),
        );
        if let Err(e) = self.commit(&[write], &[publish]) {
            tracing::error!(bot_id = %self.id, error = %e, "cannot record the last error");
        }
    }
}

/// The fields of `record` the core keeps ([`OnRecord`]).
pub(super) fn on_record(record: &BotRecord) -> OnRecord {
    OnRecord {
        failed: record.failed,
        parked: record.parked,
        hold: record.limit.clone(),
        cost_nanos: record.spend.cost_nanos,
        budget: record.budget,
        continue_after_limit: record.continue_after_limit,
    }
}
