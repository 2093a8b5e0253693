//! The operator's reads over the whole market, and the marks suspension leaves on an agent.
//!
//! Lists are newest first by id, like the agents' own lists. Ids are UUIDv7, whose first 48 bits
//! are the millisecond they were made in: a time bound on `created_at` is also given as a bound
//! on the primary key ([`id_floor`]), so that a window reads a range of the primary key index
//! instead of the whole table.

use chrono::{DateTime, Duration, Utc};
use sqlx::types::Json;
use sqlx::{FromRow, PgConnection, PgExecutor, Postgres, QueryBuilder};
use uuid::Uuid;

use super::text::Text;
use super::{Bid, Order, Page, Thread};
use haggle_api::{Event, EventType, WebhookStatus};
use haggle_domain::{BidStatus, Currency, ThreadStatus, Tier};

/// An agent as the operator reads it.
#[derive(Debug, Clone, PartialEq, Eq, FromRow)]
pub struct AgentRecord {
    pub id: Uuid,
    pub name: String,
    #[sqlx(try_from = "String")]
    pub tier: Tier,
    pub agency_id: Option<String>,
    pub advertiser_id: Option<String>,
    pub seat_id: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub last_active_at: Option<DateTime<Utc>>,
    pub suspended_at: Option<DateTime<Utc>>,
    pub suspended_reason: Option<String>,
    pub open_threads: i64,
}

/// The columns of [`AgentRecord`] over `agents a`. Each derived column is a few index probes per
/// agent: the newest inbox entry (`event_recipients`' primary key, read backwards), the newest
/// listing and key (their `(owner, id)` indexes), and live threads through the seller's
/// listings (the partial index of ACTIVE threads) and the buyer's threads.
const AGENT_RECORD: &str = "a.id, a.name, a.tier, a.agency_id, a.advertiser_id, a.seat_id, a.created_at, a.updated_at,
     GREATEST(
         (SELECT e.created_at FROM event_recipients r JOIN events e ON e.id = coalesce(r.event_id, r.seq)
          WHERE r.agent_id = a.id ORDER BY r.seq DESC LIMIT 1),
         (SELECT max(l.created_at) FROM (SELECT created_at FROM listings WHERE seller_id = a.id ORDER BY id DESC LIMIT 1) l),
         (SELECT max(k.created_at) FROM (SELECT created_at FROM api_keys WHERE agent_id = a.id ORDER BY id DESC LIMIT 1) k)
     ) AS last_active_at,
     a.suspended_at, a.suspended_reason,
     (SELECT count(*) FROM listings l JOIN threads t ON t.listing_id = l.id
       WHERE l.seller_id = a.id AND t.status = 'ACTIVE' AND t.expires_at > now())
     + (SELECT count(*) FROM threads t WHERE t.buyer_id = a.id AND t.status = 'ACTIVE' AND t.expires_at > now())
       AS open_threads";

/// Which agents to list.
#[derive(Debug, Default)]
pub struct AgentFilter {
    /// A name contains it (case-insensitively), or it is the id.
    pub q: Option<String>,
    pub tier: Option<Tier>,
    pub suspended: Option<bool>,
    pub after: Option<Uuid>,
    pub limit: i64,
}

pub async fn agents(executor: impl PgExecutor<'_>, filter: &AgentFilter) -> Result<Page<AgentRecord>, sqlx::Error> {
    // Built at run time: each filter gives its own condition, so a suspended filter reads its
    // partial index and a cursor bounds the primary key.
    let mut query: QueryBuilder<Postgres> =
        QueryBuilder::new(format!("SELECT {AGENT_RECORD} FROM agents a WHERE true"));
    if let Some(q) = &filter.q {
        query.push(" AND (a.name ILIKE ").push_bind(super::like_pattern(q));
        if let Ok(id) = Uuid::parse_str(q.trim()) {
            query.push(" OR a.id = ").push_bind(id);
        }
        query.push(")");
    }
    if let Some(tier) = filter.tier {
        query.push(" AND a.tier = ").push_bind(tier.as_str());
    }
    match filter.suspended {
        Some(true) => query.push(" AND a.suspended_at IS NOT NULL"),
        Some(false) => query.push(" AND a.suspended_at IS NULL"),
        None => &mut query,
    };
    if let Some(after) = filter.after {
        query.push(" AND a.id < ").push_bind(after);
    }
    query.push(" ORDER BY a.id DESC LIMIT ").push_bind(filter.limit + 1);
    let rows = query.build_query_as::<AgentRecord>().fetch_all(executor).await?;
    Ok(Page::from_rows(rows, filter.limit, |agent| agent.id))
}

