//! The Codex command line: the native binary as `codex app-server` (JSON-RPC over stdio), started
//! in the bot's working directory with the bot's environment (codex-facts.md, "Modes"). Nothing
//! else goes on the command line: model, approval policy and sandbox are given to `thread/start`
//! or `thread/resume` by the protocol object ([`super::protocol`]), so that they can change live.

use std::path::PathBuf;

use crate::runtime::{LaunchCommand, LaunchSpec};

/// The full command for one launch.
pub fn command(program: PathBuf, spec: &LaunchSpec<'_>) -> LaunchCommand {
    LaunchCommand {
        program,
        args: vec!["app-server".to_owned()],
        cwd: spec.cwd.to_owned(),
        env: spec.env.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::SessionStart;
    use std::collections::BTreeMap;
    use std::path::Path;

    #[test]
    fn app_server_in_the_bots_folder_with_its_environment() {
        let env = BTreeMap::from([("CODEX_HOME".to_owned(), "/c".to_owned())]);
        let start = SessionStart::Resume("t".into());
        let spec = LaunchSpec {
            cwd: Path::new("/w"),
            model: "m",
            permission_mode: "never",
            env: &env,
            start: &start,
            cut: None,
            fork: false,
        };
        let c = command("/bin/codex".into(), &spec);
        assert_eq!(c.args, vec!["app-server"]);
        assert_eq!(c.cwd, Path::new("/w"));
        assert_eq!(c.env, env);
    }
}
