//! Tier 3: the facts of codex-facts.md that botvisor relies on, measured on the real Codex CLI
//! (`BOTVISOR_TEST_CODEX_BIN`, the native binary) as `codex app-server`, against the loopback
//! Responses stand-in, in a scratch `CODEX_HOME`, and printed (`cargo test --test facts codex:: --
//! --nocapture`). The JSON-RPC lines are written and read here by hand, so that a fact is checked
//! independently of botvisor's own protocol object. A fact that changed fails with
//! `fact changed in Codex VERSION: …`.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin};
use tokio::sync::mpsc;

use support::responses_api::{
    Reply, ResponsesApi, ResponsesRequest, Script, codex_home, codex_limit_headers, echo_script,
};
use support::*;

const WAIT: Duration = Duration::from_secs(60);

/// `codex --version` without the `codex-cli ` prefix.
fn codex_version(bin: &Path) -> String {
    let out = std::process::Command::new(bin)
        .arg("--version")
        .output()
        .expect("run codex --version");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .trim_start_matches("codex-cli ")
        .to_owned()
}

fn changed(bin: &Path, fact: &str) -> String {
    format!(
        "fact changed in Codex {}: {fact} (codex-facts.md)",
        codex_version(bin)
    )
}

/// One `codex app-server` process, driven line by line.
struct AppServer {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::UnboundedReceiver<Value>,
    /// Every line read so far.
    seen: Vec<Value>,
    next_id: u64,
    /// The process group `spawn` made (the app-server's pid).
    group: Option<u32>,
    /// Its descendants when it was asked to close (they outlive it: they are ended at drop).
    family: Vec<u32>,
}

impl Drop for AppServer {
    /// Ends the app-server and all it started (the plugin sync's `git`, its shell snapshot's
    /// `bash -lc`, see `spawn`), as botvisor's stop does: its process group and every
    /// descendant, then waits (at most [`WAIT`]) until none of them runs: a process SIGKILLed an
    /// instant ago can still be seen running by the test's check for leftovers (CI saw the
    /// shell snapshot's six processes so, under load).
    fn drop(&mut self) {
        let Some(group) = self.group else { return };
        let mut ended = descendants(group);
        ended.extend(std::mem::take(&mut self.family));
        ended.push(group);
        // SAFETY: killpg and kill take plain integers; the group is the one `spawn` made, the
        // pids its processes, found a moment ago.
        unsafe { libc::killpg(group as libc::pid_t, libc::SIGKILL) };
        // Only a process that still carries a test's marker: a pid the kernel gave to another
        // process since is left alone.
        ended.retain(|pid| marked(*pid));
        for pid in &ended {
            unsafe { libc::kill(*pid as libc::pid_t, libc::SIGKILL) };
        }
        let deadline = std::time::Instant::now() + WAIT;
        while ended.iter().any(|p| runs(*p)) && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// The fields of `/proc/<pid>/stat` after the command's `)`: state, ppid, pgrp, …
fn stat_fields(pid: u32) -> Vec<String> {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.split_whitespace().map(str::to_owned).collect())
        })
        .unwrap_or_default()
}

/// Whether `pid` runs (a zombie does not: it waits only for its parent to read its status).
fn runs(pid: u32) -> bool {
    let fields = stat_fields(pid);
    !fields.is_empty() && !matches!(fields[0].as_str(), "Z" | "X")
}

/// Whether `pid` carries a test's marker (`BOTVISOR_TEST_RUN`) in its environment.
fn marked(pid: u32) -> bool {
    std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|env| {
        env.split(|b| *b == 0)
            .any(|kv| kv.starts_with(b"BOTVISOR_TEST_RUN="))
    })
}

/// Every descendant of `root`, from `/proc`.
fn descendants(root: u32) -> Vec<u32> {
    let parents: Vec<(u32, u32)> = std::fs::read_dir("/proc")
        .map(|d| {
            d.filter_map(Result::ok)
                .filter_map(|e| e.file_name().to_string_lossy().parse::<u32>().ok())
                .filter_map(|pid| Some((pid, stat_fields(pid).get(1)?.parse().ok()?)))
                .collect()
        })
        .unwrap_or_default();
    let mut found = vec![root];
    let mut i = 0;
    while i < found.len() {
        let parent = found[i];
        found.extend(
            parents
                .iter()
                .filter(|(_, pp)| *pp == parent)
                .map(|(p, _)| *p),
        );
        i += 1;
    }
    found.remove(0);
    found
}

impl AppServer {
    fn spawn(bin: &Path, codex_home: &Path, cwd: &Path, marker: &str) -> AppServer {
        AppServer::spawn_with(bin, codex_home, cwd, marker, &[])
    }

    /// As [`AppServer::spawn`], with `extra` variables in its environment.
    fn spawn_with(
        bin: &Path,
        codex_home: &Path,
        cwd: &Path,
        marker: &str,
        extra: &[(&str, &str)],
    ) -> AppServer {
        let mut child = tokio::process::Command::new(bin)
            .arg("app-server")
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", codex_home.parent().unwrap())
            .env("CODEX_HOME", codex_home)
            .env("FAKE_API_KEY", "sk-test")
            .env("BOTVISOR_TEST_RUN", marker)
            .envs(extra.iter().copied())
            .current_dir(cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            // Its own process group, ended at close as botvisor ends an agent's: Codex 0.171.0's
            // start-up plugin sync runs `git ls-remote https://github.com/openai/plugins.git`,
            // which outlives the app-server where the network hangs rather than refuses.
            .process_group(0)
            .spawn()
            .expect("spawn codex app-server");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let v = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("a line that is not JSON ({e}): {line}"));
                if tx.send(v).is_err() {
                    break;
                }
            }
        });
        AppServer {
            stdin: child.stdin.take(),
            group: child.id(),
            child,
            lines: rx,
            seen: Vec::new(),
            next_id: 0,
            family: Vec::new(),
        }
    }

    async fn write(&mut self, v: Value) {
        let mut line = v.to_string();
        line.push('\n');
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(line.as_bytes()).await.unwrap();
        stdin.flush().await.unwrap();
    }

    /// Sends a request and returns its id.
    async fn request(&mut self, method: &str, params: Value) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.write(json!({"method": method, "id": id, "params": params}))
            .await;
        id
    }

    /// Reads lines until one for which `pred` holds.
    async fn until(&mut self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let got = tokio::time::timeout(WAIT, async {
            while let Some(v) = self.lines.recv().await {
                self.seen.push(v.clone());
                if pred(&v) {
                    return Some(v);
                }
            }
            None
        })
        .await;
        match got {
            Ok(Some(v)) => v,
            Ok(None) => panic!("codex closed stdout before {what}; seen: {:?}", self.seen),
            Err(_) => panic!("no {what} within {WAIT:?}; seen: {:?}", self.seen),
        }
    }

    /// The answer (result or error) to request `id`.
    async fn answer(&mut self, id: u64) -> Value {
        self.until(&format!("the answer to request {id}"), |v| {
            v.get("id") == Some(&json!(id)) && v.get("method").is_none()
        })
        .await
    }

    async fn notification(&mut self, method: &str) -> Value {
        self.until(method, |v| {
            v.get("method").and_then(Value::as_str) == Some(method) && v.get("id").is_none()
        })
        .await
    }

    /// `initialize` (with or without the experimental API) and `initialized`.
    async fn handshake(&mut self, experimental: bool) -> Value {
        let id = self
            .request(
                "initialize",
                json!({"clientInfo": {"name": "botvisor-facts", "version": "0"},
                       "capabilities": {"experimentalApi": experimental}}),
            )
            .await;
        let answer = self.answer(id).await;
        self.write(json!({"method": "initialized"})).await;
        answer
    }

    async fn start_thread(&mut self, params: Value) -> String {
        let id = self.request("thread/start", params).await;
        let answer = self.answer(id).await;
        answer
            .pointer("/result/thread/id")
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("thread/start answer without result.thread.id: {answer}"))
            .to_owned()
    }

    /// `turn/start` with `text`; returns the turn id from its answer.
    async fn start_turn(&mut self, thread: &str, text: &str) -> String {
        let id = self
            .request(
                "turn/start",
                json!({"threadId": thread, "input": [{"type": "text", "text": text}]}),
            )
            .await;
        let answer = self.answer(id).await;
        answer
            .pointer("/result/turn/id")
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("turn/start answer without result.turn.id: {answer}"))
            .to_owned()
    }

    async fn turn_completed(&mut self) -> Value {
        self.notification("turn/completed").await
    }

    /// Its pid.
    fn pid(&self) -> u32 {
        self.group.expect("spawned")
    }

    /// SIGKILLs its process group, as a crash, and waits for the app-server to be gone.
    async fn kill(mut self) {
        // SAFETY: killpg takes plain integers; the group is the one `spawn` made.
        unsafe { libc::killpg(self.pid() as libc::pid_t, libc::SIGKILL) };
        let _ = tokio::time::timeout(WAIT, self.child.wait()).await;
    }

    /// `thread/resume` of `thread` in `cwd` (its whole answer: result or error).
    async fn resume(&mut self, thread: &str, cwd: &Path) -> Value {
        let id = self
            .request(
                "thread/resume",
                json!({"threadId": thread, "cwd": cwd.to_str().unwrap()}),
            )
            .await;
        self.answer(id).await
    }

    /// `thread/revert` of `thread` before `turn` (its whole answer).
    async fn revert(&mut self, thread: &str, turn: &str) -> Value {
        let id = self
            .request(
                "thread/revert",
                json!({"threadId": thread, "beforeTurnId": turn}),
            )
            .await;
        self.answer(id).await
    }

    /// Closes stdin and waits for the exit; what is left in its process group ends at drop.
    async fn close(mut self) -> std::process::ExitStatus {
        if let Some(group) = self.group {
            self.family = descendants(group);
        }
        self.stdin = None;
        tokio::time::timeout(WAIT, self.child.wait())
            .await
            .expect("codex exits after stdin EOF")
            .unwrap()
    }
}

