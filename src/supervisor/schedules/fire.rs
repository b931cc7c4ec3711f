//! A schedule's fire (issue 49): which due time it claims ([`claim::decide`]) and what it does
//! with the bot as it is ([`delivery`], decided apart from every effect), the claim and the
//! message, or the chat item that says why not, in one transaction.

use serde_json::json;

use super::super::core::RestartMode;
use super::super::{BotError, BotView, State, Supervisor};
use super::{blocking, rows};
use crate::schedule::claim::{self, Asker, Claim};
use crate::schedule::{Conversation, WhenBusy, calendar};
use crate::time::unix_now;

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

impl Supervisor {
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
                    // The fire and its prompt are on record durably before anyone is told (a
                    // hostile run's reading: the promise was dropped here).
                    Ok(Some((turn_id, promise))) => {
                        self.store.keep(promise).await;
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
