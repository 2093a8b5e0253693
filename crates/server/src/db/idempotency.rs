//! The stored first response to each (agent, Idempotency-Key).

use sqlx::{FromRow, PgConnection, PgExecutor};
use uuid::Uuid;

/// How long a stored response is replayed.
pub const RETENTION_HOURS: i32 = 24;

#[derive(Debug, Clone, FromRow)]
pub struct Saved {
    pub request_digest: Vec<u8>,
    pub status_code: i16,
    pub content_type: String,
    pub body: Vec<u8>,
    pub sealed: bool,
    /// The request that stored it may still replace it (see [`RUNNING_SECONDS`]).
    pub in_progress: bool,
}

/// How long a stored answer marked in progress keeps a retry waiting with `409`: past it, the
/// request is taken to have died, and its stored answer (true when stored) is replayed.
pub const RUNNING_SECONDS: i32 = 60;

/// Takes a lock on the key for the rest of the transaction; `false` if another request holds it.
pub async fn try_lock(conn: &mut PgConnection, lock_id: i64) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar!(r#"SELECT pg_try_advisory_xact_lock($1) AS "locked!""#, lock_id).fetch_one(conn).await
}

/// The stored response for the key, if it is younger than the retention period.
pub async fn find(conn: &mut PgConnection, agent_id: Uuid, key_digest: &[u8]) -> Result<Option<Saved>, sqlx::Error> {
    sqlx::query_as!(
        Saved,
        r#"SELECT request_digest, status_code, content_type, body, sealed,
                  in_progress AND created_at > now() - make_interval(secs => $4) AS "in_progress!"
           FROM idempotency_keys
           WHERE agent_id = $1 AND key_digest = $2 AND created_at > now() - make_interval(hours => $3)"#,
        agent_id,
        key_digest,
        RETENTION_HOURS,
        f64::from(RUNNING_SECONDS),
    )
    .fetch_optional(conn)
    .await
}

/// Stores the response in the caller's transaction, replacing an expired record of the same key.
/// `false` if a live record already exists, which the advisory lock should have made impossible.
pub async fn save(
    conn: &mut PgConnection,
    agent_id: Uuid,
    key_digest: &[u8],
    saved: &Saved,
) -> Result<bool, sqlx::Error> {
    let result = sqlx::query!(
        "INSERT INTO idempotency_keys (agent_id, key_digest, request_digest, status_code, content_type, body, sealed,
                                       in_progress)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $9)
         ON CONFLICT (agent_id, key_digest) DO UPDATE SET
             request_digest = EXCLUDED.request_digest, status_code = EXCLUDED.status_code,
             content_type = EXCLUDED.content_type, body = EXCLUDED.body, sealed = EXCLUDED.sealed,
             in_progress = EXCLUDED.in_progress, created_at = now()
         WHERE idempotency_keys.created_at <= now() - make_interval(hours => $8)",
        agent_id,
        key_digest,
        &saved.request_digest,
        saved.status_code,
        &saved.content_type,
        &saved.body,
        saved.sealed,
        RETENTION_HOURS,
        saved.in_progress,
    )
    .execute(conn)
    .await?;
    Ok(result.rows_affected() == 1)
}

/// Replaces the stored answer of (agent, key) for the same request, after its commit: a handler
/// that learned the rest of its answer later (the compatibility routes, which wait for the other
/// party) stores the complete one for replays.
pub async fn replace(
    executor: impl PgExecutor<'_>,
    agent_id: Uuid,
    key_digest: &[u8],
    saved: &Saved,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE idempotency_keys SET status_code = $4, content_type = $5, body = $6, sealed = $7, in_progress = $8
         WHERE agent_id = $1 AND key_digest = $2 AND request_digest = $3",
        agent_id,
        key_digest,
        &saved.request_digest,
        saved.status_code,
        &saved.content_type,
        &saved.body,
        saved.sealed,
        saved.in_progress,
    )
    .execute(executor)
    .await
    .map(drop)
}

/// Deletes up to `batch` records past the retention period; returns how many.
pub async fn purge_expired(executor: impl PgExecutor<'_>, batch: i64) -> Result<u64, sqlx::Error> {
    let result = sqlx::query!(
        "DELETE FROM idempotency_keys WHERE ctid = ANY(ARRAY(
             SELECT ctid FROM idempotency_keys WHERE created_at <= now() - make_interval(hours => $1)
             LIMIT $2 FOR UPDATE SKIP LOCKED))",
        RETENTION_HOURS,
        batch,
    )
    .execute(executor)
    .await?;
    Ok(result.rows_affected())
}
