//! Approvals (SPEC §10): the rules per agent, listing or thread, the approvers and their tokens,
//! and the held moves with their answers and budgets.

use chrono::{DateTime, Utc};
use serde::Deserialize;
use sqlx::types::Json;
use sqlx::{FromRow, PgConnection, PgExecutor};
use uuid::Uuid;

use super::Page;
use super::policies::Scope;
use super::text::Text;
use haggle_api::{HeldMove, PolicyLevel};
use haggle_domain::approval::{ApprovalRules, ApprovalStatus, BudgetScope, Move};
use haggle_domain::{Currency, Party, Tier};

/// Stored rules, as their owner reads them; shown as [`haggle_api::StoredApprovalRules`].
#[derive(Debug, Clone, FromRow)]
pub struct StoredRules {
    #[sqlx(try_from = "String")]
    pub scope: PolicyLevel,
    pub listing_id: Option<Uuid>,
    pub thread_id: Option<Uuid>,
    pub rules: Json<ApprovalRules>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// `sqlx::query_as!` reading [`StoredRules`]: `$before`, the rules' columns, then `$after`.
macro_rules! query_rules {
    ([$($before:literal),+], $after:literal, $($args:tt)*) => {
        sqlx::query_as!(
            StoredRules,
            $($before +)+ r#"CASE WHEN thread_id IS NOT NULL THEN 'thread' WHEN listing_id IS NOT NULL THEN 'listing'
                          ELSE 'agent' END AS "scope!: Text<PolicyLevel>",
                     listing_id, thread_id, rules AS "rules: Json<ApprovalRules>", created_at, updated_at"#
                + $after,
            $($args)*
        )
    };
}

/// Creates or replaces the agent's rules for `scope`, and marks the agent as having rules.
pub async fn put_rules(
    conn: &mut PgConnection,
    agent_id: Uuid,
    scope: Scope,
    rules: &ApprovalRules,
) -> Result<StoredRules, sqlx::Error> {
    let (id, rules) = (Uuid::now_v7(), Json(rules));
    let (listing_id, thread_id) = (scope.listing_id(), scope.thread_id());
    // One statement a scope, each replacing the rules its own unique index finds.
    macro_rules! upsert {
        ($target:literal) => {
            query_rules!(
                [
                    "INSERT INTO approval_rules (id, agent_id, listing_id, thread_id, rules) VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT ",
                    $target,
                    "
             DO UPDATE SET rules = EXCLUDED.rules, updated_at = now()
             RETURNING "
                ],
                "",
                id,
                agent_id,
                listing_id,
                thread_id,
                rules as _,
            )
            .fetch_one(&mut *conn)
            .await
        };
    }
    let stored = match scope {
        Scope::Agent => upsert!("(agent_id) WHERE listing_id IS NULL AND thread_id IS NULL")?,
        Scope::Listing(_) => upsert!("(agent_id, listing_id) WHERE listing_id IS NOT NULL")?,
        Scope::Thread(_) => upsert!("(agent_id, thread_id) WHERE thread_id IS NOT NULL")?,
    };
    mark_agent(conn, agent_id).await?;
    Ok(stored)
}

pub async fn get_rules(
    executor: impl PgExecutor<'_>,
    agent_id: Uuid,
    scope: Scope,
) -> Result<Option<StoredRules>, sqlx::Error> {
    match scope {
        Scope::Agent => {
            query_rules!(
                ["SELECT "],
                " FROM approval_rules WHERE agent_id = $1 AND listing_id IS NULL AND thread_id IS NULL",
                agent_id,
            )
            .fetch_optional(executor)
            .await
        }
        Scope::Listing(listing_id) => {
            query_rules!(
                ["SELECT "],
                " FROM approval_rules WHERE agent_id = $1 AND listing_id = $2",
                agent_id,
                listing_id
            )
            .fetch_optional(executor)
            .await
        }
        Scope::Thread(thread_id) => {
            query_rules!(
                ["SELECT "],
                " FROM approval_rules WHERE agent_id = $1 AND thread_id = $2",
                agent_id,
                thread_id
            )
            .fetch_optional(executor)
            .await
        }
    }
}

/// Deletes the agent's rules for `scope` (false if there were none), and marks whether the
/// agent still has rules anywhere.
pub async fn delete_rules(conn: &mut PgConnection, agent_id: Uuid, scope: Scope) -> Result<bool, sqlx::Error> {
    let done = match scope {
        Scope::Agent => {
            sqlx::query!(
                "DELETE FROM approval_rules WHERE agent_id = $1 AND listing_id IS NULL AND thread_id IS NULL",
                agent_id
            )
            .execute(&mut *conn)
            .await?
        }
        Scope::Listing(listing_id) => {
            sqlx::query!("DELETE FROM approval_rules WHERE agent_id = $1 AND listing_id = $2", agent_id, listing_id)
                .execute(&mut *conn)
                .await?
        }
        Scope::Thread(thread_id) => {
            sqlx::query!("DELETE FROM approval_rules WHERE agent_id = $1 AND thread_id = $2", agent_id, thread_id)
                .execute(&mut *conn)
                .await?
        }
    };
    mark_agent(conn, agent_id).await?;
    Ok(done.rows_affected() > 0)
}

/// Sets `agents.approval_rules` to whether the agent has rules anywhere.
async fn mark_agent(conn: &mut PgConnection, agent_id: Uuid) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE agents SET approval_rules = EXISTS (SELECT 1 FROM approval_rules WHERE agent_id = $1) WHERE id = $1",
        agent_id
    )
    .execute(conn)
    .await
    .map(drop)
}

