//! `/v1/agents`: registration, self, and API keys.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use haggle_api::{self as api, IssuedKey, PageQuery, Registered, Registration};
use uuid::Uuid;

use super::address::ClientAddress;
use super::error::{ApiError, Code};
use super::extract::{ActionBody, Id, IdempotencyKey, JsonBody, Params};
use super::{AppState, Endpoint, Page, Reply, Write, page_size, ratelimit};
use crate::db;
use crate::db::agents::Caller;
use crate::market::agents;
use haggle_domain::Tier;

pub fn endpoints() -> Vec<Endpoint> {
    vec![
        Endpoint::post("/v1/agents", register),
        Endpoint::get("/v1/agents/me", me),
        Endpoint::get("/v1/agents/me/keys", keys),
        Endpoint::post("/v1/agents/me/keys", create_key),
        Endpoint::delete("/v1/agents/me/keys/{key_id}", revoke_key),
    ]
}

async fn register(
    State(state): State<AppState>,
    ClientAddress(address): ClientAddress,
    key: IdempotencyKey,
    body: JsonBody<Registration>,
) -> Result<Response, Response> {
    state.check_rate(ratelimit::Requester::Address(address)).map_err(IntoResponse::into_response)?;
    if !state.settings.open_registration {
        return Err(ApiError::new(
            Code::Forbidden,
            "registration is closed on this server; ask the operator for an agent",
        )
        .into_response());
    }
    let mut command = Write::begin(&state, Uuid::nil(), key, body.digest).await?;
    let registered = async { agents::register(command.conn().await?, body.value, Tier::Public).await }.await;
    let outcome = registered.map(|(agent, new_key)| {
        Reply::json(
            StatusCode::CREATED,
            &Registered { agent: agent.into(), api_key: new_key.api_key, key: new_key.key.into() },
        )
        .with_secret()
    });
    Ok(command.finish(outcome).await)
}

async fn me(State(state): State<AppState>, caller: Caller) -> Result<Json<api::Agent>, ApiError> {
    let agent = db::agents::get(&state.pool, caller.id).await?;
    agent.map(|agent| Json(agent.into())).ok_or_else(|| ApiError::not_found("agent"))
}

/// My keys, oldest first, a page at a time.
async fn keys(
    State(state): State<AppState>,
    caller: Caller,
    Params(query): Params<PageQuery>,
) -> Result<Json<Page<api::KeyRecord>>, ApiError> {
    let (limit, after) = (page_size(query.limit)?, query.cursor);
    let page = db::agents::keys_page(&state.pool, caller.id, after, limit).await?;
    Ok(Json(page.map(api::KeyRecord::from)))
}

async fn create_key(
    State(state): State<AppState>,
    caller: Caller,
    key: IdempotencyKey,
    body: ActionBody,
) -> Result<Response, Response> {
    let mut command = Write::begin(&state, caller.id, key, body.digest).await?;
    let issued = async { agents::issue_key(command.conn().await?, caller.id).await }.await;
    let outcome = issued.map(|new_key| {
        Reply::json(StatusCode::CREATED, &IssuedKey { key: new_key.key.into(), api_key: new_key.api_key }).with_secret()
    });
    Ok(command.finish(outcome).await)
}

async fn revoke_key(State(state): State<AppState>, caller: Caller, Id(key_id): Id) -> Result<Response, Response> {
    let mut command = Write::begin(&state, caller.id, IdempotencyKey(None), [0; 32]).await?;
    let revoked = async { agents::revoke_key(command.conn().await?, caller.id, key_id).await }.await;
    let outcome = revoked.map(|key| Reply::json(StatusCode::OK, &api::KeyRecord::from(key)));
    let response = command.finish(outcome).await;
    // Committed (or not): either way the next request here must read the key afresh.
    state.keys.forget_agent(caller.id);
    Ok(response)
}
