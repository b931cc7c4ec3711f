//! The shell driven without a bus: a bot's actor with a scripted runtime and a real SQLite file,
//! checked for the order of what it commits and publishes where orderings went wrong before.
//!
//! The scripted runtime launches `cat`, so every line the actor writes comes back on stdout;
//! its protocol reads a user message coming back as "the CLI received it" and answers with
//! the events the test scripted for that message. Nothing else of a real CLI is pretended: a
//! claim about Claude Code or Codex is tested on them (tests/*_real.rs).

use futures_util::FutureExt;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::config::Config;
use crate::runtime::{
    ChatPayload, ControlRequest, LaunchCommand, LaunchSpec, PermissionAnswer, Protocol, Read,
    ResultOutcome, Runtime, RuntimeError, RuntimeEvent, Sent, SessionStart,
};
use crate::store::Store;
use crate::supervisor::{BotHandle, NewBot, Property, PropertyValue, Publication, Supervisor};

/// What the scripted CLI says when it receives a user message: the message's text and the
/// conversation in, its events out.
type Script = fn(&str, &str) -> Vec<RuntimeEvent>;

struct ScriptedRuntime {
    script: Script,
    /// A shell script the agent runs instead of `cat` (its stdin is the actor's lines).
    agent: Option<&'static str>,
    /// How each process was started, in order.
    launches: Arc<Mutex<Vec<SessionStart>>>,
    /// Conversations started so far (their ids are `s1`, `s2`, …).
    started: Mutex<u32>,
}

impl Runtime for ScriptedRuntime {
    fn name(&self) -> &'static str {
        "scripted"
    }
    fn can_resume(&self) -> bool {
        true
    }
    fn binary(&self) -> Result<PathBuf, RuntimeError> {
        Ok(PathBuf::from(match self.agent {
            Some(_) => "/bin/sh",
            None => "/bin/cat",
        }))
    }
    fn permission_modes(&self) -> &'static [&'static str] {
        &["default"]
    }
    fn transcript_exists(&self, _: &BTreeMap<String, String>, _: &Path, _: &str) -> bool {
        true
    }
    fn conversation_has_message(
        &self,
        _: &BTreeMap<String, String>,
        _: &Path,
        _: &str,
        _: &str,
        _: std::time::SystemTime,
    ) -> bool {
        false
    }
    fn fresh_start(&self) -> SessionStart {
        let mut n = self.started.lock().unwrap();
        *n += 1;
        SessionStart::New(format!("s{n}"))
    }
    fn command(&self, program: PathBuf, spec: &LaunchSpec<'_>) -> LaunchCommand {
        LaunchCommand {
            program,
            args: self
                .agent
                .map(|script| vec!["-c".to_owned(), script.to_owned()])
                .unwrap_or_default(),
            cwd: spec.cwd.to_owned(),
            env: spec.env.clone(),
        }
    }
    fn open(&self, spec: &LaunchSpec<'_>) -> Box<dyn Protocol> {
        self.launches.lock().unwrap().push(spec.start.clone());
        Box::new(ScriptedProtocol {
            session: spec.start.session_id().unwrap_or("s?").to_owned(),
            script: self.script,
        })
    }
    fn session_in_use(&self, _: &str) -> Option<String> {
        None
    }
    fn fatal_reason(&self, _: &str) -> Option<&'static str> {
        None
    }
}

struct ScriptedProtocol {
    session: String,
    script: Script,
}

impl Protocol for ScriptedProtocol {
    fn opening(&mut self) -> Vec<String> {
        Vec::new()
    }
    fn ready(&self) -> bool {
        true
    }
    fn conversation(&self) -> Option<&str> {
        Some(&self.session)
    }
    fn user_message(&mut self, text: &str) -> Vec<String> {
        vec![json!({ "user": text }).to_string()]
    }
    fn control(&mut self, _: &ControlRequest) -> Option<Sent> {
        None
    }
    fn answer_permission(&mut self, _: &str, _: &PermissionAnswer) -> Vec<String> {
        Vec::new()
    }
    fn refuse(&mut self, _: &str, _: &str) -> Vec<String> {
        Vec::new()
    }
    fn read_line(&mut self, line: &[u8]) -> Read {
        let line: Value = serde_json::from_slice(line).unwrap_or_default();
        match line["user"].as_str() {
            Some(text) => Read::events((self.script)(text, &self.session)),
            None => Read::events(vec![RuntimeEvent::Ignored]),
        }
    }

    fn save(&self) -> serde_json::Value {
        serde_json::Value::Null
    }
}

