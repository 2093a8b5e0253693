//! The REST API: one module per resource, each listing its endpoints.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{Method, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt;
use tower::ServiceBuilder;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::trace::{DefaultOnResponse, TraceLayer};
use tracing::Level;

pub mod a2a;
mod access;
pub mod address;
mod admin;
mod agents;
pub mod approvals;
pub mod approve;
pub mod bids;
mod checks;
mod compat;
pub mod console;
mod endpoint;
pub mod error;
pub mod events;
pub mod extract;
mod health;
mod in_process;
mod listings;
pub mod mcp;
pub mod observe;
mod orders;
mod params;
mod policies;
pub mod ratelimit;
mod recheck;
mod retry;
pub mod session;
mod state;
mod threads;
mod webhooks;
mod write;

pub use endpoint::Endpoint;
use error::{ApiError, Code};
pub use haggle_api::Page;
pub use params::{MAX_WAIT, invalid_param, page_size};
pub use retry::RetryReads;
pub use state::{AppState, Settings};
pub use write::{Reply, Write};

/// The services mounted beside the routes, each at a path for the methods it takes, which the
/// OpenAPI document describes too: the MCP endpoint, and the A2A card and bindings.
pub fn mounted() -> Vec<(Method, &'static str)> {
    mcp::METHODS.into_iter().map(|method| (method, mcp::PATH)).chain(a2a::mounted()).collect()
}

/// Every route the server answers, which the OpenAPI document must match.
pub fn endpoints() -> Vec<Endpoint> {
    [
        health::endpoints(),
        agents::endpoints(),
        admin::endpoints(),
        listings::endpoints(),
        bids::endpoints(),
        threads::endpoints(),
        orders::endpoints(),
        events::endpoints(),
        webhooks::endpoints(),
        policies::endpoints(),
        approvals::endpoints(),
        compat::endpoints(),
        observe::endpoints(),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// The server's router: the API, `/mcp` and the console, behind the layers every request
/// passes.
///
/// The MCP endpoint's tools call the API in process: they are given the API's own router (its
/// routes behind the same layers, which a call then passes as a request from the network
/// does), built first, so that it holds no `/mcp` of its own to call.
pub fn router(state: AppState) -> Router {
    let mut routes = Router::new();
    for endpoint in endpoints() {
        routes = routes.route(endpoint.path, endpoint.handler);
    }
    let api = layered(routes.clone(), state.clone());
    layered(approve::mount(console::mount(a2a::mount(mcp::mount(routes, &state, api.clone()), &state, api))), state)
}

/// `router` behind every layer a request passes: its id, its client's address, its log line
/// and metrics, its time and body limits, the problem documents of refusals made outside the
/// handlers, the retry of a read that lost its connection; and the fallbacks.
fn layered(router: Router<AppState>, state: AppState) -> Router {
    let settings = state.settings.clone();
    let middleware = ServiceBuilder::new()
        // First, so that every line the request logs carries its id.
        .layer(middleware::from_fn(observe::request_ids))
        // Before anything counts by the client's address.
        .layer(middleware::from_fn_with_state(Arc::new(settings.trusted_proxies.clone()), address::resolve))
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(|request: &Request| {
                    let request_id = request.headers().get("x-request-id").and_then(|v| v.to_str().ok()).unwrap_or("-");
                    tracing::info_span!("request", %request_id, method = %request.method(), path = %request.uri().path())
                })
                .on_request(())
                .on_response(DefaultOnResponse::new().level(Level::INFO)),
        )
        // Outside every layer that may answer with a problem document, so that they see them
        // all (the IAB envelope keeps the request id).
        .layer(middleware::from_fn(compat::iab_errors))
        .layer(middleware::from_fn(observe::stamp_problems))
        .layer(CatchPanicLayer::custom(|_| {
            tracing::error!("a handler panicked");
            ApiError::internal().into_response()
        }))
        .layer(middleware::map_response(problem_for_bare_errors))
        .layer(middleware::from_fn_with_state(settings.request_timeout, time_limit))
        .layer(middleware::from_fn_with_state(settings.body_limit, refuse_oversized_bodies))
        .layer(DefaultBodyLimit::max(settings.body_limit))
        .layer(tower::layer::layer_fn(RetryReads));
    router
        .fallback(|| async { ApiError::new(Code::NotFound, "no such route; see /openapi.yaml") })
        .method_not_allowed_fallback(|| async {
            ApiError::new(Code::MethodNotAllowed, "this route does not take that method; see /openapi.yaml")
        })
        .layer(middleware)
        .with_state(state)
}

/// Answers 413 at once for a declared body over the limit. The body is read and discarded
/// frame by frame first (up to a bound, holding none of it), so that a client still sending it
/// can read the answer.
async fn refuse_oversized_bodies(State(limit): State<usize>, request: Request, next: Next) -> Response {
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok());
    match declared {
        Some(length) if length > limit as u64 => {
            const DRAIN_LIMIT: u64 = 64 * 1024 * 1024;
            if length <= DRAIN_LIMIT {
                let mut body = request.into_body();
                let drain = async {
                    let mut drained = 0u64;
                    while let Some(Ok(frame)) = body.frame().await {
                        drained += frame.data_ref().map_or(0, |data| data.len() as u64);
                        if drained > DRAIN_LIMIT {
                            break;
                        }
                    }
                };
                let _ = tokio::time::timeout(Duration::from_secs(10), drain).await;
            }
            ApiError::new(
                Code::PayloadTooLarge,
                format!("the request body is larger than the {limit} bytes this server accepts"),
            )
            .into_response()
        }
        _ => next.run(request).await,
    }
}

