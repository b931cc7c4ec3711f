//! A message for the bot, from a client or a schedule (issue 49): validated, committed with
//! its `user` chat item (a promise: durable before the reply), published, then queued for the
//! actor; and a `system` note committed with a claim (a schedule's skip or failure, said once).

use super::super::core::Cmd;
use super::super::{BotError, State, bot, store};
use super::{BotHandle, Command};

impl BotHandle {
    /// Queues a message: commits the turn and its `user` chat item, publishes the item, and
    /// returns the turn id with the promise that the message is on record: the caller tells
    /// the client once the store kept it ([`crate::store::Store::keep`]; issue 50: one fsync
    /// for the `Send`s that come together). Errors: InvalidArgument (empty), Busy (state
    /// `failed`; or no process and the working directory is gone), RuntimeUnavailable (no
    /// process and no binary), NotFound (deleted), Failed (database). An error changes nothing.
    /// The actor takes the message once `answered` is told (the caller sent the reply) or
    /// dropped.
    pub fn send(
        &self,
        text: String,
        answered: Option<tokio::sync::oneshot::Receiver<()>>,
    ) -> Result<(String, crate::store::Promise), BotError> {
        self.send_with_answer(text, serde_json::Map::new(), |_, _| Ok(true), answered)?
            .ok_or_else(|| BotError::Failed("the message was not queued".into()))
    }

    /// [`BotHandle::send`], with `extra` fields in the `user` chat item's payload (a scheduled
    /// fire's `schedule`), and `claim` run in the transaction that queues the message, with the
    /// turn id: when it answers false nothing is queued and `Ok(None)` is returned (issue 49: a
    /// fire and its message are recorded together, once, or not at all). The message reaches the
    /// agent only once its promise is kept. Errors: as `send`.
    pub fn send_with(
        &self,
        text: String,
        extra: serde_json::Map<String, serde_json::Value>,
        claim: impl FnMut(&rusqlite::Transaction<'_>, &str) -> rusqlite::Result<bool>,
    ) -> Result<Option<(String, crate::store::Promise)>, BotError> {
        self.send_with_answer(text, extra, claim, None)
    }

    fn send_with_answer(
        &self,
        text: String,
        extra: serde_json::Map<String, serde_json::Value>,
        mut claim: impl FnMut(&rusqlite::Transaction<'_>, &str) -> rusqlite::Result<bool>,
        answered: Option<tokio::sync::oneshot::Receiver<()>>,
    ) -> Result<Option<(String, crate::store::Promise)>, BotError> {
        let checked = crate::profile::now();
        self.check_alive()?;
        if text.trim().is_empty() {
            return Err(BotError::InvalidArgument(
                "the message is empty; send some text".into(),
            ));
        }
        let view = self.snapshot();
        if view.state == State::Failed {
            return Err(BotError::Busy(format!(
                "bot {} is in state failed and takes no message until Restart: {}",
                self.id, view.record.last_error
            )));
        }
        if view.process_id == 0 {
            self.check_can_start(&view)?;
            // No agent of the bot's runs: what another process added to its conversation is
            // shown before this message (issue 46).
            let env = bot::bot_env(&self.shared.config, &view.record);
            super::super::imported::import_added(&self.shared, &self.id, &view.record, &env);
        } else if view.state == State::Idle {
            // The agent runs between turns, and a terminal may have continued the conversation
            // meanwhile (`claude -p --resume` exits within a second: nothing held it when this
            // message came). What it added is shown before this message, and the agent, which
            // knows nothing of it, starts again on the conversation first (issue 46; a hostile
            // run found the terminal's turn lost from the conversation).
            let env = bot::bot_env(&self.shared.config, &view.record);
            if super::super::imported::import_added(&self.shared, &self.id, &view.record, &env) > 0
            {
                self.command(Command::Core(Cmd::LaunchInputsChanged {
                    held_waits: false,
                }))?;
            }
        }
        let turn_id = uuid::Uuid::new_v4().to_string();
        crate::profile::stamp_at("send.checked", || format!("turn:{turn_id}"), checked);
        crate::profile::stamp("send.looked", || format!("turn:{turn_id}"));
        let mut fields = extra;
        fields.insert("text".into(), text.clone().into());
        fields.insert("turn_id".into(), turn_id.clone().into());
        let payload = serde_json::Value::Object(fields).to_string();
        // A promise (the reply says the message is queued): kept before the reply, and before
        // the agent is given it.
        let (queued, promise) = self.shared.store.tx_promise_then(
            |tx| {
                if !claim(tx, &turn_id)? {
                    return Ok(None);
                }
                // The text is stored once, in the user item; the turn points at it.
                let item = store::chat::append(tx, &self.id, "user", Some(&turn_id), &payload)?;
                store::turns::insert(tx, &self.id, &turn_id, item.seq)?;
                Ok(Some(item))
            },
            |item| {
                if let Some(item) = item {
                    bot::publish_item(&self.shared.publisher, &self.id, item)
                }
            },
        )?;
        if queued.is_none() {
            return Ok(None);
        }
        let told = self.command(Command::Queued {
            turn: super::super::core::QueuedTurn::new(turn_id.clone(), text),
            promise,
            answered,
        });
        match told {
            Ok(()) => Ok(Some((turn_id, promise))),
            // botvisord stopped or handed its agent over (issue 47) between the check above and
            // now: the message is on record, queued, and the next botvisord delivers it once, so
            // the caller is told it is taken. An error would make a client that sends it again
            // send it twice (a hostile run found refused sends answered all the same).
            Err(BotError::Busy(_)) if self.shared.store.is_closing() => {
                Ok(Some((turn_id, promise)))
            }
            Err(e) => Err(e),
        }
    }

    /// Adds a `system` chat item with `payload` (a JSON object) in one transaction with `claim`,
    /// which decides whether it is added at all (issue 49: a skipped or failed fire is said once),
    /// and publishes it. Whether it was added. Errors: NotFound (deleted), StorageUnavailable.
    pub fn note_with(
        &self,
        payload: &serde_json::Value,
        mut claim: impl FnMut(&rusqlite::Transaction<'_>) -> rusqlite::Result<bool>,
    ) -> Result<bool, BotError> {
        self.check_alive()?;
        let text = payload.to_string();
        let added = self.shared.store.tx_durable_then(
            |tx| {
                if !claim(tx)? {
                    return Ok(None);
                }
                store::chat::append(tx, &self.id, "system", None, &text).map(Some)
            },
            |item| {
                if let Some(item) = item {
                    bot::publish_item(&self.shared.publisher, &self.id, item)
                }
            },
        )?;
        Ok(added.is_some())
    }
}
