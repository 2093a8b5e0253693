//! The tasks that wait for a policy's decision, and the decisions made: the one rule that
//! queues a pending bid for its responder's policy ([`queue_tasks`]), and the executor's
//! statements.

use chrono::{DateTime, Utc};
use serde::Deserialize;
use sqlx::types::Json;
use sqlx::{FromRow, PgConnection, PgExecutor, Row, ValueRef};
use uuid::Uuid;

use haggle_domain::issues::Issues;
use haggle_domain::{BidStatus, Party, ThreadKind, ThreadStatus, Tier};

use super::policies::{Scope, policy_in_thread};
use super::rows::{BidContext, bid_context_columns, bid_context_tables, party_of_thread};
use super::{Bid, Listing, Thread};

/// The NOTIFY channel that tells auto-negotiation executors that bids wait for a policy.
pub const AUTO_CHANNEL: &str = "haggle_auto";

/// What queuing does to a bid that already has a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Requeue {
    /// A bid is queued once: a second queuing changes nothing.
    Never,
    /// A task already done (its policy stopped, say) is due again at once: a new policy takes
    /// the bid over.
    IfDone,
}

/// The one rule that queues bids for policies, as the CTEs `queued` and `announced` of the
/// statement that uses it: every bid of the relation `pending` (columns `bid_id`, `thread_id`,
/// `listing_id`, and `agent_id` and `role`, who must answer it) that a policy of that agent
/// covers (`covering_policies`, the schema's rule) gets a task, and the tasks are announced on
/// `haggle_auto` when the transaction commits, the payload naming the connection's pool
/// ([`super::ORIGIN_SETTING`]; empty on a connection without one). The statement's SELECT must
/// read `announced`.
pub fn queue_tasks(pending: &str, requeue: Requeue) -> String {
    let conflict = match requeue {
        Requeue::Never => "DO NOTHING",
        Requeue::IfDone => {
            "DO UPDATE SET done_at = NULL, due_at = now(), attempts = 0 WHERE auto_tasks.done_at IS NOT NULL"
        }
    };
    queue(
        pending,
        "NULL::timestamptz",
        conflict,
        &format!(
            "SELECT pg_notify('{AUTO_CHANNEL}', coalesce(current_setting('{}', true), '')) FROM queued
             HAVING count(*) > 0",
            super::ORIGIN_SETTING
        ),
    )
}

/// The rule of [`queue_tasks`] for the transaction that takes the tasks it queues at once (the
/// executor's, answering one policy's counter with the other's): each task is queued done, as a
/// task taken is, and nobody is told. `queued` gives each task's `bid_id` and `agent_id`.
pub fn take_queued_tasks(pending: &str) -> String {
    queue(pending, "now()", "DO NOTHING", "SELECT NULL WHERE false")
}

/// The rule's CTEs: tasks queued with `done_at`, a conflict resolved by `conflict`, and the CTE
/// `announced` being `announce`.
fn queue(pending: &str, done_at: &str, conflict: &str, announce: &str) -> String {
    format!(
        "queued AS (
             INSERT INTO auto_tasks (bid_id, thread_id, agent_id, done_at)
             SELECT n.bid_id, n.thread_id, n.agent_id, {done_at} FROM {pending} n
             WHERE EXISTS (SELECT 1 FROM covering_policies(n.agent_id, n.role, n.listing_id, n.thread_id))
             ON CONFLICT (bid_id) {conflict}
             RETURNING bid_id, agent_id
         ), announced AS (
             {announce}
         )"
    )
}

/// The pending bids of stored price threads and who must answer them, as [`queue_tasks`] reads
/// them: no policy answers a negotiation on an order.
pub const STORED_PENDING: &str = "(SELECT b.id AS bid_id, t.id AS thread_id, t.listing_id, r.agent_id, r.role
      FROM bids b JOIN threads t ON t.id = b.thread_id
      CROSS JOIN LATERAL (
          SELECT CASE b.author WHEN 'buyer' THEN t.seller_id ELSE t.buyer_id END AS agent_id,
                 CASE b.author WHEN 'buyer' THEN 'seller' ELSE 'buyer' END AS role) r
      WHERE b.status = 'PENDING' AND t.status = 'ACTIVE' AND t.last_bid_id = b.id AND t.kind = 'price')";

