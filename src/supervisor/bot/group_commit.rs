//! Group commit (issue 31): the chat items of stdout lines that arrive together are committed in
//! one transaction, then published in the order they were made (design rule 1 holds: nothing is
//! published before its commit). A CLI that prints a burst of messages then costs one commit per
//! burst instead of one per line, and a line that arrives alone is committed as before.
//!
//! Only what cannot change what the core reads back is held for the group: a commit of chat
//! items alone, and the streamed text around them (`PartialText`, `TextDelta`). Any other effect
//! (a turn's end, a session recorded, a state, a prompt, a stop, a wait for a commit) first
//! commits and publishes what is held, then is carried out as before, and ends the group: what
//! follows it is read as before, one line at a time.

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

/// Whether `effect` may wait for the group's commit ([`Held`]): a commit that writes and
/// publishes chat items only, or streamed text.
fn holdable(effect: &Effect) -> bool {
    match effect {
        Effect::Commit { writes, publish } => {
            writes.iter().all(|w| matches!(w, Write::Chat { .. }))
                && publish.iter().all(|p| matches!(p, Publish::Item(_)))
        }
        Effect::Stream(_) => true,
        _ => false,
    }
}

impl Actor {
    /// Carries out `effect`, or holds it for the group's commit while a group is read.
    pub(super) fn group_or_apply(&mut self, effect: Effect) {
        if self.group.open && holdable(&effect) {
            self.group.held.push(match effect {
                Effect::Commit { writes, publish } => Held::Items { writes, publish },
                Effect::Stream(s) => Held::Stream(s),
                _ => unreachable!("holdable"),
            });
            return;
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
            }
        }
    }
}