pub async fn agent(executor: impl PgExecutor<'_>, id: Uuid) -> Result<Option<AgentRecord>, sqlx::Error> {
    // Built at run time: it reads the list's columns, `AGENT_RECORD`, which the list splices.
    sqlx::query_as(&format!("SELECT {AGENT_RECORD} FROM agents a WHERE a.id = $1"))
        .bind(id)
        .fetch_optional(executor)
        .await
}

/// Locks the agent's row (leaving its key to be shared, as `agents::lock` does); whether it is
/// suspended, or `None` if there is no such agent.
pub async fn lock_agent(conn: &mut PgConnection, id: Uuid) -> Result<Option<bool>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"SELECT suspended_at IS NOT NULL AS "suspended!" FROM agents WHERE id = $1 FOR NO KEY UPDATE"#,
        id
    )
    .fetch_optional(conn)
    .await
}

/// Marks the agent suspended (the caller holds its lock and knows it is not).
pub async fn mark_suspended(conn: &mut PgConnection, id: Uuid, reason: Option<&str>) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE agents SET suspended_at = now(), suspended_reason = $2, updated_at = now() WHERE id = $1",
        id,
        reason,
    )
    .execute(conn)
    .await
    .map(drop)
}

/// Clears the agent's suspension, if it has one.
pub async fn clear_suspension(conn: &mut PgConnection, id: Uuid) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE agents SET suspended_at = NULL, suspended_reason = NULL, updated_at = now()
         WHERE id = $1 AND suspended_at IS NOT NULL",
        id,
    )
    .execute(conn)
    .await
    .map(drop)
}

/// Locks the listings of the agent's live threads, in id order: listings are locked before
/// threads.
pub async fn lock_listings_of_live_threads(conn: &mut PgConnection, agent_id: Uuid) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "SELECT 1 AS locked FROM listings WHERE id IN (
             SELECT listing_id FROM threads WHERE (buyer_id = $1 OR seller_id = $1) AND status = 'ACTIVE')
         ORDER BY id FOR UPDATE",
        agent_id,
    )
    .fetch_all(conn)
    .await
    .map(drop)
}

/// Locks the agent's live threads (as buyer or seller), in id order, and reads their pending
/// bids' deadlines. The caller ends them.
pub async fn lock_live_threads(
    conn: &mut PgConnection,
    agent_id: Uuid,
) -> Result<Vec<super::rows::BidDeadline>, sqlx::Error> {
    let locked = sqlx::query_scalar!(
        "SELECT id FROM threads WHERE (buyer_id = $1 OR seller_id = $1) AND status = 'ACTIVE' ORDER BY id FOR UPDATE",
        agent_id,
    )
    .fetch_all(&mut *conn)
    .await?;
    if locked.is_empty() {
        return Ok(Vec::new());
    }
    sqlx::query_as!(
        super::rows::BidDeadline,
        r#"SELECT b.id AS bid_id, b.status AS "status: Text<BidStatus>", b.expires_at, now() AS "db_now!"
           FROM threads t JOIN bids b ON b.id = t.last_bid_id
           WHERE t.id = ANY($1) AND t.status = 'ACTIVE' AND b.status = 'PENDING'"#,
        &locked,
    )
    .fetch_all(conn)
    .await
}

/// Revokes any agent's key. Returns its agent, or `None` if there is no such key. A key already
/// revoked keeps its first revocation time.
pub async fn revoke_key(conn: &mut PgConnection, key_id: Uuid) -> Result<Option<Uuid>, sqlx::Error> {
    sqlx::query_scalar!(
        "UPDATE api_keys SET revoked_at = COALESCE(revoked_at, now()) WHERE id = $1 RETURNING agent_id",
        key_id
    )
    .fetch_optional(conn)
    .await
}

