//! Issue 31, memory where it matters (design rules 12 and 13 under memory pressure), with no
//! I/O: which bots botvisor may stop to give memory back, in which order, and what a bot asked to
//! do so does.
//!
//! **Which.** A bot may be stopped for memory pressure only when it may be stopped for idleness:
//! its agent runs and is not being stopped, no turn is in flight, no message is queued, no
//! permission prompt is open, the CLI reports no background task, no client holds it
//! ([`Activity::looks_idle`]), and, asked at the bot when the stop is decided, no descendant of
//! its agent lives ([`super::idle::at_idle_deadline`]). Its idle timeout plays no part: a bot whose
//! `idle_timeout_s` is 0 is never stopped for idleness but may be stopped for memory pressure;
//! the configuration's `stop_idle_on_memory_pressure` turns it off for every bot.
//!
//! **In which order.** Least recently used first ([`order`]). A bot is *used* by the latest of:
//! its agent's launch, a client's command to it (a message, a setting, an answer to a permission
//! request, an interrupt, a budget, a restart or a new environment, a lease taken or given back:
//! [`Cmd::is_use`]) and the end of a turn (the CLI's result). What a bot does by itself between
//! turns (a background task's output, a retry) is not a use.
//!
//! **How.** As an idle stop: gently, proven, released (design rule 9), not parked, so the next
//! message resumes the conversation (rule 2). A `system` chat item (reason `memory_pressure`) says
//! why, before the stop.
//!
//! [`Cmd::is_use`]: super::commands::Cmd::is_use

use std::time::{Duration, Instant};

use serde_json::json;

use super::bot_core::BotCore;
use super::effect::Effect;
use super::idle::Activity;
use super::machine::Facts;
use super::records::item;
use super::stop::StopReason;

/// What the supervisor reads of one bot when memory pressure comes (from the bot's view, kept by
/// its actor after every input): `T` is a moment (an `Instant` in the shell).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate<K, T> {
    /// The bot (its id in the shell).
    pub bot: K,
    /// What it does, as far as idleness goes.
    pub activity: Activity,
    /// When it was last used; `None` when it never was in this daemon run (it comes first).
    pub last_used: Option<T>,
}

/// The bots that may be stopped for memory pressure, least recently used first: those whose
/// activity [looks idle](Activity::looks_idle); two used at the same moment go in the order of
/// their keys. Each bot confirms at its actor, with fresh facts, before it is stopped
/// ([`BotCore::memory_pressure`]): the order is read from views that may be a moment old.
pub fn order<K, T>(bots: &[Candidate<K, T>]) -> Vec<K>
where
    K: Ord + Clone,
    T: Ord + Copy,
{
    let mut idle: Vec<&Candidate<K, T>> = bots.iter().filter(|c| c.activity.looks_idle()).collect();
    idle.sort_by(|a, b| (a.last_used, &a.bot).cmp(&(b.last_used, &b.bot)));
    idle.into_iter().map(|c| c.bot.clone()).collect()
}

/// `d` in words for people: `40 s`, `12 min`, `3 h`.
pub fn ago(d: Duration) -> String {
    let s = d.as_secs();
    if s < 120 {
        format!("{s} s")
    } else if s < 2 * 3600 {
        format!("{} min", s / 60)
    } else {
        format!("{} h", s / 3600)
    }
}

/// The `system` item said before a stop for memory pressure: `{"text", "reason":
/// "memory_pressure", "idle_s"?}`, `idle_s` the whole seconds since the bot was last used.
pub fn pressure_item(idle_for: Option<Duration>) -> serde_json::Value {
    let since = idle_for
        .map(|d| format!(" (last used {} ago)", ago(d)))
        .unwrap_or_default();
    let text = format!(
        "Stopped to give memory back: the machine is under memory pressure, and this bot was \
         the least recently used of the idle ones{since}. The next message resumes the \
         conversation."
    );
    let mut payload = json!({"text": text, "reason": "memory_pressure"});
    if let Some(d) = idle_for {
        payload["idle_s"] = json!(d.as_secs());
    }
    payload
}

impl BotCore {
    /// When the bot was last used (see the module doc); `None` before its first use in this
    /// daemon run.
    pub fn last_used(&self) -> Option<Instant> {
        self.last_used
    }

    /// The bot was used at `now`.
    pub(super) fn used(&mut self, now: Instant) {
        self.last_used = Some(now);
    }

    /// The supervisor asks this bot to stop for memory pressure: it does when it may, with
    /// fresh facts (every sign of idleness, then no live descendant: [`super::look`]), by
    /// [`BotCore::stop_for_memory_pressure`]. Otherwise nothing.
    pub(super) fn memory_pressure(&mut self, facts: &dyn Facts) {
        self.look_before_idle_stop(StopReason::MemoryPressure, facts);
    }

