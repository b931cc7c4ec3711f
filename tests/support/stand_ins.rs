//! What the example stand-ins (`cargo run --example stand_in_api`, `stand_in_responses`) can be
//! asked to do besides echoing, from their command line (issue 46): what the tests' own scripts
//! do, for a person trying botvisor without an account. A plan's usage limit, an expired login,
//! a slow model, and a log of what reached the API ([`Behaviour`], wrapped around a script by
//! [`claude_script`] and [`codex_script`]).

use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use serde_json::{Value, json};

use super::{responses_api, stand_in_api};

/// The options both example stand-ins take.
#[derive(clap::Args, Debug, Clone, Default, PartialEq)]
pub struct Behaviour {
    /// A plan's usage limit (its five-hour window) that holds for SECONDS from the first request:
    /// every request until then is refused as the real API refuses one over the limit, with its
    /// reset; then answered. Claude Code reads a plan's limit only with an OAuth login: give the
    /// bot CLAUDE_CODE_OAUTH_TOKEN (any value), not ANTHROPIC_API_KEY.
    #[arg(long, value_name = "SECONDS")]
    pub limit_for: Option<u64>,
    /// The login of the first request expires: every request with the same key or token is
    /// refused (401, as an expired OAuth token or a revoked key), and one with another is
    /// answered (a new login: `botvisorctl set BOT --env KEY=NEW …`).
    #[arg(long)]
    pub expired_login: bool,
    /// Each answer waits MS milliseconds before its first byte: a slow model.
    #[arg(long, value_name = "MS")]
    pub slow: Option<u64>,
    /// Appends one JSON line per request of the conversation to FILE: `time`, `asked` (the
    /// newest user text), `user_texts` (every user text the request carries: a message the
    /// conversation holds twice is there twice) and `answer` (`reply`, `limit`,
    /// `expired_login`). `grep -c` of a message counts how often it reached the API.
    #[arg(long, value_name = "FILE")]
    pub log: Option<PathBuf>,
}

#[derive(clap::Parser, Debug, PartialEq)]
#[command(name = "stand_in_api")]
/// `cargo run --example stand_in_api`: a loopback stand-in for the Anthropic Messages API: it echoes what it is told, and `write
/// PATH: TEXT` makes the model ask to write TEXT to PATH. Give a bot its URL as
/// ANTHROPIC_BASE_URL, and a key (ANTHROPIC_API_KEY=offline) or, to see a usage limit, a token
/// (CLAUDE_CODE_OAUTH_TOKEN=offline).
pub struct ApiArgs {
    /// The port to listen on (127.0.0.1); default: a free one.
    pub port: Option<u16>,
    /// What it does besides echoing.
    #[command(flatten)]
    pub behaviour: Behaviour,
}

#[derive(clap::Parser, Debug, PartialEq)]
#[command(name = "stand_in_responses")]
/// `cargo run --example stand_in_responses`: a loopback stand-in for the OpenAI Responses API and a CODEX_HOME pointing Codex at it: it
/// echoes what it is told, `run: CMD` makes the model run CMD, `run escalated: CMD` makes it ask
/// first. Give a Codex bot the two variables it prints.
pub struct ResponsesArgs {
    /// The folder to write the CODEX_HOME in (DIR/codex-home).
    #[arg(default_value = "stand-in-codex")]
    pub dir: PathBuf,
    /// What it does besides echoing.
    #[command(flatten)]
    pub behaviour: Behaviour,
}

/// What a request is answered with.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Answer {
    /// The script's reply.
    Reply,
    /// The usage limit, which resets at this Unix time.
    Limit(u64),
    /// The login is refused.
    ExpiredLogin,
}

impl Answer {
    fn word(self) -> &'static str {
        match self {
            Answer::Reply => "reply",
            Answer::Limit(_) => "limit",
            Answer::ExpiredLogin => "expired_login",
        }
    }
}

/// What the stand-in remembers between requests: when the limit began, the expired
/// credential, the log.
#[derive(Debug, Default)]
struct Memory {
    limit_until: Option<u64>,
    expired: Option<Option<String>>,
}

