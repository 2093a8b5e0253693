//! Threads and bids: the persisted state machine.
//!
//! Locks are always taken in one order: listing, then thread, then bid. Bid actions that do
//! not touch the listing lock the thread first; every change of a bid is a compare-and-set on
//! `status = 'PENDING'`, so of two racing actions exactly one changes a row.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::types::Json;
use sqlx::{FromRow, PgConnection, PgExecutor, Postgres, QueryBuilder};
use uuid::Uuid;

use super::{Listing, Order, Page};
use crate::domain::bid::{self, Transition};
use crate::domain::thread;
use crate::domain::{BidStatus, Currency, ListingStatus, Party, Reason, ThreadStatus};

#[derive(Debug, Clone, PartialEq, Eq, FromRow, Serialize, Deserialize)]
pub struct Thread {
    pub id: Uuid,
    pub listing_id: Uuid,
    pub buyer_id: Uuid,
    pub seller_id: Uuid,
    #[sqlx(try_from = "String")]
    pub status: ThreadStatus,
    pub rounds: i32,
    /// Whose move it is, while the thread is live. Not stored: [`Thread::at`] works it out
    /// (a thread read back from the database has none until then).
    #[sqlx(skip)]
    #[serde(default)]
    pub turn: Option<Party>,
    pub last_bid_id: Uuid,
    pub expires_at: Option<DateTime<Utc>>,
    pub closed_reason: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl Thread {
    /// The thread as it truly is at `now`, before the sweeper has caught up.
    pub fn at(mut self, now: DateTime<Utc>) -> Thread {
        let effective = thread::effective_status(self.status, self.expires_at, now);
        if effective != self.status {
            // Exactly what the sweeper will write.
            self.status = effective;
            self.closed_reason = Some(Reason::Expired.as_str().to_owned());
            self.expires_at = None;
        }
        self.turn = thread::turn(self.status, self.rounds);
        self
    }
}

#[derive(Debug, Clone, PartialEq, Eq, FromRow, Serialize, Deserialize)]
pub struct Bid {
    pub id: Uuid,
    pub thread_id: Uuid,
    #[sqlx(try_from = "String")]
    pub author: Party,
    pub author_id: Uuid,
    pub amount: i64,
    #[sqlx(try_from = "String")]
    pub currency: Currency,
    pub message: Option<String>,
    pub terms: Option<serde_json::Value>,
    #[sqlx(rename = "final")]
    #[serde(rename = "final")]
    pub is_final: bool,
    #[sqlx(try_from = "String")]
    pub status: BidStatus,
    pub reason: Option<String>,
    pub parent_bid_id: Option<Uuid>,
    pub round: i32,
    pub expires_at: DateTime<Utc>,
    pub responded_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl Bid {
    /// The bid as it truly is at `now`: a PENDING bid past its time reads EXPIRED.
    pub fn at(mut self, now: DateTime<Utc>) -> Bid {
        let effective = bid::effective_status(self.status, self.expires_at, now);
        if effective != self.status {
            // Exactly what the sweeper will write: a bid expires at its deadline.
            self.status = effective;
            self.reason = Some(Reason::Expired.as_str().to_owned());
            self.responded_at = Some(self.expires_at);
        }
        self
    }
}

macro_rules! bid_columns {
    ($prefix:literal) => {
        concat!(
            $prefix,
            "id, ",
            $prefix,
            "thread_id, ",
            $prefix,
            "author, ",
            $prefix,
            "author_id, ",
            $prefix,
            "amount, ",
            $prefix,
            "currency, ",
            $prefix,
            "message, ",
            $prefix,
            "terms, ",
            $prefix,
            "final, ",
            $prefix,
            "status, ",
            $prefix,
            "reason, ",
            $prefix,
            "parent_bid_id, ",
            $prefix,
            "round, ",
            $prefix,
            "expires_at, ",
            $prefix,
            "responded_at, ",
            $prefix,
            "created_at, ",
            $prefix,
            "updated_at"
        )
    };
}

macro_rules! thread_columns {
    ($prefix:literal) => {
        concat!(
            $prefix,
            "id, ",
            $prefix,
            "listing_id, ",
            $prefix,
            "buyer_id, ",
            $prefix,
            "seller_id, ",
            $prefix,
            "status, ",
            $prefix,
            "rounds, ",
            $prefix,
            "last_bid_id, ",
            $prefix,
            "expires_at, ",
            $prefix,
            "closed_reason, ",
            $prefix,
            "created_at, ",
            $prefix,
            "updated_at"
        )
    };
}

/// A write that changed a bid and its thread together.
#[derive(Debug, FromRow)]
struct BidAndThreadRow {
    bid: Json<Bid>,
    thread: Json<Thread>,
}

/// Everything a bid action decides on, read with the thread locked.
///
/// The bid's columns may be one version old if another action committed while this one waited
/// for the thread; the compare-and-set on the bid's status then refuses the write.
#[derive(Debug, Clone, FromRow)]
pub struct BidContext {
    pub thread_id: Uuid,
    #[sqlx(try_from = "String")]
    pub thread_status: ThreadStatus,
    pub listing_id: Uuid,
    pub buyer_id: Uuid,
    pub seller_id: Uuid,
    #[sqlx(try_from = "String")]
    pub status: BidStatus,
    #[sqlx(try_from = "String")]
    pub author: Party,
    #[sqlx(rename = "final")]
    pub is_final: bool,
    pub expires_at: DateTime<Utc>,
    pub amount: i64,
    #[sqlx(try_from = "String")]
    pub currency: Currency,
    pub round: i32,
    pub terms: Option<serde_json::Value>,
    /// The amount of the bid this one answered: the responder's own previous position.
    pub parent_amount: Option<i64>,
    pub ask_amount: i64,
    pub max_rounds: i32,
    pub bid_ttl_seconds: i32,
    pub db_now: DateTime<Utc>,
}

impl BidContext {
    /// The bid as the state machine sees it. A bid at or past the listing's round limit is final
    /// even if the seller lowered `max_rounds` after it was made.
    pub fn state(&self) -> bid::BidState {
        bid::BidState {
            status: self.status,
            author: self.author,
            is_final: self.is_final || self.round >= self.max_rounds,
            expires_at: self.expires_at,
        }
    }

