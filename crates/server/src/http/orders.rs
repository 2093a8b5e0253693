//! `/v1/orders`: my orders, as buyer or seller, and their life after the handshake: fulfilment,
//! completion, and the payments recorded against them.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;

use super::approvals::{self, Proposed};
use super::error::ApiError;
use super::extract::{ActionBody, Id, IdempotencyKey, JsonBody, OptionalJsonBody, Params, PaymentIds};
use super::{AppState, Endpoint, Page, Reply, Write, page_size};
use crate::db;
use crate::db::agents::Caller;
use crate::db::orders::OrderFilter;
use crate::market::order_negotiations;
use crate::market::orders::{self, PaymentAnswer};
use crate::views::order_with_payments;
use chrono::Utc;
use haggle_api::{self as api, Fulfil, NewPayment, OpenNegotiation, OrderQuery, PaymentAndOrder, PaymentDispute};

pub fn endpoints() -> Vec<Endpoint> {
    vec![
        Endpoint::get("/v1/orders", list),
        Endpoint::get("/v1/orders/{id}", read),
        Endpoint::post("/v1/orders/{id}/fulfil", fulfil),
        Endpoint::post("/v1/orders/{id}/complete", complete),
        Endpoint::post("/v1/orders/{id}/payments", record_payment),
        Endpoint::post("/v1/orders/{id}/payments/{payment_id}/confirm", confirm_payment),
        Endpoint::post("/v1/orders/{id}/payments/{payment_id}/dispute", dispute_payment),
        Endpoint::post("/v1/orders/{id}/negotiations", open_negotiation),
    ]
}

async fn list(
    State(state): State<AppState>,
    caller: Caller,
    Params(query): Params<OrderQuery>,
) -> Result<Json<Page<api::Order>>, ApiError> {
    let filter = OrderFilter {
        limit: page_size(query.limit)?,
        role: query.role,
        listing_id: query.listing_id,
        after: query.cursor,
    };
    let page = db::orders::list(&state.pool, caller.id, &filter).await?;
    Ok(Json(page.map(api::Order::from)))
}

async fn read(
    State(state): State<AppState>,
    caller: Caller,
    Id(id): Id,
) -> Result<Json<api::OrderWithPayments>, ApiError> {
    let order = db::orders::get(&state.pool, id, caller.id).await?.ok_or_else(|| ApiError::not_found("order"))?;
    let payments = db::orders::payments(&state.pool, id).await?;
    Ok(Json(order_with_payments(order, payments)))
}

async fn fulfil(
    State(state): State<AppState>,
    caller: Caller,
    Id(id): Id,
    key: IdempotencyKey,
    body: OptionalJsonBody<Fulfil>,
) -> Result<Response, Response> {
    let mut command = Write::begin(&state, caller.id, key, body.digest).await?;
    let outcome = async {
        let (conn, events) = command.parts().await?;
        orders::fulfil(conn, events, caller, id, body.value).await
    }
    .await;
    let reply = outcome.map(|(order, payments)| Reply::json(StatusCode::OK, &order_with_payments(order, payments)));
    Ok(command.finish(reply).await)
}

async fn complete(
    State(state): State<AppState>,
    caller: Caller,
    Id(id): Id,
    key: IdempotencyKey,
    body: ActionBody,
) -> Result<Response, Response> {
    let mut command = Write::begin(&state, caller.id, key, body.digest).await?;
    let outcome = async {
        let (conn, events) = command.parts().await?;
        orders::complete(conn, events, caller, id).await
    }
    .await;
    let reply = outcome.map(|(order, payments)| Reply::json(StatusCode::OK, &order_with_payments(order, payments)));
    Ok(command.finish(reply).await)
}

async fn record_payment(
    State(state): State<AppState>,
    caller: Caller,
    Id(id): Id,
    key: IdempotencyKey,
    body: JsonBody<NewPayment>,
) -> Result<Response, Response> {
    let mut command = Write::begin(&state, caller.id, key, body.digest).await?;
    let rules = state.settings.rules;
    let outcome = async {
        let (conn, events) = command.parts().await?;
        orders::record_payment(conn, events, caller, id, body.value, rules).await
    }
    .await;
    Ok(command.finish(outcome.map(|answer| Reply::json(StatusCode::CREATED, &payment_and_order(answer)))).await)
}

/// Opens a negotiation on the order (a refund, a cancellation) with its first bid: 201 with the
/// bid and its thread, whose later moves are the bid routes'.
async fn open_negotiation(
    State(state): State<AppState>,
    caller: Caller,
    Id(id): Id,
    key: IdempotencyKey,
    body: JsonBody<OpenNegotiation>,
) -> Result<Response, Response> {
    let mut command = Write::begin(&state, caller.id, key, body.digest).await?;
    let proposed = Proposed::OpenRefund { order_id: id, input: &body.value };
    if let Some(held) = approvals::hold_if_caught(&state, &mut command, caller, proposed).await.transpose() {
        return Ok(command.finish(held).await);
    }
    let rules = state.settings.rules;
    let outcome = async {
        let (conn, events) = command.parts().await?;
        order_negotiations::open(conn, events, caller, id, &body.value, rules).await
    }
    .await;
    let now = Utc::now();
    let reply = outcome.map(|(bid, thread)| {
        Reply::json(StatusCode::CREATED, &api::BidAndThread { bid: bid.at(now), thread: thread.at(now) })
    });
    Ok(command.finish(reply).await)
}

async fn confirm_payment(
    State(state): State<AppState>,
    caller: Caller,
    PaymentIds(id, payment_id): PaymentIds,
    key: IdempotencyKey,
    body: ActionBody,
) -> Result<Response, Response> {
    answer_payment(state, caller, id, payment_id, key, body.digest, PaymentAnswer::Confirm).await
}

async fn dispute_payment(
    State(state): State<AppState>,
    caller: Caller,
    PaymentIds(id, payment_id): PaymentIds,
    key: IdempotencyKey,
    body: JsonBody<PaymentDispute>,
) -> Result<Response, Response> {
    answer_payment(state, caller, id, payment_id, key, body.digest, PaymentAnswer::Dispute(body.value)).await
}

async fn answer_payment(
    state: AppState,
    caller: Caller,
    id: uuid::Uuid,
    payment_id: uuid::Uuid,
    key: IdempotencyKey,
    digest: [u8; 32],
    answer: PaymentAnswer,
) -> Result<Response, Response> {
    let mut command = Write::begin(&state, caller.id, key, digest).await?;
    let outcome = async {
        let (conn, events) = command.parts().await?;
        orders::answer_payment(conn, events, caller, id, payment_id, answer).await
    }
    .await;
    Ok(command.finish(outcome.map(|answer| Reply::json(StatusCode::OK, &payment_and_order(answer)))).await)
}

fn payment_and_order((payment, order): (db::orders::Payment, db::Order)) -> PaymentAndOrder {
    PaymentAndOrder { payment: payment.into(), order: order.into() }
}
