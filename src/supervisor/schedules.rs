//! Scheduled prompts (issue 49), as the supervisor keeps them: made, changed, paused and
//! removed in the database first (the truth), then the timer units written from it and handed
//! to the user manager; and fired, each due time once, as a user's message with a working
//! day's rules.
//!
//! What is decided here, apart from every effect: what a fire does with the bot as it is
//! ([`delivery`]). Which due time a fire claims is `schedule::claim`'s.

use std::path::PathBuf;

use serde_json::json;

use super::core::RestartMode;
use super::{BotError, BotView, State, Supervisor};
use crate::schedule::claim::{self, Asker, Claim};
use crate::schedule::{Conversation, Schedule, WhenBusy, calendar, units};
use crate::store::schedules as rows;
use crate::systemd::timers::Timers;
use crate::time::unix_now;

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

/// What a fire did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fired {
    /// The prompt was queued as turn `turn_id` for the due time `due` (Unix seconds).
    Queued {
        /// The due time fired.
        due: i64,
        /// The turn queued.
        turn_id: String,
    },
    /// The fire of `due` was skipped, or could not be made (`failed`), said in the chat.
    NotQueued {
        /// The due time fired.
        due: i64,
        /// `skipped` or `failed`.
        outcome: &'static str,
        /// Why, in words.
        why: String,
    },
    /// The fire of `due` is claimed and puts no second prompt: the one an earlier fire queued,
    /// `turn_id`, has not gone yet (a busy bot, a usage limit, a login): it stands for both, so
    /// that a bot held for hours gets the prompt once, not once per due time.
    StillWaiting {
        /// The due time fired.
        due: i64,
        /// The turn of the earlier fire, still queued.
        turn_id: String,
    },
    /// Nothing: the fire of `due` was claimed already (a second fire of the same moment).
    AlreadyFired(i64),
    /// Nothing: no due time came since the last fire, or the schedule is paused.
    NothingDue,
}

impl Fired {
    /// `queued`, `skipped`, `failed`, `still_waiting`, `already_fired` or `nothing_due`.
    pub fn outcome(&self) -> &'static str {
        match self {
            Fired::Queued { .. } => "queued",
            Fired::StillWaiting { .. } => "still_waiting",
            Fired::NotQueued { outcome, .. } => outcome,
            Fired::AlreadyFired(_) => "already_fired",
            Fired::NothingDue => "nothing_due",
        }
    }
}

/// What a fire does with its bot as it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    /// The prompt is queued, as a user's message: behind a turn or messages waiting, held
    /// through a usage limit or a login as they are (it goes at the reset, once).
    Queue,
    /// The fire is skipped, in words.
    Skip(String),
    /// The fire cannot be made, in words.
    Fail(String),
}