/// Rollout files of `thread` under `codex_home/sessions`, found by name at any depth.
fn rollouts(codex_home: &Path, thread: &str) -> Vec<PathBuf> {
    fn walk(dir: &Path, suffix: &str, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.filter_map(Result::ok) {
            let p = e.path();
            if p.is_dir() {
                walk(&p, suffix, out);
            } else if p
                .file_name()
                .is_some_and(|n| n.to_string_lossy().ends_with(suffix))
            {
                out.push(p);
            }
        }
    }
    let mut out = Vec::new();
    walk(
        &codex_home.join("sessions"),
        &format!("-{thread}.jsonl"),
        &mut out,
    );
    out
}

struct Setup {
    env: TestEnv,
    api: ResponsesApi,
    codex_home: PathBuf,
    bin: PathBuf,
}

impl Setup {
    async fn start(script: Script) -> Option<Setup> {
        let bin = codex_bin()?;
        let env = TestEnv::new().await;
        let api = ResponsesApi::start(script).await;
        let codex_home = codex_home(&env.home, &api.base_url, "");
        Some(Setup {
            env,
            api,
            codex_home,
            bin,
        })
    }

    /// The stand-in answering with `script`, a Codex app-server past its handshake, a new thread in
    /// the work folder and a turn begun there with `text`; `None` (skipped) without Codex.
    async fn first_turn(script: Script, text: &str) -> Option<(Setup, AppServer, String)> {
        let s = Setup::start(script).await?;
        let mut codex = s.opened().await;
        let thread = codex
            .start_thread(json!({"cwd": s.env.work.to_str().unwrap()}))
            .await;
        codex.start_turn(&thread, text).await;
        Some((s, codex, thread))
    }

    /// A Codex app-server that took the handshake with the experimental API.
    async fn opened(&self) -> AppServer {
        let mut codex = self.spawn();
        codex.handshake(true).await;
        codex
    }

    fn spawn(&self) -> AppServer {
        AppServer::spawn(
            &self.bin,
            &self.codex_home,
            &self.env.work,
            &self.env.marker,
        )
    }
}

#[cfg_attr(
    botvisor_skip_codex,
    ignore = "BOTVISOR_TEST_CODEX_BIN not set: no real Codex to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handshake_thread_id_and_the_rollout_written_at_the_first_turn() {
    let Some(s) = Setup::start(echo_script()).await else {
        return;
    };
    let mut codex = s.spawn();
    let init = codex.handshake(true).await;
    assert!(
        init.pointer("/result/codexHome").is_some(),
        "{}: {init}",
        changed(&s.bin, "initialize answers with result.codexHome")
    );
    let cwd = s.env.work.to_str().unwrap();
    let thread = codex
        .start_thread(
            json!({"cwd": cwd, "approvalPolicy": "never", "sandbox": "danger-full-access"}),
        )
        .await;
    assert!(uuid::Uuid::parse_str(&thread).is_ok(), "thread id {thread}");
    let before = rollouts(&s.codex_home, &thread);
    println!("rollout files after thread/start: {before:?}");
    assert!(
        before.is_empty(),
        "{}: {before:?}",
        changed(
            &s.bin,
            "the rollout is written at the first turn, not at thread/start"
        )
    );
    let turn = codex.start_turn(&thread, "hello").await;
    let started = codex.notification("turn/started").await;
    assert_eq!(started.pointer("/params/turn/id"), Some(&json!(turn)));
    let done = codex.turn_completed().await;
    assert_eq!(
        done.pointer("/params/turn/status"),
        Some(&json!("completed")),
        "{done}"
    );
    let deltas: String = codex
        .seen
        .iter()
        .filter(|v| v["method"] == "item/agentMessage/delta")
        .filter_map(|v| v.pointer("/params/delta").and_then(Value::as_str))
        .collect();
    let message = codex
        .seen
        .iter()
        .find(|v| {
            v["method"] == "item/completed"
                && v.pointer("/params/item/type") == Some(&json!("agentMessage"))
        })
        .and_then(|v| v.pointer("/params/item/text"))
        .cloned();
    println!("deltas: {deltas:?}; agentMessage: {message:?}");
    assert_eq!(message, Some(json!("Hello! You said: hello")));
    assert_eq!(
        deltas,
        "Hello! You said: hello",
        "{}",
        changed(&s.bin, "output_text deltas come as item/agentMessage/delta")
    );
    let after = rollouts(&s.codex_home, &thread);
    println!("rollout files after the first turn: {after:?}");
    assert_eq!(
        after.len(),
        1,
        "{}",
        changed(
            &s.bin,
            "sessions/YYYY/MM/DD/rollout-*-<thread id>.jsonl is written at the first turn"
        )
    );
    let rollout = std::fs::read_to_string(&after[0]).unwrap();
    assert!(
        rollout.lines().any(|l| {
            let v: Value = serde_json::from_str(l).unwrap_or_default();
            v["type"] == "response_item"
                && v.pointer("/payload/role") == Some(&json!("user"))
                && v.pointer("/payload/content/0/text") == Some(&json!("hello"))
        }),
        "{}",
        changed(
            &s.bin,
            "the rollout holds the user's message as a response_item"
        )
    );
    let status = codex.close().await;
    assert!(status.success(), "stdin EOF: {status:?}");

    // A new process resumes the thread: the model sees the first exchange.
    let mut codex = s.opened().await;
    let id = codex
        .request("thread/resume", json!({"threadId": thread, "cwd": cwd}))
        .await;
    let answer = codex.answer(id).await;
    assert_eq!(
        answer.pointer("/result/thread/id"),
        Some(&json!(thread)),
        "{answer}"
    );
    codex.start_turn(&thread, "again").await;
    codex.turn_completed().await;
    let last = s.api.requests().pop().unwrap();
    assert!(
        last.body.to_string().contains("Hello! You said: hello"),
        "{}",
        changed(
            &s.bin,
            "thread/resume sends the thread's history to the model"
        )
    );
    codex.close().await;
}

#[cfg_attr(
    botvisor_skip_codex,
    ignore = "BOTVISOR_TEST_CODEX_BIN not set: no real Codex to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resuming_a_missing_or_malformed_thread_is_refused_by_name() {
    let Some(s) = Setup::start(echo_script()).await else {
        return;
    };
    let mut codex = s.opened().await;
    let missing = "01a22d23-0000-7d13-9541-bb2ae3b0eabf";
    let id = codex
        .request("thread/resume", json!({"threadId": missing}))
        .await;
    let answer = codex.answer(id).await;
    println!("thread/resume of a missing thread: {answer}");
    assert_eq!(
        answer.pointer("/error/message"),
        Some(&json!(format!("no rollout found for thread id {missing}"))),
        "{}",
        changed(
            &s.bin,
            "thread/resume of a missing thread: `no rollout found for thread id <id>`"
        )
    );
    assert_eq!(answer.pointer("/error/code"), Some(&json!(-32600)));
    let id = codex
        .request("thread/resume", json!({"threadId": "not-a-uuid"}))
        .await;
    let answer = codex.answer(id).await;
    println!("thread/resume of a malformed id: {answer}");
    assert!(
        answer
            .pointer("/error/message")
            .and_then(Value::as_str)
            .is_some_and(|m| m.starts_with("invalid session id")),
        "{}: {answer}",
        changed(
            &s.bin,
            "thread/resume of a non-UUID id: `invalid session id: …`"
        )
    );
    codex.close().await;
}

