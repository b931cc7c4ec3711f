//! Bots created by bots (issue 29): which bot a calling process belongs to, and the limits on
//! how deep and how many.

use super::{BotError, Supervisor};
use crate::store;

/// The most characters `CreateBot`'s `created_by` may hold.
pub const MAX_CREATED_BY_CHARS: usize = 128;

impl Supervisor {
    /// The bot process `pid` belongs to (issue 29): the bot whose running agent it descends
    /// from, else the bot its `marker` names (`process::tree::BOT_MARKER`; a process that
    /// escaped its agent's tree) when that bot exists, else a marker of a bot id's shape (32 hex
    /// digits: a deleted bot's); `None` for any other process.
    pub fn bot_of_process(&self, pid: u32, marker: Option<&str>) -> Option<String> {
        // Descent first: a process under a bot's running agent is that bot's, whatever marker it
        // sets (a bot at the depth limit could otherwise name a top-level bot and go deeper).
        // The caller's ancestors are read once, and each bot's agent looked up among them, its
        // view read in place (issue 50: a create costs the same at a thousand bots).
        let ancestors = crate::process::tree::ancestors(pid);
        if !ancestors.is_empty()
            && let Some(id) = self.find_bot(|h| {
                let agent = h.view_guard().process_id;
                agent != 0 && ancestors.contains(&agent)
            })
        {
            return Some(id);
        }
        if let Some(m) = marker
            && self.get(m).is_ok()
        {
            return Some(m.to_owned());
        }
        marker
            .filter(|m| m.len() == 32 && m.bytes().all(|b| b.is_ascii_hexdigit()))
            .map(str::to_owned)
    }

    /// Who creates a bot, checked against the limits on bots created by bots (issue 29): a
    /// chain of creators longer than config `agent_max_depth`, or more than `agent_max_bots`
    /// bots created by bots at once, is `LimitExceeded`; a client name over
    /// [`MAX_CREATED_BY_CHARS`] characters or holding control characters is `InvalidArgument`.
    /// A creator bot that is gone counts as a bot no bot created (depth 0).
    pub(super) fn created_by(
        &self,
        client: Option<String>,
        bot: Option<String>,
    ) -> Result<store::bots::CreatedBy, BotError> {
        let client = client.unwrap_or_default();
        // As a name: nothing that could steer a terminal (controls, invisible and text-direction
        // characters such as U+202E), since clients show it beside the bot's name.
        if client.chars().count() > MAX_CREATED_BY_CHARS
            || crate::text::first_unsafe(&client).is_some()
        {
            return Err(BotError::InvalidArgument(format!(
                "CreateBot: option `created_by` must be at most {MAX_CREATED_BY_CHARS} characters \
                 without control, invisible or text-direction characters, got `{}`",
                crate::text::escape(&client.chars().take(64).collect::<String>(), false)
            )));
        }
        let Some(bot) = bot else {
            return Ok(store::bots::CreatedBy {
                client,
                bot: String::new(),
                depth: 0,
            });
        };
        let creator_depth = self
            .get(&bot)
            .map_or(0, |h| h.view_guard().record.created_by.depth);
        let depth = creator_depth.saturating_add(1);
        let max_depth = self.config.agent_max_depth;
        if depth > max_depth {
            return Err(BotError::LimitExceeded(format!(
                "CreateBot: bot {bot} is itself {creator_depth} bot(s) deep in a chain of bots \
                 creating bots; a bot it creates would be {depth} deep, over the daemon's \
                 `agent_max_depth` of {max_depth}"
            )));
        }
        let by_bots = self.count_bots(|h| !h.view_guard().record.created_by.bot.is_empty());
        let max_bots = self.config.agent_max_bots as usize;
        if by_bots >= max_bots {
            return Err(BotError::LimitExceeded(format!(
                "CreateBot: {by_bots} bot(s) created by bots exist, the daemon's \
                 `agent_max_bots` is {max_bots}; delete one first"
            )));
        }
        Ok(store::bots::CreatedBy { client, bot, depth })
    }
}
