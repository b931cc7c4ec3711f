//! Adopting a conversation begun elsewhere (issue 28, `CreateBot`'s `session_id`): whether it
//! may be, from what the shell found. Rule 2's spirit: only a conversation whose file exists is
//! adopted; rule 7: never one a bot or another live process holds.

/// What the shell found of the conversation to adopt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found<'a> {
    /// The runtime's name, for the words.
    pub runtime: &'a str,
    /// The folder it was looked for in.
    pub cwd: &'a str,
    /// The session (Codex: thread) id asked for.
    pub session_id: &'a str,
    /// The runtime keeps it for that folder (its file exists now).
    pub exists: bool,
    /// The bot whose conversation it is already, if any.
    pub owner: Option<&'a str>,
    /// A live process outside botvisor that holds it, in words, if any.
    pub held_by: Option<&'a str>,
}

/// Why a conversation is not adopted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// No such conversation (InvalidArgument).
    Missing(String),
    /// Someone has it (Busy).
    Held(String),
}

/// Whether the conversation may be adopted: it exists, no bot owns it, and no other live
/// process holds it (in that order: an id that names nothing is a wrong argument whoever runs).
pub fn adopt(found: &Found<'_>) -> Result<(), Refusal> {
    let id = found.session_id;
    if !found.exists {
        return Err(Refusal::Missing(format!(
            "option `session_id`: {} keeps no conversation `{id}` for {} (ListConversations \
             lists those it keeps)",
            found.runtime, found.cwd
        )));
    }
    if let Some(bot) = found.owner {
        return Err(Refusal::Held(format!(
            "option `session_id`: the conversation `{id}` is bot {bot}'s already"
        )));
    }
    if let Some(holder) = found.held_by {
        return Err(Refusal::Held(format!(
            "option `session_id`: the conversation `{id}` is open in another process \
             ({holder}); close it there first, then adopt it (design rule 7)"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found() -> Found<'static> {
        Found {
            runtime: "claude",
            cwd: "/w",
            session_id: "s",
            exists: true,
            owner: None,
            held_by: None,
        }
    }

    #[test]
    fn rule_2_only_a_conversation_that_exists_is_adopted() {
        let missing = Found {
            exists: false,
            held_by: Some("pid 1: x"),
            ..found()
        };
        assert!(matches!(adopt(&missing), Err(Refusal::Missing(_))));
        assert_eq!(adopt(&found()), Ok(()));
    }

    #[test]
    fn rule_7_one_owned_or_held_elsewhere_is_refused_naming_who() {
        let owned = Found {
            owner: Some("abc"),
            ..found()
        };
        assert!(matches!(adopt(&owned), Err(Refusal::Held(w)) if w.contains("bot abc")));
        let held = Found {
            held_by: Some("pid 42: Claude Code in a terminal"),
            ..found()
        };
        assert!(matches!(adopt(&held), Err(Refusal::Held(w)) if w.contains("pid 42")));
    }
}
