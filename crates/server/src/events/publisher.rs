//! The publisher: moves committed outbox rows into the event log and announces them.
//!
//! Every server instance runs one. It publishes when a request on this instance has committed
//! events (a local signal), and on a short tick as well, so that events committed by an instance
//! that died before publishing are published by the others. Publishers on several instances
//! take turns on the sequence row's lock, so ids stay gap-free and in publication order.

use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::{CHANNEL, DELIVERIES_CHANNEL};
use crate::db;
use crate::metrics;

/// Events published per transaction.
pub const BATCH: i64 = 500;
/// Agents named per NOTIFY payload (PostgreSQL caps a payload at 8000 bytes).
const AGENTS_PER_PAYLOAD: usize = 200;

/// Tells this instance's publisher that events were committed.
#[derive(Debug, Clone, Default)]
pub struct Signal(Arc<Notify>);

impl Signal {
    pub fn new() -> Signal {
        Signal::default()
    }

    pub fn notify(&self) {
        self.0.notify_one();
    }

    /// Waits for a signal (one sent while nobody waited is kept for the next waiter).
    pub async fn notified(&self) {
        self.0.notified().await;
    }
}

/// The NOTIFY payloads announcing a batch: `<last id>:<agent>,<agent>,...` (agents as 32 hex
/// digits), split so that each stays well under PostgreSQL's limit.
pub fn payloads(last_id: i64, recipients: &[Uuid]) -> Vec<String> {
    recipients
        .chunks(AGENTS_PER_PAYLOAD)
        .map(|chunk| {
            let agents: Vec<String> = chunk.iter().map(|agent| agent.simple().to_string()).collect();
            format!("{last_id}:{}", agents.join(","))
        })
        .collect()
}

/// Parses a payload made by [`payloads`]; `None` if it is not one.
pub fn parse_payload(payload: &str) -> Option<(i64, Vec<Uuid>)> {
    let (last_id, agents) = payload.split_once(':')?;
    let last_id = last_id.parse().ok()?;
    let agents = agents.split(',').filter(|a| !a.is_empty()).map(Uuid::parse_str).collect::<Result<_, _>>().ok()?;
    Some((last_id, agents))
}

/// Publishes one batch and announces it, in one transaction. Returns how many were published.
pub async fn publish_once(pool: &PgPool) -> Result<usize, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let published = db::events::publish(&mut tx, BATCH).await?;
    if published.count == 0 {
        tx.rollback().await?;
        return Ok(0);
    }
    db::events::notify(&mut tx, CHANNEL, &payloads(published.last_id, &published.recipients)).await?;
    if published.deliveries > 0 {
        // Every instance's webhook worker may take the deliveries this batch queued.
        db::events::notify(&mut tx, DELIVERIES_CHANNEL, &[published.deliveries.to_string()]).await?;
    }
    tx.commit().await?;
    metrics::published(&published.lags);
    tracing::debug!(count = published.count, last_id = published.last_id, "events published");
    Ok(published.count)
}

/// Publishes everything committed so far.
pub async fn publish_all(pool: &PgPool) -> Result<usize, sqlx::Error> {
    let mut total = 0;
    loop {
        let count = publish_once(pool).await?;
        total += count;
        if (count as i64) < BATCH {
            return Ok(total);
        }
    }
}

/// Runs until cancelled: publishes on every signal, and every `tick` in case another instance
/// left events behind.
pub async fn run(pool: PgPool, signal: Signal, tick: Duration, shutdown: CancellationToken) {
    tracing::info!(?tick, "event publisher started");
    loop {
        let mut backoff = Duration::ZERO;
        match publish_all(&pool).await {
            Ok(_) => {}
            Err(error) => {
                // A batch fails whole, for instance when a webhook it queues deliveries for
                // was deleted meanwhile; the retry comes soon and sees the change.
                tracing::warn!(%error, "publishing events failed; retrying");
                backoff = Duration::from_millis(100);
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = signal.0.notified(), if backoff.is_zero() => {}
            _ = tokio::time::sleep(if backoff.is_zero() { tick } else { backoff }) => {}
        }
    }
    tracing::info!("event publisher stopped");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_round_trip_and_stay_small() {
        let agents: Vec<Uuid> = (0..450).map(|_| Uuid::now_v7()).collect();
        let sent = payloads(42, &agents);
        assert_eq!(sent.len(), 3);
        let mut received = Vec::new();
        for payload in &sent {
            assert!(payload.len() < 8000, "{}", payload.len());
            let (last_id, chunk) = parse_payload(payload).unwrap();
            assert_eq!(last_id, 42);
            received.extend(chunk);
        }
        assert_eq!(received, agents);
        assert_eq!(parse_payload("7:"), Some((7, vec![])));
        assert_eq!(parse_payload("nonsense"), None);
        assert_eq!(parse_payload("x:abc"), None);
    }
}
