//! Orders: made by an accepted bid or a purchase at the ask, then fulfilled and completed; and
//! the payments recorded on them.

use chrono::{DateTime, Utc};
use haggle_api::{OrderStatus, PaymentStatus};
use serde::Deserialize;
use sqlx::types::Json;
use sqlx::{FromRow, PgConnection, PgExecutor, Postgres, QueryBuilder};
use uuid::Uuid;

use super::text::Text;
use super::{Listing, Page};
use haggle_domain::order::Ledger;
use haggle_domain::order_negotiation::Refunds;
use haggle_domain::plan::Installment;
use haggle_domain::{Amount, Currency, Party};

/// An order as stored; shown as [`api::Order`].
#[derive(Debug, Clone, PartialEq, Eq, FromRow, Deserialize)]
pub struct Order {
    pub id: Uuid,
    pub listing_id: Uuid,
    pub thread_id: Option<Uuid>,
    pub bid_id: Option<Uuid>,
    pub buyer_id: Uuid,
    pub seller_id: Uuid,
    pub amount: i64,
    #[sqlx(try_from = "String")]
    pub currency: Currency,
    pub terms: Option<serde_json::Value>,
    #[sqlx(try_from = "String")]
    pub status: OrderStatus,
    /// The confirmed payments' sum.
    pub paid_amount: i64,
    pub fulfilled_at: Option<DateTime<Utc>>,
    pub fulfilment_reference: Option<String>,
    pub fulfilment_note: Option<String>,
    pub completed_at: Option<DateTime<Utc>>,
    /// The refunds agreed or decided: never more than `paid_amount`.
    #[serde(default)]
    pub refunded_amount: i64,
    #[serde(default)]
    pub cancelled_at: Option<DateTime<Utc>>,
    /// The window of the latest accepted schedule, how and where: all set or none.
    #[serde(default)]
    pub appointment_start: Option<DateTime<Utc>>,
    #[serde(default)]
    pub appointment_end: Option<DateTime<Utc>>,
    #[serde(default)]
    pub appointment_method: Option<String>,
    #[serde(default)]
    pub appointment_place: Option<String>,
    #[serde(default)]
    pub appointment_thread_id: Option<Uuid>,
    /// The accepted payment plan's installments (`[{amount, due}]`), and the confirmed amount
    /// paid when it was agreed: payments confirmed since fill its installments.
    #[serde(default)]
    pub plan: Option<serde_json::Value>,
    #[serde(default)]
    pub plan_base: Option<i64>,
    #[serde(default)]
    pub plan_thread_id: Option<Uuid>,
    /// The approval the order's move was made under (SPEC §10), as stored.
    #[serde(default)]
    pub approval: Option<serde_json::Value>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl Order {
    /// What is owed and what was paid of it.
    pub fn ledger(&self) -> Ledger {
        Ledger { amount: self.amount, paid: self.paid_amount }
    }

    /// The accepted payment plan's installments, if there is one.
    pub fn plan(&self) -> Option<Vec<Installment>> {
        self.plan.clone().and_then(|plan| serde_json::from_value(plan).ok())
    }

    /// What was paid and what of it was refunded.
    pub fn refunds(&self) -> Refunds {
        Refunds { paid: self.paid_amount, refunded: self.refunded_amount }
    }
}

/// Every column of an order, for the lists built at run time (read into [`Order`] by name).
pub const ORDER_COLUMNS: &str = "id, listing_id, thread_id, bid_id, buyer_id, seller_id, amount, currency, terms, \
     status, paid_amount, fulfilled_at, fulfilment_reference, fulfilment_note, completed_at, refunded_amount, \
     cancelled_at, appointment_start, appointment_end, appointment_method, appointment_place, appointment_thread_id, \
     plan, plan_base, plan_thread_id, approval, created_at, updated_at";

/// A payment as stored (read back through `row_to_json`); shown as [`api::Payment`].
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Payment {
    pub id: Uuid,
    pub order_id: Uuid,
    pub payer_id: Uuid,
    pub amount: i64,
    pub currency: Currency,
    pub reference: String,
    pub status: PaymentStatus,
    pub dispute_reason: Option<String>,
    pub answered_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

#[derive(Debug)]
struct PurchasedRow {
    order: Json<Order>,
    listing: Json<Listing>,
}

/// Buys one unit at the ask, returning the order and the listing with one unit fewer. The
/// listing must already be locked and ACTIVE.
pub async fn purchase(
    conn: &mut PgConnection,
    order_id: Uuid,
    listing_id: Uuid,
    buyer_id: Uuid,
) -> Result<(Order, Listing), sqlx::Error> {
    let row = sqlx::query_as!(
        PurchasedRow,
        r#"WITH listing AS (
             UPDATE listings SET quantity_available = quantity_available - 1,
                    status = CASE WHEN quantity_available = 1 THEN 'SOLD' ELSE status END,
                    updated_at = now()
             WHERE id = $2 AND status = 'ACTIVE'
             RETURNING *
         ), ordered AS (
             INSERT INTO orders (id, listing_id, buyer_id, seller_id, amount, currency, status)
             SELECT $1, listing.id, $3, listing.seller_id, listing.ask_amount, listing.currency, 'CONFIRMED' FROM listing
             RETURNING *
         )
         SELECT row_to_json(ordered) AS "order!: Json<Order>", row_to_json(listing) AS "listing!: Json<Listing>"
         FROM ordered, listing"#,
        order_id,
        listing_id,
        buyer_id,
    )
    .fetch_one(conn)
    .await?;
    Ok((row.order.0, row.listing.0))
}

/// An order, if the agent is its buyer or seller.
pub async fn get(executor: impl PgExecutor<'_>, id: Uuid, agent_id: Uuid) -> Result<Option<Order>, sqlx::Error> {
    let order = sqlx::query_scalar!(
        r#"SELECT row_to_json(o) AS "order!: Json<Order>" FROM orders o WHERE id = $1 AND $2 IN (buyer_id, seller_id)"#,
        id,
        agent_id,
    )
    .fetch_optional(executor)
    .await?;
    Ok(order.map(|order| order.0))
}

/// Locks the order, if the agent is its buyer or seller, against every other change of its
/// status and ledger until the transaction ends.
pub async fn lock(conn: &mut PgConnection, id: Uuid, agent_id: Uuid) -> Result<Option<Order>, sqlx::Error> {
    let order = sqlx::query_scalar!(
        r#"SELECT row_to_json(o) AS "order!: Json<Order>" FROM orders o
           WHERE id = $1 AND $2 IN (buyer_id, seller_id) FOR UPDATE"#,
        id,
        agent_id,
    )
    .fetch_optional(conn)
    .await?;
    Ok(order.map(|order| order.0))
}

/// Marks a CONFIRMED order FULFILLED with the seller's reference and note: a compare-and-set on
/// its status, `None` if it was not CONFIRMED.
pub async fn fulfil(
    conn: &mut PgConnection,
    id: Uuid,
    reference: Option<&str>,
    note: Option<&str>,
) -> Result<Option<Order>, sqlx::Error> {
    let order = sqlx::query_scalar!(
        r#"UPDATE orders o SET status = 'FULFILLED', fulfilled_at = now(), fulfilment_reference = $2,
                  fulfilment_note = $3, updated_at = now()
           WHERE id = $1 AND status = 'CONFIRMED'
           RETURNING row_to_json(o) AS "order!: Json<Order>""#,
        id,
        reference,
        note,
    )
    .fetch_optional(conn)
    .await?;
    Ok(order.map(|order| order.0))
}

/// Marks FULFILLED orders COMPLETED: a compare-and-set on each one's status. Returns those
/// completed.
pub async fn complete(conn: &mut PgConnection, ids: &[Uuid]) -> Result<Vec<Order>, sqlx::Error> {
    let orders = sqlx::query_scalar!(
        r#"UPDATE orders o SET status = 'COMPLETED', completed_at = now(), updated_at = now()
           WHERE id = ANY($1) AND status = 'FULFILLED'
           RETURNING row_to_json(o) AS "order!: Json<Order>""#,
        ids,
    )
    .fetch_all(conn)
    .await?;
    Ok(orders.into_iter().map(|order| order.0).collect())
}

/// A fulfilled order due for completion by the server, locked.
#[derive(Debug)]
pub struct DueOrder {
    pub id: Uuid,
    pub status: OrderStatus,
}

/// Locks up to `batch` orders fulfilled at or before `fulfilled_before` and still FULFILLED,
/// oldest fulfilment first, skipping those another transaction holds and those a refund is
/// still negotiated or decided on ([`open_refund`]).
pub async fn lock_due_completions(
    conn: &mut PgConnection,
    fulfilled_before: DateTime<Utc>,
    batch: i64,
) -> Result<Vec<DueOrder>, sqlx::Error> {
    sqlx::query_as!(
        DueOrder,
        r#"SELECT id, status AS "status: Text<OrderStatus>" FROM orders
           WHERE status = 'FULFILLED' AND fulfilled_at <= $1
             AND NOT EXISTS (SELECT 1 FROM threads t
                             WHERE t.order_id = orders.id AND t.kind = 'refund'
                               AND (t.status = 'ACTIVE' OR (t.escalated_at IS NOT NULL AND t.decided_at IS NULL)))
           ORDER BY fulfilled_at LIMIT $2 FOR UPDATE SKIP LOCKED"#,
        fulfilled_before,
        batch,
    )
    .fetch_all(conn)
    .await
}

/// The refund still open on the order, if any: negotiated (an ACTIVE thread), or escalated and
/// not yet decided. The order completes only without one.
pub async fn open_refund(executor: impl PgExecutor<'_>, order_id: Uuid) -> Result<Option<Uuid>, sqlx::Error> {
    sqlx::query_scalar!(
        "SELECT id FROM threads t
         WHERE t.order_id = $1 AND t.kind = 'refund'
           AND (t.status = 'ACTIVE' OR (t.escalated_at IS NOT NULL AND t.decided_at IS NULL))
         LIMIT 1",
        order_id,
    )
    .fetch_optional(executor)
    .await
}

/// An order's payments, oldest first.
pub async fn payments(executor: impl PgExecutor<'_>, order_id: Uuid) -> Result<Vec<Payment>, sqlx::Error> {
    let payments = sqlx::query_scalar!(
        r#"SELECT row_to_json(p) AS "payment!: Json<Payment>" FROM payments p WHERE order_id = $1 ORDER BY id"#,
        order_id,
    )
    .fetch_all(executor)
    .await?;
    Ok(payments.into_iter().map(|payment| payment.0).collect())
}

/// Records a payment of the order's buyer, RECORDED. The order must already be locked.
pub async fn insert_payment(
    conn: &mut PgConnection,
    id: Uuid,
    order: &Order,
    amount: Amount,
    reference: &str,
) -> Result<Payment, sqlx::Error> {
    let Json(payment) = sqlx::query_scalar!(
        r#"INSERT INTO payments AS p (id, order_id, payer_id, amount, currency, reference, status)
           VALUES ($1, $2, $3, $4, $5, $6, 'RECORDED')
           RETURNING row_to_json(p) AS "payment!: Json<Payment>""#,
        id,
        order.id,
        order.buyer_id,
        amount.minor_units(),
        order.currency.as_str(),
        reference,
    )
    .fetch_one(conn)
    .await?;
    Ok(payment)
}

/// Locks one of the order's payments.
pub async fn lock_payment(conn: &mut PgConnection, order_id: Uuid, id: Uuid) -> Result<Option<Payment>, sqlx::Error> {
    let payment = sqlx::query_scalar!(
        r#"SELECT row_to_json(p) AS "payment!: Json<Payment>" FROM payments p
           WHERE id = $1 AND order_id = $2 FOR UPDATE"#,
        id,
        order_id,
    )
    .fetch_optional(conn)
    .await?;
    Ok(payment.map(|payment| payment.0))
}

/// Confirms a RECORDED payment and adds it to its order's paid amount, in one statement: a
/// compare-and-set on the payment's status and on the order's paid amount staying within the
/// order's. `None` if either failed; then nothing is written.
pub async fn confirm_payment(conn: &mut PgConnection, id: Uuid) -> Result<Option<(Payment, Order)>, sqlx::Error> {
    let row = sqlx::query!(
        r#"WITH payment AS (
             SELECT p.id, p.order_id, p.amount FROM payments p
             JOIN orders o ON o.id = p.order_id
             WHERE p.id = $1 AND p.status = 'RECORDED' AND o.paid_amount + p.amount <= o.amount
           ), paid AS (
             UPDATE orders o SET paid_amount = o.paid_amount + payment.amount, updated_at = now()
             FROM payment WHERE o.id = payment.order_id
             RETURNING o.*
           ), confirmed AS (
             UPDATE payments p SET status = 'CONFIRMED', answered_at = now(), updated_at = now()
             FROM paid WHERE p.id = $1 AND p.order_id = paid.id
             RETURNING p.*
           )
           SELECT row_to_json(confirmed) AS "payment!: Json<Payment>", row_to_json(paid) AS "order!: Json<Order>"
           FROM confirmed, paid"#,
        id,
    )
    .fetch_optional(conn)
    .await?;
    Ok(row.map(|row| (row.payment.0, row.order.0)))
}

