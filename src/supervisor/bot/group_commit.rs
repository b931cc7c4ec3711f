//! Group commit (issue 31): the chat items of stdout lines that arrive together are committed in
//! one transaction, then published in the order they were made (design rule 1 holds: nothing is
//! published before its commit). A CLI that prints a burst of messages then costs one commit per
//! burst instead of one per line, and a line that arrives alone is committed as before.
//!
//! Only what cannot change what the core reads back is held for the group: a commit of chat
//! items, of a turn that began and of its delivery done (the CLI's replay of the message, issue
//! 50: it came just before the first answer and took a commit of its own, ahead of it), the
//! streamed text around them (`PartialText`, `TextDelta`) and the count of queued messages. The
//! look at the agent's descendants when a turn begins is taken at once and does not end the
//! group. Any other effect (a turn's end, a session recorded, a state, a prompt, a stop, a wait
//! for a commit) first commits and publishes what is held, then is carried out as before, and
//! ends the group: what follows it is read as before, one line at a time.

use super::Actor;
use crate::supervisor::core::Streamed;
use crate::supervisor::core::{Effect, Publish, Write};

/// The most stdout lines read into one group: the actor's commands wait meanwhile.
pub(super) const MAX_GROUP_LINES: usize = 256;

/// What a group holds until its commit, in the order the core asked for it.
#[derive(Debug)]
pub(super) enum Held {
    /// A commit of chat items and their `ChatItemAdded`.
    Items {
        writes: Vec<Write>,
        publish: Vec<Publish>,
    },
    /// Streamed text, carried out after the commits before it.
    Stream(Streamed),
    /// The count of queued messages, shown after the commits before it.
    Queued(u32),
}

/// The group being read: on while the actor reads lines that arrived together.
#[derive(Debug, Default)]
pub(super) struct Group {
    /// Lines are being read into the group.
    pub(super) open: bool,
    /// Something other than chat items came: the group ends after this line.
    pub(super) ended: bool,
    /// What waits for the group's commit.
    pub(super) held: Vec<Held>,
    /// When the group's first line was taken (the bench's profile, `crate::profile`): set
    /// while its items are committed and published.
    pub(super) began: Option<crate::profile::Mark>,
}

/// What an effect is to the group being read.
#[derive(Debug, PartialEq)]
enum Fit {
    /// It waits for the group's commit ([`Held`]).
    Held,
    /// It is carried out at once and the group goes on: it neither reads nor writes the store
    /// nor publishes.
    AtOnce,
    /// It ends the group.
    Ends,
}

/// What `effect` is to a group ([`Fit`]): a commit that writes chat items, a turn running and
/// its delivery done, and publishes chat items only, streamed text and the queued count are
/// held; the look at the agent's descendants as a turn begins is taken at once; the rest ends
/// the group.
fn fit(effect: &Effect) -> Fit {
    match effect {
        Effect::Commit { writes, publish }
            if writes.iter().all(|w| {
                matches!(
                    w,
                    Write::Chat { .. } | Write::TurnRunning(_) | Write::DeliveryDone(_)
                )
            }) && publish.iter().all(|p| matches!(p, Publish::Item(_))) =>
        {
            Fit::Held
        }
        Effect::Stream(_) | Effect::Queued(_) => Fit::Held,
        Effect::TurnBegan | Effect::LookBeforeTurn => Fit::AtOnce,
        _ => Fit::Ends,
    }
}

impl Actor {
    /// Carries out `effect`, or holds it for the group's commit while a group is read.
    pub(super) fn group_or_apply(&mut self, effect: Effect) {
        match (self.group.open, fit(&effect)) {
            (true, Fit::Held) => {
                self.group.held.push(match effect {
                    Effect::Commit { writes, publish } => Held::Items { writes, publish },
                    Effect::Stream(s) => Held::Stream(s),
                    Effect::Queued(n) => Held::Queued(n),
                    _ => unreachable!("held"),
                });
                return;
            }
            (true, Fit::AtOnce) => {
                self.apply(vec![effect]);
                return;
            }
            _ => {}
        }
        if self.group.open {
            self.group.ended = true;
        }
        self.commit_group();
        self.apply(vec![effect]);
    }

    /// Commits what the group holds in one transaction and publishes it in order. A group that
    /// cannot be committed whole is committed one commit at a time, as it would have been
    /// without the group, so that one write the store refuses takes no other line's item with
    /// it.
    pub(super) fn commit_group(&mut self) {
        let held = std::mem::take(&mut self.group.held);
        let commits = held
            .iter()
            .filter(|h| matches!(h, Held::Items { .. }))
            .count();
        if commits > 1 {
            let done = self.shared.store.tx_then(
                |tx| {
                    let mut items = Vec::with_capacity(commits);
                    for h in &held {
                        if let Held::Items { writes, .. } = h {
                            let mut these = Vec::with_capacity(writes.len());
                            for write in writes {
                                these.extend(self.write(tx, write)?);
                            }
                            items.push(these);
                        }
                    }
                    Ok(items)
                },
                // Published still holding the connection, as `Actor::commit` does: in commit
                // order with every other writer of this database.
                |items| {
                    let mut items = items.iter();
                    for h in &held {
                        match h {
                            Held::Items { publish, .. } => {
                                let these = items.next().map_or(&[][..], Vec::as_slice);
                                for p in publish {
                                    self.publish(p, these);
                                }
                            }
                            Held::Stream(s) => self.stream(s.clone()),
                            Held::Queued(n) => self.show_queued(*n),
                        }
                    }
                },
            );
            match done {
                Ok(_) => {
                    tracing::debug!(bot_id = %self.id, commits, "committed a group of lines");
                    self.last_commit_ok = true;
                    return;
                }
                Err(e) => tracing::warn!(
                    bot_id = %self.id, error = %e, commits,
                    "cannot commit the group of lines; committing them one by one"
                ),
            }
        }
        for h in held {
            match h {
                Held::Items { writes, publish } => {
                    self.apply(vec![Effect::Commit { writes, publish }]);
                }
                Held::Stream(s) => self.stream(s),
                Held::Queued(n) => self.show_queued(n),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::supervisor::State;

    /// What the core asks when the CLI replays the message in flight of a conversation already
    /// recorded (`core::turns::Turns::replayed`, `core::events`): none of it ends a group, so
    /// the first answer read with the replay is committed with it (issue 50).
    #[test]
    fn a_replay_of_a_recorded_conversation_does_not_end_the_group() {
        let replay = [
            Effect::TurnBegan,
            Effect::Commit {
                writes: vec![
                    Write::TurnRunning("t".into()),
                    Write::DeliveryDone("t".into()),
                ],
                publish: vec![],
            },
            Effect::Queued(0),
        ];
        let fits: Vec<Fit> = replay.iter().map(fit).collect();
        assert_eq!(fits, [Fit::AtOnce, Fit::Held, Fit::Held]);
    }

    #[test]
    fn what_the_core_reads_back_or_a_client_must_see_in_order_ends_the_group() {
        let session = Effect::Commit {
            writes: vec![
                Write::TurnRunning("t".into()),
                Write::Session(Some("s".into())),
            ],
            publish: vec![Publish::SessionId(Some("s".into()))],
        };
        assert_eq!(fit(&session), Fit::Ends);
        assert_eq!(fit(&Effect::State(State::Busy)), Fit::Ends);
        let item = Effect::Commit {
            writes: vec![Write::Chat {
                kind: "assistant".into(),
                turn_id: Some("t".into()),
                payload: "{}".into(),
            }],
            publish: vec![Publish::Item(0)],
        };
        assert_eq!(fit(&item), Fit::Held);
    }
}
