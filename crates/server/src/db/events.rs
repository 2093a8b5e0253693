//! The outbox, the published event log, and each agent's view of it.

use std::sync::LazyLock;

use chrono::{DateTime, Utc};
use haggle_api::{Event, EventType};
use serde_json::Value;
use sqlx::postgres::PgArguments;
use sqlx::query::QueryAs;
use sqlx::{FromRow, PgConnection, PgExecutor, Postgres};
use uuid::Uuid;

use super::tasks::{self, Requeue, STORED_PENDING};
use super::text::Text;

/// The NOTIFY channel that carries published events' ids and recipients.
pub const CHANNEL: &str = "haggle_events";

/// The NOTIFY channel that tells webhook workers that deliveries were queued.
pub const DELIVERIES_CHANNEL: &str = "haggle_deliveries";

/// An event about to be written: its kind, who may see it, the ids it concerns and a snapshot
/// of the objects as the change left them.
#[derive(Debug, Clone)]
pub struct NewEvent {
    pub kind: EventType,
    pub audience: Vec<Uuid>,
    pub listing_id: Option<Uuid>,
    pub thread_id: Option<Uuid>,
    pub bid_id: Option<Uuid>,
    pub order_id: Option<Uuid>,
    pub data: Value,
}

/// What writing an outbox did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, FromRow)]
pub struct Written {
    pub events: i64,
    /// New pending bids queued for their responder's policy (`auto_tasks`).
    pub tasks: i64,
}

/// Events as a statement binds them, `$1` to `$9`: one array a field, every event's audience
/// one after another in `audiences` (event `i`'s from `audience_from[i]` to `audience_to[i]`,
/// an array slice's bounds), which [`EVENT_ROWS`] unnests.
pub struct EventArrays<'a> {
    kinds: Vec<&'static str>,
    audiences: Vec<Uuid>,
    audience_from: Vec<i32>,
    audience_to: Vec<i32>,
    listing_ids: Vec<Option<Uuid>>,
    thread_ids: Vec<Option<Uuid>>,
    bid_ids: Vec<Option<Uuid>>,
    order_ids: Vec<Option<Uuid>>,
    data: Vec<&'a Value>,
}

impl<'a> FromIterator<&'a NewEvent> for EventArrays<'a> {
    fn from_iter<I: IntoIterator<Item = &'a NewEvent>>(events: I) -> EventArrays<'a> {
        let mut arrays = EventArrays {
            kinds: Vec::new(),
            audiences: Vec::new(),
            audience_from: Vec::new(),
            audience_to: Vec::new(),
            listing_ids: Vec::new(),
            thread_ids: Vec::new(),
            bid_ids: Vec::new(),
            order_ids: Vec::new(),
            data: Vec::new(),
        };
        for event in events {
            arrays.kinds.push(event.kind.as_str());
            arrays.audience_from.push(slice_bound(arrays.audiences.len() + 1));
            arrays.audiences.extend_from_slice(&event.audience);
            arrays.audience_to.push(slice_bound(arrays.audiences.len()));
            arrays.listing_ids.push(event.listing_id);
            arrays.thread_ids.push(event.thread_id);
            arrays.bid_ids.push(event.bid_id);
            arrays.order_ids.push(event.order_id);
            arrays.data.push(&event.data);
        }
        arrays
    }
}

/// A bound of an array slice: an event's audience is far from `i32::MAX` agents.
fn slice_bound(index: usize) -> i32 {
    i32::try_from(index).expect("an audience fits an array")
}

impl<'a> EventArrays<'a> {
    /// Binds the arrays as `$1` to `$9`, to a statement that reads them through [`EVENT_ROWS`].
    pub fn bind<O>(self, query: QueryAs<'a, Postgres, O, PgArguments>) -> QueryAs<'a, Postgres, O, PgArguments> {
        query
            .bind(self.kinds)
            .bind(self.audiences)
            .bind(self.audience_from)
            .bind(self.audience_to)
            .bind(self.listing_ids)
            .bind(self.thread_ids)
            .bind(self.bid_ids)
            .bind(self.order_ids)
            .bind(self.data)
    }
}

/// The events bound as [`EventArrays`] (`$1` to `$9`), as the relation `e` with the outbox's
/// columns and `n`, each event's place in the batch (from 1).
pub const EVENT_ROWS: &str = "(SELECT u.type, ($2::uuid[])[u.audience_from : u.audience_to] AS audience, u.listing_id,
             u.thread_id, u.bid_id, u.order_id, u.data, u.n
      FROM unnest($1::text[], $3::int[], $4::int[], $5::uuid[], $6::uuid[], $7::uuid[], $8::uuid[], $9::jsonb[])
           WITH ORDINALITY AS u(type, audience_from, audience_to, listing_id, thread_id, bid_id, order_id, data, n)
     ) e";

