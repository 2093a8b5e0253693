//! Per-caller token buckets: each agent may make `rate` requests a second on average, in
//! bursts of up to `rate`; unauthenticated registration is limited per client address to a
//! tenth of that; wrong credentials are counted per client address and per credential prefix.
//! The limits are the deployment's: the buckets live in this instance's memory,
//! and each instance grants its share of every limit ([`Deployment::share`]), so that an agent
//! whose requests are spread over three instances gets its rate once, not three times.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use std::sync::Arc;

use uuid::Uuid;

use crate::deployment::Deployment;
use crate::secrets;

/// Who a bucket belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Requester {
    Agent(Uuid),
    Address(IpAddr),
    /// Credentials that failed from this address: wrong API keys and operator tokens.
    FailedAuth(IpAddr),
    /// Credentials that failed, from any address, beginning as this one does.
    FailedPrefix(CredentialPrefix),
}

/// The first characters of a credential: as much of an API key as its owner is shown to tell
/// keys apart (and so as others may see), by which guesses at one key from many addresses are
/// counted together.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct CredentialPrefix([u8; secrets::SHOWN_PREFIX_CHARS]);

impl CredentialPrefix {
    pub fn of(credential: &str) -> CredentialPrefix {
        let mut prefix = [0; secrets::SHOWN_PREFIX_CHARS];
        let shown = &credential.as_bytes()[..credential.len().min(prefix.len())];
        prefix[..shown.len()].copy_from_slice(shown);
        CredentialPrefix(prefix)
    }
}

/// Never the prefix itself: it is part of a secret that may be someone's.
impl std::fmt::Debug for CredentialPrefix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CredentialPrefix(..)")
    }
}

/// How many wrong credentials one address (or one credential prefix) may present at once, and
/// how many more a second.
pub const AUTH_FAILURES_BURST: f64 = 20.0;
pub const AUTH_FAILURES_PER_SECOND: f64 = 1.0;

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    refilled: Instant,
}

#[derive(Debug)]
pub struct RateLimiter {
    per_second: f64,
    deployment: Arc<Deployment>,
    buckets: Mutex<HashMap<Requester, Bucket>>,
}

/// Beyond this many buckets, full (idle) ones are forgotten.
const PRUNE_ABOVE: usize = 10_000;

impl RateLimiter {
    /// `None` when `per_second` is 0: no limit. `per_second` is the deployment's limit.
    pub fn new(per_second: u32, deployment: Arc<Deployment>) -> Option<RateLimiter> {
        (per_second > 0).then(|| RateLimiter {
            per_second: f64::from(per_second),
            deployment,
            buckets: Mutex::default(),
        })
    }

    /// A bucket's size and how fast it fills, a second: this instance's share of the
    /// requester's limit (a bucket holds at least one request).
    fn limits_for(&self, caller: Requester) -> (f64, f64) {
        let (burst, rate) = match caller {
            Requester::Agent(_) => (self.per_second, self.per_second),
            Requester::Address(_) => {
                let rate = (self.per_second / 10.0).max(1.0);
                (rate, rate)
            }
            Requester::FailedAuth(_) | Requester::FailedPrefix(_) => (AUTH_FAILURES_BURST, AUTH_FAILURES_PER_SECOND),
        };
        (self.deployment.share(burst).max(1.0), self.deployment.share(rate))
    }

    /// Takes one token, or says how long to wait for one.
    pub fn check(&self, caller: Requester) -> Result<(), Duration> {
        self.check_at(caller, Instant::now())
    }

