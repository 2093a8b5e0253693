//! Webhooks: agents' HTTP endpoints that receive their events, signed, at least once.
//!
//! The statement that writes an event queues one delivery per (webhook, event), in the event's
//! own transaction (`db::events::write_events`); the [deliveries](crate::deliveries) worker claims due deliveries, posts them signed
//! ([`signature`]) to addresses that [`target`] allows, and retries on the operator's schedule.
//! What an agent does to its webhooks is in [`crate::market::webhooks`]. This module holds what
//! both share: the settings, the address rules and the key secrets are sealed with.

use std::time::Duration;

use sqlx::PgPool;

use crate::db;

pub mod target;

pub use haggle_api::signature;
pub use haggle_api::{DeliveryStatus, WebhookStatus};

/// The most webhooks one agent may have.
pub const MAX_WEBHOOKS_PER_AGENT: i64 = 20;

/// The name the sealing key is stored under when none is configured.
const SEALING_KEY: &str = "webhook_sealing";

/// The operator's webhook settings.
#[derive(Debug, Clone)]
pub struct WebhookSettings {
    /// Whether webhook URLs may point at loopback, private or link-local addresses.
    pub allow_private: bool,
    /// The pause before each retry; a delivery that has failed once more than its length is
    /// given up, and its webhook disabled.
    pub retry_schedule: Vec<Duration>,
    /// How long one attempt may take.
    pub timeout: Duration,
    /// Attempts in flight at once per instance.
    pub concurrency: usize,
}

/// The key webhook secrets are sealed with: the operator's `HAGGLE_SECRET_KEY` (any string,
/// hashed to 32 bytes), or else a random key the server generates once and keeps in the
/// database, read when first needed.
#[derive(Debug, Clone)]
pub struct SealingKey {
    configured: Option<[u8; 32]>,
    loaded: std::sync::Arc<tokio::sync::OnceCell<[u8; 32]>>,
}

impl SealingKey {
    pub fn new(configured: Option<&str>) -> SealingKey {
        SealingKey {
            configured: configured
                .filter(|secret| !secret.trim().is_empty())
                .map(|secret| crate::secrets::sha256_parts(&[b"haggle webhook sealing key", secret.as_bytes()])),
            loaded: Default::default(),
        }
    }

    pub fn is_configured(&self) -> bool {
        self.configured.is_some()
    }

    pub async fn get(&self, pool: &PgPool) -> Result<[u8; 32], sqlx::Error> {
        if let Some(key) = self.configured {
            return Ok(key);
        }
        self.loaded.get_or_try_init(|| stored_key(pool)).await.copied()
    }
}

async fn stored_key(pool: &PgPool) -> Result<[u8; 32], sqlx::Error> {
    let generated = crate::secrets::random_bytes::<32>();
    // Two statements: a key another instance stores meanwhile is read by the second.
    db::server_keys::store_if_absent(pool, SEALING_KEY, &generated).await?;
    let stored = db::server_keys::get(pool, SEALING_KEY).await?;
    stored.try_into().map_err(|_| sqlx::Error::Decode("the stored webhook sealing key is not 32 bytes".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_round_trip_through_text() {
        for status in WebhookStatus::ALL {
            assert_eq!(status.as_str().parse::<WebhookStatus>().unwrap(), status);
            assert_eq!(serde_json::to_value(status).unwrap(), status.as_str());
        }
        for status in DeliveryStatus::ALL {
            assert_eq!(status.as_str().parse::<DeliveryStatus>().unwrap(), status);
            assert_eq!(serde_json::to_value(status).unwrap(), status.as_str());
        }
        assert!("active".parse::<WebhookStatus>().is_err());
    }
}
