//! Auto-negotiation: policies, the tasks that wait for a decision, and the decisions made.

use chrono::{DateTime, Utc};
use haggle_api::{self as api, PolicyLevel};
use sqlx::types::Json;
use sqlx::{FromRow, PgConnection, PgExecutor};
use uuid::Uuid;

use haggle_domain::issues::Issues;
use haggle_domain::strategy::Policy;
use haggle_domain::{BidStatus, Party, ThreadStatus, Tier};

use super::events::AUTO_CHANNEL;
use super::negotiation::{BidContext, bid_context_columns};

/// What a policy applies to: the agent's default for a role, one listing, or one thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Agent,
    Listing(Uuid),
    Thread(Uuid),
}

impl Scope {
    fn listing_id(self) -> Option<Uuid> {
        match self {
            Scope::Listing(id) => Some(id),
            Scope::Agent | Scope::Thread(_) => None,
        }
    }

    fn thread_id(self) -> Option<Uuid> {
        match self {
            Scope::Thread(id) => Some(id),
            Scope::Agent | Scope::Listing(_) => None,
        }
    }
}

/// A stored policy, as its owner (and only its owner) reads it; shown as [`api::StoredPolicy`].
#[derive(Debug, Clone, FromRow)]
pub struct StoredPolicy {
    #[sqlx(try_from = "String")]
    pub scope: PolicyLevel,
    #[sqlx(try_from = "String")]
    pub role: Party,
    pub listing_id: Option<Uuid>,
    pub thread_id: Option<Uuid>,
    pub policy: Json<Policy>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl From<StoredPolicy> for api::StoredPolicy {
    fn from(row: StoredPolicy) -> api::StoredPolicy {
        api::StoredPolicy {
            scope: row.scope,
            role: row.role,
            listing_id: row.listing_id,
            thread_id: row.thread_id,
            policy: row.policy.0,
            created_at: row.created_at,
            updated_at: row.updated_at,
        }
    }
}

const POLICY_COLUMNS: &str = "CASE WHEN thread_id IS NOT NULL THEN 'thread' WHEN listing_id IS NOT NULL THEN 'listing' \
     ELSE 'agent' END AS scope, role, listing_id, thread_id, policy, created_at, updated_at";

fn scope_condition(scope: Scope) -> &'static str {
    match scope {
        Scope::Agent => "agent_id = $1 AND role = $2 AND listing_id IS NULL AND thread_id IS NULL",
        Scope::Listing(_) => "agent_id = $1 AND listing_id = $3",
        Scope::Thread(_) => "agent_id = $1 AND thread_id = $4",
    }
}

/// Creates or replaces the agent's policy for `scope`.
pub async fn put(
    conn: &mut PgConnection,
    agent_id: Uuid,
    role: Party,
    scope: Scope,
    policy: &Policy,
) -> Result<StoredPolicy, sqlx::Error> {
    let conflict = match scope {
        Scope::Agent => "(agent_id, role) WHERE listing_id IS NULL AND thread_id IS NULL",
        Scope::Listing(_) => "(agent_id, listing_id) WHERE listing_id IS NOT NULL",
        Scope::Thread(_) => "(agent_id, thread_id) WHERE thread_id IS NOT NULL",
    };
    sqlx::query_as(&format!(
        "INSERT INTO policies (id, agent_id, role, listing_id, thread_id, policy)
         VALUES ($5, $1, $2, $3, $4, $6)
         ON CONFLICT {conflict}
         DO UPDATE SET policy = EXCLUDED.policy, role = EXCLUDED.role, updated_at = now()
         RETURNING {POLICY_COLUMNS}"
    ))
    .bind(agent_id)
    .bind(role.as_str())
    .bind(scope.listing_id())
    .bind(scope.thread_id())
    .bind(Uuid::now_v7())
    .bind(Json(policy))
    .fetch_one(conn)
    .await
}

pub async fn get(
    executor: impl PgExecutor<'_>,
    agent_id: Uuid,
    role: Party,
    scope: Scope,
) -> Result<Option<StoredPolicy>, sqlx::Error> {
    sqlx::query_as(&format!("SELECT {POLICY_COLUMNS} FROM policies WHERE {}", scope_condition(scope)))
        .bind(agent_id)
        .bind(role.as_str())
        .bind(scope.listing_id())
        .bind(scope.thread_id())
        .fetch_optional(executor)
        .await
}

