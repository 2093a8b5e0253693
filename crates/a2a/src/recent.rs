//! What this instance remembers of the negotiations its answers showed: each task's pending bid
//! as the latest answer about it left it, and the bid each recent message made its move on.
//!
//! A move that names no bid answers its task's pending bid. Reading the thread to find it was
//! a second request to the API for every such move, as costly as a third of the move itself;
//! the bid the last answer showed pending is most often still the one. When it is not (the other
//! side moved elsewhere: over REST, by a policy, on another instance; or the bid expired), the
//! API refuses the move on it as the rules refuse any move on an answered bid, and the move is
//! made again on the pending bid read from the thread. A message sent again is made on the bid
//! its first sending chose, under the same key, and so is answered once.

use std::collections::HashMap;
use std::sync::Mutex;

use uuid::Uuid;

/// How many tasks, and how many messages, are remembered; past that the memory starts over
/// (a forgotten task's pending bid is read from its thread).
const CAPACITY: usize = 65_536;

#[derive(Default)]
pub(crate) struct Recent {
    pending: Mutex<HashMap<Uuid, Uuid>>,
    moves: Mutex<HashMap<(Uuid, String), Chosen>>,
}

/// The bid a message's move was made on, and the idempotency key it was made under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Chosen {
    pub bid: Uuid,
    pub key: String,
}

impl Recent {
    /// The pending bid of `task` as the latest answer about it showed it.
    pub fn pending(&self, task: Uuid) -> Option<Uuid> {
        self.pending.lock().ok()?.get(&task).copied()
    }

    /// `task`'s pending bid is now `bid`, or it has none (`None`: it ended, or waits on nothing
    /// this memory knows).
    pub fn set_pending(&self, task: Uuid, bid: Option<Uuid>) {
        let Ok(mut pending) = self.pending.lock() else { return };
        match bid {
            Some(bid) => {
                if pending.len() >= CAPACITY && !pending.contains_key(&task) {
                    pending.clear();
                }
                pending.insert(task, bid);
            }
            None => {
                pending.remove(&task);
            }
        }
    }

    /// The bid and key `agent`'s message `message` was made with, if it was made here recently.
    pub fn chosen(&self, agent: Uuid, message: &str) -> Option<Chosen> {
        self.moves.lock().ok()?.get(&(agent, message.to_owned())).cloned()
    }

    pub fn set_chosen(&self, agent: Uuid, message: &str, chosen: Chosen) {
        let Ok(mut moves) = self.moves.lock() else { return };
        if moves.len() >= CAPACITY {
            moves.clear();
        }
        moves.insert((agent, message.to_owned()), chosen);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_ended_is_forgotten_and_a_message_remembered_per_agent() {
        let recent = Recent::default();
        let (task, bid, agent) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
        recent.set_pending(task, Some(bid));
        assert_eq!(recent.pending(task), Some(bid));
        recent.set_pending(task, None);
        assert_eq!(recent.pending(task), None);
        recent.set_chosen(agent, "m-1", Chosen { bid, key: "m-1".to_owned() });
        assert_eq!(recent.chosen(agent, "m-1").map(|chosen| chosen.bid), Some(bid));
        assert_eq!(recent.chosen(Uuid::now_v7(), "m-1"), None);
    }
}
