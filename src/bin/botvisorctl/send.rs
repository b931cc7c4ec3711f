//! `botvisorctl send`: one message, exactly its own turn, and an exit code that says how the
//! turn ended.
//!
//! Every signal of the bot is read from one stream, in the bus's order (a match rule on the
//! bot's path, subscribed before `Send`), so an item is never printed before one that was
//! committed earlier. An item is this turn's when its payload's `turn_id` is the id `Send`
//! returned: every item that belongs to a turn carries it (results, permission requests and
//! answers, retries included). The command ends at this turn's `TurnFinished`, after every item
//! of the turn (they are committed, and signalled, before it).

use std::collections::{HashMap, HashSet, VecDeque};

use serde_json::{Value, json};
use zbus::{Connection, Variant};

use botvisor::dbus::ROOT_PATH;
use botvisor::dbus::client::{BotProxy, ManagerProxy};

use super::drain::{Drained, botvisor_signals};
use super::fail::{CTRL_C, FAILED, Failure, describe, turn_exit_code};
use super::show::{self, DIM, Detail, ERROR, GOOD, paint};
use super::term::{Said, Term};
use super::{bots, hint, shell_word, whole_payload};

/// What `send` says, exiting 1, when the bot is deleted while it waits.
const DELETED: &str = "the bot was deleted before the turn ended";

/// A permission request of this turn waiting to be asked: `(request_id, tool, input, scopes)`,
/// the scopes each with what it lets run ([`show::scopes`]).
type Asked = (String, String, Value, Vec<(String, String)>);

/// The key that answers with `scope` at send's question: `y` (once), `s` (session), `a`
/// (always), `p` (program).
fn scope_key(scope: &str) -> &'static str {
    match scope {
        "once" => "y",
        "session" => "s",
        "always" => "a",
        "program" => "p",
        _ => "",
    }
}

/// Sends `text` to the bot `spec` names and follows the turn; returns the exit code.
pub async fn run(conn: &Connection, spec: &str, text: String, json: bool) -> Result<u8, Failure> {
    let path = bots::path_of(conn, spec).await?;
    let bot = bots::proxy(conn, path.clone()).await?;
    let manager = ManagerProxy::new(conn).await?;
    let bot_id = bot.id().await?;
    // The bot's signals and the root's InterfacesRemoved (the bot deleted) in one stream, the
    // daemon leaving in another, read in the order they came by a task of their own
    // ([`drained`]): the loop below awaits calls, which never wait for room in a stream.
    let mut events = botvisor_signals(conn).await?;

    let turn_id = bot.send(&text, HashMap::new()).await.map_err(|e| {
        Failure::failed(match super::fail::error_name(&e) {
            // A failed bot is cleared by a restart; a folder that is gone is not.
            Some("Busy") if describe(&e).contains("state failed") => format!(
                "{}; `{} restart {}` clears it",
                describe(&e),
                hint::ctl(),
                shell_word(spec)
            ),
            _ => describe(&e),
        })
    })?;
    use std::io::IsTerminal;
    let interactive = !json && std::io::stdin().is_terminal() && std::io::stderr().is_terminal();
    let mut follow = Follow {
        bot: &bot,
        manager: &manager,
        bot_id,
        spec: shell_word(spec),
        turn_id: turn_id.clone(),
        json,
        term: Term::new(interactive),
        mine: HashSet::new(),
        waiting: VecDeque::new(),
        open: Vec::new(),
        asked_scopes: Vec::new(),
        result: None,
        finished: None,
        held: false,
        me: conn
            .unique_name()
            .map(|n| n.to_string())
            .unwrap_or_default(),
        login_words: None,
        told_held: false,
    };
    if json {
        json_line!(
            json!({"event": "sent", "turn_id": turn_id, "bot": bot.inner().path().as_str()})
        );
    } else if std::io::stderr().is_terminal() {
        follow
            .term
            .note(&paint(DIM, &format!("(turn {})", show::safe(&turn_id))));
    }
    // Sent to a bot that waits for another process already: said now (no change will say it).
    if bot.state().await.is_ok_and(|s| s == "held_elsewhere") {
        follow.tell_held().await;
    }
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    loop {
        follow.ask_next();
        tokio::select! {
            biased;
            event = events.recv() => match event {
                Some(Drained::First(Ok(msg))) => {
                    let hdr = msg.header();
                    if hdr.path().is_some_and(|p| p.as_str() == path.as_str()) {
                        if let Some(code) = follow.on_signal(&msg).await? {
                            return Ok(code);
                        }
                    } else if hdr.path().is_some_and(|p| p.as_str() == ROOT_PATH)
                        && hdr.member().is_some_and(|m| m.as_str() == "InterfacesRemoved")
                    {
                        let gone = msg
                            .body()
                            .deserialize::<(zbus::OwnedObjectPath, Vec<String>)>()
                            .is_ok_and(|(p, _)| p == path);
                        if gone {
                            return Err(Failure::failed(DELETED));
                        }
                    }
                }
                Some(Drained::First(Err(e))) if !super::fail::is_lost(&e) => return Err(e.into()),
                Some(Drained::First(Err(_))) | None => return Err(follow.lost()),
                Some(Drained::Second(sig)) => {
                    // What botvisord said before it left came first (`drained` keeps the order).
                    if sig.args().is_ok_and(|a| a.new_owner().is_none()) {
                        return Err(Failure::failed(format!(
                            "botvisord went away before the turn ended; do not send the message \
                             again: when it runs again the turn ends once, answered (the agent \
                             kept, its answer read back, or the message asked again without the \
                             unanswered attempt) unless the agent had begun its work (follow it \
                             with `{} chat {}`)",
                            hint::ctl(),
                            follow.spec
                        )));
                    }
                }
            },
            said = follow.term.said() => follow.on_said(said).await,
            _ = &mut ctrl_c => {
                follow.left();
                return Ok(CTRL_C);
            }
        }
    }
}