    pub fn party_of(&self, agent_id: Uuid) -> Option<Party> {
        if agent_id == self.buyer_id {
            Some(Party::Buyer)
        } else if agent_id == self.seller_id {
            Some(Party::Seller)
        } else {
            None
        }
    }
}

/// Locks the thread of a bid the agent is party to, and reads what an action on the bid needs.
pub async fn lock_bid_context(
    conn: &mut PgConnection,
    bid_id: Uuid,
    agent_id: Uuid,
) -> Result<Option<BidContext>, sqlx::Error> {
    sqlx::query_as(
        "SELECT t.id AS thread_id, t.status AS thread_status, t.listing_id, t.buyer_id, t.seller_id,
                b.status, b.author, b.final, b.expires_at, b.amount, b.currency, b.round, b.terms,
                p.amount AS parent_amount, l.ask_amount, l.max_rounds, l.bid_ttl_seconds, now() AS db_now
         FROM bids b
         JOIN threads t ON t.id = b.thread_id
         JOIN listings l ON l.id = t.listing_id
         LEFT JOIN bids p ON p.id = b.parent_bid_id
         WHERE b.id = $1 AND $2 IN (t.buyer_id, t.seller_id)
         FOR UPDATE OF t",
    )
    .bind(bid_id)
    .bind(agent_id)
    .fetch_optional(conn)
    .await
}

/// Locks the listing of a bid the agent is party to; taken before the thread when an action
/// may change the listing. `None` if the agent cannot see the bid.
pub async fn lock_listing_of_bid(
    conn: &mut PgConnection,
    bid_id: Uuid,
    agent_id: Uuid,
) -> Result<Option<ListingStatus>, sqlx::Error> {
    let status: Option<String> = sqlx::query_scalar(
        "SELECT l.status FROM listings l
         WHERE l.id = (SELECT t.listing_id FROM bids b JOIN threads t ON t.id = b.thread_id
                       WHERE b.id = $1 AND $2 IN (t.buyer_id, t.seller_id))
         FOR UPDATE",
    )
    .bind(bid_id)
    .bind(agent_id)
    .fetch_optional(conn)
    .await?;
    status.map(|s| s.parse().map_err(|e: String| sqlx::Error::Decode(e.into()))).transpose()
}

/// Locks a thread row, for a caller that is about to change one of its bids without having
/// read it through [`lock_bid_context`].
pub async fn lock_thread(conn: &mut PgConnection, thread_id: Uuid) -> Result<(), sqlx::Error> {
    sqlx::query("SELECT 1 FROM threads WHERE id = $1 FOR UPDATE").bind(thread_id).execute(conn).await.map(drop)
}

/// The current status of a bid, to report why a compare-and-set found nothing to change.
pub async fn stored_status(conn: &mut PgConnection, bid_id: Uuid) -> Result<BidStatus, sqlx::Error> {
    let status: String =
        sqlx::query_scalar("SELECT status FROM bids WHERE id = $1").bind(bid_id).fetch_one(conn).await?;
    status.parse().map_err(|e: String| sqlx::Error::Decode(e.into()))
}

pub struct NewBid<'a> {
    pub id: Uuid,
    pub author_id: Uuid,
    pub amount: i64,
    pub currency: Currency,
    pub message: Option<&'a str>,
    pub terms: Option<&'a serde_json::Value>,
    pub is_final: bool,
    pub expires_in: i32,
}

/// Opens a thread with the buyer's first bid. `None` if the buyer already has an ACTIVE
/// thread on the listing (a concurrent placement came first); the transaction stays usable.
pub async fn insert_opening(
    conn: &mut PgConnection,
    thread_id: Uuid,
    listing_id: Uuid,
    seller_id: Uuid,
    opening: &NewBid<'_>,
) -> Result<Option<(Bid, Thread)>, sqlx::Error> {
    let row: Option<BidAndThreadRow> = sqlx::query_as(
        "WITH thread AS (
             INSERT INTO threads (id, listing_id, buyer_id, seller_id, status, rounds, last_bid_id, expires_at)
             VALUES ($1, $2, $3, $4, 'ACTIVE', 1, $5, now() + $6 * interval '1 second')
             ON CONFLICT (listing_id, buyer_id) WHERE status = 'ACTIVE' DO NOTHING
             RETURNING *
         ), bid AS (
             INSERT INTO bids (id, thread_id, author, author_id, amount, currency, message, terms, final, status, round, expires_at)
             SELECT $5, thread.id, 'buyer', $3, $7, $8, $9, $10, $11, 'PENDING', 1, thread.expires_at FROM thread
             RETURNING *
         )
         SELECT row_to_json(bid) AS bid, row_to_json(thread) AS thread FROM bid, thread",
    )
    .bind(thread_id)
    .bind(listing_id)
    .bind(opening.author_id)
    .bind(seller_id)
    .bind(opening.id)
    .bind(opening.expires_in)
    .bind(opening.amount)
    .bind(opening.currency.as_str())
    .bind(opening.message)
    .bind(opening.terms)
    .bind(opening.is_final)
    .fetch_optional(conn)
    .await?;
    Ok(row.map(|row| (row.bid.0, row.thread.0)))
}

