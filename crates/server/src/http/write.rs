//! One state-changing request = one transaction, with its `Idempotency-Key` honoured inside it.
//!
//! Every handler writes this one way, the console's sessions and the MCP tools' calls included:
//! [`Write::begin`], then the operation, then [`Write::finish`] (or [`Write::commit`]). The
//! request's writes are one unit of work of the market ([`Unit`]), which owns the transaction,
//! the retry under locks and the wake-ups after the commit; this layer adds only what belongs to
//! HTTP: the key's claim, the stored answer, and the response. The unit is opened by what the
//! handler does first: a market operation ([`Write::run`]) is tried without a transaction when
//! the request has no key, and asks for one if it cannot be made so ([`market::Error::NeedsLocks`]);
//! statements the handler runs itself ([`Write::parts`]) run in a transaction. With an
//! `Idempotency-Key` the answer must be stored with the effect, so such a request always runs in
//! a transaction, opened before anything else.
//!
//! With a key, the transaction first takes an advisory lock on (agent, key): a concurrent
//! duplicate finds it taken and gets 409 `idempotency_key_in_use`. Then it looks for a stored
//! response: the same request replays it, a different one gets 422 `idempotency_key_reused`.
//! Otherwise the operation runs and its response, success or refusal, is stored in the same
//! transaction as its effect. Database failures roll everything back and store nothing.
//! A handler that goes on after the commit (the compatibility routes wait for the other party's
//! answer) may then replace the stored response with its complete answer ([`Committed::complete`]).
//!
//! A keyed placement, counter or acceptance ([`Write::begin_move`]) is made as an unkeyed one is, in one
//! statement beside the other waiting moves, and stores its answer itself: the answer is worked
//! out from the rows the move will write, and the move's statement writes it with the move, so
//! both are made or neither. The key is looked up first, without a lock: a stored answer is
//! replayed. A move that cannot be made so (it lost a race, its statement found the key stored
//! meanwhile, or it was refused, whose answer is stored too) is made as any keyed request's,
//! in a transaction that claims the key first. So a duplicate sent while the first is being
//! made is answered with the first's answer, once it is made, rather than told to wait.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::future::BoxFuture;
use serde::Serialize;
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use std::sync::Arc;

use super::AppState;
use super::error::{ApiError, Code, PROBLEM_JSON};
use super::extract::IdempotencyKey;
use crate::db::idempotency::{self, Found, Saved};
use crate::db::{Bid, Order, Thread};
use crate::events::Outbox;
use crate::market::batch::{KeyedAnswer, Rendered};
use crate::market::{self, Access, Market, Unit};
use crate::secrets;

const JSON: &str = "application/json";

/// The shortest `Idempotency-Key` accepted on unauthenticated registration.
pub const MIN_ANONYMOUS_KEY_LEN: usize = 32;

/// A response ready to send and to store for replays.
#[derive(Debug, Clone)]
pub struct Reply {
    status: StatusCode,
    content_type: &'static str,
    body: Vec<u8>,
    /// The body carries a secret shown once: it is stored sealed.
    secret: bool,
}

impl Reply {
    pub fn json<T: Serialize>(status: StatusCode, value: &T) -> Reply {
        let body = serde_json::to_vec(value).expect("responses serialize to JSON");
        Reply { status, content_type: JSON, body, secret: false }
    }

    /// Marks the reply as carrying a secret (an API key), so that a stored copy is sealed.
    pub fn with_secret(mut self) -> Reply {
        self.secret = true;
        self
    }

    fn problem(error: &ApiError) -> Reply {
        Reply { status: error.status(), content_type: PROBLEM_JSON, body: error.body(), secret: false }
    }
}

impl IntoResponse for Reply {
    fn into_response(self) -> Response {
        (self.status, [(header::CONTENT_TYPE, self.content_type)], self.body).into_response()
    }
}

/// What identifies a stored response, and the key that seals it.
struct Claim {
    scope: Uuid,
    key_digest: [u8; 32],
    seal_key: [u8; 32],
    request_digest: [u8; 32],
}

impl Claim {
    fn new(scope: Uuid, key: &str, request_digest: [u8; 32]) -> Claim {
        Claim {
            scope,
            key_digest: secrets::sha256_parts(&[b"haggle idempotency key", scope.as_bytes(), key.as_bytes()]),
            seal_key: secrets::sha256_parts(&[b"haggle idempotency seal", scope.as_bytes(), key.as_bytes()]),
            request_digest,
        }
    }

    fn lock_id(&self) -> i64 {
        i64::from_be_bytes(self.key_digest[..8].try_into().expect("eight bytes"))
    }

