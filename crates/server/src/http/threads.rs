//! `/v1/threads`: my negotiations.

use axum::Json;
use axum::extract::State;
use chrono::Utc;
use haggle_api::{self as api, ThreadQuery, ThreadWithBids};

use super::error::ApiError;
use super::extract::{ActionBody, Id, IdempotencyKey, OptionalJsonBody, Params};
use super::{AppState, Endpoint, Page, Reply, Write, page_size};
use crate::db;
use crate::db::agents::Caller;
use crate::db::threads::ThreadFilter;
use crate::market::mediation::{self, Settlement};
use crate::market::order_negotiations;
use axum::http::StatusCode;
use axum::response::Response;

pub fn endpoints() -> Vec<Endpoint> {
    vec![
        Endpoint::get("/v1/threads", list),
        Endpoint::get("/v1/threads/{id}", read),
        Endpoint::post("/v1/threads/{id}/settle", settle),
        Endpoint::post("/v1/threads/{id}/escalate", escalate),
    ]
}

/// The caller agrees to settle a deadlocked thread at the mediator's suggestion: 200 with the
/// accepted counter and the order once both sides agreed, 202 while the other side has not.
async fn settle(
    State(state): State<AppState>,
    caller: Caller,
    Id(id): Id,
    key: IdempotencyKey,
    body: OptionalJsonBody<api::Settle>,
) -> Result<Response, Response> {
    let mut command = Write::begin(&state, caller.id, key, body.digest).await?;
    let rules = state.settings.rules;
    let bid_id = body.value.bid_id;
    let outcome = command
        .run(|conn, events, access| Box::pin(mediation::settle(conn, events, access, caller, id, bid_id, rules)))
        .await;
    let now = Utc::now();
    Ok(command
        .finish(outcome.map(|Settlement { thread, bid, order }| {
            let status = if order.is_some() { StatusCode::OK } else { StatusCode::ACCEPTED };
            Reply::json(
                status,
                &api::Settled { thread: thread.at(now), bid: bid.map(Into::into), order: order.map(Into::into) },
            )
        }))
        .await)
}

/// Either party sends a refund that ended without agreement to the operator: the thread, marked
/// escalated.
async fn escalate(
    State(state): State<AppState>,
    caller: Caller,
    Id(id): Id,
    key: IdempotencyKey,
    body: ActionBody,
) -> Result<Response, Response> {
    let mut command = Write::begin(&state, caller.id, key, body.digest).await?;
    let outcome = async {
        let (conn, events) = command.parts().await?;
        order_negotiations::escalate(conn, events, caller, id).await
    }
    .await;
    let now = Utc::now();
    Ok(command.finish(outcome.map(|thread| Reply::json(StatusCode::OK, &thread.at(now)))).await)
}

async fn list(
    State(state): State<AppState>,
    caller: Caller,
    Params(query): Params<ThreadQuery>,
) -> Result<Json<Page<api::Thread>>, ApiError> {
    let filter = ThreadFilter {
        limit: page_size(query.limit)?,
        role: query.role,
        status: query.status,
        listing_id: query.listing_id,
        order_id: query.order_id,
        kind: query.kind,
        after: query.cursor,
    };
    let page = db::threads::list_threads(&state.pool, caller.id, &filter).await?;
    let now = Utc::now();
    Ok(Json(page.map(|thread| thread.at(now))))
}

async fn read(State(state): State<AppState>, caller: Caller, Id(id): Id) -> Result<Json<ThreadWithBids>, ApiError> {
    let (thread, bids) = db::threads::get_thread_with_bids(&state.pool, id, Some(caller.id))
        .await?
        .ok_or_else(|| ApiError::not_found("thread"))?;
    let now = Utc::now();
    Ok(Json(ThreadWithBids { thread: thread.at(now), bids: bids.iter().map(|bid| bid.at(now)).collect() }))
}
