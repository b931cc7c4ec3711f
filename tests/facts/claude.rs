//! Tier 3: the facts of claude-code-facts.md, measured on the Claude Code under test and printed
//! (`cargo test --test facts claude:: -- --nocapture`). The CLI runs with botvisor's own argv, and its
//! lines are read by botvisor's own parser, against the loopback stand-in API, in a temporary
//! `HOME`.
//!
//! Each test measures first, prints what it saw, then asserts the facts botvisor depends on,
//! with a message naming the fact and the version: `fact changed in 2.1.332: …`. What botvisor
//! copes with either way (when the transcript is first written, whether a SIGKILL at the first
//! replay leaves one, the hash suffix of long slugs, event kinds it ignores) is printed, not
//! asserted. docs/cli-versions.md keeps the figures per version.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin};
use tokio::sync::mpsc;

use botvisor::runtime::claude::Claude;
use botvisor::runtime::claude::events;
use botvisor::runtime::claude::registry;
use botvisor::runtime::claude::results::CONVERSATION_NOT_FOUND;
use botvisor::runtime::claude::stdin;
use botvisor::runtime::claude::taken;
use botvisor::runtime::claude::transcript::{self, MAX_SLUG_LEN};
use botvisor::runtime::{
    ControlRequest, Cut, LaunchSpec, PermissionAnswer, ResultOutcome, Runtime, RuntimeEvent,
    SessionStart,
};
use support::stand_in_api::{ApiRequest, Reply, Script, StandInApi};
use support::*;

const WRITE: &str = "please write the file";
const BACKGROUND: &str = "run sleep in the background";
/// A message the stand-in answers only after [`SLOW_MODEL`].
const SLOWLY: &str = "answer slowly";
const SLOW_MODEL: Duration = Duration::from_secs(1);
/// The background job of [`BACKGROUND`]; it ends by itself if nothing stops it.
const BACKGROUND_JOB: &str = "sleep 8";

/// When the stand-in was asked (main conversation requests).
type Asked = Arc<Mutex<Vec<Instant>>>;

/// Echoes (after [`SLOW_MODEL`] for [`SLOWLY`]); answers [`WRITE`] with a `Write` of "written"
/// to `target` and [`BACKGROUND`] with a background `Bash` of [`BACKGROUND_JOB`]; notes in `asked`
/// when each request came.
fn script(target: PathBuf, asked: Asked) -> Script {
    Arc::new(move |req: &ApiRequest| {
        asked.lock().unwrap().push(Instant::now());
        if req.has_tool_result {
            Reply::Text("Tool finished.".into())
        } else if req.last_user_text.contains(SLOWLY) {
            let text = format!("Hello! You said: {}", req.last_user_text);
            Reply::Delayed {
                after: SLOW_MODEL,
                reply: Box::new(Reply::Text(text)),
            }
        } else if req.last_user_text.contains(BACKGROUND) {
            Reply::ToolUse {
                name: "Bash".into(),
                input: json!({"command": BACKGROUND_JOB, "run_in_background": true, "description": "sleep"}),
            }
        } else if req.last_user_text.contains(WRITE) {
            Reply::ToolUse {
                name: "Write".into(),
                input: json!({"file_path": target.to_str().unwrap(), "content": "written"}),
            }
        } else {
            Reply::Text(format!("Hello! You said: {}", req.last_user_text))
        }
    })
}

/// What the facts of one test came out as, printed in one piece.
struct Report {
    title: String,
    lines: Vec<(String, String)>,
    changed: Vec<String>,
}

impl Report {
    fn new(title: &str) -> Report {
        Report {
            title: title.to_owned(),
            lines: Vec::new(),
            changed: Vec::new(),
        }
    }

    /// Records a measured fact.
    fn saw(&mut self, name: &str, value: impl std::fmt::Display) {
        self.lines.push((name.to_owned(), value.to_string()));
    }

    /// Records a fact botvisor depends on: `holds`, or `no_longer` says what changed.
    fn check(&mut self, holds: bool, no_longer: impl FnOnce() -> String) {
        if !holds {
            self.changed.push(format!(
                "fact changed in {}: {}",
                claude_version(),
                no_longer()
            ));
        }
    }

    /// Prints the facts, then fails with every changed one.
    fn finish(self) {
        let mut out = format!("--- Claude Code {}: {} ---\n", claude_version(), self.title);
        for (name, value) in &self.lines {
            out.push_str(&format!("  {name}: {value}\n"));
        }
        for c in &self.changed {
            out.push_str(&format!("  CHANGED: {c}\n"));
        }
        println!("{out}");
        assert!(self.changed.is_empty(), "{}", self.changed.join("\n"));
    }
}

/// One stdout line: when it came (since spawn), the line, and botvisor's reading of it.
struct Line {
    at: Duration,
    text: String,
    events: Vec<RuntimeEvent>,
}

impl Line {
    fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or(Value::Null)
    }

    /// `type[/subtype]` of the line: `system/init`, `user/replay`, `stream_event/message_start`,
    /// `control_request/can_use_tool`, …; `text` for a line that is not JSON.
    fn kind(&self) -> String {
        let v = self.json();
        let Some(t) = v["type"].as_str() else {
            return "text".into();
        };
        let sub = match t {
            "system" | "result" => v["subtype"].as_str().map(str::to_owned),
            "control_request" => v["request"]["subtype"].as_str().map(str::to_owned),
            "control_response" => v["response"]["subtype"].as_str().map(str::to_owned),
            "stream_event" => v["event"]["type"].as_str().map(str::to_owned),
            "user" if v["isReplay"] == true => Some("replay".into()),
            "user" => v["message"]["content"]
                .as_array()
                .and_then(|b| b.first())
                .and_then(|b| b["type"].as_str())
                .map(str::to_owned),
            "assistant" => v["message"]["content"]
                .as_array()
                .and_then(|b| b.first())
                .and_then(|b| b["type"].as_str())
                .map(str::to_owned),
            _ => None,
        };
        // Task events: with the task's status (`system/task_updated:killed`).
        let status = v["patch"]["status"].as_str().or(v["status"].as_str());
        match (sub, status) {
            (Some(s), Some(st)) if s.starts_with("task_") => format!("{t}/{s}:{st}"),
            (Some(s), _) => format!("{t}/{s}"),
            (None, _) => t.to_owned(),
        }
    }
}

/// A real Claude Code started the way botvisor starts it.
struct Cli {
    child: Child,
    stdin: Option<ChildStdin>,
    out: mpsc::UnboundedReceiver<(Duration, String)>,
    stderr: tokio::task::JoinHandle<String>,
    started: Instant,
    /// Every stdout line so far.
    seen: Vec<Line>,
    /// [`Cli::until`] looks at the lines from here on.
    cursor: usize,
    next_request: u32,
}

/// The offline environment of one CLI (a `HOME` of its own) plus `PATH`.
struct Place {
    env: BTreeMap<String, String>,
    cwd: PathBuf,
}

impl Place {
    fn new(env: &TestEnv, api: &StandInApi, home: &str, cwd: &Path) -> Place {
        let home = env.dir.path().join(home);
        std::fs::create_dir_all(&home).unwrap();
        std::fs::create_dir_all(cwd).unwrap();
        let mut vars: BTreeMap<String, String> = claude_env(&home, &api.url, &env.marker)
            .into_iter()
            .collect();
        // The CLI keeps background task output under $TMPDIR/claude-<uid>/: kept in the test's
        // folder.
        vars.insert("TMPDIR".into(), home.to_string_lossy().into_owned());
        vars.insert(
            "PATH".into(),
            std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into()),
        );
        Place {
            env: vars,
            cwd: std::fs::canonicalize(cwd).unwrap(),
        }
    }

    fn transcript(&self, session: &str) -> Option<PathBuf> {
        transcript::find(
            &transcript::config_dir(&self.env).unwrap(),
            &self.cwd,
            session,
        )
    }
}

fn runtime() -> Claude {
    Claude::new(claude_bin())
}

impl Cli {
    async fn spawn(place: &Place, start: SessionStart) -> Cli {
        Cli::spawn_with(place, start, None).await
    }

    /// [`Cli::spawn`], resuming without what `cut` drops (botvisor's own command for it).
    async fn spawn_with(place: &Place, start: SessionStart, cut: Option<&Cut>) -> Cli {
        Cli::launch(place, start, cut, false).await
    }

    /// [`Cli::spawn`] resuming `id` in a copy (`--fork-session`).
    async fn spawn_forked(place: &Place, id: &str) -> Cli {
        Cli::launch(place, SessionStart::Resume(id.to_owned()), None, true).await
    }

    /// A CLI started with botvisor's own command for `start`, `cut` and `fork`.
    async fn launch(place: &Place, start: SessionStart, cut: Option<&Cut>, fork: bool) -> Cli {
        let rt = runtime();
        let spec = LaunchSpec {
            cwd: &place.cwd,
            model: "",
            permission_mode: "",
            env: &place.env,
            start: &start,
            cut,
            fork,
        };
        let cmd = rt.command(rt.binary().unwrap(), &spec);
        let started = Instant::now();
        let mut child = tokio::process::Command::new(&cmd.program)
            .args(&cmd.args)
            .current_dir(&cmd.cwd)
            .env_clear()
            .envs(&cmd.env)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn the real CLI");
        let stdout = child.stdout.take().unwrap();
        let mut stderr = child.stderr.take().unwrap();
        let (tx, out) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if tx.send((started.elapsed(), line)).is_err() {
                    return;
                }
            }
        });
        let stderr = tokio::spawn(async move {
            let mut s = String::new();
            let _ = stderr.read_to_string(&mut s).await;
            s
        });
        let mut cli = Cli {
            stdin: child.stdin.take(),
            child,
            out,
            stderr,
            started,
            seen: Vec::new(),
            cursor: 0,
            next_request: 0,
        };
        // As botvisor does: the control handshake first.
        cli.control(&ControlRequest::Initialize).await;
        cli
    }

    async fn write(&mut self, line: String) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin
            .write_all(format!("{line}\n").as_bytes())
            .await
            .unwrap();
        stdin.flush().await.unwrap();
    }

    async fn send(&mut self, text: &str) {
        self.write(stdin::encode_user_message(text)).await;
    }

    /// Sends a control request; returns its id.
    async fn control(&mut self, request: &ControlRequest) -> String {
        self.next_request += 1;
        let id = format!("facts-{}", self.next_request);
        let line = stdin::encode_control(&id, request);
        self.write(line).await;
        id
    }

    /// From now on, [`Cli::until`] looks only at lines that come after those seen so far.
    fn mark(&mut self) {
        self.cursor = self.seen.len();
    }

    fn close_stdin(&mut self) {
        self.stdin = None;
    }

    fn signal(&self, sig: i32) {
        if let Some(pid) = self.child.id() {
            // SAFETY: kill(2) on our own child's pid.
            unsafe { libc::kill(pid as i32, sig) };
        }
    }

    /// The first line since the last [`Cli::mark`] that botvisor reads as an event matching
    /// `want`, reading on as needed; `None` at the end of stdout. Fails the test (naming `what`)
    /// after [`EVENT_TIMEOUT`].
    async fn until(&mut self, what: &str, want: impl Fn(&RuntimeEvent) -> bool) -> Option<usize> {
        if let Some(i) = self.seen[self.cursor..]
            .iter()
            .position(|l| l.events.iter().any(&want))
        {
            return Some(self.cursor + i);
        }
        let deadline = tokio::time::Instant::now() + EVENT_TIMEOUT;
        loop {
            let next = tokio::time::timeout_at(deadline, self.out.recv()).await;
            let Ok(next) = next else {
                panic!(
                    "{}",
                    fact(&format!(
                        "{what} (not seen within {EVENT_TIMEOUT:?}; stdout so far: {:?})",
                        self.kinds()
                    ))
                );
            };
            let (at, text) = next?;
            let events = events::parse_line(text.as_bytes());
            let hit = events.iter().any(&want);
            self.seen.push(Line { at, text, events });
            if hit {
                return Some(self.seen.len() - 1);
            }
        }
    }

    /// Reads stdout to its end and waits for the exit. Fails after [`EVENT_TIMEOUT`].
    async fn wait(&mut self, what: &str) -> (ExitStatus, Duration) {
        self.until(what, |_| false).await;
        let status = tokio::time::timeout(EVENT_TIMEOUT, self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("{}", fact(&format!("{what}: the CLI did not exit"))))
            .unwrap();
        (status, self.started.elapsed())
    }

    async fn stderr(self) -> String {
        drop(self.child);
        self.stderr.await.unwrap_or_default()
    }

    /// The kinds of the lines seen, in order, repeats folded.
    fn kinds(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for l in &self.seen {
            let k = l.kind();
            if out.last() != Some(&k) {
                out.push(k);
            }
        }
        out
    }

    fn at(&self, i: usize) -> Duration {
        self.seen[i].at
    }
}

