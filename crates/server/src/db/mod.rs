//! Queries, one module per table family. Functions take `&mut PgConnection` (inside the caller's
//! transaction) or a pool, and return the records the API shows.

use std::time::Duration;

use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

pub mod agents;
pub mod events;
pub mod idempotency;
pub mod instances;
pub mod listings;
pub mod negotiation;
pub mod orders;
pub mod policies;
pub mod quotes;
pub mod webhooks;

pub use agents::{Agent, ApiKey};
pub use listings::Listing;
pub use negotiation::{Bid, Thread};
pub use orders::Order;

pub use haggle_api::Page;

pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../../migrations");

/// How long a request waits for a connection before the server answers 503.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);

pub fn pool_options(max_connections: u32) -> PgPoolOptions {
    PgPoolOptions::new()
        .max_connections(max_connections)
        .min_connections(1.min(max_connections))
        .acquire_timeout(ACQUIRE_TIMEOUT)
        .test_before_acquire(false)
}

/// Session settings for every connection: Haggle's statements are short and planned often, so
/// PostgreSQL's JIT compiler only ever costs time (hundreds of milliseconds on a statement whose
/// CTEs it overestimates).
pub fn session_settings(options: PgConnectOptions) -> PgConnectOptions {
    options.options([("jit", "off")])
}

pub async fn connect(options: PgConnectOptions, max_connections: u32) -> Result<PgPool, sqlx::Error> {
    pool_options(max_connections).connect_with(session_settings(options)).await
}

pub async fn migrate(pool: &PgPool) -> Result<(), sqlx::migrate::MigrateError> {
    MIGRATOR.run(pool).await
}

/// Whether a SQLSTATE says the connection ended: it failed, or the server shut it down.
pub fn connection_lost(code: Option<&str>) -> bool {
    code.is_some_and(|code| code.starts_with("08") || matches!(code, "57P01" | "57P02" | "57P03"))
}

/// Whether the database answers a trivial query.
pub async fn ping(pool: &PgPool) -> bool {
    sqlx::query("SELECT 1").execute(pool).await.is_ok()
}

/// Escapes `%`, `_` and `\` so user text matches literally inside an ILIKE pattern.
pub fn like_pattern(text: &str) -> String {
    let mut pattern = String::with_capacity(text.len() + 2);
    pattern.push('%');
    for c in text.chars() {
        if matches!(c, '%' | '_' | '\\') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern.push('%');
    pattern
}
