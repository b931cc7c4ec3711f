//! A client's commands, applied in the order they arrived (design rule 7): queue, stop,
//! delete, shutdown, live settings, restart, leases, answers, interrupts.

use super::Actor;
use crate::supervisor::Command;
use crate::supervisor::core::Cmd;
use crate::supervisor::core::Input;
use crate::supervisor::core::stop::StopReason;

impl Actor {
    /// Returns false when the actor must end.
    pub(super) async fn on_command(&mut self, cmd: Command) -> bool {
        match cmd {
            Command::CredentialsChanged => {
                self.login_back().await;
                true
            }
            Command::EnvironmentChanged { changed } => {
                if self.limit_holds_login() {
                    self.login_back().await;
                } else if changed {
                    // (Unchanged, nothing the agent takes at a launch changed: it runs on.)
                    self.handle(Input::Command(Cmd::LaunchInputsChanged {
                        held_waits: true,
                    }));
                    self.stop_if_asked().await;
                }
                true
            }
            Command::Core(cmd) => {
                self.handle(Input::Command(cmd));
                self.stop_if_asked().await;
                true
            }
            Command::Queued {
                turn,
                promise,
                answered,
            } => {
                if let Some(answered) = answered {
                    // Its reply first: the client knows the turn id before it hears the turn.
                    let _ = tokio::time::timeout(crate::supervisor::ANSWER_WAIT, answered).await;
                }
                crate::profile::stamp("actor.queued", || format!("turn:{}", turn.id));
                self.promised = self.promised.max(promise);
                self.handle(Input::Command(Cmd::Queued(turn)));
                self.stop_if_asked().await;
                true
            }
            Command::Delete(removal) => {
                self.handle(Input::Command(Cmd::Delete));
                match removal {
                    None => self.stop_if_asked().await,
                    Some(removal) => {
                        // The worktree goes once the agent that works in it is stopped, before
                        // the bot's deletion is committed and its object goes.
                        if let Some(why) = self.stop_asked.take() {
                            let released =
                                self.stop_process(why).await.is_none_or(|v| v.released());
                            let record = self.record();
                            remove_worktree(&self.id, &record, &removal).await;
                            self.handle(Input::Stopped { why, released });
                        }
                    }
                }
                !self.ended
            }
            Command::HandOver(reply) => {
                if self.hand_over().await {
                    let _ = reply.send(());
                    return false;
                }
                self.handle(Input::Command(Cmd::Shutdown));
                self.stop_if_asked().await;
                let _ = reply.send(());
                !self.ended
            }
            Command::Shutdown(reply) => {
                self.handle(Input::Command(Cmd::Shutdown));
                self.stop_if_asked().await;
                let _ = reply.send(());
                !self.ended
            }
            Command::HoldersChanged { warm } => {
                let holders = self.shared.holder_count();
                self.handle(Input::Command(Cmd::Leases { holders, warm }));
                true
            }
            Command::MemoryPressure(reply) => {
                self.handle(Input::Command(Cmd::MemoryPressure));
                let stops = self.stop_asked == Some(StopReason::MemoryPressure);
                self.stop_if_asked().await;
                let _ = reply.send(stops);
                true
            }
        }
    }
}

/// Removes the bot's git worktree as `removal` says, after its agent was stopped: git's
/// own checks still hold (a worktree that became dirty since the call is kept without
/// `force`); a failure is named in the journal, the bot is deleted all the same.
async fn remove_worktree(
    id: &str,
    record: &crate::store::BotRecord,
    removal: &crate::supervisor::core::worktree::Removal,
) {
    let Some(w) = &record.worktree else {
        return;
    };
    match crate::worktree::remove(
        std::path::Path::new(&w.repo),
        std::path::Path::new(&record.cwd),
        &w.branch,
        removal,
    )
    .await
    {
        Ok(()) => tracing::info!(bot_id = %id, path = %record.cwd, "worktree removed"),
        Err(e) => {
            tracing::warn!(bot_id = %id, path = %record.cwd, error = %e, "worktree not removed")
        }
    }
}
