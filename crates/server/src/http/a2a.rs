//! The Agent2Agent (A2A v1.0) surface (the `haggle-a2a` crate): the public Agent Card at
//! [`CARD_PATH`], and behind the agent's API key the JSON-RPC binding at [`PATH`] and the
//! HTTP+JSON binding under it.
//!
//! A request without a valid key is refused here with the API's `401` problem document. One
//! with a key goes to the service as the agent's [`Caller`], and the service's calls are the
//! REST API's, in process, as MCP's are ([`super::mcp`]): the API's router, every layer
//! included, called as a service with the A2A request's client address. A stream (the
//! streaming methods' Server-Sent Events) checks its key again every `HAGGLE_STREAM_RECHECK`,
//! as the API's own streams do, and ends when the key is revoked or its agent suspended.

use std::hash::{Hash, Hasher};
use std::sync::OnceLock;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{Router, get};
use haggle_a2a::Caller;
use tower::ServiceBuilder;

use super::AppState;
use super::error::ApiError;
use super::extract::{address_of, agent_key, api_key_of, authenticate};
use super::in_process;
use super::recheck::Recheck;

pub use haggle_a2a::{CARD_PATH, PATH};

/// The routes and methods mounted, for the OpenAPI document: the card, and the service's.
pub fn mounted() -> Vec<(Method, &'static str)> {
    let service = haggle_a2a::METHODS
        .into_iter()
        .filter_map(|(method, path)| Method::from_bytes(method.as_bytes()).ok().map(|method| (method, path)));
    std::iter::once((Method::GET, CARD_PATH)).chain(service).collect()
}

/// The router with the card and the A2A service, whose calls go to `api` (the REST API's
/// router, with its layers) in process; without the service if it cannot be made (an unusable
/// loopback address, which is logged).
pub fn mount(router: Router<AppState>, state: &AppState, api: Router) -> Router<AppState> {
    let setup = haggle_a2a::Setup {
        api: in_process::service(api),
        api_url: state.loopback.clone(),
        wait: haggle_a2a::BLOCKING_WAIT,
    };
    let service = match haggle_a2a::service(setup) {
        Ok(service) => service,
        Err(error) => {
            tracing::error!(%error, loopback = %state.loopback, "the A2A endpoint is off: its API client cannot be made");
            return router;
        }
    };
    let service = ServiceBuilder::new().layer(middleware::from_fn_with_state(state.clone(), admit)).service(service);
    router.route(CARD_PATH, get(card)).nest_service(PATH, service)
}

/// When this process started serving the card: it changes only with the server's build.
static CARD_SINCE: OnceLock<String> = OnceLock::new();

/// The public Agent Card, naming the URLs the caller reached this server at, with the caching
/// headers the protocol asks for (an `ETag` of its body, `Last-Modified`, `Cache-Control`).
async fn card(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let base = haggle_a2a::base_url(&headers, &state.loopback);
    let body = serde_json::to_vec(&haggle_a2a::agent_card(&base)).unwrap_or_default();
    let mut hasher = std::hash::DefaultHasher::new();
    body.hash(&mut hasher);
    let etag = format!("\"{:016x}\"", hasher.finish());
    let since = CARD_SINCE.get_or_init(|| chrono::Utc::now().format("%a, %d %b %Y %H:%M:%S GMT").to_string());
    let mut response = ([(header::CONTENT_TYPE, "application/json")], body).into_response();
    let answer = response.headers_mut();
    answer.insert(header::CACHE_CONTROL, header::HeaderValue::from_static("public, max-age=300"));
    if let Ok(etag) = header::HeaderValue::from_str(&etag) {
        answer.insert(header::ETAG, etag);
    }
    if let Ok(since) = header::HeaderValue::from_str(since) {
        answer.insert(header::LAST_MODIFIED, since);
    }
    response
}

/// Lets in a request with a valid API key, as the agent it belongs to.
async fn admit(State(state): State<AppState>, mut request: Request, next: Next) -> Response {
    let address = address_of(request.extensions());
    let caller = match authenticate(&state, request.headers(), address).await {
        Ok(caller) => caller,
        Err(error) => return error.into_response(),
    };
    let Some(api_key) = api_key_of(request.headers()).map(str::to_owned) else {
        return ApiError::internal().into_response();
    };
    let credential = match agent_key(caller, request.headers()) {
        Ok(credential) => credential,
        Err(error) => return error.into_response(),
    };
    let carried = in_process::carried(&request);
    request.extensions_mut().insert(Caller { api_key, agent_id: caller.id, carried });
    let response = next.run(request).await;
    let streams = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.starts_with("text/event-stream"));
    if streams { Recheck::new(&state, credential).ending(response, "A2A") } else { response }
}