fn ms(d: Duration) -> String {
    format!("{} ms", d.as_millis())
}

fn opt_ms(d: Option<Duration>) -> String {
    d.map_or("never".into(), ms)
}

fn exit_text(status: &ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exit code {c}"),
        (None, Some(s)) => format!("killed by signal {s}"),
        _ => format!("{status:?}"),
    }
}

/// A poll, every 2 ms, for a transcript and a message in it.
struct TranscriptWatch {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<(Option<Duration>, Option<Duration>)>,
}

impl TranscriptWatch {
    /// When the transcript and the message were first seen: waits until both were, for at most
    /// [`EVENT_TIMEOUT`] (the transcript may be written a moment after the result).
    async fn finish(mut self) -> (Option<Duration>, Option<Duration>) {
        if let Ok(seen) = tokio::time::timeout(EVENT_TIMEOUT, &mut self.task).await {
            return seen.unwrap();
        }
        let _ = self.stop.send(());
        self.task.await.unwrap()
    }
}

/// Polls for the transcript of `session` (and for `text` in it) from now on, noting when each
/// was first seen, measured from `since`.
fn watch_transcript(place: &Place, session: &str, text: &str, since: Instant) -> TranscriptWatch {
    let (stop, mut stopped) = tokio::sync::oneshot::channel();
    let env = place.env.clone();
    let cwd = place.cwd.clone();
    let session = session.to_owned();
    let text = text.to_owned();
    let from = SystemTime::now();
    let task = tokio::spawn(async move {
        let rt = runtime();
        let (mut file, mut message) = (None, None);
        loop {
            if file.is_none() && rt.transcript_exists(&env, &cwd, &session) {
                file = Some(since.elapsed());
            }
            if message.is_none() && rt.conversation_has_message(&env, &cwd, &session, &text, from) {
                message = Some(since.elapsed());
            }
            if (file.is_some() && message.is_some()) || stopped.try_recv().is_ok() {
                return (file, message);
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    });
    TranscriptWatch { stop, task }
}

fn is_init(id: &str) -> impl Fn(&RuntimeEvent) -> bool + '_ {
    move |e| matches!(e, RuntimeEvent::Init { session_id: Some(s), .. } if s == id)
}

fn is_replay<'a>(id: &'a str, text: &'a str) -> impl Fn(&RuntimeEvent) -> bool + 'a {
    move |e| matches!(e, RuntimeEvent::UserReplay { session_id: Some(s), text: t } if s == id && t == text)
}

fn is_result(e: &RuntimeEvent) -> bool {
    matches!(e, RuntimeEvent::TurnResult { .. })
}

fn new_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

#[cfg_attr(
    botvisor_skip_claude,
    ignore = "BOTVISOR_TEST_CLAUDE_BIN not set: no real Claude Code to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_and_lost_conversation() {
    let Some(claude) = claude_bin() else { return };
    let env = TestEnv::new().await;
    let api = StandInApi::start(script(env.dir.path().join("written.txt"), Asked::default())).await;
    let mut r = Report::new("version, a lost conversation");

    let out = std::process::Command::new(&claude)
        .arg("--version")
        .output()
        .unwrap();
    let printed = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    r.saw("claude --version", &printed);
    r.check(
        printed == format!("{} (Claude Code)", claude_version()),
        || format!("`claude --version` no longer prints `VERSION (Claude Code)`: {printed:?}"),
    );

    // `--resume` of an id that has no transcript, stdin kept open as botvisor keeps it.
    let place = Place::new(&env, &api, "home", &env.work);
    let id = new_id();
    let mut cli = Cli::spawn(&place, SessionStart::Resume(id.clone())).await;
    cli.send("are you there?").await;
    let (status, took) = cli.wait("`--resume` of an unknown id ends").await;
    let kinds = cli.kinds();
    let lost = cli.seen.iter().any(|l| {
        l.events.iter().any(
            |e| matches!(e, RuntimeEvent::ConversationNotFound { session_id } if *session_id == id),
        )
    });
    let results: Vec<Value> = cli
        .seen
        .iter()
        .map(Line::json)
        .filter(|v| v["type"] == "result")
        .collect();
    let init = kinds.iter().any(|k| k == "system/init");
    let said: Vec<Value> = results.iter().map(|v| v["errors"].clone()).collect();
    let stderr = cli.stderr().await;
    r.saw("--resume unknown id: stdout kinds", format!("{kinds:?}"));
    r.saw(
        "--resume unknown id: result",
        results.first().map_or("none".into(), |v| {
            format!(
                "subtype {} is_error {} num_turns {} total_cost_usd {} errors {}",
                v["subtype"], v["is_error"], v["num_turns"], v["total_cost_usd"], v["errors"]
            )
        }),
    );
    r.saw(
        "--resume unknown id: stderr",
        format!("{:?}", stderr.trim()),
    );
    r.saw(
        "--resume unknown id: exit",
        format!("{} after {} (stdin open)", exit_text(&status), ms(took)),
    );
    r.check(lost, || {
        format!(
            "`--resume` of an unknown id no longer ends with a result whose errors say \
             '{CONVERSATION_NOT_FOUND}: ID' (botvisor's rule 4 falls back to a failed turn); \
             stdout: {kinds:?}, the results' errors: {}; stderr: {stderr:?}",
            Value::from(said)
        )
    });
    r.check(!init, || {
        "`--resume` of an unknown id now prints system/init first".into()
    });
    r.check(status.code() == Some(1), || {
        format!(
            "`--resume` of an unknown id no longer exits by itself with code 1: {}",
            exit_text(&status)
        )
    });
    r.finish();
}

/// A first turn, measured by [`first_turn`].
struct FirstTurn {
    cli: Cli,
    init: Option<usize>,
    replay: Option<usize>,
    result: Option<usize>,
    /// When the transcript first held the message, since spawn.
    message_at: Option<Duration>,
}

/// Starts the new conversation `id` in `place`, sends `text` at once, and reads up to the turn's
/// result, noting when the transcript (and the message in it) first appeared. Reports the
/// timeline as `label`.
async fn first_turn(
    place: &Place,
    id: &str,
    text: &str,
    asked: &Asked,
    r: &mut Report,
    label: &str,
) -> FirstTurn {
    let mut cli = Cli::spawn(place, SessionStart::New(id.to_owned())).await;
    let watch = watch_transcript(place, id, text, cli.started);
    cli.send(text).await;
    let init = cli
        .until("system/init with the session id", is_init(id))
        .await;
    let replay = cli
        .until(
            "the replay of the user's message (user, isReplay: true)",
            is_replay(id, text),
        )
        .await;
    let result = cli.until("the turn's result", is_result).await;
    let (file_at, message_at) = watch.finish().await;
    let at = |i: Option<usize>| i.map(|i| cli.at(i));
    let (init_at, replay_at, result_at) = (at(init), at(replay), at(result));
    let assistant_at = cli
        .seen
        .iter()
        .find(|l| l.kind().starts_with("assistant"))
        .map(|l| l.at);
    let model_at = asked
        .lock()
        .unwrap()
        .iter()
        .find(|t| **t >= cli.started)
        .map(|t| t.duration_since(cli.started));
    r.saw(
        &format!("{label}: timeline from spawn, the message written at once"),
        format!(
            "system/init {}, model asked {}, replay {}, first assistant {}, result {}; \
             transcript file {}, with the message {}",
            opt_ms(init_at),
            opt_ms(model_at),
            opt_ms(replay_at),
            opt_ms(assistant_at),
            opt_ms(result_at),
            opt_ms(file_at),
            opt_ms(message_at),
        ),
    );
    let order = |a: Option<Duration>, b: Option<Duration>| match (a, b) {
        (Some(a), Some(b)) if a <= b => "before",
        (Some(_), Some(_)) => "after",
        _ => "?",
    };
    r.saw(
        &format!("{label}: transcript first written"),
        format!(
            "{} system/init, {} the replay, {} the first assistant event, {} the result",
            order(file_at, init_at),
            order(file_at, replay_at),
            order(file_at, assistant_at),
            order(file_at, result_at)
        ),
    );
    r.saw(
        &format!("{label}: replay printed"),
        format!(
            "{} the model was asked, {} the first assistant event",
            order(replay_at, model_at),
            order(replay_at, assistant_at)
        ),
    );
    FirstTurn {
        cli,
        init,
        replay,
        result,
        message_at,
    }
}

#[cfg_attr(
    botvisor_skip_claude,
    ignore = "BOTVISOR_TEST_CLAUDE_BIN not set: no real Claude Code to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_turn_with_a_model_slow_to_answer() {
    let Some(_) = claude_bin() else { return };
    let env = TestEnv::new().await;
    let asked = Asked::default();
    let api = StandInApi::start(script(env.dir.path().join("written.txt"), asked.clone())).await;
    let mut r = Report::new("a first turn whose model answers after 1 s");
    let place = Place::new(&env, &api, "home", &env.work);
    let id = new_id();
    let label = "first turn (model answers after 1 s)";
    let mut turn = first_turn(&place, &id, SLOWLY, &asked, &mut r, label).await;
    turn.cli.close_stdin();
    turn.cli.wait("the CLI exits after its stdin closes").await;
    r.finish();
}

