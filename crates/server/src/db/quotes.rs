//! Quotes of the IAB-style deals routes: a buyer's price for a listing, good until it expires,
//! which booking turns into an order (see `market::quotes`).

use chrono::{DateTime, NaiveDate, Utc};
use sqlx::{FromRow, PgConnection, PgExecutor};
use uuid::Uuid;

use super::text::Text;
use haggle_domain::Currency;
use haggle_domain::money::Amount;

/// A quote as stored.
#[derive(Debug, Clone, PartialEq, Eq, FromRow)]
pub struct Quote {
    pub id: Uuid,
    pub buyer_id: Uuid,
    pub listing_id: Uuid,
    /// The agreed order the quote restates, or the order its booking made.
    pub order_id: Option<Uuid>,
    pub amount: i64,
    #[sqlx(try_from = "String")]
    pub currency: Currency,
    pub deal_type: String,
    pub impressions: Option<i64>,
    pub flight_start: Option<NaiveDate>,
    pub flight_end: Option<NaiveDate>,
    pub booked_at: Option<DateTime<Utc>>,
    pub expires_at: DateTime<Utc>,
    pub created_at: DateTime<Utc>,
}

pub async fn insert(conn: &mut PgConnection, quote: &Quote) -> Result<Quote, sqlx::Error> {
    sqlx::query_as!(
        Quote,
        r#"INSERT INTO quotes (id, buyer_id, listing_id, order_id, amount, currency, deal_type, impressions,
                               flight_start, flight_end, expires_at)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
           RETURNING id, buyer_id, listing_id, order_id, amount, currency AS "currency: Text<Currency>", deal_type,
                     impressions, flight_start, flight_end, booked_at, expires_at, created_at"#,
        quote.id,
        quote.buyer_id,
        quote.listing_id,
        quote.order_id,
        quote.amount,
        quote.currency.as_str(),
        quote.deal_type,
        quote.impressions,
        quote.flight_start,
        quote.flight_end,
        quote.expires_at,
    )
    .fetch_one(conn)
    .await
}

/// The buyer's quote, locked until the transaction ends, so that one booking at a time decides
/// its order.
pub async fn lock(conn: &mut PgConnection, id: Uuid, buyer_id: Uuid) -> Result<Option<Quote>, sqlx::Error> {
    sqlx::query_as!(
        Quote,
        r#"SELECT id, buyer_id, listing_id, order_id, amount, currency AS "currency: Text<Currency>", deal_type,
                  impressions, flight_start, flight_end, booked_at, expires_at, created_at
           FROM quotes WHERE id = $1 AND buyer_id = $2 FOR UPDATE"#,
        id,
        buyer_id,
    )
    .fetch_optional(conn)
    .await
}

/// Marks the quote booked as `order_id` (kept if it was booked before).
pub async fn book(conn: &mut PgConnection, id: Uuid, order_id: Uuid) -> Result<Quote, sqlx::Error> {
    sqlx::query_as!(
        Quote,
        r#"UPDATE quotes SET order_id = $2, booked_at = coalesce(booked_at, now())
           WHERE id = $1
           RETURNING id, buyer_id, listing_id, order_id, amount, currency AS "currency: Text<Currency>", deal_type,
                     impressions, flight_start, flight_end, booked_at, expires_at, created_at"#,
        id,
        order_id,
    )
    .fetch_one(conn)
    .await
}

/// The buyer's newest order on the listing at `amount`, which a quote at that price restates.
pub async fn agreed_order(
    executor: impl PgExecutor<'_>,
    buyer_id: Uuid,
    listing_id: Uuid,
    amount: Amount,
) -> Result<Option<Uuid>, sqlx::Error> {
    sqlx::query_scalar!(
        "SELECT id FROM orders WHERE listing_id = $1 AND buyer_id = $2 AND amount = $3 ORDER BY id DESC LIMIT 1",
        listing_id,
        buyer_id,
        amount.minor_units(),
    )
    .fetch_optional(executor)
    .await
}

/// Deletes up to `batch` quotes that ran out unbooked before `before`.
pub async fn purge_unbooked(
    executor: impl PgExecutor<'_>,
    before: DateTime<Utc>,
    batch: i64,
) -> Result<u64, sqlx::Error> {
    let done = sqlx::query!(
        "DELETE FROM quotes WHERE id = ANY(ARRAY(
             SELECT id FROM quotes WHERE booked_at IS NULL AND expires_at < $1
             LIMIT $2 FOR UPDATE SKIP LOCKED))",
        before,
        batch,
    )
    .execute(executor)
    .await?;
    Ok(done.rows_affected())
}
