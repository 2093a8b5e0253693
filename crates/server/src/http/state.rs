//! What every handler can reach: the pool, the market, the settings, the limiters and the hub.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use metrics_exporter_prometheus::PrometheusHandle;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::access::Access;
use super::address::TrustedProxies;
use super::error::ApiError;
use super::ratelimit;
use crate::deployment::Deployment;
use crate::events::Hub;
use crate::keycache::KeyCache;
use crate::market::{Market, Rules};
use crate::metrics;
use crate::webhooks::{SealingKey, WebhookSettings};

/// What every handler can reach.
#[derive(Clone)]
pub struct AppState {
    /// For reads; every write goes through [`market`](Self::market).
    pub pool: PgPool,
    /// Where writes go: the unit of work, the batcher, and whom a commit wakes.
    pub market: Market,
    pub settings: Arc<Settings>,
    pub limiter: Option<Arc<ratelimit::RateLimiter>>,
    /// Wrong credentials per client address and per credential prefix: always on, whatever the
    /// rate limit.
    pub auth_failures: Arc<ratelimit::RateLimiter>,
    /// This instance's waiters for events.
    pub hub: Hub,
    /// Cancelled when the server shuts down: long waits and streams end early.
    pub shutdown: CancellationToken,
    /// How many instances share the limits meant for an agent.
    pub deployment: Arc<Deployment>,
    /// Seals webhook secrets.
    pub sealing_key: SealingKey,
    /// Signs the receipts of approved moves.
    pub receipts: crate::receipts::Receipts,
    /// The agents behind recently used API keys.
    pub keys: Arc<KeyCache>,
    /// The latest check of each credential that long-lived requests hold, shared by them.
    pub rechecks: Arc<super::recheck::Rechecks>,
    /// This instance's own API's URL over loopback (`http://127.0.0.1:8080`): the `Host` of the
    /// requests the MCP endpoint's tools make to the API in process, and the names `/mcp`
    /// answers on.
    pub loopback: String,
    /// The metrics, when `/metrics` is served on this port (behind the operator token).
    pub metrics: Option<PrometheusHandle>,
}

impl AppState {
    pub fn new(
        market: Market,
        settings: Settings,
        sealing_key: SealingKey,
        shutdown: CancellationToken,
        deployment: Arc<Deployment>,
        loopback: String,
    ) -> AppState {
        let limiter = ratelimit::RateLimiter::new(settings.rate_limit, deployment.clone()).map(Arc::new);
        let keys = Arc::new(KeyCache::new(settings.key_cache_ttl));
        let hub = Hub::with_limits(settings.max_waiters, settings.max_waiters_per_agent, deployment.clone());
        AppState {
            pool: market.pool().clone(),
            market,
            settings: Arc::new(settings),
            limiter,
            auth_failures: Arc::new(ratelimit::RateLimiter::new(1, deployment.clone()).expect("a limit above zero")),
            hub,
            shutdown,
            receipts: crate::receipts::Receipts::new(sealing_key.clone()),
            sealing_key,
            keys,
            rechecks: Arc::default(),
            deployment,
            loopback,
            metrics: None,
        }
    }

    /// The answer to a wrong credential (`refusal`, a 401), counted against the client's address
    /// and against the credential's prefix: 429 with `Retry-After` instead once either has
    /// presented too many lately. Only wrong credentials are counted or refused here: a valid
    /// one is let in before this is reached, however many wrong ones came from its address.
    pub fn refuse_credential(&self, address: Option<IpAddr>, credential: &str, refusal: ApiError) -> ApiError {
        let by_address = address.and_then(|ip| self.auth_failures.check(ratelimit::Requester::FailedAuth(ip)).err());
        // An address already refused opens no bucket for its prefixes: one guesser's stream of
        // prefixes holds at most its allowance's worth of them.
        let by_prefix = match by_address {
            Some(_) => None,
            None => {
                let prefix = ratelimit::CredentialPrefix::of(credential);
                self.auth_failures.check(ratelimit::Requester::FailedPrefix(prefix)).err()
            }
        };
        match by_address.or(by_prefix) {
            Some(wait) => {
                metrics::rate_limited("failed_auth");
                ApiError::rate_limited(wait)
            }
            None => refusal,
        }
    }

    /// Takes a token from the caller's bucket, or answers 429 with `Retry-After`.
    pub fn check_rate(&self, caller: ratelimit::Requester) -> Result<(), ApiError> {
        match &self.limiter {
            Some(limiter) => limiter.check(caller).map_err(|wait| {
                metrics::rate_limited(match caller {
                    ratelimit::Requester::Agent(_) => "agent",
                    ratelimit::Requester::Address(_) => "registration",
                    ratelimit::Requester::FailedAuth(_) | ratelimit::Requester::FailedPrefix(_) => "failed_auth",
                });
                ApiError::rate_limited(wait)
            }),
            None => Ok(()),
        }
    }
}

/// The HTTP layer's share of the configuration.
#[derive(Clone)]
pub struct Settings {
    pub admin_token: Option<String>,
    pub open_registration: bool,
    pub rules: Rules,
    pub body_limit: usize,
    pub request_timeout: Duration,
    /// Requests a second per agent (a tenth of it per address for registration); 0 is no limit.
    pub rate_limit: u32,
    /// How often an idle event stream sends a heartbeat comment.
    pub heartbeat: Duration,
    /// How often a long-lived request (an event stream, a long poll, a bid wait) checks that
    /// the credential it came with still stands.
    pub stream_recheck: Duration,
    /// The proxies whose `X-Forwarded-For` names the client (see [`super::address`]).
    pub trusted_proxies: TrustedProxies,
    /// How long an API key's agent is remembered (see [`crate::keycache`]); zero looks every
    /// key up.
    pub key_cache_ttl: Duration,
    /// How many statements of unlocked moves run at once, each on a connection of its own
    /// besides the pool's (see [`crate::market::batch`]).
    pub move_workers: usize,
    /// How many pending bids this instance remembers for the moves that answer them (see
    /// [`crate::market::live`]); zero reads before every move.
    pub live_cache: usize,
    /// Long polls, bid waits and event streams this instance holds at once (503 beyond).
    pub max_waiters: usize,
    /// Long polls, bid waits and event streams one agent may hold at once over the deployment
    /// (429 beyond).
    pub max_waiters_per_agent: usize,
    pub webhooks: WebhookSettings,
    /// Whom `/mcp` answers: its `Host` values and browser origins.
    pub mcp: Access,
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settings")
            .field("admin_token", &self.admin_token.as_ref().map(|_| "<redacted>"))
            .field("open_registration", &self.open_registration)
            .field("rules", &self.rules)
            .field("body_limit", &self.body_limit)
            .field("request_timeout", &self.request_timeout)
            .field("rate_limit", &self.rate_limit)
            .field("heartbeat", &self.heartbeat)
            .field("stream_recheck", &self.stream_recheck)
            .field("trusted_proxies", &self.trusted_proxies)
            .field("key_cache_ttl", &self.key_cache_ttl)
            .field("move_workers", &self.move_workers)
            .field("live_cache", &self.live_cache)
            .field("max_waiters", &self.max_waiters)
            .field("max_waiters_per_agent", &self.max_waiters_per_agent)
            .field("webhooks", &self.webhooks)
            .field("mcp", &self.mcp)
            .finish()
    }
}
