//! The shapes a setting's value may take, shared by the configuration file and the D-Bus calls
//! that set the same things on one bot (`CreateBot`'s `memory_max`, `SetModel`). They live here,
//! below both, so that the configuration knows nothing of the supervisor.

/// The smallest memory limit accepted, in bytes (1 MiB): less could not even load the agent.
pub const MIN_MEMORY_MAX: u64 = 1 << 20;

/// The largest memory limit accepted other than "none", in bytes (the database keeps a signed
/// 64-bit integer).
pub const MAX_MEMORY_MAX: u64 = i64::MAX as u64;

/// "No limit", as the `MemoryMax` property and the `memory_max` option spell it (systemd's
/// `infinity`).
pub const NO_LIMIT: u64 = u64::MAX;

/// Checks a value of `memory_max` in bytes (`what` names where it came from): `None` for
/// [`NO_LIMIT`], else the limit when it is in range. Errors: out of range, in words.
pub fn check_memory_max(what: &str, bytes: u64) -> Result<Option<u64>, String> {
    if bytes == NO_LIMIT {
        return Ok(None);
    }
    if !(MIN_MEMORY_MAX..=MAX_MEMORY_MAX).contains(&bytes) {
        return Err(format!(
            "{what} must be a number of bytes from {MIN_MEMORY_MAX} (1 MiB) to {MAX_MEMORY_MAX}, \
             or {NO_LIMIT} for no limit; got {bytes}"
        ));
    }
    Ok(Some(bytes))
}

/// Whether `model` can be a model name (empty: the CLI's default): at most 200 bytes, no blank
/// or control character, not beginning with `-`. A model is handed to the CLI as an argument of
/// its own: one that begins with `-` would be read as a flag (`--dangerously-skip-permissions`).
pub fn is_model_name(model: &str) -> bool {
    model.len() <= 200
        && !model.starts_with('-')
        && !model.chars().any(|c| c.is_whitespace() || c.is_control())
}
