//! The deployment's server instances, as each records itself (see [`crate::deployment`]).

use std::time::Duration;

use sqlx::PgExecutor;
use uuid::Uuid;

/// Records that the instance is alive, forgets instances unseen for `forget_after`, and counts
/// the instances seen within `alive_within`, this one included.
pub async fn beat(
    executor: impl PgExecutor<'_>,
    id: Uuid,
    alive_within: Duration,
    forget_after: Duration,
) -> Result<i64, sqlx::Error> {
    // The statement's own insert is not visible to its SELECT: the others are counted, and one
    // added for this instance.
    sqlx::query_scalar!(
        r#"WITH me AS (
             INSERT INTO instances (id) VALUES ($1) ON CONFLICT (id) DO UPDATE SET seen_at = now()
         ), gone AS (
             DELETE FROM instances WHERE seen_at < now() - make_interval(secs => $3) AND id <> $1
         )
         SELECT count(*) + 1 AS "alive!" FROM instances
         WHERE id <> $1 AND seen_at >= now() - make_interval(secs => $2)"#,
        id,
        alive_within.as_secs_f64(),
        forget_after.as_secs_f64(),
    )
    .fetch_one(executor)
    .await
}

/// Removes the instance, as it stops: the others share its part of the limits at their next
/// beat.
pub async fn leave(executor: impl PgExecutor<'_>, id: Uuid) -> Result<(), sqlx::Error> {
    sqlx::query!("DELETE FROM instances WHERE id = $1", id).execute(executor).await.map(drop)
}
