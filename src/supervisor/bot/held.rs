//! A conversation another process holds (design rule 7, issue 25): the shell finds the holder
//! before a resume ([`crate::runtime::Runtime::holder`]), watches it by identity, and carries out
//! what `held` says.

use std::time::Instant;

use super::Actor;
use crate::runtime::Holder;
use crate::supervisor::core::Held;
use crate::supervisor::core::Input;

impl Actor {
    /// A start found `session_id` held by `holder`: no process starts; the bot waits for it.
    pub(super) fn hold_elsewhere(&mut self, holder: Holder, session_id: &str) {
        tracing::info!(
            bot_id = %self.id, session_id, pid = holder.identity.pid, what = %holder.what,
            "the conversation is open in another process; waiting for it to exit"
        );
        let h = Held {
            session_id: session_id.to_owned(),
            identity: holder.identity,
            what: holder.what,
            command: holder.command,
            look_at: Instant::now() + crate::supervisor::core::LOOK_EVERY,
        };
        self.handle(Input::HolderFound(h));
    }
}
