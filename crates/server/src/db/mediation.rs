//! What the mediator reads and records of a deadlocked thread.

use sqlx::PgConnection;
use sqlx::types::Json;
use uuid::Uuid;

use super::{Listing, Thread};
use haggle_domain::Party;

/// The amounts and terms of a thread's bids after round `after` and before round `before`, in
/// order: what the deadlock detector reads.
pub async fn offers_after(
    conn: &mut PgConnection,
    thread_id: Uuid,
    after: i32,
    before: i32,
) -> Result<Vec<(i64, Option<serde_json::Value>)>, sqlx::Error> {
    let rows = sqlx::query!(
        // A price's bids always name an amount (only a cancellation's do not).
        r#"SELECT amount AS "amount!", terms FROM bids WHERE thread_id = $1 AND round > $2 AND round < $3
           ORDER BY round"#,
        thread_id,
        after,
        before,
    )
    .fetch_all(conn)
    .await?;
    Ok(rows.into_iter().map(|row| (row.amount, row.terms)).collect())
}

/// Locks a thread the agent is party to for a settlement, its listing first (the acceptance
/// changes it), and reads both.
pub async fn lock_thread_and_listing(
    conn: &mut PgConnection,
    thread_id: Uuid,
    agent_id: Uuid,
) -> Result<Option<(Thread, Listing)>, sqlx::Error> {
    let listing = sqlx::query_scalar!(
        r#"SELECT row_to_json(l) AS "listing!: Json<Listing>" FROM listings l
           WHERE l.id = (SELECT listing_id FROM threads WHERE id = $1 AND $2 IN (buyer_id, seller_id))
           FOR UPDATE"#,
        thread_id,
        agent_id,
    )
    .fetch_optional(&mut *conn)
    .await?;
    let Some(Json(listing)) = listing else {
        return Ok(None);
    };
    let Json(thread) = sqlx::query_scalar!(
        r#"SELECT row_to_json(t) AS "thread!: Json<Thread>" FROM threads t WHERE id = $1 FOR UPDATE"#,
        thread_id
    )
    .fetch_one(&mut *conn)
    .await?;
    Ok(Some((thread, listing)))
}

/// Records that `party` agreed to settle the locked thread at its suggestion.
pub async fn agree_to_mediation(conn: &mut PgConnection, thread_id: Uuid, party: Party) -> Result<Thread, sqlx::Error> {
    let Json(thread) = sqlx::query_scalar!(
        r#"UPDATE threads t SET mediation_agreed = CASE WHEN $2 = ANY(mediation_agreed) THEN mediation_agreed
                                                         ELSE array_append(mediation_agreed, $2) END,
                                updated_at = CASE WHEN $2 = ANY(mediation_agreed) THEN updated_at
                                                  ELSE GREATEST(updated_at, now()) END
           WHERE id = $1 RETURNING row_to_json(t) AS "thread!: Json<Thread>""#,
        thread_id,
        party.as_str(),
    )
    .fetch_one(conn)
    .await?;
    Ok(thread)
}
