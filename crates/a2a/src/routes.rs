//! The service's routes, relative to where it is mounted ([`crate::PATH`]): the JSON-RPC
//! endpoint at its root, the HTTP+JSON binding under `/rest`.

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Extension, OriginalUri, Path, State};
use axum::http::{HeaderMap, Method};
use axum::response::Response;
use axum::routing::{get, post};

use crate::acting::{Agent2Agent, Caller};
use crate::error::version_refused;
use crate::{jsonrpc, rest};

pub(crate) fn router(a2a: Agent2Agent) -> Router {
    Router::new()
        .route("/", post(json_rpc))
        .route("/rest/message:send", post(send))
        .route("/rest/message:stream", post(stream))
        .route("/rest/tasks", get(list))
        .route("/rest/tasks/{name}", get(read_task).post(task_method))
        .route("/rest/extendedAgentCard", get(extended_card))
        .fallback(no_such_method)
        .with_state(a2a)
}

/// The URL the caller reached this server at: `Host` (and `X-Forwarded-Proto`, behind a
/// proxy), or `fallback` without one.
pub fn base_url(headers: &HeaderMap, fallback: &str) -> String {
    let host = headers.get(axum::http::header::HOST).and_then(|host| host.to_str().ok());
    let scheme = headers.get("x-forwarded-proto").and_then(|proto| proto.to_str().ok()).unwrap_or("http");
    match host {
        Some(host) if !host.is_empty() && (scheme == "http" || scheme == "https") => format!("{scheme}://{host}"),
        _ => fallback.trim_end_matches('/').to_owned(),
    }
}

async fn json_rpc(
    State(a2a): State<Agent2Agent>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let base = base_url(&headers, "");
    jsonrpc::answer(&a2a, &caller, &base, &headers, &body).await
}

async fn send(
    State(a2a): State<Agent2Agent>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    match version_refused(&headers) {
        Some(version) => rest::version_not_supported(&version),
        None => rest::message(&a2a, &caller, &body, false).await,
    }
}

async fn stream(
    State(a2a): State<Agent2Agent>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    match version_refused(&headers) {
        Some(version) => rest::version_not_supported(&version),
        None => rest::message(&a2a, &caller, &body, true).await,
    }
}

async fn list(State(a2a): State<Agent2Agent>, Extension(caller): Extension<Caller>, uri: OriginalUri) -> Response {
    rest::list(&a2a, &caller, uri.query()).await
}

async fn read_task(
    State(a2a): State<Agent2Agent>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
    uri: OriginalUri,
) -> Response {
    rest::task(&a2a, &caller, &name, false, uri.query()).await
}

async fn task_method(
    State(a2a): State<Agent2Agent>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> Response {
    rest::task(&a2a, &caller, &name, true, None).await
}

async fn extended_card(
    State(a2a): State<Agent2Agent>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
) -> Response {
    rest::extended_card(&a2a, &caller, &base_url(&headers, "")).await
}

/// Push notifications' routes (`/tasks/{id}/pushNotificationConfigs...`) are refused as
/// unsupported, any other as a method this binding does not have.
async fn no_such_method(method: Method, uri: OriginalUri) -> Response {
    if uri.path().contains("/pushNotificationConfigs") {
        return rest::push_notifications();
    }
    rest::no_such_method(method.as_str(), uri.path())
}
