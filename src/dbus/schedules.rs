//! `/org/botvisor/Botvisor1`: the `org.botvisor.Botvisor1.Schedules` interface (issue 49):
//! scheduled prompts, made, changed, paused, deleted and fired, and the `ScheduleFired` signal.
//! Every call that runs systemd's calendar parser or asks the user manager runs in a task of its
//! own (design rule 15: no other client waits behind it).

use std::collections::HashMap;
use std::sync::Arc;

use zbus::message::{Header, Message};
use zbus::names::MemberName;
use zbus::object_server::SignalEmitter;
use zbus::{Connection, OwnedObjectPath, OwnedVariant, Variant, interface};

use super::ctx::Ctx;
use super::error::{Error, Result};
use super::guard::{DescriptorMethods, Detached, Guarded};
use super::manager::answer_with;
use super::options::{OptionReader, Options};
use super::paths::{bot_id, bot_path};
use crate::schedule::claim::Asker;
use crate::schedule::{Conversation, Schedule, WhenBusy};
use crate::supervisor::schedules::{Fired, NewSchedule};

/// The Schedules interface's name.
pub const SCHEDULES_INTERFACE: &str = "org.botvisor.Botvisor1.Schedules";

/// How long ago a `run-now` asked again may have been first asked, in seconds (botvisorctl asks
/// again for 90 s).
pub const MAX_RUN_NOW_AGE_S: i64 = 600;

/// How many characters of a prompt `Schedules` shows.
pub const PROMPT_SHOWN_CHARS: usize = 500;

/// The longest `random_delay_s` taken: a day.
pub const MAX_RANDOM_DELAY_S: u64 = 86_400;

/// The Schedules object (at the root path, beside the Manager).
pub struct Schedules {
    ctx: Arc<Ctx>,
}

impl Schedules {
    /// The Schedules interface, behind the caller check (design rule 14).
    pub fn guarded(ctx: Arc<Ctx>) -> Guarded<Schedules> {
        Guarded::new(Schedules { ctx: ctx.clone() }, ctx)
    }
}

/// What `FireSchedule` answers: outcome (`queued`, `still_waiting`, `skipped`, `failed`,
/// `already_fired`, `nothing_due`), the turn queued or still waiting (empty: none), the due time fired (Unix seconds; 0: none).
type FireAnswer = (String, String, i64);

fn when_busy(r: &mut OptionReader<'_>, method: &str) -> Result<Option<WhenBusy>> {
    match r.string("when_busy")? {
        None => Ok(None),
        Some(w) => WhenBusy::parse(&w).map(Some).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "{method}: option `when_busy` is `queue` or `skip`, not `{}`",
                crate::text::escape(&w, false)
            ))
        }),
    }
}

fn conversation(r: &mut OptionReader<'_>, method: &str) -> Result<Option<Conversation>> {
    match r.string("conversation")? {
        None => Ok(None),
        Some(c) => Conversation::parse(&c).map(Some).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "{method}: option `conversation` is `same` or `fresh`, not `{}`",
                crate::text::escape(&c, false)
            ))
        }),
    }
}

fn random_delay(r: &mut OptionReader<'_>, method: &str) -> Result<Option<u32>> {
    match r.seconds("random_delay_s")? {
        None => Ok(None),
        Some(s) if s <= MAX_RANDOM_DELAY_S => Ok(Some(s as u32)),
        Some(s) => Err(Error::InvalidArgument(format!(
            "{method}: option `random_delay_s` is at most {MAX_RANDOM_DELAY_S} (a day), not {s}"
        ))),
    }
}

