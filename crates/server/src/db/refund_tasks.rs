//! The refunds a seller's refund policy answers (SPEC §8): a buyer's refund bid that waits for a
//! seller one of whose covering policies declares `refund` is queued for the executor through
//! the one rule that queues tasks ([`tasks::queue_tasks`]); and what the policy's decision reads
//! of the order.

use sqlx::PgConnection;
use uuid::Uuid;

use super::tasks::{self, Requeue};

/// Queues the refund bid `bid_id` for its seller's policy if it is the pending buyer's bid of an
/// active refund thread and the most specific policy covering the seller there (the one the
/// executor reads) declares `refund`. Returns
/// whether it was queued. Run in the transaction that made the bid.
pub async fn queue_refund_answer(conn: &mut PgConnection, bid_id: Uuid) -> Result<bool, sqlx::Error> {
    // Built at run time: it splices the rule that queues tasks (`queue_tasks`).
    static STATEMENT: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        let pending = "(SELECT b.id AS bid_id, t.id AS thread_id, t.listing_id, t.seller_id AS agent_id,
                               'seller'::text AS role
                        FROM bids b JOIN threads t ON t.id = b.thread_id
                        WHERE b.id = $1 AND b.status = 'PENDING' AND b.author = 'buyer' AND t.kind = 'refund'
                          AND t.status = 'ACTIVE' AND t.last_bid_id = b.id
                          AND (SELECT c.policy ? 'refund'
                               FROM covering_policies(t.seller_id, 'seller', t.listing_id, t.id) c
                               ORDER BY (c.thread_id IS NOT NULL) DESC, (c.listing_id IS NOT NULL) DESC
                               LIMIT 1))";
        format!(
            "WITH {} SELECT (SELECT count(*) FROM queued), (SELECT count(*) FROM announced)",
            tasks::queue_tasks(pending, Requeue::Never)
        )
    });
    let (queued, _announced): (i64, i64) = sqlx::query_as(STATEMENT.as_str()).bind(bid_id).fetch_one(conn).await?;
    Ok(queued > 0)
}

/// What a refund policy's decision reads of the order a refund thread is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, sqlx::FromRow)]
pub struct RefundOrder {
    pub order_amount: i64,
    pub paid_amount: i64,
    pub refunded_amount: i64,
}

/// The order of the refund thread `thread_id`; `None` if the thread is no refund.
pub async fn refund_order(conn: &mut PgConnection, thread_id: Uuid) -> Result<Option<RefundOrder>, sqlx::Error> {
    sqlx::query_as(
        "SELECT o.amount AS order_amount, o.paid_amount, o.refunded_amount
         FROM threads t JOIN orders o ON o.id = t.order_id
         WHERE t.id = $1 AND t.kind = 'refund'",
    )
    .bind(thread_id)
    .fetch_optional(conn)
    .await
}