/// The pending bids of negotiations on orders that a policy answers, and who must answer them,
/// as [`queue_tasks`] reads them: a buyer's refund bid, when the most specific policy covering
/// the seller there (the one the executor reads) declares `refund`; a schedule bid, when the
/// responder's declares `schedule`.
pub const ANSWERED_ORDER_PENDING: &str = "(SELECT b.id AS bid_id, t.id AS thread_id, t.listing_id, r.agent_id, r.role
      FROM bids b JOIN threads t ON t.id = b.thread_id
      CROSS JOIN LATERAL (
          SELECT CASE b.author WHEN 'buyer' THEN t.seller_id ELSE t.buyer_id END AS agent_id,
                 CASE b.author WHEN 'buyer' THEN 'seller' ELSE 'buyer' END AS role) r
      WHERE b.status = 'PENDING' AND t.status = 'ACTIVE' AND t.last_bid_id = b.id
        AND ((t.kind = 'refund' AND b.author = 'buyer') OR t.kind = 'schedule')
        AND (SELECT c.policy ? t.kind FROM covering_policies(r.agent_id, r.role, t.listing_id, t.id) c
             ORDER BY (c.thread_id IS NOT NULL) DESC, (c.listing_id IS NOT NULL) DESC LIMIT 1))";

/// Queues a task for every pending bid within `scope` that waits for the agent's answer in
/// `role`, so that a policy set on a live negotiation takes it over: a bid the agent's previous
/// policy stopped on is decided again, and so is a refund or schedule bid on an order that the
/// policy answers ([`ANSWERED_ORDER_PENDING`]). Returns how many. Run it outside any transaction that
/// holds listing or thread locks: a task is locked before them by the executor.
pub async fn queue_waiting(
    executor: impl PgExecutor<'_>,
    agent_id: Uuid,
    role: Party,
    scope: Scope,
) -> Result<u64, sqlx::Error> {
    let own_side = match role {
        Party::Seller => "t.seller_id",
        Party::Buyer => "t.buyer_id",
    };
    let waiting = format!(
        "(SELECT p.* FROM (SELECT * FROM {STORED_PENDING} s UNION ALL SELECT * FROM {ANSWERED_ORDER_PENDING} o) p
          JOIN threads t ON t.id = p.thread_id
          WHERE p.agent_id = $1 AND {own_side} = $1
            AND ($2::uuid IS NULL OR t.listing_id = $2) AND ($3::uuid IS NULL OR t.id = $3))"
    );
    // Built at run time: it splices the rule that queues tasks (`queue_tasks`) and the agent's side.
    let (queued, _announced): (i64, i64) = sqlx::query_as(&format!(
        "WITH {} SELECT (SELECT count(*) FROM queued), (SELECT count(*) FROM announced)",
        queue_tasks(&waiting, Requeue::IfDone)
    ))
    .bind(agent_id)
    .bind(scope.listing_id())
    .bind(scope.thread_id())
    .fetch_one(executor)
    .await?;
    Ok(queued as u64)
}

/// Queues the pending bids, still without a task, that a policy changed in the last `window_ms`
/// milliseconds covers. A move whose statement began before such a policy committed, and which
/// committed after the policy's own queuing ([`queue_waiting`]) ran, could see neither the
/// policy nor be seen by it: this catches its bid. Returns how many.
pub async fn queue_after_changes(executor: impl PgExecutor<'_>, window_ms: i64) -> Result<u64, sqlx::Error> {
    // Built at run time: it splices the rule that queues tasks (`queue_tasks`).
    static STATEMENT: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        let waiting = format!(
            "(SELECT DISTINCT p.* FROM
                (SELECT agent_id, listing_id, thread_id FROM policies
                 WHERE updated_at > now() - $1 * interval '1 millisecond') c
              CROSS JOIN LATERAL (
                  SELECT t.id FROM threads t
                  WHERE t.status = 'ACTIVE' AND t.buyer_id = c.agent_id
                    AND (c.listing_id IS NULL OR t.listing_id = c.listing_id) AND (c.thread_id IS NULL OR t.id = c.thread_id)
                  UNION ALL
                  SELECT t.id FROM threads t
                  WHERE t.status = 'ACTIVE' AND t.seller_id = c.agent_id
                    AND (c.listing_id IS NULL OR t.listing_id = c.listing_id) AND (c.thread_id IS NULL OR t.id = c.thread_id)
              ) live
              JOIN {STORED_PENDING} p ON p.thread_id = live.id AND p.agent_id = c.agent_id
              WHERE NOT EXISTS (SELECT 1 FROM auto_tasks a WHERE a.bid_id = p.bid_id))"
        );
        format!(
            "WITH {} SELECT (SELECT count(*) FROM queued), (SELECT count(*) FROM announced)",
            queue_tasks(&waiting, Requeue::Never)
        )
    });
    let (queued, _announced): (i64, i64) =
        sqlx::query_as(STATEMENT.as_str()).bind(window_ms).fetch_one(executor).await?;
    Ok(queued as u64)
}