async fn create(
    ctx: &Ctx,
    bot: &str,
    calendar: String,
    prompt: String,
    options: Options,
) -> Result<String> {
    let mut r = OptionReader::new("CreateSchedule", &options);
    let when_busy = when_busy(&mut r, "CreateSchedule")?.unwrap_or(WhenBusy::Queue);
    let conversation = conversation(&mut r, "CreateSchedule")?.unwrap_or(Conversation::Same);
    let until = r.string("until")?;
    let random_delay_s = random_delay(&mut r, "CreateSchedule")?.unwrap_or(0);
    r.finish()?;
    let until = match until {
        Some(u) => ctx.supervisor.schedule_end(&u).await?,
        None => 0,
    };
    let bot_id = bot_id(bot)
        .ok_or_else(|| Error::NotFound(format!("no bot at {}", crate::text::escape(bot, false))))?
        .to_owned();
    let s = ctx
        .supervisor
        .create_schedule(NewSchedule {
            bot_id,
            calendar,
            prompt,
            when_busy,
            conversation,
            random_delay_s,
            until,
        })
        .await?;
    Ok(s.id)
}

async fn update(ctx: &Ctx, id: String, options: Options) -> Result<()> {
    let mut r = OptionReader::new("UpdateSchedule", &options);
    let calendar = r.string("calendar")?;
    let prompt = r.string("prompt")?;
    let when_busy = when_busy(&mut r, "UpdateSchedule")?;
    let conversation = conversation(&mut r, "UpdateSchedule")?;
    let until = r.string("until")?;
    let random_delay_s = random_delay(&mut r, "UpdateSchedule")?;
    let paused = r.boolean("paused")?;
    r.finish()?;
    let until = match until {
        Some(u) => Some(ctx.supervisor.schedule_end(&u).await?),
        None => None,
    };
    ctx.supervisor
        .update_schedule(&id, |s| {
            if let Some(c) = calendar {
                s.calendar = c;
            }
            if let Some(p) = prompt {
                s.prompt = p;
            }
            if let Some(w) = when_busy {
                s.when_busy = w;
            }
            if let Some(c) = conversation {
                s.conversation = c;
            }
            if let Some(u) = until {
                s.until = u;
            }
            if let Some(d) = random_delay_s {
                s.random_delay_s = d;
            }
            if let Some(p) = paused {
                s.paused = p;
            }
        })
        .await?;
    Ok(())
}

async fn fire(ctx: &Ctx, conn: &Connection, id: String, options: Options) -> Result<FireAnswer> {
    let mut r = OptionReader::new("FireSchedule", &options);
    let now_asked = r.boolean("now")?.unwrap_or(false);
    let at = r.number("at")?;
    r.finish()?;
    let now = crate::time::unix_now();
    let asker = match (now_asked, at) {
        (false, Some(_)) => {
            return Err(Error::InvalidArgument(
                "FireSchedule: option `at` goes with `now`".into(),
            ));
        }
        (false, None) => Asker::Timer,
        (true, None) => Asker::RunNow { at: now },
        (true, Some(at)) => {
            let at = at as i64;
            if at > now + 5 || at < now - MAX_RUN_NOW_AGE_S {
                return Err(Error::InvalidArgument(format!(
                    "FireSchedule: option `at` ({at}) is when the run-now was first asked: not in \
                     the future, and at most {MAX_RUN_NOW_AGE_S} s ago"
                )));
            }
            Asker::RunNow { at }
        }
    };
    let fired = ctx.supervisor.fire_schedule(&id, asker).await?;
    let (due, turn) = match &fired {
        Fired::Queued { due, turn_id } | Fired::StillWaiting { due, turn_id } => {
            (*due, turn_id.clone())
        }
        Fired::NotQueued { due, .. } => (*due, String::new()),
        Fired::AlreadyFired(due) => (*due, String::new()),
        Fired::NothingDue => (0, String::new()),
    };
    if matches!(
        fired,
        Fired::Queued { .. } | Fired::NotQueued { .. } | Fired::StillWaiting { .. }
    ) {
        // Persisted by the fire; published now (design rule 1).
        if let Ok(s) = ctx.supervisor.schedule(&id) {
            signal_fired(ctx, conn, &s, due, fired.outcome(), &turn).await;
        }
        ctx.supervisor.refresh_next_dues(false).await;
        changed(ctx, conn).await;
    }
    Ok((fired.outcome().to_owned(), turn, due))
}

