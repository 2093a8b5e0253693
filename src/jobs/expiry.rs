//! The expiry sweeper: PENDING bids past their deadline become EXPIRED with their threads, in
//! batches that skip rows another transaction holds. It also forgets idempotency records and
//! events older than their retention.

use std::time::Duration;

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::db;
use crate::events::publisher::Signal;
use crate::events::{NewEvent, Outbox};

/// What one pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Outcome {
    pub expired_bids: usize,
    pub purged_idempotency_keys: u64,
}

impl Outcome {
    fn is_full(&self, batch: i64) -> bool {
        self.expired_bids as i64 >= batch || self.purged_idempotency_keys as i64 >= batch
    }
}

/// One batch of each kind of clean-up. The expiries' events are written with them; the
/// publisher picks them up on its next tick unless told sooner.
pub async fn run_once(pool: &PgPool, batch: i64) -> Result<Outcome, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let expired = db::negotiation::sweep_expired(&mut tx, batch).await?;
    let mut events = Outbox::new();
    for (bid, thread) in &expired {
        events.push(NewEvent::bid(bid, thread));
    }
    events.flush(&mut tx).await?;
    tx.commit().await?;
    let purged = db::idempotency::purge_expired(pool, batch).await?;
    Ok(Outcome { expired_bids: expired.len(), purged_idempotency_keys: purged })
}

/// Sweeps every `interval` until cancelled, and again at once after a full batch.
/// Deletes up to `batch` events older than `retention`, with their inboxes and webhook
/// deliveries.
pub async fn purge_events(pool: &PgPool, retention: Duration, batch: i64) -> Result<u64, sqlx::Error> {
    let Ok(age) = chrono::Duration::from_std(retention) else { return Ok(0) };
    db::events::purge_before(pool, chrono::Utc::now() - age, batch).await
}

/// Sweeps every `interval` until cancelled, and again at once after a full batch. With an
/// `event_retention`, older events are purged on the same rhythm.
pub async fn run(
    pool: PgPool,
    interval: Duration,
    batch: i64,
    event_retention: Option<Duration>,
    publish: Signal,
    shutdown: CancellationToken,
) {
    tracing::info!(?interval, batch, ?event_retention, "expiry sweeper started");
    loop {
        let mut pause = match run_once(&pool, batch).await {
            Ok(outcome) => {
                if outcome.expired_bids > 0 {
                    publish.notify();
                    tracing::info!(expired_bids = outcome.expired_bids, "expired bids swept");
                }
                if outcome.is_full(batch) { Duration::ZERO } else { interval }
            }
            Err(error) => {
                tracing::warn!(%error, "expiry sweep failed; retrying after the interval");
                interval
            }
        };
        if let Some(retention) = event_retention {
            match purge_events(&pool, retention, batch).await {
                Ok(purged) if purged as i64 >= batch => pause = Duration::ZERO,
                Ok(purged) if purged > 0 => tracing::info!(purged, "events past their retention purged"),
                Ok(_) => {}
                Err(error) => tracing::warn!(%error, "purging old events failed; retrying after the interval"),
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = tokio::time::sleep(pause) => {}
        }
    }
    tracing::info!("expiry sweeper stopped");
}
