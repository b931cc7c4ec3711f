//! `schedule add|list|rm|pause|resume|run-now` and `fire` (issue 49): scheduled prompts,
//! through `org.botvisor.Botvisor1.Schedules`. `fire` is what each schedule's timer runs.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::json;
use zbus::{Connection, Variant};

use botvisor::dbus::client::SchedulesProxy;

use crate::bots;
use crate::fail::{FAILED, Failure, OK, describe, error_name};
use crate::shell_word;

/// One schedule as `Schedules` gives it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Shown {
    /// 32 hex digits.
    pub id: String,
    /// Its bot's object path.
    pub bot: String,
    /// The calendar, normalized.
    pub calendar: String,
    /// The prompt: its first 500 characters, `…` after them when cut.
    pub prompt: String,
    /// Whether `prompt` is cut.
    pub prompt_cut: bool,
    /// `queue` or `skip`.
    pub when_busy: String,
    /// `same` or `fresh`.
    pub conversation: String,
    /// Its end, Unix seconds (0: none).
    pub until: i64,
    /// Seconds.
    pub random_delay_s: u32,
    /// Whether paused.
    pub paused: bool,
    /// The next due time, Unix seconds (0: none known).
    pub next: i64,
    /// The last fire's due time, Unix seconds (0: none).
    pub last_fired: i64,
}

fn shown(m: &HashMap<String, zbus::OwnedVariant>) -> Shown {
    let text = |k: &str| {
        m.get(k)
            .and_then(|v| <&str>::try_from(&**v).ok().map(str::to_owned))
            .or_else(|| {
                m.get(k)
                    .and_then(|v| zbus::ObjectPath::try_from(&**v).ok().map(|p| p.to_string()))
            })
            .unwrap_or_default()
    };
    let int = |k: &str| m.get(k).and_then(|v| i64::try_from(&**v).ok()).unwrap_or(0);
    Shown {
        id: text("id"),
        bot: text("bot"),
        calendar: text("calendar"),
        prompt: text("prompt"),
        when_busy: text("when_busy"),
        conversation: text("conversation"),
        until: int("until"),
        random_delay_s: m
            .get("random_delay_s")
            .and_then(|v| u32::try_from(&**v).ok())
            .unwrap_or(0),
        paused: m
            .get("paused")
            .and_then(|v| bool::try_from(&**v).ok())
            .unwrap_or(false),
        prompt_cut: m
            .get("prompt_cut")
            .and_then(|v| bool::try_from(&**v).ok())
            .unwrap_or(false),
        next: int("next"),
        last_fired: int("last_fired"),
    }
}

async fn proxy(conn: &Connection) -> Result<SchedulesProxy<'static>, Failure> {
    Ok(SchedulesProxy::builder(conn)
        .cache_properties(zbus::proxy::CacheProperties::No)
        .build()
        .await?)
}

/// Every schedule.
pub async fn all(conn: &Connection) -> Result<Vec<Shown>, Failure> {
    Ok(proxy(conn)
        .await?
        .schedules()
        .await?
        .iter()
        .map(shown)
        .collect())
}

/// The schedule id `spec` names: a whole id, or a prefix of 4 or more characters that one
/// schedule's id starts with. Errors: none or several.
async fn resolve(conn: &Connection, spec: &str) -> Result<String, Failure> {
    let spec = &spec.to_ascii_lowercase();
    if botvisor::schedule::is_id(spec) {
        return Ok(spec.to_owned());
    }
    if spec.len() < 4 {
        return Err(Failure::usage(format!(
            "{}: give a schedule id, or 4 or more of its first characters (`schedule list` \
             shows them)",
            shell_word(spec)
        )));
    }
    let found: Vec<String> = all(conn)
        .await?
        .into_iter()
        .map(|s| s.id)
        .filter(|id| id.starts_with(spec))
        .collect();
    match found.as_slice() {
        [one] => Ok(one.clone()),
        [] => Err(Failure::failed(format!("no schedule {}", shell_word(spec)))),
        _ => Err(Failure::usage(format!(
            "{} begins {} schedule ids; give more of it",
            shell_word(spec),
            found.len()
        ))),
    }
}

