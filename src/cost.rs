//! What a bot's use costs, in the units the store, the clients and the core share: nano-dollars
//! (exact sums) shown as US dollars, and tokens. What a turn cost is counted from what the CLIs
//! tell in `supervisor::core::spend`.

/// Nano-dollars in a US dollar: costs are counted in whole nano-dollars (exact sums, and
/// `Eq`), shown in dollars.
pub const NANOS_PER_USD: f64 = 1e9;

/// US dollars as whole nano-dollars (negative or not finite: 0; a positive amount is at least
/// one nano-dollar, so a tiny budget never reads as none).
pub fn nanos(usd: f64) -> u64 {
    if usd.is_finite() && usd > 0.0 {
        ((usd * NANOS_PER_USD).round() as u64).max(1)
    } else {
        0
    }
}

/// Nano-dollars as US dollars.
pub fn usd(nanos: u64) -> f64 {
    nanos as f64 / NANOS_PER_USD
}

/// US dollars as people read them: `$12.34` from a dollar on, otherwise with as many
/// decimals as show the first two significant digits (at least 4, at most 9: `$0.0123`,
/// `$0.00030`, `$0.000000001`); `$0` for none.
pub fn dollars(usd: f64) -> String {
    if !usd.is_finite() || usd <= 0.0 {
        return "$0".to_owned();
    }
    if usd >= 1.0 {
        return format!("${usd:.2}");
    }
    let decimals = ((-usd.log10()).ceil() as usize + 1).clamp(4, 9);
    format!("${usd:.decimals$}")
}

/// What one turn (or a bot, summed) cost: as the CLI computed it, and tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Spend {
    /// Nano-dollars ([`usd`] gives dollars); 0 when the CLI does not say (Codex).
    pub cost_nanos: u64,
    /// Tokens the model read: input plus cache writes and reads.
    pub input_tokens: u64,
    /// Tokens the model wrote.
    pub output_tokens: u64,
}

impl Spend {
    /// `self` plus `other`.
    pub fn plus(self, other: Spend) -> Spend {
        Spend {
            cost_nanos: self.cost_nanos.saturating_add(other.cost_nanos),
            input_tokens: self.input_tokens.saturating_add(other.input_tokens),
            output_tokens: self.output_tokens.saturating_add(other.output_tokens),
        }
    }

    /// Nothing was spent.
    pub fn is_zero(&self) -> bool {
        self.cost_nanos == 0 && self.input_tokens == 0 && self.output_tokens == 0
    }
}
