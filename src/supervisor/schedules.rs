//! Scheduled prompts (issue 49), as the supervisor keeps them: made, changed, paused and
//! removed in the database first (the truth), then the timer units written from it and handed
//! to the user manager; and fired, each due time once, as a user's message with a working
//! day's rules.
//!
//! A fire is `fire.rs`'s: what it does with the bot as it is ([`delivery`]) is decided there,
//! apart from every effect. Which due time a fire claims is `schedule::claim`'s.

use std::path::PathBuf;

use super::{BotError, Supervisor};
use crate::schedule::{Conversation, Schedule, WhenBusy, calendar, units};
use crate::store::schedules as rows;
use crate::systemd::timers::Timers;
use crate::time::unix_now;

mod fire;

pub use fire::{Delivery, Fired, delivery};

/// The most schedules botvisord keeps (each is two unit files in the user's folder).
pub const MAX_SCHEDULES: usize = 500;

/// The longest prompt a schedule takes, in bytes: 64 KiB, so that every schedule's prompt
/// together stays far within what one bus message carries (a hostile trial with 65 prompts of
/// 1 MiB made the `Schedules` property too big for the bus, which dropped botvisord).
pub const MAX_PROMPT_BYTES: usize = 64 * 1024;

/// A schedule asked for by a client.
#[derive(Debug, Clone)]
pub struct NewSchedule {
    /// The bot it fires into.
    pub bot_id: String,
    /// A calendar expression (systemd's syntax).
    pub calendar: String,
    /// The prompt.
    pub prompt: String,
    /// What a fire does when the bot is busy.
    pub when_busy: WhenBusy,
    /// Which conversation each fire goes to.
    pub conversation: Conversation,
    /// The timer's random delay, in seconds.
    pub random_delay_s: u32,
    /// When it ends, Unix seconds ([`Supervisor::schedule_end`]); 0: never.
    pub until: i64,
}

/// `botvisorctl` beside the running botvisord (both are installed in one folder), which the
/// timers' services run. Errors: in words, when it is not there.
pub fn botvisorctl() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("botvisord's own path: {e}"))?;
    let ctl = exe.with_file_name("botvisorctl");
    if ctl.is_file() {
        Ok(ctl)
    } else {
        Err(format!(
            "no botvisorctl beside botvisord ({}): the timers run it; install both together \
             (scripts/install.sh)",
            ctl.display()
        ))
    }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, BotError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| BotError::Failed(format!("a schedule's check failed: {e}")))
}

fn calendar_error(e: calendar::CalendarError) -> BotError {
    match e {
        calendar::CalendarError::NoParser(_) => BotError::NotSupported(e.to_string()),
        e => BotError::InvalidArgument(e.to_string()),
    }
}

/// InvalidArgument when a schedule ending at `until` (Unix seconds, 0: never) would not fire
/// once more: its next due time, `next`, comes after its end.
fn check_end(until: i64, next: i64) -> Result<(), BotError> {
    if until > 0 && next > until {
        return Err(BotError::InvalidArgument(format!(
            "the schedule ends ({}) before its next due time ({}): it would never fire",
            crate::time::rfc3339(until),
            crate::time::rfc3339(next)
        )));
    }
    Ok(())
}

impl Supervisor {
    /// The end a client gave, `expr`, as systemd's timestamp parser reads it
    /// ([`calendar::timestamp`]), in Unix seconds; `""` is no end (0). Errors: InvalidArgument
    /// (systemd refuses it, or it is not in the future), NotSupported (no parser).
    pub async fn schedule_end(&self, expr: &str) -> Result<i64, BotError> {
        if expr.is_empty() {
            return Ok(0);
        }
        let owned = expr.to_owned();
        let until = blocking(move || calendar::timestamp(&owned))
            .await?
            .map_err(calendar_error)?;
        if until <= unix_now() {
            return Err(BotError::InvalidArgument(format!(
                "the end `{}` ({}) is not in the future",
                crate::text::escape(expr, false),
                crate::time::rfc3339(until)
            )));
        }
        Ok(until)
    }

    /// Every schedule, in the order they were made.
    pub fn schedules(&self) -> Result<Vec<Schedule>, BotError> {
        Ok(self.store.read(rows::all)?)
    }

    /// The schedule `id`. Errors: NotFound.
    pub fn schedule(&self, id: &str) -> Result<Schedule, BotError> {
        let id = &id.to_ascii_lowercase();
        if !crate::schedule::is_id(id) {
            return Err(BotError::NotFound(format!(
                "no schedule {}: a schedule id is 32 hex digits",
                crate::text::escape(id, false)
            )));
        }
        self.store
            .read(|c| rows::get(c, id))?
            .ok_or_else(|| BotError::NotFound(format!("no schedule {id}")))
    }