/// What a move of the agent is checked against: its rules most specific to the thread (if
/// any) and listing (the thread's, else the listing's, else its own), and the approved budgets
/// that cover the thread or listing now, each with the side it was granted to.
#[derive(Debug, Clone, Default)]
pub struct Applicable {
    pub rules: Option<ApprovalRules>,
    pub budgets: Vec<(Party, i64)>,
}

pub async fn applicable(
    executor: impl PgExecutor<'_>,
    agent_id: Uuid,
    listing_id: Uuid,
    thread_id: Option<Uuid>,
) -> Result<Applicable, sqlx::Error> {
    let row = sqlx::query!(
        r#"SELECT (SELECT r.rules FROM approval_rules r
                    WHERE r.agent_id = $1
                      AND (r.thread_id = $3 OR r.listing_id = $2 OR (r.thread_id IS NULL AND r.listing_id IS NULL))
                    ORDER BY (r.thread_id IS NOT NULL) DESC, (r.listing_id IS NOT NULL) DESC LIMIT 1)
                      AS "rules?: Json<ApprovalRules>",
                  COALESCE((SELECT array_agg(a.party) FROM approvals a
                    WHERE a.agent_id = $1 AND a.budget_expires_at > now()
                      AND ((a.budget_scope = 'listing' AND a.listing_id = $2)
                           OR (a.budget_scope = 'thread' AND a.made_thread_id = $3))), '{}') AS "parties!: Vec<String>",
                  COALESCE((SELECT array_agg(a.budget_amount) FROM approvals a
                    WHERE a.agent_id = $1 AND a.budget_expires_at > now()
                      AND ((a.budget_scope = 'listing' AND a.listing_id = $2)
                           OR (a.budget_scope = 'thread' AND a.made_thread_id = $3))), '{}') AS "amounts!: Vec<i64>""#,
        agent_id,
        listing_id,
        thread_id,
    )
    .fetch_one(executor)
    .await?;
    let budgets = row
        .parties
        .iter()
        .zip(&row.amounts)
        .filter_map(|(party, &amount)| party.parse().ok().map(|party| (party, amount)))
        .collect();
    Ok(Applicable { rules: row.rules.map(|rules| rules.0), budgets })
}

/// The bid a counter or an acceptance of the agent answers, as the rules need it.
#[derive(Debug, Clone)]
pub struct BidTarget {
    pub thread_id: Uuid,
    pub listing_id: Uuid,
    pub party: Party,
    pub amount: i64,
    pub currency: Currency,
    pub expires_at: DateTime<Utc>,
}

/// The bid, if the agent is party to its thread.
pub async fn bid_target(
    executor: impl PgExecutor<'_>,
    bid_id: Uuid,
    agent_id: Uuid,
) -> Result<Option<BidTarget>, sqlx::Error> {
    let row = sqlx::query!(
        r#"SELECT b.thread_id, t.listing_id, COALESCE(b.amount, 0) AS "amount!", b.currency AS "currency: Text<Currency>",
                  b.expires_at,
                  CASE WHEN t.seller_id = $2 THEN 'seller' ELSE 'buyer' END AS "party!: Text<Party>"
           FROM bids b JOIN threads t ON t.id = b.thread_id
           WHERE b.id = $1 AND $2 IN (t.buyer_id, t.seller_id)"#,
        bid_id,
        agent_id,
    )
    .fetch_optional(executor)
    .await?;
    Ok(row.map(|row| BidTarget {
        thread_id: row.thread_id,
        listing_id: row.listing_id,
        party: row.party.0,
        amount: row.amount,
        currency: row.currency.0,
        expires_at: row.expires_at,
    }))
}

