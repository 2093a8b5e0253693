//! The delivery worker.

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::{SealingKey, WebhookSettings};
use crate::events::publisher::Signal;

/// Delivers due webhook deliveries until cancelled.
pub async fn run(
    pool: PgPool,
    settings: WebhookSettings,
    sealing_key: SealingKey,
    publish: Signal,
    shutdown: CancellationToken,
) {
    let _ = (pool, settings, sealing_key, publish);
    shutdown.cancelled().await;
}
