//! Reading an agent's bids and threads, one or a page of them.

use sqlx::types::Json;
use sqlx::{PgExecutor, Postgres, QueryBuilder};
use uuid::Uuid;

use super::{Bid, Page, Thread};
use haggle_domain::{Party, ThreadKind, ThreadStatus};

/// A bid, if the agent is party to its thread.
pub async fn get_bid(executor: impl PgExecutor<'_>, bid_id: Uuid, agent_id: Uuid) -> Result<Option<Bid>, sqlx::Error> {
    let bid = sqlx::query_scalar!(
        r#"SELECT row_to_json(b) AS "bid!: Json<Bid>" FROM bids b JOIN threads t ON t.id = b.thread_id
           WHERE b.id = $1 AND $2 IN (t.buyer_id, t.seller_id)"#,
        bid_id,
        agent_id,
    )
    .fetch_optional(executor)
    .await?;
    Ok(bid.map(|bid| bid.0))
}

#[derive(Debug)]
struct ThreadWithBidsRow {
    thread: Json<Thread>,
    bids: Json<Vec<Bid>>,
}

/// A thread with its bids in order, if `party` (an agent) is party to it, or whoever's it is for
/// `None` (the operator). One statement, so the thread and its bids are read from the same
/// snapshot.
pub async fn get_thread_with_bids(
    executor: impl PgExecutor<'_>,
    thread_id: Uuid,
    party: Option<Uuid>,
) -> Result<Option<(Thread, Vec<Bid>)>, sqlx::Error> {
    let row = sqlx::query_as!(
        ThreadWithBidsRow,
        r#"SELECT row_to_json(t) AS "thread!: Json<Thread>",
                  COALESCE((SELECT json_agg(b ORDER BY b.round) FROM bids b WHERE b.thread_id = t.id), '[]')
                      AS "bids!: Json<Vec<Bid>>"
           FROM threads t WHERE t.id = $1 AND ($2::uuid IS NULL OR $2 IN (t.buyer_id, t.seller_id))"#,
        thread_id,
        party,
    )
    .fetch_optional(executor)
    .await?;
    Ok(row.map(|row| (row.thread.0, row.bids.0)))
}

#[derive(Debug, Default)]
pub struct ThreadFilter {
    pub role: Option<Party>,
    pub status: Option<ThreadStatus>,
    pub listing_id: Option<Uuid>,
    pub order_id: Option<Uuid>,
    pub kind: Option<ThreadKind>,
    pub after: Option<Uuid>,
    pub limit: i64,
}

/// The agent's threads, newest first. A status filter means the effective status: an ACTIVE
/// thread past its deadline counts as EXPIRED.
///
/// Without a role, the agent's threads as buyer and as seller are read as two index scans, each
/// newest first and cut at the page, and merged (a thread's parties differ, so none is in
/// both): one scan of `buyer_id = $1 OR seller_id = $1` would gather all of a busy agent's
/// threads before sorting them.
pub async fn list_threads(
    executor: impl PgExecutor<'_>,
    agent_id: Uuid,
    filter: &ThreadFilter,
) -> Result<Page<Thread>, sqlx::Error> {
    // Built at run time: from the filter's optional conditions, and shared with its own `EXPLAIN`.
    let mut query = threads_query("SELECT row_to_json(threads)", agent_id, filter);
    let rows: Vec<Json<Thread>> = query.build_query_scalar().fetch_all(executor).await?;
    let rows = rows.into_iter().map(|thread| thread.0).collect();
    Ok(Page::from_rows(rows, filter.limit, |thread| thread.id))
}

/// The plan PostgreSQL makes for `list_threads` (`EXPLAIN`'s text), to check which indexes it
/// reads.
pub async fn plan_of_list_threads(
    executor: impl PgExecutor<'_>,
    agent_id: Uuid,
    filter: &ThreadFilter,
) -> Result<String, sqlx::Error> {
    // Built at run time: `EXPLAIN` of the statement `list_threads` runs, which a test reads.
    let mut query = threads_query("EXPLAIN SELECT threads.id", agent_id, filter);
    let lines: Vec<String> = query.build_query_scalar().persistent(false).fetch_all(executor).await?;
    Ok(lines.join("\n"))
}

fn threads_query<'a>(select: &str, agent_id: Uuid, filter: &'a ThreadFilter) -> QueryBuilder<'a, Postgres> {
    let mut query: QueryBuilder<Postgres> = QueryBuilder::new(select);
    query.push(" FROM (");
    let roles: &[Party] = match filter.role {
        Some(Party::Buyer) => &[Party::Buyer],
        Some(Party::Seller) => &[Party::Seller],
        None => &[Party::Buyer, Party::Seller],
    };
    for (i, role) in roles.iter().enumerate() {
        if i > 0 {
            query.push(" UNION ALL ");
        }
        query.push("(SELECT * FROM threads WHERE ");
        match role {
            Party::Buyer => query.push("buyer_id = ").push_bind(agent_id),
            Party::Seller => query.push("seller_id = ").push_bind(agent_id),
        };
        push_thread_conditions(&mut query, filter);
        query.push(" ORDER BY id DESC LIMIT ").push_bind(filter.limit + 1).push(")");
    }
    query.push(") threads ORDER BY id DESC LIMIT ").push_bind(filter.limit + 1);
    query
}

/// The conditions of a thread list besides the agent's role.
fn push_thread_conditions(query: &mut QueryBuilder<Postgres>, filter: &ThreadFilter) {
    match filter.status {
        Some(ThreadStatus::Active) => query.push(" AND status = 'ACTIVE' AND expires_at > now()"),
        Some(ThreadStatus::Expired) => {
            query.push(" AND (status = 'EXPIRED' OR (status = 'ACTIVE' AND expires_at <= now()))")
        }
        Some(status @ (ThreadStatus::Accepted | ThreadStatus::Rejected | ThreadStatus::Closed)) => {
            query.push(" AND status = ").push_bind(status.as_str())
        }
        None => query,
    };
    if let Some(listing_id) = filter.listing_id {
        query.push(" AND listing_id = ").push_bind(listing_id);
    }
    if let Some(order_id) = filter.order_id {
        query.push(" AND order_id = ").push_bind(order_id);
    }
    if let Some(kind) = filter.kind {
        query.push(" AND kind = ").push_bind(kind.as_str());
    }
    if let Some(after) = filter.after {
        query.push(" AND id < ").push_bind(after);
    }
}

/// A thread's kind, whoever's it is (the caller checked the thread is theirs).
pub async fn kind_of(executor: impl PgExecutor<'_>, thread_id: Uuid) -> Result<Option<ThreadKind>, sqlx::Error> {
    let kind: Option<String> =
        sqlx::query_scalar("SELECT kind FROM threads WHERE id = $1").bind(thread_id).fetch_optional(executor).await?;
    Ok(kind.and_then(|kind| kind.parse().ok()))
}