#[cfg_attr(
    botvisor_skip_codex,
    ignore = "BOTVISOR_TEST_CODEX_BIN not set: no real Codex to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_ends_the_turn_as_interrupted() {
    let script: Script = std::sync::Arc::new(|_| Reply::SlowText {
        chunks: (0..60).map(|i| format!("part {i} ")).collect(),
        every: Duration::from_millis(500),
    });
    let Some(s) = Setup::start(script).await else {
        return;
    };
    let mut codex = s.opened().await;
    let thread = codex
        .start_thread(json!({"cwd": s.env.work.to_str().unwrap()}))
        .await;
    let turn = codex.start_turn(&thread, "talk for long").await;
    codex.notification("item/agentMessage/delta").await;
    let id = codex
        .request(
            "turn/interrupt",
            json!({"threadId": thread, "turnId": turn}),
        )
        .await;
    let answer = codex.answer(id).await;
    assert_eq!(answer.get("result"), Some(&json!({})), "{answer}");
    let done = codex.turn_completed().await;
    println!("after turn/interrupt: {done}");
    assert_eq!(
        done.pointer("/params/turn/status"),
        Some(&json!("interrupted")),
        "{}",
        changed(
            &s.bin,
            "turn/interrupt ends the turn with status interrupted"
        )
    );
    codex.close().await;
}

#[cfg_attr(
    botvisor_skip_codex,
    ignore = "BOTVISOR_TEST_CODEX_BIN not set: no real Codex to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_escalated_command_asks_for_approval_and_a_decline_is_told_to_the_model() {
    let Some(s) = Setup::start(support::responses_api::shell_script()).await else {
        return;
    };
    let marker_file = s.env.work.join("ran");
    let mut codex = s.opened().await;
    let thread = codex
        .start_thread(json!({"cwd": s.env.work.to_str().unwrap(),
                             "approvalPolicy": "on-request", "sandbox": "workspace-write"}))
        .await;
    for (decision, runs) in [("decline", false), ("accept", true)] {
        let _ = std::fs::remove_file(&marker_file);
        let turn = codex
            .start_turn(
                &thread,
                &format!("run escalated: touch {}", marker_file.display()),
            )
            .await;
        let ask = codex
            .until("item/commandExecution/requestApproval", |v| {
                v["method"] == "item/commandExecution/requestApproval"
            })
            .await;
        println!("approval request: {ask}");
        let params = &ask["params"];
        assert!(ask.get("id").is_some(), "a request: {ask}");
        assert_eq!(params["threadId"], json!(thread));
        assert_eq!(params["turnId"], json!(turn));
        assert!(
            params["itemId"].is_string()
                && params["command"]
                    .as_str()
                    .is_some_and(|c| c.contains("touch")),
            "{}: {ask}",
            changed(
                &s.bin,
                "requestApproval carries threadId, turnId, itemId, command"
            )
        );
        codex
            .write(json!({"id": ask["id"], "result": {"decision": decision}}))
            .await;
        let item = codex
            .until("the command's item/completed", |v| {
                v["method"] == "item/completed"
                    && v.pointer("/params/item/type") == Some(&json!("commandExecution"))
            })
            .await;
        println!("after {decision}: {}", item["params"]["item"]["status"]);
        let done = codex.turn_completed().await;
        assert_eq!(
            done.pointer("/params/turn/status"),
            Some(&json!("completed"))
        );
        assert_eq!(
            marker_file.exists(),
            runs,
            "{}",
            changed(&s.bin, "accept runs the command, decline does not")
        );
        if !runs {
            assert_eq!(
                item.pointer("/params/item/status"),
                Some(&json!("declined")),
                "{}",
                changed(&s.bin, "a declined command completes with status declined")
            );
        }
    }
    codex.close().await;
}

#[cfg_attr(
    botvisor_skip_codex,
    ignore = "BOTVISOR_TEST_CODEX_BIN not set: no real Codex to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_change_between_turns_only_with_the_experimental_api() {
    let Some(s) = Setup::start(echo_script()).await else {
        return;
    };
    let cwd = s.env.work.to_str().unwrap();
    // Without experimentalApi: refused.
    let mut codex = s.spawn();
    codex.handshake(false).await;
    let thread = codex.start_thread(json!({"cwd": cwd})).await;
    let id = codex
        .request(
            "thread/settings/update",
            json!({"threadId": thread, "model": "other-model"}),
        )
        .await;
    let answer = codex.answer(id).await;
    println!("thread/settings/update without experimentalApi: {answer}");
    assert!(
        answer.get("error").is_some(),
        "{}: {answer}",
        changed(&s.bin, "thread/settings/update needs experimentalApi")
    );
    codex.close().await;

    let mut codex = s.opened().await;
    let thread = codex.start_thread(json!({"cwd": cwd})).await;
    codex.start_turn(&thread, "one").await;
    codex.turn_completed().await;
    let id = codex
        .request(
            "thread/settings/update",
            json!({"threadId": thread, "model": "other-model", "approvalPolicy": "on-request",
                   "sandboxPolicy": {"type": "readOnly"}}),
        )
        .await;
    let answer = codex.answer(id).await;
    println!("thread/settings/update with experimentalApi: {answer}");
    assert_eq!(answer.get("result"), Some(&json!({})), "{answer}");
    codex.start_turn(&thread, "two").await;
    codex.turn_completed().await;
    let models: Vec<String> = s.api.requests().iter().map(|r| r.model.clone()).collect();
    println!("models asked: {models:?}");
    assert_eq!(
        models.last().map(String::as_str),
        Some("other-model"),
        "{}",
        changed(
            &s.bin,
            "thread/settings/update's model is used from the next turn"
        )
    );
    codex.close().await;
}

#[cfg_attr(
    botvisor_skip_codex,
    ignore = "BOTVISOR_TEST_CODEX_BIN not set: no real Codex to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_error_is_an_error_notification_and_a_failed_turn() {
    let script: Script = std::sync::Arc::new(|_| Reply::Status {
        status: 500,
        body: json!({"error": {"message": "stand-in failure", "type": "server_error"}}),
    });
    let Some((s, mut codex, _)) = Setup::first_turn(script, "fail").await else {
        return;
    };
    let error = codex.notification("error").await;
    println!("error notification: {error}");
    assert!(
        error
            .pointer("/params/error/message")
            .is_some_and(Value::is_string)
            && error
                .pointer("/params/willRetry")
                .is_some_and(Value::is_boolean),
        "{}: {error}",
        changed(
            &s.bin,
            "an error notification carries error.message and willRetry"
        )
    );
    let done = codex.turn_completed().await;
    println!("turn/completed: {done}");
    assert_eq!(
        done.pointer("/params/turn/status"),
        Some(&json!("failed")),
        "{}",
        changed(&s.bin, "an HTTP 500 without retries fails the turn")
    );
    codex.close().await;
}

/// Issue 45: a failed turn (an HTTP 500 here; a usage limit and a refused key were seen to do
/// the same) stays in the thread, so the next `turn/start` with the same text
/// sends the model two user messages; `thread/revert` with `beforeTurnId` the failed turn, on the
/// live process, drops it: the message goes once, and the earlier turn is kept. botvisor reads
/// the failed turn's cut as it does a killed one's (`runtime::codex::taken`).
#[cfg_attr(
    botvisor_skip_codex,
    ignore = "BOTVISOR_TEST_CODEX_BIN not set: no real Codex to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_turn_stays_in_the_thread_until_thread_revert_drops_it() {
    use botvisor::runtime::Cut;
    use botvisor::runtime::codex::{rollout, taken};
    let failing = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let f = failing.clone();
    let script: Script = std::sync::Arc::new(move |req: &ResponsesRequest| {
        if f.load(std::sync::atomic::Ordering::SeqCst) {
            Reply::Status {
                status: 500,
                body: json!({"error": {"message": "stand-in failure", "type": "server_error"}}),
            }
        } else {
            Reply::Text(format!("Hello! You said: {}", req.last_user_text))
        }
    });
    let Some(s) = Setup::start(script).await else {
        return;
    };
    let fail = |on: bool| failing.store(on, std::sync::atomic::Ordering::SeqCst);
    let mut codex = s.opened().await;
    let thread = codex
        .start_thread(json!({"cwd": s.env.work.to_str().unwrap()}))
        .await;
    codex.start_turn(&thread, "warm up").await;
    codex.turn_completed().await;
    let user_texts = |r: Option<ResponsesRequest>| r.map(|r| r.user_texts()).unwrap_or_default();
    // Failed, then sent again: two user messages.
    fail(true);
    codex.start_turn(&thread, "kept job").await;
    assert_eq!(
        codex.turn_completed().await.pointer("/params/turn/status"),
        Some(&json!("failed"))
    );
    fail(false);
    codex.start_turn(&thread, "kept job").await;
    codex.turn_completed().await;
    let kept = user_texts(s.api.requests().pop());
    println!("failed turn: the request after a resend: {kept:?}");
    assert_eq!(
        kept.iter().filter(|t| *t == "kept job").count(),
        2,
        "{}: {kept:?}",
        changed(&s.bin, "a failed turn's message stays in the thread")
    );
    // Failed again: read back, reverted on the live process, sent again: once.
    fail(true);
    let since = std::time::SystemTime::now();
    let doomed = codex.start_turn(&thread, "reverted job").await;
    codex.turn_completed().await;
    fail(false);
    let history = rollout::history(&s.codex_home, &thread).expect("a history");
    let read = taken::read_lines(history.lines(), "reverted job", since)
        .expect("the failed turn's message is in the rollout");
    println!("failed turn: read back as {read:?}");
    assert_eq!(
        read.cut,
        Some(Cut::BeforeTurn {
            turn_id: doomed.clone()
        })
    );
    assert!(!read.answered && !read.tool_called, "{read:?}");
    let reverted = codex.revert(&thread, &doomed).await;
    assert!(
        reverted.get("error").is_none(),
        "{}: {reverted}",
        changed(&s.bin, "thread/revert drops a failed turn")
    );
    codex.start_turn(&thread, "reverted job").await;
    codex.turn_completed().await;
    let once = user_texts(s.api.requests().pop());
    println!("failed turn: the request after thread/revert: {once:?}");
    assert_eq!(
        once.iter().filter(|t| *t == "reverted job").count(),
        1,
        "{}: {once:?}",
        changed(
            &s.bin,
            "thread/revert leaves the failed turn out of the next request"
        )
    );
    assert!(once.iter().any(|t| t == "warm up"), "{once:?}");
    codex.close().await;
}

