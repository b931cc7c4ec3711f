//! Where the plan's usage limit stands before it is reached (issue 24), with no I/O: when the CLI
//! says the window is nearly used, the chat says so once per window and reset, so a user can
//! slow down before the wall ([`super::limits`] holds the bot once it is reached).

use std::time::{Duration, SystemTime};

use serde_json::json;

use super::effect::{CommitBuilder, Effect};
use crate::runtime::{LimitReport, LimitState};

/// The CLI told where the plan's limit stands (`now`; `before` what it told last, if anything):
/// a `system` item (`reason` `limit_warning`, `kind`, `utilization`, `resets_at`) when the
/// window turns to a warning, once per window and reset.
pub fn warned(before: Option<&LimitReport>, now: &LimitReport) -> Option<Effect> {
    if now.state != LimitState::Warning {
        return None;
    }
    if before.is_some_and(|b| {
        b.state == LimitState::Warning && b.kind == now.kind && b.resets_at == now.resets_at
    }) {
        return None;
    }
    let used = now
        .utilization
        .map(|u| format!(" is {:.0} % used", u * 100.0))
        .unwrap_or_else(|| " is nearly used".to_owned());
    let window = if now.kind.is_empty() {
        "The plan's usage limit".to_owned()
    } else {
        format!("The plan's {} usage limit", now.kind.replace('_', "-"))
    };
    let reset = if now.resets_at == 0 {
        String::new()
    } else {
        format!(
            "; it resets at {} (UTC)",
            humantime::format_rfc3339_seconds(
                SystemTime::UNIX_EPOCH + Duration::from_secs(now.resets_at)
            )
        )
    };
    let mut c = CommitBuilder::default();
    c.item(
        "system",
        None,
        json!({"text": format!("{window}{used}{reset}."), "reason": "limit_warning",
               "kind": now.kind, "utilization": now.utilization, "resets_at": now.resets_at})
        .to_string(),
    );
    c.build()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::supervisor::core::effect::Write;

    #[test]
    fn a_warning_is_said_once_per_window() {
        let report = |state, resets_at| LimitReport {
            state,
            kind: "five_hour".into(),
            resets_at,
            utilization: Some(0.91),
        };
        let warning = report(LimitState::Warning, 1_796_231_999);
        let Some(Effect::Commit { writes, .. }) = warned(None, &warning) else {
            panic!("a warning item");
        };
        let Write::Chat { payload, .. } = &writes[0] else {
            panic!("{writes:?}");
        };
        assert!(
            payload.contains("five-hour usage limit is 91 % used"),
            "{payload}"
        );
        assert_eq!(warned(Some(&warning), &warning), None, "said once");
        let allowed = report(LimitState::Allowed, 1_796_231_999);
        assert_eq!(warned(None, &allowed), None);
        assert!(
            warned(Some(&warning), &report(LimitState::Warning, 1_796_250_000)).is_some(),
            "the next window warns again"
        );
    }
}