    fn replay(&self, saved: Saved) -> Result<Response, ApiError> {
        if saved.request_digest != self.request_digest {
            return Err(ApiError::new(
                Code::IdempotencyKeyReused,
                "this Idempotency-Key was used for a different request; use a new key for a new request",
            ));
        }
        if saved.in_progress {
            return Err(ApiError::new(
                Code::IdempotencyKeyInUse,
                "the request with this Idempotency-Key has committed and is still waiting for the other party; retry when it has finished",
            ));
        }
        let body = if saved.sealed {
            secrets::open(&self.seal_key, &saved.body).ok_or_else(ApiError::internal)?
        } else {
            saved.body
        };
        let status = StatusCode::from_u16(saved.status_code as u16).map_err(|_| ApiError::internal())?;
        let mut response = (status, [(header::CONTENT_TYPE, saved.content_type)], body).into_response();
        response.headers_mut().insert("idempotent-replayed", HeaderValue::from_static("true"));
        Ok(response)
    }

    fn record(&self, reply: &Reply) -> Saved {
        Saved {
            request_digest: self.request_digest.to_vec(),
            status_code: reply.status.as_u16() as i16,
            content_type: reply.content_type.to_owned(),
            body: if reply.secret { secrets::seal(&self.seal_key, &reply.body) } else { reply.body.clone() },
            sealed: reply.secret,
            in_progress: false,
        }
    }
}

/// A state-changing request in progress: its unit of work, and the claim on its
/// `Idempotency-Key`, if it has one.
pub struct Write {
    market: Market,
    /// Opened by the first thing the request does (in a transaction at once with a key, unless
    /// its move stores its answer itself).
    unit: Option<Unit>,
    claim: Option<Claim>,
    /// A keyed move's answer, which its statement stores with it ([`Write::begin_move`]), until
    /// the move is made under locks instead.
    keyed: Option<Arc<KeyedAnswer>>,
    /// The whole answer, when the key's claim under locks found it taken or answered.
    answered: Option<Response>,
}

impl Write {
    /// Opens the request's write. With an `Idempotency-Key`, its unit of work is opened at once,
    /// in a transaction, and the key claimed: `Err` carries the whole answer when there is
    /// nothing to run (a replay, a key in use or reused, or a database failure). Without one,
    /// nothing is opened until the handler makes its first write. `scope` is the calling agent
    /// (the nil UUID for unauthenticated registration).
    pub async fn begin(
        state: &AppState,
        scope: Uuid,
        key: IdempotencyKey,
        request_digest: [u8; 32],
    ) -> Result<Write, Response> {
        Self::try_begin(state, scope, key, request_digest).await.map_err(IntoResponse::into_response)?
    }

    async fn try_begin(
        state: &AppState,
        scope: Uuid,
        key: IdempotencyKey,
        request_digest: [u8; 32],
    ) -> Result<Result<Write, Response>, ApiError> {
        let Some(key) = key.0 else {
            return Ok(Ok(Write::new(state)));
        };
        if scope.is_nil() && key.len() < MIN_ANONYMOUS_KEY_LEN {
            // Without an agent, the key alone decides who gets the stored answer (and the API key
            // in it), so it must be unguessable.
            return Err(ApiError::fields(
                Code::MalformedRequest,
                "the Idempotency-Key header is invalid",
                &[haggle_domain::FieldError::new(
                    "Idempotency-Key",
                    format!("must be at least {MIN_ANONYMOUS_KEY_LEN} characters when registering; use a random UUID"),
                )],
            ));
        }
        let claim = Claim::new(scope, &key, request_digest);
        let mut unit = state.market.begin().await?;
        if !idempotency::try_lock(unit.conn(), claim.lock_id()).await? {
            return Err(ApiError::new(
                Code::IdempotencyKeyInUse,
                "a request with this Idempotency-Key is still being processed; retry when it has finished",
            ));
        }
        if let Some(saved) = idempotency::find(unit.conn(), scope, &claim.key_digest).await? {
            // The key's lock is released before the answer goes, not after.
            unit.rollback().await;
            return Ok(Err(claim.replay(saved)?));
        }
        Ok(Ok(Write {
            market: state.market.clone(),
            unit: Some(unit),
            claim: Some(claim),
            keyed: None,
            answered: None,
        }))
    }

