//! The negotiations on an order (a refund, a cancellation): opening one, its counters, and what
//! an agreement or the operator's decision writes to the order. Every move on such a thread is
//! made under locks, never batched: in one order, thread then order (an answer that changes the
//! listing takes the listing first, as every move does).

use chrono::{DateTime, Utc};
use sqlx::types::Json;
use sqlx::{PgConnection, PgExecutor};
use uuid::Uuid;

use super::moves::Effect;
use super::{Bid, Listing, Order, Thread};
use haggle_api::OrderStatus;
use haggle_domain::appointment::{ScheduleTerms, Window};
use haggle_domain::plan::InstallmentTerms;
use haggle_domain::{BidStatus, ThreadKind};

/// The open thread of a kind on an order, locked, with its deadline and the database's clock.
#[derive(Debug)]
pub struct OpenThread {
    pub id: Uuid,
    pub last_bid_id: Uuid,
    pub expires_at: DateTime<Utc>,
    pub db_now: DateTime<Utc>,
}

/// Locks the open (ACTIVE) thread of `kind` on the order, if the agent is party to it. Taken
/// before the order's lock, as every move on the thread takes them.
pub async fn lock_open_thread(
    conn: &mut PgConnection,
    order_id: Uuid,
    kind: ThreadKind,
    agent_id: Uuid,
) -> Result<Option<OpenThread>, sqlx::Error> {
    sqlx::query_as!(
        OpenThread,
        r#"SELECT id, last_bid_id, expires_at AS "expires_at!", clock_timestamp() AS "db_now!" FROM threads
           WHERE order_id = $1 AND kind = $2 AND status = 'ACTIVE' AND $3 IN (buyer_id, seller_id)
           FOR UPDATE"#,
        order_id,
        kind.as_str(),
        agent_id,
    )
    .fetch_optional(conn)
    .await
}

/// The open thread of `kind` on the order, if any (read under the order's lock).
pub async fn open_thread(
    executor: impl PgExecutor<'_>,
    order_id: Uuid,
    kind: ThreadKind,
) -> Result<Option<Uuid>, sqlx::Error> {
    sqlx::query_scalar!(
        "SELECT id FROM threads WHERE order_id = $1 AND kind = $2 AND status = 'ACTIVE'",
        order_id,
        kind.as_str(),
    )
    .fetch_optional(executor)
    .await
}

/// Locks an order, whoever asks (an answer on one of its threads, the operator's decision).
pub async fn lock_order(conn: &mut PgConnection, id: Uuid) -> Result<Option<Order>, sqlx::Error> {
    let order = sqlx::query_scalar!(
        r#"SELECT row_to_json(o) AS "order!: Json<Order>" FROM orders o WHERE id = $1 FOR UPDATE"#,
        id,
    )
    .fetch_optional(conn)
    .await?;
    Ok(order.map(|order| order.0))
}

/// What a negotiation on an order is run by: its listing's round limit and bids' lifetime,
/// with the database's clock as they were read.
pub struct ListingRules {
    pub max_rounds: i32,
    pub bid_ttl_seconds: i32,
    pub db_now: DateTime<Utc>,
}

pub async fn listing_rules(executor: impl PgExecutor<'_>, listing_id: Uuid) -> Result<ListingRules, sqlx::Error> {
    sqlx::query_as!(
        ListingRules,
        r#"SELECT max_rounds, bid_ttl_seconds, clock_timestamp() AS "db_now!" FROM listings WHERE id = $1"#,
        listing_id,
    )
    .fetch_one(executor)
    .await
}

#[derive(Debug)]
struct BidAndThreadRow {
    bid: Json<Bid>,
    thread: Json<Thread>,
}

/// Opens the thread `thread` with its first bid `bid`, both worked out by the caller under the
/// order's lock. A bid with no amount (a cancellation's) is stored without one.
pub async fn open(conn: &mut PgConnection, thread: &Thread, bid: &Bid) -> Result<(Bid, Thread), sqlx::Error> {
    let row = sqlx::query_as!(
        BidAndThreadRow,
        r#"WITH thread AS (
               INSERT INTO threads (id, listing_id, buyer_id, seller_id, status, rounds, last_bid_id, expires_at,
                                    kind, order_id, opened_by, created_at, updated_at)
               VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $12)
               RETURNING *
           ), bid AS (
               INSERT INTO bids (id, thread_id, author, author_id, kind, amount, currency, message, terms, final,
                                 status, round, expires_at, created_at, updated_at)
               SELECT $7, thread.id, $11, $13, thread.kind, $14, $15, $16, $17, $18, $19, thread.rounds,
                      thread.expires_at, $12, $12
               FROM thread
               RETURNING *
           )
           SELECT row_to_json(bid) AS "bid!: Json<Bid>", row_to_json(thread) AS "thread!: Json<Thread>"
           FROM bid, thread"#,
        thread.id,
        thread.listing_id,
        thread.buyer_id,
        thread.seller_id,
        thread.status.as_str(),
        thread.rounds,
        bid.id,
        bid.expires_at,
        thread.kind.as_str(),
        thread.order_id,
        bid.author.as_str(),
        bid.created_at,
        bid.author_id,
        stored_amount(bid),
        bid.currency.as_str(),
        bid.message.as_deref(),
        bid.terms.as_ref(),
        bid.is_final,
        bid.status.as_str(),
    )
    .fetch_one(conn)
    .await?;
    Ok((row.bid.0, row.thread.0))
}