/// Sends `ScheduleFired` to the clients design rule 14 allows.
async fn signal_fired(
    ctx: &Ctx,
    conn: &Connection,
    s: &Schedule,
    due: i64,
    outcome: &str,
    turn: &str,
) {
    let root = zbus::ObjectPath::from_static_str_unchecked(super::ROOT_PATH);
    let Ok(emitters) = ctx.audience.emitters(conn, &root) else {
        return;
    };
    let bot = bot_path(&s.bot_id);
    for emitter in &emitters {
        if let Err(e) =
            Schedules::schedule_fired(emitter, &s.id, bot.clone(), due, outcome, turn).await
        {
            tracing::debug!(error = %e, "ScheduleFired not sent");
        }
    }
}

/// Says `Schedules` changed (`PropertiesChanged`, invalidated: a client reads it again).
pub(crate) async fn changed(ctx: &Ctx, conn: &Connection) {
    let root = zbus::ObjectPath::from_static_str_unchecked(super::ROOT_PATH);
    let Ok(emitters) = ctx.audience.emitters(conn, &root) else {
        return;
    };
    for emitter in &emitters {
        if let Err(e) = zbus::fdo::Properties::properties_changed(
            emitter,
            zbus::names::InterfaceName::from_static_str_unchecked(SCHEDULES_INTERFACE),
            HashMap::new(),
            std::borrow::Cow::Borrowed(&["Schedules"]),
        )
        .await
        {
            tracing::debug!(error = %e, "Schedules change not signalled");
        }
    }
}

/// How often the units are checked against the database (a unit deleted or edited by hand is
/// written again within this).
pub const UNIT_CHECK: std::time::Duration = std::time::Duration::from_secs(60);

/// How often the next due times that passed are asked again.
pub const NEXT_CHECK: std::time::Duration = std::time::Duration::from_secs(5);

/// Keeps the schedules' timers as the database says, for as long as botvisord runs: at start
/// (every timer started), every [`UNIT_CHECK`]; and `Schedules`' next due times fresh. A failure
/// is said in the journal once per kind, and tried again at the next check.
pub(crate) async fn keep_timers(conn: Connection, ctx: Arc<Ctx>) {
    let mut at_start = true;
    let mut last_error = String::new();
    let mut units = tokio::time::interval(UNIT_CHECK);
    let mut nexts = tokio::time::interval(NEXT_CHECK);
    loop {
        tokio::select! {
            _ = units.tick() => {
                if at_start && ctx.supervisor.refresh_next_dues(true).await {
                    // The next due times first: they are what a client asks for at once.
                    changed(&ctx, &conn).await;
                }
                match ctx.supervisor.reconcile_schedules(at_start).await {
                    Ok(()) => last_error.clear(),
                    Err(why) if why != last_error => {
                        tracing::warn!(error = %why, "the schedules' timers could not be checked; trying again in {} s", UNIT_CHECK.as_secs());
                        last_error = why;
                    }
                    Err(_) => {}
                }
                if ctx.supervisor.refresh_next_dues(false).await {
                    changed(&ctx, &conn).await;
                }
                at_start = false;
            }
            _ = nexts.tick() => {
                if ctx.supervisor.ended_with_units()
                    && let Err(why) = ctx.supervisor.reconcile_schedules(false).await
                {
                    tracing::debug!(error = %why, "an ended schedule's timer goes at the next check");
                }
                if ctx.supervisor.refresh_next_dues(false).await {
                    changed(&ctx, &conn).await;
                }
            }
        }
    }
}

