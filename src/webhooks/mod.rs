//! Webhooks: agents' HTTP endpoints that receive their events, signed, at least once.
//!
//! The publisher queues one delivery per (webhook, event) in the transaction that publishes the
//! event; the [`worker`] claims due deliveries, posts them signed ([`signature`]) to addresses
//! that [`target`] allows, and retries on the operator's schedule. [`registry`] holds what the
//! API does to an agent's webhooks.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sqlx::PgPool;

pub mod registry;
pub mod signature;
pub mod target;
pub mod worker;

/// The most webhooks one agent may have.
pub const MAX_WEBHOOKS_PER_AGENT: i64 = 20;

/// Whether a webhook receives its deliveries. A webhook is disabled when one of its deliveries
/// runs out of retries; its owner enables it again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum WebhookStatus {
    Active,
    Disabled,
}

/// Where one delivery stands: `PENDING` until an attempt succeeds or its retries run out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum DeliveryStatus {
    Pending,
    Succeeded,
    Failed,
}

macro_rules! stored_as_text {
    ($ty:ident { $($variant:ident => $name:literal),* $(,)? }) => {
        impl $ty {
            pub const ALL: [$ty; [$($name),*].len()] = [$($ty::$variant),*];

            pub fn as_str(self) -> &'static str {
                match self {
                    $($ty::$variant => $name,)*
                }
            }
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $ty {
            type Err = String;

            fn from_str(value: &str) -> Result<$ty, String> {
                match value {
                    $($name => Ok($ty::$variant),)*
                    other => Err(format!(
                        "unknown {} `{other}`; expected one of {}",
                        stringify!($ty),
                        [$($name),*].join(", ")
                    )),
                }
            }
        }

        impl TryFrom<String> for $ty {
            type Error = String;

            fn try_from(value: String) -> Result<$ty, String> {
                value.parse()
            }
        }
    };
}

stored_as_text!(WebhookStatus { Active => "ACTIVE", Disabled => "DISABLED" });
stored_as_text!(DeliveryStatus { Pending => "PENDING", Succeeded => "SUCCEEDED", Failed => "FAILED" });

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

/// Roughly 24 hours of exponential back-off: 10 s, 30 s, 2 min, 10 min, 30 min, 1 h, 2 h,
/// 4 h, 8 h, 8 h (each with ±20 % jitter).
pub const DEFAULT_RETRY_SCHEDULE: &str = "10s,30s,2m,10m,30m,1h,2h,4h,8h,8h";

/// Parses a comma-separated list of durations such as `10s,30s,2m`.
pub fn parse_schedule(value: &str) -> Result<crate::config::Schedule, String> {
    let schedule: Vec<Duration> = value.split(',').map(crate::config::parse_duration).collect::<Result<_, _>>()?;
    if schedule.len() > 100 {
        return Err("the retry schedule may have at most 100 pauses".to_owned());
    }
    Ok(std::sync::Arc::new(schedule))
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
    sqlx::query("INSERT INTO server_keys (name, key) VALUES ('webhook_sealing', $1) ON CONFLICT (name) DO NOTHING")
        .bind(&generated[..])
        .execute(pool)
        .await?;
    let stored: Vec<u8> =
        sqlx::query_scalar("SELECT key FROM server_keys WHERE name = 'webhook_sealing'").fetch_one(pool).await?;
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