/// Marks the pending bid COUNTERED and adds the counter as the thread's new pending bid.
/// `None` if the bid was no longer PENDING, or its deadline passed while this transaction
/// waited for its locks (the compare-and-set reads the clock, not the transaction's start).
pub async fn insert_counter(
    conn: &mut PgConnection,
    answered_bid_id: Uuid,
    author: Party,
    round: i32,
    counter: &NewBid<'_>,
) -> Result<Option<(Bid, Thread)>, sqlx::Error> {
    let row: Option<BidAndThreadRow> = sqlx::query_as(
        "WITH answered AS (
             UPDATE bids SET status = 'COUNTERED', reason = 'countered', responded_at = now(), updated_at = now()
             WHERE id = $1 AND status = 'PENDING' AND expires_at > clock_timestamp()
             RETURNING id, thread_id
         ), bid AS (
             INSERT INTO bids (id, thread_id, author, author_id, amount, currency, message, terms, final, status,
                               parent_bid_id, round, expires_at)
             SELECT $2, answered.thread_id, $3, $4, $5, $6, $7, $8, $9, 'PENDING', answered.id, $10,
                    now() + $11 * interval '1 second'
             FROM answered
             RETURNING *
         ), thread AS (
             UPDATE threads SET rounds = bid.round, last_bid_id = bid.id, expires_at = bid.expires_at, updated_at = now()
             FROM bid WHERE threads.id = bid.thread_id
             RETURNING threads.*
         )
         SELECT row_to_json(bid) AS bid, row_to_json(thread) AS thread FROM bid, thread",
    )
    .bind(answered_bid_id)
    .bind(counter.id)
    .bind(author.as_str())
    .bind(counter.author_id)
    .bind(counter.amount)
    .bind(counter.currency.as_str())
    .bind(counter.message)
    .bind(counter.terms)
    .bind(counter.is_final)
    .bind(round)
    .bind(counter.expires_in)
    .fetch_optional(conn)
    .await?;
    Ok(row.map(|row| (row.bid.0, row.thread.0)))
}

