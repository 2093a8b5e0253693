//! The event log: events written with the change they describe, each agent's inbox of them
//! numbered for that agent, and what readers and the webhook worker read of it.

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

/// The NOTIFY channel that tells the other instances whose events were committed.
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

/// What writing events did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Written {
    pub events: i64,
    /// New pending bids queued for their responder's policy (`auto_tasks`).
    pub tasks: i64,
    /// Webhook deliveries queued for the events.
    pub deliveries: i64,
    /// The agents the events concern, once each: whose readers to wake once it commits.
    pub recipients: Vec<Uuid>,
}

impl Written {
    /// Adds what another statement of the same transaction wrote.
    pub fn add(&mut self, other: Written) {
        self.events += other.events;
        self.tasks += other.tasks;
        self.deliveries += other.deliveries;
        self.recipients.extend(other.recipients);
        self.recipients.sort_unstable();
        self.recipients.dedup();
    }
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
            let start = arrays.audiences.len();
            arrays.audience_from.push(slice_bound(start + 1));
            debug_assert!(!event.audience.is_empty(), "an event concerns someone");
            for agent in &event.audience {
                // Each agent once: it takes one number for the event.
                if !arrays.audiences[start..].contains(agent) {
                    arrays.audiences.push(*agent);
                }
            }
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

/// The part of a statement that writes events, given as CTEs: `rows` is a relation `e` of events
/// shaped as [`EVENT_ROWS`] (with `n`, their order), already filtered to those to write.
///
/// Each event gets an id of its own (`events_id_seq`) and its recipients' numbers
/// ([`number_events`]); it is written once, with those numbers (`seqs`, in the audience's
/// order), and a delivery is queued for each active webhook of its recipients that takes its
/// type. The CTE `written` returns each event's `type` and `bid_id`; `deliveries` a row per
/// delivery queued.
pub fn write_events(rows: &str) -> String {
    format!(
        "ev AS (
             SELECT nextval('events_id_seq') AS id, e.type, e.audience, e.listing_id, e.thread_id, e.bid_id,
                    e.order_id, e.data, e.n
             FROM {rows}
             ORDER BY e.n
         ), {}, written AS (
             INSERT INTO events (id, type, audience, seqs, listing_id, thread_id, bid_id, order_id, data)
             SELECT ev.id, ev.type, ev.audience, s.seqs, ev.listing_id, ev.thread_id, ev.bid_id, ev.order_id, ev.data
             FROM ev JOIN seqs s ON s.event_id = ev.id
             RETURNING type, bid_id
         ), deliveries AS (
             INSERT INTO webhook_deliveries (id, webhook_id, event_id, status, next_attempt_at)
             SELECT gen_random_uuid(), w.id, ev.id, 'PENDING', now()
             FROM ev JOIN webhooks w ON w.agent_id = ANY (ev.audience) AND w.status = 'ACTIVE'
                                    AND (ev.type = ANY (w.events) OR '*' = ANY (w.events))
             RETURNING 1
         )",
        number_events("ev")
    )
}

/// Numbers events for the agents they concern, as CTEs: `events` names a relation of events
/// with their `id`, `audience` (each agent once) and `n` (their order). For each agent of each
/// audience it takes the agent's next number from its row of `event_heads` (which stays locked
/// until the transaction ends, so that each agent's numbers are given out in commit order, one
/// after another) and writes the agent's inbox row. The CTE `seqs` gives each event's numbers
/// in its audience's order (`event_id`, `seqs`), for the event's own row.
pub fn number_events(events: &str) -> String {
    format!(
        "fan AS (
             SELECT a.agent_id, x.id AS event_id, a.i,
                    row_number() OVER (PARTITION BY a.agent_id ORDER BY x.n) AS k
             FROM {events} x, unnest(x.audience) WITH ORDINALITY AS a(agent_id, i)
         ), counts AS (
             SELECT agent_id, count(*) AS taken FROM fan GROUP BY agent_id
         ), heads AS (
             INSERT INTO event_heads AS h (agent_id, last_seq)
             SELECT agent_id, taken FROM counts ORDER BY agent_id
             ON CONFLICT (agent_id) DO UPDATE SET last_seq = h.last_seq + excluded.last_seq
             RETURNING h.agent_id, h.last_seq
         ), numbered AS (
             SELECT f.agent_id, f.event_id, f.i, heads.last_seq - counts.taken + f.k AS seq
             FROM fan f JOIN heads USING (agent_id) JOIN counts USING (agent_id)
         ), inboxes AS (
             INSERT INTO event_recipients (agent_id, seq, event_id)
             SELECT agent_id, seq, event_id FROM numbered
         ), seqs AS (
             SELECT event_id, array_agg(seq ORDER BY i) AS seqs FROM numbered GROUP BY event_id
         )"
    )
}

/// Writes events, in the caller's transaction ([`write_events`]), and in the same statement
/// queues a task for each new pending bid (`bid.placed`, `bid.countered`) whose responder has a
/// policy covering it, announcing those on `haggle_auto` (delivered at commit).
pub async fn write(conn: &mut PgConnection, events: &[NewEvent]) -> Result<Written, sqlx::Error> {
    // Built at run time: it splices the writing of events and the rule that queues tasks
    // (`tasks::queue_tasks`).
    static STATEMENT: LazyLock<String> = LazyLock::new(|| {
        let new_pending = format!(
            "(SELECT p.* FROM written w JOIN {} p ON p.bid_id = w.bid_id
              WHERE w.type IN ('{}', '{}'))",
            STORED_PENDING,
            EventType::BidPlaced,
            EventType::BidCountered,
        );
        format!(
            "WITH {}, {}
             SELECT (SELECT count(*) FROM written) AS events, (SELECT count(*) FROM queued) AS tasks,
                    (SELECT count(*) FROM deliveries) AS deliveries, (SELECT count(*) FROM announced) AS announced",
            write_events(EVENT_ROWS),
            tasks::queue_tasks(&new_pending, Requeue::Never)
        )
    });
    let row: WrittenRow =
        events.iter().collect::<EventArrays>().bind(sqlx::query_as(STATEMENT.as_str())).fetch_one(conn).await?;
    Ok(Written { events: row.events, tasks: row.tasks, deliveries: row.deliveries, recipients: audiences(events) })
}

