//! The keys approval receipts are signed with (SPEC §10): the private key sealed, the public key
//! published at `/.well-known/jwks.json`.

use sqlx::{FromRow, PgExecutor};

/// A signing key as stored.
#[derive(Debug, Clone, FromRow)]
pub struct ReceiptKey {
    pub kid: String,
    pub public_key: Vec<u8>,
    pub sealed_key: Vec<u8>,
}

/// Stores the key unless an unretired one is stored already. Two instances starting together
/// may both store theirs: both are published, and [`current`] picks the same one for both.
pub async fn store_if_none(
    executor: impl PgExecutor<'_>,
    kid: &str,
    public_key: &[u8],
    sealed_key: &[u8],
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "INSERT INTO receipt_keys (kid, public_key, sealed_key)
         SELECT $1, $2, $3 WHERE NOT EXISTS (SELECT 1 FROM receipt_keys WHERE retired_at IS NULL)
         ON CONFLICT (kid) DO NOTHING",
        kid,
        public_key,
        sealed_key,
    )
    .execute(executor)
    .await
    .map(drop)
}

/// The key receipts are signed with: the oldest unretired one.
pub async fn current(executor: impl PgExecutor<'_>) -> Result<Option<ReceiptKey>, sqlx::Error> {
    sqlx::query_as!(
        ReceiptKey,
        "SELECT kid, public_key, sealed_key FROM receipt_keys WHERE retired_at IS NULL
         ORDER BY created_at, kid LIMIT 1"
    )
    .fetch_optional(executor)
    .await
}

/// Every key's id and public key, retired ones included, oldest first.
pub async fn published(executor: impl PgExecutor<'_>) -> Result<Vec<(String, Vec<u8>)>, sqlx::Error> {
    let rows =
        sqlx::query!("SELECT kid, public_key FROM receipt_keys ORDER BY created_at, kid").fetch_all(executor).await?;
    Ok(rows.into_iter().map(|row| (row.kid, row.public_key)).collect())
}