#[cfg_attr(
    botvisor_skip_claude,
    ignore = "BOTVISOR_TEST_CLAUDE_BIN not set: no real Claude Code to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversation_as_botvisor_runs_it() {
    let Some(_) = claude_bin() else { return };
    let env = TestEnv::new().await;
    let asked = Asked::default();
    let api = StandInApi::start(script(env.dir.path().join("written.txt"), asked.clone())).await;
    let mut r = Report::new("a conversation: turns, transcript, control, resume");
    let place = Place::new(
        &env,
        &api,
        "home",
        &env.dir.path().join("work/a dir.with_odd-Grüße-😀"),
    );
    let id = new_id();
    let slug = transcript::slug(&place.cwd);

    // Turn 1: the timeline of a first message, and where the transcript appears.
    let first = "first words";
    let FirstTurn {
        mut cli,
        init,
        replay,
        result,
        message_at,
    } = first_turn(
        &place,
        &id,
        first,
        &asked,
        &mut r,
        "turn 1 (model answers at once)",
    )
    .await;
    let turn1 = cli.seen.len();
    let init_ok = cli.seen.iter().any(|l| {
        l.events
            .iter()
            .any(|e| matches!(e, RuntimeEvent::ControlResponse { request_id, result: Ok(_) } if request_id == "facts-1"))
    });
    let deltas: String = cli
        .seen
        .iter()
        .flat_map(|l| &l.events)
        .filter_map(|e| match e {
            RuntimeEvent::TextDelta(t) => Some(t.as_str()),
            _ => None,
        })
        .collect();
    let result_payload = result.and_then(|i| {
        cli.seen[i].events.iter().find_map(|e| match e {
            RuntimeEvent::TurnResult {
                outcome, payload, ..
            } => Some((*outcome, payload.clone())),
            _ => None,
        })
    });
    r.check(init.is_some(), || {
        "system/init no longer names the session id given with --session-id".into()
    });
    r.check(replay.is_some(), || {
        "--replay-user-messages no longer echoes the message as a user line with isReplay: true \
         and the session id (botvisor records a session only at the replay, rule 3)"
            .into()
    });
    r.check(init_ok, || {
        "the control request `initialize` is no longer answered with a success".into()
    });
    r.check(
        matches!(&result_payload, Some((ResultOutcome::Success, p)) if p.get("total_cost_usd").is_some()),
        || format!("a turn no longer ends with a result of subtype success carrying total_cost_usd: {result_payload:?}"),
    );
    r.check(deltas == format!("Hello! You said: {first}"), || {
        format!(
            "--include-partial-messages no longer streams the text as stream_event \
             content_block_delta/text_delta: {deltas:?}"
        )
    });
    let path = place.transcript(&id);
    r.saw(
        "transcript path",
        path.as_ref().map_or("not found".into(), |p| {
            p.strip_prefix(env.dir.path().join("home"))
                .unwrap_or(p)
                .display()
                .to_string()
                .replace(&slug, "<slug>")
                .replace(&id, "<session-id>")
        }),
    );
    r.check(
        path.as_deref()
            == Some(
                &env.dir
                    .path()
                    .join("home/.claude/projects")
                    .join(&slug)
                    .join(format!("{id}.jsonl")),
            ),
        || {
            format!(
                "the transcript of a finished turn is no longer at \
                 $HOME/.claude/projects/<slug>/<session-id>.jsonl with the slug of every \
                 character outside [A-Za-z0-9] as '-' per UTF-16 unit; projects: {:?}",
                std::fs::read_dir(env.dir.path().join("home/.claude/projects"))
                    .map(|d| d
                        .filter_map(Result::ok)
                        .map(|e| e.file_name())
                        .collect::<Vec<_>>())
                    .unwrap_or_default()
            )
        },
    );
    r.check(message_at.is_some(), || {
        "the transcript no longer holds the user's message as a user line with its text and an \
         RFC 3339 timestamp (botvisor's check against sending a message twice, rule 8)"
            .into()
    });

    // Turn 2: a permission prompt answered over the control protocol.
    cli.mark();
    cli.send(WRITE).await;
    let prompt = cli
        .until(
            "a can_use_tool control request for Write (--permission-prompt-tool stdio)",
            |e| matches!(e, RuntimeEvent::PermissionRequest { tool, .. } if tool == "Write"),
        )
        .await;
    let mut written = false;
    if let Some(i) = prompt {
        let (request_id, input) = permission_request(&cli.seen[i].events);
        let answer = stdin::encode_permission_answer(
            &request_id,
            &PermissionAnswer::Allow {
                updated_input: input,
                grant: None,
            },
        );
        cli.write(answer).await;
        cli.until("the result of the turn with a tool", is_result)
            .await;
        written = env.dir.path().join("written.txt").is_file();
    }
    let inits_turn2 = cli.seen[turn1..]
        .iter()
        .filter(|l| l.kind() == "system/init")
        .count();
    r.saw(
        "system/init at the start of every turn",
        format!("{} in turn 2", inits_turn2),
    );
    r.check(prompt.is_some() && written, || {
        format!(
            "a tool that needs permission no longer asks with a can_use_tool control request \
             answered by {{\"behavior\":\"allow\",\"updatedInput\":…}} (prompt seen: {}, file \
             written: {written})",
            prompt.is_some()
        )
    });

    // Live settings: set_permission_mode and set_model on the running process.
    cli.mark();
    let mode = cli
        .control(&ControlRequest::SetPermissionMode("plan".into()))
        .await;
    let model = cli.control(&ControlRequest::SetModel("opus".into())).await;
    let answered = |cli: &Cli, id: &str| {
        cli.seen.iter().any(|l| {
            l.events.iter().any(
                |e| matches!(e, RuntimeEvent::ControlResponse { request_id, result: Ok(_) } if request_id == id),
            )
        })
    };
    let m = model.clone();
    cli.until(
        "the answer to set_model",
        move |e| matches!(e, RuntimeEvent::ControlResponse { request_id, .. } if *request_id == m),
    )
    .await;
    r.check(answered(&cli, &mode) && answered(&cli, &model), || {
        "set_permission_mode and set_model are no longer answered with a success on the running \
         process"
            .into()
    });

    // Closing stdin ends the process (the first step of botvisor's gentle stop).
    let before = cli.started.elapsed();
    cli.close_stdin();
    let (status, end) = cli.wait("the CLI exits after its stdin closes").await;
    r.saw(
        "stdin closed",
        format!("{} after {}", exit_text(&status), ms(end - before)),
    );
    let mut kinds: BTreeSet<String> = cli.seen.iter().map(Line::kind).collect();
    drop(cli);

    // A second --session-id on the same id. botvisor reads the CLI's stdout only; the sentence
    // has been seen on stderr (2.1.284 to 2.1.332), so the stream it comes on is printed, and
    // what is asserted is the sentence (read by botvisor's parser) and the exit code.
    let mut again = Cli::spawn(&place, SessionStart::New(id.clone())).await;
    let (status, _) = again.wait("--session-id of an existing conversation").await;
    let reads_in_use = |text: &str| {
        text.lines().any(|line| {
            events::parse_line(line.as_bytes()).iter().any(
                |e| matches!(e, RuntimeEvent::SessionInUse { session_id } if *session_id == id),
            )
        })
    };
    let stdout: Vec<String> = again.seen.iter().map(|l| l.text.clone()).collect();
    let stderr = again.stderr().await;
    let on_stdout = reads_in_use(&stdout.join("\n"));
    let on_stderr = reads_in_use(&stderr);
    r.saw(
        "--session-id of an existing conversation",
        format!(
            "stdout {:?}, stderr {:?}, {}",
            stdout.join("\n").replace(&id, "ID"),
            stderr.trim().replace(&id, "ID"),
            exit_text(&status)
        ),
    );
    r.saw(
        "'already in use' comes on",
        match (on_stdout, on_stderr) {
            (true, true) => "stdout and stderr",
            (true, false) => "stdout",
            (false, true) => "stderr (botvisor reads stdout: it sees an exit code 1)",
            (false, false) => "neither",
        },
    );
    r.check((on_stdout || on_stderr) && status.code() == Some(1), || {
        format!(
            "--session-id of an existing conversation no longer prints 'Error: Session ID ID is \
             already in use.' and exits with code 1: stdout {stdout:?}, stderr {stderr:?}, {}",
            exit_text(&status)
        )
    });

    // --resume continues the conversation under the same id.
    let mut resumed = Cli::spawn(&place, SessionStart::Resume(id.clone())).await;
    resumed.send("again").await;
    let init = resumed
        .until("system/init of the resumed conversation", is_init(&id))
        .await;
    let replay = resumed
        .until(
            "the replay in the resumed conversation",
            is_replay(&id, "again"),
        )
        .await;
    resumed.until("the resumed turn's result", is_result).await;
    let history = api
        .requests()
        .into_iter()
        .rfind(|q| q.has_tools)
        .is_some_and(|q| q.body.to_string().contains("Hello! You said: first words"));
    r.check(init.is_some() && replay.is_some() && history, || {
        format!(
            "--resume ID no longer continues the conversation under the same id (init: {}, \
             replay: {}, history sent to the model: {history})",
            init.is_some(),
            replay.is_some()
        )
    });
    kinds.extend(resumed.seen.iter().map(Line::kind));
    resumed.close_stdin();
    resumed
        .wait("the resumed CLI exits after its stdin closes")
        .await;
    r.saw(
        "stream-json kinds seen",
        kinds.iter().cloned().collect::<Vec<_>>().join(" "),
    );
    r.finish();
}

#[cfg_attr(
    botvisor_skip_claude,
    ignore = "BOTVISOR_TEST_CLAUDE_BIN not set: no real Claude Code to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hard_and_gentle_stops_at_the_start_of_a_turn() {
    let Some(_) = claude_bin() else { return };
    let env = TestEnv::new().await;
    let api = StandInApi::start(script(env.dir.path().join("written.txt"), Asked::default())).await;
    let mut r = Report::new("stops at the start of a first turn (transcript left?)");
    const TRIALS: usize = 3;
    for (moment, signal) in [
        ("SIGKILL at system/init", libc::SIGKILL),
        ("SIGKILL at the first replay", libc::SIGKILL),
        (
            "SIGKILL at the first replay, model answering after 1 s",
            libc::SIGKILL,
        ),
        ("SIGTERM at system/init", libc::SIGTERM),
    ] {
        let mut left = 0;
        let mut holding = 0;
        for trial in 0..TRIALS {
            let place = Place::new(
                &env,
                &api,
                "home",
                &env.dir
                    .path()
                    .join(format!("{}-{trial}", moment.replace(' ', "_"))),
            );
            let id = new_id();
            let text = if moment.contains("after 1 s") {
                format!("{SLOWLY} {trial}")
            } else {
                format!("doomed {trial}")
            };
            let from = SystemTime::now();
            let mut cli = Cli::spawn(&place, SessionStart::New(id.clone())).await;
            cli.send(&text).await;
            let at = if moment.contains("replay") {
                cli.until("the replay", is_replay(&id, &text)).await
            } else {
                cli.until("system/init", is_init(&id)).await
            };
            assert!(at.is_some(), "{}", fact(&format!("{moment}: not reached")));
            cli.signal(signal);
            cli.wait(moment).await;
            if place.transcript(&id).is_some() {
                left += 1;
            }
            if runtime().conversation_has_message(&place.env, &place.cwd, &id, &text, from) {
                holding += 1;
            }
        }
        r.saw(
            moment,
            format!("transcript left {left}/{TRIALS}, holding the message {holding}/{TRIALS}"),
        );
    }
    r.finish();
}