#[cfg_attr(
    botvisor_skip_codex,
    ignore = "BOTVISOR_TEST_CODEX_BIN not set: no real Codex to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_codex_home_is_refused_at_start() {
    let Some(bin) = codex_bin() else { return };
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope");
    let out = std::process::Command::new(&bin)
        .arg("app-server")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", dir.path())
        .env("CODEX_HOME", &missing)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("missing CODEX_HOME: {:?}, stderr: {stderr}", out.status);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr.contains("CODEX_HOME points to") && stderr.contains("does not exist"),
        "{}: {stderr}",
        changed(&bin, "a missing CODEX_HOME exits 1 naming it")
    );
}

#[cfg_attr(
    botvisor_skip_codex,
    ignore = "BOTVISOR_TEST_CODEX_BIN not set: no real Codex to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_usage_limit_is_an_error_that_names_its_reset() {
    // What the Responses API answers a plan whose usage limit is reached (openai/codex's
    // client reads `error.type` `usage_limit_reached` with `plan_type`, `resets_at`,
    // `resets_in_seconds`).
    let resets_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 3600;
    let script: Script = std::sync::Arc::new(move |_| Reply::WithHeaders {
        headers: codex_limit_headers(100, 300, resets_at),
        reply: Box::new(Reply::Status {
            status: 429,
            body: json!({"error": {
                "type": "usage_limit_reached",
                "message": "The usage limit has been reached",
                "plan_type": "plus",
                "resets_at": resets_at,
                "resets_in_seconds": 3600,
            }}),
        }),
    });
    let Some((s, mut codex, _)) = Setup::first_turn(script, "over the limit").await else {
        return;
    };
    let limits = codex.notification("account/rateLimits/updated").await;
    println!("usage limit: account/rateLimits/updated: {limits}");
    assert_eq!(
        limits.pointer("/params/rateLimits/primary"),
        Some(&json!({"resetsAt": resets_at, "usedPercent": 100, "windowDurationMins": 300})),
        "{}",
        changed(
            &s.bin,
            "the x-codex-primary-* headers of the answer are told as account/rateLimits/updated \
             with primary.resetsAt in Unix seconds"
        )
    );
    let error = codex.notification("error").await;
    println!("usage limit: error notification: {error}");
    assert_eq!(
        (
            error.pointer("/params/error/codexErrorInfo"),
            error.pointer("/params/willRetry")
        ),
        (Some(&json!("usageLimitExceeded")), Some(&json!(false))),
        "{}",
        changed(
            &s.bin,
            "a usage_limit_reached 429 is an error with codexErrorInfo usageLimitExceeded, not retried"
        )
    );
    let done = codex.turn_completed().await;
    println!("usage limit: turn/completed: {done}");
    assert_eq!(
        (
            done.pointer("/params/turn/status"),
            done.pointer("/params/turn/error/codexErrorInfo")
        ),
        (Some(&json!("failed")), Some(&json!("usageLimitExceeded"))),
        "{}",
        changed(&s.bin, "the turn over the limit fails with the same error")
    );
    assert_eq!(s.api.requests().len(), 1, "a usage limit is not retried");
    codex.close().await;
}

#[cfg_attr(
    botvisor_skip_codex,
    ignore = "BOTVISOR_TEST_CODEX_BIN not set: no real Codex to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
/// Codex tells tokens, never a cost.
async fn a_turns_token_usage_is_told_last_and_in_total() {
    let Some((s, mut codex, thread)) = Setup::first_turn(echo_script(), "one").await else {
        return;
    };
    codex.turn_completed().await;
    codex.start_turn(&thread, "two").await;
    codex.turn_completed().await;
    let usage: Vec<&Value> = codex
        .seen
        .iter()
        .filter(|v| v["method"] == "thread/tokenUsage/updated")
        .collect();
    println!("token usage: {usage:?}");
    let n = |v: &Value, p: &str| v.pointer(p).and_then(Value::as_u64).unwrap_or(0);
    let lasts: u64 = usage
        .iter()
        .map(|u| n(u, "/params/tokenUsage/last/outputTokens"))
        .sum();
    assert!(
        usage.len() == 2
            && usage.iter().all(|u| u["params"]["turnId"].is_string())
            && n(usage[1], "/params/tokenUsage/total/outputTokens") == lasts
            && lasts > 0,
        "{}",
        changed(
            &s.bin,
            "thread/tokenUsage/updated tells each model request's tokens as tokenUsage.last \
             (with its turnId) and the thread's as tokenUsage.total"
        )
    );
    codex.close().await;
}

/// A key the Responses API refuses: Codex 0.171.0 sends an `error` whose `codexErrorInfo` is
/// `{"httpConnectionFailed": {"httpStatusCode": 401}}` and whose message says "401
/// Unauthorized", not retried, and the turn fails with it (botvisor holds: `login_required`).
#[cfg_attr(
    botvisor_skip_codex,
    ignore = "BOTVISOR_TEST_CODEX_BIN not set: no real Codex to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_key_is_an_error_naming_the_401() {
    let script: Script = std::sync::Arc::new(|_| Reply::Status {
        status: 401,
        body: json!({"error": {"type": "invalid_request_error", "code": "invalid_api_key",
                     "message": "Incorrect API key provided."}}),
    });
    let Some((s, mut codex, _)) = Setup::first_turn(script, "hello").await else {
        return;
    };
    let error = codex.notification("error").await;
    println!("refused key: error notification: {error}");
    assert_eq!(
        (
            error.pointer("/params/error/codexErrorInfo/httpConnectionFailed/httpStatusCode"),
            error.pointer("/params/willRetry")
        ),
        (Some(&json!(401)), Some(&json!(false))),
        "{}",
        changed(
            &s.bin,
            "a 401 is an error notification naming the status, not retried"
        )
    );
    let message = error
        .pointer("/params/error/message")
        .and_then(Value::as_str)
        .unwrap_or_default();
    assert!(
        message.contains("401 Unauthorized"),
        "{}: {message}",
        changed(&s.bin, "the error's message says 401 Unauthorized")
    );
    let done = codex.turn_completed().await;
    assert_eq!(
        done.pointer("/params/turn/status"),
        Some(&json!("failed")),
        "{}",
        changed(&s.bin, "the turn fails")
    );
    codex.close().await;
}

