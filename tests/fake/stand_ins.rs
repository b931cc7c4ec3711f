//! The example stand-ins' options (issue 46 §4; `cargo run --example stand_in_api -- --help`),
//! over HTTP as a CLI would meet them, with no CLI: the README's two commands still parse as
//! written, and `--limit-for`, `--expired-login`, `--slow` and `--log` do what they say.
//! What the real CLIs make of them is tested in `tests/real/claude/stand_ins.rs`.

use std::time::{Duration, Instant};

use clap::Parser;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use support::responses_api::{self, ResponsesApi};
use support::stand_in_api::{self, StandInApi};
use support::stand_ins::{ApiArgs, Behaviour, Decider, ResponsesArgs, log_lines};

/// One HTTP/1.1 POST of `body` to `url` + `path` with `headers`: (status, headers in lower case,
/// body).
async fn post(
    url: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &Value,
) -> (u16, Vec<(String, String)>, String) {
    let host = url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap()
        .to_owned();
    let mut s = tokio::net::TcpStream::connect(&host).await.unwrap();
    let body = body.to_string();
    let mut req = format!(
        "POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(&body);
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(support::EVENT_TIMEOUT, s.read_to_end(&mut out))
        .await
        .expect("the stand-in answers")
        .unwrap();
    let text = String::from_utf8_lossy(&out).into_owned();
    let (head, rest) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let headers = lines
        .filter_map(|l| l.split_once(": "))
        .map(|(k, v)| (k.to_ascii_lowercase(), v.to_owned()))
        .collect();
    (status, headers, rest.to_owned())
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

#[test]
fn the_readmes_commands_parse_as_written() {
    assert_eq!(
        ApiArgs::try_parse_from(["stand_in_api", "47111"]).unwrap(),
        ApiArgs {
            port: Some(47111),
            behaviour: Behaviour::default()
        }
    );
    assert_eq!(
        ResponsesArgs::try_parse_from(["stand_in_responses", "/tmp/stand-in-codex"]).unwrap(),
        ResponsesArgs {
            dir: "/tmp/stand-in-codex".into(),
            behaviour: Behaviour::default()
        }
    );
    let with = ApiArgs::try_parse_from([
        "stand_in_api",
        "47111",
        "--limit-for",
        "60",
        "--expired-login",
        "--slow",
        "1500",
        "--log",
        "/tmp/api.jsonl",
    ])
    .unwrap();
    assert_eq!(
        with.behaviour,
        Behaviour {
            limit_for: Some(60),
            expired_login: true,
            slow: Some(1500),
            log: Some("/tmp/api.jsonl".into()),
        }
    );
}

/// Both stand-ins with every option: the first login is refused (401) and another is not; the
/// limit then refuses with its reset, as the real API does; every answer waits `--slow`; the
/// log has one line per request with its user texts and its answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_option_does_what_it_says() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("api.jsonl");
    let args = |bin: &str| {
        [
            bin,
            "--limit-for",
            "3600",
            "--expired-login",
            "--slow",
            "200",
            "--log",
            log.to_str().unwrap(),
        ]
        .map(str::to_owned)
    };
    let claude = ApiArgs::try_parse_from(args("stand_in_api")).unwrap();
    let api = StandInApi::start(support::stand_ins::claude_script(
        Decider::new(claude.behaviour).unwrap(),
        stand_in_api::demo_script(),
    ))
    .await;
    let message = json!({"model": "m", "max_tokens": 8, "tools": [{"name": "Bash"}],
                         "messages": [{"role": "user", "content": "hello"}]});
    let started = Instant::now();
    let (status, _, body) = post(&api.url, "/v1/messages", &[("x-api-key", "old")], &message).await;
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("authentication_error"), "{body}");
    let (status, headers, body) = post(
        &api.url,
        "/v1/messages",
        &[("authorization", "Bearer new")],
        &message,
    )
    .await;
    assert!(started.elapsed() >= Duration::from_millis(400), "slow");
    assert_eq!(status, 429, "{body}");
    assert_eq!(
        header(&headers, "anthropic-ratelimit-unified-status"),
        Some("rejected")
    );
    let lines = log_lines(&log);
    let answers: Vec<&Value> = lines.iter().map(|l| &l["answer"]).collect();
    assert_eq!(answers, [&json!("expired_login"), &json!("limit")]);
    assert_eq!(lines[0]["asked"], "hello");
    assert_eq!(lines[0]["user_texts"], json!(["hello"]));

    std::fs::remove_file(&log).unwrap();
    let codex = ResponsesArgs::try_parse_from(args("stand_in_responses")).unwrap();
    let api = ResponsesApi::start(support::stand_ins::codex_script(
        Decider::new(codex.behaviour).unwrap(),
        responses_api::echo_script(),
    ))
    .await;
    let input = json!({"model": "m", "stream": true, "input": [
        {"role": "user", "content": [{"type": "input_text", "text": "hello"}]}]});
    let (status, _, body) = post(
        &api.base_url,
        "/v1/responses",
        &[("authorization", "Bearer offline")],
        &input,
    )
    .await;
    assert_eq!(status, 401, "{body}");
    let (status, headers, body) = post(
        &api.base_url,
        "/v1/responses",
        &[("authorization", "Bearer new")],
        &input,
    )
    .await;
    assert_eq!(status, 429, "{body}");
    assert!(body.contains("usage_limit_reached"), "{body}");
    assert_eq!(
        header(&headers, "x-codex-primary-used-percent"),
        Some("100")
    );
    let answers: Vec<Value> = log_lines(&log)
        .into_iter()
        .map(|l| l["answer"].clone())
        .collect();
    assert_eq!(answers, [json!("expired_login"), json!("limit")]);
}
