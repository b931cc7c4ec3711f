//! How far an "allow" reaches in Codex: an approval's decision (codex-facts.md, "app-server
//! messages"; 0.171.0: `facts::codex::an_accept_for_session_is_not_asked_again`,
//! `facts::codex::a_rule_of_the_program_alone_covers_its_other_arguments`).
//!
//! - `acceptForSession` (`session`) takes what Codex counts as the same for the rest of the
//!   app-server's process: for a command, that exact command only (`touch` on another file asks
//!   again); for a file change, further changes to the same files.
//! - `acceptWithExecpolicyAmendment` adds a prefix rule to Codex's execpolicy, written to
//!   `$CODEX_HOME/rules/default.rules` and so kept beyond the process, for every Codex of that
//!   `CODEX_HOME`. With the rule Codex proposed (`proposedExecpolicyAmendment`) it is `always`;
//!   that rule is the whole command (`["touch", "/x/a"]`), so it covers the exact command again.
//!   The app-server takes a shorter prefix as well: the program alone (`["touch"]`), `program`,
//!   covers it with any arguments (issue 46). Not offered for a program that runs whatever its
//!   arguments say (a shell, an interpreter, `env`, `sudo`, …): that would be every command.

use serde_json::{Value, json};

use crate::runtime::{Grant, Scope};

/// Programs whose arguments are themselves a command or a script: a rule of the program alone
/// would allow anything.
const RUNS_ITS_ARGUMENTS: &[&str] = &[
    "sh", "bash", "zsh", "dash", "ksh", "fish", "csh", "tcsh", "busybox", "env", "sudo", "doas",
    "su", "xargs", "nohup", "nice", "ionice", "timeout", "time", "exec", "eval", "command",
    "builtin", "python", "python2", "python3", "perl", "ruby", "node", "nodejs", "deno", "bun",
    "php", "lua", "awk", "gawk", "find", "make", "npx", "uv", "uvx", "pipx",
];

/// The execpolicy rule Codex proposed with an approval request (botvisor keeps the request's
/// parameters under `codex`), when it proposed one.
fn proposed_rule(request: &Value) -> Option<&Vec<Value>> {
    request
        .get("codex")
        .and_then(|c| c.get("proposedExecpolicyAmendment"))
        .and_then(Value::as_array)
        .filter(|a| !a.is_empty())
}

/// The rule of the program alone (`["touch"]`), when Codex proposed a longer one whose program
/// does not run its arguments.
fn program_rule(request: &Value) -> Option<String> {
    let rule = proposed_rule(request)?;
    let program = rule.first()?.as_str()?;
    let name = program.rsplit('/').next().unwrap_or(program);
    let runs_anything =
        RUNS_ITS_ARGUMENTS.contains(&name) || name.starts_with("python") || name.is_empty();
    (rule.len() > 1 && !runs_anything).then(|| program.to_owned())
}

/// Whether the request is for a command (`item/commandExecution/requestApproval`), not a file
/// change.
fn is_command(request: &Value) -> bool {
    request
        .get("codex")
        .is_some_and(|c| c.get("command").is_some_and(|v| !v.is_null()))
}

/// The command as a person reads it: Codex's one parsed action, else the proposed rule's words,
/// else the command line it runs (`/bin/bash -lc '…'`).
fn command_words(request: &Value) -> String {
    let codex = &request["codex"];
    if let Some([one]) = codex["commandActions"].as_array().map(Vec::as_slice)
        && let Some(c) = one["command"].as_str()
    {
        return c.to_owned();
    }
    if let Some(rule) = proposed_rule(request) {
        return rule
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(" ");
    }
    codex["command"]
        .as_str()
        .unwrap_or("the command")
        .to_owned()
}

/// The scopes an allow of `request` may have: `once` and `session`; `always` when Codex proposed
/// an execpolicy rule; `program` when that rule is longer than its program, and the program
/// does not run its arguments.
pub fn scopes(request: &Value) -> Vec<Scope> {
    let mut out = vec![Scope::Once, Scope::Session];
    if proposed_rule(request).is_some() {
        out.push(Scope::Always);
    }
    if program_rule(request).is_some() {
        out.push(Scope::Program);
    }
    out
}

