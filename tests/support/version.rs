//! Which Claude Code the real-CLI tests run, so that a failing assertion that rests on a fact
//! about the CLI (claude-code-facts.md) names the fact and the version.

use std::sync::OnceLock;

/// The version of the Claude Code under test, from `BOTVISOR_TEST_CLAUDE_BIN --version` (which
/// prints `2.1.328 (Claude Code)`): `2.1.328`. Read once per test binary. When the variable is
/// not set, or the binary does not answer, a text saying so.
pub fn claude_version() -> &'static str {
    static VERSION: OnceLock<String> = OnceLock::new();
    VERSION.get_or_init(|| {
        let Some(bin) = std::env::var_os("BOTVISOR_TEST_CLAUDE_BIN").filter(|v| !v.is_empty())
        else {
            return "(BOTVISOR_TEST_CLAUDE_BIN not set)".to_owned();
        };
        match std::process::Command::new(&bin).arg("--version").output() {
            Ok(out) => {
                let text = String::from_utf8_lossy(&out.stdout);
                match text.split_whitespace().next() {
                    Some(v) => v.to_owned(),
                    None => format!("(`{} --version` printed nothing)", bin.display()),
                }
            }
            Err(e) => format!("(`{} --version` failed: {e})", bin.display()),
        }
    })
}

/// A failure message for an assertion that rests on a fact about the real CLI: `[Claude Code
/// 2.1.332] fact: <fact> (claude-code-facts.md)`, so that a failure on a new version says which
/// fact to re-check.
pub fn fact(fact: &str) -> String {
    format!(
        "[Claude Code {}] fact: {fact} (claude-code-facts.md)",
        claude_version()
    )
}