/// A time in Unix seconds in local time (`HH:MM`, with the date when not within a day); `-`
/// for 0.
fn when(t: i64) -> String {
    if t <= 0 {
        return "-".into();
    }
    botvisor::time::local_time(t as u64)
}

/// How a schedule made by `schedule add` fires: its options.
#[derive(Debug, Clone, Default)]
pub struct How {
    /// `--skip-when-busy`.
    pub skip_when_busy: bool,
    /// `--fresh`: a new conversation at each fire.
    pub fresh: bool,
    /// `--until`: its end, as systemd reads a timestamp.
    pub until: Option<String>,
    /// `--random-delay`, in seconds.
    pub random_delay: Option<u32>,
}

/// `schedule add BOT CALENDAR PROMPT`.
pub async fn add(
    conn: &Connection,
    bot: &str,
    calendar: &str,
    prompt: &str,
    how: How,
    json: bool,
) -> Result<u8, Failure> {
    let path = bots::path_of(conn, bot).await?;
    let mut options: HashMap<&str, Variant<'_>> = HashMap::new();
    if how.skip_when_busy {
        options.insert("when_busy", "skip".into());
    }
    if how.fresh {
        options.insert("conversation", "fresh".into());
    }
    if let Some(u) = &how.until {
        options.insert("until", u.as_str().into());
    }
    if let Some(d) = how.random_delay {
        options.insert("random_delay_s", d.into());
    }
    let p = proxy(conn).await?;
    let id = p
        .create_schedule(&path.as_ref(), calendar, prompt, options)
        .await?;
    let s = all(conn)
        .await?
        .into_iter()
        .find(|s| s.id == id)
        .unwrap_or_default();
    if json {
        json_line!(json!({"id": id, "bot": path.as_str(), "calendar": s.calendar, "next": s.next}));
    } else {
        outln!(
            "schedule {id} made: {} ({}), next {}",
            shell_word(bot),
            s.calendar,
            when(s.next)
        );
    }
    Ok(OK)
}

/// `schedule list`: a table, or with `--json` one JSON array of objects.
pub async fn list(conn: &Connection, json: bool) -> Result<u8, Failure> {
    let list = all(conn).await?;
    let names: HashMap<String, String> = bots::all(conn)
        .await?
        .into_iter()
        .map(|b| (b.path, b.name))
        .collect();
    if json {
        let rows: Vec<serde_json::Value> = list
            .iter()
            .map(|s| {
                json!({
                    "id": s.id,
                    "bot": names.get(&s.bot).cloned().unwrap_or_default(),
                    "bot_path": s.bot,
                    "calendar": s.calendar,
                    "prompt": s.prompt,
                    "prompt_cut": s.prompt_cut,
                    "when_busy": s.when_busy,
                    "conversation": s.conversation,
                    "until": s.until,
                    "random_delay_s": s.random_delay_s,
                    "paused": s.paused,
                    "next": s.next,
                    "last_fired": s.last_fired,
                })
            })
            .collect();
        json_line!(serde_json::Value::Array(rows));
        return Ok(OK);
    }
    if list.is_empty() {
        outln!("no schedules; `schedule add BOT CALENDAR PROMPT` makes one");
        return Ok(OK);
    }
    for s in &list {
        let bot = names.get(&s.bot).map(String::as_str).unwrap_or("?");
        let next = if s.paused {
            "paused".to_owned()
        } else if s.until > 0 && s.until < botvisor::time::unix_now() {
            format!("none: ended {}", when(s.until))
        } else if s.until > 0 {
            format!("{} (until {})", when(s.next), when(s.until))
        } else {
            when(s.next)
        };
        let prompt: String = s.prompt.chars().take(40).collect();
        let fresh = if s.conversation == "fresh" {
            "  (fresh)"
        } else {
            ""
        };
        outln!(
            "{}  {}  {}  next {}  {}{fresh}",
            &s.id[..8.min(s.id.len())],
            shell_word(bot),
            s.calendar,
            next,
            shell_word(&prompt)
        );
    }
    Ok(OK)
}

