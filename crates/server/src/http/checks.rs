//! The checks of the credentials that long-lived requests hold, shared by the requests of one
//! credential on this instance (what a check means to a request is `recheck`'s).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use uuid::Uuid;

/// The credential a request was let in with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Credential {
    /// An agent's API key (its digest), and the agent it belonged to then.
    ApiKey { agent_id: Uuid, digest: [u8; 32] },
    /// The operator token (its digest).
    OperatorToken { digest: [u8; 32] },
    /// The console's session cookie (the digest of its id).
    ConsoleSession { digest: [u8; 32] },
}

/// What a check found of a credential.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Standing {
    Stands,
    KeyRevoked,
    AgentSuspended,
    TokenChanged,
    SessionEnded,
}

/// A credential's latest check on this instance: when it began, and what it found.
#[derive(Debug, Clone, Copy)]
pub(super) struct Checked {
    pub(super) at: Instant,
    pub(super) standing: Standing,
}

/// The latest check of each credential this instance's long-lived requests hold, shared by them.
#[derive(Debug, Default)]
pub struct Rechecks {
    latest: Mutex<HashMap<Credential, Arc<tokio::sync::Mutex<Option<Checked>>>>>,
}

/// Credentials remembered before the ones nobody checks any more are forgotten.
const REMEMBERED: usize = 1024;

impl Rechecks {
    /// The credential's slot: its latest check, locked by the request that is checking it.
    pub(super) fn slot(&self, credential: Credential, period: Duration) -> Arc<tokio::sync::Mutex<Option<Checked>>> {
        let mut latest = self.latest.lock().expect("the rechecks' lock is never poisoned");
        if latest.len() >= REMEMBERED && !latest.contains_key(&credential) {
            // A slot no request holds and no check has used for two periods is of no use.
            latest.retain(|_, slot| {
                Arc::strong_count(slot) > 1
                    || slot.try_lock().map_or(true, |checked| checked.is_some_and(|c| c.at.elapsed() < 2 * period))
            });
        }
        latest.entry(credential).or_default().clone()
    }
}
