//! `botvisorctl watch`: every bot (or one) live, from one ordered stream of the daemon's
//! signals; open permission prompts first; botvisord leaving and coming back.

use std::collections::HashMap;

use serde_json::{Value, json};
use zbus::Connection;
use zbus::{OwnedObjectPath, OwnedVariant as OwnedValue};

use botvisor::dbus::{BOT_INTERFACE, ROOT_PATH};

use super::bots::{self, BotInfo};
use super::drain::{Drained, botvisor_signals};
use super::fail::Failure;
use super::show::{self, ASK, DIM, Detail, ERROR, NAME, paint};

/// How many columns of a chat item's text `watch` shows; longer ones are cut, with their size
/// and how to read them whole.
pub const WATCH_TEXT_COLUMNS: usize = 2000;

/// What `watch` knows of a bot to label its lines.
#[derive(Clone)]
struct Label {
    id: String,
    name: String,
}

/// The host a watch of several follows on one link (issue 51): its name, on every line, and
/// `botvisorctl` aimed at it, in every hint.
#[derive(Clone)]
pub struct HostTag {
    /// As `list` shows it (`buildbox`).
    pub name: String,
    /// `botvisorctl --host buildbox`.
    pub ctl: String,
}

/// Follows the daemon's signals; returns the exit code.
pub async fn run(conn: &Connection, spec: Option<String>, json: bool) -> Result<u8, Failure> {
    follow(conn, spec, json, None, || {}).await
}

/// [`run`], for the host `host` when several are watched: its lines and hints carry it, and
/// `ready` is called once subscribed and the open prompts shown. Returns as [`run`] does: an
/// error once the link is lost.
pub async fn follow(
    conn: &Connection,
    spec: Option<String>,
    json: bool,
    host: Option<HostTag>,
    ready: impl FnOnce(),
) -> Result<u8, Failure> {
    let only: Option<String> = match &spec {
        Some(b) => Some(bots::path_of(conn, b).await?.to_string()),
        None => None,
    };
    // Subscribe first, then read what is open: nothing falls between. Read in order by a task
    // of their own: the loop awaits calls (the bots, when botvisord is back), which never wait
    // for room in a stream.
    let mut events = botvisor_signals(conn).await?;
    let mut w = Watch {
        json,
        only,
        labels: HashMap::new(),
        streaming: None,
        streamed: 0,
        host,
    };
    let all = bots::all(conn).await?;
    for b in &all {
        w.labels.insert(
            b.path.clone(),
            Label {
                id: b.short.clone(),
                name: b.name.clone(),
            },
        );
    }
    w.open_prompts(&all);
    if w.host.is_some() {
        // One host of several: the caller says it is watched.
        ready();
    } else if json {
        // Subscribed: whatever happens from now on is shown (a script can wait for this line).
        let watched = match &w.only {
            Some(path) => all.iter().filter(|b| &b.path == path).count(),
            None => all.len(),
        };
        json_line!(json!({"event": "watching", "bots": watched}));
    } else {
        let what = match &spec {
            Some(s) => show::safe(s),
            None => format!("all bots ({})", all.len()),
        };
        anstream::eprintln!(
            "{}",
            paint(DIM, &format!("watching {what}; Ctrl-C to stop"))
        );
    }

    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    loop {
        tokio::select! {
            biased;
            event = events.recv() => match event {
                Some(Drained::First(Ok(m))) => {
                    if w.on_signal(&m)? {
                        return Ok(super::fail::OK);
                    }
                }
                Some(Drained::First(Err(e))) if !super::fail::is_lost(&e) => return Err(e.into()),
                Some(Drained::First(Err(_))) | None if w.host.is_some() => {
                    // One host of several: the caller says it is offline and tries it again.
                    return Err(Failure::failed("the connection to its bus was lost"));
                }
                Some(Drained::First(Err(_))) | None => {
                    w.end_stream();
                    let again = match &spec {
                        Some(s) => format!("{} watch {}", w.ctl(), super::shell_word(s)),
                        None => format!("{} watch", w.ctl()),
                    };
                    return Err(Failure::failed(format!(
                        "{} was lost; what happens in botvisord goes on. Watch again with `{again}`",
                        super::hint::link()
                    )));
                }
                Some(Drained::Second(sig)) => {
                    let Ok(a) = sig.args() else { continue };
                    let back = a.new_owner().is_some();
                    w.end_stream();
                    if json {
                        let mut j = json!({"event": if back { "daemon_back" } else { "daemon_left" }});
                        if let Some(h) = &w.host {
                            j["host"] = json!(h.name);
                        }
                        json_line!(j);
                    } else if back {
                        outln!("{}", paint(DIM, &format!("{}botvisord is back", w.host_tag(": "))));
                    } else {
                        outln!(
                            "{}",
                            paint(ERROR, &format!("{}botvisord went away; waiting for it to come back (Ctrl-C to stop)", w.host_tag(": ")))
                        );
                    }
                    if back {
                        // Names of bots created meanwhile, and prompts opened again at start.
                        if let Ok(all) = bots::all(conn).await {
                            for b in &all {
                                w.labels.insert(b.path.clone(), Label { id: b.short.clone(), name: b.name.clone() });
                            }
                        }
                    }
                }
            },
            _ = &mut ctrl_c => return Ok(super::fail::OK),
        }
    }
}

