//! The operator console's sessions: the SHA-256 of each session id, and when it expires.

use std::time::Duration;

use sqlx::PgExecutor;

/// Records a new session, and forgets the sessions that have expired.
pub async fn open_session(
    executor: impl PgExecutor<'_>,
    digest: &[u8; 32],
    lasts: Duration,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "WITH expired AS (DELETE FROM console_sessions WHERE expires_at <= now())
         INSERT INTO console_sessions (id_digest, expires_at) VALUES ($1, now() + make_interval(secs => $2))",
        &digest[..],
        lasts.as_secs_f64(),
    )
    .execute(executor)
    .await
    .map(drop)
}

/// Whether a session with this digest exists and has not expired.
pub async fn session_is_open(executor: impl PgExecutor<'_>, digest: &[u8; 32]) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM console_sessions WHERE id_digest = $1 AND expires_at > now()) AS "open!""#,
        &digest[..],
    )
    .fetch_one(executor)
    .await
}

/// Ends a session (signing out); ending one that does not exist does nothing.
pub async fn close_session(executor: impl PgExecutor<'_>, digest: &[u8; 32]) -> Result<(), sqlx::Error> {
    sqlx::query!("DELETE FROM console_sessions WHERE id_digest = $1", &digest[..]).execute(executor).await.map(drop)
}
