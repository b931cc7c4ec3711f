//! A plan's usage limit is a state, not an error turn (issue 24), with no I/O.
//!
//! When the CLI says the limit is reached while a message is in flight and then ends that turn
//! with an error, the message did not reach the model: its turn is not failed but goes back to
//! the head of the queue, the bot is `limited` (the hold is recorded, so a daemon restart keeps
//! it), nothing is written to the CLI while it holds, and at the reset (plus a margin) the hold
//! is lifted and the waiting messages go by themselves, in order, in the same conversation. A
//! limit without a known reset, or hit again at once, is waited out with a backoff instead of a
//! loop. Time is an argument: `now_unix` in Unix seconds.

use std::time::{Duration, SystemTime};

use serde_json::json;

use super::budget::BUDGET;
use super::decide::TurnOutcome;
use super::effect::{CommitBuilder, Effect, Publish, Write};
use super::state::State;
use super::turns::{QueuedTurn, Turns};
use crate::runtime::LimitReport;

/// The longest wait for a limit without a known reset, however often it was hit.
pub const MAX_RETRY: Duration = Duration::from_secs(3600);

/// How long the bot waits around a reset (the configuration's `limit_margin_s` and
/// `limit_retry_s`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitTimes {
    /// Waited past a known reset before the messages go (the service's clock may be behind).
    pub margin: Duration,
    /// Waited when the reset is not known or already past, doubled each time the limit is hit
    /// again without a turn answered in between, up to [`MAX_RETRY`].
    pub retry: Duration,
}

/// A limit the bot waits for: the window's kind and its reset (Unix seconds, 0 not known).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitHold {
    /// `five_hour`, `seven_day`, …; empty when not told.
    pub kind: String,
    /// When it resets, in Unix seconds; 0 when not known.
    pub resets_at: u64,
}

/// How long to wait from `now_unix` before the messages go: to the reset plus the margin, or,
/// with no reset ahead, `retry` doubled `strikes` times (limits hit since a turn was last
/// answered, this one excluded), at most [`MAX_RETRY`].
pub fn wait(hold: &LimitHold, now_unix: u64, strikes: u32, times: LimitTimes) -> Duration {
    if hold.resets_at > now_unix {
        return Duration::from_secs(hold.resets_at - now_unix) + times.margin;
    }
    let factor = 1u32.checked_shl(strikes.min(16)).unwrap_or(u32::MAX);
    times.retry.saturating_mul(factor).min(MAX_RETRY)
}

/// A reset further ahead than this is not believed (the longest plan window the CLIs were seen
/// to tell is `seven_day`): the bot tries again instead of holding for years.
pub const MAX_RESET_AHEAD: Duration = Duration::from_secs(8 * 24 * 3600);

/// When the messages go after a limit that told `told` (Unix seconds, 0 none) at `now_unix`:
/// the reset told, when it is ahead and within [`MAX_RESET_AHEAD`] (`true`); otherwise when
/// botvisor tries again, [`wait`] with `strikes` from now (`false`).
pub fn goes_at(told: u64, now_unix: u64, strikes: u32, times: LimitTimes) -> (u64, bool) {
    if told > now_unix && told - now_unix <= MAX_RESET_AHEAD.as_secs() {
        return (told, true);
    }
    let unknown = LimitHold {
        kind: String::new(),
        resets_at: 0,
    };
    let retry = wait(&unknown, now_unix, strikes, times).as_secs();
    (now_unix.saturating_add(retry), false)
}

/// The words of the `system` item: which limit, and when the messages go.
pub fn text(hold: &LimitHold) -> String {
    text_told(hold, true)
}

/// [`text`], saying, when `believed` is false, that the reset was not known (or not
/// believable) and the time is when botvisor tries again.
fn text_told(hold: &LimitHold, believed: bool) -> String {
    if hold.kind == LOGIN {
        return "The agent's login expired or was refused: the message waits and goes by itself \
                once the login works again (`LastError` says why, the `login_required` item what \
                works)."
            .to_owned();
    }
    if hold.kind == BUDGET {
        return "The bot's cost reached its budget: the message waits until the budget is raised \
                (SetBudget) or the bot is restarted."
            .to_owned();
    }
    let what = if hold.kind.is_empty() {
        "The plan's usage limit".to_owned()
    } else {
        format!("The plan's {} usage limit", hold.kind.replace('_', "-"))
    };
    if hold.resets_at == 0 {
        return format!(
            "{what} is reached and its reset is not known: the message waits and goes by itself \
             when botvisor tries again."
        );
    }
    if !believed {
        return format!(
            "{what} is reached and its reset is not known (none told, or one already past or \
             too far ahead): the message waits and goes by itself when botvisor tries again, \
             {}.",
            when_reset(hold, "at")
        );
    }
    format!(
        "{what} is reached: the message waits and goes by itself {}.",
        when_reset(hold, "when")
    )
}