/// A [`Behaviour`] in force: decides each request's [`Answer`] and logs it.
#[derive(Clone)]
pub struct Decider {
    behaviour: Behaviour,
    memory: Arc<Mutex<Memory>>,
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Decider {
    /// `behaviour` in force from now; an error when its log cannot be written.
    pub fn new(behaviour: Behaviour) -> std::io::Result<Decider> {
        if let Some(log) = &behaviour.log {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(log)?;
        }
        Ok(Decider {
            behaviour,
            memory: Arc::default(),
        })
    }

    /// The answer to a request carrying `credential`, asking `asked` among `user_texts`; logged.
    pub fn decide(&self, credential: Option<&str>, asked: &str, user_texts: &[String]) -> Answer {
        let now = unix_now();
        let answer = {
            let mut m = self.memory.lock().unwrap_or_else(|p| p.into_inner());
            let expired = self.behaviour.expired_login
                && m.expired
                    .get_or_insert_with(|| credential.map(str::to_owned))
                    .as_deref()
                    == credential;
            let until = self
                .behaviour
                .limit_for
                .map(|s| *m.limit_until.get_or_insert(now + s));
            match until {
                _ if expired => Answer::ExpiredLogin,
                Some(until) if now < until => Answer::Limit(until),
                _ => Answer::Reply,
            }
        };
        if let Some(log) = &self.behaviour.log {
            let line = json!({"time": botvisor::time::now_rfc3339(), "asked": asked,
                              "user_texts": user_texts, "answer": answer.word()});
            if let Ok(mut f) = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(log)
            {
                let _ = writeln!(f, "{line}");
            }
        }
        answer
    }

    /// How long each answer waits before its first byte.
    pub fn slow(&self) -> Option<Duration> {
        self.behaviour.slow.map(Duration::from_millis)
    }
}

/// `inner` (the Messages stand-in's script) with `decider`'s behaviour around it.
pub fn claude_script(decider: Decider, inner: stand_in_api::Script) -> stand_in_api::Script {
    Arc::new(move |req: &stand_in_api::ApiRequest| {
        let reply = match decider.decide(
            req.credential.as_deref(),
            &req.last_user_text,
            &req.user_texts(),
        ) {
            Answer::ExpiredLogin => stand_in_api::login_expired(),
            Answer::Limit(reset) => stand_in_api::plan_limit_refusal(reset),
            // Within the plan's limits, as the real API says to a subscription.
            Answer::Reply if decider.behaviour.limit_for.is_some() => {
                stand_in_api::Reply::WithHeaders {
                    headers: stand_in_api::unified_limit_headers(
                        "allowed",
                        unix_now() + 5 * 3600,
                        "five_hour",
                    ),
                    reply: Box::new(inner(req)),
                }
            }
            Answer::Reply => inner(req),
        };
        match decider.slow() {
            Some(after) => stand_in_api::Reply::Delayed {
                after,
                reply: Box::new(reply),
            },
            None => reply,
        }
    })
}

/// `inner` (the Responses stand-in's script) with `decider`'s behaviour around it.
pub fn codex_script(decider: Decider, inner: responses_api::Script) -> responses_api::Script {
    Arc::new(move |req: &responses_api::ResponsesRequest| {
        let reply = match decider.decide(
            req.credential.as_deref(),
            &req.last_user_text,
            &req.user_texts(),
        ) {
            Answer::ExpiredLogin => responses_api::key_refused(),
            Answer::Limit(reset) => responses_api::usage_limit_refusal(reset, unix_now()),
            Answer::Reply => inner(req),
        };
        match decider.slow() {
            Some(after) => responses_api::Reply::Delayed {
                after,
                reply: Box::new(reply),
            },
            None => reply,
        }
    })
}

/// The log's lines so far (for tests).
pub fn log_lines(log: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_login_expires_and_a_new_one_is_answered() {
        let d = Decider::new(Behaviour {
            expired_login: true,
            ..Behaviour::default()
        })
        .unwrap();
        assert_eq!(d.decide(Some("old"), "a", &[]), Answer::ExpiredLogin);
        assert_eq!(d.decide(Some("old"), "a", &[]), Answer::ExpiredLogin);
        assert_eq!(d.decide(Some("new"), "a", &[]), Answer::Reply);
    }

    #[test]
    fn the_limit_holds_from_the_first_request() {
        let d = Decider::new(Behaviour {
            limit_for: Some(60),
            ..Behaviour::default()
        })
        .unwrap();
        let Answer::Limit(reset) = d.decide(None, "a", &[]) else {
            panic!("limited")
        };
        assert!(reset >= unix_now() + 59);
        assert_eq!(d.decide(None, "b", &[]), Answer::Limit(reset));
    }
}
