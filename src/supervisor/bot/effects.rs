//! The shell's half of the lifecycle core (`supervisor::core`): executes the effects the core
//! returns, in order, and feeds their results back. Design rule 1 (persist, then publish) lives
//! here, in [`Actor::commit`]: nothing of a commit is published unless it is durable, and every
//! durable change the actor makes to its bot's rows is a [`Write`] that passes through it. The
//! prompt book is changed here too, under the lock clients answer through (the first answer
//! wins, [`crate::supervisor::core::prompts`]).

use super::Actor;
use crate::profile;
use crate::store;
use crate::supervisor::Property;
use crate::supervisor::Publication;
use crate::supervisor::core::prompts;
use crate::supervisor::core::{Effect, Input, Publish, Setting, Write};
use crate::supervisor::core::{Request, Streamed};

impl Actor {
    /// Executes `effects` in order.
    /// Returns whether every commit among them was durable.
    pub(super) fn apply(&mut self, effects: Vec<Effect>) -> bool {
        let mut committed = true;
        for effect in effects {
            match effect {
                Effect::Commit { writes, publish } => {
                    match self.commit_then_end(&writes, publish) {
                        Ok(()) => self.last_commit_ok = true,
                        Err(e) => {
                            tracing::error!(bot_id = %self.id, error = %e, ?writes, "cannot commit");
                            committed = false;
                            self.last_commit_ok = false;
                            self.recorded_due = true;
                        }
                    }
                }
                Effect::ReportCommit(awaited) => {
                    let ok = self.last_commit_ok;
                    self.handle(Input::Committed { awaited, ok });
                }
                Effect::ForgetKept => self.forget_kept(),
                Effect::End => self.ended = true,
                Effect::Queued(n) => self.show_queued(n),
                Effect::State(state) => self.update(vec![Property::State], |v| v.state = state),
                Effect::HeldBy(by) => self.update(vec![Property::HeldBy], |v| v.held_by = by),
                Effect::Pending(list) => {
                    self.update(vec![Property::PendingPermissions], |v| v.pending = list)
                }
                Effect::Park(_) => {
                    let running = self.proc.is_some();
                    self.handle(Input::ParkChanged { running });
                }
                Effect::Pause => {}
                Effect::Start => self.start(),
                Effect::Spawn(decision) => self.spawn(decision),
                Effect::Send(Request::Control(request)) => {
                    let sent = self
                        .proc
                        .as_mut()
                        .filter(|p| p.stdin.is_some())
                        .and_then(|p| p.protocol.control(&request));
                    let request_id =
                        sent.and_then(|s| self.write_lines(s.lines).then_some(s.request_id));
                    self.handle(Input::ControlWritten {
                        request,
                        request_id,
                    });
                }
                Effect::Send(Request::Permission { request_id, answer }) => {
                    if let Some(proc) = self.proc.as_mut() {
                        let lines = proc.protocol.answer_permission(&request_id, &answer);
                        self.write_lines(lines);
                    }
                }
                Effect::Send(Request::Message { turn_id, text }) => {
                    profile::stamp("actor.delivery", || format!("turn:{turn_id}"));
                    // Design rule 8: what the agent is given was promised durably first.
                    self.shared.store.keep_blocking(self.promised);
                    let ok = match self.proc.as_mut() {
                        Some(proc) => {
                            proc.before_turn = None;
                            let lines = proc.protocol.user_message(&text);
                            self.write_message(lines)
                        }
                        None => false,
                    };
                    profile::stamp("actor.written", || format!("turn:{turn_id}"));
                    if self.proc.as_ref().is_some_and(|p| p.began_a_turn) {
                        self.look_before_turn();
                    }
                    self.handle(Input::Written { ok });
                }
                Effect::Send(Request::Refuse {
                    request_id,
                    message,
                }) => {
                    if let Some(proc) = self.proc.as_mut() {
                        let lines = proc.protocol.refuse(&request_id, &message);
                        self.write_lines(lines);
                    }
                }
                Effect::Stop(why) => self.stop_asked = Some(why),
                Effect::Stream(s) => self.stream(s),
                Effect::LookForDescendants => self.snapshot_descendants(),
                Effect::Look(look) => {
                    let answer = self.look(look);
                    self.handle(Input::Looked(answer));
                }
                Effect::LookBeforeTurn => self.look_before_turn(),
                Effect::TurnBegan => {
                    self.look_before_turn();
                    if let Some(proc) = self.proc.as_mut() {
                        proc.began_a_turn = true;
                    }
                }
                Effect::InterruptEnded(turn) => {
                    if let Some(before) = self.proc.as_mut().and_then(|p| p.before_turn.take()) {
                        let now = self.agent_descendants();
                        let left = crate::supervisor::core::left_by_turn(&before, now);
                        if !left.is_empty() {
                            self.left_by_interrupt = Some((turn, left));
                        }
                    }
                }
                Effect::OpenPrompt { asked, turn_id } => {
                    let effects = self.with_prompts(|book| {
                        crate::supervisor::core::prompts::opened(book, asked, turn_id.as_deref())
                    });
                    committed &= self.apply(effects);
                }
                Effect::ClosePrompts(message) => self.close_open_prompts(&message),
                Effect::PlanLimit(report) => self.show_plan_limit(report),
                Effect::FollowCredentials => self.follow_credentials(),
                Effect::KeepConversation => self.keep_conversation(),
                Effect::ProcessGone => self.update(vec![Property::ProcessId], |v| v.process_id = 0),
                Effect::CleanUp(why) => self.clean_up_asked = Some(why),
            }
        }
        committed
    }