/// A login made outside the running app-server (`codex login` in a terminal, writing
/// `$CODEX_HOME/auth.json`): Codex 0.171.0 tells its client nothing (no `account/updated`, no
/// `account/login/completed`: those come only for a login or logout made through the
/// app-server's own `account/login/start` and `account/logout`, which botvisor never sends), and
/// its `account/read` still answers what it read at its start. So botvisor watches the file and
/// starts the agent again when it changes (`bot/credentials.rs`), rather than wait for a notice.
#[cfg_attr(
    botvisor_skip_codex,
    ignore = "BOTVISOR_TEST_CODEX_BIN not set: no real Codex to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_login_made_elsewhere_is_not_told_to_the_running_app_server() {
    let Some(s) = Setup::start(echo_script()).await else {
        return;
    };
    let mut codex = s.opened().await;
    let id = codex.request("account/read", json!({})).await;
    let before = codex.answer(id).await;
    let login = tokio::process::Command::new(&s.bin)
        .args(["login", "--with-api-key"])
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", s.codex_home.parent().unwrap())
        .env("CODEX_HOME", &s.codex_home)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn codex login");
    let mut login = login;
    let mut stdin = login.stdin.take().unwrap();
    stdin.write_all(b"sk-fresh-key\n").await.unwrap();
    drop(stdin);
    let status = tokio::time::timeout(WAIT, login.wait())
        .await
        .expect("codex login ends")
        .unwrap();
    assert!(status.success(), "codex login --with-api-key: {status}");
    assert!(
        s.codex_home.join("auth.json").exists(),
        "{}",
        changed(&s.bin, "codex login writes $CODEX_HOME/auth.json")
    );
    // Everything the app-server wrote before this answer has been read.
    let id = codex.request("account/read", json!({})).await;
    let after = codex.answer(id).await;
    println!("external login: account/read before {before}, after {after}");
    let notices: Vec<&Value> = codex
        .seen
        .iter()
        .filter(|v| {
            v.get("method")
                .and_then(Value::as_str)
                .is_some_and(|m| m.starts_with("account/") && m != "account/rateLimits/updated")
        })
        .collect();
    assert!(
        notices.is_empty(),
        "{}: {notices:?}",
        changed(&s.bin, "an external login is told to a running app-server")
    );
    assert_eq!(
        before.get("result"),
        after.get("result"),
        "{}",
        changed(&s.bin, "a running app-server rereads auth.json")
    );
    codex.close().await;
}

/// A script that never answers the first request about a message starting with `hang` (a model
/// stopped mid-answer: the turn is killed there) and echoes everything else.
fn hang_once_script() -> Script {
    let hung = std::sync::Arc::new(std::sync::Mutex::new(std::collections::HashSet::new()));
    std::sync::Arc::new(move |req: &ResponsesRequest| {
        let first = req.last_user_text.starts_with("hang")
            && req.function_output.is_none()
            && hung.lock().unwrap().insert(req.last_user_text.clone());
        if first {
            Reply::Never
        } else {
            Reply::Text(format!("Hello! You said: {}", req.last_user_text))
        }
    })
}