struct Watch {
    json: bool,
    /// The path of the one bot watched.
    only: Option<String>,
    labels: HashMap<String, Label>,
    /// The bot whose text is streaming on the current line.
    streaming: Option<String>,
    /// How many columns of it were printed; past [`WATCH_TEXT_COLUMNS`] the rest is not.
    streamed: usize,
    /// The host, when several are watched (issue 51).
    host: Option<HostTag>,
}

impl Watch {
    /// `botvisorctl` as this watch's hints write it: aimed at its host.
    fn ctl(&self) -> &str {
        match &self.host {
            Some(h) => &h.ctl,
            None => super::hint::ctl(),
        }
    }

    fn label(&self, path: &str) -> Label {
        self.labels.get(path).cloned().unwrap_or_else(|| Label {
            id: path.rsplit('/').next().unwrap_or_default().to_owned(),
            name: path.rsplit('/').next().unwrap_or_default().to_owned(),
        })
    }

    /// The host's name followed by `sep` (`buildbox:` before a bot's name, `buildbox: ` before
    /// a sentence) when several hosts are watched, else nothing.
    fn host_tag(&self, sep: &str) -> String {
        self.host
            .as_ref()
            .map_or_else(String::new, |h| format!("{}{sep}", show::safe(&h.name)))
    }

    fn end_stream(&mut self) {
        if self.streaming.take().is_some() && !self.json {
            outln!();
        }
    }

    fn emit(&mut self, path: &str, mut j: Value, text: String) {
        if self.json {
            if let Some(h) = &self.host {
                j["host"] = json!(h.name);
            }
            if !path.is_empty() {
                let l = self.label(path);
                j["bot"] = json!(path);
                j["id"] = json!(l.id);
                j["name"] = json!(l.name);
            }
            json_line!(j);
        } else {
            self.end_stream();
            outln!("{text}");
        }
    }

    fn prefix(&self, path: &str) -> String {
        let name = show::safe(&self.label(path).name);
        match &self.host {
            Some(h) => paint(NAME, &format!("[{}:{name}]", show::safe(&h.name))),
            None => paint(NAME, &format!("[{name}]")),
        }
    }

    fn open_prompts(&mut self, all: &[BotInfo]) {
        for b in all {
            if self.only.as_ref().is_some_and(|o| *o != b.path) {
                continue;
            }
            for (id, tool, input) in &b.pending {
                let text = format!(
                    "{} {}",
                    self.prefix(&b.path),
                    paint(
                        ASK,
                        &format!(
                            "waiting for permission: {} {} — {} answer {} {} allow|deny",
                            show::safe(tool),
                            show::safe(&show::cut(input, 200)),
                            self.ctl(),
                            show::safe(&b.short),
                            show::safe(id)
                        )
                    )
                );
                let input: Value = serde_json::from_str(input).unwrap_or(Value::Null);
                self.emit(
                    &b.path,
                    json!({"event": "pending_permission", "request_id": id, "tool": tool, "input": input}),
                    text,
                );
            }
        }
    }