/// Design rule 16 (conditions are states, not errors): a usage limit.
///
/// The turn in flight, which the CLI ended with an error after `report` said the limit is
/// reached: the bot holds (`limited`), its hold recorded and published, then the state. A
/// message the limit refused before the agent worked on it has not reached the model: it goes
/// back to the head of the queue (or, not begun, only its delivery record goes) and a `system`
/// item (`reason` `limit_reached`, `kind`, `resets_at`) says it waits. A turn the limit cut after
/// the agent called tools ends `limited` with that item instead: sending it again would redo
/// its work in the next window, unless `continue_cut` (`continue_after_limit`): then it goes back
/// first in the queue as [`CONTINUE_TEXT`], which goes at the reset instead of its message.
/// `None` when no message is in flight.
pub fn refused(
    turns: &mut Turns,
    report: &LimitReport,
    continue_cut: bool,
    now_unix: u64,
    strikes: u32,
    times: LimitTimes,
) -> Option<(LimitHold, Vec<Effect>)> {
    let (resets_at, believed) = goes_at(report.resets_at, now_unix, strikes, times);
    let hold = LimitHold {
        kind: report.kind.clone(),
        resets_at,
    };
    let note = |text: String| {
        json!({"text": text, "reason": "limit_reached", "kind": hold.kind,
               "resets_at": hold.resets_at, "reset_told": report.resets_at})
    };
    let cut = if continue_cut {
        Cut::Continue(note(continue_text(&hold)))
    } else {
        Cut::End(TurnOutcome::Limited, "limit_reached", note(cut_text(&hold)))
    };
    let effects = held(
        turns,
        &hold,
        note(text_told(&hold, believed)),
        cut,
        State::Limited,
    )?;
    Some((hold, effects))
}

/// The kind of the hold of a bot whose login expired or was refused (`LimitKind` shows it
/// empty: it is no plan's limit).
pub const LOGIN: &str = "login";

/// Design rule 16 (conditions are states, not errors): an expired login.
///
/// The turn in flight ended with an error that says the login expired or was refused (`words`:
/// the CLI's; `hint`: what works for this bot, `Runtime::login_hint`): the bot holds
/// (`login_required`) as for a limit ([`refused`]): a message not worked on waits at the head
/// of the queue, a turn cut after tool calls ends `error`; the `system` item's `reason` is
/// `login_required` and says it once, with the hint; `LastError` gives the CLI's words. `None`
/// when no message is in flight.
pub fn login_refused(turns: &mut Turns, words: &str, hint: &str) -> Option<Vec<Effect>> {
    let hold = LimitHold {
        kind: LOGIN.to_owned(),
        resets_at: 0,
    };
    let said = words.trim().trim_end_matches('.');
    let waits = format!(
        "The agent's login expired or was refused ({said}). The message waits and goes by itself \
         once the login works again. {hint}"
    );
    let cut = format!(
        "The agent's login expired or was refused ({said}) after the agent had begun its work; \
         the turn is not sent again. The messages still waiting go once the login works again. \
         {hint}"
    );
    let note = |text: String| json!({"text": text, "reason": "login_required"});
    let mut effects = held(
        turns,
        &hold,
        note(waits),
        Cut::End(TurnOutcome::Error, "login_required", note(cut)),
        State::LoginRequired,
    )?;
    let mut c = CommitBuilder::default();
    c.write(Write::LastError(words.to_owned()))
        .then(Publish::LastError(words.to_owned()));
    effects.insert(1, c.build().expect("a row"));
    Some(effects)
}

/// What becomes of a turn a hold cut after the agent called tools.
enum Cut<'a> {
    /// It ends with this outcome, reason and `system` item.
    End(TurnOutcome, &'a str, serde_json::Value),
    /// It goes back first in the queue to continue, [`CONTINUE_TEXT`] going instead of its
    /// message, with this `system` item.
    Continue(serde_json::Value),
}

/// What goes to the agent, instead of the message, for a turn a usage limit cut and that
/// continues at the reset (`continue_after_limit`).
pub const CONTINUE_TEXT: &str = "The plan's usage limit interrupted your last turn and has now \
reset. Continue the task from where you stopped.";

/// The turn in flight ends with the hold `hold`: put back first in the queue with the `system`
/// item `waits`, or, once the agent called a tool in it, as `cut` says; the hold recorded in
/// the same commit; then `state` and the queue's length.
fn held(
    turns: &mut Turns,
    hold: &LimitHold,
    waits: serde_json::Value,
    cut: Cut<'_>,
    state: State,
) -> Option<Vec<Effect>> {
    let inflight = turns.inflight.take()?;
    let turn_id = inflight.turn.id.clone();
    let limit = Some((hold.kind.clone(), hold.resets_at));
    let mut effects = Vec::new();
    // The hold is recorded with the requeued turn, in one commit: a message never goes back to
    // the queue without the hold that keeps it from being sent into the limit again.
    let mut c = CommitBuilder::default();
    if let (true, Cut::End(outcome, reason, note)) = (inflight.worked, &cut) {
        effects.push(Turns::finish(
            &turn_id,
            *outcome,
            reason,
            Some(("system", note.clone())),
            None,
        ));
    } else if let (true, Cut::Continue(note)) = (inflight.worked, &cut) {
        turns
            .queue
            .push_front(QueuedTurn::new(turn_id.clone(), CONTINUE_TEXT));
        c.write(Write::TurnContinued(
            turn_id.clone(),
            CONTINUE_TEXT.to_owned(),
        ))
        .write(Write::DeliveryDone(turn_id.clone()))
        .item("system", Some(&turn_id), note.to_string());
    } else {
        turns.queue.push_front(inflight.turn);
        if inflight.replayed {
            c.write(Write::TurnRequeued(turn_id.clone()));
        }
        c.write(Write::DeliveryDone(turn_id.clone())).item(
            "system",
            Some(&turn_id),
            waits.to_string(),
        );
    }
    c.write(Write::Limit(limit.clone()))
        .then(Publish::Limit(limit));
    effects.extend(c.build());
    effects.push(Effect::State(state));
    effects.push(Effect::Queued(turns.waiting()));
    Some(effects)
}

