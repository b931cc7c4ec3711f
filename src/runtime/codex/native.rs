//! From the `codex` that npm puts on `PATH` to Codex's native binary.
//!
//! The `@openai/codex` npm package's `bin/codex.js` (what `node_modules/.bin/codex` links to) is
//! a Node wrapper: it finds the native binary in the platform package
//! `@openai/codex-<platform>-<arch>` at `vendor/<target triple>/bin/codex` (or the package's own
//! `vendor/` folder) and runs it as its child. Run through the wrapper, Codex looks for its
//! sandbox helper (`codex-resources/bwrap`) beside the wrapper and finds none, so every sandboxed
//! mode fails (issue 23; seen on Codex 0.171.0, `bin/codex.js` of that package). botvisord runs
//! the native binary the wrapper would run, the way the wrapper finds it, or says which path to
//! name.

use std::path::{Path, PathBuf};

use crate::runtime::RuntimeError;

/// The target triple and platform package of this machine, as `bin/codex.js` names them.
fn platform() -> Option<(&'static str, &'static str)> {
    match (std::env::consts::OS, std::env::consts::ARCH) {
        ("linux", "x86_64") => Some(("x86_64-unknown-linux-musl", "codex-linux-x64")),
        ("linux", "aarch64") => Some(("aarch64-unknown-linux-musl", "codex-linux-arm64")),
        ("macos", "x86_64") => Some(("x86_64-apple-darwin", "codex-darwin-x64")),
        ("macos", "aarch64") => Some(("aarch64-apple-darwin", "codex-darwin-arm64")),
        _ => None,
    }
}

/// Whether `path` (canonical) is the npm package's Node wrapper: `…/bin/codex.js`.
fn is_wrapper(path: &Path) -> bool {
    path.file_name().is_some_and(|n| n == "codex.js")
        && path
            .parent()
            .and_then(Path::file_name)
            .is_some_and(|n| n == "bin")
}

/// Where the wrapper at `wrapper` (canonical `…/@openai/codex/bin/codex.js`) looks for the
/// native binary, in its order: the platform package beside the package (npm's flat layout) or
/// inside it, then the package's own `vendor/`.
fn candidates(wrapper: &Path, triple: &str, package: &str) -> Vec<PathBuf> {
    let Some(root) = wrapper.parent().and_then(Path::parent) else {
        return Vec::new();
    };
    let in_vendor = |base: PathBuf| base.join("vendor").join(triple).join("bin").join("codex");
    let mut out = Vec::new();
    if let Some(scope) = root.parent() {
        out.push(in_vendor(scope.join(package)));
    }
    out.push(in_vendor(root.join("node_modules/@openai").join(package)));
    out.push(in_vendor(root.to_path_buf()));
    out
}

/// `found` itself, unless it is the npm package's Node wrapper: then the native binary it would
/// run. Errors: `Unavailable` naming where the native binary was looked for, when the wrapper's
/// platform package is not installed.
pub fn native_binary(found: PathBuf) -> Result<PathBuf, RuntimeError> {
    let Ok(canonical) = std::fs::canonicalize(&found) else {
        return Ok(found);
    };
    if !is_wrapper(&canonical) {
        return Ok(found);
    }
    let Some((triple, package)) = platform() else {
        return Err(RuntimeError::Unavailable(format!(
            "{} is the Node wrapper of the codex npm package, and botvisord does not know where \
             it keeps the native binary on this platform; name the native binary \
             (…/vendor/<target triple>/bin/codex) in codex_bin",
            found.display()
        )));
    };
    let tried = candidates(&canonical, triple, package);
    if let Some(native) = tried.iter().find(|p| super::super::is_executable(p)) {
        return Ok(native.clone());
    }
    Err(RuntimeError::Unavailable(format!(
        "{} is the Node wrapper of the codex npm package, and its native binary is not \
         installed (looked at {}); reinstall Codex (npm install -g @openai/codex) or name the \
         native binary in codex_bin",
        found.display(),
        tried
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn executable(path: &Path) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    #[test]
    fn the_npm_wrapper_gives_way_to_the_native_binary_it_would_run() {
        let Some((triple, package)) = platform() else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let modules = dir.path().join("node_modules");
        let wrapper = modules.join("@openai/codex/bin/codex.js");
        executable(&wrapper);
        std::fs::create_dir_all(modules.join(".bin")).unwrap();
        let on_path = modules.join(".bin/codex");
        std::os::unix::fs::symlink("../@openai/codex/bin/codex.js", &on_path).unwrap();
        // Not installed: refused, naming where it looked.
        let err = native_binary(on_path.clone()).unwrap_err().to_string();
        assert!(
            err.contains("Node wrapper") && err.contains(package),
            "{err}"
        );
        let native = modules
            .join("@openai")
            .join(package)
            .join("vendor")
            .join(triple)
            .join("bin/codex");
        executable(&native);
        assert_eq!(native_binary(on_path).unwrap(), native);
    }

    #[test]
    fn a_native_binary_is_itself() {
        let dir = tempfile::tempdir().unwrap();
        let native = dir.path().join("vendor/x/bin/codex");
        executable(&native);
        assert_eq!(native_binary(native.clone()).unwrap(), native);
    }
}
