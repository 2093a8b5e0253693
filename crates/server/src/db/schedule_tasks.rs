//! The tasks of schedule policies: a `schedule` bid on an order is queued for its responder
//! when a policy of theirs covering the thread declares a weekly availability, by the rule that
//! queues every task ([`tasks::queue_tasks`]); and what the executor reads to decide one.

use chrono::{DateTime, Utc};
use sqlx::types::Json;
use sqlx::{FromRow, PgConnection};
use uuid::Uuid;

use super::tasks::{self, Requeue};
use haggle_domain::{Party, Tier};

/// Queues the pending schedule bid `bid_id` for its responder's policy, if one covering the
/// thread declares a `schedule`. Returns how many tasks were queued (0 or 1).
pub async fn queue(conn: &mut PgConnection, bid_id: Uuid) -> Result<u64, sqlx::Error> {
    // Built at run time: it splices the rule that queues tasks (`queue_tasks`).
    static STATEMENT: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        let pending = "(SELECT b.id AS bid_id, t.id AS thread_id, t.listing_id, r.agent_id, r.role
              FROM bids b JOIN threads t ON t.id = b.thread_id
              CROSS JOIN LATERAL (
                  SELECT CASE b.author WHEN 'buyer' THEN t.seller_id ELSE t.buyer_id END AS agent_id,
                         CASE b.author WHEN 'buyer' THEN 'seller' ELSE 'buyer' END AS role) r
              WHERE b.id = $1 AND b.status = 'PENDING' AND t.kind = 'schedule'
                AND EXISTS (SELECT 1 FROM covering_policies(r.agent_id, r.role, t.listing_id, t.id) p
                            WHERE p.policy ? 'schedule'))";
        format!(
            "WITH {} SELECT (SELECT count(*) FROM queued), (SELECT count(*) FROM announced)",
            tasks::queue_tasks(pending, Requeue::Never)
        )
    });
    let (queued, _announced): (i64, i64) = sqlx::query_as(STATEMENT.as_str()).bind(bid_id).fetch_one(conn).await?;
    Ok(queued as u64)
}

/// What a schedule policy's decision reads of its task: `None` from [`read`] when the task's
/// thread is not a schedule negotiation.
#[derive(Debug, FromRow)]
pub struct ScheduleTask {
    /// The bid is still the thread's pending one, before its deadline.
    pub live: bool,
    pub listing_id: Uuid,
    pub order_id: Option<Uuid>,
    /// The pending bid's terms: its windows.
    pub terms: Option<Json<serde_json::Value>>,
    #[sqlx(try_from = "String")]
    pub role: Party,
    #[sqlx(try_from = "String")]
    pub agent_tier: Tier,
    pub agent_suspended: bool,
    pub agent_approval_rules: bool,
    /// The most specific policy of the agent for the thread, if any.
    pub policy: Option<Json<serde_json::Value>>,
    pub db_now: DateTime<Utc>,
}

/// Reads the task of `agent_id` on `bid_id` if its thread is a schedule negotiation.
pub async fn read(conn: &mut PgConnection, bid_id: Uuid, agent_id: Uuid) -> Result<Option<ScheduleTask>, sqlx::Error> {
    sqlx::query_as(
        "SELECT (b.status = 'PENDING' AND t.status = 'ACTIVE' AND t.last_bid_id = b.id
                 AND b.expires_at > clock_timestamp()) AS live,
                t.listing_id, t.order_id, b.terms, r.role, me.tier AS agent_tier,
                me.suspended_at IS NOT NULL AS agent_suspended,
                me.approval_rules AS agent_approval_rules,
                (SELECT p.policy FROM policies p
                  WHERE p.agent_id = me.id
                    AND (p.thread_id = t.id OR p.listing_id = t.listing_id
                         OR (p.thread_id IS NULL AND p.listing_id IS NULL AND p.role = r.role))
                  ORDER BY (p.thread_id IS NOT NULL) DESC, (p.listing_id IS NOT NULL) DESC LIMIT 1) AS policy,
                clock_timestamp() AS db_now
         FROM bids b
         JOIN threads t ON t.id = b.thread_id
         JOIN agents me ON me.id = $2
         CROSS JOIN LATERAL (SELECT CASE WHEN t.seller_id = $2 THEN 'seller' ELSE 'buyer' END AS role) r
         WHERE b.id = $1 AND t.kind = 'schedule' AND $2 IN (t.buyer_id, t.seller_id)",
    )
    .bind(bid_id)
    .bind(agent_id)
    .fetch_optional(conn)
    .await
}