#[derive(FromRow)]
struct WrittenRow {
    events: i64,
    tasks: i64,
    deliveries: i64,
}

/// Every agent the events concern, once each.
pub fn audiences<'a>(events: impl IntoIterator<Item = &'a NewEvent>) -> Vec<Uuid> {
    let mut agents: Vec<Uuid> = events.into_iter().flat_map(|event| event.audience.iter().copied()).collect();
    agents.sort_unstable();
    agents.dedup();
    agents
}

/// Sends NOTIFY payloads (delivered when the executor's transaction commits; at once outside one).
pub async fn notify(executor: impl PgExecutor<'_>, channel: &str, payloads: &[String]) -> Result<(), sqlx::Error> {
    sqlx::query!("SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p", channel, payloads)
        .execute(executor)
        .await
        .map(drop)
}

/// An event as stored, with the id its reader knows it by; shown as [`Event`].
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

/// The agent's events after its number `after`, oldest first, each with the agent's number as
/// its id. (The events written before numbers were the agents' own have no `event_id` in the
/// inbox: their number is their id.)
pub async fn for_agent(
    executor: impl PgExecutor<'_>,
    agent_id: Uuid,
    after: i64,
    limit: i64,
) -> Result<Vec<Event>, sqlx::Error> {
    let rows = sqlx::query_as!(
        EventRow,
        r#"SELECT r.seq AS id, e.type AS "kind: Text<EventType>", e.created_at, e.listing_id, e.thread_id, e.bid_id,
                  e.order_id, e.data
           FROM event_recipients r JOIN events e ON e.id = coalesce(r.event_id, r.seq)
           WHERE r.agent_id = $1 AND r.seq > $2
           ORDER BY r.seq LIMIT $3"#,
        agent_id,
        after,
        limit,
    )
    .fetch_all(executor)
    .await?;
    Ok(rows.into_iter().map(Event::from).collect())
}

/// The agent's last event number (0 before its first): where a stream of only what happens from
/// now on starts. A transaction that holds the agent's counter has not committed its events, so
/// they come after this.
pub async fn last_id(executor: impl PgExecutor<'_>, agent_id: Uuid) -> Result<i64, sqlx::Error> {
    let last = sqlx::query_scalar!("SELECT last_seq FROM event_heads WHERE agent_id = $1", agent_id)
        .fetch_optional(executor)
        .await?;
    Ok(last.unwrap_or(0))
}

/// The last event number of each of `agents` that has had an event: what the waiters' catch-up
/// compares from one pass to the next.
pub async fn heads(executor: impl PgExecutor<'_>, agents: &[Uuid]) -> Result<Vec<(Uuid, i64)>, sqlx::Error> {
    let rows = sqlx::query!("SELECT agent_id, last_seq FROM event_heads WHERE agent_id = ANY($1)", agents)
        .fetch_all(executor)
        .await?;
    Ok(rows.into_iter().map(|row| (row.agent_id, row.last_seq)).collect())
}

/// One event as the agent `recipient` sees it (its id the agent's number), for the webhook worker.
pub async fn get(executor: impl PgExecutor<'_>, id: i64, recipient: Uuid) -> Result<Option<Event>, sqlx::Error> {
    let row = sqlx::query_as!(
        EventRow,
        r#"SELECT coalesce(e.seqs[array_position(e.audience, $2)], e.id) AS "id!", e.type AS "kind: Text<EventType>",
                  e.created_at, e.listing_id, e.thread_id, e.bid_id, e.order_id, e.data
           FROM events e WHERE e.id = $1"#,
        id,
        recipient,
    )
    .fetch_optional(executor)
    .await?;
    Ok(row.map(Event::from))
}

/// Deletes up to `batch` of the oldest events (by id) written before `before`, with their
/// inboxes' rows, webhook deliveries and attempts. Returns how many events went.
pub async fn purge_before(
    executor: impl PgExecutor<'_>,
    before: chrono::DateTime<chrono::Utc>,
    batch: i64,
) -> Result<u64, sqlx::Error> {
    let purged = sqlx::query_scalar!(
        r#"WITH purged AS (
               DELETE FROM events WHERE id IN (
                   SELECT id FROM (SELECT id, created_at FROM events ORDER BY id LIMIT $2) oldest
                   WHERE created_at < $1)
               RETURNING id, audience, seqs
           ), inboxes AS (
               DELETE FROM event_recipients r
               USING (SELECT p.id, a.agent_id, a.i, p.seqs FROM purged p,
                             unnest(p.audience) WITH ORDINALITY AS a(agent_id, i)) x
               WHERE r.agent_id = x.agent_id AND r.seq = coalesce(x.seqs[x.i::int], x.id)
           )
           SELECT count(*) AS "purged!" FROM purged"#,
        before,
        batch,
    )
    .fetch_one(executor)
    .await?;
    Ok(purged as u64)
}