/// Deletes the agent's policy for `scope`; false if there was none.
pub async fn delete(
    executor: impl PgExecutor<'_>,
    agent_id: Uuid,
    role: Party,
    scope: Scope,
) -> Result<bool, sqlx::Error> {
    let done = sqlx::query(&format!("DELETE FROM policies WHERE {}", scope_condition(scope)))
        .bind(agent_id)
        .bind(role.as_str())
        .bind(scope.listing_id())
        .bind(scope.thread_id())
        .execute(executor)
        .await?;
    Ok(done.rows_affected() > 0)
}

/// A thread as a policy on it needs it: the agent's side, and the listing's ask.
#[derive(Debug, Clone, FromRow)]
pub struct PartyThread {
    #[sqlx(try_from = "String")]
    pub role: Party,
    pub ask_amount: i64,
}

/// The thread, if the agent is party to it.
pub async fn thread_for_party(
    executor: impl PgExecutor<'_>,
    thread_id: Uuid,
    agent_id: Uuid,
) -> Result<Option<PartyThread>, sqlx::Error> {
    sqlx::query_as(
        "SELECT CASE WHEN t.seller_id = $2 THEN 'seller' ELSE 'buyer' END AS role, l.ask_amount
         FROM threads t JOIN listings l ON l.id = t.listing_id
         WHERE t.id = $1 AND $2 IN (t.buyer_id, t.seller_id)",
    )
    .bind(thread_id)
    .bind(agent_id)
    .fetch_optional(executor)
    .await
}

pub async fn thread_status(conn: &mut PgConnection, thread_id: Uuid) -> Result<ThreadStatus, sqlx::Error> {
    let status: String =
        sqlx::query_scalar("SELECT status FROM threads WHERE id = $1").bind(thread_id).fetch_one(conn).await?;
    ThreadStatus::try_from(status).map_err(|error| sqlx::Error::Decode(error.into()))
}

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
/// covers (`covering_policies`, the schema's rule) gets a task, and the count is announced on
/// `haggle_auto` when the transaction commits. The statement's SELECT must read `announced`.
pub fn queue_tasks(pending: &str, requeue: Requeue) -> String {
    let conflict = match requeue {
        Requeue::Never => "DO NOTHING",
        Requeue::IfDone => {
            "DO UPDATE SET done_at = NULL, due_at = now(), attempts = 0 WHERE auto_tasks.done_at IS NOT NULL"
        }
    };
    format!(
        "queued AS (
             INSERT INTO auto_tasks (bid_id, thread_id, agent_id)
             SELECT n.bid_id, n.thread_id, n.agent_id FROM {pending} n
             WHERE EXISTS (SELECT 1 FROM covering_policies(n.agent_id, n.role, n.listing_id, n.thread_id))
             ON CONFLICT (bid_id) {conflict}
             RETURNING bid_id
         ), announced AS (
             SELECT pg_notify('{AUTO_CHANNEL}', count(*)::text) FROM queued HAVING count(*) > 0
         )"
    )
}

/// The pending bids of stored threads and who must answer them, as [`queue_tasks`] reads them.
pub const STORED_PENDING: &str = "(SELECT b.id AS bid_id, t.id AS thread_id, t.listing_id, r.agent_id, r.role
      FROM bids b JOIN threads t ON t.id = b.thread_id
      CROSS JOIN LATERAL (
          SELECT CASE b.author WHEN 'buyer' THEN t.seller_id ELSE t.buyer_id END AS agent_id,
                 CASE b.author WHEN 'buyer' THEN 'seller' ELSE 'buyer' END AS role) r
      WHERE b.status = 'PENDING' AND t.status = 'ACTIVE' AND t.last_bid_id = b.id)";

/// Queues a task for every pending bid within `scope` that waits for the agent's answer in
/// `role`, so that a policy set on a live negotiation takes it over: a bid the agent's previous
/// policy stopped on is decided again. Returns how many. Run it outside any transaction that
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
        "(SELECT p.* FROM {STORED_PENDING} p JOIN threads t ON t.id = p.thread_id
          WHERE p.agent_id = $1 AND {own_side} = $1
            AND ($2::uuid IS NULL OR t.listing_id = $2) AND ($3::uuid IS NULL OR t.id = $3))"
    );
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