/// A bid's amount as stored: none for a kind that names no amount.
fn stored_amount(bid: &Bid) -> Option<i64> {
    haggle_domain::order_negotiation::has_amount(bid.kind).then_some(bid.amount)
}

/// Counters the pending bid `bid_id` of a locked thread with `counter`, worked out by the
/// caller: the pending bid becomes what `effect` says (a compare-and-set on its status and
/// deadline), the counter is the thread's new pending bid. `None` if the compare-and-set failed.
pub async fn counter(
    conn: &mut PgConnection,
    bid_id: Uuid,
    effect: Effect,
    counter: &Bid,
) -> Result<Option<(Bid, Thread)>, sqlx::Error> {
    let row = sqlx::query_as!(
        BidAndThreadRow,
        r#"WITH answered AS (
               UPDATE bids SET status = $3, reason = $4, responded_at = $5, updated_at = $5
               WHERE id = $1 AND thread_id = $2 AND status = 'PENDING' AND expires_at > clock_timestamp()
               RETURNING id, thread_id, kind
           ), bid AS (
               INSERT INTO bids (id, thread_id, author, author_id, kind, amount, currency, message, terms, final,
                                 status, parent_bid_id, round, expires_at, created_at, updated_at)
               SELECT $6, a.thread_id, $7, $8, a.kind, $9, $10, $11, $12, $13, $14, a.id, $15, $16, $5, $5
               FROM answered a
               RETURNING *
           ), thread AS (
               UPDATE threads SET rounds = bid.round, last_bid_id = bid.id, expires_at = bid.expires_at,
                      updated_at = bid.updated_at
               FROM bid WHERE threads.id = bid.thread_id AND threads.status = 'ACTIVE'
               RETURNING threads.*
           )
           SELECT row_to_json(bid) AS "bid!: Json<Bid>", row_to_json(thread) AS "thread!: Json<Thread>"
           FROM bid, thread"#,
        bid_id,
        counter.thread_id,
        effect.bid_status.as_str(),
        effect.reason.as_str(),
        counter.created_at,
        counter.id,
        counter.author.as_str(),
        counter.author_id,
        stored_amount(counter),
        counter.currency.as_str(),
        counter.message.as_deref(),
        counter.terms.as_ref(),
        counter.is_final,
        BidStatus::Pending.as_str(),
        counter.round,
        counter.expires_at,
    )
    .fetch_optional(conn)
    .await?;
    Ok(row.map(|row| (row.bid.0, row.thread.0)))
}

/// Adds an agreed or decided refund to the locked order: a compare-and-set on the refunded
/// amount staying within what was paid. `None` if it would not.
pub async fn record_refund(conn: &mut PgConnection, order_id: Uuid, amount: i64) -> Result<Option<Order>, sqlx::Error> {
    let order = sqlx::query_scalar!(
        r#"UPDATE orders o SET refunded_amount = refunded_amount + $2, updated_at = now()
           WHERE id = $1 AND refunded_amount + $2 <= paid_amount
           RETURNING row_to_json(o) AS "order!: Json<Order>""#,
        order_id,
        amount,
    )
    .fetch_optional(conn)
    .await?;
    Ok(order.map(|order| order.0))
}

#[derive(Debug)]
struct CancelledRow {
    order: Json<Order>,
    listing: Option<Json<Listing>>,
}

/// Cancels a CONFIRMED order (a compare-and-set on its status), and gives its unit back to the
/// listing, which must be locked, if the listing is ACTIVE, or SOLD by this order (its last
/// unit: no order on it is newer): the listing is then ACTIVE with one more unit. `None` if the
/// order was not CONFIRMED; the listing is returned if it took the unit back.
pub async fn cancel(conn: &mut PgConnection, order_id: Uuid) -> Result<Option<(Order, Option<Listing>)>, sqlx::Error> {
    let row = sqlx::query_as!(
        CancelledRow,
        r#"WITH cancelled AS (
               UPDATE orders o SET status = $2, cancelled_at = now(), updated_at = now()
               WHERE id = $1 AND status = $3
               RETURNING o.*
           ), released AS (
               UPDATE listings l SET quantity_available = l.quantity_available + 1, status = 'ACTIVE',
                      updated_at = now()
               FROM cancelled c
               WHERE l.id = c.listing_id AND l.quantity_available < l.quantity
                 AND (l.status = 'ACTIVE'
                      OR (l.status = 'SOLD'
                          AND NOT EXISTS (SELECT 1 FROM orders n WHERE n.listing_id = l.id AND n.id > c.id)))
               RETURNING l.*
           )
           SELECT row_to_json(cancelled) AS "order!: Json<Order>",
                  (SELECT row_to_json(released) FROM released) AS "listing: Json<Listing>"
           FROM cancelled"#,
        order_id,
        OrderStatus::Cancelled.as_str(),
        OrderStatus::Confirmed.as_str(),
    )
    .fetch_optional(conn)
    .await?;
    Ok(row.map(|row| (row.order.0, row.listing.map(|listing| listing.0))))
}

