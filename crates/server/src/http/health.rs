//! Liveness, readiness and the API's own description.

use axum::Json;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use serde_json::{Value, json};

use super::error::ApiError;
use super::{AppState, Endpoint};
use crate::db;

/// The OpenAPI document, as served at `/openapi.yaml`.
pub const OPENAPI_YAML: &str = include_str!("../../../../openapi.yaml");

pub fn endpoints() -> Vec<Endpoint> {
    vec![Endpoint::get("/healthz", healthz), Endpoint::get("/readyz", readyz), Endpoint::get("/openapi.yaml", openapi)]
}

/// The process is up.
async fn healthz() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

/// The process can serve: its database answers. Says how many instances share the deployment.
async fn readyz(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    if db::ping(&state.pool).await {
        Ok(Json(json!({"status": "ready", "instances": state.deployment.instances()})))
    } else {
        Err(ApiError::unavailable("the database is unreachable"))
    }
}

async fn openapi() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/yaml")], OPENAPI_YAML)
}
