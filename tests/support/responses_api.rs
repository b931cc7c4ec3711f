//! A loopback stand-in for the OpenAI Responses API, enough for the real Codex CLI to run
//! offline (codex-facts.md, "Pointing it at a loopback stand-in"), and the scratch `CODEX_HOME`
//! that points Codex at it (a custom `model_provider`: `OPENAI_BASE_URL` is ignored by 0.171.0).
//!
//! `POST /v1/responses` answers with the SSE records Codex reads (`event: <type>\ndata:
//! <json>\n\n`). What it answers is decided by a [`Script`] from the request, as for the Messages
//! stand-in ([`super::stand_in_api`]): text, text streamed in pieces, a shell call
//! (`exec_command`, optionally asking for escalation so that a policy `on-request` makes Codex ask
//! for approval), a call of any other function tool Codex offers (an MCP server's tool:
//! [`mcp_call`]), an HTTP error, a delayed answer, or none at all.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};

/// What the stand-in saw of one request.
#[derive(Debug, Clone)]
pub struct ResponsesRequest {
    /// The text of the last `user` message in `input` (its last `input_text` block that is not
    /// Codex's own `<environment_context>` or instructions).
    pub last_user_text: String,
    /// The output of a shell call, when the last input item is a `function_call_output`:
    /// `(call_id, output)`.
    pub function_output: Option<(String, String)>,
    /// The `model` the request names.
    pub model: String,
    /// The credential it carried: its `Authorization` header without `Bearer ` (`None`: none).
    pub credential: Option<String>,
    /// The whole body.
    pub body: Value,
}

/// One answer.
#[derive(Debug, Clone)]
pub enum Reply {
    /// An assistant message, its text also streamed as one delta.
    Text(String),
    /// An assistant message streamed in pieces, one every `every`; the stream ends early if
    /// Codex goes away (an interrupt).
    SlowText {
        /// The pieces.
        chunks: Vec<String>,
        /// The pause before each piece.
        every: std::time::Duration,
    },
    /// [`Reply::SlowText`], then a pause of `end_after` before the message is done
    /// (`response.output_item.done`, then `response.completed`): every piece is out and the
    /// answer is not yet whole.
    SlowTextEndingLate {
        /// The pieces.
        chunks: Vec<String>,
        /// The pause before each piece.
        every: std::time::Duration,
        /// The pause after the last piece, before the end.
        end_after: std::time::Duration,
    },
    /// A call of Codex's shell tool `exec_command` with `cmd`. With `escalate`, the call asks to
    /// run outside the sandbox (`"sandbox_permissions":"require_escalated"` and a
    /// `justification`): under the approval policy `on-request` and a sandbox, Codex asks the
    /// client first.
    Exec {
        /// The shell command.
        cmd: String,
        /// Ask to run outside the sandbox.
        escalate: bool,
    },
    /// A call of any function tool the request offers: `name` with the JSON `arguments`, inside
    /// the tool namespace `namespace` when given. Codex 0.171.0 offers an MCP server's tools as
    /// a `namespace` tool `mcp__<server>` holding one function per tool under the tool's own
    /// name ([`mcp_call`]).
    Call {
        /// The namespace (`mcp__botvisor`), or none for a top-level function.
        namespace: Option<String>,
        /// The function's name.
        name: String,
        /// Its arguments.
        arguments: Value,
    },
    /// An HTTP error: `status` with the JSON `body`.
    Status {
        /// The HTTP status, for example 500.
        status: u16,
        /// The body.
        body: Value,
    },
    /// `reply`, after a pause of `after` before the first byte.
    Delayed {
        /// The pause.
        after: std::time::Duration,
        /// The answer.
        reply: Box<Reply>,
    },
    /// The request is accepted (status 200, SSE headers) and nothing more is ever sent: a model
    /// API that stopped answering.
    Never,
    /// `reply`, with these response headers besides its own: what the real API adds, such as
    /// a plan's `x-codex-primary-*` usage headers ([`codex_limit_headers`]).
    WithHeaders {
        /// Header names and values.
        headers: Vec<(String, String)>,
        /// The answer.
        reply: Box<Reply>,
    },
}

