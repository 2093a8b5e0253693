//! `/mcp`: Haggle's MCP server over Streamable HTTP (the `haggle-mcp` crate), for language-model
//! agents, behind the agent's API key.
//!
//! A request without a valid key is refused here with the API's `401` problem document. One
//! with a key goes to the MCP service with the agent's [`Credentials`], and the service's tools
//! call this instance's REST API over loopback with that key: the agent's rate limit, the body
//! limit and idempotency are the REST API's own, charged per REST call. An MCP session
//! (protocol versions before 2026-07-28) belongs to the agent that opened it: another agent's
//! key cannot use, follow or close it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::Router;
use haggle_mcp::Credentials;
use tower::ServiceBuilder;
use uuid::Uuid;

use super::AppState;
use super::error::{ApiError, Code};
use super::extract::{address_of, api_key_of, authenticate};

/// The path the service answers at (every method: POST, GET and DELETE).
pub const PATH: &str = "/mcp";
/// The methods it takes, for the OpenAPI document.
pub const METHODS: [Method; 3] = [Method::POST, Method::GET, Method::DELETE];

const SESSION_HEADER: &str = "mcp-session-id";
/// Past this many known sessions, those idle longer than the SDK keeps a session are forgotten.
const PRUNE_ABOVE: usize = 1024;
const SESSION_IDLE: Duration = Duration::from_secs(600);

/// The router with the MCP service at [`PATH`], or unchanged if the service cannot be made
/// (an unusable loopback address, which is logged).
pub fn mount(router: Router<AppState>, state: &AppState) -> Router<AppState> {
    let service = match haggle_mcp::http::service(
        &state.loopback,
        state.settings.body_limit,
        state.shutdown.child_token(),
    ) {
        Ok(service) => service,
        Err(error) => {
            tracing::error!(%error, loopback = %state.loopback, "the MCP endpoint is off: its API client cannot be made");
            return router;
        }
    };
    let gate = Gate { state: state.clone(), owners: Arc::default() };
    let service = ServiceBuilder::new().layer(middleware::from_fn_with_state(gate, admit)).service(service);
    router.nest_service(PATH, service)
}

/// What the authentication in front of the MCP service needs.
#[derive(Clone)]
struct Gate {
    state: AppState,
    /// The agent each live MCP session belongs to, and when it was last used.
    owners: Arc<Mutex<HashMap<String, (Uuid, Instant)>>>,
}

impl Gate {
    fn owners(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Uuid, Instant)>> {
        self.owners.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Lets in a request with a valid API key, as the agent it belongs to, and only into that
/// agent's own sessions.
async fn admit(State(gate): State<Gate>, mut request: Request, next: Next) -> Response {
    let address = address_of(request.extensions());
    let caller = match authenticate(&gate.state, request.headers(), address).await {
        Ok(caller) => caller,
        Err(error) => return error.into_response(),
    };
    let Some(api_key) = api_key_of(request.headers()).map(str::to_owned) else {
        return ApiError::internal().into_response();
    };
    let session = request.headers().get(SESSION_HEADER).and_then(|value| value.to_str().ok()).map(str::to_owned);
    if let Some(session) = &session {
        let mut owners = gate.owners();
        match owners.get_mut(session) {
            Some((owner, _)) if *owner != caller.id => {
                return ApiError::new(
                    Code::NotFound,
                    "no MCP session with this id is yours; start one with initialize",
                )
                .into_response();
            }
            Some((_, used)) => *used = Instant::now(),
            None => {}
        }
    }
    let closing = request.method() == Method::DELETE;
    request.extensions_mut().insert(Credentials { api_key, agent_id: caller.id });
    let response = next.run(request).await;
    match (&session, response.headers().get(SESSION_HEADER).and_then(|value| HeaderValue::to_str(value).ok())) {
        // A session the SDK just opened (an `initialize` carries no session id).
        (None, Some(opened)) => {
            let mut owners = gate.owners();
            if owners.len() > PRUNE_ABOVE {
                owners.retain(|_, (_, used)| used.elapsed() < SESSION_IDLE);
            }
            owners.insert(opened.to_owned(), (caller.id, Instant::now()));
        }
        (Some(session), _) if closing && response.status().is_success() => {
            gate.owners().remove(session);
        }
        _ => {}
    }
    response
}