/// Java's `String.hashCode` over UTF-16 units, as a signed 32-bit number.
fn java_hash(s: &str) -> i32 {
    s.encode_utf16()
        .fold(0i32, |h, u| h.wrapping_mul(31).wrapping_add(i32::from(u)))
}

fn base36(mut n: u64) -> String {
    let digits = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut out = Vec::new();
    loop {
        out.push(digits[(n % 36) as usize]);
        n /= 36;
        if n == 0 {
            break;
        }
    }
    out.reverse();
    String::from_utf8(out).unwrap()
}

#[cfg_attr(
    botvisor_skip_claude,
    ignore = "BOTVISOR_TEST_CLAUDE_BIN not set: no real Claude Code to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_working_directory_with_a_long_slug() {
    let Some(_) = claude_bin() else { return };
    let env = TestEnv::new().await;
    let api = StandInApi::start(script(env.dir.path().join("written.txt"), Asked::default())).await;
    let mut r = Report::new("a slug longer than 200 characters");
    let mut long = env.dir.path().join("long");
    while long.to_string_lossy().len() < 260 {
        long = long.join("a_rather_long.folder name-x");
    }
    let place = Place::new(&env, &api, "home", &long);
    let id = new_id();
    let mut cli = Cli::spawn(&place, SessionStart::New(id.clone())).await;
    cli.send("hello").await;
    cli.until("the turn's result", is_result).await;
    cli.close_stdin();
    cli.wait("the CLI exits after its stdin closes").await;
    let slug = transcript::slug(&place.cwd);
    let projects: Vec<String> = std::fs::read_dir(env.dir.path().join("home/.claude/projects"))
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    let folder = projects
        .iter()
        .find(|p| p.starts_with(&slug[..MAX_SLUG_LEN]));
    let suffix = folder.map(|f| f[MAX_SLUG_LEN..].to_owned());
    let java = format!(
        "-{}",
        base36(u64::from(
            java_hash(&place.cwd.to_string_lossy()).unsigned_abs()
        ))
    );
    r.saw("slug length", slug.len());
    r.saw(
        "folder",
        folder.map_or("none".into(), |f| {
            format!("<first 200 of the slug>{}", &f[MAX_SLUG_LEN..])
        }),
    );
    r.saw(
        "hash suffix",
        match &suffix {
            Some(s) if *s == java => format!("{s}: '-' and base 36 of |Java String.hashCode(cwd)|"),
            Some(s) => format!("{s}: not base 36 of |Java String.hashCode(cwd)| ({java})"),
            None => "none".into(),
        },
    );
    r.check(place.transcript(&id).is_some(), || {
        format!(
            "the transcript of a working directory whose slug is over {MAX_SLUG_LEN} characters \
             is no longer in a folder named by the slug's first {MAX_SLUG_LEN} characters and a \
             suffix (projects: {projects:?})"
        )
    });
    r.finish();
}

/// A CLI in `place` that ran a turn starting the background job; `Some` if
/// `system/background_tasks_changed` reported it.
async fn with_background_job(place: &Place) -> (Cli, bool) {
    let id = new_id();
    let mut cli = Cli::spawn(place, SessionStart::New(id)).await;
    cli.send(BACKGROUND).await;
    let reported = cli
        .until(
            "system/background_tasks_changed listing the background Bash task",
            |e| matches!(e, RuntimeEvent::Tasks { running: Some(n) } if *n > 0),
        )
        .await;
    cli.until("the turn's result", is_result).await;
    (cli, reported.is_some())
}

/// Live processes of this test running the background job.
fn background_jobs(env: &TestEnv) -> Vec<u32> {
    env.leftovers()
        .into_iter()
        .filter(|(_, cmd)| cmd.starts_with(BACKGROUND_JOB))
        .map(|(pid, _)| pid)
        .collect()
}

