//! The deployment: how many server instances serve it, so that the limits meant for an agent
//! hold across all of them rather than once per instance.
//!
//! Every instance records itself in the `instances` table every [`HEARTBEAT`] and counts the
//! instances seen within [`ALIVE_WITHIN`]; each then grants its share of a limit (the limit
//! divided by that count). No request reads the database for it: the count is a number in
//! memory, a few seconds old at most. The shares add up to the limit when the load balancer
//! spreads an agent's requests over the instances (round robin, least connections); one that
//! pins an agent to one instance gives it one share. While the database cannot be reached the
//! last count stands, and an instance that stops takes itself out at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::db;

/// How often an instance records itself.
pub const HEARTBEAT: Duration = Duration::from_secs(2);
/// An instance not seen for this long is no longer counted.
pub const ALIVE_WITHIN: Duration = Duration::from_secs(10);
/// An instance not seen for this long is forgotten.
pub const FORGET_AFTER: Duration = Duration::from_secs(3600);

/// This instance, and how many instances the deployment has now.
#[derive(Debug)]
pub struct Deployment {
    id: Uuid,
    alive: AtomicUsize,
}

impl Default for Deployment {
    fn default() -> Deployment {
        Deployment { id: Uuid::now_v7(), alive: AtomicUsize::new(1) }
    }
}

impl Deployment {
    pub fn new() -> Arc<Deployment> {
        Arc::new(Deployment::default())
    }

    /// Instances alive, this one included.
    pub fn instances(&self) -> usize {
        self.alive.load(Ordering::Relaxed).max(1)
    }

    /// This instance's share of a deployment-wide rate.
    pub fn share(&self, limit: f64) -> f64 {
        limit / self.instances() as f64
    }

    /// This instance's share of a deployment-wide count, rounded up, so that an agent never
    /// gets none.
    pub fn share_of_count(&self, limit: usize) -> usize {
        limit.div_ceil(self.instances()).max(1)
    }

    /// Takes a new count of the instances alive.
    pub(crate) fn record(&self, alive: i64) {
        self.alive.store(usize::try_from(alive).unwrap_or(1).max(1), Ordering::Relaxed);
    }

    /// Records this instance and counts the deployment's, once.
    pub async fn beat(&self, pool: &PgPool) -> Result<usize, sqlx::Error> {
        let alive = db::instances::beat(pool, self.id, ALIVE_WITHIN, FORGET_AFTER).await?;
        self.record(alive);
        Ok(self.instances())
    }
}

/// Beats every [`HEARTBEAT`] until `shutdown`, then takes this instance out.
pub async fn run(pool: PgPool, deployment: Arc<Deployment>, shutdown: CancellationToken) {
    let mut last = 0;
    loop {
        match deployment.beat(&pool).await {
            Ok(alive) if alive != last => {
                tracing::info!(instances = alive, "the deployment's limits are shared among its instances");
                last = alive;
            }
            Ok(_) => {}
            Err(error) => tracing::debug!(%error, "could not record this instance; keeping the last count"),
        }
        tokio::select! {
            () = tokio::time::sleep(HEARTBEAT) => {}
            () = shutdown.cancelled() => break,
        }
    }
    if let Err(error) = db::instances::leave(&pool, deployment.id).await {
        tracing::debug!(%error, "could not take this instance out of the deployment");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_are_shared_out_among_the_instances() {
        let deployment = Deployment::default();
        assert_eq!(
            (deployment.instances(), deployment.share(1000.0), deployment.share_of_count(100)),
            (1, 1000.0, 100)
        );
        deployment.record(3);
        assert_eq!(deployment.share(900.0), 300.0);
        assert_eq!(deployment.share_of_count(100), 34);
        assert_eq!(deployment.share_of_count(2), 1);
        // A count that makes no sense is one instance.
        deployment.record(0);
        assert_eq!(deployment.instances(), 1);
        deployment.record(-5);
        assert_eq!(deployment.instances(), 1);
    }
}
