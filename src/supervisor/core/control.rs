//! Live settings with no I/O (design rule 6): the control requests sent to the running CLI and
//! not yet answered, and what an answer, a refusal or no answer at all means. A property says
//! what is in force (issue 23: `PermissionMode` showed a mode the agent had refused): a setting
//! is recorded and shown once the running agent took it, or at once when no agent runs (its
//! next start takes it); a refusal or a silence changes nothing and says why (an `error` item,
//! `LastError`).

use serde_json::json;

use super::effect::{CommitBuilder, Effect, Publish, Setting, Write};
use crate::runtime::ControlRequest;

/// The setting a control request changes, in words (``the model to `opus` ``); `None` for the
/// requests that change no setting (`initialize`, `interrupt`).
pub fn setting_change(request: &ControlRequest) -> Option<String> {
    match request {
        ControlRequest::SetPermissionMode(mode) if mode.is_empty() => {
            Some("the permission mode to its default (the CLI's own)".to_owned())
        }
        ControlRequest::SetPermissionMode(mode) => Some(format!("the permission mode to `{mode}`")),
        ControlRequest::SetModel(model) if model.is_empty() => {
            Some("the model to its default (the CLI's configuration)".to_owned())
        }
        ControlRequest::SetModel(model) => Some(format!("the model to `{model}`")),
        ControlRequest::Initialize | ControlRequest::Interrupt => None,
    }
}

/// The record's setting a control request changes; `None` for the others.
pub fn setting_of(request: &ControlRequest) -> Option<Setting> {
    match request {
        ControlRequest::SetPermissionMode(mode) => Some(Setting::PermissionMode(mode.clone())),
        ControlRequest::SetModel(model) => Some(Setting::Model(model.clone())),
        ControlRequest::Initialize | ControlRequest::Interrupt => None,
    }
}

/// The name a chat item gives the setting (`permission_mode`, `model`) and its value.
fn named(setting: &Setting) -> (&'static str, &str) {
    match setting {
        Setting::PermissionMode(m) => ("permission_mode", m),
        Setting::Model(m) => ("model", m),
    }
}

/// A setting that is not in force, said: an `error` item (`reason`, with `setting` and `value`)
/// and `LastError`, both `text`.
fn not_in_force(c: &mut CommitBuilder, text: String, reason: &str, setting: &Setting) {
    let (name, value) = named(setting);
    c.item(
        "error",
        None,
        json!({"text": text, "reason": reason, "setting": name, "value": value}).to_string(),
    )
    .write(Write::LastError(text.clone()))
    .then(Publish::LastError(text));
}

/// `setting` recorded and published: in force from now on (or from the next start).
fn record(c: &mut CommitBuilder, setting: Setting) {
    c.write(Write::Setting(setting.clone()))
        .then(Publish::Setting(setting));
}

/// A setting change asked while no agent can take it live (none runs, it is stopping, or the
/// runtime takes this value only at a start): recorded for the next start, at once. While an
/// agent runs (`running`), a `system` item (reason `setting_next_start`, with `setting` and
/// `value`) says it keeps the old one until then. `None` for a request that changes no setting.
pub fn for_next_start(request: &ControlRequest, running: bool) -> Option<Effect> {
    let setting = setting_of(request)?;
    let mut c = CommitBuilder::default();
    if running && let Some(what) = setting_change(request) {
        let (name, value) = named(&setting);
        c.item(
            "system",
            None,
            json!({"text": format!("The running agent cannot change {what} live: its next start takes it."),
                   "reason": "setting_next_start", "setting": name, "value": value})
            .to_string(),
        );
    }
    record(&mut c, setting);
    c.build()
}

/// The control requests of one process sent and not yet answered, in the order sent.
#[derive(Debug, Default, Clone)]
pub struct Controls {
    pending: Vec<Pending>,
}

#[derive(Debug, Clone)]
struct Pending {
    request_id: String,
    request: ControlRequest,
    /// A later change of the same setting was recorded (for the next start) since: the last
    /// call wins, so this one's answer records nothing.
    superseded: bool,
    /// Its watchdog reported it unanswered; a late answer is still taken.
    late: bool,
}

/// Whether two requests change the same setting.
fn same_setting(a: &ControlRequest, b: &ControlRequest) -> bool {
    matches!(
        (setting_of(a), setting_of(b)),
        (
            Some(Setting::PermissionMode(_)),
            Some(Setting::PermissionMode(_))
        ) | (Some(Setting::Model(_)), Some(Setting::Model(_)))
    )
}

impl Controls {
    /// `request` went out with `request_id`.
    pub fn sent(&mut self, request_id: String, request: ControlRequest) {
        self.pending.push(Pending {
            request_id,
            request,
            superseded: false,
            late: false,
        });
    }