    /// The next due time of each schedule (Unix seconds), as last found out
    /// ([`Supervisor::refresh_next_dues`]); a schedule not in it has none known.
    pub fn next_dues(&self) -> std::collections::BTreeMap<String, i64> {
        self.next_dues
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Asks systemd's parser for the next due time of every schedule whose known one has
    /// passed (or that has none; `all`: of every schedule), off the async threads. Whether any
    /// changed (then `Schedules` changed).
    pub async fn refresh_next_dues(&self, all: bool) -> bool {
        let Ok(list) = self.schedules() else {
            return false;
        };
        let now = unix_now();
        let known = self.next_dues();
        let list: Vec<Schedule> = list.into_iter().filter(|s| s.firing(now)).collect();
        let stale: Vec<(String, String, i64)> = list
            .iter()
            .filter(|s| all || known.get(&s.id).is_none_or(|t| *t <= now))
            .map(|s| (s.id.clone(), s.calendar.clone(), s.until))
            .collect();
        let ids: std::collections::BTreeSet<String> = list.into_iter().map(|s| s.id).collect();
        let found = blocking(move || {
            stale
                .into_iter()
                .filter_map(|(id, cal, until)| {
                    let next = calendar::after(&cal, now, 1).ok()?.first().copied()?;
                    // None after the end.
                    (until == 0 || next <= until).then_some((id, next))
                })
                .collect::<Vec<_>>()
        })
        .await
        .unwrap_or_default();
        let mut dues = self.next_dues.lock().unwrap_or_else(|p| p.into_inner());
        let before = dues.clone();
        dues.retain(|id, _| ids.contains(id));
        dues.extend(found);
        *dues != before
    }

    /// Makes a schedule: the calendar checked by systemd's parser, the prompt a `Send` would
    /// take, a user manager to run its timer; recorded, then its units written and its timer
    /// started. Errors: InvalidArgument (a calendar systemd refuses or that never comes, an
    /// empty or too long prompt), NotFound (no such bot), NotSupported (no systemd user manager
    /// or parser here: botvisor runs no timer of its own), LimitExceeded ([`MAX_SCHEDULES`]),
    /// Failed (the manager refused the timer; nothing is kept). Each changes nothing.
    pub async fn create_schedule(&self, new: NewSchedule) -> Result<Schedule, BotError> {
        self.get(&new.bot_id)?;
        check_prompt(&new.prompt)?;
        let expr = new.calendar.clone();
        let cal = blocking(move || calendar::check(&expr))
            .await?
            .map_err(calendar_error)?;
        check_end(new.until, cal.next)?;
        let timers = Timers::find().await.map_err(|why| {
            BotError::NotSupported(format!(
                "schedules run on the systemd user manager's timers, and {why}; botvisor runs \
                 no timer of its own"
            ))
        })?;
        botvisorctl().map_err(BotError::NotSupported)?;
        let _one = self.scheduling.lock().await;
        if self.schedules()?.len() >= MAX_SCHEDULES {
            return Err(BotError::LimitExceeded(format!(
                "botvisord keeps at most {MAX_SCHEDULES} schedules; delete one first"
            )));
        }
        let s = Schedule {
            id: uuid::Uuid::new_v4().simple().to_string(),
            bot_id: new.bot_id,
            calendar: cal.normalized,
            prompt: new.prompt,
            when_busy: new.when_busy,
            conversation: new.conversation,
            random_delay_s: new.random_delay_s,
            until: new.until,
            paused: false,
            // No fire claims a due time from before the schedule was made.
            last_due: unix_now(),
            last_fired_at: 0,
            last_run_now: false,
        };
        self.store.tx_durable(|tx| rows::insert(tx, &s))?;
        if let Err(why) = self.write_units(&timers, false).await {
            self.store.tx_durable(|tx| rows::delete(tx, &s.id))?;
            let _ = self.write_units(&timers, false).await;
            return Err(BotError::Failed(format!(
                "the schedule's timer could not be set up, nothing is kept: {why}"
            )));
        }
        tracing::info!(schedule = %s.id, bot_id = %s.bot_id, calendar = %s.calendar, "schedule made");
        Ok(s)
    }

    /// Changes a schedule (what `change` does to it), then its units. Errors: as
    /// [`Supervisor::create_schedule`]; each changes nothing.
    pub async fn update_schedule(
        &self,
        id: &str,
        change: impl FnOnce(&mut Schedule),
    ) -> Result<Schedule, BotError> {
        let _one = self.scheduling.lock().await;
        let mut s = self.schedule(id)?;
        let before = s.clone();
        change(&mut s);
        check_prompt(&s.prompt)?;
        if s.calendar != before.calendar || s.until != before.until {
            let expr = s.calendar.clone();
            let cal = blocking(move || calendar::check(&expr))
                .await?
                .map_err(calendar_error)?;
            check_end(s.until, cal.next)?;
            s.calendar = cal.normalized;
        }
        let timers = Timers::find()
            .await
            .map_err(|why| BotError::NotSupported(format!("no timers: {why}")))?;
        // A schedule that fires again (resumed, or given a later end) fires no due time from
        // while it did not: its timer's `Persistent=` stamp would have it catch one up.
        let now = unix_now();
        let again = s.firing(now) && !before.firing(now);
        self.store.tx_durable(|tx| {
            rows::update(tx, &s)?;
            if again {
                rows::skip_to(tx, &s.id, now)?;
            }
            Ok(())
        })?;
        if let Err(why) = self.write_units(&timers, false).await {
            self.store
                .tx_durable(|tx| rows::update(tx, &before).map(|_| ()))?;
            let _ = self.write_units(&timers, false).await;
            return Err(BotError::Failed(format!(
                "the schedule's timer could not be changed, nothing is changed: {why}"
            )));
        }
        Ok(s)
    }

    /// Deletes a schedule and its units. Errors: NotFound; StorageUnavailable.
    pub async fn delete_schedule(&self, id: &str) -> Result<(), BotError> {
        let _one = self.scheduling.lock().await;
        let id = &self.schedule(id)?.id;
        self.store
            .tx_durable(|tx| rows::delete(tx, id).map(|_| ()))?;
        if let Err(why) = self.reconcile_locked(false).await {
            tracing::warn!(schedule = id, error = %why, "the deleted schedule's timer is removed at the next check");
        }
        Ok(())
    }

    /// Whether a schedule has ended and its timer's file is still there: its units are to go
    /// now, not at the next minute's check (one look at the file per ended schedule).
    pub fn ended_with_units(&self) -> bool {
        let (Ok(list), Some(dir)) = (self.schedules(), units::unit_dir()) else {
            return false;
        };
        let now = unix_now();
        list.iter()
            .any(|s| s.ended(now) && dir.join(units::timer_name(&s.id)).exists())
    }

    /// Writes the units from the database and has the user manager run them, at start
    /// (`at_start`: every active timer is started too) and now and then (a unit deleted or
    /// edited by hand is written again and restarted). Errors: in words (no manager, a file or
    /// a call that failed).
    pub async fn reconcile_schedules(&self, at_start: bool) -> Result<(), String> {
        let _one = self.scheduling.lock().await;
        self.reconcile_locked(at_start).await
    }

    async fn reconcile_locked(&self, at_start: bool) -> Result<(), String> {
        let none = self.schedules().map_err(|e| e.to_string())?.is_empty();
        let have_units = units::unit_dir().is_some_and(|d| {
            std::fs::read_dir(d).is_ok_and(|mut e| {
                e.any(|f| {
                    f.is_ok_and(|f| f.file_name().to_string_lossy().starts_with(units::PREFIX))
                })
            })
        });
        if none && !have_units {
            return Ok(());
        }
        let timers = Timers::find().await?;
        self.write_units(&timers, at_start).await
    }

    /// The units written from the database (`scheduling` held) and the manager told; with
    /// `start_all`, every active schedule's timer started as well.
    async fn write_units(&self, timers: &Timers, start_all: bool) -> Result<(), String> {
        let dir = units::unit_dir().ok_or("no HOME to find the user's unit folder in")?;
        let ctl = botvisorctl()?;
        let now = unix_now();
        // An ended schedule has no units, as a paused one.
        let wanted: Vec<(Schedule, String)> = self
            .schedules()
            .map_err(|e| e.to_string())?
            .into_iter()
            .filter(|s| !s.ended(now))
            .map(|s| {
                let name = self
                    .get(&s.bot_id)
                    .map(|h| h.snapshot().record.name)
                    .unwrap_or_default();
                (s, name)
            })
            .collect();
        let active: Vec<String> = wanted
            .iter()
            .filter(|(s, _)| !s.paused)
            .map(|(s, _)| units::timer_name(&s.id))
            .collect();
        let written = blocking(move || units::write_all(&dir, &wanted, &ctl))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("the unit files: {e}"))?;
        timers.apply(&written).await?;
        // A removed timer's stamp goes too: none is left behind, and a schedule resumed later
        // has no stamp of before its pause to catch up from.
        for timer in &written.removed {
            if let Some(stamp) = units::stamp_file(timer) {
                let _ = std::fs::remove_file(stamp);
            }
        }
        if start_all {
            timers.start_all(&active).await?;
        }
        Ok(())
    }
}

/// A prompt a `Send` would take: not empty, within [`MAX_PROMPT_BYTES`], no NUL.
fn check_prompt(prompt: &str) -> Result<(), BotError> {
    if prompt.trim().is_empty() {
        return Err(BotError::InvalidArgument(
            "the schedule's prompt is empty; give the text each fire sends".into(),
        ));
    }
    if prompt.len() > MAX_PROMPT_BYTES {
        return Err(BotError::InvalidArgument(format!(
            "the schedule's prompt is {} bytes; a schedule takes at most {MAX_PROMPT_BYTES} \
             bytes (64 KiB): put the rest in a file of the bot's folder and ask for it there",
            prompt.len()
        )));
    }
    if prompt.contains('\0') {
        return Err(BotError::InvalidArgument(
            "the schedule's prompt holds a NUL byte, which no CLI can be sent".into(),
        ));
    }
    Ok(())
}
