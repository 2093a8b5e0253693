//! Orders: made by an accepted bid or a purchase at the ask.

use chrono::{DateTime, Utc};
use haggle_api::OrderStatus;
use serde::Deserialize;
use sqlx::types::Json;
use sqlx::{FromRow, PgConnection, PgExecutor, Postgres, QueryBuilder};
use uuid::Uuid;

use super::text::Text;
use super::{Listing, Page};
use haggle_domain::{Currency, Party};

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
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

const ORDER_COLUMNS: &str =
    "id, listing_id, thread_id, bid_id, buyer_id, seller_id, amount, currency, terms, status, created_at, updated_at";

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
    sqlx::query_as!(
        Order,
        r#"SELECT id, listing_id, thread_id, bid_id, buyer_id, seller_id, amount, currency AS "currency: Text<Currency>",
                  terms, status AS "status: Text<OrderStatus>", created_at, updated_at
           FROM orders WHERE id = $1 AND $2 IN (buyer_id, seller_id)"#,
        id,
        agent_id,
    )
    .fetch_optional(executor)
    .await
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
