//! `/v1/admin`: the operator's routes.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;

use super::extract::{Id, IdempotencyKey, JsonBody, Operator};
use super::{AppState, Endpoint, Reply};
use crate::market::agents::{self, ProfilePatch};

pub fn endpoints() -> Vec<Endpoint> {
    vec![Endpoint::patch("/v1/admin/agents/{id}", update_agent)]
}

/// Sets an agent's tier and verified identity.
async fn update_agent(
    State(state): State<AppState>,
    _operator: Operator,
    Id(id): Id,
    body: JsonBody<ProfilePatch>,
) -> Response {
    let mut command = begin!(&state, uuid::Uuid::nil(), IdempotencyKey(None), body.digest);
    let outcome =
        agents::update_profile(command.conn(), id, body.value).await.map(|agent| Reply::json(StatusCode::OK, &agent));
    let response = command.finish(outcome).await;
    // The next request here must read the new tier.
    state.keys.forget_agent(id);
    response
}
