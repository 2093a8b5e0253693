//! Catching up: wakes the waiters whose agents' events moved while no wake-up reached them.
//!
//! A wake-up can be lost: the instance that committed stopped between its commit and its
//! NOTIFY, or its NOTIFY failed. Waiters do not read on a timer of their own for that (ten
//! thousand idle streams would cost ten thousand reads a period); instead, every
//! `HAGGLE_STREAM_RECHECK`, one statement reads the event counters of the agents this instance
//! has waiters for, and the agents whose counter moved since the last pass (or that were not
//! waited for then) are woken, with the operator's market-wide waiters. A woken waiter that
//! finds nothing new waits again, so a wake-up too many costs one read.

use std::collections::HashMap;
use std::time::Duration;

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::Hub;
use crate::db;

/// Runs until cancelled, a pass every `period`.
pub async fn run(pool: PgPool, hub: Hub, period: Duration, shutdown: CancellationToken) {
    let mut ticker = tokio::time::interval(period);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut seen = HashMap::new();
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = ticker.tick() => {}
        }
        seen = pass(&pool, &hub, seen).await;
    }
}

/// One pass: wakes the agents whose counter moved since `seen`, and gives the counters now.
pub async fn pass(pool: &PgPool, hub: &Hub, seen: HashMap<Uuid, i64>) -> HashMap<Uuid, i64> {
    let agents = hub.agents();
    if agents.is_empty() {
        hub.wake(&[]);
        return HashMap::new();
    }
    match db::events::heads(pool, &agents).await {
        Ok(heads) => {
            let moved: Vec<Uuid> =
                heads.iter().filter(|(agent, head)| seen.get(agent) != Some(head)).map(|(agent, _)| *agent).collect();
            hub.wake(&moved);
            heads.into_iter().collect()
        }
        Err(error) => {
            tracing::warn!(%error, "reading the agents' event counters failed; waking every waiter");
            hub.wake_all();
            HashMap::new()
        }
    }
}
