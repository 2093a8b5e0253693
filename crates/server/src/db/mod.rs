//! Queries, one module per job: the rows (`rows`, and each table family's own), the moves on
//! bids (`moves`), ending threads (`sweeps`), reading bids and threads (`threads`), the
//! mediator's (`mediation`), events and the outbox (`events`), policies and their tasks
//! (`policies`, `tasks`). Functions take `&mut PgConnection` (inside the caller's
//! transaction) or a pool, and return the records the API shows.

use std::future::Future;
use std::sync::LazyLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Connection, PgPool};

pub mod admin;
pub mod agents;
pub mod approvals;
pub mod approver_sessions;
pub mod console;
pub mod events;
pub mod idempotency;
pub mod instances;
pub mod listings;
pub mod mediation;
pub mod moves;
pub mod negotiations;
pub mod orders;
pub mod plans;
pub mod policies;
pub mod primary;
pub mod quotes;
pub mod receipts;
pub mod refund_tasks;
pub mod rows;
pub mod schedule_tasks;
pub mod server_keys;
pub mod sweeps;
pub mod tasks;
pub mod text;
pub mod threads;
pub mod webhooks;

pub use agents::{Agent, ApiKey};
pub use listings::Listing;
pub use orders::Order;
pub use rows::{Bid, Thread};

pub use haggle_api::Page;

pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../../migrations");

/// How long a request waits for a connection before the server answers 503.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);

/// A pool's options. Idle connections are not pinged before use (a round trip each time), except
/// those that were idle when a connection was last found lost
/// ([`suspect_idle_connections`]): the server may have ended them all.
pub fn pool_options(max_connections: u32) -> PgPoolOptions {
    PgPoolOptions::new()
        .max_connections(max_connections)
        .min_connections(1.min(max_connections))
        .acquire_timeout(ACQUIRE_TIMEOUT)
        .test_before_acquire(false)
        .before_acquire(|conn, connection| Box::pin(check_idle(conn, connection.idle_for, None)))
}

/// A pool's options, as [`pool_options`], for connections whose statements must not be sent on
/// a dead connection (an outcome would then be unknown): a connection idle for `idle` or longer
/// is pinged before it is used too. The pool pings every connection returned to it, so one idle
/// for less was alive that recently; pinging each one would cost a round trip a statement.
pub fn checked_pool_options(max_connections: u32, idle: Duration) -> PgPoolOptions {
    pool_options(max_connections)
        .before_acquire(move |conn, connection| Box::pin(check_idle(conn, connection.idle_for, Some(idle))))
}

/// Whether an idle connection may be handed out: pinged if it was idle when a connection was
/// last found lost, or for `ping_after` or longer. One that fails its ping is closed, and the
/// pool hands out another.
async fn check_idle(
    conn: &mut sqlx::PgConnection,
    idle_for: Duration,
    ping_after: Option<Duration>,
) -> Result<bool, sqlx::Error> {
    let recent = ping_after.is_none_or(|limit| idle_for < limit);
    if recent && idle_since_a_loss(idle_for) {
        return Ok(true);
    }
    Ok(conn.ping().await.is_ok())
}

/// When this process last found a database connection lost, in nanoseconds since [`EPOCH`]
/// (0: never).
static LAST_LOSS: AtomicU64 = AtomicU64::new(0);
static EPOCH: LazyLock<Instant> = LazyLock::new(Instant::now);

fn nanos_since_epoch(at: Instant) -> u64 {
    u64::try_from(at.saturating_duration_since(*EPOCH).as_nanos()).unwrap_or(u64::MAX)
}

/// Says that a connection was found lost: the server restarted, or ended its connections (as an
/// operator or a pooler may), so every connection that was idle by then is pinged before it is
/// used again, in every pool of the process.
pub fn suspect_idle_connections() {
    LAST_LOSS.fetch_max(nanos_since_epoch(Instant::now()).max(1), Ordering::Relaxed);
}

/// Whether a connection idle for `idle_for` went idle after the last loss was found.
fn idle_since_a_loss(idle_for: Duration) -> bool {
    let last_loss = LAST_LOSS.load(Ordering::Relaxed);
    if last_loss == 0 {
        return true;
    }
    let idle_since = Instant::now().checked_sub(idle_for).map_or(0, nanos_since_epoch);
    idle_since > last_loss
}

/// Runs a statement that changes nothing (a read, a BEGIN), and runs it once more if its
/// connection turned out to be lost: the second time on a connection that answers.
pub async fn again_if_lost<T, F, Fut>(mut statement: F) -> Result<T, sqlx::Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, sqlx::Error>>,
{
    match statement().await {
        Err(error) if lost(&error) => {
            tracing::info!(%error, "a database connection was lost; running the statement again on another");
            suspect_idle_connections();
            statement().await
        }
        outcome => outcome,
    }
}

/// Session settings for every connection of a pool: Haggle's statements are short and planned
/// often, so PostgreSQL's JIT compiler only ever costs time (hundreds of milliseconds on a
/// statement whose CTEs it overestimates); and the pool's own origin ([`ORIGIN_SETTING`]), which
/// its announcements of queued tasks name.
pub fn session_settings(options: PgConnectOptions) -> PgConnectOptions {
    let origin = uuid::Uuid::new_v4().simple().to_string();
    options.options([("jit", "off"), (ORIGIN_SETTING, origin.as_str())])
}

/// The session setting that names the pool a connection belongs to, the same on every connection
/// of the pool (the listener's and the move worker's included, made from its options). A
/// statement that queues tasks for policies announces them with it ([`tasks::queue_tasks`]):
/// the instance that queued them wakes its own executor after the commit, so its listener
/// leaves its own announcements to the other instances.
pub const ORIGIN_SETTING: &str = "haggle.origin";

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

/// Whether a statement failed because its connection did: it broke, or the server ended it.
pub fn lost(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Io(_) => true,
        sqlx::Error::Database(error) => connection_lost(error.code().as_deref()),
        _ => false,
    }
}

/// Whether the database answers a trivial query.
pub async fn ping(pool: &PgPool) -> bool {
    sqlx::query!("SELECT 1 AS alive").fetch_one(pool).await.is_ok()
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