    /// Opens the write of a placement, a counter or an acceptance, whose answer is `answer` of
    /// the bid and thread it makes or answers (and the order an acceptance makes). Without a key, as [`begin`](Self::begin). With one, the key is looked up
    /// without a lock: a stored answer is replayed (`Err`, as `begin` answers); otherwise the move
    /// is first tried as an unkeyed one is, its statement storing its answer, and is made under
    /// the key's claim only if it cannot be made so ([`run`](Self::run)).
    pub async fn begin_move(
        state: &AppState,
        scope: Uuid,
        key: IdempotencyKey,
        request_digest: [u8; 32],
        answer: fn(&Bid, &Thread, Option<&Order>) -> Reply,
    ) -> Result<Write, Response> {
        let Some(text) = key.0.as_deref() else {
            return Ok(Write::new(state));
        };
        let claim = Claim::new(scope, text, request_digest);
        let looked_up = async {
            let mut unit = state.market.begin_unlocked().await?;
            if !unit.is_unlocked() {
                return Ok(None);
            }
            let found = idempotency::lookup(unit.conn(), scope, &claim.key_digest).await?;
            Ok::<_, ApiError>(Some((unit, found)))
        };
        match looked_up.await.map_err(IntoResponse::into_response)? {
            Some((mut unit, Found::Nothing)) => {
                let keyed = Arc::new(KeyedAnswer::new(
                    scope,
                    claim.key_digest,
                    claim.request_digest,
                    move |bid: &Bid, thread: &Thread, order: Option<&Order>| {
                        let reply = answer(bid, thread, order);
                        debug_assert!(!reply.secret, "a move's answer carries no secret");
                        Rendered { status: reply.status.as_u16(), content_type: reply.content_type, body: reply.body }
                    },
                ));
                unit.answer_with(Some(keyed.clone()));
                Ok(Write {
                    market: state.market.clone(),
                    unit: Some(unit),
                    claim: Some(claim),
                    keyed: Some(keyed),
                    answered: None,
                })
            }
            Some((_, Found::Live(saved))) => Err(claim.replay(saved).unwrap_or_else(IntoResponse::into_response)),
            // No batcher here, or a record past its retention, which only a claim under the key's
            // lock replaces: the keyed request's one way.
            None | Some((_, Found::Expired)) => Write::begin(state, scope, key, request_digest).await,
        }
    }

    /// A write with no `Idempotency-Key`, whose answer is not stored: nothing is opened until
    /// its first write.
    pub fn new(state: &AppState) -> Write {
        Write { market: state.market.clone(), unit: None, claim: None, keyed: None, answered: None }
    }

    /// The connection, in a transaction (opened now if the request has not written yet), and the
    /// outbox the operation's events go to: for statements the handler runs itself.
    pub async fn parts(&mut self) -> market::Result<(&mut PgConnection, &mut Outbox)> {
        if self.keyed.is_some() {
            self.claim_instead().await?;
        }
        if self.unit.is_none() {
            self.unit = Some(self.market.begin().await?);
        }
        let unit = self.unit.as_mut().expect("opened above");
        unit.lock().await?;
        Ok(unit.parts())
    }

    /// The connection, in a transaction, as [`parts`](Self::parts).
    pub async fn conn(&mut self) -> market::Result<&mut PgConnection> {
        Ok(self.parts().await?.0)
    }

    /// Runs a market operation in the request's unit of work ([`Unit::run`]): first without a
    /// transaction if the request has not written yet and has no key, and under locks if the
    /// operation asks for them.
    pub async fn run<T, F>(&mut self, mut operation: F) -> market::Result<T>
    where
        F: for<'u> FnMut(&'u mut PgConnection, &'u mut Outbox, Access) -> BoxFuture<'u, market::Result<T>>,
    {
        let unit = match &mut self.unit {
            Some(unit) => unit,
            None => self.unit.insert(self.market.begin_unlocked().await?),
        };
        if self.keyed.is_none() {
            return unit.run(operation).await;
        }
        match unit.run(&mut operation).await {
            // Made, its answer stored by its statement.
            Ok(made) => return Ok(made),
            // Not made (a refusal's answer must be stored too): under the key's claim, below.
            Err(market::Error::NeedsLocks | market::Error::Rejected(_)) => {}
            Err(error) => return Err(error),
        }
        self.claim_instead().await?;
        let unit = self.unit.as_mut().expect("opened above");
        unit.run(operation).await
    }

    /// A keyed move's write whose move cannot store its answer (it was not made in one statement,
    /// or the handler runs statements of its own first): its key is claimed as every keyed
    /// request's is, in a transaction, before anything is written. If the key turns out taken or
    /// answered meanwhile, that is the whole answer, which [`finish`](Self::finish) sends, and
    /// this says [`market::Error::NeedsLocks`], for the handler to finish with.
    async fn claim_instead(&mut self) -> market::Result<()> {
        let unit = self.unit.as_mut().expect("a keyed move's unit is opened with it");
        self.keyed = None;
        unit.answer_with(None);
        unit.lock().await?;
        let claim = self.claim.as_ref().expect("a keyed move has its claim");
        let answered = if !idempotency::try_lock(unit.conn(), claim.lock_id()).await? {
            Some(
                ApiError::new(
                    Code::IdempotencyKeyInUse,
                    "a request with this Idempotency-Key is still being processed; retry when it has finished",
                )
                .into_response(),
            )
        } else {
            let saved = idempotency::find(unit.conn(), claim.scope, &claim.key_digest).await?;
            saved.map(|saved| claim.replay(saved).unwrap_or_else(IntoResponse::into_response))
        };
        match answered {
            Some(answered) => {
                self.answered = Some(answered);
                Err(market::Error::NeedsLocks)
            }
            None => Ok(()),
        }
    }