/// Ends `cli` with `stop` and describes what followed within `grace`: the lines, the exit, the
/// background job. Then kills whatever is left.
async fn stop_with_job(env: &TestEnv, mut cli: Cli, stop: &str, grace: Duration) -> String {
    cli.mark();
    let from = cli.started.elapsed();
    if stop.contains("stdin") {
        cli.close_stdin();
    }
    if stop.contains("SIGTERM") {
        cli.signal(libc::SIGTERM);
    }
    let ended = tokio::time::timeout(grace, cli.wait(stop)).await.ok();
    let after: Vec<String> = cli.seen[cli.cursor..].iter().map(Line::kind).collect();
    let job_left = !background_jobs(env).is_empty();
    cli.signal(libc::SIGKILL);
    let _ = cli.child.wait().await;
    tokio::time::timeout(EVENT_TIMEOUT, async {
        loop {
            let left = background_jobs(env);
            if left.is_empty() {
                return;
            }
            for pid in left {
                // SAFETY: kill(2) on a process this test's CLI started (it carries the marker).
                unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the background job is stopped");
    format!(
        "then {after:?}; {}; the job {}",
        match ended {
            Some((status, at)) => format!("{} after {}", exit_text(&status), ms(at - from)),
            None => format!("still running {} s later", grace.as_secs()),
        },
        if job_left { "still ran" } else { "was gone" }
    )
}

#[cfg_attr(
    botvisor_skip_claude,
    ignore = "BOTVISOR_TEST_CLAUDE_BIN not set: no real Claude Code to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_task_and_the_end_of_stdin() {
    let Some(_) = claude_bin() else { return };
    let env = TestEnv::new().await;
    let api = StandInApi::start(script(env.dir.path().join("written.txt"), Asked::default())).await;
    let mut r = Report::new("a background Bash task (sleep 8), then a stop");
    let place = Place::new(&env, &api, "home", &env.work);
    // Bash allowed without a prompt, as a user's own settings would.
    let settings = env.dir.path().join("home/.claude/settings.json");
    std::fs::create_dir_all(settings.parent().unwrap()).unwrap();
    std::fs::write(&settings, r#"{"permissions":{"allow":["Bash"]}}"#).unwrap();

    // botvisor's gentle stop: stdin closed and SIGTERM at once, then SIGKILL after
    // `stop_grace_s` (5 s by default).
    let (cli, reported) = with_background_job(&place).await;
    // The job may start a moment after the tool result: waited for.
    let running = tokio::time::timeout(EVENT_TIMEOUT, async {
        while background_jobs(&env).is_empty() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .is_ok();
    r.saw("background Bash turn", format!("{:?}", cli.kinds()));
    r.check(reported, || {
        "a background Bash task is no longer reported by system/background_tasks_changed listing \
         it (botvisor's idle stop waits for it, rule 12)"
            .into()
    });
    r.check(running, || {
        format!("a Bash tool call with run_in_background no longer runs `{BACKGROUND_JOB}`")
    });
    let stop = "stdin closed and SIGTERM";
    r.saw(
        stop,
        stop_with_job(&env, cli, stop, Duration::from_secs(5)).await,
    );

    // Only stdin closed: what the CLI does with a task still running.
    let (cli, _) = with_background_job(&place).await;
    let stop = "only stdin closed";
    r.saw(
        stop,
        stop_with_job(&env, cli, stop, Duration::from_secs(12)).await,
    );
    r.finish();
}

/// The stand-in as a subscription's API answers while its plan's limit is hit: the first main
/// request gets 429 with the `anthropic-ratelimit-unified-*` headers, `rejected`, resetting at
/// `reset`; later ones (the limit has reset) an echo with the headers saying `allowed`.
/// A place whose CLI runs as a subscription user: an OAuth token, no API key.
fn subscription_place(env: &TestEnv, api: &StandInApi, name: &str) -> Place {
    let mut place = Place::new(env, api, name, &env.work);
    place.env.remove("ANTHROPIC_API_KEY");
    place.env.insert(
        "CLAUDE_CODE_OAUTH_TOKEN".into(),
        "sk-ant-oat01-stand-in".into(),
    );
    place
}

/// Seconds since the Unix epoch, an hour from now.
fn an_hour_ahead() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 3600
}

fn limited_once(reset: u64) -> Script {
    let asked = Arc::new(Mutex::new(0u32));
    Arc::new(move |req: &ApiRequest| {
        let first = {
            let mut n = asked.lock().unwrap();
            *n += 1;
            *n == 1
        };
        if first {
            support::stand_in_api::plan_limit_refusal(reset)
        } else {
            support::stand_in_api::plan_echo("allowed", &req.last_user_text, reset + 5 * 3600)
        }
    })
}

#[cfg_attr(
    botvisor_skip_claude,
    ignore = "BOTVISOR_TEST_CLAUDE_BIN not set: no real Claude Code to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_limit_is_a_rate_limit_event_and_an_error_result() {
    let Some(_) = claude_bin() else { return };
    let changed = |fact: &str| format!("fact changed in {}: {fact}", claude_version());
    let env = TestEnv::new().await;
    let reset = an_hour_ahead();
    let api = StandInApi::start(limited_once(reset)).await;
    let place = subscription_place(&env, &api, "limited");
    let mut cli = Cli::spawn(&place, SessionStart::New(new_id())).await;
    cli.send("over the limit").await;
    cli.until("the turn's result", is_result).await;
    let of_type = |cli: &Cli, t: &str| -> Vec<Value> {
        cli.seen
            .iter()
            .map(Line::json)
            .filter(|v| v["type"] == t)
            .collect()
    };
    let limit = of_type(&cli, "rate_limit_event");
    let result = of_type(&cli, "result").pop().unwrap_or_default();
    let said: Vec<Value> = of_type(&cli, "assistant")
        .iter()
        .map(|a| a["message"]["content"][0]["text"].clone())
        .collect();
    println!("plan limit: rate_limit_event {limit:?}");
    println!("plan limit: the assistant says {said:?}");
    println!(
        "plan limit: result subtype {}, is_error {}, terminal_reason {}, api_error_status {}",
        result["subtype"],
        result["is_error"],
        result["terminal_reason"],
        result["api_error_status"]
    );
    let info = limit
        .first()
        .map(|l| l["rate_limit_info"].clone())
        .unwrap_or_default();
    assert_eq!(
        (&info["status"], &info["resetsAt"], &info["rateLimitType"]),
        (&json!("rejected"), &json!(reset), &json!("five_hour")),
        "{}",
        changed("a rejected unified limit is a rate_limit_event naming its reset and its window")
    );
    assert_eq!(
        (&result["is_error"], &result["api_error_status"]),
        (&json!(true), &json!(429)),
        "{}",
        changed("the turn over the limit ends with an error result, api_error_status 429")
    );
    assert_eq!(
        api.requests().len(),
        1,
        "{}",
        changed("a plan limit is not retried")
    );
    // After the reset: an allowed turn, which says so too.
    cli.mark();
    cli.send("again").await;
    cli.until("the next turn's result", is_result).await;
    let allowed: Vec<Value> = of_type(&cli, "rate_limit_event")
        .into_iter()
        .skip(limit.len())
        .map(|l| l["rate_limit_info"]["status"].clone())
        .collect();
    println!("plan limit: after the reset, rate_limit_event statuses {allowed:?}");
    assert!(
        allowed.contains(&json!("allowed")),
        "{}",
        changed("an allowed turn of a subscription prints a rate_limit_event `allowed`")
    );
    cli.close_stdin();
    cli.wait("exit after stdin closed").await;
}

/// The cost and token counts of each `result` across two turns of one process and a third after
/// a resume: `total_cost_usd` is the conversation's so far (the bot's cost is the sum of the
/// differences), `usage` the turn's.
#[cfg_attr(
    botvisor_skip_claude,
    ignore = "BOTVISOR_TEST_CLAUDE_BIN not set: no real Claude Code to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_results_cost_counts_the_conversation_and_its_usage_the_turn() {
    let Some(_) = claude_bin() else { return };
    let changed = |fact: &str| format!("fact changed in {}: {fact}", claude_version());
    let env = TestEnv::new().await;
    let api = StandInApi::start(support::stand_in_api::echo_script()).await;
    let place = Place::new(&env, &api, "cost", &env.work);
    let id = new_id();
    let figures = |cli: &Cli| -> Vec<(f64, u64, u64)> {
        cli.seen
            .iter()
            .map(Line::json)
            .filter(|v| v["type"] == "result")
            .map(|r| {
                (
                    r["total_cost_usd"].as_f64().unwrap_or(-1.0),
                    r["usage"]["input_tokens"].as_u64().unwrap_or(0),
                    r["usage"]["output_tokens"].as_u64().unwrap_or(0),
                )
            })
            .collect()
    };
    let mut cli = Cli::spawn(&place, SessionStart::New(id.clone())).await;
    cli.send("one").await;
    cli.until("the first result", is_result).await;
    cli.mark();
    cli.send("two").await;
    cli.until("the second result", is_result).await;
    let first = figures(&cli);
    cli.close_stdin();
    cli.wait("exit after stdin closed").await;
    let mut resumed = Cli::spawn(&place, SessionStart::Resume(id.clone())).await;
    resumed.send("three").await;
    resumed.until("the third result", is_result).await;
    let after = figures(&resumed);
    println!("cost: results of one process {first:?}, after a resume {after:?}");
    println!(
        "cost: the stand-in's requests {:?}",
        api.requests()
            .iter()
            .map(|r| (r.has_tools, r.last_user_text.clone()))
            .collect::<Vec<_>>()
    );
    assert_eq!(
        first.iter().map(|f| (f.1, f.2)).collect::<Vec<_>>(),
        [(12, 7), (12, 7)],
        "{}",
        changed("a result's usage is its own turn's tokens (one request each here)")
    );
    let per_turn = first[0].0;
    let near = |a: f64, b: f64| (a - b).abs() < 1e-9;
    assert!(
        per_turn > 0.0 && near(first[1].0, 2.0 * per_turn) && near(after[0].0, 3.0 * per_turn),
        "{}: {first:?} {after:?}",
        changed(
            "a result's total_cost_usd is the conversation's so far, in one process and after a \
             resume"
        )
    );
    resumed.close_stdin();
    resumed.wait("exit after stdin closed").await;
}

/// Issue 45: a failed attempt (a plan's usage limit) stays in the conversation, and the CLI joins
/// its text with the next message's into one user turn of its next request (so a message sent
/// again reaches the model twice); a process resumed with botvisor's truncating resume
/// (`--resume-session-at` the failed message's parent, `--resume-drops-turn` it, the cut
/// `runtime::claude::taken::read` finds) leaves the attempt out: the message goes once. The
/// CLI's own reply to the failed request is no answer of the attempt's.
#[cfg_attr(
    botvisor_skip_claude,
    ignore = "BOTVISOR_TEST_CLAUDE_BIN not set: no real Claude Code to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_attempt_is_joined_with_the_next_message_unless_a_truncating_resume_drops_it() {
    let Some(_) = claude_bin() else { return };
    let changed = |fact: &str| format!("fact changed in {}: {fact}", claude_version());
    let env = TestEnv::new().await;
    let refusing = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let r = refusing.clone();
    let api = StandInApi::start(Arc::new(move |req: &ApiRequest| {
        if req.has_tools && r.load(std::sync::atomic::Ordering::SeqCst) {
            support::stand_in_api::plan_limit_refusal(
                SystemTime::now()
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .unwrap()
                    .as_secs()
                    + 3600,
            )
        } else {
            Reply::Text(format!("Hello! You said: {}", req.last_user_text))
        }
    }))
    .await;
    let mut place = Place::new(&env, &api, "failed-attempt", &env.work);
    place.env.remove("ANTHROPIC_API_KEY");
    place.env.insert(
        "CLAUDE_CODE_OAUTH_TOKEN".into(),
        "sk-ant-oat01-stand-in".into(),
    );
    let id = new_id();
    let refuse = |on: bool| refusing.store(on, std::sync::atomic::Ordering::SeqCst);
    let last_texts = || {
        api.requests()
            .into_iter()
            .rfind(|r| r.has_tools)
            .map(|r| r.user_texts())
            .unwrap_or_default()
    };
    let mut cli = Cli::spawn(&place, SessionStart::New(id.clone())).await;
    cli.send("warm up").await;
    cli.until("the first result", is_result).await;
    // Refused, then sent again in the same process: joined.
    refuse(true);
    cli.mark();
    cli.send("joined job").await;
    cli.until("the refused turn's result", is_result).await;
    refuse(false);
    cli.mark();
    cli.send("joined job").await;
    cli.until("the resent turn's result", is_result).await;
    let joined = last_texts();
    println!("failed attempt: the request after a resend in the same process: {joined:?}");
    assert_eq!(
        support::repeats::occurrences("joined job", &joined),
        2,
        "{}: {joined:?}",
        changed("a failed attempt is kept and joined with the next message")
    );
    // Refused again, the process ended; resumed without the attempt: once.
    refuse(true);
    cli.mark();
    let since = SystemTime::now();
    cli.send("dropped job").await;
    cli.until("the second refused turn's result", is_result)
        .await;
    refuse(false);
    cli.close_stdin();
    cli.wait("exit after stdin closed").await;
    let path = place.transcript(&id).expect("the transcript");
    let taken = botvisor::runtime::claude::taken::read(&path, "dropped job", since)
        .expect("the transcript holds the failed message");
    println!("failed attempt: read back as {taken:?}");
    assert!(
        !taken.answered && taken.answer.is_empty() && !taken.tool_called,
        "{}: {taken:?}",
        changed("the CLI's reply to a failed request is marked isApiErrorMessage")
    );
    let cut = taken.cut.clone().expect("a place to cut");
    assert!(matches!(cut, Cut::At { .. }), "{cut:?}");
    let mut resumed = Cli::spawn_with(&place, SessionStart::Resume(id.clone()), Some(&cut)).await;
    resumed.send("dropped job").await;
    resumed.until("the resumed turn's result", is_result).await;
    let once = last_texts();
    println!("failed attempt: the request after a truncating resume: {once:?}");
    assert_eq!(
        support::repeats::occurrences("dropped job", &once),
        1,
        "{}: {once:?}",
        changed("a truncating resume leaves the failed attempt out")
    );
    assert_eq!(
        support::repeats::occurrences("warm up", &once),
        1,
        "the earlier turns are kept: {once:?}"
    );
    resumed.close_stdin();
    resumed.wait("exit after stdin closed").await;
}

/// Issue 46 §3: a resumed process's first `total_cost_usd` counts from the conversation's last
/// `cost-state` record (what its last process recorded), whether that process ended gently or
/// was killed: so a turn's own cost is its total less that record
/// (`runtime::claude::transcript::last_cost`), never a total that began in another process (a
/// terminal's turns, an adopted conversation's earlier ones).
#[cfg_attr(
    botvisor_skip_claude,
    ignore = "BOTVISOR_TEST_CLAUDE_BIN not set: no real Claude Code to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_process_counts_its_cost_from_the_last_cost_state() {
    let Some(_) = claude_bin() else { return };
    let changed = |fact: &str| format!("fact changed in {}: {fact}", claude_version());
    let env = TestEnv::new().await;
    let api = StandInApi::start(support::stand_in_api::echo_script()).await;
    let place = Place::new(&env, &api, "cost-state", &env.work);
    let id = new_id();
    let total = |cli: &Cli| -> f64 {
        cli.seen
            .iter()
            .map(Line::json)
            .rfind(|v| v["type"] == "result")
            .and_then(|r| r["total_cost_usd"].as_f64())
            .unwrap_or(-1.0)
    };
    let recorded = || {
        let path = place.transcript(&id).expect("the transcript");
        let content = std::fs::read_to_string(path).unwrap();
        botvisor::runtime::claude::transcript::last_cost(&content, &id)
    };
    let near = |a: f64, b: f64| (a - b).abs() < 1e-9;
    let mut cli = Cli::spawn(&place, SessionStart::New(id.clone())).await;
    cli.send("one").await;
    cli.until("the first result", is_result).await;
    let per_turn = total(&cli);
    cli.mark();
    cli.send("two").await;
    cli.until("the second result", is_result).await;
    cli.close_stdin();
    cli.wait("exit after stdin closed").await;
    let gently = recorded();
    println!("cost-state: after a gentle end {gently:?} (a turn {per_turn})");
    // Resumed, then killed: what it recorded (if anything) is where the next one counts from.
    let mut killed = Cli::spawn(&place, SessionStart::Resume(id.clone())).await;
    killed.send("three").await;
    killed.until("the third result", is_result).await;
    let third = total(&killed);
    killed.signal(libc::SIGKILL);
    killed.wait("exit after SIGKILL").await;
    let before = recorded();
    let mut next = Cli::spawn(&place, SessionStart::Resume(id.clone())).await;
    next.send("four").await;
    next.until("the fourth result", is_result).await;
    let fourth = total(&next);
    println!(
        "cost-state: a resumed process told {third} after {gently:?}; after a SIGKILL {before:?}, \
         the next told {fourth}"
    );
    assert!(
        gently.is_some_and(|g| near(g, 2.0 * per_turn)),
        "{}: {gently:?}",
        changed("a process that ends records the conversation's total in a cost-state line")
    );
    assert!(
        near(third - gently.unwrap_or(0.0), per_turn)
            && near(fourth - before.unwrap_or(0.0), per_turn),
        "{}: {third} after {gently:?}, {fourth} after {before:?}",
        changed("a resumed process's first total is the last cost-state's plus its own turn")
    );
    next.close_stdin();
    next.wait("exit after stdin closed").await;
}

#[cfg_attr(
    botvisor_skip_claude,
    ignore = "BOTVISOR_TEST_CLAUDE_BIN not set: no real Claude Code to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_near_its_limit_is_an_allowed_warning_with_its_utilization() {
    let Some(_) = claude_bin() else { return };
    let changed = |fact: &str| format!("fact changed in {}: {fact}", claude_version());
    let env = TestEnv::new().await;
    let reset = an_hour_ahead();
    let script = support::stand_in_api::plan_warning_script(reset);
    let api = StandInApi::start(script).await;
    let place = subscription_place(&env, &api, "warning");
    let mut cli = Cli::spawn(&place, SessionStart::New(new_id())).await;
    cli.send("nearly there").await;
    cli.until("the turn's result", is_result).await;
    let limits: Vec<Value> = cli
        .seen
        .iter()
        .map(Line::json)
        .filter(|v| v["type"] == "rate_limit_event")
        .collect();
    println!("plan warning: rate_limit_event {limits:?}");
    let info = limits
        .first()
        .map(|l| l["rate_limit_info"].clone())
        .unwrap_or_default();
    let window = &info["unifiedWindows"]["five_hour"];
    // 2.1.328 and 2.1.332 say `allowed_warning` in the window; 2.1.284 gives only its
    // utilization (docs/cli-versions.md).
    assert!(
        info["rateLimitType"] == "five_hour"
            && window["utilization"] == json!(0.91)
            && (window["status"] == "allowed_warning" || window["status"].is_null()),
        "{}: {info}",
        changed(
            "a plan near its limit is a rate_limit_event whose deciding window (rateLimitType) \
             in unifiedWindows gives its utilization (and, from 2.1.328, allowed_warning)"
        )
    );
    println!("plan warning: the window's status {}", window["status"]);
    cli.close_stdin();
    cli.wait("exit after stdin closed").await;
}