/// The smallest UUIDv7 of the millisecond an hour before `at`: every row made at `at` or later
/// has a greater id, even if the clock of the instance that made its id was an hour behind the
/// database's (ids are made by the instances, `created_at` by the database).
pub fn id_floor(at: DateTime<Utc>) -> Uuid {
    let millis = (at - Duration::hours(1)).timestamp_millis().max(0) as u64;
    uuid::Builder::from_unix_timestamp_millis(millis, &[0; 10]).into_uuid()
}

/// Which threads to list, market-wide.
#[derive(Debug, Default)]
pub struct ThreadFilter {
    pub status: Option<ThreadStatus>,
    pub listing_id: Option<Uuid>,
    /// Threads the agent is buyer or seller of.
    pub agent_id: Option<Uuid>,
    /// Threads opened at or after.
    pub since: Option<DateTime<Utc>>,
    /// Only refunds escalated and not yet decided.
    pub escalated: bool,
    pub after: Option<Uuid>,
    pub limit: i64,
}

/// Threads, newest first. A status filter means the effective status, as on `/v1/threads`.
pub async fn threads(executor: impl PgExecutor<'_>, filter: &ThreadFilter) -> Result<Page<Thread>, sqlx::Error> {
    // Built at run time: each filter gives its own condition, so each reads its index.
    let mut query: QueryBuilder<Postgres> = QueryBuilder::new("SELECT row_to_json(threads) FROM threads WHERE true");
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
    if let Some(agent_id) = filter.agent_id {
        query.push(" AND (buyer_id = ").push_bind(agent_id).push(" OR seller_id = ").push_bind(agent_id).push(")");
    }
    if filter.escalated {
        query.push(" AND escalated_at IS NOT NULL AND decided_at IS NULL");
    }
    if let Some(since) = filter.since {
        query.push(" AND id >= ").push_bind(id_floor(since)).push(" AND created_at >= ").push_bind(since);
    }
    if let Some(after) = filter.after {
        query.push(" AND id < ").push_bind(after);
    }
    query.push(" ORDER BY id DESC LIMIT ").push_bind(filter.limit + 1);
    let rows: Vec<Json<Thread>> = query.build_query_scalar().fetch_all(executor).await?;
    let rows = rows.into_iter().map(|thread| thread.0).collect();
    Ok(Page::from_rows(rows, filter.limit, |thread| thread.id))
}

/// Which orders to list, market-wide.
#[derive(Debug, Default)]
pub struct OrderFilter {
    /// Orders the agent is buyer or seller of.
    pub agent_id: Option<Uuid>,
    pub listing_id: Option<Uuid>,
    /// Orders made at or after.
    pub since: Option<DateTime<Utc>>,
    pub after: Option<Uuid>,
    pub limit: i64,
}

pub async fn orders(executor: impl PgExecutor<'_>, filter: &OrderFilter) -> Result<Page<Order>, sqlx::Error> {
    // Built at run time: each filter gives its own condition, so each reads its index.
    let mut query: QueryBuilder<Postgres> =
        QueryBuilder::new(format!("SELECT {} FROM orders WHERE true", super::orders::ORDER_COLUMNS));
    if let Some(agent_id) = filter.agent_id {
        query.push(" AND (buyer_id = ").push_bind(agent_id).push(" OR seller_id = ").push_bind(agent_id).push(")");
    }
    if let Some(listing_id) = filter.listing_id {
        query.push(" AND listing_id = ").push_bind(listing_id);
    }
    if let Some(since) = filter.since {
        query.push(" AND id >= ").push_bind(id_floor(since)).push(" AND created_at >= ").push_bind(since);
    }
    if let Some(after) = filter.after {
        query.push(" AND id < ").push_bind(after);
    }
    query.push(" ORDER BY id DESC LIMIT ").push_bind(filter.limit + 1);
    let rows = query.build_query_as::<Order>().fetch_all(executor).await?;
    Ok(Page::from_rows(rows, filter.limit, |order| order.id))
}

