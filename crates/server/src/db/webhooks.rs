//! Webhooks, their deliveries, and the attempts made at each.

use chrono::{DateTime, Utc};
use sqlx::{FromRow, PgConnection, PgExecutor};
use uuid::Uuid;

use super::Page;
use super::text::Text;
use haggle_api::{Attempt, DeliveryStatus, EventType, WebhookStatus};
use sqlx::types::Json;

/// A webhook as its owner sees it: never its secret, only the secret's first characters.
#[derive(Debug, Clone, PartialEq, Eq, FromRow)]
pub struct Webhook {
    pub id: Uuid,
    pub url: String,
    pub events: Vec<String>,
    #[sqlx(try_from = "String")]
    pub status: WebhookStatus,
    pub disabled_reason: Option<String>,
    pub secret_prefix: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// What a new webhook is made of.
pub struct NewWebhook<'a> {
    pub id: Uuid,
    pub agent_id: Uuid,
    pub url: &'a str,
    pub events: &'a [String],
    pub secret_sealed: &'a [u8],
    pub secret_prefix: &'a str,
}

pub async fn insert(conn: &mut PgConnection, new: &NewWebhook<'_>) -> Result<Webhook, sqlx::Error> {
    sqlx::query_as!(
        Webhook,
        r#"INSERT INTO webhooks (id, agent_id, url, events, secret_sealed, secret_prefix)
           VALUES ($1, $2, $3, $4, $5, $6)
           RETURNING id, url, events, status AS "status: Text<WebhookStatus>", disabled_reason, secret_prefix,
                     created_at, updated_at"#,
        new.id,
        new.agent_id,
        new.url,
        new.events,
        new.secret_sealed,
        new.secret_prefix,
    )
    .fetch_one(conn)
    .await
}

/// How many webhooks the agent has.
pub async fn count_for_agent(executor: impl PgExecutor<'_>, agent_id: Uuid) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar!(r#"SELECT count(*) AS "count!" FROM webhooks WHERE agent_id = $1"#, agent_id)
        .fetch_one(executor)
        .await
}

/// A webhook, if the agent owns it.
pub async fn get(executor: impl PgExecutor<'_>, id: Uuid, agent_id: Uuid) -> Result<Option<Webhook>, sqlx::Error> {
    sqlx::query_as!(
        Webhook,
        r#"SELECT id, url, events, status AS "status: Text<WebhookStatus>", disabled_reason, secret_prefix, created_at,
                  updated_at
           FROM webhooks WHERE id = $1 AND agent_id = $2"#,
        id,
        agent_id,
    )
    .fetch_optional(executor)
    .await
}

/// The agent's webhooks, newest first, after the cursor.
pub async fn list(
    executor: impl PgExecutor<'_>,
    agent_id: Uuid,
    after: Option<Uuid>,
    limit: i64,
) -> Result<Page<Webhook>, sqlx::Error> {
    let rows = sqlx::query_as!(
        Webhook,
        r#"SELECT id, url, events, status AS "status: Text<WebhookStatus>", disabled_reason, secret_prefix, created_at,
                  updated_at
           FROM webhooks
           WHERE agent_id = $1 AND ($2::uuid IS NULL OR id < $2)
           ORDER BY id DESC LIMIT $3"#,
        agent_id,
        after,
        limit + 1,
    )
    .fetch_all(executor)
    .await?;
    Ok(Page::from_rows(rows, limit, |webhook| webhook.id))
}

/// Deletes the agent's webhook with its deliveries and their attempts; `false` if it has none
/// with this id.
pub async fn delete(executor: impl PgExecutor<'_>, id: Uuid, agent_id: Uuid) -> Result<bool, sqlx::Error> {
    let done =
        sqlx::query!("DELETE FROM webhooks WHERE id = $1 AND agent_id = $2", id, agent_id).execute(executor).await?;
    Ok(done.rows_affected() > 0)
}

