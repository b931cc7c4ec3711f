//! Watchdogs (design rule 15: a CLI that stops answering is noticed by botvisor, never by the
//! user alone). Pure bookkeeping of deadlines: the actor says what it started waiting for and
//! what arrived, asks for the next deadline, and at that moment asks what expired. No clock of
//! its own: `T` is whatever instant the caller uses.
//!
//! There is deliberately no watchdog on a turn for being long: a model may think, and a tool may
//! run, for an hour. Only a launch that shows no sign of life, an interrupt that is not followed
//! by the turn's end, and a control request that gets no answer are watched.

use std::collections::BTreeMap;

/// What a watchdog caught.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expired {
    /// The process printed nothing at all since its launch (`start_timeout_s`).
    Start,
    /// The turn (this id) did not end after an interrupt (`interrupt_grace_s`).
    Interrupt(String),
    /// The control request (this id) got no answer (`control_timeout_s`).
    Control(String),
}

/// Design rule 15 (never stuck): the deadlines of one bot's current process.
///
/// The deadlines of one bot's current process.
#[derive(Debug, Clone)]
pub struct Watchdogs<T> {
    start: Option<T>,
    interrupt: Option<(String, T)>,
    control: BTreeMap<String, T>,
}

impl<T> Default for Watchdogs<T> {
    fn default() -> Self {
        Watchdogs {
            start: None,
            interrupt: None,
            control: BTreeMap::new(),
        }
    }
}

impl<T: Copy + Ord> Watchdogs<T> {
    /// A process was launched: it must show a sign of life by `deadline` (`None`: not watched).
    pub fn launched(&mut self, deadline: Option<T>) {
        *self = Watchdogs::default();
        self.start = deadline;
    }

    /// The process printed something: it lives.
    pub fn sign_of_life(&mut self) {
        self.start = None;
    }

    /// An interrupt was sent for `turn`: the turn must end by `deadline`.
    pub fn interrupt_sent(&mut self, turn: &str, deadline: Option<T>) {
        self.interrupt = deadline.map(|d| (turn.to_owned(), d));
    }

    /// The turn in flight is now `in_flight` (`None`: none): an interrupt sent for a turn that
    /// is no longer in flight (it ended, any outcome, or went back to the queue) is settled.
    pub fn in_flight(&mut self, in_flight: Option<&str>) {
        if self
            .interrupt
            .as_ref()
            .is_some_and(|(t, _)| Some(t.as_str()) != in_flight)
        {
            self.interrupt = None;
        }
    }

    /// A control request was sent: it must be answered by `deadline`.
    pub fn control_sent(&mut self, request_id: &str, deadline: Option<T>) {
        if let Some(d) = deadline {
            self.control.insert(request_id.to_owned(), d);
        }
    }

    /// A control request was answered.
    pub fn control_answered(&mut self, request_id: &str) {
        self.control.remove(request_id);
    }

    /// The process is gone: nothing is watched any more.
    pub fn process_gone(&mut self) {
        *self = Watchdogs::default();
    }

    /// The earliest deadline, if any.
    pub fn next(&self) -> Option<T> {
        self.start
            .into_iter()
            .chain(self.interrupt.as_ref().map(|(_, d)| *d))
            .chain(self.control.values().copied())
            .min()
    }

    /// What expired at `now` (deadlines at or before it), each once: they are removed.
    pub fn expired(&mut self, now: T) -> Vec<Expired> {
        let mut out = Vec::new();
        if self.start.is_some_and(|d| d <= now) {
            self.start = None;
            out.push(Expired::Start);
        }
        if let Some((turn, d)) = &self.interrupt
            && *d <= now
        {
            out.push(Expired::Interrupt(turn.clone()));
            self.interrupt = None;
        }
        let late: Vec<String> = self
            .control
            .iter()
            .filter(|(_, d)| **d <= now)
            .map(|(id, _)| id.clone())
            .collect();
        for id in late {
            self.control.remove(&id);
            out.push(Expired::Control(id));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_launch_without_a_sign_of_life_expires_once() {
        let mut w = Watchdogs::default();
        w.launched(Some(10));
        assert_eq!(w.next(), Some(10));
        assert!(w.expired(9).is_empty());
        assert_eq!(w.expired(10), vec![Expired::Start]);
        assert!(w.expired(11).is_empty(), "once");
    }

    #[test]
    fn a_sign_of_life_ends_the_start_watch() {
        let mut w = Watchdogs::default();
        w.launched(Some(10));
        w.sign_of_life();
        assert_eq!(w.next(), None);
        assert!(w.expired(100).is_empty());
    }

    #[test]
    fn an_interrupt_is_settled_once_its_turn_is_no_longer_in_flight() {
        let mut w = Watchdogs::default();
        w.interrupt_sent("t1", Some(5));
        w.in_flight(Some("t1"));
        assert_eq!(w.next(), Some(5));
        assert_eq!(w.expired(5), vec![Expired::Interrupt("t1".into())]);
        w.interrupt_sent("t2", Some(8));
        w.in_flight(None);
        assert!(w.expired(100).is_empty());
        w.interrupt_sent("t3", Some(9));
        w.in_flight(Some("t4"));
        assert!(w.expired(100).is_empty(), "another turn is in flight");
    }

    #[test]
    fn unanswered_control_requests_expire_and_answered_ones_do_not() {
        let mut w = Watchdogs::default();
        w.control_sent("a", Some(3));
        w.control_sent("b", Some(4));
        w.control_sent("c", None);
        w.control_answered("b");
        assert_eq!(w.next(), Some(3));
        assert_eq!(w.expired(10), vec![Expired::Control("a".into())]);
        assert_eq!(w.next(), None);
    }

    #[test]
    fn a_new_launch_or_a_gone_process_forgets_everything() {
        let mut w = Watchdogs::default();
        w.interrupt_sent("t", Some(1));
        w.control_sent("a", Some(1));
        w.launched(None);
        assert_eq!(w.next(), None);
        w.control_sent("a", Some(1));
        w.process_gone();
        assert!(w.expired(100).is_empty());
    }
}