/// A task taken by an executor: the pending bid to answer for the agent.
#[derive(Debug, Clone, Copy, FromRow)]
pub struct Task {
    pub bid_id: Uuid,
    pub thread_id: Uuid,
    pub agent_id: Uuid,
    pub attempts: i32,
    /// How long it had been due when it was taken, in seconds (for the executor's lag).
    pub waited: f64,
}

/// Marks a task done outside an executor's transaction (when the executor gives up on it).
pub async fn finish_task(executor: impl PgExecutor<'_>, bid_id: Uuid) -> Result<(), sqlx::Error> {
    sqlx::query!("UPDATE auto_tasks SET done_at = now() WHERE bid_id = $1", bid_id).execute(executor).await.map(drop)
}

/// Puts off a task whose transaction failed, to be tried again after `delay_ms`.
pub async fn retry_task(executor: impl PgExecutor<'_>, task: Task, delay_ms: i64) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE auto_tasks SET due_at = now() + $2::bigint * interval '1 millisecond', attempts = attempts + 1
         WHERE bid_id = $1 AND done_at IS NULL",
        task.bid_id,
        delay_ms,
    )
    .execute(executor)
    .await
    .map(drop)
}

/// Deletes up to `batch` tasks done before `before`: by then nothing can still queue their bids
/// again. Returns how many.
pub async fn purge_done_tasks(
    executor: impl PgExecutor<'_>,
    before: DateTime<Utc>,
    batch: i64,
) -> Result<u64, sqlx::Error> {
    let done = sqlx::query!(
        "DELETE FROM auto_tasks WHERE bid_id IN (
             SELECT bid_id FROM auto_tasks WHERE done_at < $1 ORDER BY done_at LIMIT $2)",
        before,
        batch,
    )
    .execute(executor)
    .await?;
    Ok(done.rows_affected())
}

/// Deletes up to `batch` decisions made before `before` in threads that have ended (a live
/// thread's decisions count its automatic rounds). Returns how many.
pub async fn purge_decisions(
    executor: impl PgExecutor<'_>,
    before: DateTime<Utc>,
    batch: i64,
) -> Result<u64, sqlx::Error> {
    let done = sqlx::query!(
        "DELETE FROM auto_decisions WHERE id IN (
             SELECT d.id FROM auto_decisions d JOIN threads t ON t.id = d.thread_id
             WHERE d.decided_at < $1 AND t.status <> 'ACTIVE' ORDER BY d.decided_at LIMIT $2)",
        before,
        batch,
    )
    .execute(executor)
    .await?;
    Ok(done.rows_affected())
}

/// Everything a decision on a pending bid reads, for the agent whose turn it is.
#[derive(Debug, Clone, FromRow)]
pub struct TaskContext {
    #[sqlx(try_from = "String")]
    pub bid_status: BidStatus,
    pub bid_final: bool,
    #[sqlx(try_from = "String")]
    pub thread_status: ThreadStatus,
    pub last_bid_id: Uuid,
    pub listing_id: Uuid,
    /// The agent's side of the thread.
    #[sqlx(try_from = "String")]
    pub role: Party,
    #[sqlx(try_from = "String")]
    pub agent_tier: Tier,
    #[sqlx(try_from = "String")]
    pub buyer_tier: Tier,
    pub ask_amount: i64,
    pub max_rounds: i32,
    /// The thread's amounts, round 1 first.
    pub amounts: Vec<i64>,
    /// The terms of the thread's bids, round 1 first.
    pub terms: Json<Vec<Option<serde_json::Value>>>,
    /// The listing's issues, if it declares any.
    pub issues: Option<Json<Issues>>,
    /// Counters the agent's policy has made in the thread.
    pub auto_counters: i64,
    /// The most specific policy of the agent for this thread, if any.
    pub policy: Option<Json<serde_json::Value>>,
    /// The operator suspended the agent: its policies do not act.
    pub agent_suspended: bool,
    /// The agent has approval rules somewhere, which may hold its policy's moves.
    pub agent_approval_rules: bool,
}