/// The rollout's records, one JSON object per line.
fn records(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// One line per record: its kind, the payload's kind and the turn it names.
fn summary(records: &[Value]) -> Vec<String> {
    records
        .iter()
        .map(|r| {
            let p = &r["payload"];
            let turn = p["turn_id"]
                .as_str()
                .or(p["internal_chat_message_metadata_passthrough"]["turn_id"].as_str())
                .unwrap_or("");
            let text = p["content"][0]["text"]
                .as_str()
                .or(p["item"]["type"].as_str())
                .unwrap_or("");
            format!(
                "{} {} {} {} {}",
                r["type"].as_str().unwrap_or("?"),
                p["type"].as_str().unwrap_or(""),
                p["role"].as_str().unwrap_or(""),
                turn,
                text.lines()
                    .next()
                    .unwrap_or("")
                    .chars()
                    .take(40)
                    .collect::<String>()
            )
        })
        .collect()
}

/// The user and assistant texts of a request's `input`, as Codex sent them (not its own
/// context blocks): the conversation the model is given.
fn conversation(req: &ResponsesRequest) -> Vec<String> {
    req.body["input"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|i| i["type"] == "message" && (i["role"] == "user" || i["role"] == "assistant"))
        .flat_map(|i| i["content"].as_array().cloned().unwrap_or_default())
        .filter_map(|b| b["text"].as_str().map(str::to_owned))
        .filter(|t| !t.trim_start().starts_with('<'))
        .collect()
}

/// Runs `codex ARGS` in `s`'s scratch home and work folder, stdin empty: its exit code and what
/// it printed (stdout then stderr).
fn codex_cli(s: &Setup, args: &[&str]) -> (Option<i32>, String) {
    let out = std::process::Command::new(&s.bin)
        .args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", s.codex_home.parent().unwrap())
        .env("CODEX_HOME", &s.codex_home)
        .env("FAKE_API_KEY", "sk-test")
        .env("BOTVISOR_TEST_RUN", &s.env.marker)
        .current_dir(&s.env.work)
        .stdin(Stdio::null())
        .output()
        .expect("run codex");
    (
        out.status.code(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// Issue 25, "every message answered once": what a turn killed while the model answers leaves
/// in the rollout, and how `thread/revert` drops it so that the message sent again reaches the
/// model once. botvisor's reader (`runtime::codex::taken`) and locator (`rollout::find`,
/// `rollout::history`) are checked against what Codex does.
#[cfg_attr(
    botvisor_skip_codex,
    ignore = "BOTVISOR_TEST_CODEX_BIN not set: no real Codex to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_taken_message_is_asked_again_once_after_thread_revert() {
    use botvisor::runtime::Cut;
    use botvisor::runtime::codex::{rollout, taken};
    let Some(s) = Setup::start(hang_once_script()).await else {
        return;
    };
    let cwd = s.env.work.clone();
    let mut codex = s.opened().await;
    let thread = codex
        .start_thread(json!({"cwd": cwd.to_str().unwrap()}))
        .await;
    let first = codex.start_turn(&thread, "hello").await;
    codex.turn_completed().await;
    let doomed = codex.start_turn(&thread, "hang here").await;
    s.api
        .wait_for(|r| r.last_user_text == "hang here", WAIT)
        .await;
    codex.kill().await;

    let files = rollouts(&s.codex_home, &thread);
    assert_eq!(files.len(), 1, "{files:?}");
    let left = records(&files[0]);
    println!("the rollout of a turn killed while the model answers:");
    for line in summary(&left) {
        println!("  {line}");
    }
    let of_turn = |t: &str| -> Vec<&Value> {
        left.iter()
            .filter(|r| {
                r["payload"]["turn_id"] == t
                    || r["payload"]["internal_chat_message_metadata_passthrough"]["turn_id"] == t
            })
            .collect()
    };
    let message = of_turn(&doomed)
        .into_iter()
        .find(|r| r["type"] == "response_item" && r["payload"]["role"] == "user")
        .unwrap_or_else(|| {
            panic!(
                "{}",
                changed(
                    &s.bin,
                    "the message of a killed turn is in the rollout, naming its turn"
                )
            )
        });
    assert_eq!(message["payload"]["content"][0]["text"], "hang here");
    let ends = |t: &str| -> Vec<String> {
        of_turn(t)
            .iter()
            .filter_map(|r| r["payload"]["type"].as_str())
            .filter(|k| matches!(*k, "task_complete" | "turn_aborted"))
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(
        (ends(&first), ends(&doomed)),
        (vec!["task_complete".to_owned()], Vec::new()),
        "{}",
        changed(
            &s.bin,
            "an answered turn ends with task_complete; a killed one with nothing"
        )
    );
    assert!(
        !of_turn(&doomed)
            .iter()
            .any(|r| r["payload"]["role"] == "assistant"
                || r["payload"]["item"]["type"] == "AgentMessage"),
        "no answer of the killed turn"
    );
    // botvisor reads it so.
    let history = rollout::history(&s.codex_home, &thread).expect("a history");
    let read = taken::read_lines(history.lines(), "hang here", std::time::UNIX_EPOCH).unwrap();
    assert_eq!(
        read.cut,
        Some(Cut::BeforeTurn {
            turn_id: doomed.clone()
        })
    );
    assert!(
        !read.answered && !read.tool_called && read.answer.is_empty(),
        "{read:?}"
    );
    let hello = taken::read_lines(history.lines(), "hello", std::time::UNIX_EPOCH).unwrap();
    assert!(hello.answered, "{hello:?}");
    assert_eq!(hello.answer[0].payload["text"], "Hello! You said: hello");

    // Resumed, the thread names the killed turn last; `thread/revert` drops it.
    let mut codex = s.opened().await;
    let resumed = codex.resume(&thread, &cwd).await;
    let turns: Vec<(String, String)> = resumed["result"]["thread"]["turns"]
        .as_array()
        .unwrap_or_else(|| panic!("thread/resume answers the thread's turns: {resumed}"))
        .iter()
        .map(|t| {
            (
                t["id"].as_str().unwrap().to_owned(),
                t["status"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    println!(
        "thread/resume: historyMode {}, turns {turns:?}",
        resumed["result"]["thread"]["historyMode"]
    );
    assert_eq!(resumed["result"]["thread"]["historyMode"], "paginated");
    assert_eq!(
        turns,
        vec![
            (first.clone(), "completed".to_owned()),
            (doomed.clone(), "interrupted".to_owned())
        ],
        "{}",
        changed(&s.bin, "a killed turn is the thread's last, interrupted")
    );
    let reverted = codex.revert(&thread, &doomed).await;
    let path = reverted["result"]["thread"]["path"]
        .as_str()
        .unwrap_or_else(|| {
            panic!(
                "{}: {reverted}",
                changed(&s.bin, "thread/revert answers the thread with its path")
            )
        })
        .to_owned();
    println!("thread/revert: the thread's file is now {path}");
    let name = Path::new(&path)
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    assert!(
        name.contains(&format!("-{thread}_")) && name.ends_with(".jsonl"),
        "{}: {name}",
        changed(
            &s.bin,
            "a revert starts a segment rollout-…-<thread>_<segment>.jsonl"
        )
    );
    let meta = &records(Path::new(&path))[0];
    println!(
        "its first line's history_base: {}",
        meta["payload"]["history_base"]
    );
    assert_eq!(meta["payload"]["history_base"]["thread_id"], json!(thread));
    assert_eq!(
        rollout::find(&s.codex_home, &thread),
        Some(PathBuf::from(&path)),
        "botvisor finds the file Codex continues"
    );
    let again = codex.revert(&thread, &doomed).await;
    println!("thread/revert of a turn dropped already: {again}");
    assert_eq!(
        again["error"]["message"],
        json!(format!("turn not found: {doomed}")),
        "{}",
        changed(
            &s.bin,
            "thread/revert of an unknown turn: `turn not found: <id>`"
        )
    );
    let before = s.api.requests().len();
    let redo = codex.start_turn(&thread, "hang here").await;
    codex.turn_completed().await;
    let sent = &s.api.requests()[before..];
    assert_eq!(sent.len(), 1);
    let seen = conversation(&sent[0]);
    println!("the message sent again after the revert, as the model got it: {seen:?}");
    assert_eq!(
        seen,
        ["hello", "Hello! You said: hello", "hang here"],
        "{}",
        changed(
            &s.bin,
            "after thread/revert the model gets the message once"
        )
    );
    codex.close().await;

    // A later plain resume continues the segment: the dropped attempt stays out. Before it,
    // this process has not loaded the thread: refused.
    let mut codex = s.opened().await;
    let unloaded = codex.revert(&thread, &redo).await;
    println!("thread/revert of a thread not loaded: {unloaded}");
    assert_eq!(
        unloaded["error"]["message"],
        json!(format!("thread not found: {thread}"))
    );
    let resumed = codex.resume(&thread, &cwd).await;
    assert_eq!(resumed["result"]["thread"]["path"], json!(path));
    let ids: Vec<&str> = resumed["result"]["thread"]["turns"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["id"].as_str())
        .collect();
    assert_eq!(ids, [first.as_str(), redo.as_str()]);
    codex.start_turn(&thread, "after").await;
    codex.turn_completed().await;
    let seen = conversation(s.api.requests().last().unwrap());
    println!("a plain resume after it, as the model got it: {seen:?}");
    assert_eq!(
        seen,
        [
            "hello",
            "Hello! You said: hello",
            "hang here",
            "Hello! You said: hang here",
            "after"
        ]
    );
    let history = rollout::history(&s.codex_home, &thread).unwrap();
    let read = taken::read_lines(history.lines(), "hang here", std::time::UNIX_EPOCH).unwrap();
    assert!(
        read.answered,
        "the message's newest turn, through the segment: {read:?}"
    );
    assert_eq!(read.cut, Some(Cut::BeforeTurn { turn_id: redo }));

    // Refused: a thread of the legacy history.
    let legacy = codex
        .start_thread(json!({"cwd": cwd.to_str().unwrap(), "historyMode": "legacy"}))
        .await;
    codex.start_turn(&legacy, "old one").await;
    codex.turn_completed().await;
    let old = codex.start_turn(&legacy, "old two").await;
    codex.turn_completed().await;
    let refused = codex.revert(&legacy, &old).await;
    println!("thread/revert of a legacy thread: {refused}");
    assert_eq!(
        (
            refused["error"]["code"].clone(),
            refused["error"]["message"].clone()
        ),
        (
            json!(-32600),
            json!("thread/revert only supports paginated threads")
        ),
        "{}",
        changed(&s.bin, "thread/revert refuses a legacy thread")
    );

    // Without a revert, a resume gives the model the unanswered attempt again.
    let plain = codex
        .start_thread(json!({"cwd": cwd.to_str().unwrap()}))
        .await;
    codex.start_turn(&plain, "p1").await;
    codex.turn_completed().await;
    codex.start_turn(&plain, "hang plain").await;
    s.api
        .wait_for(|r| r.last_user_text == "hang plain", WAIT)
        .await;
    codex.kill().await;
    let mut codex = s.opened().await;
    assert!(codex.resume(&plain, &cwd).await.get("result").is_some());
    codex.start_turn(&plain, "p2").await;
    codex.turn_completed().await;
    let seen = conversation(s.api.requests().last().unwrap());
    println!("a plain resume after a killed turn, as the model got it: {seen:?}");
    assert_eq!(
        seen,
        ["p1", "Hello! You said: p1", "hang plain", "p2"],
        "{}",
        changed(
            &s.bin,
            "a plain resume sends the killed turn's message, unanswered"
        )
    );
    codex.close().await;
}

/// Sets the modification time of `path` to `days` days ago: a rollout not written since.
fn age(path: &Path, days: u64) {
    let then = std::time::SystemTime::now() - Duration::from_secs(days * 86_400);
    std::fs::File::options()
        .write(true)
        .open(path)
        .unwrap()
        .set_modified(then)
        .unwrap();
}

/// Waits (up to [`WAIT`]) until `path` exists.
async fn exists_soon(path: &Path) -> bool {
    tokio::time::timeout(WAIT, async {
        while !path.exists() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .is_ok()
}

/// Whether Codex's index (`state_5.sqlite`, read only) has a row for `thread`.
fn indexed(codex_home: &Path, thread: &str) -> bool {
    let db = rusqlite::Connection::open_with_flags(
        codex_home.join("state_5.sqlite"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .expect("Codex's state_5.sqlite");
    db.query_row(
        "SELECT COUNT(*) FROM threads WHERE id = ?1",
        [thread],
        |r| r.get::<_, i64>(0),
    )
    .unwrap()
        > 0
}

/// Issue 25, "the CLI deletes old conversations by itself": what Codex 0.171.0 does to old
/// rollouts and what a resume then needs. It deletes none by itself: `rollout/compress` (a
/// client's request; its background pass is the under-development feature
/// `local_thread_store_compression`, off by default) compresses a rollout not written for about a
/// week to `<name>.zst`, and a resume writes the `.jsonl` back byte for byte; `codex delete`
/// removes the rollout and its index row, and the rollout put back alone resumes (the row is
/// rebuilt), as it does with the whole index gone; `codex archive` moves it to
/// `archived_sessions/`, and a resume is refused until it is unarchived.
#[cfg_attr(
    botvisor_skip_codex,
    ignore = "BOTVISOR_TEST_CODEX_BIN not set: no real Codex to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_clean_up_compresses_cold_rollouts_and_deletes_only_when_asked() {
    use botvisor::runtime::codex::rollout;
    let Some(s) = Setup::start(echo_script()).await else {
        return;
    };
    let cwd = s.env.work.clone();
    let mut codex = s.opened().await;
    let mut threads = Vec::new();
    for name in ["cold", "warm", "deleted", "archived"] {
        let thread = codex
            .start_thread(json!({"cwd": cwd.to_str().unwrap()}))
            .await;
        codex.start_turn(&thread, &format!("{name} one")).await;
        codex.turn_completed().await;
        threads.push(thread);
    }
    codex.close().await;
    let [cold, warm, deleted, archived] = threads.as_slice() else {
        unreachable!()
    };
    let file = |t: &str| rollouts(&s.codex_home, t).pop().expect("a rollout");
    let (cold_file, warm_file) = (file(cold), file(warm));
    let cold_bytes = std::fs::read(&cold_file).unwrap();
    age(&cold_file, 8);
    age(&warm_file, 3);

    // `rollout/compress` compresses the cold one only.
    let mut codex = s.opened().await;
    let id = codex.request("rollout/compress", Value::Null).await;
    let answer = codex.answer(id).await;
    assert_eq!(answer["result"], json!({}), "{answer}");
    let mut zst = cold_file.clone().into_os_string();
    zst.push(".zst");
    let zst = PathBuf::from(zst);
    assert!(
        exists_soon(&zst).await,
        "{}",
        changed(
            &s.bin,
            "rollout/compress writes <rollout>.zst for a rollout 8 days old"
        )
    );
    codex.close().await;
    println!(
        "after rollout/compress: {:?}",
        std::fs::read_dir(cold_file.parent().unwrap())
            .unwrap()
            .filter_map(Result::ok)
            .map(|e| e.file_name())
            .collect::<Vec<_>>()
    );
    assert!(!cold_file.exists(), "the .jsonl is replaced");
    assert!(warm_file.exists(), "a rollout 3 days old is left as it is");
    assert_eq!(
        rollout::find(&s.codex_home, cold),
        Some(zst.clone()),
        "botvisor finds a compressed rollout"
    );

    // A resume writes the .jsonl back, byte for byte.
    let mut codex = s.opened().await;
    let resumed = codex.resume(cold, &cwd).await;
    assert_eq!(
        resumed["result"]["thread"]["path"],
        json!(cold_file.to_str().unwrap()),
        "{}: {resumed}",
        changed(
            &s.bin,
            "thread/resume of a compressed rollout writes the .jsonl back"
        )
    );
    assert_eq!(std::fs::read(&cold_file).unwrap(), cold_bytes);
    assert!(!zst.exists());
    codex.close().await;

    // `codex delete`: the rollout and its row gone; the rollout put back alone resumes.
    let deleted_file = file(deleted);
    let deleted_bytes = std::fs::read(&deleted_file).unwrap();
    assert!(indexed(&s.codex_home, deleted));
    let (code, said) = codex_cli(&s, &["delete", "--force", deleted]);
    println!("codex delete --force: {code:?} {}", said.trim());
    assert_eq!(code, Some(0), "{said}");
    assert!(!deleted_file.exists() && !indexed(&s.codex_home, deleted));
    let mut codex = s.opened().await;
    let gone = codex.resume(deleted, &cwd).await;
    assert_eq!(
        gone["error"]["message"],
        json!(format!("no rollout found for thread id {deleted}"))
    );
    std::fs::write(&deleted_file, &deleted_bytes).unwrap();
    let back = codex.resume(deleted, &cwd).await;
    println!(
        "its rollout put back, without its row: {}",
        back["result"]["thread"]["path"]
    );
    assert_eq!(
        back["result"]["thread"]["path"],
        json!(deleted_file.to_str().unwrap()),
        "{}: {back}",
        changed(&s.bin, "a rollout put back resumes without its index row")
    );
    assert!(indexed(&s.codex_home, deleted), "the row is rebuilt");
    codex.start_turn(deleted, "deleted two").await;
    codex.turn_completed().await;
    assert_eq!(
        conversation(s.api.requests().last().unwrap()),
        ["deleted one", "Hello! You said: deleted one", "deleted two"]
    );
    codex.close().await;

    // The whole index gone: rebuilt from the rollouts.
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(s.codex_home.join(format!("state_5.sqlite{suffix}")));
    }
    let mut codex = s.opened().await;
    let rebuilt = codex.resume(warm, &cwd).await;
    assert_eq!(
        rebuilt["result"]["thread"]["path"],
        json!(warm_file.to_str().unwrap()),
        "{}: {rebuilt}",
        changed(&s.bin, "a rollout resumes with state_5.sqlite gone")
    );
    codex.close().await;

    // `codex archive`: moved, and refused until unarchived, even with a copy put back.
    let archived_file = file(archived);
    let (code, said) = codex_cli(&s, &["archive", archived]);
    assert_eq!(code, Some(0), "{said}");
    let moved = rollout::archived(&s.codex_home, archived).expect("in archived_sessions/");
    assert_eq!(rollout::find(&s.codex_home, archived), Some(moved.clone()));
    let mut codex = s.opened().await;
    let refused = codex.resume(archived, &cwd).await;
    println!("thread/resume of an archived thread: {refused}");
    let words = format!(
        "session {archived} is archived. Run `codex unarchive {archived}` to unarchive it first."
    );
    assert_eq!(refused["error"]["message"], json!(words));
    std::fs::copy(&moved, &archived_file).unwrap();
    let still = codex.resume(archived, &cwd).await;
    assert_eq!(
        still["error"]["message"],
        json!(words),
        "a copy put back is refused too"
    );
    codex.close().await;
}

/// Issue 25, "another process on the same conversation": a thread loaded by one process
/// (an app-server, `codex exec resume`) is refused to every other, and the kernel's lock table
/// names the holder (`runtime::codex::writer::holder`).
#[cfg_attr(
    botvisor_skip_codex,
    ignore = "BOTVISOR_TEST_CODEX_BIN not set: no real Codex to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_writer_is_refused_and_the_lock_names_its_holder() {
    use botvisor::runtime::codex::writer;
    let Some(s) = Setup::start(hang_once_script()).await else {
        return;
    };
    let cwd = s.env.work.clone();
    let mut first = s.opened().await;
    let thread = first
        .start_thread(json!({"cwd": cwd.to_str().unwrap()}))
        .await;
    let lock = writer::lock_file(&s.codex_home, &thread);
    assert!(
        lock.is_file() && std::fs::metadata(&lock).unwrap().len() == 0,
        "{}",
        changed(
            &s.bin,
            "thread/start makes an empty thread-writer-locks/<thread>.lock"
        )
    );
    first.start_turn(&thread, "hello").await;
    first.turn_completed().await;
    let held = writer::holder(&s.codex_home, &thread);
    println!("the holder of a thread an app-server runs: {held:?}");
    let held = held.unwrap_or_else(|| {
        panic!(
            "{}",
            changed(&s.bin, "the lock is a flock of the app-server")
        )
    });
    assert_eq!((held.pid, held.what), (first.pid(), "a Codex app-server"));

    // While it runs a turn: another app-server, and `codex exec resume`, are refused.
    first.start_turn(&thread, "hang first").await;
    s.api
        .wait_for(|r| r.last_user_text == "hang first", WAIT)
        .await;
    let mut second = s.opened().await;
    let refused = second.resume(&thread, &cwd).await;
    println!("a second app-server's thread/resume: {refused}");
    assert_eq!(
        (
            refused["error"]["code"].clone(),
            refused["error"]["message"].clone()
        ),
        (
            json!(-32600),
            json!(format!("thread {thread} already has an active writer"))
        ),
        "{}",
        changed(
            &s.bin,
            "a second writer is refused: `thread <id> already has an active writer`"
        )
    );
    assert!(writer::held_elsewhere(
        refused["error"]["message"].as_str().unwrap()
    ));
    let (code, said) = codex_cli(
        &s,
        &[
            "exec",
            "--skip-git-repo-check",
            "resume",
            &thread,
            "from exec",
        ],
    );
    println!(
        "codex exec resume meanwhile: {code:?} {}",
        said.lines().last().unwrap_or("")
    );
    assert!(
        code == Some(1) && said.contains("already has an active writer"),
        "{said}"
    );

    // Killed, the holder leaves the file and no lock: the thread is free.
    first.kill().await;
    assert!(lock.exists(), "a killed holder leaves the file");
    assert_eq!(writer::holder(&s.codex_home, &thread), None);
    let resumed = second.resume(&thread, &cwd).await;
    assert!(resumed.get("result").is_some(), "{resumed}");
    assert_eq!(
        writer::holder(&s.codex_home, &thread).map(|h| h.pid),
        Some(second.pid())
    );
    second.close().await;
    assert!(!lock.exists(), "a gentle exit removes the file");

    // `codex exec resume` holds it too, and is named.
    let mut exec = tokio::process::Command::new(&s.bin)
        .args([
            "exec",
            "--skip-git-repo-check",
            "resume",
            &thread,
            "hang exec",
        ])
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", s.codex_home.parent().unwrap())
        .env("CODEX_HOME", &s.codex_home)
        .env("FAKE_API_KEY", "sk-test")
        .env("BOTVISOR_TEST_RUN", &s.env.marker)
        .current_dir(&cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn codex exec");
    s.api
        .wait_for(|r| r.last_user_text == "hang exec", WAIT)
        .await;
    let held = writer::holder(&s.codex_home, &thread).expect("codex exec holds it");
    println!("the holder while codex exec resume runs: {held:?}");
    assert_eq!((Some(held.pid), held.what), (exec.id(), "codex exec"));
    let mut third = s.opened().await;
    let refused = third.resume(&thread, &cwd).await;
    assert!(
        writer::held_elsewhere(refused["error"]["message"].as_str().unwrap_or("")),
        "{refused}"
    );
    exec.kill().await.unwrap();
    third.close().await;
}

/// Issue 30, "allow for the session" and "always": what an approval request offers (0.171.0: its
/// `availableDecisions` list `accept`, the execpolicy amendment and `cancel`, and
/// `proposedExecpolicyAmendment` the rule), and what botvisor's scopes send
/// (runtime::codex::scopes): `acceptForSession` (`session`, taken though not listed) lets the same
/// command run unasked in that process; the next process asks again; the proposed execpolicy rule
/// (`always`) lets it run unasked in the processes after.
#[cfg_attr(
    botvisor_skip_codex,
    ignore = "BOTVISOR_TEST_CODEX_BIN not set: no real Codex to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_accept_for_session_is_not_asked_again() {
    use botvisor::runtime::Scope;
    let Some(s) = Setup::start(support::responses_api::shell_script()).await else {
        return;
    };
    let marker_file = s.env.work.join("ran");
    let mut codex = s.opened().await;
    let thread = codex
        .start_thread(json!({"cwd": s.env.work.to_str().unwrap(),
                             "approvalPolicy": "on-request", "sandbox": "workspace-write"}))
        .await;
    let message = format!("run escalated: touch {}", marker_file.display());
    codex.start_turn(&thread, &message).await;
    let ask = codex
        .until("item/commandExecution/requestApproval", |v| {
            v["method"] == "item/commandExecution/requestApproval"
        })
        .await;
    let params = &ask["params"];
    println!(
        "the request offers: availableDecisions {}, proposedExecpolicyAmendment {}",
        params["availableDecisions"], params["proposedExecpolicyAmendment"]
    );
    let request = json!({"codex": params});
    let scopes = botvisor::runtime::codex::scopes::scopes(&request);
    println!("botvisor offers: {scopes:?}");
    let decision = botvisor::runtime::codex::scopes::grant(&request, Scope::Session)
        .permissions
        .expect("a decision");
    assert_eq!(decision, json!("acceptForSession"));
    codex
        .write(json!({"id": ask["id"], "result": {"decision": decision}}))
        .await;
    let done = codex.turn_completed().await;
    assert_eq!(
        done.pointer("/params/turn/status"),
        Some(&json!("completed"))
    );
    assert!(
        marker_file.exists(),
        "{}",
        changed(&s.bin, "acceptForSession runs the command")
    );
    std::fs::remove_file(&marker_file).unwrap();

    // The same command again, in the same thread.
    codex.start_turn(&thread, &message).await;
    let next = codex
        .until("a request or the turn's end", |v| {
            v["method"] == "item/commandExecution/requestApproval"
                || v["method"] == "turn/completed"
        })
        .await;
    let asked_again = next["method"] == "item/commandExecution/requestApproval";
    println!("the same command again after acceptForSession: asked {asked_again}");
    if asked_again {
        codex
            .write(json!({"id": next["id"], "result": {"decision": "accept"}}))
            .await;
        codex.turn_completed().await;
    }
    assert!(
        !asked_again && marker_file.exists(),
        "{}",
        changed(
            &s.bin,
            "the same command, accepted for the session, runs again without asking"
        )
    );
    codex.close().await;

    // The next app-server process asks again; answered with the proposed execpolicy rule
    // (`always`), the one after it does not.
    let mut asked_in = Vec::new();
    for scope in [Scope::Always, Scope::Once] {
        std::fs::remove_file(&marker_file).ok();
        let mut codex = s.opened().await;
        let thread = codex
            .start_thread(json!({"cwd": s.env.work.to_str().unwrap(),
                                 "approvalPolicy": "on-request", "sandbox": "workspace-write"}))
            .await;
        codex.start_turn(&thread, &message).await;
        let next = codex
            .until("a request or the turn's end", |v| {
                v["method"] == "item/commandExecution/requestApproval"
                    || v["method"] == "turn/completed"
            })
            .await;
        let asked = next["method"] == "item/commandExecution/requestApproval";
        asked_in.push(asked);
        if asked {
            let request = json!({"codex": next["params"]});
            let decision = botvisor::runtime::codex::scopes::grant(&request, scope)
                .permissions
                .unwrap_or(json!("accept"));
            println!("answered {decision}");
            codex
                .write(json!({"id": next["id"], "result": {"decision": decision}}))
                .await;
            codex.turn_completed().await;
        }
        codex.close().await;
    }
    println!("asked in the next process, then after the execpolicy rule: {asked_in:?}");
    assert_eq!(
        asked_in,
        [true, false],
        "{}",
        changed(
            &s.bin,
            "acceptForSession ends with its process; an accepted execpolicy rule outlives it"
        )
    );
}

/// Issue 46: how far each decision reaches for a command with other arguments. 0.171.0:
/// `acceptForSession` covers only the exact command (`touch` on another file asks again in the
/// same process); an execpolicy rule of the program alone (`["touch"]`, a prefix shorter than the
/// proposed one) is taken, covers the program with any arguments, and outlives the process
/// (written to `$CODEX_HOME/rules/`).
#[cfg_attr(
    botvisor_skip_codex,
    ignore = "BOTVISOR_TEST_CODEX_BIN not set: no real Codex to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_of_the_program_alone_covers_its_other_arguments() {
    let Some(s) = Setup::start(support::responses_api::shell_script()).await else {
        return;
    };
    let file = |n: &str| s.env.work.join(n);
    let settings = json!({"cwd": s.env.work.to_str().unwrap(), "approvalPolicy": "on-request",
                          "sandbox": "workspace-write"});
    // Runs `touch NAME` escalated; answers a request with `decision(params)`; says whether it
    // was asked.
    async fn touch(
        codex: &mut AppServer,
        thread: &str,
        path: &Path,
        decision: impl Fn(&Value) -> Value,
    ) -> bool {
        codex
            .start_turn(thread, &format!("run escalated: touch {}", path.display()))
            .await;
        let next = codex
            .until("a request or the turn's end", |v| {
                v["method"] == "item/commandExecution/requestApproval"
                    || v["method"] == "turn/completed"
            })
            .await;
        let asked = next["method"] == "item/commandExecution/requestApproval";
        if asked {
            println!("asked: {}", next["params"]);
            codex
                .write(json!({"id": next["id"], "result": {"decision": decision(&next["params"])}}))
                .await;
            codex.turn_completed().await;
        }
        assert!(path.exists(), "touch {} ran", path.display());
        asked
    }
    use botvisor::runtime::Scope;
    use botvisor::runtime::codex::scopes;
    // What botvisor sends for a scope, as RespondPermission would.
    let decided = |scope: Scope| {
        move |params: &Value| {
            scopes::grant(&json!({"codex": params}), scope)
                .permissions
                .unwrap_or(json!("accept"))
        }
    };
    let mut codex = s.opened().await;
    let thread = codex.start_thread(settings.clone()).await;
    let a = touch(&mut codex, &thread, &file("a"), decided(Scope::Session)).await;
    let b = touch(&mut codex, &thread, &file("b"), decided(Scope::Program)).await;
    let c = touch(&mut codex, &thread, &file("c"), decided(Scope::Once)).await;
    codex.close().await;
    let mut codex = s.opened().await;
    let thread = codex.start_thread(settings.clone()).await;
    let d = touch(&mut codex, &thread, &file("d"), decided(Scope::Once)).await;
    codex.close().await;
    let rules =
        std::fs::read_to_string(s.codex_home.join("rules/default.rules")).unwrap_or_default();
    println!(
        "asked: a {a}, b after a session allow of a {b}, c after the program's rule {c}, d in \
         the next process {d}; rules: {rules}"
    );
    assert!(
        a && b,
        "{}",
        changed(
            &s.bin,
            "acceptForSession covers the exact command only: touch on another file asks again"
        )
    );
    assert!(
        !c && !d,
        "{}",
        changed(
            &s.bin,
            "an execpolicy rule of the program alone covers it with any arguments, beyond the \
             process"
        )
    );
    assert!(
        rules.contains(r#"prefix_rule(pattern=["touch"], decision="allow")"#),
        "{}: {rules}",
        changed(
            &s.bin,
            "the rule is kept in $CODEX_HOME/rules/default.rules"
        )
    );
}

/// Issue 46 (`GetLogin`, `botvisorctl doctor`): the built-in `openai` provider takes its key from
/// Codex's own login (`$CODEX_HOME/auth.json`, `codex login`), not from `OPENAI_API_KEY` in its
/// environment: with only that variable, the request to the model goes without `Authorization`.
/// So a Codex bot's login is `auth.json`, or the variable its model provider's `env_key` names
/// (runtime::codex::config::ProviderKey).
#[cfg_attr(
    botvisor_skip_codex,
    ignore = "BOTVISOR_TEST_CODEX_BIN not set: no real Codex to test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_builtin_provider_takes_no_key_from_the_environment() {
    let Some(bin) = codex_bin() else { return };
    let env = TestEnv::new().await;
    let api = ResponsesApi::start(echo_script()).await;
    let home = env.home.join("codex-home");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(
        home.join("config.toml"),
        format!(
            "openai_base_url = \"{}\"\ncheck_for_update_on_startup = false\n\
             [analytics]\nenabled = false\n",
            api.base_url
        ),
    )
    .unwrap();
    let mut codex = AppServer::spawn_with(
        &bin,
        &home,
        &env.work,
        &env.marker,
        &[("OPENAI_API_KEY", "sk-from-the-environment")],
    );
    codex.handshake(true).await;
    let thread = codex
        .start_thread(json!({"cwd": env.work.to_str().unwrap()}))
        .await;
    codex.start_turn(&thread, "hello").await;
    api.wait_for(|_| true, WAIT).await;
    let credentials: Vec<Option<String>> =
        api.requests().into_iter().map(|r| r.credential).collect();
    println!("the requests' credentials: {credentials:?}");
    assert!(
        credentials.iter().all(Option::is_none),
        "{}: {credentials:?}",
        changed(
            &bin,
            "OPENAI_API_KEY in the environment is not the built-in provider's key"
        )
    );
    codex.kill().await;
}