/// What one `send` knows of its turn.
struct Follow<'a> {
    bot: &'a BotProxy<'static>,
    manager: &'a ManagerProxy<'a>,
    /// The bot's id.
    bot_id: String,
    /// The bot as the user named it, ready for a shell.
    spec: String,
    turn_id: String,
    json: bool,
    term: Term,
    /// This turn's permission requests.
    mine: HashSet<String>,
    /// This turn's requests not yet asked on the terminal.
    waiting: VecDeque<Asked>,
    /// This turn's requests not yet answered.
    open: Vec<String>,
    /// The scopes of the request asked at the terminal.
    asked_scopes: Vec<(String, String)>,
    /// The turn's `result` payload.
    result: Option<Value>,
    /// The turn's `turn_finished` payload.
    finished: Option<Value>,
    /// Streamed text was held back while a question was open: print the message whole.
    held: bool,
    /// This connection's unique name (an answer given from here).
    me: String,
    /// What this turn's `login_required` note said (the login expired or was refused).
    login_words: Option<String>,
    /// The wait for another process on the conversation was said.
    told_held: bool,
}

impl Follow<'_> {
    /// Handles one signal of the bot; `Some(exit code)` at the turn's end.
    async fn on_signal(&mut self, msg: &zbus::Message) -> Result<Option<u8>, Failure> {
        let hdr = msg.header();
        let body = msg.body();
        match hdr.member().map(|m| m.as_str()) {
            Some("ChatItemAdded") => {
                let (seq, kind, payload): (u64, String, String) = body.deserialize()?;
                let v: Value = serde_json::from_str(&payload).unwrap_or(Value::Null);
                // A Stop before the message went: it waits for the next Send or Restart, and
                // this command has nothing more to follow.
                if kind == "system"
                    && v["reason"] == "stopped_with_queue"
                    && v["turn_ids"]
                        .as_array()
                        .is_some_and(|ids| ids.iter().any(|t| *t == self.turn_id.as_str()))
                {
                    if self.json {
                        json_line!(
                            json!({"event": "chat", "seq": seq, "kind": kind, "payload": v})
                        );
                    }
                    return Err(Failure::failed(format!(
                        "the bot was stopped before the message went; it waits and goes at the \
                         next message or `{} restart {}`",
                        hint::ctl(),
                        self.spec
                    )));
                }
                let belongs = v["turn_id"] == self.turn_id.as_str()
                    || (kind == "permission_answer"
                        && v["request_id"]
                            .as_str()
                            .is_some_and(|r| self.mine.contains(r)));
                if belongs {
                    let v = whole_payload(self.bot, seq, &payload).await;
                    self.on_item(seq, &kind, v);
                }
            }
            Some("TextDelta") => {
                let (turn, text): (String, String) = body.deserialize()?;
                if turn == self.turn_id && !self.json && !self.term.stream(&text) {
                    self.held = true;
                }
            }
            Some("TurnFinished") => {
                let (turn, outcome): (String, String) = body.deserialize()?;
                if turn == self.turn_id {
                    // A deleted bot's turn ends `interrupted`, before its object goes away: the
                    // bot has left the list by then (Delete takes it out before it answers).
                    let deleted = outcome != "success"
                        && (self
                            .finished
                            .as_ref()
                            .is_some_and(|f| f["reason"] == "deleted")
                            || self.deleted().await);
                    let code = self.done(&outcome, deleted);
                    if deleted {
                        return Err(Failure::failed(DELETED));
                    }
                    return Ok(Some(code));
                }
            }
            Some("PropertiesChanged") => {
                let (_, changed, _): (String, HashMap<String, zbus::OwnedVariant>, Vec<String>) =
                    body.deserialize()?;
                let state = changed
                    .get("State")
                    .and_then(|v| v.try_clone().ok())
                    .and_then(|v| String::try_from(v).ok());
                if state.as_deref() == Some("login_required") {
                    // The turn's own note says it (LastError may already say the exit after it).
                    let last = match self.login_words.take() {
                        Some(words) => words,
                        None => self.bot.last_error().await.unwrap_or_default(),
                    };
                    // The note says it all once: what failed, that the message waits, what works.
                    return Err(Failure::failed(format!(
                        "{}\n(`{} status {}` shows the bot's state.)",
                        super::fail::in_ctl_words(&show::safe(&last)).replace("BOT", &self.spec),
                        hint::ctl(),
                        self.spec
                    )));
                }
                if state.as_deref() == Some("held_elsewhere") {
                    self.tell_held().await;
                }
                if state.as_deref() == Some("failed") {
                    let last = self.bot.last_error().await.unwrap_or_default();
                    return Err(Failure::failed(format!(
                        "the bot failed before the turn ended: {}\nThe message waits; \
                         `{} restart {}` tries again.",
                        show::safe(&last),
                        hint::ctl(),
                        self.spec
                    )));
                }
            }
            _ => {}
        }
        Ok(None)
    }

    /// The message waits for another process on the conversation (`HeldBy`): said once, and
    /// the wait goes on (the message goes by itself once that process exits).
    async fn tell_held(&mut self) {
        if std::mem::replace(&mut self.told_held, true) {
            return;
        }
        let by = self.bot.held_by().await.unwrap_or_default();
        if self.json {
            json_line!(json!({"event": "held_elsewhere", "held_by": by}));
            return;
        }
        self.term.line(&format!(
            "waiting: the conversation is open in another process ({}); the message goes once \
             it exits, or `{} restart {} --fork` continues in a copy",
            show::safe(&by),
            hint::ctl(),
            self.spec
        ));
    }

    fn on_item(&mut self, seq: u64, kind: &str, v: Value) {
        if kind == "system" && v["reason"] == "login_required" {
            self.login_words = v["text"].as_str().map(str::to_owned);
        }
        if self.json {
            json_line!(json!({"event": "chat", "seq": seq, "kind": kind, "payload": v}));
        }
        match kind {
            "permission_request" => {
                let id = v["request_id"].as_str().unwrap_or_default().to_owned();
                self.mine.insert(id.clone());
                self.open.push(id.clone());
                if self.json {
                    return;
                }
                if self.term.interactive {
                    self.waiting.push_back((
                        id,
                        v["tool"].as_str().unwrap_or("?").to_owned(),
                        v["input"].clone(),
                        show::scopes(&v),
                    ));
                } else {
                    let line = show::after_first_line(
                        &show::item_text(kind, &v, Detail::Full, ""),
                        &format!(
                            " — waiting; answer with: {} answer {} {} allow|deny",
                            hint::ctl(),
                            self.spec,
                            show::safe(&id)
                        ),
                    );
                    self.term.line(&line);
                }
            }
            "permission_answer" => {
                let id = v["request_id"].as_str().unwrap_or_default().to_owned();
                self.open.retain(|o| *o != id);
                self.waiting.retain(|(w, _, _, _)| *w != id);
                if self.json {
                    return;
                }
                if self.term.asking() == Some(id.as_str()) {
                    self.term.close(&format!(
                        "(answered elsewhere: {} by {})",
                        show::safe(v["behavior"].as_str().unwrap_or("?")),
                        show::safe(&show::answered_by(&v))
                    ));
                } else if v["by"] != self.me.as_str() {
                    self.term.line(&show::item_text(kind, &v, Detail::Full, ""));
                }
            }
            "result" => self.result = Some(v),
            "turn_finished" => self.finished = Some(v),
            _ if self.json => {}
            "user" => {}
            // Said once, by the failure that ends `send` (what failed, that it waits, what works).
            "system" if v["reason"] == "login_required" => {}
            "assistant" => {
                let streamed = self.term.take_streamed();
                if !streamed || std::mem::take(&mut self.held) {
                    self.term.line(&show::item_text(kind, &v, Detail::Full, ""));
                }
            }
            _ => self.term.line(&show::bot_words(
                &show::item_text(kind, &v, Detail::Full, ""),
                &self.spec,
            )),
        }
    }

    /// Opens the next question when none is open.
    fn ask_next(&mut self) {
        if self.term.asking().is_some() {
            return;
        }
        if let Some((id, tool, input, scopes)) = self.waiting.pop_front() {
            let asks = format!(
                "Allow {} {}? (request {})",
                show::safe(&tool),
                show::safe(&show::cut(&show::compact(&input), 300)),
                show::safe(&id)
            );
            // What each answer lets run, when there is more than one allow (issue 46).
            let keys: Vec<(&str, &str)> = scopes
                .iter()
                .map(|(s, w)| (scope_key(s), w.as_str()))
                .filter(|(k, _)| !k.is_empty())
                .collect();
            let question = if keys.len() > 1 {
                let mut q = asks;
                for (key, words) in &keys {
                    q.push_str(&format!("\n  {key}  {}", show::safe(words)));
                }
                let all: Vec<&str> = keys.iter().map(|(k, _)| *k).collect();
                format!("{q}\n  [{}/N] ", all.join("/"))
            } else {
                format!("{asks} [y/N] ")
            };
            self.asked_scopes = scopes;
            self.term.ask(&id, question);
        }
    }

    /// The scope a line typed at the question gives, among those offered; `None`: deny.
    fn scope_said(&self, line: &str) -> Option<String> {
        let key = match line {
            "y" | "Y" | "yes" | "Yes" | "YES" => "y",
            other => other,
        };
        if key == "y" {
            return Some("once".to_owned());
        }
        self.asked_scopes
            .iter()
            .map(|(s, _)| s)
            .find(|s| scope_key(s) == key && *s != "once")
            .cloned()
    }

    async fn on_said(&mut self, said: Said) {
        match said {
            Said::Answer(id, line) => {
                let scope = self.scope_said(&line);
                let behavior = if scope.is_some() { "allow" } else { "deny" };
                let mut options = HashMap::from([("client", Variant::from("botvisorctl"))]);
                if let Some(s) = scope.filter(|s| s != "once") {
                    options.insert("scope", Variant::from(s));
                }
                if let Err(e) = self.bot.respond_permission(&id, behavior, options).await {
                    self.term
                        .note(&paint(ERROR, &format!("botvisorctl: {}", describe(&e))));
                }
            }
            Said::Eof(id) => {
                self.term.note(&format!(
                    "no answer given here; answer with: {} answer {} {} allow|deny",
                    hint::ctl(),
                    self.spec,
                    show::safe(&id)
                ));
            }
        }
    }

    /// Whether the bot is deleted (botvisord no longer knows its id).
    async fn deleted(&self) -> bool {
        match self.manager.get_bot(&self.bot_id).await {
            Ok(_) => false,
            Err(e) => super::fail::error_name(&e) == Some("NotFound"),
        }
    }

    /// The turn ended: its last line, and the exit code of its outcome; when the bot was
    /// `deleted`, no note (the caller fails saying so) and the exit code 1.
    fn done(&mut self, outcome: &str, deleted: bool) -> u8 {
        let finished = self.finished.take().unwrap_or(Value::Null);
        let result = self.result.take().unwrap_or(Value::Null);
        let reason = finished["reason"].as_str().unwrap_or_default();
        let why = finished["text"].as_str().unwrap_or_default();
        if self.json {
            json_line!(
                json!({"event": "turn_finished", "turn_id": self.turn_id, "outcome": outcome,
                       "reason": reason, "text": why})
            );
            return if deleted {
                FAILED
            } else {
                turn_exit_code(outcome)
            };
        }
        // From here on, only for people: what botvisord said, on one line each.
        let (shown_outcome, reason, why) =
            (show::safe(outcome), show::safe(reason), show::safe(why));
        let mut parts = vec![shown_outcome.clone()];
        if !reason.is_empty() && reason != outcome && reason != "success" {
            parts[0] = format!("{shown_outcome} ({reason})");
        }
        parts.extend(show::turn_cost(&result, &finished));
        let line = format!("[done: {}]", parts.join(", "));
        let style = if outcome == "success" { GOOD } else { ERROR };
        self.term.line(&paint(style, &line));
        if deleted {
            return FAILED;
        }
        if outcome != "success" {
            let detail = if why.is_empty() {
                String::new()
            } else {
                format!(": {why}")
            };
            self.term.note(&paint(
                ERROR,
                &format!("botvisorctl: the turn ended {shown_outcome}{detail}"),
            ));
        }
        turn_exit_code(outcome)
    }

    /// The connection to the bus dropped (the ssh link, the bridge, the bus): the turn goes on
    /// in botvisord; what to say, with how to follow it and answer what it asks.
    fn lost(&mut self) -> Failure {
        if self.term.asking().is_some() {
            self.term.close("(the connection was lost)");
        }
        let ctl = hint::ctl();
        let mut text = format!(
            "{} was lost before the turn ended; the turn goes on in botvisord. Follow it with \
             `{ctl} watch {}` (`{ctl} chat {}` shows what it did meanwhile)",
            hint::link(),
            self.spec,
            self.spec
        );
        for id in &self.open {
            text.push_str(&format!(
                "\nit waits for permission: {ctl} answer {} {} allow|deny",
                self.spec,
                show::safe(id)
            ));
        }
        Failure::failed(text)
    }

    /// Ctrl-C: the turn goes on; say how to follow it and answer what it asks.
    fn left(&mut self) {
        if self.term.asking().is_some() {
            self.term.close("(left without answering)");
        }
        if self.json {
            json_line!(
                json!({"event": "left", "turn_id": self.turn_id, "open_requests": self.open})
            );
            return;
        }
        self.term.note(&format!(
            "left; the turn goes on. Follow it with: {} watch {}",
            hint::ctl(),
            self.spec
        ));
        for id in &self.open {
            anstream::eprintln!(
                "it waits for permission: {} answer {} {} allow|deny",
                hint::ctl(),
                self.spec,
                show::safe(id)
            );
        }
    }
}
