//! Seeded random moments for the kill sweeps (tests/real/claude/exactly_once.rs,
//! tests/real/codex/kills.rs). A sweep prints its seed; `BOTVISOR_TEST_SEED=<seed>` replays the
//! same moments.

use std::time::Duration;

/// A small, seeded generator (xorshift64*): the kill moments of a sweep.
pub struct Moments(u64);

impl Moments {
    /// A generator seeded from `BOTVISOR_TEST_SEED`, else from the clock; prints the seed with
    /// `name` and returns it.
    pub fn new(name: &str) -> (Moments, u64) {
        let seed = std::env::var("BOTVISOR_TEST_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_nanos() as u64
            });
        println!("{name}: seed {seed} (BOTVISOR_TEST_SEED={seed} replays it)");
        (Moments(seed.max(1)), seed)
    }

    /// A moment from 0 to `max_ms` milliseconds.
    pub fn next(&mut self, max_ms: u64) -> Duration {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        Duration::from_millis(x.wrapping_mul(0x2545_F491_4F6C_DD1D) % (max_ms + 1))
    }
}