/// An expired login of a subscription user: Claude Code 2.1.328 retries twice (`api_retry`,
/// `authentication_failed`, 401), then a synthetic assistant message and an error `result`
/// (`api_error_status` 401; from 2.1.328 also `api_error_type` `authentication_error`) whose
/// text says the token expired; it does not exit.
#[cfg_attr(
    botvisor_skip_claude,
    ignore = "BOTVISOR_TEST_CLAUDE_BIN not set: no real Claude Code to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_login_is_two_retries_and_an_error_result() {
    let Some(_) = claude_bin() else { return };
    let changed = |fact: &str| format!("fact changed in {}: {fact}", claude_version());
    let env = TestEnv::new().await;
    let api = StandInApi::start(support::stand_in_api::login_expired_script()).await;
    let place = subscription_place(&env, &api, "login");
    let mut cli = Cli::spawn(&place, SessionStart::New(new_id())).await;
    cli.send("hello").await;
    cli.until("the turn's result", is_result).await;
    let lines: Vec<Value> = cli.seen.iter().map(Line::json).collect();
    let retries: Vec<&Value> = lines
        .iter()
        .filter(|v| v["type"] == "system" && v["subtype"] == "api_retry")
        .collect();
    let result = lines
        .iter()
        .rfind(|v| v["type"] == "result")
        .cloned()
        .unwrap_or_default();
    println!("expired login: api_retry {retries:?}");
    println!(
        "expired login: result is_error {}, api_error_status {}, api_error_type {}, result {}",
        result["is_error"], result["api_error_status"], result["api_error_type"], result["result"]
    );
    assert!(
        !retries.is_empty()
            && retries
                .iter()
                .all(|r| r["error"] == "authentication_failed" && r["error_status"] == 401),
        "{}",
        changed("a 401 is retried with api_retry events naming authentication_failed")
    );
    // 2.1.328 and 2.1.332 also name `api_error_type` `authentication_error`; 2.1.284 does not.
    assert_eq!(
        (&result["is_error"], &result["api_error_status"]),
        (&json!(true), &json!(401)),
        "{}",
        changed("an expired login ends the turn with an error result naming the 401")
    );
    assert!(
        result["result"]
            .as_str()
            .unwrap_or_default()
            .contains("OAuth token has expired"),
        "{}",
        changed("the result's text gives the API's words")
    );
    cli.mark();
    cli.close_stdin();
    cli.wait("exit after stdin closed").await;
}

/// A message the CLI took and never answered (killed while the model answered) is redone in the
/// same conversation by a truncating resume, as the Agent SDK does (2.1.328, hidden from `--help`):
/// `--resume ID --resume-session-at P --resume-drops-turn U`, where `U` is the `uuid` of the
/// taken message's `user` line in the transcript and `P` its `parentUuid`. The model is then sent
/// the earlier turns and the message once; the transcript keeps the dropped line, and the new
/// message branches from `P` beside it. A `--resume-drops-turn` that names no message of that
/// range is refused: "Resume rejected by --resume-drops-turn: …", and the CLI exits.
#[cfg_attr(
    botvisor_skip_claude,
    ignore = "BOTVISOR_TEST_CLAUDE_BIN not set: no real Claude Code to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_taken_message_is_redone_once_by_a_truncating_resume() {
    let env = TestEnv::new().await;
    let script: Script = Arc::new(|req: &ApiRequest| {
        if req.last_user_text == "doomed" && !req.has_tool_result {
            Reply::SlowText {
                chunks: (0..20).map(|i| format!("d{i} ")).collect(),
                every: Duration::from_millis(100),
            }
        } else {
            Reply::Text(format!("Hello! You said: {}", req.last_user_text))
        }
    });
    let api = StandInApi::start(script).await;
    let place = Place::new(&env, &api, "home", &env.work);
    let id = new_id();
    let mut cli = Cli::spawn(&place, SessionStart::New(id.clone())).await;
    cli.send("first").await;
    cli.until("the first turn's result", is_result).await;
    cli.send("doomed").await;
    api.wait_for(|r| r.last_user_text == "doomed", EVENT_TIMEOUT)
        .await;
    let transcript = place.transcript(&id).expect("the transcript");
    let lines = || -> Vec<Value> {
        std::fs::read_to_string(&transcript)
            .unwrap()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    };
    let is_doomed =
        |l: &Value| l["type"] == "user" && l.pointer("/message/content") == Some(&json!("doomed"));
    // Taken: in the conversation (2.1.332 may ask the model a moment before it writes the
    // line), while the model still answers (2 s).
    tokio::time::timeout(EVENT_TIMEOUT, async {
        let mut tick = tokio::time::interval(Duration::from_millis(20));
        while !lines().iter().any(is_doomed) {
            tick.tick().await;
        }
    })
    .await
    .unwrap_or_else(|_| {
        panic!(
            "{}",
            fact("a taken message is a `user` line of the transcript")
        )
    });
    cli.signal(libc::SIGKILL);
    let _ = cli.wait("the CLI killed while the model answers").await;
    let taken = lines().into_iter().find(is_doomed).unwrap();
    let prompt = taken["uuid"].as_str().expect("its uuid").to_owned();
    let parent = taken["parentUuid"]
        .as_str()
        .expect("its parentUuid")
        .to_owned();
    let truncate = |drops: &str| Cut::At {
        at: parent.clone(),
        drops: drops.to_owned(),
    };

    // Refused when the turn named is not the one dropped.
    let mut wrong = Cli::spawn_with(
        &place,
        SessionStart::Resume(id.clone()),
        Some(&truncate(&new_id())),
    )
    .await;
    wrong.send("doomed").await;
    let (status, _) = wrong.wait("a truncation of the wrong turn").await;
    let stderr = wrong.stderr().await;
    println!("wrong turn: {}, stderr {stderr:?}", exit_text(&status));
    assert!(
        !status.success() && stderr.contains("Resume rejected by --resume-drops-turn"),
        "{}",
        fact("a truncating resume of the wrong turn is refused on stderr")
    );

    let before = api.requests().len();
    let mut cli = Cli::spawn_with(
        &place,
        SessionStart::Resume(id.clone()),
        Some(&truncate(&prompt)),
    )
    .await;
    cli.send("doomed").await;
    let at = cli
        .until("the redone turn's result", is_result)
        .await
        .unwrap();
    let result = cli.seen[at].json();
    assert_eq!(result["subtype"], "success");
    assert_eq!(
        result["session_id"],
        json!(id),
        "{}",
        fact("the same conversation")
    );
    let asked: Vec<ApiRequest> = api.requests()[before..]
        .iter()
        .filter(|r| r.has_tools)
        .cloned()
        .collect();
    let body = asked.last().expect("the model was asked").body.to_string();
    println!(
        "redone: the model was sent \"doomed\" {} time(s)",
        body.matches("\"doomed\"").count()
    );
    assert_eq!(
        body.matches("\"doomed\"").count(),
        1,
        "{}",
        fact("after a truncating resume the model is sent the dropped message once")
    );
    assert!(
        body.contains("Hello! You said: first"),
        "the earlier turn stays"
    );
    cli.close_stdin();
    cli.wait("the end of stdin").await;
    let kept = lines().into_iter().filter(is_doomed).count();
    println!("the transcript holds the message {kept} time(s) (the dropped line stays, branched)");
}

/// The request id and tool input of the permission request among `events`.
fn permission_request(events: &[RuntimeEvent]) -> (String, Value) {
    events
        .iter()
        .find_map(|e| match e {
            RuntimeEvent::PermissionRequest {
                request_id, input, ..
            } => Some((request_id.clone(), input.clone())),
            _ => None,
        })
        .expect("a permission request")
}

/// One transcript line, as far as a turn's reconciliation reads it.
fn line_shape(l: &Value) -> String {
    let content = l.pointer("/message/content");
    let blocks: Vec<String> = match content {
        Some(Value::Array(bs)) => bs
            .iter()
            .map(|b| b["type"].as_str().unwrap_or("?").to_owned())
            .collect(),
        Some(Value::String(_)) => vec!["string".into()],
        _ => vec![],
    };
    format!(
        "type={} subtype={} uuid={} parent={} stop_reason={} blocks={:?} id={}",
        l["type"],
        l["subtype"],
        l["uuid"].as_str().map(|s| &s[..8]).unwrap_or("-"),
        l["parentUuid"].as_str().map(|s| &s[..8]).unwrap_or("null"),
        l.pointer("/message/stop_reason").unwrap_or(&Value::Null),
        blocks,
        l.pointer("/message/id").unwrap_or(&Value::Null),
    )
}

