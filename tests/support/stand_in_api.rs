//! A loopback stand-in for the Anthropic Messages API, enough for the real Claude Code CLI to run
//! offline (claude-code-facts.md, "Getting the real CLI on a machine without an account").
//!
//! `POST /v1/messages` answers with the streaming (SSE) event sequence when the request has
//! `"stream": true`, and with one JSON message otherwise. What it answers is decided by a
//! [`Script`] from the request: plain text, or a tool call that the real CLI then runs.

use std::net::SocketAddr;
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
pub struct ApiRequest {
    /// The text of the last `user` message (text blocks that are not system reminders).
    pub last_user_text: String,
    /// Whether the last `user` message carries a `tool_result` block.
    pub has_tool_result: bool,
    /// Whether the client asked for a stream.
    pub stream: bool,
    /// Whether the request offers tools (the main conversation does; side requests don't).
    pub has_tools: bool,
    /// The credential it carried: its `x-api-key` (an API key), else its `Authorization` header
    /// without `Bearer ` (an OAuth token, `ANTHROPIC_AUTH_TOKEN`); `None`: none.
    pub credential: Option<String>,
    /// The whole body.
    pub body: Value,
}

/// One answer.
#[derive(Debug, Clone)]
pub enum Reply {
    /// An assistant text, then `end_turn`.
    Text(String),
    /// An assistant text streamed in pieces, one every `every`, then `end_turn`. The stream is
    /// dropped if the client goes away (an interrupt).
    SlowText {
        /// The pieces.
        chunks: Vec<String>,
        /// The pause before each piece.
        every: std::time::Duration,
    },
    /// [`Reply::SlowText`], then a pause of `end_after` before the text's block ends
    /// (`content_block_stop`, then `message_delta` and `message_stop`): every piece is out and
    /// the answer is not yet whole.
    SlowTextEndingLate {
        /// The pieces.
        chunks: Vec<String>,
        /// The pause before each piece.
        every: std::time::Duration,
        /// The pause after the last piece, before the end.
        end_after: std::time::Duration,
    },
    /// An HTTP error: `status` with the JSON `body` (the API's error shape).
    Status {
        /// The HTTP status, for example 403.
        status: u16,
        /// The body, for example `{"type":"error","error":{"type":"permission_error",…}}`.
        body: Value,
    },
    /// `reply`, after a pause of `after` before the first byte (a model slow to answer).
    Delayed {
        /// The pause.
        after: std::time::Duration,
        /// The answer.
        reply: Box<Reply>,
    },
    /// `reply`, with these response headers besides its own: what the real API adds, such as a
    /// subscription's `anthropic-ratelimit-unified-*` headers or `retry-after`
    /// ([`unified_limit_headers`]).
    WithHeaders {
        /// Header names and values.
        headers: Vec<(String, String)>,
        /// The answer.
        reply: Box<Reply>,
    },
    /// A tool call, then `tool_use`.
    ToolUse {
        /// Tool name, for example `Bash`.
        name: String,
        /// Tool input.
        input: Value,
    },
}

/// Decides the answer to a request.
pub type Script = Arc<dyn Fn(&ApiRequest) -> Reply + Send + Sync>;

/// The default script: after a tool result, `Tool finished.`; otherwise `Hello! You said: <text>`.
pub fn echo_script() -> Script {
    Arc::new(|req: &ApiRequest| {
        if req.has_tool_result {
            Reply::Text("Tool finished.".into())
        } else {
            Reply::Text(format!("Hello! You said: {}", req.last_user_text))
        }
    })
}

/// The demo script of `cargo run --example stand_in_api`: like [`echo_script`], and a message
/// `write PATH: TEXT` makes the model ask to `Write` TEXT to PATH (a permission prompt unless the
/// permission mode allows edits).
pub fn demo_script() -> Script {
    Arc::new(|req: &ApiRequest| {
        if req.has_tool_result {
            return Reply::Text("Done.".into());
        }
        let text = req.last_user_text.trim();
        if let Some((path, content)) = text
            .strip_prefix("write ")
            .and_then(|rest| rest.split_once(": "))
        {
            let input = json!({"file_path": path.trim(), "content": content});
            // Asked already in this conversation (the answer came back merged with it): done.
            let asked = req.body["messages"].as_array().is_some_and(|m| {
                m.iter()
                    .filter_map(|m| m["content"].as_array())
                    .flatten()
                    .any(|b| b["type"] == "tool_use" && b["input"] == input)
            });
            if asked {
                return Reply::Text("Done.".into());
            }
            return Reply::ToolUse {
                name: "Write".into(),
                input,
            };
        }
        Reply::Text(format!("Hello! You said: {text}"))
    })
}