/// Writes events into the outbox, in the caller's transaction, and in the same statement
/// queues a task for each new pending bid (`bid.placed`, `bid.countered`) whose responder has a
/// policy covering it, announcing those on `haggle_auto` (delivered at commit).
pub async fn insert_outbox(conn: &mut PgConnection, events: &[NewEvent]) -> Result<Written, sqlx::Error> {
    // Built at run time: it splices the rule that queues tasks (`tasks::queue_tasks`).
    static STATEMENT: LazyLock<String> = LazyLock::new(|| {
        let new_pending = format!(
            "(SELECT p.* FROM written w JOIN {} p ON p.bid_id = w.bid_id
              WHERE w.type IN ('{}', '{}'))",
            STORED_PENDING,
            EventType::BidPlaced,
            EventType::BidCountered,
        );
        format!(
            "WITH written AS (
                 INSERT INTO outbox (type, audience, listing_id, thread_id, bid_id, order_id, data)
                 SELECT e.type, e.audience, e.listing_id, e.thread_id, e.bid_id, e.order_id, e.data
                 FROM {EVENT_ROWS}
                 ORDER BY e.n
                 RETURNING type, bid_id
             ), {}
             SELECT (SELECT count(*) FROM written) AS events, (SELECT count(*) FROM queued) AS tasks,
                    (SELECT count(*) FROM announced) AS announced",
            tasks::queue_tasks(&new_pending, Requeue::Never)
        )
    });
    events.iter().collect::<EventArrays>().bind(sqlx::query_as(STATEMENT.as_str())).fetch_one(conn).await
}

/// A batch that was published: the highest id, and every agent it concerned.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Published {
    pub count: usize,
    pub last_id: i64,
    pub recipients: Vec<Uuid>,
    /// Webhook deliveries queued for the batch.
    pub deliveries: usize,
    /// How long each event waited to be published, from its writing, in seconds.
    pub lags: Vec<f64>,
}

struct PublishedRow {
    count: i64,
    last_id: Option<i64>,
    deliveries: i64,
    recipients: Option<Vec<Uuid>>,
    lags: Option<Vec<f64>>,
}

/// Publishes up to `batch` committed outbox rows in one transaction: numbers them after the last
/// published id, fans them out to their recipients, and queues their webhook deliveries. Both
/// statements run after the sequence row is locked, so they see every publisher before them.
pub async fn publish(conn: &mut PgConnection, batch: i64) -> Result<Published, sqlx::Error> {
    // The batch statement below is large, and PostgreSQL keeps choosing to plan it afresh for
    // each batch, which costs about a third of running it. Its generic plan is as good, so the
    // transaction asks for that, in the statement that takes the lock.
    sqlx::query!(
        "SELECT set_config('plan_cache_mode', 'force_generic_plan', true), last_id FROM event_sequence FOR UPDATE",
    )
    .fetch_optional(&mut *conn)
    .await?;
    let row = sqlx::query_as!(
        PublishedRow,
        r#"WITH batch AS (
             SELECT seq FROM outbox ORDER BY seq LIMIT $1
         ), moved AS (
             DELETE FROM outbox o USING batch WHERE o.seq = batch.seq RETURNING o.*
         ), base AS (
             UPDATE event_sequence SET last_id = last_id + (SELECT count(*) FROM moved)
             RETURNING last_id - (SELECT count(*) FROM moved) AS first
         ), numbered AS (
             SELECT base.first + row_number() OVER (ORDER BY moved.seq) AS id, moved.*
             FROM moved, base
         ), published AS (
             INSERT INTO events (id, type, audience, listing_id, thread_id, bid_id, order_id, data, created_at)
             SELECT id, type, audience, listing_id, thread_id, bid_id, order_id, data, created_at FROM numbered
             RETURNING id, type, audience
         ), inboxes AS (
             INSERT INTO event_recipients (agent_id, event_id)
             SELECT DISTINCT unnest(audience), id FROM published
         ), deliveries AS (
             INSERT INTO webhook_deliveries (id, webhook_id, event_id, status, next_attempt_at)
             SELECT gen_random_uuid(), w.id, p.id, 'PENDING', now()
             FROM published p
             JOIN webhooks w ON w.agent_id = ANY (p.audience) AND w.status = 'ACTIVE'
                            AND (p.type = ANY (w.events) OR '*' = ANY (w.events))
             RETURNING 1
         )
         SELECT count(*) AS "count!", max(id) AS last_id, (SELECT count(*) FROM deliveries) AS "deliveries!",
                (SELECT array_agg(DISTINCT a) FROM published, unnest(audience) a) AS recipients,
                (SELECT array_agg(EXTRACT(EPOCH FROM clock_timestamp() - created_at)::float8) FROM numbered) AS lags
         FROM published"#,
        batch,
    )
    .fetch_one(&mut *conn)
    .await?;
    Ok(Published {
        count: row.count as usize,
        last_id: row.last_id.unwrap_or(0),
        recipients: row.recipients.unwrap_or_default(),
        deliveries: row.deliveries as usize,
        lags: row.lags.unwrap_or_default(),
    })
}

