//! The approval page's sessions (`/approve`): the SHA-256 of each session id, the approver it
//! signs in, and when it expires. A session lets nothing in once its approver is revoked or its
//! agent suspended, as the approver's token would not.

use std::time::Duration;

use haggle_domain::Tier;
use sqlx::PgExecutor;
use uuid::Uuid;

use super::approvals::ApproverHolder;
use super::text::Text;

/// Records a new session of `approver_id`, and forgets the sessions that have expired.
pub async fn open(
    executor: impl PgExecutor<'_>,
    digest: &[u8; 32],
    approver_id: Uuid,
    lasts: Duration,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "WITH expired AS (DELETE FROM approver_sessions WHERE expires_at <= now())
         INSERT INTO approver_sessions (id_digest, approver_id, expires_at)
         VALUES ($1, $2, now() + make_interval(secs => $3))",
    )
    .bind(&digest[..])
    .bind(approver_id)
    .bind(lasts.as_secs_f64())
    .execute(executor)
    .await
    .map(drop)
}

/// The approver an open session signs in: unrevoked, of an agent that is not suspended.
pub async fn holder(executor: impl PgExecutor<'_>, digest: &[u8; 32]) -> Result<Option<ApproverHolder>, sqlx::Error> {
    let row: Option<(Uuid, Uuid, String, Text<Tier>)> = sqlx::query_as(
        "SELECT p.id, p.agent_id, p.name, a.tier
         FROM approver_sessions s JOIN approvers p ON p.id = s.approver_id JOIN agents a ON a.id = p.agent_id
         WHERE s.id_digest = $1 AND s.expires_at > now() AND p.revoked_at IS NULL AND a.suspended_at IS NULL",
    )
    .bind(&digest[..])
    .fetch_optional(executor)
    .await?;
    Ok(row.map(|(id, agent_id, name, tier)| ApproverHolder { id, agent_id, name, tier: tier.0 }))
}

/// Ends a session (signing out); ending one that does not exist does nothing.
pub async fn close(executor: impl PgExecutor<'_>, digest: &[u8; 32]) -> Result<(), sqlx::Error> {
    sqlx::query("DELETE FROM approver_sessions WHERE id_digest = $1")
        .bind(&digest[..])
        .execute(executor)
        .await
        .map(drop)
}
