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
/// The error quotes the name with its control characters escaped, and names models of the
/// bot's runtime (see [`model_examples`]).
pub fn check_model(runtime: &dyn Runtime, model: &str) -> Result<(), BotError> {
    if !crate::config::values::is_model_name(model) {
        return Err(BotError::InvalidArgument(format!(
            "invalid model name `{}`: {}",
            crate::text::escape(model, false),
            model_examples(runtime.name())
        )));
    }
    Ok(())
}

/// What an invalid model's error suggests, for the runtime named `runtime`.
fn model_examples(runtime: &str) -> &'static str {
    match runtime {
        "codex" => {
            "use a name such as `gpt-5.1-codex`, or empty for the model of Codex's `config.toml`"
        }
        _ => "use a name such as `sonnet` or `claude-sonnet-4-5`, or empty for the CLI's default",
    }
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

/// A budget a client gave, in US dollars, as nano-dollars (0: no budget). Errors:
/// InvalidArgument for a negative or not finite amount, or one over
/// [`crate::config::MAX_BUDGET_USD`].
pub fn budget_nanos(budget_usd: f64) -> Result<u64, BotError> {
    if !budget_usd.is_finite() || !(0.0..=crate::config::MAX_BUDGET_USD).contains(&budget_usd) {
        return Err(BotError::InvalidArgument(format!(
            "budget_usd must be from 0 (no budget) to {} US dollars, got {budget_usd}",
            crate::config::MAX_BUDGET_USD
        )));
    }
    Ok(crate::cost::nanos(budget_usd))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::claude::Claude;
    use crate::runtime::codex::Codex;

    fn model_error(runtime: &dyn Runtime, model: &str) -> String {
        match check_model(runtime, model) {
            Err(BotError::InvalidArgument(text)) => text,
            other => panic!("{model:?}: {other:?}"),
        }
    }

    #[test]
    fn an_invalid_model_is_quoted_escaped_on_one_line() {
        let text = model_error(&Claude::new(None), "bad\nmodel\u{1b}[2J");
        assert!(text.contains("`bad\\nmodel\\u{1b}[2J`"), "{text}");
        assert!(crate::text::first_unsafe(&text).is_none(), "{text:?}");
    }

    #[test]
    fn an_invalid_model_names_models_of_the_bots_runtime() {
        let claude = model_error(&Claude::new(None), "a b");
        assert!(claude.contains("`claude-sonnet-4-5`"), "{claude}");
        let codex = model_error(&Codex::new(None), "a b");
        assert!(codex.contains("`gpt-5.1-codex`"), "{codex}");
        assert!(codex.contains("config.toml"), "{codex}");
        assert!(!codex.contains("sonnet"), "{codex}");
        assert!(check_model(&Codex::new(None), "").is_ok());
        assert!(check_model(&Codex::new(None), "gpt-5.1-codex").is_ok());
    }

    #[test]
    fn a_model_that_would_be_read_as_a_flag_is_refused() {
        for model in ["--dangerously-skip-permissions", "-x", "-"] {
            for runtime in [&Claude::new(None) as &dyn Runtime, &Codex::new(None)] {
                let text = model_error(runtime, model);
                assert!(text.contains("invalid model name"), "{text}");
            }
        }
        assert!(check_model(&Claude::new(None), "claude-sonnet-4-5").is_ok());
    }
}
