//! Agents and their API keys.

use chrono::{DateTime, Utc};

use super::Page;
use super::text::Text;
use sqlx::{FromRow, PgConnection, PgExecutor};
use uuid::Uuid;

use haggle_domain::Tier;

#[derive(Debug, Clone, PartialEq, Eq, FromRow)]
pub struct Agent {
    pub id: Uuid,
    pub name: String,
    #[sqlx(try_from = "String")]
    pub tier: Tier,
    pub agency_id: Option<String>,
    pub advertiser_id: Option<String>,
    pub seat_id: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// What an agent may see of its keys: never the key itself.
#[derive(Debug, Clone, PartialEq, Eq, FromRow)]
pub struct ApiKey {
    pub id: Uuid,
    pub prefix: String,
    pub created_at: DateTime<Utc>,
    pub revoked_at: Option<DateTime<Utc>>,
}

/// The caller behind a request: just what authorization needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromRow)]
pub struct Caller {
    #[sqlx(rename = "agent_id")]
    pub id: Uuid,
    #[sqlx(try_from = "String")]
    pub tier: Tier,
    /// Whether the agent has approval rules anywhere (SPEC §10): only then is a move of its
    /// checked against them. Carried by the key cache, so that a move of an agent without rules
    /// reads nothing more.
    #[sqlx(default)]
    pub approval_rules: bool,
}

/// The NOTIFY channel on which a changed tier, a revoked key or a suspension is announced to every instance
/// (whose key caches then forget the agent).
pub const AGENTS_CHANNEL: &str = "haggle_agents";

pub async fn insert(conn: &mut PgConnection, id: Uuid, name: &str, tier: Tier) -> Result<Agent, sqlx::Error> {
    sqlx::query_as!(
        Agent,
        r#"INSERT INTO agents (id, name, tier) VALUES ($1, $2, $3)
           RETURNING id, name, tier AS "tier: Text<Tier>", agency_id, advertiser_id, seat_id, created_at, updated_at"#,
        id,
        name,
        tier.as_str(),
    )
    .fetch_one(conn)
    .await
}

pub async fn get(executor: impl PgExecutor<'_>, id: Uuid) -> Result<Option<Agent>, sqlx::Error> {
    sqlx::query_as!(
        Agent,
        r#"SELECT id, name, tier AS "tier: Text<Tier>", agency_id, advertiser_id, seat_id, created_at, updated_at
           FROM agents WHERE id = $1"#,
        id,
    )
    .fetch_optional(executor)
    .await
}

/// The agent holding an unrevoked key with this digest, unless it is suspended.
pub async fn caller_by_key_digest(executor: impl PgExecutor<'_>, digest: &[u8]) -> Result<Option<Caller>, sqlx::Error> {
    let holder = key_holder(executor, digest).await?;
    Ok(holder.filter(|holder| !holder.suspended).map(|holder| holder.caller))
}

/// The agent holding an unrevoked key, and whether the operator suspended it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromRow)]
pub struct KeyHolder {
    #[sqlx(flatten)]
    pub caller: Caller,
    pub suspended: bool,
}

/// The agent holding an unrevoked key with this digest, suspended or not.
pub async fn key_holder(executor: impl PgExecutor<'_>, digest: &[u8]) -> Result<Option<KeyHolder>, sqlx::Error> {
    let row = sqlx::query!(
        r#"SELECT k.agent_id, a.tier AS "tier: Text<Tier>", a.suspended_at IS NOT NULL AS "suspended!",
                  a.approval_rules
           FROM api_keys k JOIN agents a ON a.id = k.agent_id
           WHERE k.digest = $1 AND k.revoked_at IS NULL"#,
        digest,
    )
    .fetch_optional(executor)
    .await?;
    Ok(row.map(|row| KeyHolder {
        caller: Caller { id: row.agent_id, tier: row.tier.0, approval_rules: row.approval_rules },
        suspended: row.suspended,
    }))
}

/// Tells every instance, at the commit, to forget what it remembers of the agent's keys
/// ([`crate::keycache`]).
pub async fn announce_authorization_change(conn: &mut PgConnection, agent_id: Uuid) -> Result<(), sqlx::Error> {
    sqlx::query!("SELECT pg_notify($1, $2)", AGENTS_CHANNEL, agent_id.to_string()).execute(conn).await.map(drop)
}

/// Sets the tier and verified identity. `None` leaves a field alone; `Some(None)` clears it.
pub struct ProfileUpdate<'a> {
    pub tier: Option<Tier>,
    pub agency_id: Option<Option<&'a str>>,
    pub advertiser_id: Option<Option<&'a str>>,
    pub seat_id: Option<Option<&'a str>>,
}