    /// `request` was recorded for the next start ([`for_next_start`]) while earlier changes of
    /// the same setting wait for the agent's answer: the later call wins (calls on one bot apply
    /// in order), so those answers record nothing.
    pub fn superseded_by(&mut self, request: &ControlRequest) {
        for p in &mut self.pending {
            if same_setting(&p.request, request) {
                p.superseded = true;
            }
        }
    }

    /// Whether a control request changing a setting waits for its answer (a watchdog runs).
    pub fn watched(request: &ControlRequest) -> bool {
        setting_change(request).is_some()
    }

    fn take(&mut self, request_id: &str) -> Option<Pending> {
        let at = self
            .pending
            .iter()
            .position(|p| p.request_id == request_id)?;
        Some(self.pending.remove(at))
    }

    /// Design rule 6 (change what can change live; a property says what is in force).
    ///
    /// The CLI answered `request_id`: a setting it took is recorded, published and said in a
    /// `system` item (reason `setting_applied`; `late` when its watchdog had reported it
    /// unanswered); a refused one changes nothing and is said in an `error` item (reason
    /// `setting_refused`) and `LastError`. Both items name the `setting` and its `value`. A
    /// setting a later call superseded ([`Controls::superseded_by`]) is said, not recorded; a
    /// late refusal was reported already. An answer to a request that changes no setting, or to
    /// none sent, changes nothing (`None`); a refused one of those is for the journal only (`Err`
    /// with its words).
    pub fn answered(
        &mut self,
        request_id: &str,
        result: Result<(), String>,
    ) -> Result<Vec<Effect>, (ControlRequest, String)> {
        let Some(Pending {
            request,
            superseded,
            late,
            ..
        }) = self.take(request_id)
        else {
            return Ok(Vec::new());
        };
        if late && let Err(e) = result {
            return Err((request, e));
        }
        let (Some(what), Some(setting)) = (setting_change(&request), setting_of(&request)) else {
            return match result {
                Ok(()) => Ok(Vec::new()),
                Err(e) => Err((request, e)),
            };
        };
        let (name, value) = named(&setting);
        let mut c = CommitBuilder::default();
        match result {
            Ok(()) => {
                let text = match (late, superseded) {
                    (_, true) => format!(
                        "The running agent changed {what}; a later change asked since replaces \
                         it at the next start."
                    ),
                    (true, false) => {
                        format!("The running agent changed {what}, later than control_timeout_s.")
                    }
                    (false, false) => format!("The running agent changed {what}."),
                };
                let mut payload = json!({"text": text, "reason": "setting_applied",
                                         "setting": name, "value": value});
                if late {
                    payload["late"] = json!(true);
                }
                c.item("system", None, payload.to_string());
                if !superseded {
                    record(&mut c, setting);
                }
            }
            Err(e) => {
                let text = format!(
                    "The running agent refused to change {what}: {e}. Nothing changed; a \
                     setting set while the bot is stopped is taken at its next start."
                );
                not_in_force(&mut c, text, "setting_refused", &setting);
            }
        }
        Ok(c.build().into_iter().collect())
    }

    /// No answer to `request_id` within `timeout_s` (the control watchdog, design rule 15): an
    /// `error` item (reason `control_timeout`, with `setting` and `value`) and `LastError`;
    /// nothing changed, since the agent did not say it took the setting. Reported once; a late
    /// answer is still taken ([`Controls::answered`]).
    pub fn timed_out(&mut self, request_id: &str, timeout_s: f64) -> Vec<Effect> {
        let Some(p) = self
            .pending
            .iter_mut()
            .find(|p| p.request_id == request_id && !p.late)
        else {
            return Vec::new();
        };
        p.late = true;
        let request = p.request.clone();
        let (Some(what), Some(setting)) = (setting_change(&request), setting_of(&request)) else {
            return Vec::new();
        };
        let text = format!(
            "The running agent did not answer the request to change {what} within {timeout_s} s \
             (control_timeout_s); nothing changed."
        );
        let mut c = CommitBuilder::default();
        not_in_force(&mut c, text, "control_timeout", &setting);
        c.build().into_iter().collect()
    }

    /// The process ended with these requests unanswered: neither taken nor refused, the
    /// settings they ask for (but those a later call superseded) are recorded for the next
    /// start, in the order asked.
    pub fn at_exit(self) -> Vec<Effect> {
        let mut c = CommitBuilder::default();
        for p in self.pending.into_iter().filter(|p| !p.superseded) {
            if let Some(setting) = setting_of(&p.request) {
                record(&mut c, setting);
            }
        }
        // No write, no effect.
        c.build().into_iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(effects: &[Effect]) -> Vec<Setting> {
        let mut out = Vec::new();
        for e in effects {
            if let Effect::Commit { writes, publish } = e {
                for w in writes {
                    if let Write::Setting(s) = w {
                        assert!(publish.contains(&Publish::Setting(s.clone())), "published");
                        out.push(s.clone());
                    }
                }
            }
        }
        out
    }

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
        let effects = c.answered("1", Ok(())).unwrap();
        let (kinds, last) = kinds_and_last_error(&effects);
        assert_eq!(kinds, ["system/setting_applied"]);
        assert_eq!(last, None);
        assert_eq!(settings(&effects), [Setting::Model("opus".into())]);
    }

