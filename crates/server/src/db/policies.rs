//! Auto-negotiation's policies: stored per agent, listing or thread, and what the executor and
//! the compatibility routes read of them. The tasks they answer are [`super::tasks`]'.

use chrono::{DateTime, Utc};
use haggle_api::PolicyLevel;
use sqlx::types::Json;
use sqlx::{FromRow, PgConnection, PgExecutor};
use uuid::Uuid;

use super::text::Text;
use haggle_domain::strategy::Policy;
use haggle_domain::{Party, ThreadStatus};

/// What a policy applies to: the agent's default for a role, one listing, or one thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Agent,
    Listing(Uuid),
    Thread(Uuid),
}

impl Scope {
    pub fn listing_id(self) -> Option<Uuid> {
        match self {
            Scope::Listing(id) => Some(id),
            Scope::Agent | Scope::Thread(_) => None,
        }
    }

    pub fn thread_id(self) -> Option<Uuid> {
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

/// `sqlx::query_as!` reading a [`StoredPolicy`]: the statement `$before` (its parts joined),
/// the policy's columns, then `$after`, binding `$args`.
macro_rules! query_policy {
    ([$($before:literal),+], $after:literal, $($args:tt)*) => {
        sqlx::query_as!(
            StoredPolicy,
            $($before +)+ r#"CASE WHEN thread_id IS NOT NULL THEN 'thread' WHEN listing_id IS NOT NULL THEN 'listing'
                          ELSE 'agent' END AS "scope!: Text<PolicyLevel>",
                     role AS "role: Text<Party>", listing_id, thread_id, policy AS "policy: Json<Policy>",
                     created_at, updated_at"#
                + $after,
            $($args)*
        )
    };
}

/// Creates or replaces the agent's policy for `scope`.
pub async fn put(
    conn: &mut PgConnection,
    agent_id: Uuid,
    role: Party,
    scope: Scope,
    policy: &Policy,
) -> Result<StoredPolicy, sqlx::Error> {
    let (id, role, policy) = (Uuid::now_v7(), role.as_str(), Json(policy));
    let (listing_id, thread_id) = (scope.listing_id(), scope.thread_id());
    // One statement a scope, each replacing the policy its own unique index finds: they differ
    // only in the conflict's target.
    macro_rules! upsert {
        ($target:literal) => {
            query_policy!(
                [
                    "INSERT INTO policies (id, agent_id, role, listing_id, thread_id, policy) VALUES ($1, $2, $3, $4, $5, $6)
             ON CONFLICT ",
                    $target,
                    "
             DO UPDATE SET policy = EXCLUDED.policy, role = EXCLUDED.role, updated_at = now()
             RETURNING "
                ],
                "",
                id,
                agent_id,
                role,
                listing_id,
                thread_id,
                policy as _,
            )
            .fetch_one(conn)
            .await
        };
    }
    match scope {
        Scope::Agent => upsert!("(agent_id, role) WHERE listing_id IS NULL AND thread_id IS NULL"),
        Scope::Listing(_) => upsert!("(agent_id, listing_id) WHERE listing_id IS NOT NULL"),
        Scope::Thread(_) => upsert!("(agent_id, thread_id) WHERE thread_id IS NOT NULL"),
    }
}

pub async fn get(
    executor: impl PgExecutor<'_>,
    agent_id: Uuid,
    role: Party,
    scope: Scope,
) -> Result<Option<StoredPolicy>, sqlx::Error> {
    match scope {
        Scope::Agent => {
            query_policy!(
                ["SELECT "],
                " FROM policies WHERE agent_id = $1 AND role = $2 AND listing_id IS NULL AND thread_id IS NULL",
                agent_id,
                role.as_str(),
            )
            .fetch_optional(executor)
            .await
        }
        Scope::Listing(listing_id) => {
            query_policy!(["SELECT "], " FROM policies WHERE agent_id = $1 AND listing_id = $2", agent_id, listing_id)
                .fetch_optional(executor)
                .await
        }
        Scope::Thread(thread_id) => {
            query_policy!(["SELECT "], " FROM policies WHERE agent_id = $1 AND thread_id = $2", agent_id, thread_id)
                .fetch_optional(executor)
                .await
        }
    }
}

/// Deletes the agent's policy for `scope`; false if there was none.
pub async fn delete(
    executor: impl PgExecutor<'_>,
    agent_id: Uuid,
    role: Party,
    scope: Scope,
) -> Result<bool, sqlx::Error> {
    let done =
        match scope {
            Scope::Agent => sqlx::query!(
                "DELETE FROM policies WHERE agent_id = $1 AND role = $2 AND listing_id IS NULL AND thread_id IS NULL",
                agent_id,
                role.as_str(),
            )
            .execute(executor)
            .await?,
            Scope::Listing(listing_id) => {
                sqlx::query!("DELETE FROM policies WHERE agent_id = $1 AND listing_id = $2", agent_id, listing_id)
                    .execute(executor)
                    .await?
            }
            Scope::Thread(thread_id) => {
                sqlx::query!("DELETE FROM policies WHERE agent_id = $1 AND thread_id = $2", agent_id, thread_id)
                    .execute(executor)
                    .await?
            }
        };
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
    sqlx::query_as!(
        PartyThread,
        r#"SELECT CASE WHEN t.seller_id = $2 THEN 'seller' ELSE 'buyer' END AS "role!: Text<Party>", l.ask_amount
           FROM threads t JOIN listings l ON l.id = t.listing_id
           WHERE t.id = $1 AND $2 IN (t.buyer_id, t.seller_id)"#,
        thread_id,
        agent_id,
    )
    .fetch_optional(executor)
    .await
}

pub async fn thread_status(conn: &mut PgConnection, thread_id: Uuid) -> Result<ThreadStatus, sqlx::Error> {
    let status =
        sqlx::query_scalar!(r#"SELECT status AS "status: Text<ThreadStatus>" FROM threads WHERE id = $1"#, thread_id)
            .fetch_one(conn)
            .await?;
    Ok(status.0)
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
pub(crate) use policy_in_thread;

/// The sentence the agent's policy gave with its answer to `bid_id`, which the counterparty may
/// read. A stop is left out: it told only the owner.
pub async fn rationale(
    conn: &mut PgConnection,
    thread_id: Uuid,
    agent_id: Uuid,
    bid_id: Uuid,
) -> Result<Option<String>, sqlx::Error> {
    sqlx::query_scalar!(
        "SELECT rationale FROM auto_decisions
         WHERE thread_id = $1 AND agent_id = $2 AND bid_id = $3 AND action <> 'stop'
         ORDER BY id DESC LIMIT 1",
        thread_id,
        agent_id,
        bid_id,
    )
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
    // Built at run time: it splices `policy_in_thread`, which `tasks::task_context` reads too.
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
    sqlx::query_scalar!(
        r#"SELECT p.policy AS "policy: Json<serde_json::Value>"
           FROM listings l JOIN policies p ON p.agent_id = l.seller_id
           WHERE l.id = $1
             AND (p.listing_id = l.id OR (p.thread_id IS NULL AND p.listing_id IS NULL AND p.role = 'seller'))
           ORDER BY (p.listing_id IS NOT NULL) DESC LIMIT 1"#,
        listing_id,
    )
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
    sqlx::query_as!(
        ThreadPolicies,
        r#"SELECT (SELECT p.policy FROM policies p
                    WHERE p.agent_id = t.buyer_id
                      AND (p.thread_id = t.id OR p.listing_id = t.listing_id
                           OR (p.thread_id IS NULL AND p.listing_id IS NULL AND p.role = 'buyer'))
                    ORDER BY (p.thread_id IS NOT NULL) DESC, (p.listing_id IS NOT NULL) DESC LIMIT 1)
                      AS "buyer?: Json<serde_json::Value>",
                  (SELECT p.policy FROM policies p
                    WHERE p.agent_id = t.seller_id
                      AND (p.thread_id = t.id OR p.listing_id = t.listing_id
                           OR (p.thread_id IS NULL AND p.listing_id IS NULL AND p.role = 'seller'))
                    ORDER BY (p.thread_id IS NOT NULL) DESC, (p.listing_id IS NOT NULL) DESC LIMIT 1)
                      AS "seller?: Json<serde_json::Value>"
           FROM threads t WHERE t.id = $1"#,
        thread_id,
    )
    .fetch_one(executor)
    .await
}
