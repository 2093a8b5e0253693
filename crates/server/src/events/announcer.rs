//! The announcer: tells readers that events were committed.
//!
//! Events are written with the change they describe, so a reader may read them as soon as the
//! change commits; the announcer only wakes those waiting. After a commit, the unit of work
//! hands it the agents its events concern ([`Announcer::committed`]); it wakes this instance's
//! long polls and streams of those agents (and of the market) through the hub at once, nudges
//! this instance's webhook worker when deliveries were queued, and tells the other instances
//! (their waiters, and their webhook workers) in a NOTIFY, sent outside any transaction, for everything committed meanwhile. A NOTIFY sent
//! from the change's own transaction would be delivered at its commit, but PostgreSQL
//! serialises the commits of notifying transactions, every move's among them.
//!
//! A wake-up lost (the instance stopped between the commit and the NOTIFY, or the listener was
//! reconnecting) delays nothing for long: the catch-up ([`super::catch_up`]) wakes the waiters whose
//! agents' events moved, every `HAGGLE_STREAM_RECHECK`.

use std::sync::{Arc, Mutex};

use sqlx::PgPool;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::{CHANNEL, DELIVERIES_CHANNEL, Hub, Written};
use crate::db;
use crate::metrics;

/// Agents named per NOTIFY payload (PostgreSQL caps a payload at 8000 bytes).
const AGENTS_PER_PAYLOAD: usize = 200;

/// Hands committed events' recipients to the instance's announcing task. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Announcer(Arc<Inner>);

#[derive(Debug, Default)]
struct Inner {
    pending: Mutex<Pending>,
    notify: Notify,
}

#[derive(Debug, Default)]
struct Pending {
    agents: Vec<Uuid>,
    events: u64,
    deliveries: u64,
}

impl Announcer {
    pub fn new() -> Announcer {
        Announcer::default()
    }

    /// Records what a transaction that committed wrote; nothing when it wrote no event.
    pub fn committed(&self, written: &Written) {
        if written.events == 0 {
            return;
        }
        {
            let mut pending = self.0.pending.lock().expect("the announcer's lock is never poisoned");
            pending.agents.extend_from_slice(&written.recipients);
            pending.events += written.events as u64;
            pending.deliveries += written.deliveries as u64;
        }
        self.0.notify.notify_one();
    }

    fn take(&self) -> Pending {
        let mut pending = self.0.pending.lock().expect("the announcer's lock is never poisoned");
        let mut taken = std::mem::take(&mut *pending);
        taken.agents.sort_unstable();
        taken.agents.dedup();
        taken
    }
}

/// The NOTIFY payloads naming `recipients` (agents as 32 hex digits, comma-separated), split so
/// that each stays well under PostgreSQL's limit.
pub fn payloads(recipients: &[Uuid]) -> Vec<String> {
    recipients
        .chunks(AGENTS_PER_PAYLOAD)
        .map(|chunk| chunk.iter().map(|agent| agent.simple().to_string()).collect::<Vec<_>>().join(","))
        .collect()
}

/// Parses a payload made by [`payloads`]; `None` if it is not one.
pub fn parse_payload(payload: &str) -> Option<Vec<Uuid>> {
    payload.split(',').filter(|agent| !agent.is_empty()).map(|agent| Uuid::parse_str(agent).ok()).collect()
}

/// Runs until cancelled: wakes this instance's waiters and webhook worker, and tells the other
/// instances, for whatever was committed since its last pass.
pub async fn run(pool: PgPool, announcer: Announcer, hub: Hub, deliveries: Arc<Notify>, shutdown: CancellationToken) {
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = announcer.0.notify.notified() => {}
        }
        let pending = announcer.take();
        if pending.events == 0 {
            continue;
        }
        hub.wake(&pending.agents);
        if pending.deliveries > 0 {
            deliveries.notify_one();
        }
        metrics::events_written(pending.events);
        let announced = async {
            db::events::notify(&pool, CHANNEL, &payloads(&pending.agents)).await?;
            if pending.deliveries > 0 {
                // The other instances' webhook workers may take them too.
                db::events::notify(&pool, DELIVERIES_CHANNEL, &[pending.deliveries.to_string()]).await?;
            }
            Ok::<_, sqlx::Error>(())
        };
        if let Err(error) = announced.await {
            // The other instances' catch-up wakes their waiters within a period, and their webhook
            // workers look for due deliveries at theirs.
            tracing::warn!(%error, "announcing committed events to the other instances failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_round_trip_and_stay_small() {
        let agents: Vec<Uuid> = (0..450).map(|_| Uuid::now_v7()).collect();
        let sent = payloads(&agents);
        assert_eq!(sent.len(), 3);
        let mut received = Vec::new();
        for payload in &sent {
            assert!(payload.len() < 8000, "{}", payload.len());
            received.extend(parse_payload(payload).unwrap());
        }
        assert_eq!(received, agents);
        assert_eq!(parse_payload(""), Some(vec![]));
        assert_eq!(parse_payload("nonsense"), None);
        assert_eq!(parse_payload("7:abc"), None);
    }

    #[test]
    fn what_committed_meanwhile_is_announced_once() {
        let announcer = Announcer::new();
        let (a, b) = (Uuid::now_v7(), Uuid::now_v7());
        announcer.committed(&Written { events: 0, ..Written::default() });
        announcer.committed(&Written { events: 2, recipients: vec![b, a], ..Written::default() });
        announcer.committed(&Written { events: 1, deliveries: 1, recipients: vec![a], ..Written::default() });
        let taken = announcer.take();
        let mut both = vec![a, b];
        both.sort_unstable();
        assert_eq!((taken.agents, taken.events, taken.deliveries), (both, 3, 1));
        assert_eq!(announcer.take().events, 0);
    }
}
