//! `/v1/agents`: registration, self, and API keys.

use axum::Json;
use std::net::SocketAddr;

use axum::extract::{ConnectInfo, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use uuid::Uuid;

use super::error::{ApiError, Code};
use super::extract::{ActionBody, Id, IdempotencyKey, JsonBody};
use super::{AppState, Endpoint, Page, Reply, ratelimit};
use crate::db::agents::Caller;
use crate::db::{self, Agent, ApiKey};
use crate::domain::Tier;
use crate::market::agents::{self, Registration};

pub fn endpoints() -> Vec<Endpoint> {
    vec![
        Endpoint::post("/v1/agents", register),
        Endpoint::get("/v1/agents/me", me),
        Endpoint::get("/v1/agents/me/keys", keys),
        Endpoint::post("/v1/agents/me/keys", create_key),
        Endpoint::delete("/v1/agents/me/keys/{key_id}", revoke_key),
    ]
}

#[derive(Serialize)]
struct Registered<'a> {
    agent: &'a Agent,
    api_key: &'a str,
    key: &'a ApiKey,
}

#[derive(Serialize)]
struct IssuedKey<'a> {
    key: &'a ApiKey,
    api_key: &'a str,
}

async fn register(
    State(state): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    key: IdempotencyKey,
    body: JsonBody<Registration>,
) -> Response {
    if let Err(limited) = state.check_rate(ratelimit::Caller::Address(peer.ip())) {
        return limited.into_response();
    }
    if !state.settings.open_registration {
        return ApiError::new(Code::Forbidden, "registration is closed on this server; ask the operator for an agent")
            .into_response();
    }
    let mut command = begin!(&state, Uuid::nil(), key, body.digest);
    let outcome = agents::register(command.conn(), body.value, Tier::Public).await.map(|(agent, new_key)| {
        Reply::json(StatusCode::CREATED, &Registered { agent: &agent, api_key: &new_key.api_key, key: &new_key.key })
            .with_secret()
    });
    command.finish(outcome).await
}

async fn me(State(state): State<AppState>, caller: Caller) -> Result<Json<Agent>, ApiError> {
    let agent = db::agents::get(&state.pool, caller.id).await?;
    agent.map(Json).ok_or_else(|| ApiError::not_found("agent"))
}

async fn keys(State(state): State<AppState>, caller: Caller) -> Result<Json<Page<ApiKey>>, ApiError> {
    let keys = db::agents::keys(&state.pool, caller.id).await?;
    Ok(Json(Page { data: keys, next_cursor: None }))
}

async fn create_key(State(state): State<AppState>, caller: Caller, key: IdempotencyKey, body: ActionBody) -> Response {
    let mut command = begin!(&state, caller.id, key, body.digest);
    let outcome = agents::issue_key(command.conn(), caller.id).await.map(|new_key| {
        Reply::json(StatusCode::CREATED, &IssuedKey { key: &new_key.key, api_key: &new_key.api_key }).with_secret()
    });
    command.finish(outcome).await
}

async fn revoke_key(State(state): State<AppState>, caller: Caller, Id(key_id): Id) -> Response {
    let mut command = begin!(&state, caller.id, IdempotencyKey(None), [0; 32]);
    let outcome =
        agents::revoke_key(command.conn(), caller.id, key_id).await.map(|key| Reply::json(StatusCode::OK, &key));
    let response = command.finish(outcome).await;
    // Committed (or not): either way the next request here must read the key afresh.
    state.keys.forget_agent(caller.id);
    response
}
