//! What a long-lived request (an event stream, a long poll, a bid wait) checks again while it
//! waits: that the credential it was let in with still stands. Every `HAGGLE_STREAM_RECHECK` it
//! looks again, so that revoking a key, suspending its agent or signing a console session out
//! ends the requests opened with it within that time, on every instance.
//!
//! The requests that hold one credential share its checks ([`Rechecks`]): a request whose check
//! is due takes the answer of a check made since its own last one, and looks in the database only
//! when there is none, so ten thousand waiters of a hundred keys cost a hundred statements a period,
//! not ten thousand.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::response::Response;
use futures::StreamExt;
use sqlx::PgPool;
use tokio::time::Instant;
use uuid::Uuid;

use super::error::ApiError;
use super::{AppState, Settings, session};
use crate::db;
use crate::secrets;

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
enum Standing {
    Stands,
    KeyRevoked,
    AgentSuspended,
    TokenChanged,
    SessionEnded,
}

impl Standing {
    fn answer(self) -> Result<(), ApiError> {
        match self {
            Standing::Stands => Ok(()),
            Standing::KeyRevoked => {
                Err(ApiError::unauthenticated("the API key was revoked while this request was open"))
            }
            Standing::AgentSuspended => Err(ApiError::agent_suspended()),
            Standing::TokenChanged => {
                Err(ApiError::unauthenticated("the operator token has changed; send the new one"))
            }
            Standing::SessionEnded => Err(session::ended()),
        }
    }
}

/// A credential's latest check on this instance: when it began, and what it found.
#[derive(Debug, Clone, Copy)]
struct Checked {
    at: Instant,
    standing: Standing,
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
    fn slot(&self, credential: Credential, period: Duration) -> Arc<tokio::sync::Mutex<Option<Checked>>> {
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

    /// How many credentials are remembered (for tests).
    pub fn remembered(&self) -> usize {
        self.latest.lock().expect("the rechecks' lock is never poisoned").len()
    }
}

/// A credential checked again every so often.
pub struct Recheck {
    credential: Credential,
    pool: PgPool,
    settings: Arc<Settings>,
    rechecks: Arc<Rechecks>,
    checked_at: Instant,
}

impl Recheck {
    /// A credential just checked by the request's extractor.
    pub fn new(state: &AppState, credential: Credential) -> Recheck {
        Recheck {
            credential,
            pool: state.pool.clone(),
            settings: state.settings.clone(),
            rechecks: state.rechecks.clone(),
            checked_at: Instant::now(),
        }
    }

    /// How long until the next check is due: a wait should end by then.
    pub fn due_in(&self) -> Duration {
        self.settings.stream_recheck.saturating_sub(self.checked_at.elapsed())
    }

    /// `response` with its body ending once the credential no longer stands (checked every
    /// `HAGGLE_STREAM_RECHECK`), or when the body ends: for a stream another service answers
    /// (the MCP and A2A streams), which `what` names in the log.
    pub fn ending(self, response: Response, what: &'static str) -> Response {
        let (parts, body) = response.into_parts();
        let chunks = body.into_data_stream();
        let stream = futures::stream::unfold((chunks, self), move |(mut chunks, mut recheck)| async move {
            loop {
                tokio::select! {
                    chunk = chunks.next() => return chunk.map(|chunk| (chunk, (chunks, recheck))),
                    () = tokio::time::sleep(recheck.due_in()) => {
                        if let Err(error) = recheck.still_stands().await {
                            tracing::info!(code = ?error.code, stream = what, "a stream ended: its credential no longer stands");
                            return None;
                        }
                    }
                }
            }
        });
        Response::from_parts(parts, Body::from_stream(stream))
    }

    /// Checks the credential again if that is due. `Err` is the answer the request would get
    /// now (the key revoked, the agent suspended, the session ended), or the database's failure.
    /// A check another request of the same credential began after this one's last is taken as
    /// this one's: every request still sees a revocation within a period of it.
    pub async fn still_stands(&mut self) -> Result<(), ApiError> {
        if !self.due_in().is_zero() {
            return Ok(());
        }
        let slot = self.rechecks.slot(self.credential, self.settings.stream_recheck);
        let mut latest = slot.lock().await;
        let checked = match *latest {
            Some(checked) if checked.at > self.checked_at => checked,
            _ => {
                let at = Instant::now();
                let checked = Checked { at, standing: self.look().await? };
                *latest = Some(checked);
                checked
            }
        };
        self.checked_at = checked.at;
        checked.standing.answer()
    }

    /// Looks the credential up as it stands now.
    async fn look(&self) -> Result<Standing, ApiError> {
        Ok(match self.credential {
            Credential::ApiKey { agent_id, digest } => {
                match db::again_if_lost(|| db::agents::key_holder(&self.pool, &digest)).await? {
                    Some(holder) if holder.caller.id == agent_id && !holder.suspended => Standing::Stands,
                    Some(holder) if holder.suspended => Standing::AgentSuspended,
                    _ => Standing::KeyRevoked,
                }
            }
            Credential::OperatorToken { digest } => {
                let configured = self.settings.admin_token.as_deref().map(|token| secrets::sha256(token.as_bytes()));
                if configured == Some(digest) { Standing::Stands } else { Standing::TokenChanged }
            }
            Credential::ConsoleSession { digest } => {
                if db::again_if_lost(|| db::console::session_is_open(&self.pool, &digest)).await? {
                    Standing::Stands
                } else {
                    Standing::SessionEnded
                }
            }
        })
    }
}
