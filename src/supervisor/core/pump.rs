//! After every input: whether to start the agent and whether to write it the next message, with
//! no I/O (design rules 4, 7, 8 and 11).

/// The bot's process, as far as the pump cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcessNow {
    /// None runs.
    None,
    /// One runs and may take a message (once its protocol is ready).
    Usable,
    /// One runs but must take no message: it is being stopped, lost its conversation (rule 4),
    /// or refused an id in use.
    Unusable,
    /// A process still in its handshake (Codex before `thread/start` is answered): it takes no
    /// message yet; a later pump writes it.
    Opening,
}

/// What the shell knows after an input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PumpFacts {
    /// Nothing starts until a client sends or restarts (a stop, a launch that cannot work).
    pub parked: bool,
    /// The bot is `failed` or `stopping`.
    pub failed_or_stopping: bool,
    /// Its process.
    pub process: ProcessNow,
    /// Messages wait in the queue.
    pub waiting: bool,
    /// A crashed agent is to be restarted (messages wait or a client holds the bot).
    pub restart_pending: bool,
    /// A client holding the bot asked for a warm start (issue 31).
    pub warm_start: bool,
    /// A crash backoff runs: no start before it is over (rule 11).
    pub backoff_running: bool,
    /// A message is in flight.
    pub in_flight: bool,
    /// A usage limit holds: nothing starts and nothing is written until it is lifted.
    pub limited: bool,
    /// Another process holds the conversation: nothing starts until it exits (`core::held`).
    pub held: bool,
}

/// What the shell does, in this order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PumpPlan {
    /// Start the agent (design rule 2 decides its conversation).
    pub start: bool,
    /// Write the next waiting message, if the process is ready for it (rule 8 records where it
    /// goes first).
    pub write: bool,
}

/// Design rule 7 (one owner per conversation) inside botvisord: one process, one message in
/// flight.
///
/// The plan (see [`PumpPlan`]): one message in flight at a time (rule 7); none to a process that
/// lost its conversation (rule 4); no start during a crash backoff (rule 11), while parked or
/// while a usage limit holds (issue 24).
pub fn pump(f: &PumpFacts) -> PumpPlan {
    if f.parked || f.failed_or_stopping || f.limited || f.held {
        return PumpPlan::default();
    }
    let write = !f.in_flight;
    match f.process {
        ProcessNow::None => PumpPlan {
            start: (f.waiting || f.restart_pending || f.warm_start) && !f.backoff_running,
            write,
        },
        ProcessNow::Usable => PumpPlan {
            start: false,
            write,
        },
        ProcessNow::Unusable | ProcessNow::Opening => PumpPlan::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts() -> PumpFacts {
        PumpFacts {
            parked: false,
            failed_or_stopping: false,
            process: ProcessNow::None,
            waiting: true,
            restart_pending: false,
            warm_start: false,
            backoff_running: false,
            in_flight: false,
            limited: false,
            held: false,
        }
    }

    #[test]
    fn a_waiting_message_starts_the_agent_and_is_written() {
        assert_eq!(
            pump(&facts()),
            PumpPlan {
                start: true,
                write: true
            }
        );
    }

    #[test]
    fn nothing_waiting_starts_nothing_unless_a_crashed_agent_is_needed() {
        let idle = PumpFacts {
            waiting: false,
            ..facts()
        };
        assert!(!pump(&idle).start);
        assert!(
            pump(&PumpFacts {
                restart_pending: true,
                ..idle
            })
            .start
        );
    }

    #[test]
    fn rule_7_one_message_in_flight_at_a_time() {
        let busy = PumpFacts {
            process: ProcessNow::Usable,
            in_flight: true,
            ..facts()
        };
        assert_eq!(pump(&busy), PumpPlan::default());
    }

    #[test]
    fn rule_4_a_process_that_lost_its_conversation_takes_no_message() {
        let lost = PumpFacts {
            process: ProcessNow::Unusable,
            ..facts()
        };
        assert_eq!(pump(&lost), PumpPlan::default());
    }

    #[test]
    fn a_process_in_its_handshake_takes_no_message_yet_and_no_second_one_starts() {
        let opening = PumpFacts {
            process: ProcessNow::Opening,
            ..facts()
        };
        assert_eq!(pump(&opening), PumpPlan::default());
    }

    #[test]
    fn rule_11_no_start_during_a_crash_backoff() {
        let backoff = PumpFacts {
            backoff_running: true,
            ..facts()
        };
        assert!(!pump(&backoff).start);
    }

    #[test]
    fn a_parked_failed_or_stopping_bot_does_nothing() {
        for f in [
            PumpFacts {
                parked: true,
                ..facts()
            },
            PumpFacts {
                failed_or_stopping: true,
                ..facts()
            },
        ] {
            assert_eq!(pump(&f), PumpPlan::default(), "{f:?}");
        }
    }

    #[test]
    fn a_limited_bot_neither_starts_nor_writes() {
        for process in [ProcessNow::None, ProcessNow::Usable] {
            let f = PumpFacts {
                limited: true,
                process,
                ..facts()
            };
            assert_eq!(pump(&f), PumpPlan::default(), "{f:?}");
        }
    }

    #[test]
    fn rule_7_a_bot_whose_conversation_another_process_holds_starts_nothing() {
        let f = PumpFacts {
            held: true,
            ..facts()
        };
        assert_eq!(pump(&f), PumpPlan::default());
    }

    #[test]
    fn a_warm_start_starts_an_agent_with_nothing_waiting_but_never_where_nothing_may_start() {
        let warm = PumpFacts {
            waiting: false,
            warm_start: true,
            ..facts()
        };
        assert!(pump(&warm).start);
        for f in [
            PumpFacts {
                parked: true,
                ..warm
            },
            PumpFacts {
                failed_or_stopping: true,
                ..warm
            },
            PumpFacts {
                limited: true,
                ..warm
            },
            PumpFacts { held: true, ..warm },
            PumpFacts {
                backoff_running: true,
                ..warm
            },
            PumpFacts {
                process: ProcessNow::Usable,
                ..warm
            },
        ] {
            assert!(!pump(&f).start, "{f:?}");
        }
    }
}