/// A call of the tool `tool` of the MCP server Codex's config names `server` (its
/// `[mcp_servers.<server>]`), with `arguments`.
pub fn mcp_call(server: &str, tool: &str, arguments: Value) -> Reply {
    Reply::Call {
        namespace: Some(format!("mcp__{server}")),
        name: tool.to_owned(),
        arguments,
    }
}

/// What the Responses API answers a ChatGPT plan with about its usage windows: the primary
/// window (`window_minutes` long) is `used_percent` used and resets at `reset_at` (Unix
/// seconds).
pub fn codex_limit_headers(
    used_percent: u32,
    window_minutes: u32,
    reset_at: u64,
) -> Vec<(String, String)> {
    [
        ("x-codex-primary-used-percent", used_percent.to_string()),
        ("x-codex-primary-window-minutes", window_minutes.to_string()),
        ("x-codex-primary-reset-at", reset_at.to_string()),
    ]
    .into_iter()
    .map(|(n, v)| (n.to_owned(), v))
    .collect()
}

/// What the Responses API answers a ChatGPT plan over its usage limit, which resets at `reset`
/// (Unix seconds; `now` the time of the request): a 429 `usage_limit_reached` with the reset,
/// and the plan's headers saying the five-hour window is used up
/// (`facts::codex::a_usage_limit_is_an_error_that_names_its_reset`).
pub fn usage_limit_refusal(reset: u64, now: u64) -> Reply {
    Reply::WithHeaders {
        headers: codex_limit_headers(100, 300, reset),
        reply: Box::new(Reply::Status {
            status: 429,
            body: json!({"error": {
                "type": "usage_limit_reached",
                "message": "The usage limit has been reached",
                "plan_type": "plus",
                "resets_at": reset,
                "resets_in_seconds": reset.saturating_sub(now),
            }}),
        }),
    }
}

/// What the Responses API answers a key it refuses: 401 `invalid_api_key`.
pub fn key_refused() -> Reply {
    Reply::Status {
        status: 401,
        body: json!({"error": {"type": "invalid_request_error", "code": "invalid_api_key",
            "message": "Incorrect API key provided."}}),
    }
}

/// Decides the answer to a request.
pub type Script = Arc<dyn Fn(&ResponsesRequest) -> Reply + Send + Sync>;

/// The default script: after a shell call's output, `Command finished.`; otherwise
/// `Hello! You said: <text>`.
pub fn echo_script() -> Script {
    Arc::new(|req: &ResponsesRequest| {
        if req.function_output.is_some() {
            Reply::Text("Command finished.".into())
        } else {
            Reply::Text(format!("Hello! You said: {}", req.last_user_text))
        }
    })
}

/// A script where a message `run: CMD` makes the model call `exec_command` with `CMD` (asking
/// for escalation when the message is `run escalated: CMD`); everything else as
/// [`echo_script`].
pub fn shell_script() -> Script {
    Arc::new(|req: &ResponsesRequest| {
        if let Some((_, output)) = &req.function_output {
            return Reply::Text(format!("Command finished: {}", output.trim()));
        }
        let text = req.last_user_text.trim();
        if let Some(cmd) = text.strip_prefix("run escalated: ") {
            return Reply::Exec {
                cmd: cmd.to_owned(),
                escalate: true,
            };
        }
        if let Some(cmd) = text.strip_prefix("run: ") {
            return Reply::Exec {
                cmd: cmd.to_owned(),
                escalate: false,
            };
        }
        Reply::Text(format!("Hello! You said: {text}"))
    })
}

impl ResponsesRequest {
    /// Every text the user said in the conversation this request carries, in order (each
    /// `input_text` of each `user` message of `input`; Codex's own context blocks, which begin
    /// with `<`, left out): a message the thread holds twice is here twice.
    pub fn user_texts(&self) -> Vec<String> {
        self.body["input"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|i| i["role"] == "user")
            .filter_map(|i| i["content"].as_array())
            .flatten()
            .filter_map(|b| b["text"].as_str())
            .filter(|t| !t.trim_start().starts_with('<'))
            .map(str::to_owned)
            .collect()
    }
}