/// Issue 25: what a turn leaves in the transcript, for botvisor to read an answer it did not
/// see (a daemon killed during the turn) and to redo a message taken but not answered.
#[cfg_attr(
    botvisor_skip_claude,
    ignore = "BOTVISOR_TEST_CLAUDE_BIN not set: no real Claude Code to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_turn_leaves_in_the_transcript() {
    let Some(_) = claude_bin() else { return };
    let env = TestEnv::new().await;
    let asked = Asked::default();
    let target = env.dir.path().join("written.txt");
    let base = script(target, asked.clone());
    let script: Script = Arc::new(move |req: &ApiRequest| {
        if req.last_user_text == "doomed" && !req.has_tool_result {
            Reply::SlowText {
                chunks: (0..20).map(|i| format!("d{i} ")).collect(),
                every: Duration::from_millis(100),
            }
        } else {
            base(req)
        }
    });
    let api = StandInApi::start(script).await;
    let place = Place::new(&env, &api, "home", &env.work);
    let lines = |id: &str| -> Vec<Value> {
        place
            .transcript(id)
            .map(|t| {
                std::fs::read_to_string(t)
                    .unwrap()
                    .lines()
                    .filter_map(|l| serde_json::from_str(l).ok())
                    .collect()
            })
            .unwrap_or_default()
    };
    // A first message killed while the model answers.
    let id = new_id();
    let mut cli = Cli::spawn(&place, SessionStart::New(id.clone())).await;
    cli.send("doomed").await;
    api.wait_for(|r| r.last_user_text == "doomed", EVENT_TIMEOUT)
        .await;
    tokio::time::sleep(Duration::from_millis(500)).await; // the kill moment, not a wait
    cli.signal(libc::SIGKILL);
    let _ = cli.wait("killed in its first turn").await;
    println!("--- a first turn killed while the model answers ---");
    for l in lines(&id) {
        println!("  {}", line_shape(&l));
    }
    let read = |id: &str, text: &str| {
        let path = place.transcript(id).expect("the transcript");
        taken::read(&path, text, std::time::SystemTime::UNIX_EPOCH)
    };
    let killed = read(&id, "doomed").expect("the killed first message is in its transcript");
    assert_eq!(
        (killed.cut.clone(), killed.answered, killed.answer.len()),
        (Some(Cut::Whole), false, 0),
        "{}: {killed:?}",
        fact(
            "a first message has no parent line, and a turn killed while the model answers leaves no answer"
        )
    );
    // Two whole turns: an echo, a tool call.
    let id = new_id();
    let mut cli = Cli::spawn(&place, SessionStart::New(id.clone())).await;
    cli.send("first").await;
    cli.until("the first result", is_result).await;
    cli.mark();
    cli.send(WRITE).await;
    let asks = |e: &RuntimeEvent| matches!(e, RuntimeEvent::PermissionRequest { .. });
    let i = cli
        .until("the Write's permission request", asks)
        .await
        .unwrap();
    let (request_id, input) = permission_request(&cli.seen[i].events);
    let allow = PermissionAnswer::Allow {
        updated_input: input,
        grant: None,
    };
    cli.write(stdin::encode_permission_answer(&request_id, &allow))
        .await;
    cli.until("the tool turn's result", is_result).await;
    cli.close_stdin();
    cli.wait("the end of stdin").await;
    println!("--- two whole turns (an echo; a Write) ---");
    for l in lines(&id) {
        println!("  {}", line_shape(&l));
    }
    let first = read(&id, "first").expect("the first message");
    assert!(
        first.answered && !first.tool_called && first.cut == Some(Cut::Whole),
        "{}: {first:?}",
        fact("a whole answer ends with an assistant line whose stop_reason is not tool_use")
    );
    let tool = read(&id, WRITE).expect("the Write's message");
    let kinds: Vec<&str> = tool.answer.iter().map(|c| c.kind).collect();
    assert!(
        tool.answered
            && tool.tool_called
            && matches!(tool.cut, Some(Cut::At { .. }))
            && kinds.contains(&"tool_use")
            && kinds.contains(&"tool_result")
            && kinds.last() == Some(&"assistant"),
        "{}: {tool:?}",
        fact(
            "a tool call's answer chains tool_use, tool_result and a final assistant line after a parent"
        )
    );
}

/// The entries of a transcript, in file order (lines with a `uuid`, off any side chain).
fn entries(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l["uuid"].is_string() && l["isSidechain"] != true)
        .collect()
}

/// The `leafUuid` of the transcript's last `last-prompt` record.
fn last_prompt_leaf(path: &Path) -> Option<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l["type"] == "last-prompt")
        .filter_map(|l| l["leafUuid"].as_str().map(str::to_owned))
        .next_back()
}

/// Issue 25: where a resume continues when a truncating resume left a branch behind. Claude
/// Code continues from the leaf its last `last-prompt` record names (`leafUuid`); a gentle stop
/// while a message waits unanswered names that attempt, and a process killed with SIGKILL after
/// a truncating resume writes none, so the record still names the dropped attempt: a plain
/// resume then leaves the newest turns out and a truncating one is refused. With the record
/// botvisor appends (`Runtime::before_resume`, `runtime::claude::leaf`), both resume the newest
/// branch.
#[cfg_attr(
    botvisor_skip_claude,
    ignore = "BOTVISOR_TEST_CLAUDE_BIN not set: no real Claude Code to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn where_a_resume_continues_after_a_truncating_resume() {
    let Some(_) = claude_bin() else { return };
    let env = TestEnv::new().await;
    // The first ask of "doomed" and of "second" answers slowly (they are stopped meanwhile).
    let slow_once: Mutex<BTreeSet<String>> = Mutex::default();
    let script: Script = Arc::new(move |req: &ApiRequest| {
        if matches!(req.last_user_text.as_str(), "doomed" | "second")
            && req.has_tools
            && slow_once.lock().unwrap().insert(req.last_user_text.clone())
        {
            Reply::SlowText {
                chunks: (0..30).map(|i| format!("s{i} ")).collect(),
                every: Duration::from_millis(100),
            }
        } else {
            Reply::Text(format!("Hello! You said: {}", req.last_user_text))
        }
    });
    let api = StandInApi::start(script).await;
    let place = Place::new(&env, &api, "home", &env.work);
    let id = new_id();
    let taken = |text: &str, path: &Path| {
        entries(path)
            .into_iter()
            .rev()
            .find(|l| l["type"] == "user" && l.pointer("/message/content") == Some(&json!(text)))
    };
    let wait_taken = async |text: &str| {
        tokio::time::timeout(EVENT_TIMEOUT, async {
            let mut tick = tokio::time::interval(Duration::from_millis(20));
            loop {
                if let Some(path) = place.transcript(&id)
                    && let Some(l) = taken(text, &path)
                {
                    return l;
                }
                tick.tick().await;
            }
        })
        .await
        .unwrap_or_else(|_| {
            panic!(
                "{}",
                fact(&format!("`{text}` is taken into the transcript"))
            )
        })
    };
    // A: an answered turn, then "doomed" taken and the CLI stopped gently (SIGTERM).
    let mut a = Cli::spawn(&place, SessionStart::New(id.clone())).await;
    a.send("first").await;
    a.until("the first turn's result", is_result).await;
    a.send("doomed").await;
    let d1 = wait_taken("doomed").await;
    a.signal(libc::SIGTERM);
    a.wait("the gentle stop").await;
    let path = place.transcript(&id).unwrap();
    let d1_id = d1["uuid"].as_str().unwrap().to_owned();
    println!(
        "a gentle stop with `doomed` unanswered: last-prompt names {:?}, the attempt is {d1_id}",
        last_prompt_leaf(&path),
    );
    // B: the truncating resume answers "doomed"; "second" is taken, and the CLI killed.
    let cut = Cut::At {
        at: d1["parentUuid"].as_str().unwrap().to_owned(),
        drops: d1_id.clone(),
    };
    let mut b = Cli::spawn_with(&place, SessionStart::Resume(id.clone()), Some(&cut)).await;
    b.send("doomed").await;
    let at = b
        .until("the redone turn's result", is_result)
        .await
        .unwrap();
    assert_eq!(b.seen[at].json()["subtype"], "success");
    b.send("second").await;
    let s1 = wait_taken("second").await;
    b.signal(libc::SIGKILL);
    b.wait("the kill").await;
    println!(
        "killed after a truncating resume: last-prompt names {:?}",
        last_prompt_leaf(&path)
    );
    // The record names the dropped attempt (2.1.328, 2.1.332) or an entry before it (2.1.284),
    // not the newest entry.
    let newest = entries(&path).last().unwrap()["uuid"].clone();
    let stale = last_prompt_leaf(&path).as_deref() != newest.as_str();
    println!("the newest entry is {newest}: the record is stale: {stale}");
    let second = Cut::At {
        at: s1["parentUuid"].as_str().unwrap().to_owned(),
        drops: s1["uuid"].as_str().unwrap().to_owned(),
    };
    let snapshot = std::fs::read(&path).unwrap();
    // Each probe starts from that transcript, botvisor's record appended or not, and says what
    // the model is sent: the user's messages, and the redone answer's count.
    let probe = async |what: &str, cut: Option<&Cut>, record: bool| {
        std::fs::write(&path, &snapshot).unwrap();
        if record {
            let rt = runtime();
            let wrote = rt.before_resume(&place.env, &place.cwd, &id).unwrap();
            assert!(wrote, "botvisor's record is appended");
            assert!(
                !rt.before_resume(&place.env, &place.cwd, &id).unwrap(),
                "once"
            );
        }
        let before = api.requests().len();
        let mut c = Cli::spawn_with(&place, SessionStart::Resume(id.clone()), cut).await;
        c.send("probe").await;
        let end = c.until(what, is_result).await.unwrap();
        let result = c.seen[end].json();
        c.close_stdin();
        let (status, _) = c.wait(what).await;
        let asked = api.requests()[before..]
            .iter()
            .rfind(|r| r.has_tools)
            .cloned();
        let said = asked.as_ref().map(|r| r.user_texts()).unwrap_or_default();
        let answers = asked.map_or(0, |r| {
            r.body
                .to_string()
                .matches("Hello! You said: doomed")
                .count()
        });
        println!(
            "{what}: {}, result {} {}, the model was sent {said:?} and the redone answer {answers} time(s)",
            exit_text(&status),
            result["subtype"],
            result["errors"]
        );
        (result, said, answers)
    };
    let (_, said, _) = probe("a plain resume", None, false).await;
    let (refused, _, _) = probe("a truncating resume of `second`", Some(&second), false).await;
    if stale {
        assert!(
            !said.iter().any(|s| s == "second"),
            "{}",
            fact(
                "a plain resume continues from the leaf the last record names (the dropped attempt's branch)"
            )
        );
        assert!(
            refused["errors"]
                .to_string()
                .contains("Resume rejected by --resume-drops-turn"),
            "{}",
            fact("a truncating resume is refused while the record names another branch")
        );
    }
    let (_, said, answers) = probe("a plain resume, botvisor's record", None, true).await;
    assert_eq!(
        (said, answers),
        (
            ["first", "doomed", "second", "probe"]
                .map(String::from)
                .to_vec(),
            1
        ),
        "{}",
        fact("with a record naming the newest entry, a plain resume sends the newest branch")
    );
    let (result, said, answers) = probe(
        "a truncating resume of `second`, botvisor's record",
        Some(&second),
        true,
    )
    .await;
    assert_eq!(
        (result["subtype"].as_str(), said, answers),
        (
            Some("success"),
            ["first", "doomed", "probe"].map(String::from).to_vec(),
            1
        ),
        "{}",
        fact("with a record naming the newest entry, a truncating resume drops the newest attempt")
    );
}

/// The registry files of `place`'s Claude Code that name `session`, as botvisor reads them
/// (`runtime::claude::registry`).
fn registry_entries(place: &Place, session: &str) -> Vec<registry::Entry> {
    let dir = transcript::config_dir(&place.env).unwrap().join("sessions");
    let texts: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().ends_with(".json"))
        .filter_map(|e| std::fs::read_to_string(e.path()).ok())
        .collect();
    registry::entries_for(texts.iter().map(String::as_str), session)
}

