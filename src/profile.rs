//! Hand-off timestamps for the bench's profile of rows 1 and 2 (issue 50: decide the hops from
//! a profile kept in the bench, printed by a flag, not left in the code path).
//!
//! Built with the `profile` feature (`cargo bench --bench botvisor --features profile`), each
//! [`stamp`] records a point of a `Send`'s or a line's way through botvisord, its key (`turn:ID`
//! for a `Send`, `item:SEQ` for a chat item) and the CLOCK_MONOTONIC nanoseconds, in memory;
//! botvisord writes them to `$XDG_RUNTIME_DIR/botvisord-profile.tsv` (one `point key ns` a
//! line) as it exits, and the bench joins them with its own and its fake CLI's stamps. Without
//! the feature, [`Mark`] is zero-sized, the keys are never made and every call compiles to nothing.

/// An instant taken by [`now`]: CLOCK_MONOTONIC nanoseconds with the feature, nothing (a
/// zero-sized value) without.
#[derive(Clone, Copy, Debug, Default)]
pub struct Mark(#[cfg(feature = "profile")] u64);

/// The points a `Send` passes, in order (key `turn:ID`): the call at the guard, its commit
/// made (a promise), the promise kept (the fsync), the reply sent, the bot's actor given the
/// message, where it goes committed, the message written to the agent and its delivery
/// recorded whole (the CLI may read the message before that last record: the step after it
/// can be negative).
pub const SEND_POINTS: &[&str] = &[
    "send.handler",
    "send.checked",
    "send.looked",
    "send.committed",
    "send.kept",
    "send.replied",
    "actor.queued",
    "actor.delivery",
    "actor.written",
];

/// The points a chat item of a CLI's line passes, in order (key `item:SEQ`): the actor takes
/// the group of lines it came in (the group's first line), the item committed, the publisher
/// takes it, its signal written.
pub const LINE_POINTS: &[&str] = &[
    "actor.line",
    "actor.committed",
    "publisher.took",
    "publisher.sent",
];

/// The file botvisord writes its stamps to as it exits, under `runtime_dir`.
pub const FILE: &str = "botvisord-profile.tsv";

#[cfg(feature = "profile")]
static STAMPS: std::sync::Mutex<Vec<(&'static str, String, u64)>> =
    std::sync::Mutex::new(Vec::new());

/// The instant now.
#[cfg(feature = "profile")]
pub fn now() -> Mark {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    Mark(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

/// The instant now.
#[cfg(not(feature = "profile"))]
#[inline(always)]
pub fn now() -> Mark {
    Mark()
}

/// Records that the way keyed `key()` passed `point` now.
#[inline(always)]
pub fn stamp(point: &'static str, key: impl FnOnce() -> String) {
    stamp_at(point, key, now());
}

/// Records that the way keyed `key()` passed `point` at `at`.
#[cfg(feature = "profile")]
pub fn stamp_at(point: &'static str, key: impl FnOnce() -> String, at: Mark) {
    if let Ok(mut v) = STAMPS.lock() {
        v.push((point, key(), at.0));
    }
}

/// Records that the way keyed `key()` passed `point` at `at`.
#[cfg(not(feature = "profile"))]
#[inline(always)]
pub fn stamp_at(_point: &'static str, _key: impl FnOnce() -> String, _at: Mark) {}

/// Writes the stamps to [`FILE`] in `$XDG_RUNTIME_DIR` (else the temporary folder).
#[cfg(feature = "profile")]
pub fn dump() {
    use std::io::Write;
    let dir = std::env::var_os("XDG_RUNTIME_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let Ok(v) = STAMPS.lock() else { return };
    let Ok(mut f) = std::fs::File::create(dir.join(FILE)).map(std::io::BufWriter::new) else {
        return;
    };
    for (point, key, at) in v.iter() {
        let _ = writeln!(f, "{point}\t{key}\t{at}");
    }
}

/// Writes the stamps to [`FILE`]; nothing without the feature.
#[cfg(not(feature = "profile"))]
#[inline(always)]
pub fn dump() {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_the_feature_a_mark_is_nothing_and_a_key_is_never_made() {
        if cfg!(feature = "profile") {
            return;
        }
        assert_eq!(std::mem::size_of::<Mark>(), 0);
        stamp("send.handler", || {
            unreachable!("a key made without the feature")
        });
    }

    #[test]
    fn each_point_is_named_once() {
        let mut all: Vec<&str> = SEND_POINTS.iter().chain(LINE_POINTS).copied().collect();
        let n = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), n);
    }
}
