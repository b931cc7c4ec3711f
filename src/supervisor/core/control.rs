//! Live settings with no I/O (design rule 6): the control requests sent to the running CLI and
//! not yet answered, and what an answer, a refusal or no answer at all means (the chat says so;
//! a refusal or a silence is an error in `LastError`; the setting stays recorded for the next
//! start either way).

use std::collections::HashMap;

use serde_json::json;

use super::effect::{CommitBuilder, Effect, Publish, Write};
use crate::runtime::ControlRequest;

/// The setting a control request changes, in words (``the model to `opus` ``); `None` for the
/// requests that change no setting (`initialize`, `interrupt`).
pub fn setting_change(request: &ControlRequest) -> Option<String> {
    match request {
        ControlRequest::SetPermissionMode(mode) => Some(format!("the permission mode to `{mode}`")),
        ControlRequest::SetModel(model) if model.is_empty() => {
            Some("the model to its default (the CLI's configuration)".to_owned())
        }
        ControlRequest::SetModel(model) => Some(format!("the model to `{model}`")),
        ControlRequest::Initialize | ControlRequest::Interrupt => None,
    }
}

/// The control requests of one process sent and not yet answered, by request id.
#[derive(Debug, Default, Clone)]
pub struct Controls {
    pending: HashMap<String, ControlRequest>,
}

impl Controls {
    /// `request` went out with `request_id`.
    pub fn sent(&mut self, request_id: String, request: ControlRequest) {
        self.pending.insert(request_id, request);
    }

    /// Whether a control request changing a setting waits for its answer (a watchdog runs).
    pub fn watched(request: &ControlRequest) -> bool {
        setting_change(request).is_some()
    }

    /// The CLI answered `request_id`: a setting changed says so in a `system` item (reason
    /// `setting_applied`); a refused one in an `error` item and `LastError`. An answer to a
    /// request that changes no setting, or to none sent, changes nothing (`None`); a refused
    /// one of those is for the journal only (`Err` with its words).
    pub fn answered(
        &mut self,
        request_id: &str,
        result: Result<(), String>,
    ) -> Result<Vec<Effect>, (ControlRequest, String)> {
        let Some(request) = self.pending.remove(request_id) else {
            return Ok(Vec::new());
        };
        let Some(what) = setting_change(&request) else {
            return match result {
                Ok(()) => Ok(Vec::new()),
                Err(e) => Err((request, e)),
            };
        };
        let mut c = CommitBuilder::default();
        match result {
            Ok(()) => {
                c.item(
                    "system",
                    None,
                    json!({"text": format!("The running agent changed {what}."), "reason": "setting_applied"})
                        .to_string(),
                );
            }
            Err(e) => {
                let text = format!(
                    "The running agent refused to change {what}: {e}. The setting is kept for \
                     its next start."
                );
                c.item("error", None, json!({ "text": text }).to_string())
                    .write(Write::LastError(text.clone()))
                    .then(Publish::LastError(text));
            }
        }
        Ok(c.build().into_iter().collect())
    }

    /// No answer to `request_id` within `timeout_s` (the control watchdog, design rule 15): an
    /// `error` item (reason `control_timeout`) and `LastError`; the setting stays recorded.
    pub fn timed_out(&mut self, request_id: &str, timeout_s: f64) -> Vec<Effect> {
        let Some(what) = self
            .pending
            .remove(request_id)
            .as_ref()
            .and_then(setting_change)
        else {
            return Vec::new();
        };
        let text = format!(
            "The running agent did not answer the request to change {what} within {timeout_s} s \
             (control_timeout_s); the setting is kept for its next start."
        );
        let mut c = CommitBuilder::default();
        c.item(
            "error",
            None,
            json!({"text": text, "reason": "control_timeout"}).to_string(),
        )
        .write(Write::LastError(text.clone()))
        .then(Publish::LastError(text));
        c.build().into_iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds_and_last_error(effects: &[Effect]) -> (Vec<String>, Option<String>) {
        let mut kinds = Vec::new();
        let mut last = None;
        for e in effects {
            if let Effect::Commit { writes, .. } = e {
                for w in writes {
                    match w {
                        Write::Chat { kind, payload, .. } => {
                            let reason = serde_json::from_str::<serde_json::Value>(payload)
                                .ok()
                                .and_then(|v| v["reason"].as_str().map(str::to_owned))
                                .unwrap_or_default();
                            kinds.push(format!("{kind}/{reason}"));
                        }
                        Write::LastError(t) => last = Some(t.clone()),
                        _ => {}
                    }
                }
            }
        }
        (kinds, last)
    }

    #[test]
    fn rule_6_a_setting_the_cli_applied_says_so_and_is_no_error() {
        let mut c = Controls::default();
        c.sent("1".into(), ControlRequest::SetModel("opus".into()));
        let (kinds, last) = kinds_and_last_error(&c.answered("1", Ok(())).unwrap());
        assert_eq!(kinds, ["system/setting_applied"]);
        assert_eq!(last, None);
    }

    #[test]
    fn rule_6_a_setting_the_cli_refused_is_an_error_and_kept_for_the_next_start() {
        let mut c = Controls::default();
        c.sent("1".into(), ControlRequest::SetPermissionMode("plan".into()));
        let (kinds, last) = kinds_and_last_error(&c.answered("1", Err("no".into())).unwrap());
        assert_eq!(kinds, ["error/"]);
        assert!(last.unwrap().contains("kept for its next start"));
    }

    #[test]
    fn rule_15_a_setting_never_answered_is_reported_once() {
        let mut c = Controls::default();
        c.sent("1".into(), ControlRequest::SetModel("opus".into()));
        let (kinds, last) = kinds_and_last_error(&c.timed_out("1", 10.0));
        assert_eq!(kinds, ["error/control_timeout"]);
        assert!(last.unwrap().contains("within 10 s"));
        assert!(c.timed_out("1", 10.0).is_empty(), "once");
        assert!(
            c.answered("1", Ok(())).unwrap().is_empty(),
            "a late answer changes nothing"
        );
    }

    #[test]
    fn requests_that_change_no_setting_are_not_reported_in_the_chat() {
        let mut c = Controls::default();
        c.sent("1".into(), ControlRequest::Interrupt);
        assert!(!Controls::watched(&ControlRequest::Interrupt));
        assert!(matches!(
            c.answered("1", Err("busy".into())),
            Err((ControlRequest::Interrupt, _))
        ));
        assert!(c.answered("unknown", Ok(())).unwrap().is_empty());
    }
}