/// Any order, whoever's it is.
pub async fn order(executor: impl PgExecutor<'_>, id: Uuid) -> Result<Option<Order>, sqlx::Error> {
    // Built at run time from the shared column list, as the list of orders is.
    sqlx::query_as::<_, Order>(&format!("SELECT {} FROM orders WHERE id = $1", super::orders::ORDER_COLUMNS))
        .bind(id)
        .fetch_optional(executor)
        .await
}

/// The negotiations on an order (a refund, a cancellation, any kind), oldest first, each with
/// its bids in round order: one statement, so all are read from the same snapshot.
pub async fn negotiations_of_order(
    executor: impl PgExecutor<'_>,
    order_id: Uuid,
) -> Result<Vec<(Thread, Vec<Bid>)>, sqlx::Error> {
    let rows: Vec<(Json<Thread>, Json<Vec<Bid>>)> = sqlx::query_as(
        "SELECT row_to_json(t), \
                COALESCE((SELECT json_agg(b ORDER BY b.round) FROM bids b WHERE b.thread_id = t.id), '[]') \
         FROM threads t WHERE t.order_id = $1 ORDER BY t.id",
    )
    .bind(order_id)
    .fetch_all(executor)
    .await?;
    Ok(rows.into_iter().map(|(thread, bids)| (thread.0, bids.0)).collect())
}

/// The order a negotiation on an order is on; `None` for a price negotiation or no thread.
pub async fn order_of_thread(executor: impl PgExecutor<'_>, thread_id: Uuid) -> Result<Option<Uuid>, sqlx::Error> {
    let order: Option<Option<Uuid>> = sqlx::query_scalar("SELECT order_id FROM threads WHERE id = $1")
        .bind(thread_id)
        .fetch_optional(executor)
        .await?;
    Ok(order.flatten())
}

/// A webhook as the operator reads it.
#[derive(Debug, Clone, PartialEq, Eq, FromRow)]
pub struct WebhookRecord {
    pub id: Uuid,
    pub agent_id: Uuid,
    pub agent_name: String,
    pub url: String,
    pub events: Vec<String>,
    #[sqlx(try_from = "String")]
    pub status: WebhookStatus,
    pub disabled_reason: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub pending: i64,
    pub succeeded: i64,
    pub failed: i64,
    pub last_failure_at: Option<DateTime<Utc>>,
}

/// Webhooks, newest first. `failing`: only those DISABLED, or with a delivery that FAILED, or
/// one still PENDING after a failed attempt.
pub async fn webhooks(
    executor: impl PgExecutor<'_>,
    failing: bool,
    after: Option<Uuid>,
    limit: i64,
) -> Result<Page<WebhookRecord>, sqlx::Error> {
    let rows = sqlx::query_as!(
        WebhookRecord,
        r#"SELECT w.id, w.agent_id, a.name AS agent_name, w.url, w.events, w.status AS "status: Text<WebhookStatus>",
                w.disabled_reason, w.created_at, w.updated_at, c.pending AS "pending!", c.succeeded AS "succeeded!",
                c.failed AS "failed!",
                (SELECT max(x.started_at) FROM webhook_deliveries d JOIN webhook_attempts x ON x.delivery_id = d.id
                  WHERE d.webhook_id = w.id
                    AND (x.response_status IS NULL OR x.response_status NOT BETWEEN 200 AND 299)) AS last_failure_at
         FROM webhooks w JOIN agents a ON a.id = w.agent_id
         CROSS JOIN LATERAL (
             SELECT count(*) FILTER (WHERE d.status = 'PENDING') AS pending,
                    count(*) FILTER (WHERE d.status = 'SUCCEEDED') AS succeeded,
                    count(*) FILTER (WHERE d.status = 'FAILED') AS failed,
                    count(*) FILTER (WHERE d.status = 'PENDING' AND d.attempts > 0) AS retrying
             FROM webhook_deliveries d WHERE d.webhook_id = w.id) c
         WHERE ($1::uuid IS NULL OR w.id < $1)
           AND (NOT $2 OR w.status = 'DISABLED' OR c.failed > 0 OR c.retrying > 0)
         ORDER BY w.id DESC LIMIT $3"#,
        after,
        failing,
        limit + 1,
    )
    .fetch_all(executor)
    .await?;
    Ok(Page::from_rows(rows, limit, |webhook| webhook.id))
}