pub async fn update_profile(
    conn: &mut PgConnection,
    id: Uuid,
    update: &ProfileUpdate<'_>,
) -> Result<Option<Agent>, sqlx::Error> {
    sqlx::query_as!(
        Agent,
        r#"UPDATE agents SET
               tier = COALESCE($2, tier),
               agency_id = CASE WHEN $3 THEN $4 ELSE agency_id END,
               advertiser_id = CASE WHEN $5 THEN $6 ELSE advertiser_id END,
               seat_id = CASE WHEN $7 THEN $8 ELSE seat_id END,
               updated_at = now()
           WHERE id = $1
           RETURNING id, name, tier AS "tier: Text<Tier>", agency_id, advertiser_id, seat_id, created_at, updated_at"#,
        id,
        update.tier.map(Tier::as_str),
        update.agency_id.is_some(),
        update.agency_id.flatten(),
        update.advertiser_id.is_some(),
        update.advertiser_id.flatten(),
        update.seat_id.is_some(),
        update.seat_id.flatten(),
    )
    .fetch_optional(conn)
    .await
}

pub async fn insert_key(
    conn: &mut PgConnection,
    id: Uuid,
    agent_id: Uuid,
    digest: &[u8],
    prefix: &str,
) -> Result<ApiKey, sqlx::Error> {
    sqlx::query_as!(
        ApiKey,
        "INSERT INTO api_keys (id, agent_id, digest, prefix) VALUES ($1, $2, $3, $4)
         RETURNING id, prefix, created_at, revoked_at",
        id,
        agent_id,
        digest,
        prefix,
    )
    .fetch_one(conn)
    .await
}

/// One of the agent's keys.
pub async fn key(executor: impl PgExecutor<'_>, agent_id: Uuid, key_id: Uuid) -> Result<Option<ApiKey>, sqlx::Error> {
    sqlx::query_as!(
        ApiKey,
        "SELECT id, prefix, created_at, revoked_at FROM api_keys WHERE agent_id = $1 AND id = $2",
        agent_id,
        key_id,
    )
    .fetch_optional(executor)
    .await
}

/// A page of the agent's keys, oldest first, after the cursor (a key id).
pub async fn keys_page(
    executor: impl PgExecutor<'_>,
    agent_id: Uuid,
    after: Option<Uuid>,
    limit: i64,
) -> Result<Page<ApiKey>, sqlx::Error> {
    let rows = sqlx::query_as!(
        ApiKey,
        "SELECT id, prefix, created_at, revoked_at FROM api_keys
         WHERE agent_id = $1 AND ($2::uuid IS NULL OR id > $2)
         ORDER BY id LIMIT $3",
        agent_id,
        after,
        limit + 1,
    )
    .fetch_all(executor)
    .await?;
    Ok(Page::from_rows(rows, limit, |key| key.id))
}

/// How many of the agent's keys are not revoked.
pub async fn live_keys(executor: impl PgExecutor<'_>, agent_id: Uuid) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar!(
        r#"SELECT count(*) AS "live!" FROM api_keys WHERE agent_id = $1 AND revoked_at IS NULL"#,
        agent_id
    )
    .fetch_one(executor)
    .await
}

/// Locks the agent's row, so that concurrent revocations of its keys (and the counts its other
/// limits take) are decided one at a time. It leaves the row's key to be shared: a statement
/// that writes a row naming the agent (a thread, an order, a task) checks its foreign key after
/// taking the counters of the agents its events concern, which a transaction holding this lock
/// may wait for as it writes its own events.
pub async fn lock(conn: &mut PgConnection, id: Uuid) -> Result<(), sqlx::Error> {
    sqlx::query!("SELECT 1 AS locked FROM agents WHERE id = $1 FOR NO KEY UPDATE", id)
        .fetch_optional(conn)
        .await
        .map(drop)
}

pub async fn revoke_key(conn: &mut PgConnection, agent_id: Uuid, key_id: Uuid) -> Result<Option<ApiKey>, sqlx::Error> {
    sqlx::query_as!(
        ApiKey,
        "UPDATE api_keys SET revoked_at = COALESCE(revoked_at, now())
         WHERE id = $1 AND agent_id = $2
         RETURNING id, prefix, created_at, revoked_at",
        key_id,
        agent_id,
    )
    .fetch_optional(conn)
    .await
}
