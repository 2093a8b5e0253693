//! `/v1/bids`: reading a bid, and the responder's and author's moves on it.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use chrono::Utc;
use serde::Serialize;

use super::error::ApiError;
use super::extract::{ActionBody, Id, IdempotencyKey, JsonBody};
use super::listings::BidAndThread;
use super::{AppState, Endpoint, Reply};
use crate::db::agents::Caller;
use crate::db::{self, Bid, Order, Thread};
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

async fn read(State(state): State<AppState>, caller: Caller, Id(id): Id) -> Result<Json<Bid>, ApiError> {
    let bid = db::negotiation::get_bid(&state.pool, id, caller.id).await?;
    bid.map(|bid| Json(bid.at(Utc::now()))).ok_or_else(|| ApiError::not_found("bid"))
}

async fn counter(
    State(state): State<AppState>,
    caller: Caller,
    Id(id): Id,
    key: IdempotencyKey,
    body: JsonBody<negotiation::CounterOffer>,
) -> Response {
    let mut command = begin!(&state, caller.id, key, body.digest);
    let outcome = negotiation::counter(command.conn(), caller, id, body.value, state.settings.rules).await;
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
    id: uuid::Uuid,
    key: IdempotencyKey,
    body: ActionBody,
    answer: Answer,
) -> Response {
    let mut command = begin!(&state, caller.id, key, body.digest);
    let outcome = negotiation::answer(command.conn(), caller, id, answer).await;
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