    /// What the agent runs before the turn in flight, looked at once: the turn's "before" (what
    /// an interrupt of it leaves alone). Asked as the message is written to an agent that began
    /// a turn before, while it reads the message and waits for the model (issue 50: at the
    /// replay, the turn's first answer waited behind it, a `/proc` read of each thread's
    /// children, 72 µs at the median and p99 305 µs on the 2-core bench machine); else once the
    /// CLI says it took the message ([`Effect::LookBeforeTurn`]); else at its replay
    /// ([`Effect::TurnBegan`]): what an agent starts at launch is not the turn's. Nothing of the
    /// turn runs before any of these: a tool needs the model's answer.
    fn look_before_turn(&mut self) {
        if self.proc.as_ref().is_none_or(|p| p.before_turn.is_some()) {
            return;
        }
        let before = self.agent_descendants();
        if let Some(proc) = self.proc.as_mut() {
            proc.before_turn = Some(before);
        }
    }

    /// Streamed text: `PartialText` grows or starts over, or `TextDelta` is signalled.
    pub(super) fn stream(&self, s: Streamed) {
        match s {
            Streamed::Append(text) => {
                let mut v = self.view.write();
                v.partial_text.push_str(&text);
            }
            Streamed::Signal { turn_id, text } => {
                let _ = self.shared.publisher.send(Publication::TextDelta {
                    bot_id: self.id.clone(),
                    turn_id,
                    text,
                });
            }
            Streamed::Clear => {
                let mut v = self.view.write();
                v.partial_text.clear();
            }
        }
    }

    /// [`Actor::commit`], except that a turn's end it publishes is said last, once every other
    /// effect of the input is carried out ([`Actor::say_turn_ends`]).
    fn commit_then_end(
        &mut self,
        writes: &[Write],
        mut publish: Vec<Publish>,
    ) -> Result<(), store::StoreError> {
        let mut ends = Vec::new();
        publish.retain(|p| match p {
            Publish::TurnFinished { turn_id, outcome } => {
                ends.push((turn_id.clone(), outcome.as_str()));
                false
            }
            _ => true,
        });
        self.commit(writes, &publish)?;
        self.turn_ends.extend(ends);
        Ok(())
    }

    /// Design rule 1's last step for a turn: the `TurnFinished` of every turn whose end was
    /// committed is sent, in order, after everything else the same input did (an agent's crash
    /// says its `error` item after the turn's end is committed; a turn's result keeps the
    /// conversation's copy after it). A client that reads the bot on the signal finds all of
    /// it. Called when the core's effects are drained and when a group of lines is committed.
    pub(super) fn say_turn_ends(&mut self) {
        for (turn_id, outcome) in std::mem::take(&mut self.turn_ends) {
            self.publish_turn(&turn_id, outcome);
        }
    }