/// Locks the agent's webhook until the transaction ends, against other changes and its deletion,
/// but not against a statement that queues a delivery for it, whose foreign key only shares
/// the row's key: a transaction holding the lock writes its events last, and their deliveries
/// may go to another webhook that such a statement holds.
pub async fn lock(conn: &mut PgConnection, id: Uuid, agent_id: Uuid) -> Result<Option<Webhook>, sqlx::Error> {
    sqlx::query_as!(
        Webhook,
        r#"SELECT id, url, events, status AS "status: Text<WebhookStatus>", disabled_reason, secret_prefix, created_at,
                  updated_at
           FROM webhooks WHERE id = $1 AND agent_id = $2 FOR NO KEY UPDATE"#,
        id,
        agent_id,
    )
    .fetch_optional(conn)
    .await
}

/// Makes a disabled webhook active again and its pending deliveries due now.
pub async fn enable(conn: &mut PgConnection, id: Uuid) -> Result<Webhook, sqlx::Error> {
    let webhook = sqlx::query_as!(
        Webhook,
        r#"UPDATE webhooks SET status = 'ACTIVE', disabled_reason = NULL, updated_at = now()
           WHERE id = $1
           RETURNING id, url, events, status AS "status: Text<WebhookStatus>", disabled_reason, secret_prefix,
                     created_at, updated_at"#,
        id,
    )
    .fetch_one(&mut *conn)
    .await?;
    sqlx::query!(
        "UPDATE webhook_deliveries SET next_attempt_at = now(), updated_at = now()
         WHERE webhook_id = $1 AND status = 'PENDING'",
        id,
    )
    .execute(&mut *conn)
    .await?;
    Ok(webhook)
}

/// Whether the webhook is an approver's whose approver was revoked.
pub async fn approver_revoked(executor: impl PgExecutor<'_>, id: Uuid) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM webhooks w JOIN approvers a ON a.id = w.approver_id
                          WHERE w.id = $1 AND a.revoked_at IS NOT NULL) AS "revoked!""#,
        id,
    )
    .fetch_one(executor)
    .await
}

/// Disables an active webhook and unschedules its pending deliveries (they stay PENDING, with
/// no next attempt, until it is enabled); `None` if it is gone or already disabled.
pub async fn disable(conn: &mut PgConnection, id: Uuid, reason: &str) -> Result<Option<Webhook>, sqlx::Error> {
    let webhook = sqlx::query_as!(
        Webhook,
        r#"UPDATE webhooks SET status = 'DISABLED', disabled_reason = $2, updated_at = now()
           WHERE id = $1 AND status = 'ACTIVE'
           RETURNING id, url, events, status AS "status: Text<WebhookStatus>", disabled_reason, secret_prefix,
                     created_at, updated_at"#,
        id,
        reason,
    )
    .fetch_optional(&mut *conn)
    .await?;
    if webhook.is_some() {
        sqlx::query!(
            "UPDATE webhook_deliveries SET next_attempt_at = NULL, updated_at = now()
             WHERE webhook_id = $1 AND status = 'PENDING'",
            id,
        )
        .execute(conn)
        .await?;
    }
    Ok(webhook)
}

/// One event on its way to one webhook, with every attempt made so far, oldest first.
#[derive(Debug, Clone, PartialEq, Eq, FromRow)]
pub struct Delivery {
    pub id: Uuid,
    pub webhook_id: Uuid,
    pub event_id: i64,
    #[sqlx(try_from = "String")]
    pub event_type: EventType,
    #[sqlx(try_from = "String")]
    pub status: DeliveryStatus,
    pub attempts: i32,
    pub next_attempt_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    #[sqlx(json)]
    pub attempt_log: Vec<Attempt>,
}

