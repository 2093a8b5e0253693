//! What agents are shown of the rows `db/` reads: each row's API view (`haggle_api`), made here
//! and nowhere else, so that the database layer knows nothing of the wire.

use chrono::{DateTime, Utc};

use crate::db::policies::StoredPolicy;
use crate::db::{Bid, Thread};
use haggle_api as api;
use haggle_domain::{Reason, bid, thread};

impl Thread {
    /// The deadlock mark as agents see it.
    pub fn deadlock(&self) -> Option<api::Deadlock> {
        let (detected_at, suggestion) = (self.deadlock_at?, self.mediation.clone()?);
        Some(api::Deadlock { detected_at, suggestion, agreed: self.mediation_agreed.clone() })
    }

    /// The thread as it truly is at `now`, before the sweeper has caught up, with whose turn it
    /// is: what agents are shown.
    pub fn at(&self, now: DateTime<Utc>) -> api::Thread {
        let mut view = api::Thread {
            id: self.id,
            listing_id: self.listing_id,
            buyer_id: self.buyer_id,
            seller_id: self.seller_id,
            status: self.status,
            rounds: self.rounds,
            turn: None,
            last_bid_id: self.last_bid_id,
            expires_at: self.expires_at,
            closed_reason: self.closed_reason,
            deadlock: self.deadlock().map(Box::new),
            created_at: self.created_at,
            updated_at: self.updated_at,
        };
        let effective = thread::effective_status(self.status, self.expires_at, now);
        if effective != self.status {
            // Exactly what the sweeper will write.
            view.status = effective;
            view.closed_reason = Some(Reason::Expired);
            view.expires_at = None;
        }
        view.turn = thread::turn(view.status, view.rounds);
        view
    }
}

impl Bid {
    /// The bid as it truly is at `now`: a PENDING bid past its time reads EXPIRED.
    pub fn at(&self, now: DateTime<Utc>) -> api::Bid {
        let mut view = api::Bid::from(self.clone());
        let effective = bid::effective_status(self.status, self.expires_at, now);
        if effective != self.status {
            // Exactly what the sweeper will write: a bid expires at its deadline.
            view.status = effective;
            view.reason = Some(Reason::Expired);
            view.responded_at = Some(self.expires_at);
        }
        view
    }
}

impl From<Bid> for api::Bid {
    fn from(bid: Bid) -> api::Bid {
        api::Bid {
            id: bid.id,
            thread_id: bid.thread_id,
            author: bid.author,
            author_id: bid.author_id,
            amount: bid.amount,
            currency: bid.currency,
            message: bid.message,
            terms: bid.terms,
            is_final: bid.is_final,
            status: bid.status,
            reason: bid.reason,
            parent_bid_id: bid.parent_bid_id,
            round: bid.round,
            expires_at: bid.expires_at,
            responded_at: bid.responded_at,
            created_at: bid.created_at,
            updated_at: bid.updated_at,
        }
    }
}

impl From<StoredPolicy> for api::StoredPolicy {
    fn from(row: StoredPolicy) -> api::StoredPolicy {
        api::StoredPolicy {
            scope: row.scope,
            role: row.role,
            listing_id: row.listing_id,
            thread_id: row.thread_id,
            policy: row.policy.0,
            created_at: row.created_at,
            updated_at: row.updated_at,
        }
    }
}
