//! `/v1/webhooks`: endpoints that receive an agent's events.
//!
//! A webhook is its owner's alone: to any other agent it does not exist (404), like a thread.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use super::extract::{ActionBody, Id, IdempotencyKey, JsonBody, Params};
use super::{AppState, Endpoint, Page, Reply, Write, page_size};
use crate::db;
use crate::db::agents::Caller;
use crate::market::webhooks as registry;
use haggle_api::{self as api, NewWebhook as WebhookRequest, PageQuery};

pub fn endpoints() -> Vec<Endpoint> {
    vec![
        Endpoint::post("/v1/webhooks", create),
        Endpoint::get("/v1/webhooks", list),
        Endpoint::get("/v1/webhooks/{id}", read),
        Endpoint::delete("/v1/webhooks/{id}", delete),
        Endpoint::get("/v1/webhooks/{id}/deliveries", deliveries),
        Endpoint::post("/v1/webhooks/{id}/enable", enable),
    ]
}

async fn create(
    State(state): State<AppState>,
    caller: Caller,
    key: IdempotencyKey,
    body: JsonBody<WebhookRequest>,
) -> Result<Response, Response> {
    // Resolving the host may take a while: it happens before the transaction opens. Its
    // verdict is still answered (and stored) inside the command, so a replay wins over it.
    let checked = registry::check(body.value, state.settings.webhooks.allow_private).await;
    let sealing_key = match state.sealing_key.get(&state.pool).await {
        Ok(sealing_key) => sealing_key,
        Err(error) => return Err(ApiError::from(error).into_response()),
    };
    let mut command = Write::begin(&state, caller.id, key, body.digest).await?;
    let outcome = match checked {
        Ok(checked) => async { registry::create(command.conn().await?, caller.id, checked, &sealing_key).await }.await,
        Err(rejection) => Err(rejection.into()),
    };
    Ok(command.finish(outcome.map(|created| Reply::json(StatusCode::CREATED, &created).with_secret())).await)
}

async fn list(
    State(state): State<AppState>,
    caller: Caller,
    Params(query): Params<PageQuery>,
) -> Result<Json<Page<api::Webhook>>, ApiError> {
    let (limit, after) = (page_size(query.limit)?, query.cursor);
    let page = db::webhooks::list(&state.pool, caller.id, after, limit).await?;
    Ok(Json(page.map(api::Webhook::from)))
}

async fn read(State(state): State<AppState>, caller: Caller, Id(id): Id) -> Result<Json<api::Webhook>, ApiError> {
    db::webhooks::get(&state.pool, id, caller.id)
        .await?
        .map(|webhook| Json(webhook.into()))
        .ok_or_else(|| ApiError::not_found("webhook"))
}

async fn delete(State(state): State<AppState>, caller: Caller, Id(id): Id) -> Result<StatusCode, ApiError> {
    if registry::delete(&state.market, caller.id, id).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::not_found("webhook"))
    }
}

async fn deliveries(
    State(state): State<AppState>,
    caller: Caller,
    Id(id): Id,
    Params(query): Params<PageQuery>,
) -> Result<Json<Page<api::Delivery>>, ApiError> {
    let (limit, after) = (page_size(query.limit)?, query.cursor);
    if db::webhooks::get(&state.pool, id, caller.id).await?.is_none() {
        return Err(ApiError::not_found("webhook"));
    }
    let page = db::webhooks::deliveries(&state.pool, id, after, limit).await?;
    Ok(Json(page.map(api::Delivery::from)))
}

async fn enable(
    State(state): State<AppState>,
    caller: Caller,
    Id(id): Id,
    key: IdempotencyKey,
    body: ActionBody,
) -> Result<Response, Response> {
    let mut command = Write::begin(&state, caller.id, key, body.digest).await?;
    let outcome = async { registry::enable(command.conn().await?, caller.id, id).await }.await;
    Ok(command.finish(outcome.map(|webhook| Reply::json(StatusCode::OK, &api::Webhook::from(webhook)))).await)
}
