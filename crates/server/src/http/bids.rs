//! `/v1/bids`: reading a bid, and the responder's and author's moves on it.

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use std::time::Duration;

use chrono::Utc;
use haggle_api::{self as api, Answered as AnswerView, WaitQuery};
use tokio::time::Instant;
use uuid::Uuid;

use super::approvals::{self, Proposed};
use super::error::ApiError;
use super::events::{subscribe, wait_param, wake_or_stop};
use super::extract::{ActionBody, Id, IdempotencyKey, JsonBody, OptionalJsonBody, Params, agent_key};
use super::recheck::Recheck;
use super::{AppState, Endpoint, Reply, Write};
use crate::db;
use crate::db::agents::Caller;
use crate::market::negotiation::{self, Answer, Answered};
use haggle_domain::BidStatus;
use haggle_domain::bid::Proposal;

pub fn endpoints() -> Vec<Endpoint> {
    vec![
        Endpoint::get("/v1/bids/{id}", read),
        Endpoint::post("/v1/bids/{id}/counter", counter),
        Endpoint::post("/v1/bids/{id}/accept", accept),
        Endpoint::post("/v1/bids/{id}/reject", reject),
        Endpoint::post("/v1/bids/{id}/withdraw", withdraw),
    ]
}

async fn read_now(state: &AppState, caller: Caller, id: Uuid) -> Result<api::Bid, ApiError> {
    let bid = db::threads::get_bid(&state.pool, id, caller.id).await?;
    bid.map(|bid| bid.at(Utc::now())).ok_or_else(|| ApiError::not_found("bid"))
}

/// A bid; with `wait`, as soon as it leaves the status it had when asked (a pending bid's
/// deadline counts: it then reads EXPIRED), or as it is when the time is up. A wait ends early,
/// answered as the request would be now, when its key is revoked or its agent suspended.
async fn read(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    Id(id): Id,
    Params(query): Params<WaitQuery>,
) -> Result<Json<api::Bid>, ApiError> {
    let Some(wait) = wait_param(query.wait)? else {
        return read_now(&state, caller, id).await.map(Json);
    };
    let recheck = Recheck::new(&state, agent_key(caller, &headers)?);
    wait_until_changed(&state, caller, id, wait, Some(recheck)).await.map(Json)
}

/// The bid as soon as it leaves the status it has now (a pending bid's deadline counts: it then
/// reads EXPIRED), or as it is after `wait`, or when the server shuts down. For a request that
/// has just been let in with its key and waits a few seconds at most (the compatibility routes'
/// wait for the seller's answer to their own move); an agent's own wait is [`read`]'s, which
/// checks its key as it waits.
pub async fn wait_for_change(state: &AppState, caller: Caller, id: Uuid, wait: Duration) -> Result<api::Bid, ApiError> {
    wait_until_changed(state, caller, id, wait, None).await
}

async fn wait_until_changed(
    state: &AppState,
    caller: Caller,
    id: Uuid,
    wait: Duration,
    mut recheck: Option<Recheck>,
) -> Result<api::Bid, ApiError> {
    let deadline = Instant::now() + wait;
    // Every change of a bid writes an event to both parties, the caller among them.
    let mut subscription = subscribe(state, caller.id)?;
    let _open = crate::metrics::Open::long_poll();
    subscription.mark();
    let mut bid = read_now(state, caller, id).await?;
    let asked = bid.status;
    while bid.status == asked && bid.status == BidStatus::Pending {
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            break;
        }
        // Expiry writes nothing until the sweeper comes, so the deadline itself wakes us.
        let until_expiry = (bid.expires_at - Utc::now()).to_std().unwrap_or_default() + Duration::from_millis(1);
        let until_check = recheck.as_ref().map_or(Duration::MAX, Recheck::due_in);
        let timeout = remaining.min(until_expiry).min(until_check);
        let woke = wake_or_stop(&mut subscription, timeout, &state.shutdown).await;
        if !woke && state.shutdown.is_cancelled() {
            break;
        }
        if let Some(recheck) = &mut recheck {
            recheck.still_stands().await?;
        }
        // Only the check was due: nothing to read (a wake-up lost is made up for by the
        // catch-up's).
        if !woke && until_check < remaining.min(until_expiry) {
            continue;
        }
        subscription.mark();
        bid = read_now(state, caller, id).await?;
    }
    Ok(bid)
}

