//! Ending threads through their pending bids: a rejection or a withdrawal, a listing that sold
//! out or was withdrawn, and the sweeper's expiries.

use sqlx::types::Json;
use sqlx::{PgConnection, PgExecutor};
use uuid::Uuid;

use super::moves::Effect;
use super::rows::BidDeadline;
use super::text::Text;
use super::{Bid, Thread};
use haggle_domain::bid::{self, Transition};
use haggle_domain::{BidStatus, Reason};

/// A write that changed a bid and its thread together.
#[derive(Debug)]
struct BidAndThreadRow {
    bid: Json<Bid>,
    thread: Json<Thread>,
}

/// Ends a thread through its pending bid: a rejection, a withdrawal, an expiry, or (on an
/// order's negotiation) an acceptance. The caller must hold the thread's lock (the bid row is
/// changed first here, so taking the thread's lock only now would invert the lock order).
/// `None` if the bid was no longer PENDING, or, for a party's answer, its deadline has passed.
pub async fn end_with_bid(
    conn: &mut PgConnection,
    bid_id: Uuid,
    transition: Transition,
) -> Result<Option<(Bid, Thread)>, sqlx::Error> {
    let before_deadline = matches!(transition, Transition::Reject(_) | Transition::Accept);
    Ok(end_bids(conn, &[bid_id], transition, before_deadline).await?.pop())
}

/// Ends every live price thread of a listing that sold out or was withdrawn (`reason`; the
/// negotiations on its orders go on), each as the
/// domain closes it ([`bid::close`]): its pending bid rejected and the thread closed, or, past
/// its deadline, expired. The listing must be locked. Returns each ended thread with its bid.
///
/// The threads are locked first, waiting for any a concurrent move holds; their pending bids
/// are then read in a statement of their own, whose fresh snapshot sees that move's new bid.
pub async fn end_listing_threads(
    conn: &mut PgConnection,
    listing_id: Uuid,
    reason: Reason,
) -> Result<Vec<(Bid, Thread)>, sqlx::Error> {
    let locked = sqlx::query_scalar!(
        "SELECT id FROM threads WHERE listing_id = $1 AND status = 'ACTIVE' AND kind = 'price' ORDER BY id FOR UPDATE",
        listing_id,
    )
    .fetch_all(&mut *conn)
    .await?;
    if locked.is_empty() {
        return Ok(Vec::new());
    }
    let pending = sqlx::query_as!(
        BidDeadline,
        r#"SELECT b.id AS bid_id, b.status AS "status: Text<BidStatus>", b.expires_at, now() AS "db_now!"
           FROM threads t JOIN bids b ON b.id = t.last_bid_id
           WHERE t.id = ANY($1) AND t.status = 'ACTIVE' AND b.status = 'PENDING'"#,
        &locked,
    )
    .fetch_all(&mut *conn)
    .await?;
    let mut ended = Vec::new();
    for transition in [Transition::Expire, Transition::Close(reason)] {
        let bids: Vec<Uuid> = pending
            .iter()
            .filter(|due| bid::close(due.expires_at, due.db_now, reason) == transition)
            .map(|due| due.bid_id)
            .collect();
        ended.extend(end_threads(&mut *conn, &bids, transition).await?);
    }
    Ok(ended)
}

/// Locks up to `batch` threads whose pending bid has reached its deadline, oldest deadline
/// first, skipping threads another transaction holds. The domain then decides each expiry.
pub async fn lock_due(conn: &mut PgConnection, batch: i64) -> Result<Vec<BidDeadline>, sqlx::Error> {
    // Built at run time: the statement is shared with its own `EXPLAIN` (`plan_of_lock_due`).
    sqlx::query_as(LOCK_DUE).bind(batch).fetch_all(conn).await
}

/// The due bids are found first, oldest deadline first, through `bids_due_idx` (a pending
/// bid's deadline), and only those threads are locked: joined before the limit, the planner may
/// misjudge how many bids are due in a long history and join every live thread instead.
const LOCK_DUE: &str = "SELECT due.id AS bid_id, due.status, due.expires_at, now() AS db_now
     FROM (SELECT id, thread_id, status, expires_at FROM bids
           WHERE status = 'PENDING' AND expires_at <= now()
           ORDER BY expires_at LIMIT $1) due
     JOIN threads t ON t.id = due.thread_id
     WHERE t.status = 'ACTIVE'
     ORDER BY due.expires_at
     FOR UPDATE OF t SKIP LOCKED";

/// The plan PostgreSQL makes for `lock_due` (`EXPLAIN`'s text).
pub async fn plan_of_lock_due(executor: impl PgExecutor<'_>, batch: i64) -> Result<String, sqlx::Error> {
    // Built at run time: `EXPLAIN` of the statement `lock_due` runs, which a test reads.
    let lines: Vec<String> =
        sqlx::query_scalar(&format!("EXPLAIN {LOCK_DUE}")).bind(batch).persistent(false).fetch_all(executor).await?;
    Ok(lines.join("\n"))
}

/// Ends locked threads through their pending bids with one transition of the domain's (the
/// sweeper's expiries, a sold-out listing's closings). Returns the bids it changed with their
/// threads.
pub async fn end_threads(
    conn: &mut PgConnection,
    bids: &[Uuid],
    transition: Transition,
) -> Result<Vec<(Bid, Thread)>, sqlx::Error> {
    end_bids(conn, bids, transition, false).await
}

/// Applies `transition` to the pending bids and their threads, those whose deadline is still
/// ahead only if `before_deadline` (a party's answer: the state machine checked the deadline
/// at the start of the transaction, and it may have passed since).
async fn end_bids(
    conn: &mut PgConnection,
    bids: &[Uuid],
    transition: Transition,
    before_deadline: bool,
) -> Result<Vec<(Bid, Thread)>, sqlx::Error> {
    if bids.is_empty() {
        return Ok(Vec::new());
    }
    let effect = Effect::from(transition);
    let rows = sqlx::query_as!(
        BidAndThreadRow,
        r#"WITH bid AS (
               UPDATE bids SET status = $2, reason = $3, updated_at = now(),
                      responded_at = CASE WHEN $2 = 'EXPIRED' THEN expires_at ELSE now() END
               WHERE id = ANY($1) AND status = 'PENDING' AND (NOT $5 OR expires_at > clock_timestamp())
               RETURNING *
           ), thread AS (
               UPDATE threads SET status = $4, closed_reason = $3, expires_at = NULL, updated_at = now()
               FROM bid WHERE threads.id = bid.thread_id
               RETURNING threads.*
           )
           SELECT row_to_json(bid) AS "bid!: Json<Bid>", row_to_json(thread) AS "thread!: Json<Thread>"
           FROM bid JOIN thread ON thread.id = bid.thread_id"#,
        bids,
        effect.bid_status.as_str(),
        effect.reason.as_str(),
        effect.thread_status.as_str(),
        before_deadline,
    )
    .fetch_all(conn)
    .await?;
    Ok(rows.into_iter().map(|row| (row.bid.0, row.thread.0)).collect())
}