/// The CLI began the turn (its replay of the message).
fn replay(text: &str, session: &str) -> RuntimeEvent {
    RuntimeEvent::UserReplay {
        session_id: Some(session.to_owned()),
        text: text.to_owned(),
    }
}

/// The turn's successful end.
fn success(session: &str) -> RuntimeEvent {
    RuntimeEvent::TurnResult {
        outcome: ResultOutcome::Success,
        session_id: Some(session.to_owned()),
        payload: json!({"subtype": "success", "result": "done"}),
        error: None,
    }
}

/// One bot of the scripted runtime, its actor running, and what it publishes.
struct Shell {
    bot: BotHandle,
    launches: Arc<Mutex<Vec<SessionStart>>>,
    publications: mpsc::UnboundedReceiver<Publication>,
    _dir: tempfile::TempDir,
}

fn shell(script: Script) -> Shell {
    shell_running(script, None)
}

/// [`shell`] with an agent that runs the shell script `agent` instead of `cat`.
fn shell_running(script: Script, agent: Option<&'static str>) -> Shell {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(&dir.path().join("botvisor.db")).unwrap());
    let launches = Arc::new(Mutex::new(Vec::new()));
    let runtime = Arc::new(ScriptedRuntime {
        script,
        agent,
        launches: launches.clone(),
        started: Mutex::new(0),
    });
    let (tx, publications) = mpsc::unbounded_channel();
    let config = Config {
        // The bot is never stopped for idleness while a test reads it.
        idle_timeout_s: 0,
        ..Config::default()
    };
    let supervisor = Supervisor::new(store, Arc::new(config), vec![runtime], tx);
    supervisor.open();
    let bot = supervisor
        .create(NewBot {
            cwd: dir.path().display().to_string(),
            runtime: Some("scripted".into()),
            ..Default::default()
        })
        .now_or_never()
        .expect("a bot without a worktree is created without waiting")
        .unwrap();
    Shell {
        bot,
        launches,
        publications,
        _dir: dir,
    }
}

/// What a client would see, in order: `item <kind>`, `turn <outcome>`, `asked <tool>`,
/// `<Property>=<value>` for the properties in `props`.
fn seen(p: &Publication, props: &[Property]) -> Vec<String> {
    match p {
        Publication::ChatItemAdded { kind, .. } => vec![format!("item {kind}")],
        Publication::TurnFinished { outcome, .. } => vec![format!("turn {outcome}")],
        Publication::PermissionRequested { tool, .. } => vec![format!("asked {tool}")],
        Publication::PropertiesChanged { changed, .. } => changed
            .iter()
            .filter(|(name, _)| props.contains(name))
            .map(|(name, value)| match value {
                PropertyValue::Str(s) => format!("{name:?}={s}"),
                PropertyValue::U32(n) => format!("{name:?}={}", if *n == 0 { "0" } else { "pid" }),
                other => format!("{name:?}={other:?}"),
            })
            .collect(),
        _ => Vec::new(),
    }
}

impl Shell {
    /// What is published until `until` is seen (within 10 s: a scripted turn takes
    /// milliseconds), as [`seen`] says it.
    async fn until(&mut self, until: &str, props: &[Property]) -> Vec<String> {
        let mut out = Vec::new();
        let read = async {
            while let Some(p) = self.publications.recv().await {
                for s in seen(&p, props) {
                    let done = s == until;
                    out.push(s);
                    if done {
                        return;
                    }
                }
            }
        };
        if tokio::time::timeout(Duration::from_secs(10), read)
            .await
            .is_err()
        {
            panic!("`{until}` was not published within 10 s; seen: {out:?}");
        }
        out
    }
}

fn position(seen: &[String], what: &str) -> usize {
    seen.iter()
        .position(|s| s == what)
        .unwrap_or_else(|| panic!("`{what}` not among {seen:?}"))
}

#[tokio::test]
async fn a_turn_is_seen_in_order_user_replay_items_session_then_its_end() {
    let mut sh = shell(|text, session| {
        vec![
            replay(text, session),
            RuntimeEvent::Chat(ChatPayload {
                kind: "assistant",
                payload: json!({"text": "hi"}),
            }),
            success(session),
        ]
    });
    sh.bot.send("hello".into(), None).unwrap();
    let seen = sh
        .until("turn success", &[Property::State, Property::SessionId])
        .await;
    assert_eq!(
        seen.iter()
            .filter(|s| !s.starts_with("State"))
            .cloned()
            .collect::<Vec<_>>(),
        [
            "item user",
            "SessionId=s1",
            "item assistant",
            "item result",
            "item turn_finished",
            "turn success"
        ],
        "{seen:?}"
    );
    assert!(
        position(&seen, "State=busy") < position(&seen, "item assistant"),
        "{seen:?}"
    );
}