/// The columns of a [`TaskContext`], over `bids b` (the task's bid), its thread `t` and listing
/// `l`, and the agents `buyer` (the thread's) and `me` (`$agent`, whose turn it is).
macro_rules! task_context_columns {
    ($agent:literal) => {
        concat!(
            "b.status AS bid_status, b.final AS bid_final, t.status AS thread_status, t.last_bid_id, t.listing_id,
             CASE WHEN t.seller_id = ",
            $agent,
            " THEN 'seller' ELSE 'buyer' END AS role,
             me.tier AS agent_tier, me.suspended_at IS NOT NULL AS agent_suspended,
             me.approval_rules AS agent_approval_rules, buyer.tier AS buyer_tier,
             l.ask_amount, l.max_rounds,
             ARRAY(SELECT amount FROM bids WHERE thread_id = t.id ORDER BY round) AS amounts,
             COALESCE((SELECT json_agg(terms ORDER BY round) FROM bids WHERE thread_id = t.id), '[]') AS terms,
             l.issues, ",
            policy_in_thread!($agent, concat!("CASE WHEN t.seller_id = ", $agent, " THEN 'seller' ELSE 'buyer' END")),
        )
    };
}

pub async fn task_context(conn: &mut PgConnection, task: Task) -> Result<Option<TaskContext>, sqlx::Error> {
    // Built at run time: it splices a task context's columns (`task_context_columns`, with
    // `policies::policy_in_thread`), which `take_task` reads too.
    sqlx::query_as(concat!(
        "SELECT ",
        task_context_columns!("$2"),
        "
         FROM bids b
         JOIN threads t ON t.id = b.thread_id
         JOIN listings l ON l.id = t.listing_id
         JOIN agents buyer ON buyer.id = t.buyer_id
         JOIN agents me ON me.id = $2
         WHERE b.id = $1 AND ",
        party_of_thread!("$2"),
    ))
    .bind(task.bid_id)
    .bind(task.agent_id)
    .fetch_optional(conn)
    .await
}

/// A task taken with what its decision reads, in one statement: the thread's kind (a schedule
/// is answered by the policy's availability, which reads its own), the task's context (`None` on
/// a schedule, if the bid is gone, or if the agent is no party to it), and, when the statement
/// took the thread's lock as well, the bid as a move on it reads it ([`take_task`]).
#[derive(Debug)]
pub struct TakenTask {
    pub task: Task,
    pub kind: Option<ThreadKind>,
    pub context: Option<TaskContext>,
    /// The bid, its thread and listing as a move on it reads them, the thread locked by the
    /// statement that took the task; the transaction runs on generic plans from then on
    /// (`crate::db::moves::plan_generically`).
    pub held: Option<BidContext>,
    /// Other tasks were due as this one was taken (some perhaps held by other executors).
    pub more: bool,
    /// With `held`, the thread's other side as its decision on a counter to this bid would read it.
    pub other: Option<OtherSide>,
}

/// The other side of a thread whose lock a task was taken with, as the decision on a counter to
/// the task's bid would read it: its standing, its policy there and the counters it has made.
#[derive(Debug, Deserialize)]
pub struct OtherSide {
    pub agent_id: Uuid,
    pub tier: Tier,
    pub suspended: bool,
    pub approval_rules: bool,
    pub auto_counters: i64,
    pub policy: Option<serde_json::Value>,
}