#[derive(Clone)]
struct Shared {
    script: Script,
    seen: Arc<Mutex<Vec<ApiRequest>>>,
    arrived: Arc<tokio::sync::Notify>,
}

/// A running stand-in on `127.0.0.1`.
pub struct StandInApi {
    /// `http://127.0.0.1:PORT`, for `ANTHROPIC_BASE_URL`.
    pub url: String,
    seen: Arc<Mutex<Vec<ApiRequest>>>,
    arrived: Arc<tokio::sync::Notify>,
    task: tokio::task::JoinHandle<()>,
}

impl StandInApi {
    /// Starts a stand-in with `script` on a free port.
    pub async fn start(script: Script) -> StandInApi {
        StandInApi::start_on(0, script).await
    }

    /// Starts a stand-in with `script` on `port` (0: a free one).
    pub async fn start_on(port: u16, script: Script) -> StandInApi {
        StandInApi::try_start_on(port, script)
            .await
            .expect("bind the stand-in API")
    }

    /// Like [`StandInApi::start_on`], with the bind error.
    pub async fn try_start_on(port: u16, script: Script) -> std::io::Result<StandInApi> {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let arrived = Arc::new(tokio::sync::Notify::new());
        let shared = Shared {
            script,
            seen: seen.clone(),
            arrived: arrived.clone(),
        };
        let app = Router::new()
            .route("/v1/messages", post(messages))
            .fallback(|| async { axum::Json(json!({})) })
            .with_state(shared);
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
        let addr: SocketAddr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(StandInApi {
            url: format!("http://{addr}"),
            seen,
            arrived,
            task,
        })
    }

    /// The requests seen so far.
    pub fn requests(&self) -> Vec<ApiRequest> {
        self.seen.lock().unwrap().clone()
    }

    /// Waits (up to `timeout`) until a request for which `pred` holds has arrived.
    pub async fn wait_for(&self, pred: impl Fn(&ApiRequest) -> bool, timeout: std::time::Duration) {
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
        .expect("the stand-in API saw the awaited request");
    }
}

impl Drop for StandInApi {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ApiRequest {
    /// Every text the user said in the conversation this request carries, in order (each text
    /// block of each `user` message, system reminders left out): a message the conversation
    /// holds twice is here twice.
    pub fn user_texts(&self) -> Vec<String> {
        let messages = self.body.get("messages").and_then(Value::as_array);
        messages
            .into_iter()
            .flatten()
            .filter(|m| m.get("role").and_then(Value::as_str) == Some("user"))
            .flat_map(|m| match m.get("content") {
                Some(Value::String(s)) => vec![s.clone()],
                Some(Value::Array(blocks)) => blocks
                    .iter()
                    .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
                    .filter_map(|b| b.get("text").and_then(Value::as_str))
                    .filter(|t| !t.trim_start().starts_with("<system-reminder>"))
                    .map(str::to_owned)
                    .collect(),
                _ => Vec::new(),
            })
            .collect()
    }
}

fn request_of(body: Value, headers: &axum::http::HeaderMap) -> ApiRequest {
    let messages: Vec<Value> = body
        .get("messages")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let last_user = messages
        .iter()
        .rfind(|m| m.get("role").and_then(Value::as_str) == Some("user"))
        .cloned()
        .unwrap_or(Value::Null);
    // Claude Code merges: a new request from the user can share a message with the last tool
    // result (seen on 2.1.328: user[tool_result, text]). The result answers the model only when
    // nothing the user wrote follows it.
    let has_tool_result = match last_user.get("content") {
        Some(Value::Array(blocks)) => blocks
            .iter()
            .rfind(|b| {
                !b.get("text")
                    .and_then(Value::as_str)
                    .is_some_and(|t| t.trim_start().starts_with("<system-reminder>"))
            })
            .is_some_and(|b| b.get("type").and_then(Value::as_str) == Some("tool_result")),
        _ => false,
    };
    let text = match last_user.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .rfind(|t| !t.trim_start().starts_with("<system-reminder>"))
            .unwrap_or_default()
            .to_owned(),
        _ => String::new(),
    };
    ApiRequest {
        last_user_text: text,
        has_tool_result,
        stream: body.get("stream").and_then(Value::as_bool) == Some(true),
        has_tools: body
            .get("tools")
            .and_then(Value::as_array)
            .is_some_and(|t| !t.is_empty()),
        credential: headers
            .get("x-api-key")
            .or_else(|| headers.get(header::AUTHORIZATION))
            .and_then(|v| v.to_str().ok())
            .map(|v| v.strip_prefix("Bearer ").unwrap_or(v).to_owned()),
        body,
    }
}

