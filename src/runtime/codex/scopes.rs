//! How far an "allow" reaches in Codex: an approval's decision (codex-facts.md, "app-server
//! messages"; 0.171.0: `facts::codex::an_accept_for_session_is_not_asked_again`).
//! `acceptForSession` takes the command or the file change, and those Codex counts as the same,
//! for the rest of the app-server's session; `acceptWithExecpolicyAmendment` adds the rule Codex
//! proposed for a command (`proposedExecpolicyAmendment`) to its execpolicy, kept beyond it.

use serde_json::{Value, json};

use crate::runtime::{Grant, Scope};

/// The execpolicy rule Codex proposed with an approval request (botvisor keeps the request's
/// parameters under `codex`), when it proposed one.
fn proposed_rule(request: &Value) -> Option<&Value> {
    request
        .get("codex")
        .and_then(|c| c.get("proposedExecpolicyAmendment"))
        .filter(|a| a.as_array().is_some_and(|a| !a.is_empty()))
}

/// The scopes an allow of `request` may have: `once` and `session`, and `always` when Codex
/// proposed an execpolicy rule.
pub fn scopes(request: &Value) -> Vec<Scope> {
    match proposed_rule(request) {
        Some(_) => Scope::ALL.to_vec(),
        None => vec![Scope::Once, Scope::Session],
    }
}

/// The decision an allow of `request` with `scope` sends (`None`: `accept`).
pub fn grant(request: &Value, scope: Scope) -> Grant {
    let permissions = match (scope, proposed_rule(request)) {
        (Scope::Once, _) => None,
        (Scope::Session, _) | (Scope::Always, None) => Some(json!("acceptForSession")),
        (Scope::Always, Some(rule)) => Some(json!({
            "acceptWithExecpolicyAmendment": {"execpolicy_amendment": rule}
        })),
    };
    Grant {
        permissions,
        mode: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_is_accept_for_session_and_always_the_proposed_rule() {
        let file = json!({"codex": {"itemId": "f1"}});
        assert_eq!(scopes(&file), vec![Scope::Once, Scope::Session]);
        assert_eq!(grant(&file, Scope::Once).permissions, None);
        assert_eq!(
            grant(&file, Scope::Session).permissions,
            Some(json!("acceptForSession"))
        );
        let command = json!({"codex": {"proposedExecpolicyAmendment": ["touch", "x"]}});
        assert_eq!(scopes(&command), Scope::ALL.to_vec());
        assert_eq!(
            grant(&command, Scope::Always).permissions,
            Some(
                json!({"acceptWithExecpolicyAmendment": {"execpolicy_amendment": ["touch", "x"]}})
            )
        );
    }
}