/// After a bot was deleted (its schedules with it): its timers removed now, in a task of its
/// own, and `Schedules`' change signalled.
pub(crate) fn after_bot_deleted(ctx: Arc<Ctx>, conn: Connection) {
    tokio::spawn(async move {
        if let Err(why) = ctx.supervisor.reconcile_schedules(false).await {
            tracing::debug!(error = %why, "the deleted bot's timers go at the next check");
        }
        if ctx.supervisor.refresh_next_dues(false).await {
            changed(&ctx, &conn).await;
        }
    });
}

/// One schedule as `Schedules` shows it.
fn shown(s: &Schedule, next: Option<i64>) -> HashMap<String, OwnedVariant> {
    let mut m: HashMap<String, OwnedVariant> = HashMap::new();
    let mut put = |k: &str, v: Variant<'_>| {
        if let Ok(v) = OwnedVariant::try_from(v) {
            m.insert(k.to_owned(), v);
        }
    };
    put("id", s.id.as_str().into());
    put("bot", bot_path(&s.bot_id).into());
    put("calendar", s.calendar.as_str().into());
    // Its beginning only: the property holds every schedule (their prompts whole could pass
    // what a bus message carries).
    let (preview, cut) = match s.prompt.char_indices().nth(PROMPT_SHOWN_CHARS) {
        Some((at, _)) => (format!("{}…", &s.prompt[..at]), true),
        None => (s.prompt.clone(), false),
    };
    put("prompt", super::bounds::bus_text(&preview).as_ref().into());
    put("prompt_cut", cut.into());
    put("when_busy", s.when_busy.as_str().into());
    put("conversation", s.conversation.as_str().into());
    put("until", s.until.into());
    put("random_delay_s", s.random_delay_s.into());
    put("paused", s.paused.into());
    put("next", next.unwrap_or(0).into());
    put(
        "last_fired",
        if s.last_fired_at > 0 { s.last_due } else { 0 }.into(),
    );
    m
}

impl DescriptorMethods for Schedules {
    fn detached_call(
        &self,
        conn: &Connection,
        msg: &Message,
        name: &MemberName<'_>,
    ) -> Option<Detached> {
        let (ctx, conn, msg) = (self.ctx.clone(), conn.clone(), msg.clone());
        let name = name.as_str().to_owned();
        if !matches!(
            name.as_str(),
            "CreateSchedule"
                | "UpdateSchedule"
                | "DeleteSchedule"
                | "PauseSchedule"
                | "FireSchedule"
        ) {
            return None;
        }
        Some(Box::pin(async move {
            let hdr: Header<'_> = msg.header();
            let body = msg.body();
            let bad = |e: zbus::Error| Error::InvalidArgument(format!("{name}: {e}"));
            match name.as_str() {
                "CreateSchedule" => {
                    let answer =
                        match body.deserialize::<(OwnedObjectPath, String, String, Options)>() {
                            Ok((bot, cal, prompt, options)) => {
                                create(&ctx, bot.as_str(), cal, prompt, options).await
                            }
                            Err(e) => Err(bad(e)),
                        };
                    if answer.is_ok() {
                        ctx.supervisor.refresh_next_dues(false).await;
                        changed(&ctx, &conn).await;
                    }
                    answer_with(&conn, &hdr, answer).await;
                }
                "UpdateSchedule" => {
                    let answer = match body.deserialize::<(String, Options)>() {
                        Ok((id, options)) => update(&ctx, id, options).await,
                        Err(e) => Err(bad(e)),
                    };
                    if answer.is_ok() {
                        ctx.supervisor.refresh_next_dues(true).await;
                        changed(&ctx, &conn).await;
                    }
                    answer_with(&conn, &hdr, answer).await;
                }
                "PauseSchedule" => {
                    let answer = match body.deserialize::<(String, bool)>() {
                        Ok((id, paused)) => {
                            let options =
                                Options::from([("paused".to_owned(), OwnedVariant::from(paused))]);
                            update(&ctx, id, options).await
                        }
                        Err(e) => Err(bad(e)),
                    };
                    if answer.is_ok() {
                        changed(&ctx, &conn).await;
                    }
                    answer_with(&conn, &hdr, answer).await;
                }
                "DeleteSchedule" => {
                    let answer = match body.deserialize::<String>() {
                        Ok(id) => ctx
                            .supervisor
                            .delete_schedule(&id)
                            .await
                            .map_err(Error::from),
                        Err(e) => Err(bad(e)),
                    };
                    if answer.is_ok() {
                        ctx.supervisor.refresh_next_dues(false).await;
                        changed(&ctx, &conn).await;
                    }
                    answer_with(&conn, &hdr, answer).await;
                }
                _ => {
                    let answer = match body.deserialize::<(String, Options)>() {
                        Ok((id, options)) => fire(&ctx, &conn, id, options).await,
                        Err(e) => Err(bad(e)),
                    };
                    answer_with(&conn, &hdr, answer).await;
                }
            }
        }))
    }
}