/// The `system` item of a message sent while the limit holds (`reason` `limit_waiting`): it
/// waits and goes by itself at the reset.
pub fn waiting(hold: &LimitHold, turn_id: &str) -> Effect {
    let mut c = CommitBuilder::default();
    c.item(
        "system",
        Some(turn_id),
        json!({"text": text(hold), "reason": "limit_waiting", "kind": hold.kind,
               "resets_at": hold.resets_at})
        .to_string(),
    );
    c.build().expect("an item is a row")
}

/// "when it resets", or `word` "it resets at <RFC 3339> (UTC)" when the time is known (`at`:
/// "at <RFC 3339> (UTC)").
fn when_reset(hold: &LimitHold, word: &str) -> String {
    if hold.resets_at == 0 {
        return "when it resets".to_owned();
    }
    let at = humantime::format_rfc3339_seconds(
        SystemTime::UNIX_EPOCH + Duration::from_secs(hold.resets_at),
    );
    match word {
        "at" => format!("at {at} (UTC)"),
        _ => format!("{word} it resets at {at} (UTC)"),
    }
}

/// The words for a turn the limit cut after the agent had worked on it, continued at the reset.
fn continue_text(hold: &LimitHold) -> String {
    format!(
        "The plan's usage limit cut this turn after the agent had begun its work; it continues \
         by itself {} (continue_after_limit), asked to go on from where it stopped.",
        when_reset(hold, "when")
    )
}

/// The words for a turn the limit cut after the agent had worked on it.
fn cut_text(hold: &LimitHold) -> String {
    format!(
        "The plan's usage limit cut this turn after the agent had begun its work; it is not sent \
         again, so as not to redo that work. Send what should follow {}: the messages still \
         waiting go by themselves.",
        when_reset(hold, "after")
    )
}

/// What a hold recorded by an earlier run does at the actor's start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resumed {
    /// A plan's limit: wait this long, as [`wait`] says with no strike (the backoff's count is
    /// not recorded, so a daemon restart starts it again).
    Wait(Duration),
    /// The login's hold: no timer; it goes on when the credentials change, at `SetEnvironment`
    /// or at `Restart`.
    Credentials,
    /// The budget's hold while the cost is at the budget in force (the configuration may have
    /// changed it since): no timer; it goes on when the budget is raised or at `Restart`.
    Budget,
    /// The budget's hold, with the cost now under the budget in force: lift it.
    Lift,
}

/// The recorded hold `(kind, resets_at)` at the actor's start: `cost` and `budget` in
/// nano-dollars (`budget` `None` for no budget), `now_unix` in Unix seconds.
pub fn resumed(
    kind: &str,
    resets_at: u64,
    now_unix: u64,
    times: LimitTimes,
    cost: u64,
    budget: Option<u64>,
) -> Resumed {
    match kind {
        LOGIN => Resumed::Credentials,
        BUDGET if budget.is_some_and(|b| cost >= b) => Resumed::Budget,
        BUDGET => Resumed::Lift,
        // A reset told and passed while botvisord was not running: the messages go once its
        // margin has passed, not a whole retry after this start (a hostile run of issue 45 saw a
        // bot held 13 minutes past its reset, a new retry at each of botvisord's restarts).
        _ if resets_at > 0 && resets_at <= now_unix => Resumed::Wait(
            (Duration::from_secs(resets_at) + times.margin)
                .saturating_sub(Duration::from_secs(now_unix)),
        ),
        _ => {
            let hold = LimitHold {
                kind: kind.to_owned(),
                resets_at,
            };
            Resumed::Wait(wait(&hold, now_unix, 0, times))
        }
    }
}

/// The wait is over: the hold is lifted durably, then the bot is `idle` (an agent `running`)
/// or `stopped`, and the waiting messages go.
pub fn lifted(running: bool) -> Vec<Effect> {
    let mut c = CommitBuilder::default();
    c.write(Write::Limit(None)).then(Publish::Limit(None));
    let mut effects: Vec<Effect> = c.build().into_iter().collect();
    effects.push(Effect::State(if running {
        State::Idle
    } else {
        State::Stopped
    }));
    effects
}

#[cfg(test)]
mod tests;