    /// Design rule 1 (persist, then publish): commits `writes` in one transaction, then
    /// publishes `publish` in order.
    pub(super) fn commit(
        &self,
        writes: &[Write],
        publish: &[Publish],
    ) -> Result<(), store::StoreError> {
        // Published inside `tx_then`, still holding the connection: in commit order with every
        // other writer of this database (the handles' Send, answers, forget_session).
        self.shared.store.tx_then(
            |tx| {
                let mut items = Vec::new();
                for write in writes {
                    items.extend(self.write(tx, write)?);
                }
                Ok(items)
            },
            |items| {
                for p in publish {
                    self.publish(p, items);
                }
            },
        )?;
        Ok(())
    }

    /// One durable write of a commit, inside its transaction; the chat item it appended, if it
    /// is one (published by its index among the commit's items).
    pub(super) fn write(
        &self,
        tx: &rusqlite::Transaction<'_>,
        write: &Write,
    ) -> Result<Option<store::ChatItem>, rusqlite::Error> {
        match write {
            Write::Chat {
                kind,
                turn_id,
                payload,
            } => {
                let item = store::chat::append(tx, &self.id, kind, turn_id.as_deref(), payload)?;
                return Ok(Some(item));
            }
            Write::TurnRunning(turn) => store::turns::set_running(tx, turn)?,
            Write::TurnFinished { turn_id, outcome } => {
                store::turns::finish(tx, turn_id, outcome.as_str())?
            }
            Write::Delivery {
                turn_id,
                session_id,
                at,
            } => store::deliveries::record(tx, &self.id, turn_id, session_id, *at)?,
            Write::DeliveryDone(turn) => store::deliveries::forget(tx, &self.id, turn)?,
            Write::Session(s) => store::bots::set_session(tx, &self.id, s.as_deref())?,
            Write::LastError(e) => store::bots::set_last_error(tx, &self.id, e)?,
            Write::Failed(failed) => store::bots::set_failed(tx, &self.id, *failed)?,
            Write::Setting(Setting::PermissionMode(m)) => {
                store::bots::set_permission_mode(tx, &self.id, m)?
            }
            Write::Setting(Setting::Model(m)) => store::bots::set_model(tx, &self.id, m)?,
            Write::Parked(parked) => store::bots::set_parked(tx, &self.id, *parked)?,
            Write::Process { identity, root } => store::processes::insert(
                tx,
                &self.id,
                identity,
                if *root { "root" } else { "descendant" },
            )?,
            Write::ProcessesReleased => store::processes::clear(tx, &self.id)?,
            Write::StopVerdict(v) => store::bots::set_stop_verdict(tx, &self.id, v)?,
            Write::BotDeleted => {
                store::bots::delete(tx, &self.id)?;
            }
            Write::TurnRequeued(turn) => store::turns::requeue(tx, turn)?,
            Write::TurnRedo { turn_id, cut } => store::turns::redo(tx, turn_id, cut.as_ref())?,
            Write::TurnUncut(turn) => store::turns::uncut(tx, turn)?,
            Write::TurnContinued(turn, text) => store::turns::requeue_to_continue(tx, turn, text)?,
            Write::Limit(limit) => store::bots::set_limit(
                tx,
                &self.id,
                limit.as_ref().map(|(k, at)| (k.as_str(), *at)),
            )?,
            Write::Spend {
                spend,
                conversation,
            } => {
                store::bots::add_spend(
                    tx,
                    &self.id,
                    spend,
                    conversation.as_ref().map(|(s, t)| (s.as_str(), *t)),
                )?;
                // The ledger (issue 46), in the same transaction: kept after the bot is deleted.
                // The CLI told a cost when it told the conversation's total (Codex never does).
                let day = crate::time::utc_day(std::time::SystemTime::now());
                let told = conversation.is_some() || spend.cost_nanos > 0;
                store::spend::add(tx, &self.id, &day, spend, told)?;
            }
            Write::Budget(budget) => store::bots::set_budget(tx, &self.id, *budget)?,
            Write::AttemptCut(cut) => store::bots::set_attempt_cut(tx, &self.id, cut.as_ref())?,
        }
        Ok(None)
    }

