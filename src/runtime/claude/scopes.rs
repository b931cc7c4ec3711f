//! How far an "allow" reaches in Claude Code: the `permission_suggestions` of its `can_use_tool`
//! request, sent back as the answer's `updatedPermissions` (2.1.328:
//! `facts::claude::an_allow_with_the_suggestions_is_not_asked_again`). A Write suggests
//! `{"type": "setMode", "mode": "acceptEdits", "destination": "session"}`; a Bash command outside
//! the working directory suggests `addRules` for the command (`localSettings`) and for reading
//! its folder (`session`). Sent back, a rule holds while the process runs, whatever its
//! destination: in print mode the CLI writes no settings file, and the next process asks again.

use serde_json::{Value, json};

use super::PERMISSION_MODES;
use crate::runtime::{Grant, Scope};

/// The suggestions of a `can_use_tool` request (empty when it made none).
fn suggestions(request: &Value) -> &[Value] {
    request
        .get("permission_suggestions")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// The mode a `setMode` suggestion names, when botvisor knows it (it becomes the bot's).
fn suggested_mode(s: &Value) -> Option<&str> {
    (s.get("type").and_then(Value::as_str) == Some("setMode"))
        .then(|| s.get("mode").and_then(Value::as_str))
        .flatten()
        .filter(|m| PERMISSION_MODES.contains(m))
}

/// The scopes an allow of `request` may have: `once`; `session` when the CLI made suggestions;
/// `always` when one of them is a permission mode, which botvisor keeps as the bot's. A rule
/// the CLI suggests holds only while its process runs, whatever its `destination` (2.1.328 in
/// print mode writes no settings file: `facts::claude::an_allow_with_the_suggestions_is_not_asked_again`),
/// so a rule alone is no `always`.
pub fn scopes(request: &Value) -> Vec<Scope> {
    let offered = suggestions(request);
    if offered.is_empty() {
        vec![Scope::Once]
    } else if offered.iter().any(|s| suggested_mode(s).is_some()) {
        vec![Scope::Once, Scope::Session, Scope::Always]
    } else {
        vec![Scope::Once, Scope::Session]
    }
}

/// What an allow of `request` with `scope` sends: the suggestions as `updatedPermissions`, for
/// [`Scope::Session`] each with its `destination` made `session`; a `setMode` suggestion of a mode
/// botvisor knows is taken out and becomes the bot's permission mode ([`Grant::mode`]), so that
/// `PermissionMode` says what is in force and the next start keeps it.
pub fn grant(request: &Value, scope: Scope) -> Grant {
    if scope == Scope::Once {
        return Grant::default();
    }
    let mut mode = None;
    let mut rules = Vec::new();
    for s in suggestions(request) {
        if let Some(m) = suggested_mode(s).filter(|_| mode.is_none()) {
            mode = Some(m.to_owned());
            continue;
        }
        let mut s = s.clone();
        if scope == Scope::Session
            && let Some(o) = s.as_object_mut()
        {
            o.insert("destination".into(), json!("session"));
        }
        rules.push(s);
    }
    Grant {
        permissions: (!rules.is_empty()).then_some(Value::Array(rules)),
        mode,
    }
}

/// A suggestion other than a permission mode, as a person reads it: its rules as Claude Code
/// writes them (`Bash(ls /tmp)`, `Read(//tmp/**)`), its folders, else its type.
fn suggestion_words(s: &Value) -> String {
    match s.get("type").and_then(Value::as_str) {
        Some("addRules" | "replaceRules") => s["rules"]
            .as_array()
            .map_or(&[][..], Vec::as_slice)
            .iter()
            .map(|r| {
                let tool = r["toolName"].as_str().unwrap_or("?");
                match r["ruleContent"].as_str() {
                    Some(c) => format!("`{tool}({c})`"),
                    None => format!("`{tool}`"),
                }
            })
            .collect::<Vec<_>>()
            .join(", "),
        Some("addDirectories") => {
            let dirs: Vec<&str> = s["directories"]
                .as_array()
                .map_or(&[][..], Vec::as_slice)
                .iter()
                .filter_map(Value::as_str)
                .collect();
            format!("the folder {}", dirs.join(", "))
        }
        Some(other) => format!("`{other}`"),
        None => "what it suggested".to_owned(),
    }
}

/// What an allow of `request` with `scope` lets run without asking, in words: the rules it
/// suggested (while this agent runs: Claude Code keeps them in the process alone), and a
/// permission mode the bot takes (kept: it becomes the bot's `PermissionMode`).
pub fn reach(request: &Value, scope: Scope) -> String {
    if scope == Scope::Once {
        return "this request, this time".to_owned();
    }
    let g = grant(request, scope);
    let mut parts = Vec::new();
    let rules: Vec<String> = g
        .permissions
        .as_ref()
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice)
        .iter()
        .map(suggestion_words)
        .filter(|w| !w.is_empty())
        .collect();
    if !rules.is_empty() {
        parts.push(format!(
            "{}, without asking, while this agent runs",
            rules.join(" and ")
        ));
    }
    if let Some(mode) = g.mode {
        let what = if mode == "acceptEdits" {
            "every file edit without asking"
        } else {
            "what it allows without asking"
        };
        parts.push(format!(
            "{what} from now on: the bot's permission mode becomes `{mode}` (kept until changed)"
        ));
    }
    if parts.is_empty() {
        "this request, this time".to_owned()
    } else {
        parts.join("; and ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bash_outside() -> Value {
        json!({"subtype": "can_use_tool", "tool_name": "Bash", "permission_suggestions": [
            {"type": "addRules", "rules": [{"toolName": "Bash", "ruleContent": "ls /tmp"}],
             "behavior": "allow", "destination": "localSettings"},
            {"type": "addRules", "rules": [{"toolName": "Read", "ruleContent": "//tmp/**"}],
             "behavior": "allow", "destination": "session"}]})
    }

    #[test]
    fn suggestions_offer_the_session_and_a_mode_always() {
        assert_eq!(scopes(&json!({"tool_name": "Write"})), vec![Scope::Once]);
        assert_eq!(
            scopes(&json!({"permission_suggestions": []})),
            vec![Scope::Once]
        );
        assert_eq!(scopes(&bash_outside()), vec![Scope::Once, Scope::Session]);
        let write = json!({"permission_suggestions": [
            {"type": "setMode", "mode": "acceptEdits", "destination": "session"}]});
        assert_eq!(
            scopes(&write),
            vec![Scope::Once, Scope::Session, Scope::Always]
        );
    }

    #[test]
    fn each_scope_says_what_it_lets_run() {
        assert_eq!(
            reach(&bash_outside(), Scope::Once),
            "this request, this time"
        );
        assert_eq!(
            reach(&bash_outside(), Scope::Session),
            "`Bash(ls /tmp)` and `Read(//tmp/**)`, without asking, while this agent runs"
        );
        let write = json!({"permission_suggestions": [
            {"type": "setMode", "mode": "acceptEdits", "destination": "session"}]});
        assert_eq!(
            reach(&write, Scope::Always),
            "every file edit without asking from now on: the bot's permission mode becomes \
             `acceptEdits` (kept until changed)"
        );
    }

    #[test]
    fn always_sends_the_suggestions_as_offered_and_session_for_the_session() {
        let always = grant(&bash_outside(), Scope::Always);
        assert_eq!(always.mode, None);
        let sent = always.permissions.unwrap();
        assert_eq!(sent[0]["destination"], "localSettings");
        assert_eq!(sent[1]["destination"], "session");
        let session = grant(&bash_outside(), Scope::Session).permissions.unwrap();
        assert!(
            session
                .as_array()
                .unwrap()
                .iter()
                .all(|s| s["destination"] == "session")
        );
        assert_eq!(session[0]["rules"], sent[0]["rules"]);
        assert_eq!(grant(&bash_outside(), Scope::Once), Grant::default());
    }

    #[test]
    fn a_mode_suggestion_becomes_the_bots_mode() {
        let write = json!({"permission_suggestions": [
            {"type": "setMode", "mode": "acceptEdits", "destination": "session"}]});
        let g = grant(&write, Scope::Session);
        assert_eq!(g.mode.as_deref(), Some("acceptEdits"));
        assert_eq!(g.permissions, None);
        // A mode botvisor does not know goes to the CLI as it was offered.
        let odd = json!({"permission_suggestions": [
            {"type": "setMode", "mode": "yolo", "destination": "session"}]});
        let g = grant(&odd, Scope::Always);
        assert_eq!(g.mode, None);
        assert_eq!(g.permissions.unwrap()[0]["mode"], "yolo");
    }
}
