//! The user's own Claude Code outside botvisor, holding a conversation open (issues 25 and 28:
//! a conversation another process holds gets no second writer, and is not adopted).

use std::path::Path;

use super::{RealSetup, TestEnv, bounded};

/// A real Claude Code the user runs on `session` outside botvisor (print mode, stdin held open:
/// as another program would), once it is in the CLI's registry of live sessions.
pub struct OtherCli {
    child: std::process::Child,
}

impl OtherCli {
    pub async fn start(env: &TestEnv, setup: &RealSetup, claude: &Path, session: &str) -> OtherCli {
        let child = std::process::Command::new(claude)
            .args([
                "-p",
                "--input-format",
                "stream-json",
                "--output-format",
                "stream-json",
                "--verbose",
                "--resume",
                session,
            ])
            .current_dir(&env.work)
            .env_clear()
            .envs(&setup.bot_env)
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // Its own registry entry names the session (the bot's agent, when it runs, has one too:
        // which of the two a look finds first is the directory's order).
        let entry = env
            .home
            .join(format!(".claude/sessions/{}.json", child.id()));
        bounded("the other CLI in the registry", async {
            let mut tick = tokio::time::interval(std::time::Duration::from_millis(20));
            loop {
                let text = std::fs::read_to_string(&entry).unwrap_or_default();
                let found = botvisor::runtime::claude::registry::entries_for(
                    std::iter::once(text.as_str()),
                    session,
                );
                if found.iter().any(|e| e.pid == child.id()) {
                    return;
                }
                tick.tick().await;
            }
        })
        .await;
        OtherCli { child }
    }

    /// Its process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Closes its stdin: it exits by itself (waited for).
    pub fn close(mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

impl Drop for OtherCli {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