/// Marks a RECORDED payment DISPUTED with the seller's reason: a compare-and-set on its status.
pub async fn dispute_payment(conn: &mut PgConnection, id: Uuid, reason: &str) -> Result<Option<Payment>, sqlx::Error> {
    let payment = sqlx::query_scalar!(
        r#"UPDATE payments p SET status = 'DISPUTED', dispute_reason = $2, answered_at = now(), updated_at = now()
           WHERE id = $1 AND status = 'RECORDED'
           RETURNING row_to_json(p) AS "payment!: Json<Payment>""#,
        id,
        reason,
    )
    .fetch_optional(conn)
    .await?;
    Ok(payment.map(|payment| payment.0))
}

#[derive(Debug, Default)]
pub struct OrderFilter {
    pub role: Option<Party>,
    pub listing_id: Option<Uuid>,
    pub after: Option<Uuid>,
    pub limit: i64,
}

pub async fn list(
    executor: impl PgExecutor<'_>,
    agent_id: Uuid,
    filter: &OrderFilter,
) -> Result<Page<Order>, sqlx::Error> {
    // Built at run time: each role and filter gives its own condition, so each reads its index.
    let mut query: QueryBuilder<Postgres> = QueryBuilder::new(format!("SELECT {ORDER_COLUMNS} FROM orders WHERE "));
    match filter.role {
        Some(Party::Buyer) => query.push("buyer_id = ").push_bind(agent_id),
        Some(Party::Seller) => query.push("seller_id = ").push_bind(agent_id),
        None => query.push("(buyer_id = ").push_bind(agent_id).push(" OR seller_id = ").push_bind(agent_id).push(")"),
    };
    if let Some(listing_id) = filter.listing_id {
        query.push(" AND listing_id = ").push_bind(listing_id);
    }
    if let Some(after) = filter.after {
        query.push(" AND id < ").push_bind(after);
    }
    query.push(" ORDER BY id DESC LIMIT ").push_bind(filter.limit + 1);
    let rows = query.build_query_as::<Order>().fetch_all(executor).await?;
    Ok(Page::from_rows(rows, filter.limit, |order| order.id))
}

