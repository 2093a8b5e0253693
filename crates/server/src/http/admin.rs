//! `/v1/admin`: the operator's routes.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;

use super::extract::{Id, IdempotencyKey, JsonBody, Operator};
use super::{AppState, Endpoint, Reply, Write};
use crate::market::agents;
use haggle_api::{self as api, ProfilePatch};

pub fn endpoints() -> Vec<Endpoint> {
    vec![Endpoint::patch("/v1/admin/agents/{id}", update_agent)]
}

/// Sets an agent's tier and verified identity.
async fn update_agent(
    State(state): State<AppState>,
    _operator: Operator,
    Id(id): Id,
    body: JsonBody<ProfilePatch>,
) -> Result<Response, Response> {
    let mut command = Write::begin(&state, uuid::Uuid::nil(), IdempotencyKey(None), body.digest).await?;
    let outcome = agents::update_profile(command.conn(), id, body.value)
        .await
        .map(|agent| Reply::json(StatusCode::OK, &api::Agent::from(agent)));
    let response = command.finish(outcome).await;
    // The next request here must read the new tier.
    state.keys.forget_agent(id);
    Ok(response)
}
