//! A wake-up for a worker of this instance.

use std::sync::Arc;

use tokio::sync::Notify;

/// Tells a worker of this instance that it has work (the executor: bids wait for a policy).
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
