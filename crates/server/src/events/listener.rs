//! The listener: one connection per instance that LISTENs for committed events and wakes the
//! waiters of the agents concerned, for queued webhook deliveries and wakes the instance's
//! delivery worker, for bids queued for a policy by other instances and wakes the instance's
//! executor, and for agents whose keys or tier changed and drops them from the instance's key
//! cache.
//!
//! An announcement of queued tasks names the pool whose connection queued them
//! ([`db::ORIGIN_SETTING`]). The listener's connection, made from the pool's options, has the
//! pool's origin too: announcements of its own are passed over, since the commit that queued
//! them woke the instance's executor already, and a second wake-up would only send another worker
//! to find nothing.
//!
//! When its connection drops it reconnects with back-off, and once LISTEN is in place again it
//! wakes every waiter: notifications sent while it was away are lost, so each waiter re-reads
//! from its own cursor and finds whatever committed in the meantime.

use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;
use sqlx::postgres::{PgListener, PgPoolOptions};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::announcer::parse_payload;
use super::{AUTO_CHANNEL, CHANNEL, DELIVERIES_CHANNEL, Hub};
use crate::db;
use crate::keycache::{self, KeyCache};
use crate::signal::Signal;

/// The `application_name` of the listener's connection, to find it in `pg_stat_activity`.
pub const APPLICATION_NAME: &str = "haggle-listener";
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// How often the listener checks that its connection still answers, and how long it waits.
const PING_INTERVAL: Duration = Duration::from_secs(15);
const PING_TIMEOUT: Duration = Duration::from_secs(5);

/// Connects and listens; gives the listener with its pool's origin (empty for a pool without one).
async fn connect(pool: &PgPool) -> Result<(PgListener, String), sqlx::Error> {
    let options = pool.connect_options().as_ref().clone().application_name(APPLICATION_NAME);
    let single = PgPoolOptions::new().max_connections(1).connect_lazy_with(options);
    let mut listener = PgListener::connect_with(&single).await?;
    listener.listen_all([CHANNEL, DELIVERIES_CHANNEL, AUTO_CHANNEL, keycache::CHANNEL]).await?;
    let origin: Option<String> = sqlx::query_scalar("SELECT current_setting($1, true)")
        .bind(db::ORIGIN_SETTING)
        .fetch_one(&mut listener)
        .await?;
    Ok((listener, origin.unwrap_or_default()))
}

/// Whether an announcement of queued tasks (`payload`, the origin of the pool that queued them)
/// comes from another pool than the listener's (`own`): from an instance whose executor the
/// commit did not wake. An origin that is empty on either side may be anyone's.
fn queued_elsewhere(own: &str, payload: &str) -> bool {
    own.is_empty() || payload != own
}

/// Runs until cancelled. `deliveries` is notified when webhook deliveries were queued, `tasks`
/// when bids were queued for a policy, and `keys` forgets an agent whose authorization changed.
pub async fn run(
    pool: PgPool,
    hub: Hub,
    deliveries: Arc<Notify>,
    tasks: Signal,
    keys: Arc<KeyCache>,
    shutdown: CancellationToken,
) {
    let mut backoff = Duration::ZERO;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(backoff) => {}
        }
        let (mut listener, origin) = match connect(&pool).await {
            Ok(connected) => connected,
            Err(error) => {
                backoff = (backoff * 2).clamp(Duration::from_millis(100), MAX_BACKOFF);
                tracing::warn!(%error, ?backoff, "cannot listen for events; retrying");
                continue;
            }
        };
        tracing::info!("listening for events");
        // Anything committed before LISTEN took effect was announced to no one here.
        keys.clear();
        hub.wake_all();
        deliveries.notify_one();
        tasks.notify();
        let mut ping = tokio::time::interval_at(tokio::time::Instant::now() + PING_INTERVAL, PING_INTERVAL);
        loop {
            let received = tokio::select! {
                _ = shutdown.cancelled() => return,
                received = listener.try_recv() => received,
                _ = ping.tick() => {
                    // A half-open connection would otherwise wait forever in silence.
                    let alive = tokio::time::timeout(PING_TIMEOUT, sqlx::query_scalar!("SELECT 1 AS alive").fetch_one(&mut listener)).await;
                    if matches!(alive, Ok(Ok(_))) {
                        continue;
                    }
                    tracing::warn!("the event listener's connection stopped answering; reconnecting");
                    break;
                }
            };
            match received {
                Ok(Some(notification)) if notification.channel() == DELIVERIES_CHANNEL => deliveries.notify_one(),
                Ok(Some(notification)) if notification.channel() == AUTO_CHANNEL => {
                    if queued_elsewhere(&origin, notification.payload()) {
                        tasks.notify();
                    }
                }
                Ok(Some(notification)) if notification.channel() == keycache::CHANNEL => {
                    keys.on_notification(notification.payload())
                }
                Ok(Some(notification)) => match parse_payload(notification.payload()) {
                    Some(agents) => hub.wake(&agents),
                    None => hub.wake_all(),
                },
                Ok(None) => {
                    tracing::warn!("the event listener's connection closed; reconnecting");
                    break;
                }
                Err(error) => {
                    tracing::warn!(%error, "the event listener failed; reconnecting");
                    break;
                }
            }
        }
        backoff = Duration::from_millis(50);
    }
}

#[cfg(test)]
mod tests {
    use super::queued_elsewhere;

    #[test]
    fn only_another_pools_announcements_wake_the_executor() {
        let own = "0f1e2d3c4b5a69788796a5b4c3d2e1f0";
        assert!(!queued_elsewhere(own, own), "the instance's own commit woke its executor already");
        assert!(queued_elsewhere(own, "00000000000000000000000000000001"), "another instance's tasks");
        assert!(queued_elsewhere(own, ""), "a connection without an origin may be anyone's");
        assert!(queued_elsewhere("", ""), "a listener without an origin cannot tell its own");
        assert!(queued_elsewhere("", own));
    }
}