/// The webhook's deliveries, newest event first, after the cursor (a delivery id).
pub async fn deliveries(
    executor: impl PgExecutor<'_>,
    webhook_id: Uuid,
    after: Option<Uuid>,
    limit: i64,
) -> Result<Page<Delivery>, sqlx::Error> {
    let rows = sqlx::query!(
        r#"SELECT d.id, d.webhook_id, coalesce(e.seqs[array_position(e.audience, w.agent_id)], e.id) AS "event_id!",
                  e.type AS "event_type: Text<EventType>",
                  d.status AS "status: Text<DeliveryStatus>", d.attempts, d.next_attempt_at, d.created_at, d.updated_at,
                  COALESCE((SELECT json_agg(json_build_object(
                                      'attempt', a.attempt, 'started_at', a.started_at, 'duration_ms', a.duration_ms,
                                      'response_status', a.response_status, 'error', a.error) ORDER BY a.attempt)
                            FROM webhook_attempts a WHERE a.delivery_id = d.id), '[]') AS "attempt_log!: Json<Vec<Attempt>>"
           FROM webhook_deliveries d JOIN events e ON e.id = d.event_id JOIN webhooks w ON w.id = d.webhook_id
           WHERE d.webhook_id = $1
             AND ($2::uuid IS NULL
                  OR d.event_id < (SELECT c.event_id FROM webhook_deliveries c WHERE c.id = $2 AND c.webhook_id = $1))
           ORDER BY d.event_id DESC LIMIT $3"#,
        webhook_id,
        after,
        limit + 1,
    )
    .fetch_all(executor)
    .await?;
    let rows = rows
        .into_iter()
        .map(|row| Delivery {
            id: row.id,
            webhook_id: row.webhook_id,
            event_id: row.event_id,
            event_type: row.event_type.0,
            status: row.status.0,
            attempts: row.attempts,
            next_attempt_at: row.next_attempt_at,
            created_at: row.created_at,
            updated_at: row.updated_at,
            attempt_log: row.attempt_log.0,
        })
        .collect();
    Ok(Page::from_rows(rows, limit, |delivery| delivery.id))
}

/// A delivery a worker has claimed, with what it needs to make the attempt.
#[derive(Debug, Clone, FromRow)]
pub struct Claimed {
    pub id: Uuid,
    pub webhook_id: Uuid,
    pub event_id: i64,
    pub attempts: i32,
    pub agent_id: Uuid,
    pub url: String,
    pub secret_sealed: Vec<u8>,
    /// The end of this claim's lease: the delivery's `next_attempt_at` as the claim set it. An
    /// outcome is recorded against it, so a worker whose lease ran out and was claimed again
    /// cannot reschedule or fail the delivery under the new holder.
    pub lease_until: DateTime<Utc>,
}

/// What the log says of an attempt whose outcome was never recorded.
pub const UNRECORDED_ATTEMPT: &str = "the outcome of this attempt was never recorded: the server making it stopped, \
     or lost its database, first; the event may have reached the receiver";

/// Claims up to `limit` due deliveries of active webhooks in one statement, which commits on
/// its own: each one's `next_attempt_at` moves `lease` ahead, so no other worker takes it
/// while this one tries, and another does if this one dies before recording the attempt.
/// A claim that finds the previous claim's attempt unrecorded logs it first, as an attempt
/// whose outcome is unknown ([`UNRECORDED_ATTEMPT`]).
pub async fn claim_due(
    executor: impl PgExecutor<'_>,
    limit: i64,
    lease: std::time::Duration,
) -> Result<Vec<Claimed>, sqlx::Error> {
    sqlx::query_as!(
        Claimed,
        r#"WITH due AS (
             -- One table, read in the due index's order: the scan stops at the limit instead of
             -- sorting every due delivery on each claim. A disabled webhook's deliveries have no
             -- next attempt, so they are never due.
             SELECT d.id, d.attempts, d.claimed_at FROM webhook_deliveries d
             WHERE d.status = 'PENDING' AND d.next_attempt_at <= now()
             ORDER BY d.next_attempt_at
             LIMIT $1
             FOR UPDATE SKIP LOCKED
         ), unrecorded AS (
             -- The previous claim's attempt, whose outcome its worker never recorded.
             INSERT INTO webhook_attempts (delivery_id, attempt, started_at, duration_ms, response_status, error)
             SELECT id, attempts + 1, claimed_at, 0, NULL, $3 FROM due WHERE claimed_at IS NOT NULL
         )
         UPDATE webhook_deliveries d SET next_attempt_at = now() + make_interval(secs => $2), claimed_at = now(),
                attempts = d.attempts + (due.claimed_at IS NOT NULL)::int
         FROM due, webhooks w
         WHERE d.id = due.id AND w.id = d.webhook_id
         RETURNING d.id, d.webhook_id, d.event_id, d.attempts, w.agent_id, w.url, w.secret_sealed,
                   d.next_attempt_at AS "lease_until!""#,
        limit,
        lease.as_secs_f64(),
        UNRECORDED_ATTEMPT,
    )
    .fetch_all(executor)
    .await
}