    fn check_at(&self, caller: Requester, now: Instant) -> Result<(), Duration> {
        let (capacity, rate) = self.limits_for(caller);
        let mut buckets = self.buckets.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if buckets.len() > PRUNE_ABOVE {
            buckets.retain(|caller, bucket| {
                let (capacity, rate) = self.limits_for(*caller);
                bucket.tokens + now.duration_since(bucket.refilled).as_secs_f64() * rate < capacity
            });
        }
        let bucket = buckets.entry(caller).or_insert(Bucket { tokens: capacity, refilled: now });
        let elapsed = now.saturating_duration_since(bucket.refilled).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * rate).min(capacity);
        bucket.refilled = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - bucket.tokens) / rate))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alone() -> Arc<Deployment> {
        Deployment::new()
    }

    #[test]
    fn a_burst_is_allowed_then_the_rate_holds() {
        let limiter = RateLimiter::new(10, alone()).unwrap();
        let agent = Requester::Agent(Uuid::nil());
        let start = Instant::now();
        for _ in 0..10 {
            assert!(limiter.check_at(agent, start).is_ok());
        }
        let wait = limiter.check_at(agent, start).unwrap_err();
        assert!(wait > Duration::ZERO && wait <= Duration::from_millis(100));
        assert!(limiter.check_at(agent, start + Duration::from_millis(100)).is_ok());
        assert!(limiter.check_at(agent, start + Duration::from_millis(100)).is_err());
        // Another agent has its own bucket.
        assert!(limiter.check_at(Requester::Agent(Uuid::from_u128(1)), start).is_ok());
    }

    #[test]
    fn addresses_get_a_tenth_and_zero_means_no_limit() {
        let limiter = RateLimiter::new(20, alone()).unwrap();
        let address = Requester::Address(IpAddr::from([127, 0, 0, 1]));
        let start = Instant::now();
        assert!((0..2).all(|_| limiter.check_at(address, start).is_ok()));
        assert!(limiter.check_at(address, start).is_err());
        assert!(RateLimiter::new(0, alone()).is_none());
    }

    #[test]
    fn each_instance_grants_its_share_of_the_limit() {
        let deployment = alone();
        let limiter = RateLimiter::new(10, deployment.clone()).unwrap();
        let agent = Requester::Agent(Uuid::nil());
        let start = Instant::now();
        deployment.record(2);
        assert_eq!((0..10).filter(|_| limiter.check_at(agent, start).is_ok()).count(), 5);
        // The share refills at the shared rate: one more after 200 ms.
        assert!(limiter.check_at(agent, start + Duration::from_millis(200)).is_ok());
        assert!(limiter.check_at(agent, start + Duration::from_millis(200)).is_err());
        // However many instances, a bucket holds at least one request.
        deployment.record(50);
        let other = Requester::Agent(Uuid::from_u128(1));
        assert!(limiter.check_at(other, start).is_ok());
        assert!(limiter.check_at(other, start).is_err());
    }

    #[test]
    fn wrong_credentials_have_a_bucket_of_their_own() {
        let limiter = RateLimiter::new(1000, alone()).unwrap();
        let failed = Requester::FailedAuth(IpAddr::from([127, 0, 0, 1]));
        let start = Instant::now();
        assert!((0..AUTH_FAILURES_BURST as usize).all(|_| limiter.check_at(failed, start).is_ok()));
        assert!(limiter.check_at(failed, start).is_err());
        assert!(limiter.check_at(Requester::Address(IpAddr::from([127, 0, 0, 1])), start).is_ok());
    }

    #[test]
    fn a_credential_prefix_is_what_its_owner_is_shown() {
        let key = "hk_AbCdEfGh-the-secret-rest";
        assert_eq!(CredentialPrefix::of(key), CredentialPrefix::of("hk_AbCdEfGh-another-rest"));
        assert_ne!(CredentialPrefix::of(key), CredentialPrefix::of("hk_AbCdEfGi-the-secret-rest"));
        assert_eq!(CredentialPrefix::of("short"), CredentialPrefix::of("short"));
        assert_ne!(CredentialPrefix::of("short"), CredentialPrefix::of("shorter"));
        assert!(!format!("{:?}", CredentialPrefix::of(key)).contains("AbCd"));
    }
}