#[derive(Clone)]
struct Shared {
    script: Script,
    seen: Arc<Mutex<Vec<ResponsesRequest>>>,
    arrived: Arc<tokio::sync::Notify>,
}

/// A running stand-in on `127.0.0.1`.
pub struct ResponsesApi {
    /// `http://127.0.0.1:PORT/v1`, the provider's `base_url`.
    pub base_url: String,
    seen: Arc<Mutex<Vec<ResponsesRequest>>>,
    arrived: Arc<tokio::sync::Notify>,
    task: tokio::task::JoinHandle<()>,
}

impl ResponsesApi {
    /// Starts a stand-in with `script` on a free port.
    pub async fn start(script: Script) -> ResponsesApi {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let arrived = Arc::new(tokio::sync::Notify::new());
        let shared = Shared {
            script,
            seen: seen.clone(),
            arrived: arrived.clone(),
        };
        let app = Router::new()
            .route("/v1/responses", post(responses))
            .fallback(|| async { (StatusCode::NOT_FOUND, "not served by the stand-in") })
            .with_state(shared);
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .expect("bind the Responses stand-in");
        let addr: SocketAddr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        ResponsesApi {
            base_url: format!("http://{addr}/v1"),
            seen,
            arrived,
            task,
        }
    }

    /// The requests seen so far.
    pub fn requests(&self) -> Vec<ResponsesRequest> {
        self.seen.lock().unwrap().clone()
    }

    /// The user texts the model was asked about, in order (not the follow-ups after a shell
    /// call).
    pub fn asked(&self) -> Vec<String> {
        self.requests()
            .into_iter()
            .filter(|r| r.function_output.is_none())
            .map(|r| r.last_user_text)
            .collect()
    }

    /// Waits (up to `timeout`) until a request for which `pred` holds has arrived.
    pub async fn wait_for(
        &self,
        pred: impl Fn(&ResponsesRequest) -> bool,
        timeout: std::time::Duration,
    ) {
        tokio::time::timeout(timeout, async {
            loop {
                let notified = self.arrived.notified();
                if self.requests().iter().any(&pred) {
                    return;
                }
                notified.await;
            }
        })
        .await
        .expect("the Responses stand-in saw the awaited request");
    }
}