/// Ends a thread through its pending bid: a rejection, a withdrawal or an expiry. The caller
/// must hold the thread's lock (the bid row is changed first here, so taking the thread's
/// lock only now would invert the lock order). `None` if the bid was no longer PENDING, or,
/// for a rejection or withdrawal, its deadline has passed.
pub async fn end_with_bid(
    conn: &mut PgConnection,
    bid_id: Uuid,
    transition: Transition,
) -> Result<Option<(Bid, Thread)>, sqlx::Error> {
    let row: Option<BidAndThreadRow> = sqlx::query_as(
        "WITH bid AS (
             UPDATE bids SET status = $2, reason = $3, updated_at = now(),
                    responded_at = CASE WHEN $2 = 'EXPIRED' THEN expires_at ELSE now() END
             WHERE id = $1 AND status = 'PENDING' AND ($2 = 'EXPIRED' OR expires_at > clock_timestamp())
             RETURNING *
         ), thread AS (
             UPDATE threads SET status = $4, closed_reason = $3, expires_at = NULL, updated_at = now()
             FROM bid WHERE threads.id = bid.thread_id
             RETURNING threads.*
         )
         SELECT row_to_json(bid) AS bid, row_to_json(thread) AS thread FROM bid, thread",
    )
    .bind(bid_id)
    .bind(transition.bid_status().as_str())
    .bind(transition.reason().as_str())
    .bind(transition.thread_status().as_str())
    .fetch_optional(conn)
    .await?;
    Ok(row.map(|row| (row.bid.0, row.thread.0)))
}

#[derive(Debug, FromRow)]
struct AcceptedRow {
    bid: Json<Bid>,
    thread: Json<Thread>,
    order: Json<Order>,
    listing: Json<Listing>,
}

pub struct Accepted {
    pub bid: Bid,
    pub thread: Thread,
    pub order: Order,
    /// The listing with one unit fewer.
    pub listing: Listing,
}

/// Accepts the pending bid: bid and thread ACCEPTED, an order at the bid's amount and terms,
/// one unit fewer on the listing (SOLD at zero). The listing must already be locked.
/// `None` if the bid was no longer PENDING or its deadline has passed.
pub async fn accept(conn: &mut PgConnection, bid_id: Uuid, order_id: Uuid) -> Result<Option<Accepted>, sqlx::Error> {
    let row: Option<AcceptedRow> = sqlx::query_as(
        r#"WITH bid AS (
             UPDATE bids SET status = 'ACCEPTED', reason = 'accepted', responded_at = now(), updated_at = now()
             WHERE id = $1 AND status = 'PENDING' AND expires_at > clock_timestamp()
             RETURNING *
         ), thread AS (
             UPDATE threads SET status = 'ACCEPTED', closed_reason = 'accepted', expires_at = NULL, updated_at = now()
             FROM bid WHERE threads.id = bid.thread_id
             RETURNING threads.*
         ), ordered AS (
             INSERT INTO orders (id, listing_id, thread_id, bid_id, buyer_id, seller_id, amount, currency, terms, status)
             SELECT $2, thread.listing_id, thread.id, bid.id, thread.buyer_id, thread.seller_id, bid.amount, bid.currency,
                    bid.terms, 'CONFIRMED'
             FROM bid, thread
             RETURNING *
         ), listing AS (
             UPDATE listings SET quantity_available = listings.quantity_available - 1,
                    status = CASE WHEN listings.quantity_available = 1 THEN 'SOLD' ELSE listings.status END,
                    updated_at = now()
             FROM ordered WHERE listings.id = ordered.listing_id
             RETURNING listings.*
         )
         SELECT row_to_json(bid) AS bid, row_to_json(thread) AS thread, row_to_json(ordered) AS "order",
                row_to_json(listing) AS listing
         FROM bid, thread, ordered, listing"#,
    )
    .bind(bid_id)
    .bind(order_id)
    .fetch_optional(conn)
    .await?;
    Ok(row.map(|row| Accepted { bid: row.bid.0, thread: row.thread.0, order: row.order.0, listing: row.listing.0 }))
}

