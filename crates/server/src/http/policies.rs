//! Auto-negotiation policies: an agent's defaults per role, and overrides per listing or thread.
//!
//! A policy is its owner's alone: no route shows it to anyone else, and the decisions it makes
//! reach the counterparty only as bids.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use uuid::Uuid;

use super::error::ApiError;
use super::extract::{Id, JsonBody};
use super::{AppState, Endpoint};
use crate::db;
use crate::db::agents::Caller;
use crate::db::policies::Scope;
use haggle_api::StoredPolicy;
use haggle_domain::Party;
use haggle_domain::strategy::Policy;

use crate::market;

pub fn endpoints() -> Vec<Endpoint> {
    vec![
        Endpoint::get("/v1/agents/me/policies/{role}", read_default),
        Endpoint::put("/v1/agents/me/policies/{role}", put_default),
        Endpoint::delete("/v1/agents/me/policies/{role}", delete_default),
        Endpoint::get("/v1/listings/{id}/policy", read_listing),
        Endpoint::put("/v1/listings/{id}/policy", put_listing),
        Endpoint::delete("/v1/listings/{id}/policy", delete_listing),
        Endpoint::get("/v1/threads/{id}/policy", read_thread),
        Endpoint::put("/v1/threads/{id}/policy", put_thread),
        Endpoint::delete("/v1/threads/{id}/policy", delete_thread),
    ]
}

fn role_param(role: &str) -> Result<Party, ApiError> {
    role.parse().map_err(|_| ApiError::not_found("policy role (use buyer or seller)"))
}

/// Where a policy goes, the caller's role there, and the ask its limits are checked against.
struct Target {
    scope: Scope,
    role: Party,
    ask: Option<i64>,
}

/// The caller's side of a listing: its seller, or a prospective buyer.
async fn listing_target(state: &AppState, caller: Caller, id: Uuid) -> Result<Target, ApiError> {
    let listing = db::listings::get(&state.pool, id).await?.ok_or_else(|| ApiError::not_found("listing"))?;
    let role = if listing.seller_id == caller.id { Party::Seller } else { Party::Buyer };
    Ok(Target { scope: Scope::Listing(id), role, ask: Some(listing.ask_amount) })
}

async fn thread_target(state: &AppState, caller: Caller, id: Uuid) -> Result<Target, ApiError> {
    let thread = db::policies::thread_for_party(&state.pool, id, caller.id)
        .await?
        .ok_or_else(|| ApiError::not_found("thread"))?;
    Ok(Target { scope: Scope::Thread(id), role: thread.role, ask: Some(thread.ask_amount) })
}

/// Stores the policy and hands the negotiations already waiting on the caller to it.
async fn put(state: &AppState, caller: Caller, target: Target, policy: Policy) -> Result<Json<StoredPolicy>, ApiError> {
    let rules = state.settings.rules;
    let stored =
        market::policies::put(&state.market, caller.id, target.role, target.scope, target.ask, &policy, rules).await?;
    Ok(Json(stored.into()))
}

async fn read(state: &AppState, caller: Caller, target: Target) -> Result<Json<StoredPolicy>, ApiError> {
    db::policies::get(&state.pool, caller.id, target.role, target.scope)
        .await?
        .map(|stored| Json(stored.into()))
        .ok_or_else(|| ApiError::not_found("policy"))
}

async fn delete(state: &AppState, caller: Caller, target: Target) -> Result<StatusCode, ApiError> {
    if market::policies::delete(&state.market, caller.id, target.role, target.scope).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::not_found("policy"))
    }
}

fn default_target(role: &str) -> Result<Target, ApiError> {
    Ok(Target { scope: Scope::Agent, role: role_param(role)?, ask: None })
}

async fn read_default(
    State(state): State<AppState>,
    caller: Caller,
    Path(role): Path<String>,
) -> Result<Json<StoredPolicy>, ApiError> {
    read(&state, caller, default_target(&role)?).await
}

async fn put_default(
    State(state): State<AppState>,
    caller: Caller,
    Path(role): Path<String>,
    body: JsonBody<Policy>,
) -> Result<Json<StoredPolicy>, ApiError> {
    put(&state, caller, default_target(&role)?, body.value).await
}

async fn delete_default(
    State(state): State<AppState>,
    caller: Caller,
    Path(role): Path<String>,
) -> Result<StatusCode, ApiError> {
    delete(&state, caller, default_target(&role)?).await
}

async fn read_listing(
    State(state): State<AppState>,
    caller: Caller,
    Id(id): Id,
) -> Result<Json<StoredPolicy>, ApiError> {
    let target = listing_target(&state, caller, id).await?;
    read(&state, caller, target).await
}

async fn put_listing(
    State(state): State<AppState>,
    caller: Caller,
    Id(id): Id,
    body: JsonBody<Policy>,
) -> Result<Json<StoredPolicy>, ApiError> {
    let target = listing_target(&state, caller, id).await?;
    put(&state, caller, target, body.value).await
}

async fn delete_listing(State(state): State<AppState>, caller: Caller, Id(id): Id) -> Result<StatusCode, ApiError> {
    let target = listing_target(&state, caller, id).await?;
    delete(&state, caller, target).await
}

async fn read_thread(
    State(state): State<AppState>,
    caller: Caller,
    Id(id): Id,
) -> Result<Json<StoredPolicy>, ApiError> {
    let target = thread_target(&state, caller, id).await?;
    read(&state, caller, target).await
}

async fn put_thread(
    State(state): State<AppState>,
    caller: Caller,
    Id(id): Id,
    body: JsonBody<Policy>,
) -> Result<Json<StoredPolicy>, ApiError> {
    let target = thread_target(&state, caller, id).await?;
    put(&state, caller, target, body.value).await
}

async fn delete_thread(State(state): State<AppState>, caller: Caller, Id(id): Id) -> Result<StatusCode, ApiError> {
    let target = thread_target(&state, caller, id).await?;
    delete(&state, caller, target).await
}