/// A held move and its answer, as stored (read whole through `row_to_json`); shown as
/// [`haggle_api::Approval`].
#[derive(Debug, Clone, Deserialize)]
pub struct Approval {
    pub id: Uuid,
    pub agent_id: Uuid,
    pub kind: Move,
    pub party: Party,
    pub listing_id: Uuid,
    pub thread_id: Option<Uuid>,
    pub bid_id: Option<Uuid>,
    pub amount: i64,
    pub currency: Currency,
    #[serde(rename = "move")]
    pub held: HeldMove,
    pub move_hash: String,
    pub status: ApprovalStatus,
    pub expires_at: DateTime<Utc>,
    pub answered_at: Option<DateTime<Utc>>,
    pub approver_id: Option<Uuid>,
    pub approver: Option<String>,
    pub note: Option<String>,
    pub failure_code: Option<String>,
    pub failure_detail: Option<String>,
    pub budget_amount: Option<i64>,
    pub budget_scope: Option<BudgetScope>,
    pub budget_expires_at: Option<DateTime<Utc>>,
    pub made_thread_id: Option<Uuid>,
    pub made_bid_id: Option<Uuid>,
    pub made_order_id: Option<Uuid>,
    pub receipt: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// A new request: the move held, where, and until when.
pub struct NewApproval<'a> {
    pub id: Uuid,
    pub agent_id: Uuid,
    pub held: &'a HeldMove,
    pub move_hash: &'a str,
    pub expires_at: DateTime<Utc>,
}

pub async fn insert(conn: &mut PgConnection, new: &NewApproval<'_>) -> Result<Approval, sqlx::Error> {
    let held = new.held;
    let approval = sqlx::query_scalar!(
        r#"INSERT INTO approvals AS a (id, agent_id, kind, party, listing_id, thread_id, bid_id, amount, currency, move,
                                  move_hash, status, expires_at)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, 'PENDING', $12)
           RETURNING row_to_json(a) AS "a!: Json<Approval>""#,
        new.id,
        new.agent_id,
        held.kind.as_str(),
        held.party.as_str(),
        held.listing_id,
        held.thread_id,
        held.bid_id,
        held.amount,
        held.currency.as_str(),
        Json(held) as _,
        new.move_hash,
        new.expires_at,
    )
    .fetch_one(conn)
    .await?;
    Ok(approval.0)
}

/// The agent's requests still waiting (their time not up).
pub async fn pending_count(conn: &mut PgConnection, agent_id: Uuid) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar!(
        r#"SELECT count(*) AS "count!" FROM approvals WHERE agent_id = $1 AND status = 'PENDING' AND expires_at > now()"#,
        agent_id
    )
    .fetch_one(conn)
    .await
}

/// One of the agent's requests, locked for its answer, with the database's clock.
pub async fn lock(
    conn: &mut PgConnection,
    id: Uuid,
    agent_id: Uuid,
) -> Result<Option<(Approval, DateTime<Utc>)>, sqlx::Error> {
    let row = sqlx::query!(
        r#"SELECT row_to_json(a) AS "a!: Json<Approval>", now() AS "now!"
           FROM approvals a WHERE id = $1 AND agent_id = $2 FOR UPDATE"#,
        id,
        agent_id,
    )
    .fetch_optional(conn)
    .await?;
    Ok(row.map(|row| (row.a.0, row.now)))
}

pub async fn get(executor: impl PgExecutor<'_>, id: Uuid, agent_id: Uuid) -> Result<Option<Approval>, sqlx::Error> {
    let approval = sqlx::query_scalar!(
        r#"SELECT row_to_json(a) AS "a!: Json<Approval>" FROM approvals a WHERE id = $1 AND agent_id = $2"#,
        id,
        agent_id,
    )
    .fetch_optional(executor)
    .await?;
    Ok(approval.map(|approval| approval.0))
}