/// A delivery as an attempt's outcome finds it, locked until the transaction ends.
#[derive(Debug, Clone, FromRow)]
pub struct Recorded {
    /// The number of the attempt just recorded.
    pub attempts: i32,
    #[sqlx(try_from = "String")]
    pub status: DeliveryStatus,
}

/// Counts one more attempt and logs it; `None` if the delivery no longer exists (its webhook
/// was deleted meanwhile).
pub async fn record_attempt(
    conn: &mut PgConnection,
    delivery_id: Uuid,
    started_at: DateTime<Utc>,
    duration_ms: i32,
    response_status: Option<i32>,
    error: Option<&str>,
) -> Result<Option<Recorded>, sqlx::Error> {
    let recorded = sqlx::query_as!(
        Recorded,
        r#"UPDATE webhook_deliveries SET attempts = attempts + 1, claimed_at = NULL, updated_at = now()
           WHERE id = $1 RETURNING attempts, status AS "status: Text<DeliveryStatus>""#,
        delivery_id,
    )
    .fetch_optional(&mut *conn)
    .await?;
    let Some(recorded) = recorded else { return Ok(None) };
    sqlx::query!(
        "INSERT INTO webhook_attempts (delivery_id, attempt, started_at, duration_ms, response_status, error)
         VALUES ($1, $2, $3, $4, $5, $6)",
        delivery_id,
        recorded.attempts,
        started_at,
        duration_ms,
        response_status,
        error,
    )
    .execute(&mut *conn)
    .await?;
    Ok(Some(recorded))
}

/// Ends a pending delivery: SUCCEEDED (whoever holds it: the event did arrive), or FAILED
/// only under the lease that `lease_until` names. `false` if nothing changed.
pub async fn finish(
    conn: &mut PgConnection,
    delivery_id: Uuid,
    status: DeliveryStatus,
    lease_until: DateTime<Utc>,
) -> Result<bool, sqlx::Error> {
    let done = sqlx::query!(
        "UPDATE webhook_deliveries SET status = $2, next_attempt_at = NULL, updated_at = now()
         WHERE id = $1 AND status = 'PENDING' AND ($2 = 'SUCCEEDED' OR next_attempt_at = $3)",
        delivery_id,
        status.as_str(),
        lease_until,
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected() > 0)
}

/// Schedules a pending delivery's next attempt `pause` from now, if the lease that
/// `lease_until` names still holds it. `false` if nothing changed.
pub async fn retry_after(
    conn: &mut PgConnection,
    delivery_id: Uuid,
    pause: std::time::Duration,
    lease_until: DateTime<Utc>,
) -> Result<bool, sqlx::Error> {
    let done = sqlx::query!(
        "UPDATE webhook_deliveries SET next_attempt_at = now() + make_interval(secs => $2), updated_at = now()
         WHERE id = $1 AND status = 'PENDING' AND next_attempt_at = $3",
        delivery_id,
        pause.as_secs_f64(),
        lease_until,
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected() > 0)
}

/// Locks a webhook row, before any of its deliveries, in the order deleting it takes them. As
/// [`lock`], it leaves the row's key to be shared by statements queuing deliveries for it.
pub async fn lock_for_outcome(conn: &mut PgConnection, id: Uuid) -> Result<(), sqlx::Error> {
    sqlx::query!("SELECT 1 AS locked FROM webhooks WHERE id = $1 FOR NO KEY UPDATE", id)
        .fetch_optional(conn)
        .await
        .map(drop)
}

/// The deliveries pending over the deployment (those of disabled webhooks aside), and the age
/// in seconds of the oldest (0 with none).
pub async fn backlog(executor: impl PgExecutor<'_>) -> Result<(i64, f64), sqlx::Error> {
    let row = sqlx::query!(
        r#"SELECT count(*) AS "pending!", COALESCE(EXTRACT(EPOCH FROM now() - min(created_at))::float8, 0) AS "oldest!"
           FROM webhook_deliveries WHERE status = 'PENDING' AND next_attempt_at IS NOT NULL"#,
    )
    .fetch_one(executor)
    .await?;
    Ok((row.pending, row.oldest))
}
