//! What a bot costs, turn by turn, and its budget (issue 24), with no I/O.
//!
//! What the CLIs tell (tests `facts::claude::a_results_cost_counts_the_conversation_and_its_usage_the_turn`
//! and `facts::codex::a_turns_token_usage_is_told_last_and_in_total`):
//! - Claude Code 2.1.328: a `result`'s `total_cost_usd` is the conversation's cost so far (in
//!   US dollars), in one process and after a resume alike; its `usage` is the turn's tokens. A
//!   turn's cost is therefore its total less the last total told for the same conversation.
//! - Codex 0.171.0: `thread/tokenUsage/updated` tells each model request's tokens
//!   (`tokenUsage.last`); no cost is ever told, so a Codex bot's cost stays 0.

use serde_json::Value;

pub use crate::cost::{Spend, dollars, nanos, usd};

/// Counts a turn's spend from what the CLI tells.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Meter {
    /// The last `total_cost_usd` told (nano-dollars) and its conversation (recorded with the
    /// bot, so a daemon restart does not count the conversation's cost again).
    pub conversation: Option<(String, u64)>,
    /// Tokens told during the turn in flight (Codex's `tokenUsage.last`), not yet counted.
    pub told: Spend,
}

impl Meter {
    /// A model request's tokens, told during the turn (Codex).
    pub fn tokens(&mut self, input: u64, output: u64) {
        self.told = self.told.plus(Spend {
            cost_nanos: 0,
            input_tokens: input,
            output_tokens: output,
        });
    }

    /// The turn of conversation `session` ended with the `result` `payload`: what it cost,
    /// and the conversation's total to record (`None` when the CLI told none). A total below
    /// the last one told (the CLI lost count) is counted whole.
    pub fn turn_ended(&mut self, session: &str, payload: &Value) -> (Spend, Option<(String, u64)>) {
        let told = std::mem::take(&mut self.told);
        let usage = &payload["usage"];
        let n = |key: &str| usage.get(key).and_then(Value::as_u64).unwrap_or(0);
        let mut spend = Spend {
            cost_nanos: 0,
            input_tokens: n("input_tokens")
                .saturating_add(n("cache_creation_input_tokens"))
                .saturating_add(n("cache_read_input_tokens")),
            output_tokens: n("output_tokens"),
        }
        .plus(told);
        let total = payload
            .get("total_cost_usd")
            .and_then(Value::as_f64)
            .filter(|c| c.is_finite() && *c >= 0.0)
            .map(nanos);
        let Some(total) = total else {
            return (spend, None);
        };
        let before = match &self.conversation {
            Some((s, t)) if s == session && *t <= total => *t,
            _ => 0,
        };
        spend.cost_nanos = total - before;
        self.conversation = Some((session.to_owned(), total));
        (spend, self.conversation.clone())
    }
}

/// The budget in force (nano-dollars; `None`: none): the bot's `own` (`Some(0)`: no budget),
/// else the daemon's `default`.
pub fn in_force(own: Option<u64>, default: Option<u64>) -> Option<u64> {
    match own {
        Some(0) => None,
        Some(own) => Some(own),
        None => default.filter(|d| *d > 0),
    }
}

/// The share of the budget at which a warning item is written.
pub const BUDGET_WARNING: f64 = 0.8;

/// What a turn's cost did to the budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BudgetStep {
    /// Nothing to say.
    Nothing,
    /// The cost crossed [`BUDGET_WARNING`] of the budget.
    Warning,
    /// The cost reached the budget: no new turn starts until the budget is raised or `Restart`.
    Reached,
}

/// The step from cost `before` to `after` (nano-dollars) under `budget` (nano-dollars; none or
/// 0: no budget).
pub fn budget_step(before: u64, after: u64, budget: Option<u64>) -> BudgetStep {
    let Some(budget) = budget.filter(|b| *b > 0) else {
        return BudgetStep::Nothing;
    };
    let warning = (budget as f64 * BUDGET_WARNING) as u64;
    if after >= budget {
        BudgetStep::Reached
    } else if after >= warning && before < warning {
        BudgetStep::Warning
    } else {
        BudgetStep::Nothing
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn dollars_show_what_a_small_amount_is() {
        assert_eq!(dollars(0.0), "$0");
        assert_eq!(dollars(f64::NAN), "$0");
        assert_eq!(dollars(5.0), "$5.00");
        assert_eq!(dollars(1234.567), "$1234.57");
        assert_eq!(dollars(0.0123), "$0.0123");
        assert_eq!(dollars(0.0003), "$0.00030");
        assert_eq!(dollars(1e-9), "$0.000000001");
    }

    fn result(total: f64) -> Value {
        json!({"total_cost_usd": total, "usage": {"input_tokens": 12, "output_tokens": 7,
               "cache_creation_input_tokens": 3, "cache_read_input_tokens": 5}})
    }

    #[test]
    fn a_turn_costs_its_conversations_total_less_the_last_told() {
        let mut m = Meter::default();
        let (a, rec) = m.turn_ended("s", &result(0.25));
        assert_eq!(a.cost_nanos, 250_000_000);
        assert_eq!((a.input_tokens, a.output_tokens), (20, 7));
        assert_eq!(rec, Some(("s".into(), 250_000_000)));
        let (b, _) = m.turn_ended("s", &result(0.75));
        assert_eq!(usd(b.cost_nanos), 0.5);
        // Another conversation starts from nothing; a total that went down is counted whole.
        assert_eq!(m.turn_ended("t", &result(0.1)).0.cost_nanos, nanos(0.1));
        assert_eq!(m.turn_ended("t", &result(0.05)).0.cost_nanos, nanos(0.05));
        assert_eq!(
            nanos(0.000188),
            188_000,
            "Claude Code's figures are exact in nano-dollars"
        );
        assert_eq!(nanos(1e-12), 1, "a tiny budget never reads as none");
    }

    #[test]
    fn tokens_told_during_the_turn_are_its_own() {
        let mut m = Meter::default();
        m.tokens(12, 7);
        m.tokens(30, 2);
        let (s, rec) = m.turn_ended("s", &json!({"subtype": "completed"}));
        assert_eq!(
            s,
            Spend {
                cost_nanos: 0,
                input_tokens: 42,
                output_tokens: 9
            }
        );
        assert_eq!(rec, None, "no cost told");
        assert!(m.turn_ended("s", &json!({})).0.is_zero(), "counted once");
    }

    #[test]
    fn the_budget_warns_once_at_80_percent_and_holds_at_100() {
        let d = |x: f64| nanos(x);
        assert_eq!(budget_step(0, d(0.5), Some(d(1.0))), BudgetStep::Nothing);
        assert_eq!(
            budget_step(d(0.5), d(0.85), Some(d(1.0))),
            BudgetStep::Warning
        );
        assert_eq!(
            budget_step(d(0.85), d(0.9), Some(d(1.0))),
            BudgetStep::Nothing
        );
        assert_eq!(
            budget_step(d(0.9), d(1.0), Some(d(1.0))),
            BudgetStep::Reached
        );
        assert_eq!(budget_step(0, d(5.0), None), BudgetStep::Nothing);
        assert_eq!(budget_step(0, d(5.0), Some(0)), BudgetStep::Nothing);
    }
}
