//! Codex's permission setting as botvisor carries it: one string, `<approval policy>` or
//! `<approval policy>:<sandbox>` (codex-facts.md, "app-server messages": policies `untrusted`,
//! `on-request`, `never`; sandboxes `read-only`, `workspace-write`, `danger-full-access`). The
//! empty string leaves both to the CLI's own configuration (`$CODEX_HOME/config.toml`); a policy
//! alone leaves the sandbox to it.

/// The approval policies botvisor accepts (Codex's `granular` object is not offered).
pub const APPROVAL_POLICIES: &[&str] = &["untrusted", "on-request", "never"];

/// The sandboxes, as `thread/start` names them.
pub const SANDBOXES: &[&str] = &["read-only", "workspace-write", "danger-full-access"];

/// Every value the `PermissionMode` of a Codex bot accepts besides the empty string: each policy
/// alone, then each `policy:sandbox`.
pub const PERMISSION_MODES: &[&str] = &[
    "untrusted",
    "on-request",
    "never",
    "untrusted:read-only",
    "untrusted:workspace-write",
    "untrusted:danger-full-access",
    "on-request:read-only",
    "on-request:workspace-write",
    "on-request:danger-full-access",
    "never:read-only",
    "never:workspace-write",
    "never:danger-full-access",
];

/// A permission setting taken apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Permissions<'a> {
    /// The approval policy, `None` for the CLI's default.
    pub approval_policy: Option<&'a str>,
    /// The sandbox mode (`read-only`, …), `None` for the CLI's default.
    pub sandbox: Option<&'a str>,
}

impl<'a> Permissions<'a> {
    /// Parses `mode` (empty, `policy` or `policy:sandbox`); `None` when it is not one of
    /// [`PERMISSION_MODES`].
    pub fn parse(mode: &'a str) -> Option<Permissions<'a>> {
        if mode.is_empty() {
            return Some(Permissions::default());
        }
        let (policy, sandbox) = match mode.split_once(':') {
            Some((p, s)) => (p, Some(s)),
            None => (mode, None),
        };
        if !APPROVAL_POLICIES.contains(&policy) || sandbox.is_some_and(|s| !SANDBOXES.contains(&s))
        {
            return None;
        }
        Some(Permissions {
            approval_policy: Some(policy),
            sandbox,
        })
    }

    /// The sandbox as a `SandboxPolicy` object of `thread/settings/update`
    /// (`{"type":"readOnly"}`, …).
    pub fn sandbox_policy(&self) -> Option<serde_json::Value> {
        let kind = match self.sandbox? {
            "read-only" => "readOnly",
            "workspace-write" => "workspaceWrite",
            "danger-full-access" => "dangerFullAccess",
            _ => return None,
        };
        Some(serde_json::json!({ "type": kind }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_mode_parses_and_nothing_else() {
        for mode in PERMISSION_MODES {
            assert!(Permissions::parse(mode).is_some(), "{mode}");
        }
        assert_eq!(Permissions::parse(""), Some(Permissions::default()));
        for bad in [
            "plan",
            "never:",
            ":read-only",
            "never:read-only:x",
            "acceptEdits",
        ] {
            assert_eq!(Permissions::parse(bad), None, "{bad}");
        }
        assert_eq!(
            PERMISSION_MODES.len(),
            APPROVAL_POLICIES.len() * (1 + SANDBOXES.len())
        );
    }

    #[test]
    fn a_policy_alone_leaves_the_sandbox_to_the_cli() {
        let p = Permissions::parse("on-request").unwrap();
        assert_eq!(p.approval_policy, Some("on-request"));
        assert_eq!(p.sandbox, None);
        assert_eq!(p.sandbox_policy(), None);
        let p = Permissions::parse("never:workspace-write").unwrap();
        assert_eq!(
            p.sandbox_policy(),
            Some(serde_json::json!({"type": "workspaceWrite"}))
        );
    }
}