async fn counter(
    State(state): State<AppState>,
    caller: Caller,
    Id(id): Id,
    key: IdempotencyKey,
    body: JsonBody<api::CounterOffer>,
) -> Result<Response, Response> {
    let mut command = Write::begin_move(&state, caller.id, key, body.digest, super::listings::bid_made_of).await?;
    let proposed = Proposed::Counter { bid_id: id, offer: &body.value };
    if let Some(held) = approvals::hold_if_caught(&state, &mut command, caller, proposed).await.transpose() {
        return Ok(command.finish(held).await);
    }
    let rules = state.settings.rules;
    let offer = Proposal::from(body.value);
    let outcome = command
        .run(|conn, events, access| {
            let offer = offer.clone();
            Box::pin(async move { negotiation::counter(conn, events, access, caller, id, &offer, rules).await })
        })
        .await;
    Ok(command.finish(outcome.map(super::listings::bid_made)).await)
}

async fn answer(
    state: AppState,
    caller: Caller,
    id: Uuid,
    key: IdempotencyKey,
    digest: [u8; 32],
    answer: Answer,
    acceptance: Option<serde_json::Value>,
) -> Result<Response, Response> {
    // Only an acceptance is made unlocked (a keyed one storing its answer with it); rejecting and
    // withdrawing ask for locks at once.
    let mut command = match answer {
        Answer::Accept => Write::begin_move(&state, caller.id, key, digest, answered_of).await?,
        Answer::Reject | Answer::Withdraw => Write::begin(&state, caller.id, key, digest).await?,
    };
    if answer == Answer::Accept
        && let Some(held) = approvals::hold_if_caught(
            &state,
            &mut command,
            caller,
            Proposed::Accept { bid_id: id, terms: acceptance.as_ref() },
        )
        .await
        .transpose()
    {
        return Ok(command.finish(held).await);
    }
    let outcome = command
        .run(|conn, events, access| {
            let acceptance = acceptance.clone();
            Box::pin(async move {
                negotiation::answer_with_terms(conn, events, access, caller, id, answer, acceptance.as_ref()).await
            })
        })
        .await;
    Ok(command.finish(outcome.map(|Answered { bid, thread, order }| answered(bid, thread, order))).await)
}

/// The answer to an acceptance, rejection or withdrawal: the bid, its thread as it is now, and
/// the order an acceptance made.
fn answered(bid: db::Bid, thread: db::Thread, order: Option<db::Order>) -> Reply {
    Reply::json(
        StatusCode::OK,
        &AnswerView { bid: bid.into(), thread: thread.at(Utc::now()), order: order.map(Into::into) },
    )
}

/// [`answered`], of the rows a keyed acceptance will write (`Write::begin_move`).
fn answered_of(bid: &db::Bid, thread: &db::Thread, order: Option<&db::Order>) -> Reply {
    answered(bid.clone(), thread.clone(), order.cloned())
}

async fn accept(
    State(state): State<AppState>,
    caller: Caller,
    Id(id): Id,
    key: IdempotencyKey,
    body: OptionalJsonBody<api::Acceptance>,
) -> Result<Response, Response> {
    answer(state, caller, id, key, body.digest, Answer::Accept, body.value.terms.filter(|terms| !terms.is_null())).await
}

async fn reject(
    State(state): State<AppState>,
    caller: Caller,
    Id(id): Id,
    key: IdempotencyKey,
    body: ActionBody,
) -> Result<Response, Response> {
    answer(state, caller, id, key, body.digest, Answer::Reject, None).await
}

async fn withdraw(
    State(state): State<AppState>,
    caller: Caller,
    Id(id): Id,
    key: IdempotencyKey,
    body: ActionBody,
) -> Result<Response, Response> {
    answer(state, caller, id, key, body.digest, Answer::Withdraw, None).await
}
