//! The checks of what a client asks for a bot: permission mode, model, working directory.

use std::path::Path;

use super::BotError;
use crate::runtime::Runtime;

/// Checks a permission mode against the runtime's list; empty means the CLI's default.
pub fn check_permission_mode(runtime: &dyn Runtime, mode: &str) -> Result<(), BotError> {
    if mode.is_empty() || runtime.permission_modes().contains(&mode) {
        Ok(())
    } else {
        Err(BotError::InvalidArgument(format!(
            "unknown permission mode `{mode}`; {} accepts: {}",
            runtime.name(),
            runtime.permission_modes().join(", ")
        )))
    }
}

/// The longest bot name, in characters.
pub const MAX_NAME_CHARS: usize = 200;

/// A model name: empty (the CLI's default) or up to 200 printable characters without spaces.
pub fn check_model(model: &str) -> Result<(), BotError> {
    if model.len() > 200 || model.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(BotError::InvalidArgument(format!(
            "invalid model name `{model}`: use a name such as `sonnet` or `claude-sonnet-4-5`"
        )));
    }
    Ok(())
}

/// `cwd` must be an absolute path of an existing directory; returns its canonical form (symlinks
/// resolved), used for both the spawn and the transcript lookup.
pub fn canonical_cwd(cwd: &str) -> Result<String, BotError> {
    if cwd.is_empty() {
        return Err(BotError::InvalidArgument(
            "option `cwd` is empty; give the absolute path of the bot's working directory".into(),
        ));
    }
    let path = Path::new(cwd);
    if !path.is_absolute() {
        return Err(BotError::InvalidArgument(format!(
            "option `cwd` must be an absolute path, got `{cwd}`"
        )));
    }
    let canonical = std::fs::canonicalize(path)
        .map_err(|e| BotError::InvalidArgument(format!("option `cwd`: cannot use `{cwd}`: {e}")))?;
    if !canonical.is_dir() {
        return Err(BotError::InvalidArgument(format!(
            "option `cwd`: `{cwd}` is not a directory"
        )));
    }
    canonical
        .into_os_string()
        .into_string()
        .map_err(|_| BotError::InvalidArgument(format!("option `cwd`: `{cwd}` is not valid UTF-8")))
}