/// Sends NOTIFY payloads; they are delivered when the caller's transaction commits.
pub async fn notify(conn: &mut PgConnection, channel: &str, payloads: &[String]) -> Result<(), sqlx::Error> {
    sqlx::query!("SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p", channel, payloads)
        .execute(conn)
        .await
        .map(drop)
}

/// A published event as stored; shown as [`Event`].
#[derive(Debug, Clone, FromRow)]
pub struct EventRow {
    pub id: i64,
    #[sqlx(rename = "type", try_from = "String")]
    pub kind: EventType,
    pub created_at: DateTime<Utc>,
    pub listing_id: Option<Uuid>,
    pub thread_id: Option<Uuid>,
    pub bid_id: Option<Uuid>,
    pub order_id: Option<Uuid>,
    pub data: serde_json::Value,
}

/// The agent's events after `after`, oldest first.
pub async fn for_agent(
    executor: impl PgExecutor<'_>,
    agent_id: Uuid,
    after: i64,
    limit: i64,
) -> Result<Vec<Event>, sqlx::Error> {
    let rows = sqlx::query_as!(
        EventRow,
        r#"SELECT e.id, e.type AS "kind: Text<EventType>", e.created_at, e.listing_id, e.thread_id, e.bid_id,
                  e.order_id, e.data
           FROM event_recipients r JOIN events e ON e.id = r.event_id
           WHERE r.agent_id = $1 AND r.event_id > $2
           ORDER BY r.event_id LIMIT $3"#,
        agent_id,
        after,
        limit,
    )
    .fetch_all(executor)
    .await?;
    Ok(rows.into_iter().map(Event::from).collect())
}

/// The highest published event id (0 before the first).
pub async fn last_id(executor: impl PgExecutor<'_>) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar!("SELECT last_id FROM event_sequence").fetch_one(executor).await
}

/// One published event, whoever it concerns (for the webhook worker).
pub async fn get(executor: impl PgExecutor<'_>, id: i64) -> Result<Option<Event>, sqlx::Error> {
    let row = sqlx::query_as!(
        EventRow,
        r#"SELECT e.id, e.type AS "kind: Text<EventType>", e.created_at, e.listing_id, e.thread_id, e.bid_id,
                  e.order_id, e.data
           FROM events e WHERE e.id = $1"#,
        id,
    )
    .fetch_optional(executor)
    .await?;
    Ok(row.map(Event::from))
}

/// Deletes up to `batch` of the oldest events published before `before`, with their inboxes,
/// webhook deliveries and attempts. Returns how many events went.
pub async fn purge_before(
    executor: impl PgExecutor<'_>,
    before: chrono::DateTime<chrono::Utc>,
    batch: i64,
) -> Result<u64, sqlx::Error> {
    let purged = sqlx::query_scalar!(
        r#"WITH purged AS (
               DELETE FROM events WHERE id IN (
                   SELECT id FROM events WHERE created_at < $1 ORDER BY created_at LIMIT $2)
               RETURNING id
           ), inboxes AS (
               DELETE FROM event_recipients r USING purged WHERE r.event_id = purged.id
           )
           SELECT count(*) AS "purged!" FROM purged"#,
        before,
        batch,
    )
    .fetch_one(executor)
    .await?;
    Ok(purged as u64)
}
