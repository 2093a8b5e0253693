//! Keys the server makes for itself and keeps in the database, so that every instance uses the
//! same one: the key webhook secrets are sealed with, when none is configured.

use sqlx::PgExecutor;

/// Stores `key` under `name` unless a key of that name is stored already.
pub async fn store_if_absent(executor: impl PgExecutor<'_>, name: &str, key: &[u8; 32]) -> Result<(), sqlx::Error> {
    sqlx::query!("INSERT INTO server_keys (name, key) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING", name, &key[..])
        .execute(executor)
        .await
        .map(drop)
}

/// The key stored under `name`.
pub async fn get(executor: impl PgExecutor<'_>, name: &str) -> Result<Vec<u8>, sqlx::Error> {
    sqlx::query_scalar!("SELECT key FROM server_keys WHERE name = $1", name).fetch_one(executor).await
}