/// Scheduled prompts: a bot's prompt on a calendar, fired by the systemd user manager's timers
/// (`botvisor-schedule-<id>.timer`, running `botvisorctl fire <id>`), each due time once.
#[interface(name = "org.botvisor.Botvisor1.Schedules", spawn = false)]
impl Schedules {
    /// Makes a schedule for the bot at `bot`: `calendar` a calendar expression in systemd's
    /// syntax (`systemd.time(7)`: `Mon..Fri 09:00`, `hourly`, `*:0/15`, a time zone at the end),
    /// checked by systemd's own parser and kept in its normalized form; `prompt` the message
    /// each fire sends, as a `Send` would. Options: `when_busy` (s: `queue`, the default: a
    /// fire into a busy bot waits behind its turn; `skip`: it is skipped, said in the chat),
    /// `conversation` (s: `same`, the default: into the bot's conversation; `fresh`: each fire
    /// begins a new conversation of the bot, as `Restart` with `fresh` does, and only into an
    /// idle bot: a busy bot's fire is skipped), `until` (s: when it ends, a timestamp as
    /// systemd reads one, `2027-01-01`, `2026-12-31 18:00 Europe/Paris`, `+2w`; no due time
    /// after it fires, and once past it the schedule has no timer and is listed ended),
    /// `random_delay_s` (u: the timer's `RandomizedDelaySec=`, at most 86400). Returns the
    /// schedule's id (32 hex digits). The prompt is at most 64 KiB (65536 bytes). Its timer and service units are written under the user's
    /// `systemd/user` folder and the timer started. Errors: InvalidArgument (a calendar systemd
    /// refuses or that never comes, an empty prompt or one over 64 KiB, a bad option), NotFound
    /// (no such bot), NotSupported (no systemd user manager on this session bus, or no
    /// `systemd-analyze`: botvisor runs no timer of its own), LimitExceeded (500 schedules),
    /// Failed (the manager refused the timer; nothing is kept).
    #[zbus(out_args("id"))]
    async fn create_schedule(
        &self,
        bot: OwnedObjectPath,
        calendar: String,
        prompt: String,
        options: Options,
    ) -> Result<String> {
        create(&self.ctx, bot.as_str(), calendar, prompt, options).await
    }

    /// Changes the schedule `id`. Options, each optional: `calendar` (s), `prompt` (s),
    /// `when_busy` (s), `conversation` (s), `until` (s; `""` for no end), `random_delay_s`
    /// (u), `paused` (b); as `CreateSchedule` takes them. Its
    /// units are written again. Errors: as `CreateSchedule`, and NotFound; each changes
    /// nothing.
    async fn update_schedule(&self, id: String, options: Options) -> Result<()> {
        update(&self.ctx, id, options).await
    }

