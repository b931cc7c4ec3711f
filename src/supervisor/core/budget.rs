//! A bot's budget as a hold (issue 24), with no I/O: once the bot's cost (nano-dollars, what
//! the CLI reports per turn, [`super::spend`]) reaches the budget in force, no new turn starts
//! until the budget is raised or the bot is restarted; at 80 % the chat says so. The hold is a
//! [`LimitKind`](super::limits) of [`BUDGET`], with no reset: nothing lifts it by itself.

use serde_json::json;

use super::effect::{CommitBuilder, Effect, Publish, Write};
use super::limits::lifted;
use super::spend::{dollars, usd};
use super::state::State;

/// The `LimitKind` of a bot whose cost reached its budget.
pub const BUDGET: &str = "budget";

/// Design rule 16 (conditions are states, not errors): a budget reached.
///
/// The bot's `cost` (nano-dollars) is at its `budget`: it holds (`limited`, kind [`BUDGET`], no
/// reset) until the budget is raised or `Restart`, with a `system` item (`reason`
/// `limit_reached`, `kind` `budget`, `cost_usd`, `budget_usd`). Nothing running is stopped: no
/// turn is in flight when this is decided.
pub fn reached(cost: u64, budget: u64) -> Vec<Effect> {
    let limit = Some((BUDGET.to_owned(), 0));
    let mut c = CommitBuilder::default();
    c.item(
        "system",
        None,
        json!({"text": format!(
                  "The bot's cost, {}, reached its budget of {}: no new turn starts until \
                   the budget is raised (SetBudget) or the bot is restarted; the messages wait.",
                  dollars(usd(cost)), dollars(usd(budget))),
               "reason": "limit_reached", "kind": BUDGET, "resets_at": 0,
               "cost_usd": usd(cost), "budget_usd": usd(budget)})
        .to_string(),
    )
    .write(Write::Limit(limit.clone()))
    .then(Publish::Limit(limit));
    let mut effects: Vec<Effect> = c.build().into_iter().collect();
    effects.push(Effect::State(State::Limited));
    effects
}

/// Whether `cost` is at the `budget` in force (none: never).
fn at(cost: u64, budget: Option<u64>) -> Option<u64> {
    budget.filter(|&b| cost >= b)
}

/// What holds the bot now, as [`set`] reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Held {
    /// Nothing: the bot may start turns.
    Nothing,
    /// Its budget ([`BUDGET`]).
    ByBudget,
    /// A plan's usage limit or the login: their own end decides ([`hold_over`]).
    ByOther,
}

/// A client set the bot's `own` budget (nano-dollars; `Some(0)` none), making `in_force` the
/// budget: recorded and published first. Then, with the bot's `cost`: a bot its budget `held`
/// whose cost is now under it goes on ([`lifted`]); a bot nothing holds, with no turn
/// `inflight`, whose cost is already at the new budget holds at once ([`reached`]) rather than
/// after one more turn; with a turn in flight, its end decides (the budget's step after a turn).
pub fn set(
    own: Option<u64>,
    in_force: Option<u64>,
    cost: u64,
    held: Held,
    inflight: bool,
    running: bool,
) -> Vec<Effect> {
    let mut c = CommitBuilder::default();
    c.write(Write::Budget(own)).then(Publish::Budget(own));
    let mut effects: Vec<Effect> = c.build().into_iter().collect();
    match (held, at(cost, in_force)) {
        (Held::ByBudget, None) => effects.extend(lifted(running)),
        (Held::Nothing, Some(b)) if !inflight => effects.extend(reached(cost, b)),
        _ => {}
    }
    effects
}

/// A hold of another kind (a plan's limit, the login) is over: the bot goes on ([`lifted`]),
/// unless its `cost` is at the `budget` in force, when the budget holds instead ([`reached`]):
/// a budget lowered while another limit held is not passed by.
pub fn hold_over(running: bool, cost: u64, budget: Option<u64>) -> Vec<Effect> {
    match at(cost, budget) {
        Some(b) => reached(cost, b),
        None => lifted(running),
    }
}

/// The bot's cost crossed 80 % of its budget: a `system` item (`reason` `budget_warning`,
/// `cost_usd`, `budget_usd`).
pub fn warning(cost: u64, budget: u64) -> Effect {
    let mut c = CommitBuilder::default();
    c.item(
        "system",
        None,
        json!({"text": format!("The bot has cost {} of its {} budget.", dollars(usd(cost)), dollars(usd(budget))),
               "reason": "budget_warning", "cost_usd": usd(cost), "budget_usd": usd(budget)})
        .to_string(),
    );
    c.build().expect("an item is a row")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `LimitKind` the effects publish, and the state they end in.
    fn outcome(effects: &[Effect]) -> (Option<Option<(String, u64)>>, Option<State>) {
        let limit = effects.iter().find_map(|e| match e {
            Effect::Commit { publish, .. } => publish.iter().find_map(|p| match p {
                Publish::Limit(l) => Some(l.clone()),
                _ => None,
            }),
            _ => None,
        });
        let state = effects.iter().find_map(|e| match e {
            Effect::State(s) => Some(*s),
            _ => None,
        });
        (limit, state)
    }

    const HELD: Option<(String, u64)> = None;

    fn budget_hold() -> Option<Option<(String, u64)>> {
        Some(Some((BUDGET.to_owned(), 0)))
    }

    #[test]
    fn a_budget_lowered_under_the_cost_holds_at_once_when_no_turn_is_in_flight() {
        let effects = set(Some(5), Some(5), 7, Held::Nothing, false, true);
        assert!(
            matches!(&effects[0], Effect::Commit { writes, .. } if writes == &vec![Write::Budget(Some(5))]),
            "the budget is recorded first: {effects:?}"
        );
        assert_eq!(
            outcome(&effects[1..]),
            (budget_hold(), Some(State::Limited))
        );
        // With a turn in flight, its end decides; under the budget, nothing holds.
        assert_eq!(
            outcome(&set(Some(5), Some(5), 7, Held::Nothing, true, true)[1..]),
            (None, None)
        );
        assert_eq!(
            outcome(&set(Some(9), Some(9), 7, Held::Nothing, false, true)[1..]),
            (None, None)
        );
    }

    #[test]
    fn a_budget_raised_over_the_cost_lets_the_held_bot_go_on() {
        let effects = set(Some(9), Some(9), 7, Held::ByBudget, false, true);
        assert_eq!(outcome(&effects[1..]), (Some(HELD), Some(State::Idle)));
        let none = set(Some(0), None, 7, Held::ByBudget, false, false);
        assert_eq!(outcome(&none[1..]), (Some(HELD), Some(State::Stopped)));
        // Still at it: the budget holds on.
        assert_eq!(
            outcome(&set(Some(6), Some(6), 7, Held::ByBudget, false, true)[1..]),
            (None, None)
        );
    }

    #[test]
    fn another_limit_is_left_to_its_end_which_the_budget_then_holds() {
        assert_eq!(
            outcome(&set(Some(5), Some(5), 7, Held::ByOther, false, true)[1..]),
            (None, None)
        );
        assert_eq!(
            outcome(&hold_over(true, 7, Some(5))),
            (budget_hold(), Some(State::Limited))
        );
        assert_eq!(
            outcome(&hold_over(true, 4, Some(5))),
            (Some(HELD), Some(State::Idle))
        );
        assert_eq!(
            outcome(&hold_over(false, 7, None)),
            (Some(HELD), Some(State::Stopped))
        );
    }
}