/// What taking a task returns, as a [`Task`]: a `RETURNING` list of `UPDATE auto_tasks`.
macro_rules! taken_task {
    () => {
        "bid_id, thread_id, agent_id, attempts, EXTRACT(EPOCH FROM clock_timestamp() - due_at)::float8 AS waited"
    };
}

/// Records a decision: the statement (or, in a `WITH`, the part of one) that
/// `bind_decision!` binds as `$1` to `$7`.
macro_rules! insert_decision {
    () => {
        "INSERT INTO auto_decisions (bid_id, thread_id, agent_id, action, reason, rationale, counter_bid_id)
         VALUES ($1, $2, $3, $4, $5, $6, $7)"
    };
}

/// Binds a task's decision to a query that begins with `insert_decision!`.
macro_rules! bind_decision {
    ($query:expr, $task:expr, $decided:expr) => {
        $query
            .bind($task.bid_id)
            .bind($task.thread_id)
            .bind($task.agent_id)
            .bind($decided.action)
            .bind($decided.reason)
            .bind($decided.rationale)
            .bind($decided.counter_bid_id)
    };
}

/// Takes the oldest due task, skipping those other executors hold, and marks it done in the
/// caller's transaction, which keeps it locked: if the transaction does not commit, the task
/// waits for the next executor.
pub async fn take_task(conn: &mut PgConnection) -> Result<Option<Task>, sqlx::Error> {
    sqlx::query_as(concat!(
        "UPDATE auto_tasks SET done_at = now()
         WHERE bid_id = (SELECT bid_id FROM auto_tasks WHERE done_at IS NULL AND due_at <= now()
                         ORDER BY due_at LIMIT 1 FOR UPDATE SKIP LOCKED)
         RETURNING ",
        taken_task!()
    ))
    .fetch_optional(conn)
    .await
}

/// Marks a task done outside an executor's transaction (when the executor gives up on it).
pub async fn finish_task(executor: impl PgExecutor<'_>, bid_id: Uuid) -> Result<(), sqlx::Error> {
    sqlx::query("UPDATE auto_tasks SET done_at = now() WHERE bid_id = $1")
        .bind(bid_id)
        .execute(executor)
        .await
        .map(drop)
}

/// Puts off a task whose transaction failed, to be tried again after `delay_ms`.
pub async fn retry_task(executor: impl PgExecutor<'_>, task: Task, delay_ms: i64) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE auto_tasks SET due_at = now() + $2 * interval '1 millisecond', attempts = attempts + 1
         WHERE bid_id = $1 AND done_at IS NULL",
    )
    .bind(task.bid_id)
    .bind(delay_ms)
    .execute(executor)
    .await
    .map(drop)
}

/// Deletes up to `batch` tasks done before `before`: by then no publisher can still queue their
/// bids again. Returns how many.
pub async fn purge_done_tasks(
    executor: impl PgExecutor<'_>,
    before: DateTime<Utc>,
    batch: i64,
) -> Result<u64, sqlx::Error> {
    let done = sqlx::query(
        "DELETE FROM auto_tasks WHERE bid_id IN (
             SELECT bid_id FROM auto_tasks WHERE done_at < $1 ORDER BY done_at LIMIT $2)",
    )
    .bind(before)
    .bind(batch)
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
    let done = sqlx::query(
        "DELETE FROM auto_decisions WHERE id IN (
             SELECT d.id FROM auto_decisions d JOIN threads t ON t.id = d.thread_id
             WHERE d.decided_at < $1 AND t.status <> 'ACTIVE' ORDER BY d.decided_at LIMIT $2)",
    )
    .bind(before)
    .bind(batch)
    .execute(executor)
    .await?;
    Ok(done.rows_affected())
}