impl Drop for ResponsesApi {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Writes a scratch `CODEX_HOME` under `dir` whose `config.toml` points Codex at `base_url`
/// (a custom provider `fake` with `wire_api = "responses"`, the key from `FAKE_API_KEY`, no
/// retries unless `extra` names `request_max_retries` or `stream_max_retries`, no update check,
/// no analytics) and returns its path. Defaults: model `fake-model`,
/// approval policy `never`, sandbox `danger-full-access` (a bot's permission setting overrides
/// them). `extra` is appended to the provider's table (for example `stream_idle_timeout_ms = 2000`).
pub fn codex_home(dir: &Path, base_url: &str, extra: &str) -> PathBuf {
    // A retry count named in `extra` replaces the default of none.
    let retries: String = ["request_max_retries", "stream_max_retries"]
        .iter()
        .filter(|k| !extra.contains(*k))
        .map(|k| format!("{k} = 0\n"))
        .collect();
    let home = dir.join("codex-home");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(
        home.join("config.toml"),
        format!(
            r#"model = "fake-model"
model_provider = "fake"
approval_policy = "never"
sandbox_mode = "danger-full-access"
check_for_update_on_startup = false

[analytics]
enabled = false

[model_providers.fake]
name = "fake"
base_url = "{base_url}"
env_key = "FAKE_API_KEY"
wire_api = "responses"
{retries}{extra}
"#
        ),
    )
    .unwrap();
    home
}

/// The environment a bot's real Codex needs to run offline with `codex_home`.
pub fn codex_env(
    home: &Path,
    codex_home: &Path,
    marker: &str,
) -> std::collections::HashMap<String, String> {
    [
        ("BOTVISOR_TEST_RUN", marker.to_owned()),
        ("HOME", home.to_string_lossy().into_owned()),
        ("CODEX_HOME", codex_home.to_string_lossy().into_owned()),
        ("FAKE_API_KEY", "sk-test-stand-in".to_owned()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

/// Whether a user text is Codex's own context rather than something a person wrote.
fn is_context(text: &str) -> bool {
    let t = text.trim_start();
    t.starts_with("<environment_context>")
        || t.starts_with("<user_instructions>")
        || t.starts_with("<permissions")
        || t.starts_with("# AGENTS.md")
}

fn request_of(body: Value, headers: &axum::http::HeaderMap) -> ResponsesRequest {
    let input: Vec<Value> = body
        .get("input")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let last_user_text = input
        .iter()
        .filter(|i| i.get("role").and_then(Value::as_str) == Some("user"))
        .filter_map(|i| i.get("content").and_then(Value::as_array))
        .flatten()
        .filter(|b| b.get("type").and_then(Value::as_str) == Some("input_text"))
        .filter_map(|b| b.get("text").and_then(Value::as_str))
        .rfind(|t| !is_context(t))
        .unwrap_or_default()
        .to_owned();
    let function_output = input.last().and_then(|i| {
        (i.get("type").and_then(Value::as_str) == Some("function_call_output")).then(|| {
            let output = match i.get("output") {
                Some(Value::String(s)) => s.clone(),
                Some(other) => other.to_string(),
                None => String::new(),
            };
            (
                i.get("call_id")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
                output,
            )
        })
    });
    ResponsesRequest {
        last_user_text,
        function_output,
        model: body
            .get("model")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        credential: headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .map(|v| v.strip_prefix("Bearer ").unwrap_or(v).to_owned()),
        body,
    }
}

fn record(out: &mut String, name: &str, data: Value) {
    out.push_str(&format!("event: {name}\ndata: {data}\n\n"));
}

fn next_id(prefix: &str) -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    format!(
        "{prefix}_standin_{}",
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    )
}

fn created() -> String {
    let mut out = String::new();
    record(
        &mut out,
        "response.created",
        json!({"type": "response.created", "response": {"id": next_id("resp")}}),
    );
    out
}

fn completed() -> String {
    let mut out = String::new();
    record(
        &mut out,
        "response.completed",
        json!({"type": "response.completed", "response": {"id": next_id("resp"), "usage": {
            "input_tokens": 12, "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 7, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 19}}}),
    );
    out
}

fn message_added(id: &str) -> String {
    let mut out = String::new();
    record(
        &mut out,
        "response.output_item.added",
        json!({"type": "response.output_item.added", "output_index": 0, "item": {
            "type": "message", "role": "assistant", "id": id, "content": []}}),
    );
    out
}

fn delta(id: &str, text: &str) -> String {
    let mut out = String::new();
    record(
        &mut out,
        "response.output_text.delta",
        json!({"type": "response.output_text.delta", "item_id": id, "output_index": 0,
               "content_index": 0, "delta": text}),
    );
    out
}

fn message_done(id: &str, text: &str) -> String {
    let mut out = String::new();
    record(
        &mut out,
        "response.output_item.done",
        json!({"type": "response.output_item.done", "output_index": 0, "item": {
            "type": "message", "role": "assistant", "id": id,
            "content": [{"type": "output_text", "text": text}]}}),
    );
    out
}

fn exec_call(cmd: &str, escalate: bool) -> String {
    let mut args = json!({"cmd": cmd});
    if escalate {
        args["sandbox_permissions"] = json!("require_escalated");
        args["justification"] = json!("the test asks for it");
    }
    let mut out = String::new();
    record(
        &mut out,
        "response.output_item.done",
        json!({"type": "response.output_item.done", "output_index": 0, "item": {
            "type": "function_call", "call_id": next_id("call"), "name": "exec_command",
            "arguments": args.to_string()}}),
    );
    out
}

fn function_call(namespace: Option<&str>, name: &str, arguments: &Value) -> String {
    let mut item = json!({"type": "function_call", "call_id": next_id("call"), "name": name,
                          "arguments": arguments.to_string()});
    if let Some(ns) = namespace {
        item["namespace"] = json!(ns);
    }
    let mut out = String::new();
    record(
        &mut out,
        "response.output_item.done",
        json!({"type": "response.output_item.done", "output_index": 0, "item": item}),
    );
    out
}

fn sse(pieces: Vec<(Option<std::time::Duration>, String)>) -> Response {
    let stream = futures_util::stream::unfold(pieces.into_iter(), |mut it| async move {
        let (wait, piece) = it.next()?;
        if let Some(d) = wait {
            tokio::time::sleep(d).await;
        }
        Some((Ok::<_, std::convert::Infallible>(piece), it))
    });
    let mut resp = axum::body::Body::from_stream(stream).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    resp
}

async fn responses(
    State(shared): State<Shared>,
    headers: axum::http::HeaderMap,
    body: Bytes,
) -> Response {
    let Ok(body) = serde_json::from_slice::<Value>(&body) else {
        return (StatusCode::BAD_REQUEST, "not JSON").into_response();
    };
    let req = request_of(body, &headers);
    let reply = (shared.script)(&req);
    shared.seen.lock().unwrap().push(req);
    shared.arrived.notify_waiters();
    let reply = match reply {
        Reply::Delayed { after, reply } => {
            tokio::time::sleep(after).await;
            *reply
        }
        r => r,
    };
    let (headers, reply) = match reply {
        Reply::WithHeaders { headers, reply } => (headers, *reply),
        r => (Vec::new(), r),
    };
    let mut resp = answer(reply);
    for (name, value) in headers {
        if let (Ok(name), Ok(value)) = (
            header::HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(&value),
        ) {
            resp.headers_mut().insert(name, value);
        }
    }
    resp
}

/// `chunks` streamed one every `every`, then the message done after `end_after` (none: at once).
fn slow_text(
    chunks: &[String],
    every: std::time::Duration,
    end_after: Option<std::time::Duration>,
) -> Response {
    let id = next_id("msg");
    let text = chunks.concat();
    let mut pieces = vec![(None, created()), (None, message_added(&id))];
    pieces.extend(chunks.iter().map(|c| (Some(every), delta(&id, c))));
    pieces.push((end_after, message_done(&id, &text)));
    pieces.push((None, completed()));
    sse(pieces)
}

/// The HTTP answer of `reply` (neither delayed nor with headers of its own).
fn answer(reply: Reply) -> Response {
    match reply {
        Reply::Status { status, body } => {
            let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            (code, axum::Json(body)).into_response()
        }
        Reply::Never => {
            let stream =
                futures_util::stream::pending::<Result<String, std::convert::Infallible>>();
            let mut resp = axum::body::Body::from_stream(stream).into_response();
            resp.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/event-stream"),
            );
            resp
        }
        Reply::Text(text) => {
            let id = next_id("msg");
            sse(vec![
                (None, created()),
                (None, message_added(&id)),
                (None, delta(&id, &text)),
                (None, message_done(&id, &text)),
                (None, completed()),
            ])
        }
        Reply::SlowText { chunks, every } => slow_text(&chunks, every, None),
        Reply::SlowTextEndingLate {
            chunks,
            every,
            end_after,
        } => slow_text(&chunks, every, Some(end_after)),
        Reply::Exec { cmd, escalate } => sse(vec![
            (None, created()),
            (None, exec_call(&cmd, escalate)),
            (None, completed()),
        ]),
        Reply::Call {
            namespace,
            name,
            arguments,
        } => sse(vec![
            (None, created()),
            (None, function_call(namespace.as_deref(), &name, &arguments)),
            (None, completed()),
        ]),
        Reply::Delayed { .. } | Reply::WithHeaders { .. } => unreachable!("unwrapped above"),
    }
}