/// The decision an allow of `request` with `scope` sends (`None`: `accept`).
pub fn grant(request: &Value, scope: Scope) -> Grant {
    let amendment =
        |rule: Value| json!({"acceptWithExecpolicyAmendment": {"execpolicy_amendment": rule}});
    let permissions = match scope {
        Scope::Once => None,
        Scope::Always => match proposed_rule(request) {
            Some(rule) => Some(amendment(Value::Array(rule.clone()))),
            None => Some(json!("acceptForSession")),
        },
        Scope::Program => match program_rule(request) {
            Some(program) => Some(amendment(json!([program]))),
            None => Some(json!("acceptForSession")),
        },
        Scope::Session => Some(json!("acceptForSession")),
    };
    Grant {
        permissions,
        mode: None,
    }
}

/// Where an execpolicy rule is kept, and for whom.
const KEPT: &str = "a rule Codex keeps in $CODEX_HOME/rules/default.rules, for every Codex of \
                    that CODEX_HOME";

/// What an allow of `request` with `scope` lets run without asking, in words.
pub fn reach(request: &Value, scope: Scope) -> String {
    if !is_command(request) {
        return match scope {
            Scope::Once => "this change, this time".to_owned(),
            _ => "further changes to the same files, without asking, while this agent runs"
                .to_owned(),
        };
    }
    let command = command_words(request);
    match scope {
        Scope::Once => "this command, this time".to_owned(),
        Scope::Session => format!(
            "`{command}` again, exactly (not with other arguments), without asking, while this \
             agent runs"
        ),
        Scope::Always => {
            format!("every command that starts `{command}`, without asking, from now on ({KEPT})")
        }
        Scope::Program => match program_rule(request) {
            Some(program) => format!(
                "every `{program}` command, whatever its arguments, without asking, from now on \
                 ({KEPT})"
            ),
            None => reach(request, Scope::Session),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn touch() -> Value {
        json!({"codex": {"command": "/bin/bash -lc 'touch /w/a'",
                         "commandActions": [{"command": "touch /w/a", "type": "unknown"}],
                         "proposedExecpolicyAmendment": ["touch", "/w/a"]}})
    }

    #[test]
    fn session_is_accept_for_session_always_the_proposed_rule_and_program_its_program() {
        let file = json!({"codex": {"itemId": "f1"}});
        assert_eq!(scopes(&file), vec![Scope::Once, Scope::Session]);
        assert_eq!(grant(&file, Scope::Once).permissions, None);
        assert_eq!(
            grant(&file, Scope::Session).permissions,
            Some(json!("acceptForSession"))
        );
        assert_eq!(scopes(&touch()), Scope::ALL.to_vec());
        assert_eq!(
            grant(&touch(), Scope::Always).permissions,
            Some(
                json!({"acceptWithExecpolicyAmendment": {"execpolicy_amendment": ["touch", "/w/a"]}})
            )
        );
        assert_eq!(
            grant(&touch(), Scope::Program).permissions,
            Some(json!({"acceptWithExecpolicyAmendment": {"execpolicy_amendment": ["touch"]}}))
        );
    }

    #[test]
    fn no_rule_of_a_program_that_runs_its_arguments_nor_of_a_lone_word() {
        for rule in [
            json!(["bash", "-lc", "rm -rf /"]),
            json!(["/usr/bin/python3", "x.py"]),
            json!(["sudo", "touch", "x"]),
            json!(["ls"]),
        ] {
            let r = json!({"codex": {"command": "c", "proposedExecpolicyAmendment": rule}});
            assert_eq!(
                scopes(&r),
                vec![Scope::Once, Scope::Session, Scope::Always],
                "{r}"
            );
        }
    }

    #[test]
    fn each_scope_says_what_it_lets_run() {
        assert_eq!(reach(&touch(), Scope::Once), "this command, this time");
        assert!(
            reach(&touch(), Scope::Session)
                .starts_with("`touch /w/a` again, exactly (not with other arguments)")
        );
        assert!(
            reach(&touch(), Scope::Always).starts_with("every command that starts `touch /w/a`")
        );
        assert!(
            reach(&touch(), Scope::Program)
                .starts_with("every `touch` command, whatever its arguments")
        );
        let file = json!({"codex": {"itemId": "f1", "grantRoot": null}});
        assert!(reach(&file, Scope::Session).starts_with("further changes to the same files"));
    }
}