    /// The stop for memory pressure, the bot found idle at `now`: the `system` item
    /// ([`pressure_item`]) then the stop ([`StopReason::MemoryPressure`]), which the shell
    /// carries out.
    pub(super) fn stop_for_memory_pressure(&mut self, now: Instant) {
        let idle_for = self.last_used.map(|t| now.saturating_duration_since(t));
        tracing::info!(
            idle_s = idle_for.map(|d| d.as_secs()),
            "memory pressure: stopping the least recently used idle agent"
        );
        self.emit([
            item("system", pressure_item(idle_for)),
            Effect::Stop(StopReason::MemoryPressure),
        ]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn idle() -> Activity {
        Activity {
            running: true,
            ..Activity::default()
        }
    }

    fn bot(
        name: &'static str,
        activity: Activity,
        last_used: Option<u64>,
    ) -> Candidate<&'static str, u64> {
        Candidate {
            bot: name,
            activity,
            last_used,
        }
    }

    #[test]
    fn the_least_recently_used_idle_bot_comes_first() {
        let bots = [
            bot("b", idle(), Some(30)),
            bot("a", idle(), Some(20)),
            bot("c", idle(), Some(10)),
        ];
        assert_eq!(order(&bots), ["c", "a", "b"]);
    }

    #[test]
    fn a_bot_never_used_comes_first_and_ties_go_by_key() {
        let bots = [
            bot("d", idle(), Some(5)),
            bot("c", idle(), Some(5)),
            bot("b", idle(), None),
        ];
        assert_eq!(order(&bots), ["b", "c", "d"]);
    }

    /// Every "never" of issue 31, one at a time, on the least recently used bot: it is left
    /// out, and the next one comes first.
    #[test]
    fn rule_12_never_a_bot_with_work_a_prompt_or_no_agent() {
        let never = [
            (
                "a turn in flight",
                Activity {
                    in_flight: true,
                    ..idle()
                },
            ),
            (
                "a queued message",
                Activity {
                    queued: true,
                    ..idle()
                },
            ),
            (
                "an open permission prompt",
                Activity {
                    open_prompts: 1,
                    ..idle()
                },
            ),
            (
                "a background task",
                Activity {
                    background_tasks: 1,
                    ..idle()
                },
            ),
            (
                "no agent running, or one being stopped",
                Activity {
                    running: false,
                    ..idle()
                },
            ),
        ];
        for (what, activity) in never {
            let bots = [bot("old", activity, Some(1)), bot("new", idle(), Some(2))];
            assert_eq!(order(&bots), ["new"], "{what}");
        }
    }

    #[test]
    fn rule_13_never_a_bot_a_client_holds() {
        let held = Activity {
            holders: 1,
            ..idle()
        };
        let bots = [bot("held", held, Some(1)), bot("free", idle(), Some(2))];
        assert_eq!(order(&bots), ["free"]);
        assert_eq!(order(&[bot("held", held, Some(1))]), Vec::<&str>::new());
    }

    #[test]
    fn nothing_to_stop_when_no_bot_is_idle() {
        assert_eq!(order::<&str, u64>(&[]), Vec::<&str>::new());
        let busy = Activity {
            in_flight: true,
            ..idle()
        };
        assert_eq!(order(&[bot("a", busy, None)]), Vec::<&str>::new());
    }

    #[test]
    fn the_item_says_why_and_how_long_the_bot_was_idle() {
        let p = pressure_item(Some(Duration::from_secs(725)));
        assert_eq!(p["reason"], "memory_pressure");
        assert_eq!(p["idle_s"], 725);
        let text = p["text"].as_str().unwrap();
        assert!(text.contains("memory pressure"), "{text}");
        assert!(text.contains("last used 12 min ago"), "{text}");
        assert!(text.contains("resumes the conversation"), "{text}");
        let p = pressure_item(None);
        assert!(p.get("idle_s").is_none(), "{p}");
        assert!(!p["text"].as_str().unwrap().contains("last used"));
    }

    #[test]
    fn durations_in_words() {
        assert_eq!(ago(Duration::from_secs(40)), "40 s");
        assert_eq!(ago(Duration::from_secs(119)), "119 s");
        assert_eq!(ago(Duration::from_secs(120)), "2 min");
        assert_eq!(ago(Duration::from_secs(7199)), "119 min");
        assert_eq!(ago(Duration::from_secs(3 * 3600 + 5)), "3 h");
    }
}