/// `schedule rm ID`.
pub async fn remove(conn: &Connection, spec: &str, json: bool) -> Result<u8, Failure> {
    let id = resolve(conn, spec).await?;
    proxy(conn).await?.delete_schedule(&id).await?;
    if json {
        json_line!(json!({"id": id, "deleted": true}));
    } else {
        outln!("schedule {id} deleted, with its timer");
    }
    Ok(OK)
}

/// `schedule pause ID` and `schedule resume ID`.
pub async fn pause(conn: &Connection, spec: &str, paused: bool, json: bool) -> Result<u8, Failure> {
    let id = resolve(conn, spec).await?;
    proxy(conn).await?.pause_schedule(&id, paused).await?;
    if json {
        json_line!(json!({"id": id, "paused": paused}));
    } else if paused {
        outln!("schedule {id} paused: its timer is removed until `schedule resume`");
    } else {
        outln!("schedule {id} resumed");
    }
    Ok(OK)
}

/// How long `fire` tries while botvisord restarts or is being started: past this, the timer's
/// service fails (shown by `systemctl --user --failed`) and the next due time fires.
pub const FIRE_TRIES_FOR: Duration = Duration::from_secs(90);

/// `schedule run-now ID` (`now`) and `fire ID` (the timer's): fires, says what became of it.
/// Exit 1 when the fire failed (the bot's chat says why), so that a timer's service shows it.
pub async fn fire(conn: &Connection, spec: &str, now: bool, json: bool) -> Result<u8, Failure> {
    let id = if now {
        resolve(conn, spec).await?
    } else {
        spec.to_ascii_lowercase()
    };
    let p = proxy(conn).await?;
    let deadline = Instant::now() + FIRE_TRIES_FOR;
    let mut wait = Duration::from_millis(250);
    // The moment this run-now was asked, the same each time it is asked again: a first call
    // whose answer was lost (botvisord killed) and that made its fire is not made twice.
    let asked_at = botvisor::time::unix_now();
    let (outcome, turn, due) = loop {
        let mut options: HashMap<&str, Variant<'_>> = HashMap::new();
        if now {
            options.insert("now", true.into());
            options.insert("at", asked_at.into());
        }
        match p.fire_schedule(&id, options).await {
            Ok(answer) => break answer,
            // botvisord stops or restarts meanwhile; nothing was claimed: ask again.
            Err(e)
                if Instant::now() < deadline
                    && (matches!(error_name(&e), Some("Busy" | "StorageUnavailable"))
                        || matches!(e, zbus::Error::FDO(_) | zbus::Error::InputOutput(_))) =>
            {
                say_retry(&describe(&e));
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(5));
            }
            Err(e) => return Err(e.into()),
        }
    };
    if json {
        json_line!(json!({"id": id, "outcome": outcome, "turn_id": turn, "due": due}));
    } else {
        match outcome.as_str() {
            "queued" => outln!("fired (due {}): turn {turn}", when(due)),
            "already_fired" => outln!(
                "the fire of {} was made already: nothing more sent",
                when(due)
            ),
            "still_waiting" => outln!(
                "fired (due {}): the prompt of an earlier fire, turn {turn}, has not gone yet and \
                 stands for this one: nothing more sent",
                when(due)
            ),
            "nothing_due" => outln!("nothing was due: nothing sent"),
            other => outln!("{other} (due {}): the bot's chat says why", when(due)),
        }
    }
    Ok(if outcome == "failed" { FAILED } else { OK })
}

/// A retry of `fire`, said on stderr (the timer's service shows it in the journal).
fn say_retry(why: &str) {
    eprintln!("botvisorctl: fire: {why}; asking again");
}
