//! The REST API: one module per resource, each listing its endpoints.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::handler::Handler;
use axum::http::{Method, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{self, MethodRouter};
use http_body_util::BodyExt;
use metrics_exporter_prometheus::PrometheusHandle;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use tower::ServiceBuilder;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::trace::{DefaultOnResponse, TraceLayer};
use tracing::Level;
use uuid::Uuid;

use crate::deployment::Deployment;
use crate::events::Hub;
use crate::keycache::KeyCache;
use crate::market::{Market, Rules};
use crate::metrics;
use crate::webhooks::{SealingKey, WebhookSettings};

mod admin;
mod agents;
pub mod bids;
mod compat;
pub mod console;
pub mod error;
pub mod events;
pub mod extract;
mod health;
mod listings;
pub mod mcp;
pub mod observe;
mod orders;
mod policies;
pub mod ratelimit;
mod retry;
mod threads;
mod webhooks;
mod write;

use error::{ApiError, Code};
pub use haggle_api::Page;
pub use retry::RetryReads;
pub use write::{Reply, Write};

/// What every handler can reach.
#[derive(Clone)]
pub struct AppState {
    /// For reads; every write goes through [`market`](Self::market).
    pub pool: PgPool,
    /// Where writes go: the unit of work, the batcher, and whom a commit wakes.
    pub market: Market,
    pub settings: Arc<Settings>,
    pub limiter: Option<Arc<ratelimit::RateLimiter>>,
    /// Wrong credentials per client address: always on, whatever the rate limit.
    pub auth_failures: Arc<ratelimit::RateLimiter>,
    /// This instance's waiters for events.
    pub hub: Hub,
    /// Cancelled when the server shuts down: long waits and streams end early.
    pub shutdown: CancellationToken,
    /// How many instances share the limits meant for an agent.
    pub deployment: Arc<Deployment>,
    /// Seals webhook secrets.
    pub sealing_key: SealingKey,
    /// The agents behind recently used API keys.
    pub keys: Arc<KeyCache>,
    /// This instance's own API, over loopback (`http://127.0.0.1:8080`), which the MCP
    /// endpoint's tools call as their agents.
    pub loopback: String,
    /// The metrics, when `/metrics` is served on this port (behind the operator token).
    pub metrics: Option<PrometheusHandle>,
}

impl AppState {
    pub fn new(
        market: Market,
        settings: Settings,
        sealing_key: SealingKey,
        shutdown: CancellationToken,
        deployment: Arc<Deployment>,
        loopback: String,
    ) -> AppState {
        let limiter = ratelimit::RateLimiter::new(settings.rate_limit, deployment.clone()).map(Arc::new);
        let keys = Arc::new(KeyCache::new(settings.key_cache_ttl));
        let hub = Hub::with_limits(settings.max_waiters, settings.max_waiters_per_agent, deployment.clone());
        AppState {
            pool: market.pool().clone(),
            market,
            settings: Arc::new(settings),
            limiter,
            auth_failures: Arc::new(ratelimit::RateLimiter::new(1, deployment.clone()).expect("a limit above zero")),
            hub,
            shutdown,
            sealing_key,
            keys,
            deployment,
            loopback,
            metrics: None,
        }
    }

    /// Refuses with 429 (and `Retry-After`) an address that presented too many wrong
    /// credentials lately, before its next ones are even looked at.
    pub fn check_auth_allowed(&self, address: Option<std::net::IpAddr>) -> Result<(), ApiError> {
        match address.and_then(|ip| self.auth_failures.wait(ratelimit::Requester::FailedAuth(ip))) {
            Some(wait) => {
                metrics::rate_limited("failed_auth");
                Err(ApiError::rate_limited(wait))
            }
            None => Ok(()),
        }
    }

    /// Counts a wrong credential against its address; `error` is the answer to it.
    pub fn auth_failed(&self, address: Option<std::net::IpAddr>, error: ApiError) -> ApiError {
        if let Some(ip) = address {
            let _ = self.auth_failures.check(ratelimit::Requester::FailedAuth(ip));
        }
        error
    }

    /// Takes a token from the caller's bucket, or answers 429 with `Retry-After`.
    pub fn check_rate(&self, caller: ratelimit::Requester) -> Result<(), ApiError> {
        match &self.limiter {
            Some(limiter) => limiter.check(caller).map_err(|wait| {
                metrics::rate_limited(match caller {
                    ratelimit::Requester::Agent(_) => "agent",
                    ratelimit::Requester::Address(_) => "registration",
                    ratelimit::Requester::FailedAuth(_) => "failed_auth",
                });
                ApiError::rate_limited(wait)
            }),
            None => Ok(()),
        }
    }
}

/// The HTTP layer's share of the configuration.
#[derive(Clone)]
pub struct Settings {
    pub admin_token: Option<String>,
    pub open_registration: bool,
    pub rules: Rules,
    pub body_limit: usize,
    pub request_timeout: Duration,
    /// Requests a second per agent (a tenth of it per address for registration); 0 is no limit.
    pub rate_limit: u32,
    /// How often an idle event stream sends a heartbeat comment.
    pub heartbeat: Duration,
    /// How long an API key's agent is remembered (see [`crate::keycache`]); zero looks every
    /// key up.
    pub key_cache_ttl: Duration,
    /// How many statements of unlocked moves run at once, each on a connection of its own
    /// besides the pool's (see [`crate::market::batch`]).
    pub move_workers: usize,
    /// How many pending bids this instance remembers for the moves that answer them (see
    /// [`crate::market::live`]); zero reads before every move.
    pub live_cache: usize,
    /// Long polls, bid waits and event streams this instance holds at once (503 beyond).
    pub max_waiters: usize,
    /// Long polls, bid waits and event streams one agent may hold at once over the deployment
    /// (429 beyond).
    pub max_waiters_per_agent: usize,
    pub webhooks: WebhookSettings,
    /// Whom `/mcp` answers: its `Host` values and browser origins.
    pub mcp: mcp::Access,
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settings")
            .field("admin_token", &self.admin_token.as_ref().map(|_| "<redacted>"))
            .field("open_registration", &self.open_registration)
            .field("rules", &self.rules)
            .field("body_limit", &self.body_limit)
            .field("request_timeout", &self.request_timeout)
            .field("rate_limit", &self.rate_limit)
            .field("heartbeat", &self.heartbeat)
            .field("key_cache_ttl", &self.key_cache_ttl)
            .field("move_workers", &self.move_workers)
            .field("live_cache", &self.live_cache)
            .field("max_waiters", &self.max_waiters)
            .field("max_waiters_per_agent", &self.max_waiters_per_agent)
            .field("webhooks", &self.webhooks)
            .field("mcp", &self.mcp)
            .finish()
    }
}