/// A page of the agent's requests, newest first, after the cursor, in a status as read now (a
/// pending request past its time is EXPIRED).
pub async fn page(
    executor: impl PgExecutor<'_>,
    agent_id: Uuid,
    status: Option<ApprovalStatus>,
    before: Option<Uuid>,
    limit: i64,
) -> Result<Page<Approval>, sqlx::Error> {
    let rows = sqlx::query_scalar!(
        r#"SELECT row_to_json(a) AS "a!: Json<Approval>" FROM approvals a
           WHERE agent_id = $1 AND ($2::uuid IS NULL OR id < $2)
             AND CASE $3::text
                   WHEN 'PENDING' THEN status = 'PENDING' AND expires_at > now()
                   WHEN 'EXPIRED' THEN status = 'EXPIRED' OR (status = 'PENDING' AND expires_at <= now())
                   ELSE $3 IS NULL OR status = $3
                 END
           ORDER BY id DESC LIMIT $4"#,
        agent_id,
        before,
        status.map(ApprovalStatus::as_str),
        limit + 1,
    )
    .fetch_all(executor)
    .await?;
    Ok(Page::from_rows(rows.into_iter().map(|row| row.0).collect(), limit, |approval| approval.id))
}

/// How a request was answered.
pub struct Answer<'a> {
    pub status: ApprovalStatus,
    pub approver_id: Option<Uuid>,
    pub approver: Option<&'a str>,
    pub note: Option<&'a str>,
    pub failure: Option<(&'static str, String)>,
    pub budget: Option<(i64, BudgetScope, DateTime<Utc>)>,
    pub made_thread_id: Option<Uuid>,
    pub made_bid_id: Option<Uuid>,
    pub made_order_id: Option<Uuid>,
    pub receipt: Option<&'a str>,
}

impl Answer<'_> {
    pub fn of(status: ApprovalStatus) -> Answer<'static> {
        Answer {
            status,
            approver_id: None,
            approver: None,
            note: None,
            failure: None,
            budget: None,
            made_thread_id: None,
            made_bid_id: None,
            made_order_id: None,
            receipt: None,
        }
    }
}

/// Records the answer to a pending request (locked by the caller).
pub async fn answer(conn: &mut PgConnection, id: Uuid, answer: &Answer<'_>) -> Result<Approval, sqlx::Error> {
    let (failure_code, failure_detail) = answer.failure.clone().unzip();
    let (budget_amount, budget_scope, budget_expires_at) = match answer.budget {
        Some((amount, scope, expires_at)) => (Some(amount), Some(scope.as_str()), Some(expires_at)),
        None => (None, None, None),
    };
    let approval = sqlx::query_scalar!(
        r#"UPDATE approvals AS a SET status = $2, answered_at = now(), approver_id = $3, approver = $4, note = $5,
                  failure_code = $6, failure_detail = $7, budget_amount = $8, budget_scope = $9, budget_expires_at = $10,
                  made_thread_id = $11, made_bid_id = $12, made_order_id = $13, receipt = $14, updated_at = now()
           WHERE id = $1 AND status = 'PENDING'
           RETURNING row_to_json(a) AS "a!: Json<Approval>""#,
        id,
        answer.status.as_str(),
        answer.approver_id,
        answer.approver,
        answer.note,
        failure_code,
        failure_detail,
        budget_amount,
        budget_scope,
        budget_expires_at,
        answer.made_thread_id,
        answer.made_bid_id,
        answer.made_order_id,
        answer.receipt,
    )
    .fetch_one(conn)
    .await?;
    Ok(approval.0)
}

/// Up to `batch` pending requests past their time, marked EXPIRED (rows another transaction
/// holds are skipped: an answer is being given to them).
pub async fn expire_due(conn: &mut PgConnection, batch: i64) -> Result<Vec<Approval>, sqlx::Error> {
    let rows = sqlx::query_scalar!(
        r#"UPDATE approvals AS a SET status = 'EXPIRED', answered_at = now(), updated_at = now()
           WHERE id IN (SELECT id FROM approvals WHERE status = 'PENDING' AND expires_at <= now()
                        ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED)
           RETURNING row_to_json(a) AS "a!: Json<Approval>""#,
        batch,
    )
    .fetch_all(conn)
    .await?;
    Ok(rows.into_iter().map(|row| row.0).collect())
}

/// Marks the bid a move made under an approval with it.
pub async fn mark_bid(conn: &mut PgConnection, bid_id: Uuid, mark: &serde_json::Value) -> Result<(), sqlx::Error> {
    sqlx::query!("UPDATE bids SET approval = $2 WHERE id = $1", bid_id, mark).execute(conn).await.map(drop)
}

/// Marks the order a move made under an approval with it.
pub async fn mark_order(conn: &mut PgConnection, order_id: Uuid, mark: &serde_json::Value) -> Result<(), sqlx::Error> {
    sqlx::query!("UPDATE orders SET approval = $2 WHERE id = $1", order_id, mark).execute(conn).await.map(drop)
}