/// What a fire does with the bot `view` under `when_busy`, into `conversation`: a `failed` bot
/// takes no message (fail); a bot whose budget is spent starts no turn (skip: a schedule must
/// not pile messages behind a budget); a busy bot (a turn in flight, messages waiting, or a
/// permission request open) skips when the schedule says so, or when the fire is to begin a
/// fresh conversation (it would cut into the one in use); anything else queues.
pub fn delivery(view: &BotView, when_busy: WhenBusy, conversation: Conversation) -> Delivery {
    if view.state == State::Failed {
        return Delivery::Fail(format!(
            "the bot is failed and takes no message until Restart: {}",
            view.record.last_error
        ));
    }
    if let Some(budget) = view.budget()
        && view.record.spend.cost_nanos >= budget
    {
        return Delivery::Skip("the bot's budget is spent (raise it with SetBudget)".into());
    }
    let busy = view.state == State::Busy || view.queued > 0 || !view.pending.is_empty();
    if busy && when_busy == WhenBusy::Skip {
        return Delivery::Skip("the bot was busy, and the schedule skips a busy bot".into());
    }
    if busy && conversation == Conversation::Fresh {
        return Delivery::Skip(
            "the bot was busy, and a fresh conversation would cut into the one in use".into(),
        );
    }
    Delivery::Queue
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

    /// Fires the schedule `id` (asked by its timer, or by a person: `asker`): claims a due time
    /// ([`claim::decide`]) and does what [`delivery`] says, the claim and the message (or the
    /// chat item that says why not) in one transaction: each due time is fired once, whatever
    /// fires at the same moment. A schedule with an end fires only due times at or before it,
    /// even when the fire comes later (a random delay, botvisord restarting). Errors: NotFound
    /// (no such schedule), InvalidArgument (a `run-now` of a paused schedule, or of one past its
    /// end: asking again would not change it), Failed (the calendar cannot be read),
    /// StorageUnavailable (nothing claimed: the timer's next run, or a `run-now`, fires it).
    pub async fn fire_schedule(&self, id: &str, asker: Asker) -> Result<Fired, BotError> {
        let s = self.schedule(id)?;
        let id = s.id.as_str();
        if s.paused {
            return match asker {
                // A unit not yet removed when the schedule was paused.
                Asker::Timer => Ok(Fired::NothingDue),
                Asker::RunNow { .. } => Err(BotError::InvalidArgument(format!(
                    "schedule {id} is paused and fires nothing; resume it first"
                ))),
            };
        }
        let now = unix_now();
        let past_end = s.until > 0 && now > s.until;
        if past_end && matches!(asker, Asker::RunNow { .. }) {
            return Err(BotError::InvalidArgument(format!(
                "schedule {id} ended at {} and fires nothing; give it a later end first",
                crate::time::rfc3339(s.until)
            )));
        }
        // No due time after the end, whenever the fire comes; one at or before it that was not
        // fired yet fires, however late its timer's fire.
        let horizon = if s.until > 0 { now.min(s.until) } else { now };
        let (expr, since) = (s.calendar.clone(), s.last_due);
        let latest = blocking(move || calendar::latest_due(&expr, horizon, since))
            .await?
            .map_err(|e| BotError::Failed(format!("schedule {id}: {e}")))?;
        let last = claim::Last {
            due: s.last_due,
            fired_at: s.last_fired_at,
            run_now: s.last_run_now,
        };
        let run_now = matches!(asker, Asker::RunNow { .. });
        let base = rows::Claimed {
            id,
            due: 0,
            now,
            run_now,
            outcome: "",
            turn_id: None,
        };
        let due = match claim::decide(asker, latest, last) {
            Claim::Fire(due) => due,
            Claim::Coalesce(due) => {
                let record = "coalesced: a fire claimed a moment before stands for it";
                self.store.tx_durable(|tx| {
                    rows::claim(
                        tx,
                        rows::Claimed {
                            due,
                            outcome: record,
                            turn_id: None,
                            ..base
                        },
                    )
                })?;
                tracing::info!(
                    schedule = id,
                    due,
                    "schedule due time taken by the fire just before"
                );
                return Ok(Fired::AlreadyFired(due));
            }
            Claim::Fired(due) => return Ok(Fired::AlreadyFired(due)),
            Claim::NothingDue => {
                if asker == Asker::Timer {
                    tracing::warn!(schedule = id, calendar = %s.calendar, "the timer fired and no due time of its calendar came since the last fire: nothing sent");
                }
                return Ok(Fired::NothingDue);
            }
        };
        let handle = self.get(&s.bot_id)?;
        let by = match asker {
            Asker::Timer => "timer",
            Asker::RunNow { .. } => "run_now",
        };
        let scheduled = json!({"id": s.id, "due": due, "by": by});
        let fresh = s.conversation == Conversation::Fresh;
        let _fresh_fire = match fresh {
            true => Some(self.fresh_fires.lock().await),
            false => None,
        };
        let not_queued = match delivery(&handle.snapshot(), s.when_busy, s.conversation) {
            // The conversation begins only if this fire will claim its due time: none claimed
            // it since the decision above (fresh fires hold `fresh_fires` to here).
            Delivery::Queue if fresh && self.schedule(id)?.last_due >= due => {
                return Ok(Fired::AlreadyFired(due));
            }
            Delivery::Queue if fresh && let Err(e) = handle.restart(RestartMode::Fresh) => (
                "failed",
                format!("a fresh conversation could not begin: {e}"),
            ),
            Delivery::Queue => {
                let extra =
                    serde_json::Map::from_iter([("schedule".to_owned(), scheduled.clone())]);
                // An earlier fire's prompt that has not gone yet stands for this one too, decided
                // in the claim's own transaction.
                let mut waiting: Option<(String, bool)> = None;
                let sent = handle.send_with(s.prompt.clone(), extra, |tx, turn| {
                    waiting = None;
                    if let Some(earlier) = rows::waiting_turn(tx, id)? {
                        let record = format!("still waiting: turn {earlier} has not gone yet");
                        let claimed = rows::claim(
                            tx,
                            rows::Claimed {
                                due,
                                outcome: &record,
                                turn_id: Some(&earlier),
                                ..base
                            },
                        )?;
                        waiting = Some((earlier, claimed));
                        return Ok(false);
                    }
                    rows::claim(
                        tx,
                        rows::Claimed {
                            due,
                            outcome: "queued",
                            turn_id: Some(turn),
                            ..base
                        },
                    )
                });
                match sent {
                    Ok(Some(turn_id)) => {
                        tracing::info!(schedule = id, due, turn_id = %turn_id, "schedule fired");
                        return Ok(Fired::Queued { due, turn_id });
                    }
                    Ok(None) => {
                        return Ok(match waiting {
                            Some((turn_id, true)) => {
                                tracing::info!(schedule = id, due, turn_id = %turn_id, "schedule fired; the prompt of an earlier fire still waits and stands for it");
                                Fired::StillWaiting { due, turn_id }
                            }
                            _ => Fired::AlreadyFired(due),
                        });
                    }
                    Err(e @ BotError::StorageUnavailable(_)) => return Err(e),
                    Err(e) => ("failed", e.to_string()),
                }
            }
            Delivery::Skip(why) => ("skipped", why),
            Delivery::Fail(why) => ("failed", why),
        };
        let (outcome, why) = not_queued;
        let text = match outcome {
            "skipped" => format!("The scheduled prompt was skipped: {why}."),
            _ => format!("The scheduled prompt could not be sent: {why}."),
        };
        let payload = json!({
            "text": text,
            "reason": format!("schedule_{outcome}"),
            "schedule": scheduled,
        });
        let record = format!("{outcome}: {why}");
        // The same words as the fire before are not said again: an hourly schedule skipping a
        // bot busy all day says so once, and each fire is in its record (`schedule_fires`).
        let mut repeated = false;
        let noted = handle.note_with(&payload, |tx| {
            let before = rows::last_outcome(tx, id)?;
            let claimed = rows::claim(
                tx,
                rows::Claimed {
                    due,
                    outcome: &record,
                    turn_id: None,
                    ..base
                },
            )?;
            repeated = claimed && before.as_deref() == Some(record.as_str());
            Ok(claimed && !repeated)
        })?;
        if !noted && !repeated {
            return Ok(Fired::AlreadyFired(due));
        }
        tracing::info!(schedule = id, due, outcome, why = %why, "schedule fired, no message");
        Ok(Fired::NotQueued { due, outcome, why })
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

#[cfg(test)]
mod tests {
    use super::*;

    fn view(state: State) -> BotView {
        let mut v = BotView::for_tests();
        v.state = state;
        v
    }

    /// A failed bot fails the fire; a spent budget skips it; a busy bot queues it unless the
    /// schedule skips or begins a fresh conversation; a limited bot queues it (it goes at the
    /// reset).
    #[test]
    fn what_a_fire_does_with_the_bot_as_it_is() {
        assert!(matches!(
            delivery(&view(State::Failed), WhenBusy::Queue, Conversation::Same),
            Delivery::Fail(_)
        ));
        assert_eq!(
            delivery(&view(State::Busy), WhenBusy::Queue, Conversation::Same),
            Delivery::Queue
        );
        assert!(matches!(
            delivery(&view(State::Busy), WhenBusy::Skip, Conversation::Same),
            Delivery::Skip(_)
        ));
        let mut waiting = view(State::Idle);
        waiting.queued = 1;
        assert!(matches!(
            delivery(&waiting, WhenBusy::Skip, Conversation::Same),
            Delivery::Skip(_)
        ));
        assert_eq!(
            delivery(&view(State::Limited), WhenBusy::Skip, Conversation::Same),
            Delivery::Queue
        );
        let mut spent = view(State::Idle);
        spent.record.budget = Some(10);
        spent.record.spend.cost_nanos = 10;
        assert!(matches!(
            delivery(&spent, WhenBusy::Queue, Conversation::Same),
            Delivery::Skip(_)
        ));
        // A fresh conversation begins only on an idle bot: a busy one's fire is skipped, even
        // by a schedule that queues.
        assert!(matches!(
            delivery(&view(State::Busy), WhenBusy::Queue, Conversation::Fresh),
            Delivery::Skip(_)
        ));
        assert!(matches!(
            delivery(&waiting, WhenBusy::Queue, Conversation::Fresh),
            Delivery::Skip(_)
        ));
        assert_eq!(
            delivery(&view(State::Idle), WhenBusy::Queue, Conversation::Fresh),
            Delivery::Queue
        );
    }
}
