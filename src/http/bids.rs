//! `/v1/bids`: reading a bid, and the responder's and author's moves on it.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use std::time::Duration;

use chrono::Utc;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;
use uuid::Uuid;

use super::error::ApiError;
use super::events::{subscribe, wait_param, wake_or_stop};
use super::extract::{ActionBody, Id, IdempotencyKey, JsonBody, Params};
use super::listings::BidAndThread;
use super::{AppState, Endpoint, Reply};
use crate::db::agents::Caller;
use crate::db::{self, Bid, Order, Thread};
use crate::domain::BidStatus;
use crate::market::negotiation::{self, Answer, Answered};

pub fn endpoints() -> Vec<Endpoint> {
    vec![
        Endpoint::get("/v1/bids/{id}", read),
        Endpoint::post("/v1/bids/{id}/counter", counter),
        Endpoint::post("/v1/bids/{id}/accept", accept),
        Endpoint::post("/v1/bids/{id}/reject", reject),
        Endpoint::post("/v1/bids/{id}/withdraw", withdraw),
    ]
}

#[derive(Serialize)]
struct AnswerReply {
    bid: Bid,
    thread: Thread,
    order: Option<Order>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReadQuery {
    wait: Option<f64>,
}

async fn read_now(state: &AppState, caller: Caller, id: Uuid) -> Result<Bid, ApiError> {
    let bid = db::negotiation::get_bid(&state.pool, id, caller.id).await?;
    bid.map(|bid| bid.at(Utc::now())).ok_or_else(|| ApiError::not_found("bid"))
}

/// A bid; with `wait`, as soon as it leaves the status it had when asked (a pending bid's
/// deadline counts: it then reads EXPIRED), or as it is when the time is up.
async fn read(
    State(state): State<AppState>,
    caller: Caller,
    Id(id): Id,
    Params(query): Params<ReadQuery>,
) -> Result<Json<Bid>, ApiError> {
    let Some(wait) = wait_param(query.wait)? else {
        return read_now(&state, caller, id).await.map(Json);
    };
    wait_for_change(&state, caller, id, wait).await.map(Json)
}

/// The bid as soon as it leaves the status it has now (a pending bid's deadline counts: it then
/// reads EXPIRED), or as it is after `wait`, or when the server shuts down.
pub async fn wait_for_change(state: &AppState, caller: Caller, id: Uuid, wait: Duration) -> Result<Bid, ApiError> {
    let deadline = Instant::now() + wait;
    // Every change of a bid publishes an event to both parties, the caller among them.
    let mut subscription = subscribe(state, caller.id)?;
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
        let woke = wake_or_stop(&mut subscription, remaining.min(until_expiry), &state.shutdown).await;
        if !woke && state.shutdown.is_cancelled() {
            break;
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
    body: JsonBody<negotiation::CounterOffer>,
) -> Response {
    let mut command = begin_unlocked!(&state, caller.id, key, body.digest);
    let rules = state.settings.rules;
    let outcome = run_move!(command, |conn, events, access| negotiation::counter(
        conn,
        events,
        access,
        caller,
        id,
        &body.value,
        rules
    ));
    let now = Utc::now();
    command
        .finish(
            outcome
                .map(|(bid, thread)| Reply::json(StatusCode::CREATED, &BidAndThread { bid, thread: thread.at(now) })),
        )
        .await
}

async fn answer(
    state: AppState,
    caller: Caller,
    id: Uuid,
    key: IdempotencyKey,
    body: ActionBody,
    answer: Answer,
) -> Response {
    // Only an acceptance is tried unlocked; rejecting and withdrawing are rarer, and end the
    // thread in the transaction that records any expiry found on the way.
    let mut command = match answer {
        Answer::Accept => begin_unlocked!(&state, caller.id, key, body.digest),
        Answer::Reject | Answer::Withdraw => begin!(&state, caller.id, key, body.digest),
    };
    let outcome =
        run_move!(command, |conn, events, access| negotiation::answer(conn, events, access, caller, id, answer));
    let now = Utc::now();
    command
        .finish(outcome.map(|Answered { bid, thread, order }| {
            Reply::json(StatusCode::OK, &AnswerReply { bid, thread: thread.at(now), order })
        }))
        .await
}

async fn accept(
    State(state): State<AppState>,
    caller: Caller,
    Id(id): Id,
    key: IdempotencyKey,
    body: ActionBody,
) -> Response {
    answer(state, caller, id, key, body, Answer::Accept).await
}

async fn reject(
    State(state): State<AppState>,
    caller: Caller,
    Id(id): Id,
    key: IdempotencyKey,
    body: ActionBody,
) -> Response {
    answer(state, caller, id, key, body, Answer::Reject).await
}

async fn withdraw(
    State(state): State<AppState>,
    caller: Caller,
    Id(id): Id,
    key: IdempotencyKey,
    body: ActionBody,
) -> Response {
    answer(state, caller, id, key, body, Answer::Withdraw).await
}