    /// Handles one signal; true when the watched bot was deleted (the end).
    fn on_signal(&mut self, msg: &zbus::Message) -> Result<bool, Failure> {
        let hdr = msg.header();
        let path = hdr.path().map(|p| p.to_string()).unwrap_or_default();
        let member = hdr.member().map(|m| m.to_string()).unwrap_or_default();
        let body = msg.body();
        let on_root = path == ROOT_PATH;
        if !on_root && self.only.as_ref().is_some_and(|o| *o != path) {
            return Ok(false);
        }
        match member.as_str() {
            "ChatItemAdded" => {
                let (seq, kind, payload): (u64, String, String) = body.deserialize()?;
                let p: Value = serde_json::from_str(&payload).unwrap_or(Value::Null);
                if kind == "assistant"
                    && self.streaming.as_deref() == Some(path.as_str())
                    && !self.json
                {
                    // The message streamed already; its end is the line's end, and a message cut
                    // says how long it is and how to read it whole, as an item cut does.
                    let cut = self.streamed > WATCH_TEXT_COLUMNS;
                    self.end_stream();
                    if cut {
                        let l = self.label(&path);
                        let size = p["size"]
                            .as_u64()
                            .unwrap_or(p["text"].as_str().map_or(0, |t| t.len() as u64));
                        outln!(
                            "{} {}",
                            self.prefix(&path),
                            paint(
                                DIM,
                                &format!(
                                    "#{seq} ({} in all; {} chat {} --seq {seq})",
                                    show::size(size),
                                    self.ctl(),
                                    l.id
                                )
                            )
                        );
                    }
                    return Ok(false);
                }
                let l = self.label(&path);
                let read = format!("{} chat {} --seq {seq}", self.ctl(), l.id);
                let mut text = format!(
                    "{} {} {}",
                    self.prefix(&path),
                    paint(DIM, &format!("#{seq}")),
                    show::item_text(&kind, &p, Detail::Short(WATCH_TEXT_COLUMNS), &read)
                );
                if kind == "permission_request" {
                    text = show::after_first_line(
                        &text,
                        &format!(
                            " — {} answer {} {} allow|deny",
                            self.ctl(),
                            show::safe(&l.id),
                            show::safe(p["request_id"].as_str().unwrap_or("?"))
                        ),
                    );
                }
                self.emit(
                    &path,
                    json!({"event": "chat", "seq": seq, "kind": kind, "payload": p}),
                    text,
                );
            }
            "TurnFinished" => {
                let (turn, outcome): (String, String) = body.deserialize()?;
                let style = if outcome == "success" { DIM } else { ERROR };
                let text = format!(
                    "{} {}",
                    self.prefix(&path),
                    paint(
                        style,
                        &format!("turn {} ended: {}", show::safe(&turn), show::safe(&outcome))
                    )
                );
                self.emit(
                    &path,
                    json!({"event": "turn_finished", "turn_id": turn, "outcome": outcome}),
                    text,
                );
            }
            "PermissionRequested" => {
                let (id, tool, input): (String, String, String) = body.deserialize()?;
                // Readable output shows it once: as the `permission_request` chat item.
                if self.json {
                    let input: Value = serde_json::from_str(&input).unwrap_or(Value::Null);
                    self.emit(
                        &path,
                        json!({"event": "permission_requested", "request_id": id, "tool": tool, "input": input}),
                        String::new(),
                    );
                }
            }
            "TextDelta" => {
                let (turn, text): (String, String) = body.deserialize()?;
                if self.json {
                    self.emit(
                        &path,
                        json!({"event": "text_delta", "turn_id": turn, "text": text}),
                        String::new(),
                    );
                } else if self.host.is_some() {
                    // Several hosts print at once: whole lines only, the answer as its chat item.
                } else {
                    use std::io::Write;
                    if self.streaming.as_deref() != Some(path.as_str()) {
                        self.end_stream();
                        out!("{} ", self.prefix(&path));
                        self.streaming = Some(path.clone());
                        self.streamed = 0;
                    }
                    // At most WATCH_TEXT_COLUMNS of a message, as items are cut.
                    if self.streamed <= WATCH_TEXT_COLUMNS {
                        let room = WATCH_TEXT_COLUMNS - self.streamed;
                        let whole = show::safe_text(&text);
                        let shown = show::cut(&whole, room);
                        self.streamed += unicode_width::UnicodeWidthStr::width(shown.as_str());
                        out!("{shown}");
                        if shown != whole {
                            self.streamed = WATCH_TEXT_COLUMNS + 1;
                        }
                    }
                    let _ = std::io::stdout().flush();
                }
            }
            "PropertiesChanged" => {
                let (_iface, changed, _inv): (String, HashMap<String, OwnedValue>, Vec<String>) =
                    body.deserialize()?;
                let mut v = serde_json::Map::new();
                let mut parts = Vec::new();
                let mut names: Vec<&String> = changed.keys().collect();
                names.sort();
                for k in names {
                    let val = &changed[k];
                    let shown = property_json(val);
                    if matches!(
                        k.as_str(),
                        "State"
                            | "LastError"
                            | "StopVerdict"
                            | "SessionId"
                            | "Name"
                            | "LimitKind"
                            | "LimitResetsAt"
                            | "CostUSD"
                            | "BudgetUSD"
                            | "PlanLimit"
                            | "HeldBy"
                    ) {
                        let s = match (k.as_str(), shown.as_u64(), shown.as_f64()) {
                            // A reset as people read it: local time.
                            ("LimitResetsAt", Some(at), _) if at > 0 => bots::local_time(at),
                            ("CostUSD", _, Some(usd)) => bots::dollars(usd),
                            ("BudgetUSD", _, Some(usd)) if usd > 0.0 => bots::dollars(usd),
                            ("BudgetUSD", _, _) => "none".to_owned(),
                            ("PlanLimit", _, _) => plan_limit(val)
                                .map(|p| bots::plan_limit_words(&p))
                                .unwrap_or_default(),
                            _ => shown
                                .as_str()
                                .map(str::to_owned)
                                .unwrap_or_else(|| shown.to_string()),
                        };
                        parts.push(format!("{k}={}", show::safe(&show::cut(&s, 300))));
                    }
                    if k == "Name"
                        && let Some(n) = shown.as_str()
                        && let Some(l) = self.labels.get_mut(&path)
                    {
                        l.name = n.to_owned();
                    }
                    v.insert(k.clone(), shown);
                }
                if !parts.is_empty() || self.json {
                    let text = format!("{} {}", self.prefix(&path), paint(DIM, &parts.join(" ")));
                    self.emit(&path, json!({"event": "properties", "changed": v}), text);
                }
            }
            "InterfacesAdded" => {
                let (p, ifaces): (
                    OwnedObjectPath,
                    HashMap<String, HashMap<String, OwnedValue>>,
                ) = body.deserialize()?;
                let Some(props) = ifaces.get(BOT_INTERFACE) else {
                    return Ok(false);
                };
                let info = BotInfo::from_properties(p.as_str(), props);
                let short = bots::short_ids(&[info.id.as_str()])[&info.id].clone();
                self.labels.insert(
                    p.to_string(),
                    Label {
                        id: short,
                        name: info.name.clone(),
                    },
                );
                if self.only.is_none() {
                    let text = paint(
                        DIM,
                        &format!(
                            "bot added: {}{} in {}",
                            self.host_tag(":"),
                            show::safe(&info.name),
                            show::safe(&info.cwd)
                        ),
                    );
                    self.emit(p.as_str(), json!({"event": "bot_added"}), text);
                }
            }
            "InterfacesRemoved" => {
                let (p, _): (OwnedObjectPath, Vec<String>) = body.deserialize()?;
                if self.only.as_ref().is_some_and(|o| o != p.as_str()) {
                    return Ok(false);
                }
                let l = self.label(p.as_str());
                let text = paint(
                    DIM,
                    &format!(
                        "bot removed: {}{} ({})",
                        self.host_tag(":"),
                        show::safe(&l.name),
                        show::safe(&l.id)
                    ),
                );
                self.emit(p.as_str(), json!({"event": "bot_removed"}), text);
                return Ok(self.only.is_some());
            }
            _ => {}
        }
        Ok(false)
    }
}

