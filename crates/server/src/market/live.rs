//! What this instance last wrote of the live negotiations: each pending bid its moves made, with
//! the thread and listing it was made on, and the listings it last read or sold from. A move
//! without locks decides on these instead of reading them again, and its statement's
//! compare-and-set covers everything the decision used (the bid still PENDING and within its
//! deadline, the thread unchanged since, the listing's terms the same): a stale entry (another
//! instance moved first, the seller changed the listing) costs the move a retry under locks,
//! which decides on current rows, and never makes a move the database would not have allowed.
//!
//! A pending bid's entry is used once: whatever happens to the bid next makes another pending
//! bid or ends the thread. Both maps are bounded, the oldest entries going first, and a decision
//! made from memory that refuses the move is made again from the database (the refusal may
//! come from what changed), so memory only ever saves a read.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

use chrono::{DateTime, SubsecRound, Utc};
use sqlx::types::Json;
use uuid::Uuid;

use crate::db::rows::BidContext;
use crate::db::{Bid, Listing, Thread};

/// Pending bids and listings this instance wrote last, up to `capacity` of each.
#[derive(Debug)]
pub struct Live {
    capacity: usize,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    pending: Bounded<Pending>,
    listings: Bounded<Arc<Listing>>,
}

impl State {
    /// The version of the listing this instance knows, if it is at least as new as `listing`.
    fn known(&self, listing: &Listing) -> Option<Arc<Listing>> {
        self.listings.map.get(&listing.id).filter(|known| known.updated_at >= listing.updated_at).cloned()
    }

    /// Removes the pending bid's entry if `agent` is party to its thread.
    fn remove_for(&mut self, bid_id: Uuid, agent: Uuid) -> Option<Pending> {
        let pending = self.pending.map.get(&bid_id)?;
        if agent != pending.thread.buyer_id && agent != pending.thread.seller_id {
            return None;
        }
        self.pending.map.remove(&bid_id)
    }
}

/// A pending bid as its move wrote it.
#[derive(Debug)]
struct Pending {
    bid: Bid,
    thread: Thread,
    listing: Arc<Listing>,
    /// The amount of the bid it answered.
    parent_amount: Option<i64>,
}

impl Live {
    /// Up to `capacity` pending bids and as many listings; none at all for 0.
    pub fn new(capacity: usize) -> Live {
        Live { capacity, state: Mutex::new(State::default()) }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Remembers the pending bid a move just made, with its thread as stored and the listing the
    /// move was decided on.
    pub fn made_pending(&self, bid: &Bid, thread: &Thread, listing: &Listing, parent_amount: Option<i64>) {
        if self.capacity == 0 {
            return;
        }
        let mut state = self.state();
        let listing = state.known(listing).unwrap_or_else(|| Arc::new(listing.clone()));
        let pending = Pending { bid: bid.clone(), thread: thread.clone(), listing, parent_amount };
        state.pending.insert(self.capacity, bid.id, pending);
    }

    /// Takes what a move on the pending bid decides on, if this instance made the bid and `agent`
    /// is party to its thread; the entry is gone either way once a party asked.
    pub fn take(&self, bid_id: Uuid, agent: Uuid) -> Option<BidContext> {
        let mut state = self.state();
        let pending = state.remove_for(bid_id, agent)?;
        // The newest version of the listing this instance knows.
        let listing = state.known(&pending.listing).unwrap_or(pending.listing);
        drop(state);
        let db_now = clock(&[pending.bid.updated_at, pending.thread.updated_at]);
        Some(BidContext {
            bid: Json(pending.bid),
            thread: Json(pending.thread),
            listing: Json(Arc::unwrap_or_clone(listing)),
            parent_amount: pending.parent_amount,
            db_now,
        })
    }

    /// Remembers the listing as read or written, unless this version or a newer one is known.
    pub fn listing_seen(&self, listing: &Listing) {
        if self.capacity == 0 {
            return;
        }
        let mut state = self.state();
        if state.known(listing).is_some() {
            return;
        }
        state.listings.insert(self.capacity, listing.id, Arc::new(listing.clone()));
    }

    /// The listing as this instance last saw it.
    pub fn listing(&self, listing_id: Uuid) -> Option<Listing> {
        self.state().listings.map.get(&listing_id).map(|listing| Listing::clone(listing))
    }

    /// Forgets the listing: a move decided on it found it changed.
    pub fn forget_listing(&self, listing_id: Uuid) {
        self.state().listings.map.remove(&listing_id);
    }
}

/// The time a move decided from memory is made at: this instance's clock, to the database's
/// precision, and never before the rows it follows.
pub fn clock(after: &[DateTime<Utc>]) -> DateTime<Utc> {
    let now = Utc::now().trunc_subsecs(6);
    after.iter().copied().fold(now, DateTime::max)
}

/// A map that keeps its newest `capacity` entries.
#[derive(Debug)]
struct Bounded<V> {
    map: HashMap<Uuid, V>,
    /// Keys in the order they came; may hold keys already removed, up to twice the capacity.
    order: VecDeque<Uuid>,
}

impl<V> Default for Bounded<V> {
    fn default() -> Self {
        Bounded { map: HashMap::new(), order: VecDeque::new() }
    }
}

impl<V> Bounded<V> {
    fn insert(&mut self, capacity: usize, key: Uuid, value: V) {
        if self.map.insert(key, value).is_none() {
            self.order.push_back(key);
        }
        while self.map.len() > capacity {
            let Some(oldest) = self.order.pop_front() else { break };
            self.map.remove(&oldest);
        }
        if self.order.len() > 2 * capacity {
            let mut seen = HashSet::with_capacity(self.map.len());
            let map = &self.map;
            self.order.retain(|key| map.contains_key(key) && seen.insert(*key));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bounded_map_keeps_its_newest_entries_and_its_order_stays_bounded() {
        let mut bounded = Bounded::default();
        let keys: Vec<Uuid> = (0..10).map(|_| Uuid::now_v7()).collect();
        for (value, key) in keys.iter().enumerate() {
            bounded.insert(4, *key, value);
        }
        assert_eq!(bounded.map.len(), 4);
        for key in &keys[6..] {
            assert!(bounded.map.contains_key(key));
        }
        // Entries taken out and others put in, many times over: the order never outgrows twice
        // the capacity.
        for round in 0..1_000 {
            let key = Uuid::now_v7();
            bounded.insert(4, key, round);
            bounded.map.remove(&key);
            bounded.insert(4, keys[9], round);
            assert!(bounded.order.len() <= 8, "{}", bounded.order.len());
            assert!(bounded.map.len() <= 4);
        }
        assert_eq!(bounded.map.get(&keys[9]), Some(&999));
    }

    #[test]
    fn the_clock_never_goes_before_the_rows_it_follows() {
        let later = Utc::now() + chrono::Duration::seconds(5);
        assert_eq!(clock(&[later]), later);
        let now = clock(&[]);
        assert_eq!(now, now.trunc_subsecs(6));
    }
}