    #[test]
    fn rule_6_a_setting_the_cli_refused_is_an_error_and_changes_nothing() {
        let mut c = Controls::default();
        c.sent("1".into(), ControlRequest::SetPermissionMode("plan".into()));
        let effects = c.answered("1", Err("no".into())).unwrap();
        let (kinds, last) = kinds_and_last_error(&effects);
        assert_eq!(kinds, ["error/setting_refused"]);
        assert!(last.unwrap().contains("Nothing changed"));
        assert!(settings(&effects).is_empty(), "not recorded, not shown");
    }

    #[test]
    fn rule_6_a_setting_with_no_agent_to_take_it_is_recorded_for_the_next_start() {
        let mode = ControlRequest::SetPermissionMode("plan".into());
        let effects: Vec<Effect> = for_next_start(&mode, false).into_iter().collect();
        assert_eq!(kinds_and_last_error(&effects), (vec![], None));
        assert_eq!(settings(&effects), [Setting::PermissionMode("plan".into())]);
        let effects: Vec<Effect> = for_next_start(&mode, true).into_iter().collect();
        assert_eq!(
            kinds_and_last_error(&effects).0,
            ["system/setting_next_start"],
            "a running agent keeps the old one: said"
        );
        assert_eq!(settings(&effects), [Setting::PermissionMode("plan".into())]);
        assert!(for_next_start(&ControlRequest::Interrupt, true).is_none());
    }

    #[test]
    fn rule_7_the_last_call_wins_over_an_earlier_change_still_waiting_for_its_answer() {
        let mut c = Controls::default();
        c.sent(
            "1".into(),
            ControlRequest::SetPermissionMode("acceptEdits".into()),
        );
        c.sent("2".into(), ControlRequest::SetModel("opus".into()));
        // Then the CLI's default, which only a start takes: recorded at once.
        c.superseded_by(&ControlRequest::SetPermissionMode(String::new()));
        let taken = c.answered("1", Ok(())).unwrap();
        assert_eq!(kinds_and_last_error(&taken).0, ["system/setting_applied"]);
        assert!(settings(&taken).is_empty(), "the later call stays recorded");
        assert_eq!(
            settings(&c.answered("2", Ok(())).unwrap()),
            [Setting::Model("opus".into())],
            "another setting is not superseded"
        );
        c.sent("3".into(), ControlRequest::SetPermissionMode("plan".into()));
        c.superseded_by(&ControlRequest::SetPermissionMode(String::new()));
        assert!(c.at_exit().is_empty(), "nor is it recorded at the exit");
    }

    #[test]
    fn rule_6_settings_unanswered_when_the_agent_exits_are_kept_in_the_order_asked() {
        let mut c = Controls::default();
        c.sent("1".into(), ControlRequest::SetModel("opus".into()));
        c.sent("2".into(), ControlRequest::Interrupt);
        c.sent("3".into(), ControlRequest::SetModel("sonnet".into()));
        assert_eq!(
            settings(&c.at_exit()),
            [
                Setting::Model("opus".into()),
                Setting::Model("sonnet".into())
            ]
        );
        assert!(Controls::default().at_exit().is_empty());
    }

    #[test]
    fn rule_15_a_setting_never_answered_is_reported_once() {
        let mut c = Controls::default();
        c.sent("1".into(), ControlRequest::SetModel("opus".into()));
        let effects = c.timed_out("1", 10.0);
        let (kinds, last) = kinds_and_last_error(&effects);
        assert_eq!(kinds, ["error/control_timeout"]);
        assert!(settings(&effects).is_empty(), "not in force");
        assert!(last.unwrap().contains("within 10 s"));
        assert!(c.timed_out("1", 10.0).is_empty(), "once");
        let late = c.answered("1", Ok(())).unwrap();
        assert_eq!(
            settings(&late),
            [Setting::Model("opus".into())],
            "a late yes is in force: recorded"
        );
        assert_eq!(kinds_and_last_error(&late).0, ["system/setting_applied"]);
        c.sent("2".into(), ControlRequest::SetModel("haiku".into()));
        c.timed_out("2", 10.0);
        assert!(
            c.answered("2", Err("no".into())).is_err(),
            "a late refusal was reported already: the journal's"
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