    /// One publication of a commit, once it is durable: `items` are the chat items it appended,
    /// in order.
    /// `n` messages wait (`QueuedMessages`), said when it changed.
    pub(super) fn show_queued(&self, n: u32) {
        let changed = self.view.read().queued != n;
        if changed {
            self.update(vec![Property::QueuedMessages], |v| v.queued = n);
        }
    }

    pub(super) fn publish(&self, p: &Publish, items: &[store::ChatItem]) {
        match p {
            Publish::Item(n) => {
                if let Some(item) = items.get(*n) {
                    self.publish_item(item);
                }
            }
            Publish::SessionId(s) => {
                tracing::info!(bot_id = %self.id, session_id = ?s, "session recorded");
                let s = s.clone();
                self.update(vec![Property::SessionId], |v| v.record.session_id = s);
            }
            Publish::LastError(e) => {
                let e = e.clone();
                self.update(vec![Property::LastError], |v| v.record.last_error = e);
            }
            Publish::State(state) => {
                let state = *state;
                self.update(vec![Property::State], |v| v.state = state);
            }
            Publish::Setting(Setting::PermissionMode(m)) => {
                let m = m.clone();
                self.update(vec![Property::PermissionMode], |v| {
                    v.record.permission_mode = m
                });
            }
            Publish::Setting(Setting::Model(m)) => {
                let m = m.clone();
                self.update(vec![Property::Model], |v| v.record.model = m);
            }
            Publish::PermissionRequested {
                request_id,
                tool,
                input,
            } => {
                let _ = self
                    .shared
                    .publisher
                    .send(Publication::PermissionRequested {
                        bot_id: self.id.clone(),
                        request_id: request_id.clone(),
                        tool: tool.clone(),
                        input: input.clone(),
                    });
            }
            Publish::Parked(parked) => {
                let parked = *parked;
                self.update(vec![], |v| v.record.parked = parked);
            }
            Publish::StopVerdict { verdict, proof } => {
                let (verdict, proof) = (verdict.clone(), proof.clone());
                self.update(vec![Property::StopVerdict, Property::StopProof], |v| {
                    v.stop_verdict = verdict;
                    v.stop_proof = proof;
                });
            }
            Publish::Spend(spend) => {
                let spend = *spend;
                self.update(
                    vec![
                        Property::CostUsd,
                        Property::InputTokens,
                        Property::OutputTokens,
                    ],
                    |v| v.record.spend = v.record.spend.plus(spend),
                );
            }
            Publish::Budget(budget) => {
                let budget = *budget;
                self.update(vec![Property::BudgetUsd], |v| v.record.budget = budget);
            }
            Publish::Limit(limit) => {
                let limit = limit.clone();
                self.update(vec![Property::LimitKind, Property::LimitResetsAt], |v| {
                    v.record.limit = limit
                });
            }
            Publish::BotRemoved => {
                let _ = self.shared.publisher.send(Publication::BotRemoved {
                    bot_id: self.id.clone(),
                });
            }
            Publish::TurnFinished { turn_id, outcome } => {
                self.publish_turn(turn_id, outcome.as_str())
            }
        }
    }
}

impl Actor {
    /// `f` on the prompt book, under the lock clients answer through.
    pub(super) fn with_prompts<R>(
        &self,
        f: impl FnOnce(&mut crate::supervisor::PromptBook) -> R,
    ) -> R {
        let mut book = self
            .shared
            .prompts
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        f(&mut book)
    }

    /// Every open request is closed as denied by botvisord, with `message` in the chat: when the
    /// agent stops, or when its turn ends (an interrupt) while it was asking
    /// ([`prompts::close_all`]).
    pub(super) fn close_open_prompts(&mut self, message: &str) {
        let effects = self.with_prompts(|book| prompts::close_all(book, message));
        self.apply(effects);
    }
}