/// Whether a webhook exists, whoever owns it.
pub async fn webhook_exists(executor: impl PgExecutor<'_>, id: Uuid) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar!(r#"SELECT EXISTS (SELECT 1 FROM webhooks WHERE id = $1) AS "exists!""#, id)
        .fetch_one(executor)
        .await
}

/// Where the operator's stream of the whole market stands: the writing transaction (`xid`) and
/// the id of the last event it sent. Events are sent in the order of their transactions, and
/// within one in the order written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MarketPosition {
    pub xid: i64,
    pub id: i64,
}

/// The position after the event `after` (its own, or where it would be if it was purged), or,
/// with none, before the transactions still running (only what commits from now on).
pub async fn market_position(executor: impl PgExecutor<'_>, after: Option<i64>) -> Result<MarketPosition, sqlx::Error> {
    let xid = sqlx::query_scalar!(
        r#"SELECT coalesce((SELECT xid FROM events WHERE id = $1), (SELECT min(xid) FROM events WHERE id > $1),
                           events_horizon()) AS "xid!""#,
        after,
    )
    .fetch_one(executor)
    .await?;
    Ok(MarketPosition { xid, id: after.unwrap_or(0) })
}

/// Events of the whole market after `after`, in the order of their transactions, of only the
/// transactions every one before which has ended (`events_horizon()`, in the schema): no event
/// can appear later before them. The flag says whether committed events wait behind a
/// transaction still running (to be read again soon).
pub async fn events_after(
    executor: impl PgExecutor<'_>,
    after: MarketPosition,
    limit: i64,
) -> Result<(Vec<(MarketPosition, Event)>, bool), sqlx::Error> {
    let rows = sqlx::query!(
        r#"WITH horizon AS (SELECT events_horizon() AS xid)
           SELECT e.id AS "id?", e.xid AS "xid?", e.type AS "kind?: Text<EventType>", e.created_at AS "created_at?",
                  e.listing_id, e.thread_id, e.bid_id, e.order_id, e.data AS "data?",
                  EXISTS (SELECT 1 FROM events w WHERE w.xid >= (SELECT xid FROM horizon) AND (w.xid, w.id) > ($1, $2))
                      AS "waiting!"
           FROM (SELECT 1) one
           LEFT JOIN LATERAL (
               SELECT * FROM events e
               WHERE (e.xid, e.id) > ($1, $2) AND e.xid < (SELECT xid FROM horizon)
               ORDER BY e.xid, e.id LIMIT $3) e ON true"#,
        after.xid,
        after.id,
        limit,
    )
    .fetch_all(executor)
    .await?;
    let waiting = rows.first().is_some_and(|row| row.waiting);
    let events = rows
        .into_iter()
        .filter_map(|row| {
            let (Some(id), Some(xid), Some(kind), Some(created_at), Some(data)) =
                (row.id, row.xid, row.kind, row.created_at, row.data)
            else {
                return None;
            };
            let event = super::events::EventRow {
                id,
                kind: kind.0,
                created_at,
                listing_id: row.listing_id,
                thread_id: row.thread_id,
                bid_id: row.bid_id,
                order_id: row.order_id,
                data,
            };
            Some((MarketPosition { xid, id }, Event::from(event)))
        })
        .collect();
    Ok((events, waiting))
}

/// The market's counts now.
#[derive(Debug, Clone, Copy, FromRow)]
pub struct Totals {
    pub listings_active: i64,
    pub listings_total: i64,
    pub agents_total: i64,
    pub agents_suspended: i64,
    pub active_negotiations: i64,
}

pub async fn totals(executor: impl PgExecutor<'_>) -> Result<Totals, sqlx::Error> {
    sqlx::query_as!(
        Totals,
        r#"SELECT (SELECT count(*) FROM listings WHERE status = 'ACTIVE') AS "listings_active!",
                  (SELECT count(*) FROM listings) AS "listings_total!",
                  (SELECT count(*) FROM agents) AS "agents_total!",
                  (SELECT count(*) FROM agents WHERE suspended_at IS NOT NULL) AS "agents_suspended!",
                  (SELECT count(*) FROM threads WHERE status = 'ACTIVE' AND expires_at > now()) AS "active_negotiations!""#,
    )
    .fetch_one(executor)
    .await
}