    /// Pauses (`paused` true) or resumes the schedule `id`: a paused schedule has no timer unit
    /// and fires nothing. Errors: NotFound, NotSupported, StorageUnavailable.
    async fn pause_schedule(&self, id: String, paused: bool) -> Result<()> {
        let options = Options::from([("paused".to_owned(), OwnedVariant::from(paused))]);
        update(&self.ctx, id, options).await
    }

    /// Deletes the schedule `id`, its units and its fires' record (the chat keeps what each
    /// fire said). Errors: NotFound, StorageUnavailable.
    async fn delete_schedule(&self, id: String) -> Result<()> {
        Ok(self.ctx.supervisor.delete_schedule(&id).await?)
    }

    /// Fires the schedule `id`, as its timer does (`botvisorctl fire`), or, with option `now`
    /// (b) true, as a person asks (`botvisorctl schedule run-now`; option `at` (x), when it was
    /// first asked in Unix seconds, at most 600 s ago: a client that asks again after no answer
    /// gives the same, and gets the fire it made, not a second). A fire claims a due time
    /// once, in the transaction that queues its prompt: the timer's fire claims the latest due
    /// time not yet fired (one fire for every due time missed meanwhile), and sends nothing
    /// when a fire was claimed within 5 s of it; `now` claims a due time that came and was not
    /// fired, else the moment it was asked, unless a fire was claimed within 5 s of it (the
    /// same moment: nothing more is sent). Answers (outcome, turn id, due time in Unix
    /// seconds): `queued` (the turn), `still_waiting` (the turn an earlier fire queued has not
    /// gone yet and stands for this one: nothing more is sent), `skipped` or `failed` (said in
    /// the bot's chat, with reason `schedule_skipped` or `schedule_failed`), `already_fired`,
    /// `nothing_due`.
    /// Errors: NotFound (no such schedule, or its bot is gone), InvalidArgument (`now` on a
    /// paused schedule or one past its end: asking again changes nothing; a bad option),
    /// Failed (its calendar cannot be read), StorageUnavailable (nothing was claimed).
    #[zbus(out_args("outcome", "turn_id", "due"))]
    async fn fire_schedule(
        &self,
        id: String,
        options: Options,
        #[zbus(connection)] conn: &Connection,
    ) -> Result<(String, String, i64)> {
        fire(&self.ctx, conn, id, options).await
    }

    /// Every schedule, in the order they were made, each a dictionary: `id` (s), `bot` (o),
    /// `calendar` (s, systemd's normalized form), `prompt` (s, its first 500 characters, `…`
    /// after them when cut), `prompt_cut` (b), `when_busy` (s), `conversation` (s: `same` or `fresh`),
    /// `until` (x: its end in Unix seconds, 0 for none; `next` is 0 once it has passed),
    /// `random_delay_s` (u), `paused` (b), `next` (x: the next due time in Unix seconds, 0 when
    /// not known or paused; the timer's random delay comes on top), `last_fired` (x: the due
    /// time of the last fire, 0 before the first). Changes are signalled as invalidated.
    #[zbus(property(emits_changed_signal = "invalidates"))]
    fn schedules(&self) -> Vec<HashMap<String, OwnedVariant>> {
        let next = self.ctx.supervisor.next_dues();
        self.ctx
            .supervisor
            .schedules()
            .unwrap_or_default()
            .iter()
            .map(|s| {
                let n = if s.paused {
                    None
                } else {
                    next.get(&s.id).copied()
                };
                shown(s, n)
            })
            .collect()
    }

    /// A schedule fired: its id, its bot, the due time fired (Unix seconds) and what became of
    /// it (`queued` with its turn id, `skipped` or `failed` with an empty one). Sent after the
    /// fire is recorded.
    #[zbus(signal)]
    async fn schedule_fired(
        emitter: &SignalEmitter<'_>,
        id: &str,
        bot: OwnedObjectPath,
        due: i64,
        outcome: &str,
        turn_id: &str,
    ) -> zbus::Result<()>;
}
