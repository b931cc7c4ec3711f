//! The door to the core: the CLI's stdout, read as runtime events and handed to the core
//! ([`crate::supervisor::core::BotCore::handle`]), which decides; the shell answers what the core
//! asks ([`ActorFacts`], the wall clock) and carries out its effects ([`Actor::run_effects`]);
//! after each turn of the actor's loop the idle deadline is set again from what the bot does
//! ([`Actor::rearm_idle`]; design rules 12 and 13).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use super::{Actor, BotView, Next, Proc, Shared, SharedView, bot_env};
use crate::process::ProcEvent;
use crate::runtime::{LimitReport, TakenTurn};
use crate::supervisor::core::{Facts, Inflight, Input};
use std::time::Duration;

/// What the core asks while it handles an input, answered from the bot's view, its shared
/// handles and its process: each answer read only when asked.
pub(super) struct ActorFacts<'a> {
    pub(super) view: &'a Arc<SharedView>,
    pub(super) shared: &'a Shared,
    pub(super) proc: Option<&'a Proc>,
}

impl ActorFacts<'_> {
    fn view(&self) -> std::sync::RwLockReadGuard<'_, BotView> {
        self.view.read()
    }

    /// The environment the bot's CLI runs with (`bot_env`: the daemon's, the bot's own, its
    /// login's) and its working directory: where the runtime's files of its conversations are.
    fn env_and_cwd(&self) -> (BTreeMap<String, String>, String) {
        let record = self.view().record.clone();
        (bot_env(&self.shared.config, &record), record.cwd)
    }
}

impl Facts for ActorFacts<'_> {
    fn recorded(&self) -> Option<String> {
        self.view().record.session_id.clone()
    }

    fn conversation(&self) -> Option<String> {
        self.proc
            .and_then(|p| p.protocol.conversation().map(str::to_owned))
    }

    fn transcript_exists(&self, session_id: &str) -> bool {
        let (env, cwd) = self.env_and_cwd();
        self.shared
            .runtime
            .transcript_exists(&env, Path::new(&cwd), session_id)
    }

    fn taken_turn(&self, inf: &Inflight) -> Option<TakenTurn> {
        let (env, cwd) = self.env_and_cwd();
        self.shared.runtime.taken_turn(
            &env,
            Path::new(&cwd),
            &inf.session,
            &inf.turn.text,
            inf.written,
        )
    }

    fn conversation_holds(&self, inf: &Inflight) -> bool {
        let (env, cwd) = self.env_and_cwd();
        self.shared.runtime.conversation_has_message(
            &env,
            Path::new(&cwd),
            &inf.session,
            &inf.turn.text,
            inf.written,
        )
    }

    fn left_taken(
        &self,
        turn: &crate::supervisor::core::QueuedTurn,
        session: &str,
        since: std::time::SystemTime,
    ) -> Option<TakenTurn> {
        let (env, cwd) = self.env_and_cwd();
        self.shared
            .runtime
            .taken_turn(&env, Path::new(&cwd), session, &turn.text, since)
    }

    fn unix_now(&self) -> u64 {
        unix_now()
    }

    fn watchers(&self) -> (usize, usize) {
        let holders = self.shared.holder_count();
        let open = self
            .shared
            .prompts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .open
            .len();
        (holders, open)
    }

    fn login_hint(&self) -> String {
        let record = self.view().record.clone();
        let env = match self.proc {
            Some(p) => p.env.clone(),
            None => bot_env(&self.shared.config, &record),
        };
        self.shared.runtime.login_hint(&env)
    }
}

impl Actor {
    pub(super) fn on_proc_event(&mut self, ev: ProcEvent) -> Next {
        let current = self.proc.as_ref().map(|p| p.handle.generation);
        match ev {
            ProcEvent::Line(generation, line) if Some(generation) == current => {
                let Some(proc) = self.proc.as_mut() else {
                    return Next::Nothing;
                };
                let read = proc.protocol.read_line(&line);
                self.write_lines(read.replies);
                for event in read.events {
                    self.handle(Input::Runtime(event));
                }
                if self.stop_asked.is_some() {
                    Next::StopProcess
                } else {
                    Next::Nothing
                }
            }
            ProcEvent::Exited(generation, info) if Some(generation) == current => {
                Next::Exited(info)
            }
            _ => Next::Nothing,
        }
    }

    /// What the core may ask, answered from this actor.
    pub(super) fn facts(&self) -> ActorFacts<'_> {
        ActorFacts {
            view: &self.view,
            shared: &self.shared,
            proc: self.proc.as_ref(),
        }
    }

    /// Hands `input` to the core and carries out every effect it gives, in order. Called while
    /// effects are being carried out (an effect's own step told something: a launch, a park),
    /// `input` waits in [`Actor::told`] for the effects before it: the core is never entered
    /// from inside an effect.
    pub(super) fn handle(&mut self, input: Input) {
        if self.applying {
            self.told.push_back(input);
            return;
        }
        self.feed(input);
        self.run_effects();
    }

    /// Hands `input` to the core; its effects wait for [`Actor::run_effects`].
    fn feed(&mut self, input: Input) {
        // The fields one by one: the core changes while the facts are read.
        let facts = ActorFacts {
            view: &self.view,
            shared: &self.shared,
            proc: self.proc.as_ref(),
        };
        self.core.handle(Instant::now(), input, &facts);
    }

    /// Carries out what the core asked and has not been done yet, in order, then hands the core
    /// what carrying them out told ([`Actor::told`]) and carries out what that asks, until
    /// nothing is left: the one loop that drains the core's effects.
    pub(super) fn run_effects(&mut self) {
        if self.applying {
            return;
        }
        self.applying = true;
        loop {
            while let Some(effect) = self.core.poll_effect() {
                self.group_or_apply(effect);
            }
            if std::mem::take(&mut self.recorded_due) {
                let (state, record) = self.on_record();
                self.feed(Input::Recorded { state, record });
                continue;
            }
            let Some(input) = self.told.pop_front() else {
                break;
            };
            self.feed(input);
        }
        self.applying = false;
        if !self.group.open {
            self.say_turn_ends();
        }
    }

    /// The `PlanLimit` the CLI told, shown to clients.
    pub(super) fn show_plan_limit(&self, report: LimitReport) {
        self.update(vec![crate::supervisor::Property::PlanLimit], |v| {
            v.plan_limit = Some(report)
        });
    }
}

/// Now, in Unix seconds.
pub(super) fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Actor {
    pub(super) fn idle_timeout(&self) -> Option<Duration> {
        let s = self
            .record()
            .idle_timeout_s
            .unwrap_or(self.shared.config.idle_timeout_s);
        (s > 0).then(|| Duration::from_secs(s))
    }

    /// After every event: an idle bot gets a fresh deadline, a busy one none
    /// (`idle_deadline`); the view keeps what the bot does and when it was last used,
    /// for the supervisor's order under memory pressure (issue 31, `core::evict`), written only
    /// when it changed.
    ///
    pub(super) fn rearm_idle(&mut self) {
        let activity = self.core.activity(&self.facts());
        self.core
            .rearm_idle(&activity, self.idle_timeout(), Instant::now());
        let last_used = self.core.last_used();
        let shown = {
            let v = self.view.read();
            (v.activity, v.last_used)
        };
        if shown != (activity, last_used) {
            self.update(vec![], |v| {
                v.activity = activity;
                v.last_used = last_used;
            });
        }
    }
}