#[tokio::test]
async fn a_question_open_when_its_turn_ends_is_closed_before_the_end_is_said() {
    // Found by review: a permission request left open by a turn that ended was closed after
    // TurnFinished, so a client saw an open question of a finished turn.
    let mut sh = shell(|text, session| {
        vec![
            replay(text, session),
            RuntimeEvent::PermissionRequest {
                request_id: "r1".into(),
                tool: "Write".into(),
                input: json!({"file_path": "/tmp/x"}),
                request: json!({}),
            },
            success(session),
        ]
    });
    sh.bot.send("write it".into(), None).unwrap();
    let seen = sh.until("turn success", &[]).await;
    let asked = position(&seen, "item permission_request");
    let closed = position(&seen, "item permission_answer");
    let ended = position(&seen, "item turn_finished");
    assert!(
        asked < position(&seen, "asked Write"),
        "recorded, then signalled: {seen:?}"
    );
    assert!(closed < ended, "closed, then the turn's end: {seen:?}");
    assert!(sh.bot.snapshot().pending.is_empty(), "nothing left open");
}

#[tokio::test]
async fn a_fresh_restart_forgets_the_conversation_before_the_next_agent_starts() {
    let mut sh = shell(|text, session| vec![replay(text, session), success(session)]);
    sh.bot.send("first".into(), None).unwrap();
    sh.until("turn success", &[]).await;
    assert_eq!(sh.bot.snapshot().record.session_id.as_deref(), Some("s1"));
    sh.bot
        .restart(crate::supervisor::core::RestartMode::Fresh)
        .unwrap();
    sh.bot.send("second".into(), None).unwrap();
    let seen = sh
        .until("turn success", &[Property::SessionId, Property::ProcessId])
        .await;
    let forgotten = position(&seen, "SessionId=");
    let started = position(&seen, "ProcessId=pid");
    assert!(forgotten < started, "{seen:?}");
    assert_eq!(
        position(&seen, "SessionId=s2"),
        seen.iter()
            .rposition(|s| s.starts_with("SessionId"))
            .unwrap(),
        "the new conversation is the one recorded: {seen:?}"
    );
    let launches = sh.launches.lock().unwrap().clone();
    assert_eq!(
        launches,
        [
            SessionStart::New("s1".into()),
            SessionStart::New("s2".into())
        ],
        "the second agent starts a new conversation, never resumes the forgotten one"
    );
}

/// A `Send`'s reply reaches its client before anything of its turn (a hostile run saw a
/// `TurnFinished` before the reply naming its turn, once the reply was sent by a task of its
/// own): the actor takes a message once its caller says the reply is sent. Until then the turn
/// does not begin; the window checked is many times what a scripted turn takes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_is_taken_once_its_reply_is_sent() {
    let mut sh = shell(|text, session| vec![replay(text, session), success(session)]);
    let (sent, answered) = tokio::sync::oneshot::channel();
    sh.bot.send("hello".into(), Some(answered)).unwrap();
    assert_eq!(sh.until("item user", &[]).await, ["item user"]);
    let early = tokio::time::timeout(Duration::from_millis(300), sh.publications.recv()).await;
    if let Ok(Some(p)) = &early {
        panic!(
            "the turn began before its reply was sent: {:?}",
            seen(p, &[Property::State])
        );
    }
    sent.send(()).unwrap();
    sh.until("turn success", &[]).await;
}

/// A client that hears a turn's end finds everything of it: the `error` item that says why the
/// agent crashed is published before `TurnFinished` (it was after: a client that read the chat
/// on the signal could miss it, as two real Claude Code tests did once the publisher ran apart
/// from the actor, issue 50).
#[tokio::test]
async fn a_crashed_turn_says_its_error_before_its_end() {
    let mut sh = shell_running(
        |text, session| {
            vec![
                replay(text, session),
                RuntimeEvent::Chat(ChatPayload {
                    kind: "assistant",
                    payload: json!({"text": "half an answer"}),
                }),
            ]
        },
        // Gives the message back (the scripted CLI's replay and answer), then crashes.
        Some("read line; printf '%s\\n' \"$line\"; exit 3"),
    );
    sh.bot.send("hello".into(), None).unwrap();
    let seen = sh.until("turn crashed", &[Property::State]).await;
    // The turn's own (`Turns::finish`) and the crash's, with its exit status (`crash_or_failure`).
    let errors = seen.iter().filter(|s| *s == "item error").count();
    assert_eq!(errors, 2, "{seen:?}");
    assert!(seen.contains(&"State=stopped".to_owned()), "{seen:?}");
}