/// Ends every live thread of a listing that sold out or was withdrawn, rejecting their pending
/// bids with `reason`. Threads already past their deadline expire instead. The listing must be
/// locked. Returns each ended thread with its last bid.
///
/// Two statements on purpose: the second takes a fresh snapshot after the first has waited for
/// any thread a concurrent counter held, so that counter's new pending bid is seen and ended.
pub async fn end_listing_threads(
    conn: &mut PgConnection,
    listing_id: Uuid,
    reason: Reason,
) -> Result<Vec<(Bid, Thread)>, sqlx::Error> {
    let threads: Vec<Json<Thread>> = sqlx::query_scalar(
        "UPDATE threads SET
             status = CASE WHEN expires_at <= now() THEN 'EXPIRED' ELSE 'CLOSED' END,
             closed_reason = CASE WHEN expires_at <= now() THEN 'expired' ELSE $2 END,
             expires_at = NULL, updated_at = now()
         WHERE listing_id = $1 AND status = 'ACTIVE'
         RETURNING row_to_json(threads)",
    )
    .bind(listing_id)
    .bind(reason.as_str())
    .fetch_all(&mut *conn)
    .await?;
    if threads.is_empty() {
        return Ok(Vec::new());
    }
    let pending: Vec<Uuid> = threads.iter().map(|thread| thread.last_bid_id).collect();
    let bids: Vec<Json<Bid>> = sqlx::query_scalar(
        "UPDATE bids SET
             status = CASE WHEN expires_at <= now() THEN 'EXPIRED' ELSE 'REJECTED' END,
             reason = CASE WHEN expires_at <= now() THEN 'expired' ELSE $2 END,
             responded_at = CASE WHEN expires_at <= now() THEN expires_at ELSE now() END, updated_at = now()
         WHERE id = ANY($1) AND status = 'PENDING'
         RETURNING row_to_json(bids)",
    )
    .bind(&pending)
    .bind(reason.as_str())
    .fetch_all(conn)
    .await?;
    Ok(pair_with_threads(bids, threads))
}

/// Matches bids to the threads they belong to.
fn pair_with_threads(bids: Vec<Json<Bid>>, threads: Vec<Json<Thread>>) -> Vec<(Bid, Thread)> {
    let mut threads: std::collections::HashMap<Uuid, Thread> =
        threads.into_iter().map(|thread| (thread.id, thread.0)).collect();
    bids.into_iter().filter_map(|bid| threads.remove(&bid.thread_id).map(|thread| (bid.0, thread))).collect()
}

/// Expires up to `batch` threads whose pending bid is past its deadline, skipping threads another
/// transaction holds. Returns the bids it expired with their threads.
pub async fn sweep_expired(conn: &mut PgConnection, batch: i64) -> Result<Vec<(Bid, Thread)>, sqlx::Error> {
    let threads: Vec<Json<Thread>> = sqlx::query_scalar(
        "WITH due AS (
             SELECT id FROM threads WHERE status = 'ACTIVE' AND expires_at <= now()
             ORDER BY expires_at LIMIT $1
             FOR UPDATE SKIP LOCKED
         )
         UPDATE threads SET status = 'EXPIRED', closed_reason = 'expired', expires_at = NULL, updated_at = now()
         FROM due WHERE threads.id = due.id
         RETURNING row_to_json(threads)",
    )
    .bind(batch)
    .fetch_all(&mut *conn)
    .await?;
    if threads.is_empty() {
        return Ok(Vec::new());
    }
    let due: Vec<Uuid> = threads.iter().map(|thread| thread.last_bid_id).collect();
    let bids: Vec<Json<Bid>> = sqlx::query_scalar(
        "UPDATE bids SET status = 'EXPIRED', reason = 'expired', responded_at = expires_at, updated_at = now()
         WHERE id = ANY($1) AND status = 'PENDING'
         RETURNING row_to_json(bids)",
    )
    .bind(&due)
    .fetch_all(conn)
    .await?;
    Ok(pair_with_threads(bids, threads))
}