/// The statement [`take_task`] runs. Built at run time: it splices a task context's columns
/// (`task_context_columns`), which `task_context` reads too, and a bid context's
/// (`rows::bid_context_columns` over `rows::bid_context_tables`); it is shared with its own
/// `EXPLAIN` ([`plan_of_take_task`]).
const TAKE_TASK: &str = concat!(
    "WITH taken AS (
         UPDATE auto_tasks SET done_at = now()
         WHERE bid_id = (SELECT bid_id FROM auto_tasks WHERE done_at IS NULL AND due_at <= now()
                         ORDER BY due_at LIMIT 1 FOR UPDATE SKIP LOCKED)
         RETURNING bid_id, thread_id, agent_id, attempts,
                   EXTRACT(EPOCH FROM clock_timestamp() - due_at)::float8 AS waited
     )
     SELECT taken.bid_id, taken.thread_id, taken.agent_id, taken.attempts, taken.waited,
            t.kind AS thread_kind, me.id IS NOT NULL AS found,
            EXISTS (SELECT 1 FROM auto_tasks a
                    WHERE a.done_at IS NULL AND a.due_at <= now() AND a.bid_id <> taken.bid_id) AS more, ",
    task_context_columns!("taken.agent_id"),
    "
     , held.bid, held.thread, held.listing, held.parent_amount, held.db_now, held.other_side
     FROM taken
     LEFT JOIN bids b ON b.id = taken.bid_id
     LEFT JOIN threads t ON t.id = b.thread_id
     LEFT JOIN listings l ON l.id = t.listing_id
     LEFT JOIN agents buyer ON buyer.id = t.buyer_id
     LEFT JOIN agents me ON me.id = taken.agent_id AND taken.agent_id IN (t.buyer_id, t.seller_id)
     LEFT JOIN LATERAL (
         SELECT ",
    bid_context_columns!(),
    ", set_config('plan_cache_mode', 'force_generic_plan', true) AS generic_plans,
            (SELECT json_build_object('agent_id', o.id, 'tier', o.tier, 'suspended', o.suspended_at IS NOT NULL,
                                      'approval_rules', o.approval_rules, 'auto_counters', s.auto_counters,
                                      'policy', s.policy)
             FROM agents o CROSS JOIN LATERAL (SELECT ",
    policy_in_thread!("o.id", "CASE WHEN t.seller_id = o.id THEN 'seller' ELSE 'buyer' END"),
    ") s
             WHERE o.id = CASE WHEN t.seller_id = taken.agent_id THEN t.buyer_id ELSE t.seller_id END) AS other_side ",
    bid_context_tables!(),
    // The thread is named by the task's own `thread_id` too, so that it is looked up by its
    // key in any plan (`rows::party_of_thread` tells why a plan may otherwise scan threads).
    "
         WHERE b.id = taken.bid_id AND t.id = taken.thread_id AND ",
    party_of_thread!("taken.agent_id"),
    "
           AND taken.attempts = 0 AND t.kind = 'price'
           AND NOT EXISTS (SELECT 1 FROM threads o
                           WHERE o.listing_id = t.listing_id AND o.status = 'ACTIVE' AND o.kind = 'price'
                             AND o.id <> t.id)
         FOR UPDATE OF t
     ) held ON true"
);

/// The plan PostgreSQL makes for [`take_task`]'s statement (`EXPLAIN`'s text), for a test that
/// checks it finds the task's thread by its key.
pub async fn plan_of_take_task(executor: impl PgExecutor<'_>) -> Result<String, sqlx::Error> {
    let lines: Vec<String> =
        sqlx::query_scalar(&format!("EXPLAIN {TAKE_TASK}")).persistent(false).fetch_all(executor).await?;
    Ok(lines.join("\n"))
}

/// Takes the oldest due task, skipping those other executors hold, and marks it done in the
/// caller's transaction, which keeps it locked (if the transaction does not commit, the task
/// waits for the next executor); with its context read in the same statement, unlocked.
///
/// On a first try at a price thread that is its listing's only live one, the same statement
/// locks the thread and reads the bid as a move on it does (`held`): the move then takes no lock
/// and reads nothing more before its own statement. An acceptance then locks the listing after
/// the thread, the exception to the order of locks that a chained acceptance makes too; with no
/// other live thread on the listing, nothing else waits for the listing while it wants this
/// thread (a move that ends the listing's other threads, a closing listing) unless it began in
/// the instant since, and PostgreSQL's deadlock detection and the task's retry, which locks
/// nothing here, settle that. Elsewhere the move locks as any move does, listing first.
pub async fn take_task(conn: &mut PgConnection) -> Result<Option<TakenTask>, sqlx::Error> {
    let row = sqlx::query(TAKE_TASK).fetch_optional(conn).await?;
    let Some(row) = row else { return Ok(None) };
    let task = Task::from_row(&row)?;
    let kind: Option<String> = row.try_get("thread_kind")?;
    let kind = kind
        .map(ThreadKind::try_from)
        .transpose()
        .map_err(|error| sqlx::Error::ColumnDecode { index: "thread_kind".to_owned(), source: error.into() })?;
    let found: bool = row.try_get("found")?;
    // A schedule's bids carry no amounts: its policy reads what it needs itself.
    let context = match kind {
        Some(ThreadKind::Schedule) => None,
        _ if found => Some(TaskContext::from_row(&row)?),
        _ => None,
    };
    // Without the thread's lock, the bid context's columns are NULL.
    let held = if row.try_get_raw("bid")?.is_null() { None } else { Some(BidContext::from_row(&row)?) };
    let other: Option<Json<OtherSide>> = row.try_get("other_side")?;
    let more: bool = row.try_get("more")?;
    Ok(Some(TakenTask { task, kind, context, held, more, other: other.map(|Json(other)| other) }))
}