/// An approver as the agent sees it: never its token.
#[derive(Debug, Clone, FromRow)]
pub struct Approver {
    pub id: Uuid,
    pub name: String,
    pub prefix: String,
    pub created_at: DateTime<Utc>,
    pub revoked_at: Option<DateTime<Utc>>,
}

pub async fn insert_approver(
    conn: &mut PgConnection,
    agent_id: Uuid,
    name: &str,
    digest: &[u8],
    prefix: &str,
) -> Result<Approver, sqlx::Error> {
    sqlx::query_as!(
        Approver,
        "INSERT INTO approvers (id, agent_id, name, digest, prefix) VALUES ($1, $2, $3, $4, $5)
         RETURNING id, name, prefix, created_at, revoked_at",
        Uuid::now_v7(),
        agent_id,
        name,
        digest,
        prefix,
    )
    .fetch_one(conn)
    .await
}

pub async fn live_approvers(conn: &mut PgConnection, agent_id: Uuid) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar!(
        r#"SELECT count(*) AS "count!" FROM approvers WHERE agent_id = $1 AND revoked_at IS NULL"#,
        agent_id
    )
    .fetch_one(conn)
    .await
}

/// The agent's approvers, oldest first, revoked ones included.
pub async fn approvers(executor: impl PgExecutor<'_>, agent_id: Uuid) -> Result<Vec<Approver>, sqlx::Error> {
    sqlx::query_as!(
        Approver,
        "SELECT id, name, prefix, created_at, revoked_at FROM approvers WHERE agent_id = $1 ORDER BY id",
        agent_id
    )
    .fetch_all(executor)
    .await
}

/// The names of the agent's unrevoked approvers, oldest first.
pub async fn approver_names(executor: impl PgExecutor<'_>, agent_id: Uuid) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar!("SELECT name FROM approvers WHERE agent_id = $1 AND revoked_at IS NULL ORDER BY id", agent_id)
        .fetch_all(executor)
        .await
}

pub async fn revoke_approver(
    conn: &mut PgConnection,
    agent_id: Uuid,
    approver_id: Uuid,
) -> Result<Option<Approver>, sqlx::Error> {
    sqlx::query_as!(
        Approver,
        "UPDATE approvers SET revoked_at = COALESCE(revoked_at, now())
         WHERE id = $1 AND agent_id = $2
         RETURNING id, name, prefix, created_at, revoked_at",
        approver_id,
        agent_id,
    )
    .fetch_optional(conn)
    .await
}

/// Makes a webhook its approver's: it is disabled when the approver is revoked.
pub async fn bind_webhook(conn: &mut PgConnection, webhook_id: Uuid, approver_id: Uuid) -> Result<(), sqlx::Error> {
    sqlx::query("UPDATE webhooks SET approver_id = $2 WHERE id = $1")
        .bind(webhook_id)
        .bind(approver_id)
        .execute(conn)
        .await
        .map(drop)
}

/// Disables the webhooks of a revoked approver, which then receive nothing more.
pub async fn disable_webhooks_of(
    conn: &mut PgConnection,
    agent_id: Uuid,
    approver_id: Uuid,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE webhooks SET status = 'DISABLED', disabled_reason = 'its approver was revoked', updated_at = now()
         WHERE agent_id = $1 AND approver_id = $2 AND status = 'ACTIVE'",
    )
    .bind(agent_id)
    .bind(approver_id)
    .execute(conn)
    .await
    .map(drop)
}

/// The unrevoked approver whose token has this digest: its id, name, and its agent with the
/// agent's tier (as the approved moves are made).
#[derive(Debug, Clone)]
pub struct ApproverHolder {
    pub id: Uuid,
    pub agent_id: Uuid,
    pub name: String,
    pub tier: Tier,
}

pub async fn approver_by_digest(
    executor: impl PgExecutor<'_>,
    digest: &[u8],
) -> Result<Option<ApproverHolder>, sqlx::Error> {
    sqlx::query_as!(
        ApproverHolder,
        r#"SELECT p.id, p.agent_id, p.name, a.tier AS "tier: Text<Tier>" FROM approvers p JOIN agents a ON a.id = p.agent_id
           WHERE p.digest = $1 AND p.revoked_at IS NULL AND a.suspended_at IS NULL"#,
        digest
    )
    .fetch_optional(executor)
    .await
}
