//! The dashboard's calls to botvisord, each made by a task of its own with a bound, its
//! [`Outcome`] sent back over a channel: the loop that reads the bus's signals and the keys never
//! waits for a reply.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use tokio::sync::mpsc::UnboundedSender;
use zbus::{Connection, OwnedObjectPath, Variant};

use super::model::{Call, Item, KEPT_ITEMS, Outcome};
use crate::bots;
use crate::fail::{NOT_RUNNING, describe};
use crate::show;

/// How long one call may take before the dashboard says it did not come back (a chat is read
/// in pages: the whole read).
pub const CALL_BOUND: Duration = Duration::from_secs(30);

/// Makes `call` on a task of its own; its outcome goes to `tx`. `who` names the host in what
/// is said of a call that changes a bot (`buildbox: sent`); empty on one bus.
pub fn spawn(conn: &Connection, call: Call, tx: UnboundedSender<Outcome>, who: &str) {
    let conn = conn.clone();
    let who = match who {
        "" => String::new(),
        name => format!("{}: ", show::safe(name)),
    };
    tokio::spawn(async move {
        let what = describe_call(&call);
        let chat = match &call {
            Call::LoadChat(key) => Some(key.clone()),
            _ => None,
        };
        let outcome = match tokio::time::timeout(CALL_BOUND, make(&conn, call)).await {
            Ok(outcome) => outcome,
            Err(_) => {
                let why = format!(
                    "{what}: no answer within {} s; botvisord may be busy (it goes on, and the \
                     screen follows what it does)",
                    CALL_BOUND.as_secs()
                );
                match chat {
                    Some(key) => Outcome::ChatFailed(key, why),
                    None => Outcome::Failed(why),
                }
            }
        };
        let outcome = match outcome {
            Outcome::Done(text) => Outcome::Done(format!("{who}{text}")),
            Outcome::Failed(text) => Outcome::Failed(format!("{who}{text}")),
            other => other,
        };
        let _ = tx.send(outcome);
    });
}

/// The call in words, for what is said when it fails.
fn describe_call(call: &Call) -> String {
    match call {
        Call::LoadBots(_) => "reading the bots".into(),
        Call::LoadChat(_) => "reading the chat".into(),
        Call::Send { .. } => "sending".into(),
        Call::Answer { behavior, .. } => format!("answering {behavior}"),
        Call::Interrupt(_) => "interrupting".into(),
        Call::Stop(_) => "stopping".into(),
        Call::Restart(_) => "restarting".into(),
        Call::LoadSchedules(_) => "reading the schedules".into(),
    }
}

async fn proxy(
    conn: &Connection,
    path: &str,
) -> Result<botvisor::dbus::client::BotProxy<'static>, String> {
    let path = OwnedObjectPath::try_from(path.to_owned()).map_err(|e| e.to_string())?;
    bots::proxy(conn, path).await.map_err(|f| f.text)
}

async fn make(conn: &Connection, call: Call) -> Outcome {
    let what = describe_call(&call);
    let failed = |e: zbus::Error| Outcome::Failed(format!("{what}: {}", describe(&e)));
    match call {
        // Each bot's soonest next fire; none where schedules cannot be read (no user manager,
        // an older botvisord): nothing to show is no failure.
        Call::LoadSchedules(host) => {
            let mut next: HashMap<String, i64> = HashMap::new();
            for s in crate::schedule::all(conn).await.unwrap_or_default() {
                if s.paused || s.next <= 0 {
                    continue;
                }
                let at = next.entry(s.bot).or_insert(s.next);
                *at = (*at).min(s.next);
            }
            Outcome::Schedules(host, next)
        }
        Call::LoadBots(host) => match bots::all(conn).await {
            Ok(all) => Outcome::Bots(host, all),
            Err(f) if f.text == NOT_RUNNING => Outcome::Absent(host),
            Err(f) => Outcome::Failed(format!("{what}: {}", f.text)),
        },
        Call::LoadChat(key) => {
            let bot = match proxy(conn, &key.path).await {
                Ok(b) => b,
                Err(e) => return Outcome::ChatFailed(key, e),
            };
            let mut kept: VecDeque<Item> = VecDeque::new();
            let mut after = 0;
            loop {
                let page = match bot.get_chat(after, 0).await {
                    Ok(p) => p,
                    Err(e) => {
                        return Outcome::ChatFailed(key, format!("{what}: {}", describe(&e)));
                    }
                };
                let Some(last) = page.last() else { break };
                after = last.0;
                for (seq, kind, time, payload) in page {
                    kept.push_back(Item::new(seq, &kind, &time, &payload));
                    if kept.len() > KEPT_ITEMS {
                        kept.pop_front();
                    }
                }
            }
            Outcome::Chat(key, kept.into())
        }
        Call::Send { bot, text } => {
            if text.len() > botvisor::sizes::MAX_SEND_BYTES {
                return Outcome::Failed(botvisor::sizes::send_too_long(text.len()));
            }
            let proxy = match proxy(conn, &bot.path).await {
                Ok(b) => b,
                Err(e) => return Outcome::Failed(e),
            };
            match proxy.send(&text, HashMap::new()).await {
                Ok(_) => Outcome::Done("sent".into()),
                Err(e) => failed(e),
            }
        }
        Call::Answer {
            bot,
            request,
            behavior,
            scope,
            message,
        } => {
            let proxy = match proxy(conn, &bot.path).await {
                Ok(b) => b,
                Err(e) => return Outcome::Failed(e),
            };
            let mut options: HashMap<&str, Variant<'_>> = HashMap::new();
            options.insert("client", Variant::from("botvisorctl ui"));
            if scope != "once" {
                options.insert("scope", Variant::from(scope.as_str()));
            }
            if !message.is_empty() {
                options.insert("message", Variant::from(message.as_str()));
            }
            match proxy.respond_permission(&request, behavior, options).await {
                Ok(()) => Outcome::Done(match (behavior, scope.as_str()) {
                    ("allow", "once") => format!("allowed {}", show::safe(&request)),
                    ("allow", s) => format!("allowed {} ({s})", show::safe(&request)),
                    _ => format!("denied {}", show::safe(&request)),
                }),
                Err(e) => failed(e),
            }
        }
        Call::Interrupt(bot) => match proxy(conn, &bot.path).await {
            Ok(p) => match p.interrupt().await {
                Ok(true) => Outcome::Done("interrupting the running turn".into()),
                Ok(false) => Outcome::Done("no turn was running: nothing to interrupt".into()),
                Err(e) => failed(e),
            },
            Err(e) => Outcome::Failed(e),
        },
        Call::Stop(bot) => match proxy(conn, &bot.path).await {
            Ok(p) => match p.stop().await {
                Ok(()) => Outcome::Done("stopping the agent".into()),
                Err(e) => failed(e),
            },
            Err(e) => Outcome::Failed(e),
        },
        Call::Restart(bot) => match proxy(conn, &bot.path).await {
            Ok(p) => match p.restart(HashMap::new()).await {
                Ok(()) => Outcome::Done("restarting the agent".into()),
                Err(e) => failed(e),
            },
            Err(e) => Outcome::Failed(e),
        },
    }
}