/// Issue 25, design rule 7: every live Claude Code process is in the registry
/// (`sessions/<pid>.json`, `procStart` its start time in clock ticks), and a second process
/// resuming a conversation one holds is not refused: both write it. botvisor's holder check
/// (`Runtime::holder`) finds the first. `--fork-session` continues in a new conversation and
/// leaves the old transcript as it was.
#[cfg_attr(
    botvisor_skip_claude,
    ignore = "BOTVISOR_TEST_CLAUDE_BIN not set: no real Claude Code to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_session_is_in_the_registry_and_a_second_resume_is_not_refused() {
    let Some(_) = claude_bin() else { return };
    let env = TestEnv::new().await;
    let api = StandInApi::start(Arc::new(|req: &ApiRequest| {
        Reply::Text(format!("Hello! You said: {}", req.last_user_text))
    }))
    .await;
    let place = Place::new(&env, &api, "home", &env.work);
    let id = new_id();
    let mut first = Cli::spawn(&place, SessionStart::New(id.clone())).await;
    first.send("first").await;
    first.until("the first turn's result", is_result).await;
    let pid = first.child.id().unwrap();
    let entries = registry_entries(&place, &id);
    println!("the registry while the first process runs: {entries:?}");
    let start_time = botvisor::process::identity::stat(pid).unwrap().start_time;
    assert!(
        entries
            .iter()
            .any(|e| e.pid == pid && e.start_time == start_time),
        "{}",
        fact("a live process is in sessions/<pid>.json with its procStart")
    );
    let holder = runtime()
        .holder(&place.env, &place.cwd, &id)
        .expect("botvisor finds the holder");
    assert_eq!(holder.identity.pid, pid);
    println!("botvisor names it: {} ({})", holder.what, holder.command);
    // A second process on the same conversation.
    let mut second = Cli::spawn(&place, SessionStart::Resume(id.clone())).await;
    second.send("second").await;
    let at = second
        .until("the second process's result", is_result)
        .await
        .unwrap();
    println!(
        "a second resume while the first runs: result {}",
        second.seen[at].json()["subtype"]
    );
    assert_eq!(
        second.seen[at].json()["subtype"],
        "success",
        "{}",
        fact("a resume of a conversation another process holds is not refused")
    );
    second.close_stdin();
    second.wait("the second process's end").await;
    first.close_stdin();
    first.wait("the first process's end").await;
    assert!(
        registry_entries(&place, &id).iter().all(|e| e.pid != pid),
        "{}",
        fact("a process that exits gently removes its registry file")
    );
    assert!(runtime().holder(&place.env, &place.cwd, &id).is_none());
    // A fork: a new conversation, the old transcript untouched.
    let path = place.transcript(&id).unwrap();
    let before = std::fs::read(&path).unwrap();
    let rt = runtime();
    let start = SessionStart::Resume(id.clone());
    let spec = LaunchSpec {
        cwd: &place.cwd,
        model: "",
        permission_mode: "",
        env: &place.env,
        start: &start,
        cut: None,
        fork: true,
    };
    let argv = rt.command(rt.binary().unwrap(), &spec).args.join(" ");
    assert!(argv.contains("--fork-session"), "{argv}");
    let mut fork = Cli::spawn_forked(&place, &id).await;
    fork.send("third").await;
    let at = fork.until("the fork's result", is_result).await.unwrap();
    let forked = fork.seen[at].json()["session_id"]
        .as_str()
        .unwrap()
        .to_owned();
    fork.close_stdin();
    fork.wait("the fork's end").await;
    println!("the fork's conversation: {forked}");
    assert_ne!(forked, id, "{}", fact("--fork-session names a new session"));
    assert_eq!(
        std::fs::read(&path).unwrap(),
        before,
        "{}",
        fact("a fork leaves the old transcript as it was")
    );
    let body = api.requests().last().unwrap().body.to_string();
    assert!(
        body.contains("Hello! You said: second"),
        "{}",
        fact("a fork carries the conversation's turns")
    );
}

/// Every `settings*.json` under `dir`, with what it holds.
fn settings_files(dir: &Path) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_owned()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                todo.push(p);
            } else if p
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("settings") && n.ends_with(".json"))
            {
                out.push((p.clone(), std::fs::read_to_string(&p).unwrap_or_default()));
            }
        }
    }
    out
}

/// The request a line of the CLI asked: `(request_id, input, the whole request)`.
fn asked_request(events: &[RuntimeEvent]) -> Option<(String, Value, Value)> {
    events.iter().find_map(|e| match e {
        RuntimeEvent::PermissionRequest {
            request_id,
            input,
            request,
            ..
        } => Some((request_id.clone(), input.clone(), request.clone())),
        _ => None,
    })
}

/// Sends `text` and reads on until the CLI asks (`Some` request) or the turn ends (`None`).
async fn asks(cli: &mut Cli, text: &str) -> Option<(String, Value, Value)> {
    cli.mark();
    cli.send(text).await;
    let i = cli
        .until(&format!("a request or the result of {text:?}"), |e| {
            matches!(
                e,
                RuntimeEvent::PermissionRequest { .. } | RuntimeEvent::TurnResult { .. }
            )
        })
        .await
        .expect("the CLI runs");
    asked_request(&cli.seen[i].events)
}

/// Answers `asked` with botvisor's allow of `scope` (runtime::claude::scopes), then reads on to
/// the turn's result. A permission mode in the grant goes as botvisord sends it: the control
/// request `set_permission_mode`.
async fn allow_with(cli: &mut Cli, asked: (String, Value, Value), scope: botvisor::runtime::Scope) {
    let (id, input, request) = asked;
    let grant = botvisor::runtime::claude::scopes::grant(&request, scope);
    let answer = PermissionAnswer::Allow {
        updated_input: input,
        grant: grant.permissions,
    };
    cli.write(stdin::encode_permission_answer(&id, &answer))
        .await;
    if let Some(mode) = grant.mode {
        cli.control(&ControlRequest::SetPermissionMode(mode)).await;
    }
    cli.until("the result of the allowed turn", is_result).await;
}

/// Issue 30, "always allow": what Claude Code suggests with a request, and what an allow that
/// sends the suggestions back (`updatedPermissions`) does. A Write suggests `setMode`
/// `acceptEdits` for the session (botvisor takes it as the bot's mode); once in it, the next
/// Write is not asked at all. A Bash command outside the working directory suggests a rule for
/// the command in `localSettings` and one for reading its folder in the session: sent back, as
/// offered or for the session, the same command is not asked again in that process, but the
/// next process asks again: in print mode (2.1.328) no settings file is written, whatever the
/// destination.
#[cfg_attr(
    botvisor_skip_claude,
    ignore = "BOTVISOR_TEST_CLAUDE_BIN not set: no real Claude Code to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allow_with_the_suggestions_is_not_asked_again() {
    use botvisor::runtime::Scope;
    let Some(_) = claude_bin() else { return };
    let env = TestEnv::new().await;
    let outside = env.dir.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let script: Script = Arc::new(|req: &ApiRequest| {
        let text = req.last_user_text.trim().to_owned();
        let tool = if let Some(cmd) = text.strip_prefix("run ") {
            Some(("Bash", json!({"command": cmd, "description": "list"})))
        } else {
            text.strip_prefix("write ")
                .and_then(|r| r.split_once(": "))
                .map(|(path, content)| ("Write", json!({"file_path": path, "content": content})))
        };
        // A tool already called for this message (its result came back merged with the
        // message's text, as the demo script knows): the turn's answer.
        let called = |input: &Value| {
            req.body["messages"].as_array().is_some_and(|m| {
                m.iter()
                    .filter_map(|m| m["content"].as_array())
                    .flatten()
                    .filter(|b| b["type"] == "tool_use" && b["input"] == *input)
                    .count()
                    >= req.user_texts().iter().filter(|t| t.trim() == text).count()
            })
        };
        match tool {
            _ if req.has_tool_result => Reply::Text("Tool finished.".into()),
            Some((_, input)) if called(&input) => Reply::Text("Tool finished.".into()),
            Some((name, input)) => Reply::ToolUse {
                name: name.into(),
                input,
            },
            None => Reply::Text(format!("Hello! You said: {text}")),
        }
    });
    let api = StandInApi::start(script).await;
    let mut r = Report::new("an allow with the suggestions (\"always allow\")");

    // A Write: setMode acceptEdits, taken as the bot's mode; the next Write goes unasked.
    let place = Place::new(&env, &api, "home-write", &env.work);
    let id = new_id();
    let mut cli = Cli::spawn(&place, SessionStart::New(id.clone())).await;
    let first = env.work.join("first.txt");
    let asked = asks(&mut cli, &format!("write {}: one", first.display())).await;
    let suggested = asked
        .as_ref()
        .map(|a| a.2["permission_suggestions"].clone());
    r.saw("a Write's suggestions", format!("{suggested:?}"));
    r.check(
        suggested
            .as_ref()
            .and_then(|s| s.as_array())
            .is_some_and(|s| {
                s.iter()
                    .any(|x| x["type"] == "setMode" && x["mode"] == "acceptEdits")
            }),
        || "a Write no longer suggests setMode acceptEdits".into(),
    );
    if let Some(asked) = asked {
        allow_with(&mut cli, asked, Scope::Always).await;
    }
    let second = env.work.join("second.txt");
    let again = asks(&mut cli, &format!("write {}: two", second.display())).await;
    r.saw("the next Write asked", again.is_some());
    r.check(again.is_none() && second.is_file(), || {
        "the next Write is asked again after allowing with its suggestions".into()
    });
    cli.close_stdin();
    cli.wait("the end of stdin").await;

    // A Bash command outside the working directory: as offered (`always`), then for the
    // session only (`session`), each in its own working directory.
    let command = format!("run ls {}", outside.display());
    for (scope, name) in [(Scope::Always, "always"), (Scope::Session, "session")] {
        let cwd = env.dir.path().join(format!("work-{name}"));
        let place = Place::new(&env, &api, &format!("home-{name}"), &cwd);
        let id = new_id();
        let mut cli = Cli::spawn(&place, SessionStart::New(id.clone())).await;
        let asked = asks(&mut cli, &command).await;
        let suggested = asked
            .as_ref()
            .map(|a| a.2["permission_suggestions"].clone());
        r.saw(
            &format!("{name}: the Bash command's suggestions"),
            format!("{suggested:?}"),
        );
        let Some(asked) = asked else {
            r.check(false, || {
                "a Bash command outside the folder is no longer asked".into()
            });
            break;
        };
        allow_with(&mut cli, asked, scope).await;
        let local = place.cwd.join(".claude/settings.local.json");
        let rules = std::fs::read_to_string(&local).unwrap_or_default();
        r.saw(&format!("{name}: .claude/settings.local.json"), &rules);
        r.saw(
            &format!("{name}: settings files written"),
            format!("{:?}", settings_files(env.dir.path())),
        );
        let same_process = asks(&mut cli, &command).await;
        r.saw(
            &format!("{name}: asked again in the same process"),
            same_process.is_some(),
        );
        cli.close_stdin();
        cli.wait("the end of stdin").await;
        let mut next = Cli::spawn(&place, SessionStart::Resume(id.clone())).await;
        let next_process = asks(&mut next, &command).await;
        r.saw(
            &format!("{name}: asked again in the next process"),
            next_process.is_some(),
        );
        if let Some(a) = next_process.clone() {
            allow_with(&mut next, a, Scope::Once).await;
        }
        next.close_stdin();
        next.wait("the end of stdin").await;
        // 2.1.328 in print mode keeps a rule only in the process, whatever its destination: no
        // settings file is written (botvisor offers `always` only for a mode it keeps itself).
        r.check(same_process.is_none(), || {
            format!("the same command is asked again in the process that allowed it ({name})")
        });
        r.check(next_process.is_some() && !rules.contains("Bash("), || {
            format!(
                "a rule sent with an allow ({name}) now outlives the process (settings.local.json: \
                 {rules:?}): botvisor could offer `always` for it (runtime::claude::scopes)"
            )
        });
    }
    r.finish();
}