/// A thread locked for its escalation or decision, with the database's clock.
#[derive(Debug)]
pub struct LockedThread {
    pub thread: Thread,
    pub db_now: DateTime<Utc>,
}

/// Locks a thread: one the agent is party to, or, without an agent, any (the operator's).
pub async fn lock_thread(
    conn: &mut PgConnection,
    id: Uuid,
    agent_id: Option<Uuid>,
) -> Result<Option<LockedThread>, sqlx::Error> {
    let row = sqlx::query!(
        r#"SELECT row_to_json(t) AS "thread!: Json<Thread>", clock_timestamp() AS "db_now!" FROM threads t
           WHERE id = $1 AND ($2::uuid IS NULL OR $2 IN (buyer_id, seller_id))
           FOR UPDATE"#,
        id,
        agent_id,
    )
    .fetch_optional(conn)
    .await?;
    Ok(row.map(|row| LockedThread { thread: row.thread.0, db_now: row.db_now }))
}

/// Marks a locked, ended refund thread escalated by the agent: once.
pub async fn escalate(conn: &mut PgConnection, id: Uuid, agent_id: Uuid) -> Result<Option<Thread>, sqlx::Error> {
    let thread = sqlx::query_scalar!(
        r#"UPDATE threads t SET escalated_at = now(), escalated_by = $2, updated_at = now()
           WHERE id = $1 AND escalated_at IS NULL
           RETURNING row_to_json(t) AS "thread!: Json<Thread>""#,
        id,
        agent_id,
    )
    .fetch_optional(conn)
    .await?;
    Ok(thread.map(|thread| thread.0))
}

/// Records the operator's decision on a locked, escalated refund thread: once.
pub async fn decide(conn: &mut PgConnection, id: Uuid, amount: i64, note: &str) -> Result<Option<Thread>, sqlx::Error> {
    let thread = sqlx::query_scalar!(
        r#"UPDATE threads t SET decided_amount = $2, decision_note = $3, decided_at = now(), updated_at = now()
           WHERE id = $1 AND escalated_at IS NOT NULL AND decided_at IS NULL
           RETURNING row_to_json(t) AS "thread!: Json<Thread>""#,
        id,
        amount,
        note,
    )
    .fetch_optional(conn)
    .await?;
    Ok(thread.map(|thread| thread.0))
}

/// Makes `window` of an accepted schedule the locked, CONFIRMED order's appointment, replacing
/// any earlier one. `None` if the order is no longer CONFIRMED.
pub async fn set_appointment(
    conn: &mut PgConnection,
    order_id: Uuid,
    window: Window,
    schedule: &ScheduleTerms,
    thread_id: Uuid,
) -> Result<Option<Order>, sqlx::Error> {
    let order = sqlx::query_scalar!(
        r#"UPDATE orders o SET appointment_start = $2, appointment_end = $3, appointment_method = $4,
                  appointment_place = $5, appointment_thread_id = $6, updated_at = now()
           WHERE id = $1 AND status = 'CONFIRMED'
           RETURNING row_to_json(o) AS "order!: Json<Order>""#,
        order_id,
        window.start,
        window.end,
        schedule.method.as_str(),
        schedule.place.as_deref(),
        thread_id,
    )
    .fetch_optional(conn)
    .await?;
    Ok(order.map(|order| order.0))
}

/// Makes an accepted plan the locked order's payment schedule, counting payments confirmed from
/// now on against it: a compare-and-set on the order having no plan, being neither COMPLETED nor
/// CANCELLED, and owing exactly the plan's sum. `None` if it was not so.
pub async fn set_plan(
    conn: &mut PgConnection,
    order_id: Uuid,
    plan: &InstallmentTerms,
    thread_id: Uuid,
) -> Result<Option<Order>, sqlx::Error> {
    let installments = serde_json::to_value(&plan.installments).map_err(|error| sqlx::Error::Encode(error.into()))?;
    let order = sqlx::query_scalar!(
        r#"UPDATE orders o SET plan = $2, plan_base = paid_amount, plan_thread_id = $3, updated_at = now()
           WHERE id = $1 AND plan IS NULL AND status IN ('CONFIRMED', 'FULFILLED') AND amount - paid_amount = $4
           RETURNING row_to_json(o) AS "order!: Json<Order>""#,
        order_id,
        installments,
        thread_id,
        plan.total(),
    )
    .fetch_optional(conn)
    .await?;
    Ok(order.map(|order| order.0))
}