/// An installment found overdue, with its order.
#[derive(Debug)]
pub struct Overdue {
    pub seq: i32,
    pub order: Order,
}

/// Records up to `batch` installments of agreed plans that are past their due date and not
/// covered by the payments confirmed since their plan (which fill installments in due order),
/// on orders not CANCELLED, and that were not recorded before. The key of
/// `overdue_installments` lets each be recorded once whoever sweeps: a concurrent sweep waits
/// for this one and records nothing.
pub async fn record_overdue(conn: &mut PgConnection, batch: i64) -> Result<Vec<Overdue>, sqlx::Error> {
    let rows = sqlx::query!(
        r#"WITH due AS (
               SELECT o.id AS order_id, (e.ord - 1)::int AS seq
               FROM orders o
               CROSS JOIN LATERAL (
                   SELECT x.ord, (x.item->>'due')::timestamptz AS due_at,
                          sum((x.item->>'amount')::bigint) OVER (ORDER BY x.ord) AS through
                   FROM jsonb_array_elements(o.plan) WITH ORDINALITY AS x(item, ord)
               ) e
               WHERE o.plan IS NOT NULL AND o.status <> 'CANCELLED'
                 AND e.due_at <= now() AND o.paid_amount - o.plan_base < e.through
                 AND NOT EXISTS (SELECT 1 FROM overdue_installments d WHERE d.order_id = o.id AND d.seq = e.ord - 1)
               ORDER BY e.due_at
               LIMIT $1
           ), raised AS (
               INSERT INTO overdue_installments (order_id, seq)
               SELECT order_id, seq FROM due
               ON CONFLICT DO NOTHING
               RETURNING order_id, seq
           )
           SELECT r.seq AS "seq!", row_to_json(o) AS "order!: Json<Order>"
           FROM raised r JOIN orders o ON o.id = r.order_id
           ORDER BY r.order_id, r.seq"#,
        batch,
    )
    .fetch_all(conn)
    .await?;
    Ok(rows.into_iter().map(|row| Overdue { seq: row.seq, order: row.order.0 }).collect())
}
