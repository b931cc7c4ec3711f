//! Codex's sandbox needs bubblewrap (codex-facts.md, "Processes"): the system's `bwrap` on the
//! `PATH` Codex runs with, else the `codex-resources/bwrap` bundled beside the native binary
//! (`vendor/<triple>/codex-resources/bwrap` for `vendor/<triple>/bin/codex`). Without either,
//! Codex 0.171.0 still starts, opens threads and runs turns, but every command of a sandboxed
//! mode (`read-only`, `workspace-write`) fails inside Codex (its helper panics with `bubblewrap
//! is unavailable: …`, exit 101) and only the model is told: the client gets no item at all.
//! So botvisor checks before each launch and parks the bot with a named error instead.
//! `danger-full-access` runs commands without the sandbox and needs no bubblewrap.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::settings::Permissions;

/// The `reason` of the error item when no bubblewrap is usable.
pub const SANDBOX_UNAVAILABLE: &str = "sandbox_unavailable";

/// The sandbox Codex uses when neither the bot nor `config.toml` names one.
const DEFAULT_SANDBOX: &str = "read-only";

/// The sandbox a Codex started with `permission_mode` and `env` runs commands in: the bot's
/// `policy:sandbox`, else `sandbox_mode` of `$CODEX_HOME/config.toml`, else `read-only`.
pub fn effective_sandbox(permission_mode: &str, codex_home: Option<&Path>) -> String {
    if let Some(s) = Permissions::parse(permission_mode).and_then(|p| p.sandbox) {
        return s.to_owned();
    }
    super::config::value(codex_home, "sandbox_mode").unwrap_or_else(|| DEFAULT_SANDBOX.to_owned())
}

/// The bubblewrap Codex at `program` started with `env` would use, if any is executable.
pub fn find_bwrap(program: &Path, env: &BTreeMap<String, String>) -> Option<PathBuf> {
    if let Some(found) = crate::runtime::find_on_path(
        "bwrap",
        env.get("PATH").map(|p| std::ffi::OsStr::new(p.as_str())),
    ) {
        return Some(found);
    }
    // Codex looks beside its own executable, symbolic links resolved.
    let exe = std::fs::canonicalize(program).unwrap_or_else(|_| program.to_owned());
    let bin = exe.parent()?;
    [
        bin.join("codex-resources/bwrap"),
        bin.parent()?.join("codex-resources/bwrap"),
    ]
    .into_iter()
    .find(|p| crate::runtime::is_executable(p))
}

/// `Err(text)` when Codex at `program` would run commands in a sandbox and has no bubblewrap;
/// the text says what to do.
pub fn check(
    program: &Path,
    permission_mode: &str,
    env: &BTreeMap<String, String>,
) -> Result<(), String> {
    let home = super::rollout::codex_home(env);
    let sandbox = effective_sandbox(permission_mode, home.as_deref());
    if sandbox == "danger-full-access" || find_bwrap(program, env).is_some() {
        return Ok(());
    }
    Err(format!(
        "Codex's sandbox `{sandbox}` needs bubblewrap and none is usable (no `bwrap` on the \
         bot's PATH, no executable codex-resources/bwrap beside {}): every command would fail. \
         Install bubblewrap (for example `apt install bubblewrap`), or choose the sandbox \
         danger-full-access (SetPermissionMode \"on-request:danger-full-access\"), then Send \
         again",
        program.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exe(dir: &Path, rel: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    #[test]
    fn the_sandbox_comes_from_the_mode_then_the_config_then_the_default() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(effective_sandbox("", Some(dir.path())), "read-only");
        std::fs::write(
            dir.path().join("config.toml"),
            "sandbox_mode = \"danger-full-access\"\n",
        )
        .unwrap();
        assert_eq!(
            effective_sandbox("never", Some(dir.path())),
            "danger-full-access"
        );
        assert_eq!(
            effective_sandbox("never:workspace-write", Some(dir.path())),
            "workspace-write"
        );
    }

    #[test]
    fn bubblewrap_is_found_on_path_or_bundled_beside_the_binary() {
        let dir = tempfile::tempdir().unwrap();
        let program = exe(dir.path(), "vendor/t/bin/codex");
        let mut env = BTreeMap::new();
        env.insert(
            "PATH".to_owned(),
            dir.path().join("sys").display().to_string(),
        );
        assert_eq!(find_bwrap(&program, &env), None);
        let e = check(&program, "never:read-only", &env).unwrap_err();
        assert!(
            e.contains("bubblewrap") && e.contains("danger-full-access"),
            "{e}"
        );
        assert_eq!(check(&program, "never:danger-full-access", &env), Ok(()));
        // Not executable: not usable.
        std::fs::create_dir_all(dir.path().join("vendor/t/codex-resources")).unwrap();
        std::fs::write(dir.path().join("vendor/t/codex-resources/bwrap"), "").unwrap();
        assert_eq!(find_bwrap(&program, &env), None);
        let bundled = exe(dir.path(), "vendor/t/codex-resources/bwrap");
        assert_eq!(find_bwrap(&program, &env), Some(bundled));
        let other = exe(dir.path(), "elsewhere/codex");
        let system = exe(dir.path(), "sys/bwrap");
        assert_eq!(find_bwrap(&other, &env), Some(system));
        assert_eq!(check(&other, "", &env), Ok(()));
    }
}