/// Answers 503 when a request takes longer than the limit. A request that asks to wait
/// (`?wait=S`) is given that long on top; a stream's body is not timed, only its start.
async fn time_limit(State(limit): State<Duration>, request: Request, next: Next) -> Response {
    // Only reads wait; a state-changing request never gets longer than the limit. An MCP
    // request may be a tool that waits (wait_for_turn, at most MAX_WAIT) and answers only then,
    // as the 2026-07-28 protocol's stateless requests do; its REST calls keep their own limits.
    let wait = if request.uri().path() == mcp::PATH {
        MAX_WAIT
    } else if request.method() == Method::GET {
        requested_wait(request.uri().query())
    } else {
        Duration::ZERO
    };
    let limit = limit + wait;
    match tokio::time::timeout(limit, next.run(request)).await {
        Ok(response) => response,
        Err(_) => ApiError::unavailable("the request took too long; retry shortly").into_response(),
    }
}

/// The `wait` a query asks for, within its allowed maximum (the handler validates it).
fn requested_wait(query: Option<&str>) -> Duration {
    let seconds = query
        .into_iter()
        .flat_map(|query| url::form_urlencoded::parse(query.as_bytes()))
        .filter(|(name, _)| name == "wait")
        .filter_map(|(_, value)| value.parse::<f64>().ok())
        .fold(0.0f64, f64::max);
    Duration::from_secs_f64(seconds.clamp(0.0, MAX_WAIT.as_secs_f64()))
}

/// Gives error answers made outside the handlers (timeouts and the like) a problem document.
async fn problem_for_bare_errors(response: Response) -> Response {
    let status = response.status();
    if !(status.is_client_error() || status.is_server_error()) || response.headers().contains_key(header::CONTENT_TYPE)
    {
        return response;
    }
    let error = match ApiError::for_status(status, status.canonical_reason().unwrap_or("error")) {
        error if error.code == Code::Unavailable => ApiError::unavailable("the request took too long; retry shortly"),
        error => error,
    };
    error.into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_requested_wait_is_read_as_the_handlers_read_it_and_capped() {
        assert_eq!(requested_wait(None), Duration::ZERO);
        assert_eq!(requested_wait(Some("after=3&wait=2.5")), Duration::from_millis(2500));
        assert_eq!(requested_wait(Some("wait=4%35")), Duration::from_secs(45));
        assert_eq!(requested_wait(Some("wait=600")), MAX_WAIT);
        assert_eq!(requested_wait(Some("wait=-5&await=9")), Duration::ZERO);
        assert_eq!(requested_wait(Some("wait=NaN")), Duration::ZERO);
    }
}