/// Two columns of a query over `threads t`: the counters `$agent`'s policies made in the thread
/// (`auto_counters`), and `$agent`'s policy most specific to it (`policy`): the thread's, else
/// the listing's, else its default for `$role`. One rule for the executor that acts on the
/// policy and for the compatibility routes that tell a buyer what it has left.
macro_rules! policy_in_thread {
    ($agent:literal, $($role:tt)+) => {
        concat!(
            "(SELECT count(*) FROM auto_decisions d
               WHERE d.thread_id = t.id AND d.agent_id = ",
            $agent,
            " AND d.action = 'counter') AS auto_counters,
             (SELECT p.policy FROM policies p
               WHERE p.agent_id = ",
            $agent,
            "
                 AND (p.thread_id = t.id OR p.listing_id = t.listing_id
                      OR (p.thread_id IS NULL AND p.listing_id IS NULL AND p.role = ",
            $($role)+,
            "))
               ORDER BY (p.thread_id IS NOT NULL) DESC, (p.listing_id IS NOT NULL) DESC LIMIT 1) AS policy"
        )
    };
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
             me.tier AS agent_tier, me.suspended_at IS NOT NULL AS agent_suspended, buyer.tier AS buyer_tier,
             l.ask_amount, l.max_rounds,
             ARRAY(SELECT amount FROM bids WHERE thread_id = t.id ORDER BY round) AS amounts,
             COALESCE((SELECT json_agg(terms ORDER BY round) FROM bids WHERE thread_id = t.id), '[]') AS terms,
             l.issues, ",
            policy_in_thread!($agent, concat!("CASE WHEN t.seller_id = ", $agent, " THEN 'seller' ELSE 'buyer' END")),
        )
    };
}

pub async fn task_context(conn: &mut PgConnection, task: Task) -> Result<Option<TaskContext>, sqlx::Error> {
    sqlx::query_as(concat!(
        "SELECT ",
        task_context_columns!("$2"),
        "
         FROM bids b
         JOIN threads t ON t.id = b.thread_id
         JOIN listings l ON l.id = t.listing_id
         JOIN agents buyer ON buyer.id = t.buyer_id
         JOIN agents me ON me.id = $2
         WHERE b.id = $1 AND $2 IN (t.buyer_id, t.seller_id)"
    ))
    .bind(task.bid_id)
    .bind(task.agent_id)
    .fetch_optional(conn)
    .await
}

/// A task taken by the move that queued it, with what its decision and its move read: the
/// executor's next move on a thread both of whose sides have policies.
#[derive(Debug, FromRow)]
pub struct Chained {
    #[sqlx(flatten)]
    pub task: Task,
    #[sqlx(flatten)]
    pub context: TaskContext,
    /// The bid, its thread and listing as a move on it reads them, the thread locked.
    #[sqlx(flatten)]
    pub bid: BidContext,
}

/// Records the decision that made a counter (its `counter_bid_id`), and takes that counter's
/// task if it is queued and due (the other side has a policy), with everything the next
/// decision and move read: one statement instead of four. Nobody else can see the task yet, since the transaction
/// whose counter queued it has not committed, and the thread's lock is this transaction's
/// since that counter; the read is current all the same (a statement of its own, after the
/// counter's).
///
/// The next decision's count of its agent's automatic counters does not see the decision
/// recorded here (a statement sees the rows as they were before it), and does not need to: the
/// decision is the other side's.
pub async fn record_and_take_next(
    conn: &mut PgConnection,
    task: Task,
    decided: Decided<'_>,
) -> Result<Option<Chained>, sqlx::Error> {
    let query = sqlx::query_as(concat!(
        "WITH decided AS (",
        insert_decision!(),
        "), taken AS (
             UPDATE auto_tasks SET done_at = now()
             WHERE bid_id = $7 AND done_at IS NULL AND due_at <= now()
             RETURNING ",
        taken_task!(),
        ")
         SELECT taken.bid_id, taken.thread_id, taken.agent_id, taken.attempts, taken.waited, ",
        task_context_columns!("taken.agent_id"),
        ", ",
        bid_context_columns!(),
        "
         FROM taken
         JOIN bids b ON b.id = taken.bid_id
         JOIN threads t ON t.id = b.thread_id
         JOIN listings l ON l.id = t.listing_id
         JOIN agents buyer ON buyer.id = t.buyer_id
         JOIN agents me ON me.id = taken.agent_id
         LEFT JOIN bids p ON p.id = b.parent_bid_id
         WHERE taken.agent_id IN (t.buyer_id, t.seller_id)
         FOR UPDATE OF t"
    ));
    bind_decision!(query, task, decided).fetch_optional(conn).await
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
    bind_decision!(sqlx::query(insert_decision!()), task, decided).execute(conn).await.map(drop)
}

