//! A pseudo-terminal for tests of what botvisorctl does in a person's terminal.

/// Runs a command in a pseudo-terminal (stdin, stdout and stderr a terminal, as a person's) and
/// copies what it prints to stdout; when `ANSWER` is set, types it (and Enter) once the
/// output shows `[y/N]` (`ANSWER=^C` types Ctrl-C instead). Exits with the command's exit code.
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
    if answer is not None and b"[y/N]" in seen:
        os.write(fd, b"\x03" if answer == "^C" else answer.encode() + b"\n")
        answer = None
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
"#;