/// One hour of the window, as [`hours`] reads it.
#[derive(Debug, Clone, FromRow)]
pub struct Hour {
    pub hour: DateTime<Utc>,
    pub deals: i64,
    pub negotiations_opened: i64,
    /// `[{currency, amount}]`, by currency.
    pub volume: Json<Vec<VolumeRow>>,
}

#[derive(Debug, Clone, serde::Deserialize)]
pub struct VolumeRow {
    pub currency: Currency,
    pub amount: i64,
}

/// The window of `hours` hours that ends with the current one, by the database's clock: the
/// start of its first hour and of its last.
pub async fn window(executor: impl PgExecutor<'_>, hours: i64) -> Result<(DateTime<Utc>, DateTime<Utc>), sqlx::Error> {
    let row = sqlx::query!(
        r#"SELECT date_trunc('hour', now(), 'UTC') - ($1::bigint - 1) * interval '1 hour' AS "first!",
                  date_trunc('hour', now(), 'UTC') AS "last!""#,
        hours,
    )
    .fetch_one(executor)
    .await?;
    Ok((row.first, row.last))
}

/// Every hour from `from` to `to` (starts of hours), oldest first, with the orders and threads
/// made in it. Orders and threads are read through their primary key from [`id_floor`] on,
/// then bucketed by `created_at`.
pub async fn hours(
    executor: impl PgExecutor<'_>,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<Vec<Hour>, sqlx::Error> {
    sqlx::query_as!(
        Hour,
        r#"WITH series AS (
             SELECT generate_series($1::timestamptz, $3::timestamptz, interval '1 hour') AS hour
         ), deals AS (
             SELECT date_trunc('hour', created_at, 'UTC') AS hour, currency, count(*) AS deals, sum(amount)::bigint AS amount
             FROM orders WHERE id >= $2 AND created_at >= $1
             GROUP BY 1, 2
         ), opened AS (
             SELECT date_trunc('hour', created_at, 'UTC') AS hour, count(*) AS opened
             FROM threads WHERE id >= $2 AND created_at >= $1
             GROUP BY 1
         ), by_hour AS (
             SELECT hour, sum(deals)::bigint AS deals,
                    json_agg(json_build_object('currency', currency, 'amount', amount) ORDER BY currency) AS volume
             FROM deals GROUP BY hour
         )
         SELECT s.hour AS "hour!", COALESCE(d.deals, 0) AS "deals!", COALESCE(o.opened, 0) AS "negotiations_opened!",
                COALESCE(d.volume, '[]') AS "volume!: Json<Vec<VolumeRow>>"
         FROM series s LEFT JOIN by_hour d ON d.hour = s.hour LEFT JOIN opened o ON o.hour = s.hour
         ORDER BY s.hour"#,
        from,
        id_floor(from),
        to,
    )
    .fetch_all(executor)
    .await
}

/// How the threads opened since `from` ended.
#[derive(Debug, Clone, Copy, FromRow)]
pub struct Outcomes {
    pub ended: i64,
    pub accepted: i64,
    pub median_rounds_to_deal: Option<f64>,
}

/// The threads opened since `from` that have ended (an ACTIVE one past its deadline has
/// expired), those that ended ACCEPTED, and the median rounds of the latter.
pub async fn outcomes(executor: impl PgExecutor<'_>, from: DateTime<Utc>) -> Result<Outcomes, sqlx::Error> {
    sqlx::query_as!(
        Outcomes,
        r#"SELECT count(*) FILTER (WHERE status <> 'ACTIVE' OR expires_at <= now()) AS "ended!",
                  count(*) FILTER (WHERE status = 'ACCEPTED') AS "accepted!",
                  percentile_cont(0.5) WITHIN GROUP (ORDER BY rounds) FILTER (WHERE status = 'ACCEPTED')
                      AS median_rounds_to_deal
           FROM threads WHERE id >= $2 AND created_at >= $1"#,
        from,
        id_floor(from),
    )
    .fetch_one(executor)
    .await
}
