//! `[mcp]`: what `botvisorctl mcp`, the MCP server over the Bot API (docs/mcp.md), lets an agent
//! do: which of its tools it serves and in which folders it creates bots. botvisorctl enforces
//! it; botvisord only checks the table, and enforces what must hold whoever calls (who created a
//! bot, the depth and count of bots created by bots, no bot answering its own permission
//! requests: `agent_max_depth`, `agent_max_bots`).

use std::path::{Path, PathBuf};

use serde::Deserialize;

/// Every tool `botvisorctl mcp` has, by its MCP name.
pub const TOOLS: &[&str] = &[
    "list_bots",
    "create_bot",
    "send_message",
    "read_chat",
    "list_permission_requests",
    "answer_permission_request",
    "interrupt_bot",
    "stop_bot",
    "delete_bot",
    "list_schedules",
    "create_schedule",
    "delete_schedule",
];

/// The tools served when `[mcp] tools` is not given: all but answering permission requests,
/// deleting bots and putting prompts on a calendar (a schedule outlives the agent that made it
/// and sends with no one there), which a person decides.
pub const DEFAULT_TOOLS: &[&str] = &[
    "list_bots",
    "create_bot",
    "send_message",
    "read_chat",
    "list_permission_requests",
    "interrupt_bot",
    "stop_bot",
    "list_schedules",
];

/// `[mcp]`. Unknown keys are an error.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct McpConfig {
    /// The tools an agent may call, by name (default [`DEFAULT_TOOLS`]); a tool not named is
    /// refused as an MCP error that says so.
    pub tools: Vec<String>,
    /// The folders an agent may create bots in, with everything below them: absolute paths, or
    /// `~` and `~/…` for the user's home (default `["~"]`). Compared after symbolic links are
    /// resolved.
    pub folders: Vec<String>,
}

impl Default for McpConfig {
    fn default() -> Self {
        McpConfig {
            tools: DEFAULT_TOOLS.iter().map(|t| (*t).to_owned()).collect(),
            folders: vec!["~".to_owned()],
        }
    }
}

impl McpConfig {
    /// Whether the tool `name` may be called.
    pub fn allows_tool(&self, name: &str) -> bool {
        self.tools.iter().any(|t| t == name)
    }

    /// The allowed folders as absolute paths, `~` replaced by `home`.
    pub fn folder_paths(&self, home: &Path) -> Vec<PathBuf> {
        self.folders
            .iter()
            .map(|f| match f.strip_prefix('~') {
                Some(rest) => home.join(rest.trim_start_matches('/')),
                None => PathBuf::from(f),
            })
            .collect()
    }
}

/// Checks `[mcp]`: every tool is one of [`TOOLS`], every folder absolute or under `~`.
pub fn validate(mcp: &McpConfig) -> Result<(), String> {
    for t in &mcp.tools {
        if !TOOLS.contains(&t.as_str()) {
            return Err(format!(
                "[mcp] tools: unknown tool `{}`; the tools: {}",
                crate::text::escape(t, false),
                TOOLS.join(", ")
            ));
        }
    }
    for f in &mcp.folders {
        let home_relative = f == "~" || f.starts_with("~/");
        if !home_relative && !Path::new(f).is_absolute() {
            return Err(format!(
                "[mcp] folders: `{}` is neither an absolute path nor `~/…`",
                crate::text::escape(f, false)
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_leaves_answers_and_deletes_to_people() {
        let c = McpConfig::default();
        assert!(c.allows_tool("create_bot"));
        assert!(!c.allows_tool("answer_permission_request"));
        assert!(!c.allows_tool("delete_bot"));
        assert_eq!(
            c.folder_paths(Path::new("/home/me")),
            [PathBuf::from("/home/me/")]
        );
    }

    #[test]
    fn unknown_tools_and_relative_folders_are_refused() {
        let bad = McpConfig {
            tools: vec!["rm_rf".into()],
            ..McpConfig::default()
        };
        assert!(validate(&bad).unwrap_err().contains("unknown tool `rm_rf`"));
        let bad = McpConfig {
            folders: vec!["work".into()],
            ..McpConfig::default()
        };
        assert!(validate(&bad).unwrap_err().contains("`work`"));
        let ok = McpConfig {
            folders: vec!["~/src".into(), "/srv/x".into()],
            ..McpConfig::default()
        };
        assert_eq!(validate(&ok), Ok(()));
    }
}