/// A task taken by the move that queued it, with what its decision and its move read: the
/// executor's next move on a thread both of whose sides have policies.
#[derive(Debug)]
pub struct Chained {
    pub task: Task,
    pub context: TaskContext,
    /// The bid, its thread and listing as a move on it reads them, the thread locked.
    pub bid: BidContext,
}

impl Chained {
    /// The task that the counter `bid` (which made `thread`) took for the other side, as the
    /// decision on it and its move read it: from `answered`, the context of the decision that
    /// made the counter, with the counter added, and what the counter's statement read
    /// (`next`). The same as a read after the counter would give: the thread is this
    /// transaction's, and the listing, the other side and its policy were read by the counter's
    /// statement.
    pub fn after(answered: &TaskContext, bid: Bid, thread: Thread, next: NextRead) -> Chained {
        let NextRead {
            agent_id,
            agent_tier,
            agent_suspended,
            agent_approval_rules,
            buyer_tier,
            auto_counters,
            policy,
            listing,
            db_now,
        } = next;
        let task = Task { bid_id: bid.id, thread_id: thread.id, agent_id, attempts: 0, waited: 0.0 };
        let mut amounts = answered.amounts.clone();
        amounts.push(bid.amount);
        let mut terms = answered.terms.0.clone();
        terms.push(bid.terms.clone());
        let context = TaskContext {
            bid_status: bid.status,
            bid_final: bid.is_final,
            thread_status: thread.status,
            last_bid_id: thread.last_bid_id,
            listing_id: thread.listing_id,
            role: if agent_id == thread.seller_id { Party::Seller } else { Party::Buyer },
            agent_tier,
            buyer_tier,
            ask_amount: listing.ask_amount,
            max_rounds: listing.max_rounds,
            amounts,
            terms: Json(terms),
            issues: answered.issues.clone(),
            auto_counters,
            policy,
            agent_suspended,
            agent_approval_rules,
        };
        // The answered bid is the thread's last in `answered` (a decision is made only on the
        // thread's last bid), and a bid's amount never changes.
        let parent_amount = answered.amounts.last().copied();
        let bid = BidContext { bid: Json(bid), thread: Json(thread), listing: Json(listing), parent_amount, db_now };
        Chained { task, context, bid }
    }
}

/// What the decision on the task a counter took for the other side reads that its executor does
/// not know already, read by the counter's statement ([`crate::db::moves::counter_chained`]):
/// who answers, that agent's standing and policy, the listing, and the clock of the read.
#[derive(Debug)]
pub struct NextRead {
    pub agent_id: Uuid,
    pub agent_tier: Tier,
    pub agent_suspended: bool,
    pub agent_approval_rules: bool,
    pub buyer_tier: Tier,
    /// Counters the agent's policy has made in the thread.
    pub auto_counters: i64,
    /// The most specific policy of the agent for this thread, if any.
    pub policy: Option<Json<serde_json::Value>>,
    pub listing: Listing,
    pub db_now: DateTime<Utc>,
}

/// A decision as it is recorded: the action, its reason code (the owner's), the sentence the
/// counterparty may read (for a stop, the owner's), and the counter it made.
#[derive(Debug, Clone, Copy)]
pub struct Decided<'a> {
    pub action: &'a str,
    pub reason: &'a str,
    pub rationale: &'a str,
    pub counter_bid_id: Option<Uuid>,
}

/// Records a decision, in the transaction that acts on it.
pub async fn record_decision(conn: &mut PgConnection, task: Task, decided: Decided<'_>) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "INSERT INTO auto_decisions (bid_id, thread_id, agent_id, action, reason, rationale, counter_bid_id)
         VALUES ($1, $2, $3, $4, $5, $6, $7)",
        task.bid_id,
        task.thread_id,
        task.agent_id,
        decided.action,
        decided.reason,
        decided.rationale,
        decided.counter_bid_id,
    )
    .execute(conn)
    .await
    .map(drop)
}