/// One route: a method, a path template, and its handler.
pub struct Endpoint {
    pub method: Method,
    pub path: &'static str,
    handler: MethodRouter<AppState>,
}

macro_rules! endpoint_constructors {
    ($($name:ident => $method:ident),* $(,)?) => {
        impl Endpoint {
            $(
                pub fn $name<H, T>(path: &'static str, handler: H) -> Endpoint
                where
                    H: Handler<T, AppState>,
                    T: 'static,
                {
                    Endpoint { method: Method::$method, path, handler: routing::$name(handler) }
                }
            )*
        }
    };
}

endpoint_constructors!(get => GET, post => POST, put => PUT, patch => PATCH, delete => DELETE);

/// The services mounted beside the routes, each at a path for the methods it takes, which the
/// OpenAPI document describes too: the MCP endpoint.
pub fn mounted() -> Vec<(Method, &'static str)> {
    mcp::METHODS.into_iter().map(|method| (method, mcp::PATH)).collect()
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
        compat::endpoints(),
        observe::endpoints(),
    ]
    .into_iter()
    .flatten()
    .collect()
}

pub fn router(state: AppState) -> Router {
    let settings = state.settings.clone();
    let mut router = Router::new();
    for endpoint in endpoints() {
        router = router.route(endpoint.path, endpoint.handler);
    }
    let router = console::mount(mcp::mount(router, &state));
    let middleware = ServiceBuilder::new()
        // First, so that every line the request logs carries its id.
        .layer(middleware::from_fn(observe::request_ids))
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

/// The longest a request may ask to wait for a change.
pub const MAX_WAIT: Duration = Duration::from_secs(60);

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

/// The smallest, default and largest page sizes.
pub const DEFAULT_LIMIT: i64 = 50;
pub const MAX_LIMIT: i64 = 200;

/// Validates `limit` and `cursor` query parameters.
pub fn paging(limit: Option<i64>, cursor: Option<&str>) -> Result<(i64, Option<Uuid>), ApiError> {
    let mut errors = Vec::new();
    let limit = limit.unwrap_or(DEFAULT_LIMIT);
    if !(1..=MAX_LIMIT).contains(&limit) {
        errors.push(haggle_domain::FieldError::new("limit", format!("must be between 1 and {MAX_LIMIT}")));
    }
    let cursor = match cursor {
        None => None,
        Some(raw) => match Uuid::parse_str(raw) {
            Ok(id) => Some(id),
            Err(_) => {
                errors.push(haggle_domain::FieldError::new("cursor", "must be a next_cursor from a previous page"));
                None
            }
        },
    };
    if errors.is_empty() {
        Ok((limit, cursor))
    } else {
        Err(ApiError::fields(Code::ValidationFailed, "some query parameters are invalid", &errors))
    }
}

/// Parses an optional query parameter naming one of a fixed set of values.
pub fn choice<T: std::str::FromStr<Err = String>>(field: &str, raw: Option<&str>) -> Result<Option<T>, ApiError> {
    raw.map(|raw| {
        raw.parse().map_err(|message: String| {
            ApiError::fields(
                Code::ValidationFailed,
                "some query parameters are invalid",
                &[haggle_domain::FieldError::new(field, message)],
            )
        })
    })
    .transpose()
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