/// A bid, if the agent is party to its thread.
pub async fn get_bid(executor: impl PgExecutor<'_>, bid_id: Uuid, agent_id: Uuid) -> Result<Option<Bid>, sqlx::Error> {
    sqlx::query_as(concat!(
        "SELECT ",
        bid_columns!("b."),
        " FROM bids b JOIN threads t ON t.id = b.thread_id WHERE b.id = $1 AND $2 IN (t.buyer_id, t.seller_id)"
    ))
    .bind(bid_id)
    .bind(agent_id)
    .fetch_optional(executor)
    .await
}

#[derive(Debug, FromRow)]
struct ThreadWithBidsRow {
    thread: Json<Thread>,
    bids: Json<Vec<Bid>>,
}

/// A thread with its bids in order, if the agent is party to it. One statement, so the thread
/// and its bids are read from the same snapshot.
pub async fn get_thread_with_bids(
    executor: impl PgExecutor<'_>,
    thread_id: Uuid,
    agent_id: Uuid,
) -> Result<Option<(Thread, Vec<Bid>)>, sqlx::Error> {
    let row: Option<ThreadWithBidsRow> = sqlx::query_as(
        "SELECT row_to_json(t) AS thread,
                COALESCE((SELECT json_agg(b ORDER BY b.round) FROM bids b WHERE b.thread_id = t.id), '[]') AS bids
         FROM threads t WHERE t.id = $1 AND $2 IN (t.buyer_id, t.seller_id)",
    )
    .bind(thread_id)
    .bind(agent_id)
    .fetch_optional(executor)
    .await?;
    Ok(row.map(|row| (row.thread.0, row.bids.0)))
}

#[derive(Debug, Default)]
pub struct ThreadFilter {
    pub role: Option<Party>,
    pub status: Option<ThreadStatus>,
    pub listing_id: Option<Uuid>,
    pub after: Option<Uuid>,
    pub limit: i64,
}

/// The agent's threads, newest first. A status filter means the effective status: an ACTIVE
/// thread past its deadline counts as EXPIRED.
pub async fn list_threads(
    executor: impl PgExecutor<'_>,
    agent_id: Uuid,
    filter: &ThreadFilter,
) -> Result<Page<Thread>, sqlx::Error> {
    let mut query: QueryBuilder<Postgres> =
        QueryBuilder::new(concat!("SELECT ", thread_columns!(""), " FROM threads WHERE "));
    match filter.role {
        Some(Party::Buyer) => query.push("buyer_id = ").push_bind(agent_id),
        Some(Party::Seller) => query.push("seller_id = ").push_bind(agent_id),
        None => query.push("(buyer_id = ").push_bind(agent_id).push(" OR seller_id = ").push_bind(agent_id).push(")"),
    };
    match filter.status {
        Some(ThreadStatus::Active) => query.push(" AND status = 'ACTIVE' AND expires_at > now()"),
        Some(ThreadStatus::Expired) => {
            query.push(" AND (status = 'EXPIRED' OR (status = 'ACTIVE' AND expires_at <= now()))")
        }
        Some(status @ (ThreadStatus::Accepted | ThreadStatus::Rejected | ThreadStatus::Closed)) => {
            query.push(" AND status = ").push_bind(status.as_str())
        }
        None => &mut query,
    };
    if let Some(listing_id) = filter.listing_id {
        query.push(" AND listing_id = ").push_bind(listing_id);
    }
    if let Some(after) = filter.after {
        query.push(" AND id < ").push_bind(after);
    }
    query.push(" ORDER BY id DESC LIMIT ").push_bind(filter.limit + 1);
    let rows = query.build_query_as::<Thread>().fetch_all(executor).await?;
    Ok(Page::from_rows(rows, filter.limit, |thread| thread.id))
}
