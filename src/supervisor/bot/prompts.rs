//! Permission prompts: the CLI asks, any client answers, the first answer wins; prompts
//! nobody can answer any more are closed (decided in [`crate::supervisor::core::prompts`]).

use super::Actor;
use crate::supervisor::core::prompts;

impl Actor {
    /// `f` on the prompt book, under the lock clients answer through.
    pub(super) fn with_prompts<R>(
        &self,
        f: impl FnOnce(&mut crate::supervisor::PromptBook) -> R,
    ) -> R {
        let mut book = self
            .shared
            .prompts
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        f(&mut book)
    }

    /// Every open request is closed as denied by botvisord, with `message` in the chat: when the
    /// agent stops, or when its turn ends (an interrupt) while it was asking
    /// ([`prompts::close_all`]).
    pub(super) fn close_open_prompts(&mut self, message: &str) {
        let effects = self.with_prompts(|book| prompts::close_all(book, message));
        self.apply(effects);
    }
}