async fn messages(
    State(shared): State<Shared>,
    headers: axum::http::HeaderMap,
    body: Bytes,
) -> Response {
    let Ok(body) = serde_json::from_slice::<Value>(&body) else {
        return (StatusCode::BAD_REQUEST, "not JSON").into_response();
    };
    let req = request_of(body, &headers);
    // Side requests (titles, summaries) get plain text and never consume the script.
    let reply = if req.has_tools {
        (shared.script)(&req)
    } else {
        Reply::Text("Side note.".into())
    };
    let stream = req.stream;
    let model = req
        .body
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or("claude-stand-in")
        .to_owned();
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
    let mut resp = answer(&model, stream, &reply);
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

/// The HTTP answer of `reply` (neither delayed nor with headers of its own).
fn answer(model: &str, stream: bool, reply: &Reply) -> Response {
    if let Reply::Status { status, body } = reply {
        let code = StatusCode::from_u16(*status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        return (code, axum::Json(body.clone())).into_response();
    }
    match (stream, reply) {
        (true, Reply::SlowText { chunks, every }) => {
            return slow_text(model, chunks.clone(), *every, None);
        }
        (
            true,
            Reply::SlowTextEndingLate {
                chunks,
                every,
                end_after,
            },
        ) => return slow_text(model, chunks.clone(), *every, Some(*end_after)),
        _ => {}
    }
    if stream {
        let mut resp = sse_body(model, reply).into_response();
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream"),
        );
        resp
    } else {
        axum::Json(json_message(model, reply)).into_response()
    }
}

/// What the Messages API answers a subscription request whose OAuth token expired: 401
/// `authentication_error`, to every request.
pub fn login_expired_script() -> Script {
    Arc::new(|_: &ApiRequest| login_expired())
}

/// The 401 of an expired OAuth token.
pub fn login_expired() -> Reply {
    Reply::Status {
        status: 401,
        body: serde_json::json!({"type": "error", "error": {"type": "authentication_error",
            "message": "OAuth token has expired. Please obtain a new token or refresh your existing token."}}),
    }
}

/// A script that echoes each request with [`plan_echo`]: a plan whose `five_hour` window is
/// nearly used (`allowed_warning`, 91 %) and resets at `reset`.
pub fn plan_warning_script(reset: u64) -> Script {
    Arc::new(move |req: &ApiRequest| plan_echo("allowed_warning", &req.last_user_text, reset))
}

/// The Messages API's refusal of a subscription request over its plan's `five_hour` limit,
/// which resets at `reset` (Unix seconds): a 429 `rate_limit_error` with the unified headers
/// `rejected`.
pub fn plan_limit_refusal(reset: u64) -> Reply {
    Reply::WithHeaders {
        headers: unified_limit_headers("rejected", reset, "five_hour"),
        reply: Box::new(Reply::Status {
            status: 429,
            body: serde_json::json!({"type": "error", "error": {
                "type": "rate_limit_error",
                "message": "This request would exceed your account's rate limit."}}),
        }),
    }
}

/// An echo of `text` ("Hello! You said: …") within a plan's `five_hour` limit whose window
/// resets at `reset`: the unified headers say `status` (`allowed`, `allowed_warning`).
pub fn plan_echo(status: &str, text: &str, reset: u64) -> Reply {
    Reply::WithHeaders {
        headers: unified_limit_headers(status, reset, "five_hour"),
        reply: Box::new(Reply::Text(format!("Hello! You said: {text}"))),
    }
}

/// What the Messages API answers a subscription (OAuth) request with about its plan's limits, as
/// the `anthropic-ratelimit-unified-*` headers: `status` `allowed`, `allowed_warning` or
/// `rejected`; `reset` the Unix time the limit resets; `claim` the window that decides
/// (`five_hour`, `seven_day`, …). The window is 100 % used when `rejected`, 91 % at
/// `allowed_warning`, else 50 %.
pub fn unified_limit_headers(status: &str, reset: u64, claim: &str) -> Vec<(String, String)> {
    [
        ("anthropic-ratelimit-unified-status", status.to_owned()),
        ("anthropic-ratelimit-unified-reset", reset.to_string()),
        (
            "anthropic-ratelimit-unified-representative-claim",
            claim.to_owned(),
        ),
        ("anthropic-ratelimit-unified-5h-status", status.to_owned()),
        ("anthropic-ratelimit-unified-5h-reset", reset.to_string()),
        (
            "anthropic-ratelimit-unified-5h-utilization",
            match status {
                "rejected" => "1.0",
                "allowed_warning" => "0.91",
                _ => "0.5",
            }
            .to_owned(),
        ),
    ]
    .into_iter()
    .map(|(n, v)| (n.to_owned(), v))
    .collect()
}

/// Streams `chunks` as text deltas, one every `every`.
/// `chunks` streamed one every `every`, then the end after `end_after` (none: at once).
fn slow_text(
    model: &str,
    chunks: Vec<String>,
    every: std::time::Duration,
    end_after: Option<std::time::Duration>,
) -> Response {
    let mut head = String::new();
    event(
        &mut head,
        "message_start",
        json!({"type": "message_start", "message": {
            "id": "msg_standin", "type": "message", "role": "assistant", "model": model,
            "content": [], "stop_reason": null, "stop_sequence": null, "usage": usage()}}),
    );
    event(
        &mut head,
        "content_block_start",
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
    );
    let mut tail = String::new();
    event(
        &mut tail,
        "content_block_stop",
        json!({"type": "content_block_stop", "index": 0}),
    );
    event(
        &mut tail,
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null}, "usage": {"output_tokens": 7}}),
    );
    event(&mut tail, "message_stop", json!({"type": "message_stop"}));
    let pieces: Vec<(Option<std::time::Duration>, String)> = std::iter::once((None, head))
        .chain(chunks.into_iter().map(|c| {
            let mut e = String::new();
            event(
                &mut e,
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": c}}),
            );
            (Some(every), e)
        }))
        .chain(std::iter::once((end_after, tail)))
        .collect();
    let stream = futures_util::stream::unfold(pieces.into_iter(), move |mut it| async move {
        let (wait, piece) = it.next()?;
        if let Some(wait) = wait {
            tokio::time::sleep(wait).await;
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

fn usage() -> Value {
    json!({"input_tokens": 12, "output_tokens": 7, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0})
}

fn json_message(model: &str, reply: &Reply) -> Value {
    let (content, stop) = match reply {
        Reply::Text(t) => (json!([{"type": "text", "text": t}]), "end_turn"),
        Reply::SlowText { chunks, .. } | Reply::SlowTextEndingLate { chunks, .. } => (
            json!([{"type": "text", "text": chunks.concat()}]),
            "end_turn",
        ),
        Reply::ToolUse { name, input } => (
            json!([{"type": "tool_use", "id": "toolu_standin_1", "name": name, "input": input}]),
            "tool_use",
        ),
        Reply::Status { .. } | Reply::Delayed { .. } | Reply::WithHeaders { .. } => {
            unreachable!("answered before")
        }
    };
    json!({
        "id": "msg_standin", "type": "message", "role": "assistant", "model": model,
        "content": content, "stop_reason": stop, "stop_sequence": null, "usage": usage(),
    })
}

/// Written in a reply's text or tool input, this character goes on the wire as the escape
/// `\ud800`, a UTF-16 surrogate without its pair: valid JSON text that a Rust string cannot
/// hold, which the model API can send when a model's output is cut inside a pair.
pub const LONE_SURROGATE: char = '\u{E000}';

fn event(out: &mut String, name: &str, data: Value) {
    let data = data.to_string().replace(LONE_SURROGATE, "\\ud800");
    out.push_str(&format!("event: {name}\ndata: {data}\n\n"));
}

fn sse_body(model: &str, reply: &Reply) -> String {
    let mut out = String::new();
    event(
        &mut out,
        "message_start",
        json!({"type": "message_start", "message": {
            "id": "msg_standin", "type": "message", "role": "assistant", "model": model,
            "content": [], "stop_reason": null, "stop_sequence": null, "usage": usage()}}),
    );
    let stop = match reply {
        Reply::SlowText { .. } | Reply::SlowTextEndingLate { .. } => {
            unreachable!("streamed by slow_text")
        }
        Reply::Status { .. } | Reply::Delayed { .. } | Reply::WithHeaders { .. } => {
            unreachable!("answered before")
        }
        Reply::Text(text) => {
            event(
                &mut out,
                "content_block_start",
                json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            );
            event(
                &mut out,
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}),
            );
            "end_turn"
        }
        Reply::ToolUse { name, input } => {
            static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
            let id = format!(
                "toolu_standin_{}",
                NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            );
            event(
                &mut out,
                "content_block_start",
                json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}}),
            );
            event(
                &mut out,
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": input.to_string()}}),
            );
            "tool_use"
        }
    };
    event(
        &mut out,
        "content_block_stop",
        json!({"type": "content_block_stop", "index": 0}),
    );
    event(
        &mut out,
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null}, "usage": {"output_tokens": 7}}),
    );
    event(&mut out, "message_stop", json!({"type": "message_stop"}));
    out
}
