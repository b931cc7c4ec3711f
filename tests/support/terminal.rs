//! A pseudo-terminal for tests of what botvisorctl does in a person's terminal.

/// Runs a command in a pseudo-terminal (stdin, stdout and stderr a terminal, as a person's) and
/// copies what it prints to stdout; when `ANSWER` is set, types it (and Enter) once the
/// output shows a question's keys (`[y/N]`, `[y/s/a/N]`: `/N]`; `ANSWER=^C` types Ctrl-C
/// instead). Exits with the command's exit code.
pub const IN_A_TERMINAL: &str = r#"
import os, pty, sys
pid, fd = pty.fork()
if pid == 0:
    os.execv(sys.argv[1], sys.argv[1:])
answer = os.environ.get("ANSWER")
seen = b""
while True:
    try:
        data = os.read(fd, 4096)
    except OSError:
        break
    if not data:
        break
    sys.stdout.buffer.write(data)
    sys.stdout.flush()
    seen += data
    if answer is not None and b"/N]" in seen:
        os.write(fd, b"\x03" if answer == "^C" else answer.encode() + b"\n")
        answer = None
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
"#;

/// A tmux server of the test's own (its socket in the test's folder, no configuration read):
/// a terminal of a chosen size that a test types into (`send-keys`) and reads
/// (`capture-pane`). Killed when dropped.
pub struct Tmux {
    socket: std::path::PathBuf,
}

/// Whether tmux is installed; prints the skip line when it is not (`.ci/run` installs it).
pub fn have_tmux() -> bool {
    let found = std::process::Command::new("tmux")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        eprintln!("skipped: tmux is not installed (Debian: apt-get install tmux)");
    }
    found
}

/// How long a screen may take to show what a test waits for.
pub const SCREEN_TIMEOUT: std::time::Duration = super::EVENT_TIMEOUT;

impl Tmux {
    /// A server with one window `width` × `height` running `command` (through `sh -c`) in `cwd`
    /// with `env` (besides `PATH`, `TERM` and `LANG`). When the command ends, the window goes:
    /// a command whose last words a test reads keeps a shell running after them.
    pub fn start(
        dir: &std::path::Path,
        width: u16,
        height: u16,
        cwd: &std::path::Path,
        env: &[(&str, &str)],
        command: &str,
    ) -> Tmux {
        let t = Tmux {
            socket: dir.join("tmux.sock"),
        };
        let mut args: Vec<String> = vec![
            "-f".into(),
            "/dev/null".into(),
            "new-session".into(),
            "-d".into(),
            "-x".into(),
            width.to_string(),
            "-y".into(),
            height.to_string(),
            "-c".into(),
            cwd.to_string_lossy().into_owned(),
        ];
        for (k, v) in env {
            args.push("-e".into());
            args.push(format!("{k}={v}"));
        }
        args.push(command.to_owned());
        let out = t.tmux(&args);
        assert!(out.status.success(), "tmux new-session: {out:?}");
        t
    }

    fn tmux<S: AsRef<std::ffi::OsStr>>(&self, args: &[S]) -> std::process::Output {
        std::process::Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .args(args)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("TERM", "xterm-256color")
            .env("LANG", "C.UTF-8")
            .output()
            .expect("tmux runs")
    }

    /// Types `keys` as tmux's `send-keys` names them (`Enter`, `Escape`, `C-c`, `Up`, or a
    /// literal text with `-l`).
    pub fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "0"];
        args.extend(keys);
        let out = self.tmux(&args);
        assert!(out.status.success(), "tmux send-keys {keys:?}: {out:?}");
    }

    /// Types `text` as it is.
    pub fn text(&self, text: &str) {
        let out = self.tmux(&["send-keys", "-t", "0", "-l", text]);
        assert!(out.status.success(), "tmux send-keys -l: {out:?}");
    }

    /// What the window shows now, one string per row.
    pub fn screen(&self) -> String {
        let out = self.tmux(&["capture-pane", "-p", "-t", "0"]);
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// What the window shows now with its colours and attributes (SGR escape sequences, as
    /// tmux's `capture-pane -e` writes them).
    pub fn screen_styled(&self) -> String {
        let out = self.tmux(&["capture-pane", "-p", "-e", "-t", "0"]);
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// A tmux format of the window (`#{alternate_on}`, `#{pane_dead}`, …).
    pub fn format(&self, format: &str) -> String {
        let out = self.tmux(&["display-message", "-p", "-t", "0", format]);
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// Waits until the screen satisfies `want`, read the same twice in a row (not a frame caught
    /// half drawn), and returns it; fails naming `what`, with the screen as it was, after
    /// [`SCREEN_TIMEOUT`]. The screen is looked at every 20 ms.
    pub async fn wait(&self, what: &str, want: impl Fn(&str) -> bool) -> String {
        let end = std::time::Instant::now() + SCREEN_TIMEOUT;
        loop {
            let screen = self.screen();
            // A frame can be caught half drawn: a screen counts once it reads the same twice.
            if want(&screen) && self.screen() == screen {
                return screen;
            }
            if std::time::Instant::now() > end {
                panic!("the screen never showed {what}:\n{screen}");
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    /// Waits until the screen shows `text`.
    pub async fn wait_for(&self, text: &str) -> String {
        self.wait(&format!("{text:?}"), |s| s.contains(text)).await
    }

    /// Makes the window `width` × `height`.
    pub fn resize(&self, width: u16, height: u16) {
        let out = self.tmux(&[
            "resize-window",
            "-t",
            "0",
            "-x",
            &width.to_string(),
            "-y",
            &height.to_string(),
        ]);
        assert!(out.status.success(), "tmux resize-window: {out:?}");
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.tmux(&["kill-server"]);
    }
}
