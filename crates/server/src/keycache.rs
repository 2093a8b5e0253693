//! Which agent an API key belongs to, remembered for a few seconds so that a request does not
//! look its key up in the database each time.
//!
//! An entry is dropped when its agent changes in a way that matters to authorization: a key is
//! revoked or the tier is changed. The request that makes the change drops the agent's entries
//! on its own instance after its commit, so the next request there sees it; it also sends a
//! NOTIFY on [`CHANNEL`], delivered at the commit, on which every instance's listener drops
//! them too. The time-to-live bounds the staleness when a notification is lost (the listener
//! was reconnecting, and then clears everything as well).
//!
//! A lookup that was in flight while an entry was dropped does not store its (possibly stale)
//! answer: every drop advances a generation, and an answer is stored only if the generation
//! has not moved since its lookup began.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use uuid::Uuid;

use crate::db::agents::Caller;

/// The channel that announces an agent's authorization changed; the payload is its id.
pub use crate::db::agents::AGENTS_CHANNEL as CHANNEL;

/// Entries kept at most; a full cache starts over (expired entries are swept first).
const CAPACITY: usize = 50_000;

pub struct KeyCache {
    ttl: Duration,
    entries: Mutex<HashMap<[u8; 32], Entry>>,
    generation: AtomicU64,
}

#[derive(Clone, Copy)]
struct Entry {
    caller: Caller,
    stored_at: Instant,
}

/// A lookup in progress: where to store its answer.
#[derive(Debug, Clone, Copy)]
pub struct Ticket(u64);

impl KeyCache {
    /// A cache keeping entries for `ttl`; a zero `ttl` keeps nothing.
    pub fn new(ttl: Duration) -> KeyCache {
        KeyCache { ttl, entries: Mutex::new(HashMap::new()), generation: AtomicU64::new(0) }
    }

    /// The caller behind a key digest, if remembered and fresh; otherwise a ticket for
    /// [`KeyCache::store`] after looking it up.
    pub fn get(&self, digest: &[u8; 32]) -> Result<Caller, Ticket> {
        self.get_at(digest, Instant::now())
    }

    /// [`KeyCache::get`] at the instant `now`.
    fn get_at(&self, digest: &[u8; 32], now: Instant) -> Result<Caller, Ticket> {
        let ticket = Ticket(self.generation.load(Ordering::Acquire));
        if self.ttl.is_zero() {
            return Err(ticket);
        }
        let entries = self.entries.lock().expect("the key cache's lock is never poisoned");
        match entries.get(digest) {
            Some(entry) if now.saturating_duration_since(entry.stored_at) < self.ttl => Ok(entry.caller),
            _ => Err(ticket),
        }
    }

    /// Remembers a lookup's answer, unless something was dropped since it began.
    pub fn store(&self, ticket: Ticket, digest: [u8; 32], caller: Caller) {
        if self.ttl.is_zero() {
            return;
        }
        let mut entries = self.entries.lock().expect("the key cache's lock is never poisoned");
        // Checked under the lock, which drops also take: no drop can slip in between.
        if self.generation.load(Ordering::Acquire) != ticket.0 {
            return;
        }
        if entries.len() >= CAPACITY {
            let ttl = self.ttl;
            entries.retain(|_, entry| entry.stored_at.elapsed() < ttl);
            if entries.len() >= CAPACITY {
                entries.clear();
            }
        }
        entries.insert(digest, Entry { caller, stored_at: Instant::now() });
    }

    /// Forgets every key of an agent.
    pub fn forget_agent(&self, agent: Uuid) {
        let mut entries = self.entries.lock().expect("the key cache's lock is never poisoned");
        self.generation.fetch_add(1, Ordering::AcqRel);
        entries.retain(|_, entry| entry.caller.id != agent);
    }

    /// Forgets everything (notifications may have been missed).
    pub fn clear(&self) {
        let mut entries = self.entries.lock().expect("the key cache's lock is never poisoned");
        self.generation.fetch_add(1, Ordering::AcqRel);
        entries.clear();
    }

    /// What to do with a notification on [`CHANNEL`]: forget its agent, or everything if the
    /// payload is not an agent id.
    pub fn on_notification(&self, payload: &str) {
        match Uuid::parse_str(payload) {
            Ok(agent) => self.forget_agent(agent),
            Err(_) => self.clear(),
        }
    }
}

impl std::fmt::Debug for KeyCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyCache").field("ttl", &self.ttl).finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use haggle_domain::Tier;

    fn caller(id: Uuid) -> Caller {
        Caller { id, tier: Tier::Agency, approval_rules: false }
    }

    #[test]
    fn remembers_until_the_agent_is_forgotten() {
        let cache = KeyCache::new(Duration::from_secs(60));
        let (alice, bob) = (Uuid::now_v7(), Uuid::now_v7());
        let ticket = cache.get(&[1; 32]).unwrap_err();
        cache.store(ticket, [1; 32], caller(alice));
        let ticket = cache.get(&[2; 32]).unwrap_err();
        cache.store(ticket, [2; 32], caller(bob));
        assert_eq!(cache.get(&[1; 32]).unwrap().id, alice);
        cache.on_notification(&alice.to_string());
        assert!(cache.get(&[1; 32]).is_err());
        assert_eq!(cache.get(&[2; 32]).unwrap().id, bob);
        cache.on_notification("not an id");
        assert!(cache.get(&[2; 32]).is_err());
    }

    #[test]
    fn a_lookup_overtaken_by_a_drop_is_not_stored() {
        let cache = KeyCache::new(Duration::from_secs(60));
        let alice = Uuid::now_v7();
        let ticket = cache.get(&[1; 32]).unwrap_err();
        // The key is revoked while the lookup that began before is still reading.
        cache.forget_agent(alice);
        cache.store(ticket, [1; 32], caller(alice));
        assert!(cache.get(&[1; 32]).is_err(), "a stale answer was stored");
        let ticket = cache.get(&[1; 32]).unwrap_err();
        cache.store(ticket, [1; 32], caller(alice));
        assert!(cache.get(&[1; 32]).is_ok());
    }

    #[test]
    fn entries_expire_and_a_zero_ttl_keeps_nothing() {
        // Read at chosen instants, so that a slow machine cannot expire the entry early.
        let ttl = Duration::from_secs(20);
        let cache = KeyCache::new(ttl);
        let ticket = cache.get(&[1; 32]).unwrap_err();
        let before = Instant::now();
        cache.store(ticket, [1; 32], caller(Uuid::now_v7()));
        let after = Instant::now();
        assert!(cache.get_at(&[1; 32], after).is_ok());
        assert!(cache.get_at(&[1; 32], before + ttl - Duration::from_millis(1)).is_ok(), "expired early");
        assert!(cache.get_at(&[1; 32], after + ttl).is_err(), "kept past its lifetime");

        let off = KeyCache::new(Duration::ZERO);
        let ticket = off.get(&[1; 32]).unwrap_err();
        off.store(ticket, [1; 32], caller(Uuid::now_v7()));
        assert!(off.get(&[1; 32]).is_err());
    }
}