/// The sentence the agent's policy gave with its answer to `bid_id`, which the counterparty may
/// read. A stop is left out: it told only the owner.
pub async fn rationale(
    conn: &mut PgConnection,
    thread_id: Uuid,
    agent_id: Uuid,
    bid_id: Uuid,
) -> Result<Option<String>, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT rationale FROM auto_decisions
         WHERE thread_id = $1 AND agent_id = $2 AND bid_id = $3 AND action <> 'stop'
         ORDER BY id DESC LIMIT 1",
    )
    .bind(thread_id)
    .bind(agent_id)
    .bind(bid_id)
    .fetch_optional(conn)
    .await
}

/// The seller's policy most specific to a thread (its own, its listing's, or the seller's
/// default), the automatic counters it made there, and the listing's round limit: what the
/// compatibility routes tell a buyer of the rounds left.
#[derive(Debug, Clone, FromRow)]
pub struct SellerBudget {
    pub max_rounds: i32,
    pub auto_counters: i64,
    pub policy: Option<Json<serde_json::Value>>,
}

pub async fn seller_budget(executor: impl PgExecutor<'_>, thread_id: Uuid) -> Result<SellerBudget, sqlx::Error> {
    sqlx::query_as(concat!(
        "SELECT l.max_rounds, ",
        policy_in_thread!("t.seller_id", "'seller'"),
        " FROM threads t JOIN listings l ON l.id = t.listing_id WHERE t.id = $1"
    ))
    .bind(thread_id)
    .fetch_one(executor)
    .await
}

/// The policy that would answer a new thread's bids for the listing's seller: the listing's, or
/// the seller's default. `None` if the listing or the policy does not exist.
pub async fn seller_policy(
    executor: impl PgExecutor<'_>,
    listing_id: Uuid,
) -> Result<Option<Json<serde_json::Value>>, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT p.policy FROM listings l JOIN policies p ON p.agent_id = l.seller_id
         WHERE l.id = $1
           AND (p.listing_id = l.id OR (p.thread_id IS NULL AND p.listing_id IS NULL AND p.role = 'seller'))
         ORDER BY (p.listing_id IS NOT NULL) DESC LIMIT 1",
    )
    .bind(listing_id)
    .fetch_optional(executor)
    .await
}

/// The most specific policy of each party of a thread (the thread's, the listing's, or the
/// party's default for its role), buyer first: what the mediator reads utilities from.
#[derive(Debug, Clone, FromRow)]
pub struct ThreadPolicies {
    pub buyer: Option<Json<serde_json::Value>>,
    pub seller: Option<Json<serde_json::Value>>,
}

pub async fn thread_policies(executor: impl PgExecutor<'_>, thread_id: Uuid) -> Result<ThreadPolicies, sqlx::Error> {
    sqlx::query_as(
        "SELECT (SELECT p.policy FROM policies p
                  WHERE p.agent_id = t.buyer_id
                    AND (p.thread_id = t.id OR p.listing_id = t.listing_id
                         OR (p.thread_id IS NULL AND p.listing_id IS NULL AND p.role = 'buyer'))
                  ORDER BY (p.thread_id IS NOT NULL) DESC, (p.listing_id IS NOT NULL) DESC LIMIT 1) AS buyer,
                (SELECT p.policy FROM policies p
                  WHERE p.agent_id = t.seller_id
                    AND (p.thread_id = t.id OR p.listing_id = t.listing_id
                         OR (p.thread_id IS NULL AND p.listing_id IS NULL AND p.role = 'seller'))
                  ORDER BY (p.thread_id IS NOT NULL) DESC, (p.listing_id IS NOT NULL) DESC LIMIT 1) AS seller
         FROM threads t WHERE t.id = $1",
    )
    .bind(thread_id)
    .fetch_one(executor)
    .await
}
