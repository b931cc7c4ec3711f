//! Where a runtime's binary comes from, the same for every runtime: the configuration's path
//! (`claude_bin`, `codex_bin`), else an environment variable (`BOTVISOR_CLAUDE_BIN`,
//! `BOTVISOR_CODEX_BIN`), else the CLI's name on the daemon's `PATH`.

use std::path::PathBuf;

use super::RuntimeError;

/// What a runtime's binary is called and how the user points botvisor at it.
#[derive(Debug, Clone, Copy)]
pub struct BinaryNames {
    /// The name looked up on `PATH` (`claude`).
    pub command: &'static str,
    /// The product, in errors (`Claude Code`).
    pub product: &'static str,
    /// The configuration key (`claude_bin`).
    pub config_key: &'static str,
    /// The environment variable (`BOTVISOR_CLAUDE_BIN`).
    pub env_var: &'static str,
    /// How to install it, and anything to know when naming it (a sentence part).
    pub install: &'static str,
}

/// A runtime's binary lookup (see the module's documentation).
#[derive(Debug, Clone)]
pub struct BinaryLookup {
    names: BinaryNames,
    configured: Option<PathBuf>,
    path_env: Option<std::ffi::OsString>,
}

impl BinaryLookup {
    /// The binary is `configured`, else the value of `names.env_var`, else `names.command` on
    /// the daemon's `PATH` (as it is now).
    pub fn new(names: BinaryNames, configured: Option<PathBuf>) -> BinaryLookup {
        let configured = configured.or_else(|| {
            std::env::var_os(names.env_var)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        });
        BinaryLookup {
            names,
            configured,
            path_env: std::env::var_os("PATH"),
        }
    }

    /// The binary, checked to exist and be executable now. Errors name what is wrong and where
    /// to set it (`RuntimeError::Unavailable`).
    pub fn find(&self) -> Result<PathBuf, RuntimeError> {
        let n = &self.names;
        match &self.configured {
            Some(path) => {
                let path = if path.components().count() == 1 && !path.is_absolute() {
                    super::find_on_path(&path.to_string_lossy(), self.path_env.as_deref())
                        .unwrap_or_else(|| path.clone())
                } else {
                    path.clone()
                };
                if super::is_executable(&path) {
                    return Ok(path);
                }
                let problem =
                    crate::process::launch_error::binary_problem(&path).unwrap_or_else(|| {
                        format!("the agent's binary {} is not executable", path.display())
                    });
                Err(RuntimeError::Unavailable(format!(
                    "{problem}; {} is needed there (set `{}` in config.toml or {})",
                    n.product, n.config_key, n.env_var
                )))
            }
            None => super::find_on_path(n.command, self.path_env.as_deref()).ok_or_else(|| {
                RuntimeError::Unavailable(format!(
                    "no `{}` on the daemon's PATH; install {} ({}) or set `{}` in config.toml or \
                     {}",
                    n.command, n.product, n.install, n.config_key, n.env_var
                ))
            }),
        }
    }
}
