//! The Claude Code command line.
//!
//! `claude -p --input-format stream-json --output-format stream-json --verbose
//! --replay-user-messages --permission-prompt-tool stdio --include-partial-messages
//! (--session-id NEW | --resume ID) [--permission-mode M] [--model M]`, started in the bot's
//! working directory (claude-code-facts.md, "The stream-json protocol" and "The control
//! protocol"): permission prompts come as `can_use_tool` control requests on stdout, and the
//! assistant's text streams as `stream_event` lines.

use std::path::PathBuf;

use crate::runtime::{Cut, LaunchCommand, LaunchSpec, SessionStart};

/// The full command for one launch.
pub fn command(program: PathBuf, spec: &LaunchSpec<'_>) -> LaunchCommand {
    let mut args: Vec<String> = [
        "-p",
        "--input-format",
        "stream-json",
        "--output-format",
        "stream-json",
        "--verbose",
        "--replay-user-messages",
        "--permission-prompt-tool",
        "stdio",
        "--include-partial-messages",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    match spec.start {
        SessionStart::New(id) => args.extend(["--session-id".to_owned(), id.clone()]),
        SessionStart::Resume(id) => {
            args.extend(["--resume".to_owned(), id.clone()]);
            // A truncating resume: the conversation up to `at`, without the turn whose prompt
            // is `drops` (print-mode options hidden from `--help`; 2.1.284, 2.1.328 and 2.1.332:
            // facts::claude::a_taken_message_is_redone_once_by_a_truncating_resume).
            if spec.fork {
                args.push("--fork-session".to_owned());
            }
            if let Some(Cut::At { at, drops }) = spec.cut {
                args.extend([
                    "--resume-session-at".to_owned(),
                    at.clone(),
                    "--resume-drops-turn".to_owned(),
                    drops.clone(),
                ]);
            }
        }
        // Claude Code takes no conversation without an id botvisor chose
        // (`Runtime::fresh_start`); if asked anyway, it picks one and the replay names it.
        SessionStart::Fresh => {}
    }
    if !spec.permission_mode.is_empty() {
        args.extend([
            "--permission-mode".to_owned(),
            spec.permission_mode.to_owned(),
        ]);
    }
    if !spec.model.is_empty() {
        args.extend(["--model".to_owned(), spec.model.to_owned()]);
    }
    LaunchCommand {
        program,
        args,
        cwd: spec.cwd.to_owned(),
        env: spec.env.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::path::Path;

    #[test]
    fn new_and_resume_argv() {
        let env = BTreeMap::new();
        let start = SessionStart::New("abc".into());
        let spec = LaunchSpec {
            cwd: Path::new("/w"),
            model: "",
            permission_mode: "plan",
            env: &env,
            start: &start,
            cut: None,
            fork: false,
        };
        let c = command("/bin/claude".into(), &spec);
        let argv = c.args.join(" ");
        assert!(argv.contains("--session-id abc"), "{argv}");
        assert!(argv.contains("--permission-mode plan"), "{argv}");
        assert!(!argv.contains("--model"), "{argv}");
        let start = SessionStart::Resume("abc".into());
        let spec = LaunchSpec {
            start: &start,
            model: "opus",
            ..spec
        };
        let argv = command("/bin/claude".into(), &spec).args.join(" ");
        assert!(argv.contains("--resume abc"), "{argv}");
        assert!(argv.contains("--model opus"), "{argv}");
        assert!(!argv.contains("--session-id"), "{argv}");
        assert!(!argv.contains("--resume-session-at"), "{argv}");
        let cut = Cut::At {
            at: "p".into(),
            drops: "u".into(),
        };
        let spec = LaunchSpec {
            cut: Some(&cut),
            ..spec
        };
        let argv = command("/bin/claude".into(), &spec).args.join(" ");
        assert!(
            argv.contains("--resume abc --resume-session-at p --resume-drops-turn u"),
            "{argv}"
        );
    }
}