/// `PlanLimit`'s `(ssdt)`, or `None` for another shape.
fn plan_limit(val: &OwnedValue) -> Option<(String, String, f64, u64)> {
    <(String, String, f64, u64)>::try_from(val.try_clone().ok()?).ok()
}

/// A property value as JSON: strings, numbers (every integer type and `d`; a `d` that is not
/// finite is `null`) and booleans as they are; `PendingPermissions` as a list of
/// `{"request_id", "tool", "input"}`; `PlanLimit` as `{"state", "kind", "utilization",
/// "resets_at"}`, as `status --json` gives it; any other array or structure as a list of its
/// values, a dictionary as an object.
fn property_json(val: &OwnedValue) -> Value {
    if let Ok(pending) = val
        .try_clone()
        .map_err(|_| ())
        .and_then(|v| Vec::<(String, String, String)>::try_from(v).map_err(|_| ()))
    {
        return Value::Array(
            pending
                .into_iter()
                .map(|(id, tool, input)| {
                    json!({"request_id": id, "tool": tool,
                           "input": serde_json::from_str::<Value>(&input).unwrap_or(Value::Null)})
                })
                .collect(),
        );
    }
    if let Some((state, kind, utilization, resets_at)) = plan_limit(val) {
        return json!({"state": state, "kind": kind, "utilization": utilization,
                      "resets_at": resets_at});
    }
    variant_json(val)
}