    /// Commits a write whose answer is not stored for replays (it has no `Idempotency-Key`),
    /// for a handler that answers in its own way (the console's redirects, a `204`).
    pub async fn done(self) -> market::Result<()> {
        debug_assert!(self.claim.is_none(), "a keyed request's answer is stored with its effect");
        if let Some(unit) = self.unit {
            unit.commit_reporting().await?;
        }
        Ok(())
    }

    /// Stores the answer with the effect and commits, or rolls back on a database failure.
    pub async fn finish(mut self, outcome: Result<Reply, market::Error>) -> Response {
        if let Some(answered) = self.answered.take() {
            if let Some(unit) = self.unit {
                unit.rollback().await;
            }
            return answered;
        }
        match self.try_finish(outcome, false).await {
            Ok(committed) => committed.reply.into_response(),
            Err(error) => error.into_response(),
        }
    }

    /// Commits as [`finish`](Self::finish) does, for a handler that goes on after the commit
    /// (waiting for the other party's answer) and must then [complete](Committed::complete) the
    /// answer: until then, a retry with the same key is told the request is still running.
    /// `Err` is the whole answer: the database failed and nothing was done.
    pub async fn commit(self, outcome: Result<Reply, market::Error>) -> Result<Committed, Response> {
        self.try_finish(outcome, true).await.map_err(IntoResponse::into_response)
    }

    async fn try_finish(mut self, outcome: Result<Reply, market::Error>, running: bool) -> Result<Committed, ApiError> {
        let reply = match outcome {
            Ok(reply) => reply,
            Err(market::Error::Rejected(rejection)) => Reply::problem(&ApiError::from(rejection)),
            // Dropping the unit rolls it back.
            Err(error) => return Err(error.into()),
        };
        debug_assert!(self.answered.is_none(), "an answered write is finished with its answer");
        if let Some(keyed) = &self.keyed {
            // Its move's statement stored the answer with the move: the request sends those bytes.
            debug_assert!(!running, "a keyed move's answer is complete when made");
            let stored = keyed.stored().expect("a move made with its answer");
            let reply = Reply {
                status: StatusCode::from_u16(stored.status_code as u16).map_err(|_| ApiError::internal())?,
                content_type: stored.content_type,
                body: stored.body,
                secret: false,
            };
            if let Some(unit) = self.unit {
                unit.commit_reporting().await?;
            }
            return Ok(Committed { reply, claim: self.claim });
        }
        if let Some(claim) = &self.claim {
            // A keyed request always runs in a transaction: its answer is stored with its effect.
            let saved = Saved { in_progress: running, ..claim.record(&reply) };
            let unit = self.unit.as_mut().expect("a keyed request opens its unit at once");
            if !idempotency::save(unit.conn(), claim.scope, &claim.key_digest, &saved).await? {
                return Err(ApiError::new(
                    Code::IdempotencyKeyInUse,
                    "a concurrent request with this Idempotency-Key came first",
                ));
            }
        }
        // A request that wrote nothing (refused before its first statement) has nothing to commit.
        if let Some(unit) = self.unit {
            unit.commit_reporting().await?;
        }
        Ok(Committed { reply, claim: self.claim })
    }
}

/// A committed request's answer, and the key its copy for replays is stored under, if any.
pub struct Committed {
    pub reply: Reply,
    claim: Option<Claim>,
}

impl Committed {
    /// Replaces the answer stored for replays with `reply`, the request's complete answer, which
    /// was known only after the commit (the other party's answer to the committed move), and
    /// lets retries have it. If this fails, the committed answer stays stored, and is replayed
    /// once its mark has run out ([`idempotency::RUNNING_SECONDS`]): it was true when stored.
    pub async fn complete(self, pool: &PgPool, reply: Reply) -> Reply {
        if let Some(claim) = &self.claim
            && let Err(error) = idempotency::replace(pool, claim.scope, &claim.key_digest, &claim.record(&reply)).await
        {
            tracing::warn!(%error, "could not store the completed answer for replays");
        }
        reply
    }
}
