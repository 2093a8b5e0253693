//! The rows of the negotiation as stored: threads, bids, and what a move on a bid reads of them.
//! What agents are shown of a row is made outside `db/` (`crate::views`).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::FromRow;
use sqlx::types::Json;
use uuid::Uuid;

use super::Listing;
use haggle_api as api;
use haggle_domain::bid;
use haggle_domain::money::Amount;
use haggle_domain::{BidStatus, Currency, Party, Reason, ThreadKind, ThreadStatus};

/// A thread as stored. Read back through `row_to_json`, so that its text columns come back as
/// their enums; shown to agents as [`api::Thread`] through [`Thread::at`].
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Thread {
    pub id: Uuid,
    pub listing_id: Uuid,
    pub buyer_id: Uuid,
    pub seller_id: Uuid,
    pub status: ThreadStatus,
    pub rounds: i32,
    pub last_bid_id: Uuid,
    pub expires_at: Option<DateTime<Utc>>,
    pub closed_reason: Option<Reason>,
    /// When the thread was marked as deadlocked, with the mediator's suggestion and the
    /// parties that agreed to it.
    #[serde(default)]
    pub deadlock_at: Option<DateTime<Utc>>,
    #[serde(default)]
    pub mediation: Option<api::Suggestion>,
    #[serde(default)]
    pub mediation_agreed: Vec<Party>,
    /// What it negotiates, and the order it negotiates on (none for a price).
    #[serde(default)]
    pub kind: ThreadKind,
    #[serde(default)]
    pub order_id: Option<Uuid>,
    /// Who made the first bid: the buyer on a listing, either party on an order.
    #[serde(default = "buyer")]
    pub opened_by: Party,
    /// A refund that found no agreement, sent to the operator, and the operator's decision.
    #[serde(default)]
    pub escalated_at: Option<DateTime<Utc>>,
    #[serde(default)]
    pub escalated_by: Option<Uuid>,
    #[serde(default)]
    pub decided_amount: Option<i64>,
    #[serde(default)]
    pub decision_note: Option<String>,
    #[serde(default)]
    pub decided_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl Thread {
    /// A new thread as its opening `bid` makes it: ACTIVE in round 1, of the bid's kind, opened
    /// by its author, between `buyer_id` and `seller_id` on `listing_id` (and on `order_id` for
    /// an order's negotiation).
    pub fn opened_with(bid: &Bid, listing_id: Uuid, buyer_id: Uuid, seller_id: Uuid, order_id: Option<Uuid>) -> Thread {
        Thread {
            id: bid.thread_id,
            listing_id,
            buyer_id,
            seller_id,
            status: ThreadStatus::Active,
            rounds: 1,
            last_bid_id: bid.id,
            expires_at: Some(bid.expires_at),
            closed_reason: None,
            deadlock_at: None,
            mediation: None,
            mediation_agreed: Vec::new(),
            kind: bid.kind,
            order_id,
            opened_by: bid.author,
            escalated_at: None,
            escalated_by: None,
            decided_amount: None,
            decision_note: None,
            decided_at: None,
            created_at: bid.created_at,
            updated_at: bid.created_at,
        }
    }
}

/// A bid as stored (and as a move's statement reads the bid it writes). Shown to agents as
/// [`api::Bid`], as stored or, through [`Bid::at`], as it truly is at a moment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bid {
    pub id: Uuid,
    pub thread_id: Uuid,
    pub author: Party,
    pub author_id: Uuid,
    /// Its thread's kind.
    #[serde(default)]
    pub kind: ThreadKind,
    /// Minor units; a cancellation names none, stored as NULL and read as 0.
    #[serde(deserialize_with = "absent_as_zero")]
    pub amount: i64,
    pub currency: Currency,
    pub message: Option<String>,
    pub terms: Option<serde_json::Value>,
    #[serde(rename = "final")]
    pub is_final: bool,
    pub status: BidStatus,
    pub reason: Option<Reason>,
    pub parent_bid_id: Option<Uuid>,
    pub round: i32,
    pub expires_at: DateTime<Utc>,
    pub responded_at: Option<DateTime<Utc>>,
    /// The approval the bid was made under (SPEC §10), as stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<serde_json::Value>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

fn buyer() -> Party {
    Party::Buyer
}

/// A bid's amount as stored: NULL (a cancellation's) is read as 0.
fn absent_as_zero<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<i64, D::Error> {
    Option::<i64>::deserialize(deserializer).map(Option::unwrap_or_default)
}

/// Everything a bid action decides on, read with the thread locked or, for a single-statement
/// move, without locks (the move's compare-and-set then refuses anything that changed since):
/// the rows as read, from which a move also works out the rows it will write (and their events).
///
/// The bid's columns may be one version old if another action committed while this one waited
/// for the thread; the compare-and-set on the bid's status then refuses the write.
#[derive(Debug, Clone, FromRow)]
pub struct BidContext {
    pub bid: Json<Bid>,
    pub thread: Json<Thread>,
    pub listing: Json<Listing>,
    /// The amount of the bid this one answered: the responder's own previous position.
    pub parent_amount: Option<i64>,
    pub db_now: DateTime<Utc>,
}

impl BidContext {
    /// The bid as the state machine sees it. A bid at or past the listing's round limit is final
    /// even if the seller lowered `max_rounds` after it was made.
    pub fn state(&self) -> bid::BidState {
        bid::BidState {
            status: self.bid.status,
            author: self.bid.author,
            is_final: self.bid.is_final || self.bid.round >= self.listing.max_rounds,
            expires_at: self.bid.expires_at,
        }
    }

    pub fn party_of(&self, agent_id: Uuid) -> Option<Party> {
        if agent_id == self.thread.buyer_id {
            Some(Party::Buyer)
        } else if agent_id == self.thread.seller_id {
            Some(Party::Seller)
        } else {
            None
        }
    }
}

/// The columns of a [`BidContext`], over the bid `b`, its thread `t` and listing `l`, and the
/// bid it answered, `p` (joined on the left). Its clock is the time of the read, not of its
/// transaction's start: a move made after a lock wait, or after other moves in the same
/// transaction (two policies answering each other), is stamped with the time it was decided at.
macro_rules! bid_context_columns {
    () => {
        "row_to_json(b) AS bid, row_to_json(t) AS thread, row_to_json(l) AS listing,
         p.amount AS parent_amount, clock_timestamp() AS db_now"
    };
}

pub(crate) use bid_context_columns;

/// The rows [`bid_context_columns`] reads: the bid `b`, its thread `t` and listing `l`, and the
/// bid it answered, `p`.
macro_rules! bid_context_tables {
    () => {
        "FROM bids b
         JOIN threads t ON t.id = b.thread_id
         JOIN listings l ON l.id = t.listing_id
         LEFT JOIN bids p ON p.id = b.parent_bid_id"
    };
}

pub(crate) use bid_context_tables;

/// Whether the agent `$agent` is the thread `t`'s buyer or seller, as a read that finds the
/// thread through its bid says it. Written as a `CASE`, not `$agent IN (t.buyer_id,
/// t.seller_id)`: PostgreSQL estimates that `OR` of two equalities as selective enough to scan
/// `threads` in full rather than look the thread up by its key, whenever it plans on a table it
/// has no statistics for, and a plan made on an empty table stays cached on the connection as
/// the table grows (with autovacuum off, every W3 negotiation took longer than the one before:
/// BENCHMARKS.md, "Statements that scanned threads"). The `CASE` leaves it nothing to estimate.
macro_rules! party_of_thread {
    ($agent:literal) => {
        concat!("CASE WHEN t.buyer_id = ", $agent, " THEN true ELSE t.seller_id = ", $agent, " END")
    };
}

pub(crate) use party_of_thread;

/// A bid's status as stored, with its deadline and the database's clock as it was read: what
/// the domain decides an expiry on.
#[derive(Debug, FromRow)]
pub struct BidDeadline {
    pub bid_id: Uuid,
    #[sqlx(try_from = "String")]
    pub status: BidStatus,
    pub expires_at: DateTime<Utc>,
    pub db_now: DateTime<Utc>,
}

/// A bid to be made: its amount as validated, in its currency, until it becomes the row the
/// move's statement binds.
pub struct NewBid<'a> {
    pub id: Uuid,
    pub author_id: Uuid,
    pub amount: Amount,
    pub currency: Currency,
    pub message: Option<&'a str>,
    pub terms: Option<&'a serde_json::Value>,
    pub is_final: bool,
    pub expires_in: i32,
}

impl NewBid<'_> {
    /// The deadline of a bid made at `now`.
    pub fn expires_at(&self, now: DateTime<Utc>) -> DateTime<Utc> {
        now + chrono::Duration::seconds(self.expires_in.into())
    }

    /// The row this bid is stored as when it is made at `now` as the pending bid of `round`.
    pub fn row(&self, thread_id: Uuid, parent_bid_id: Option<Uuid>, round: i32, now: DateTime<Utc>) -> Bid {
        Bid {
            id: self.id,
            thread_id,
            author: Party::author_of_round(round),
            author_id: self.author_id,
            kind: ThreadKind::Price,
            amount: self.amount.minor_units(),
            currency: self.currency,
            message: self.message.map(str::to_owned),
            terms: self.terms.cloned(),
            is_final: self.is_final,
            status: BidStatus::Pending,
            reason: None,
            parent_bid_id,
            round,
            expires_at: self.expires_at(now),
            responded_at: None,
            approval: None,
            created_at: now,
            updated_at: now,
        }
    }
}