/// Any D-Bus value as JSON (see [`property_json`]).
fn variant_json(val: &zbus::Variant<'_>) -> Value {
    use zbus::Variant as V;
    match val {
        V::Str(s) => json!(s.as_str()),
        V::ObjectPath(p) => json!(p.as_str()),
        V::Signature(g) => json!(g.to_string()),
        V::U8(n) => json!(n),
        V::Bool(b) => json!(b),
        V::I16(n) => json!(n),
        V::U16(n) => json!(n),
        V::I32(n) => json!(n),
        V::U32(n) => json!(n),
        V::I64(n) => json!(n),
        V::U64(n) => json!(n),
        V::F64(d) => serde_json::Number::from_f64(*d).map_or(Value::Null, Value::Number),
        V::Variant(inner) => variant_json(inner),
        V::Array(a) => Value::Array(a.iter().map(variant_json).collect()),
        V::Structure(s) => Value::Array(s.fields().iter().map(variant_json).collect()),
        V::Dict(d) => Value::Object(
            d.iter()
                .map(|(k, v)| {
                    let key = match variant_json(k) {
                        Value::String(s) => s,
                        other => other.to_string(),
                    };
                    (key, variant_json(v))
                })
                .collect(),
        ),
        _ => Value::Null,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn money_and_the_plan_limit_are_json_not_debug_text() {
        let cost = OwnedValue::try_from(zbus::Variant::F64(0.000282)).unwrap();
        assert_eq!(property_json(&cost), json!(0.000282));
        let nan = OwnedValue::try_from(zbus::Variant::F64(f64::NAN)).unwrap();
        assert_eq!(property_json(&nan), Value::Null);
        let plan = OwnedValue::try_from(zbus::Variant::from((
            "reached".to_owned(),
            "five_hour".to_owned(),
            1.0f64,
            1_796_200_214u64,
        )))
        .unwrap();
        assert_eq!(
            property_json(&plan),
            json!({"state": "reached", "kind": "five_hour", "utilization": 1.0,
                   "resets_at": 1_796_200_214u64})
        );
        let other = OwnedValue::try_from(zbus::Variant::from((7u32, "x".to_owned()))).unwrap();
        assert_eq!(property_json(&other), json!([7, "x"]));
    }

    #[test]
    fn sixty_four_bit_properties_are_json_numbers() {
        for (v, want) in [
            (zbus::Variant::U64(u64::MAX), json!(u64::MAX)),
            (zbus::Variant::U32(7), json!(7)),
            (zbus::Variant::Str("x".into()), json!("x")),
        ] {
            let owned = OwnedValue::try_from(v).unwrap();
            assert_eq!(property_json(&owned), want);
        }
    }
}
