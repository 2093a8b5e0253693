//! `/mcp`: Haggle's MCP server over Streamable HTTP (the `haggle-mcp` crate), for language-model
//! agents, behind the agent's API key.
//!
//! A request without a valid key is refused here with the API's `401` problem document. One
//! with a key goes to the MCP service with the agent's [`Credentials`], and the service's tools
//! call this instance's REST API with that key, in process: each call is a request handed to
//! the API's router (built by [`super::router`] with every layer a request from the network
//! passes) as a service, with no socket and no second HTTP parse, carrying the MCP request's
//! client address (its `ConnectInfo` and `X-Forwarded-For`). The agent's rate limit, the body
//! limit and idempotency are the REST API's own, charged per REST call, and the per-address
//! limits and logs count the call as the MCP client's. An MCP session
//! (protocol versions before 2026-07-28) belongs to the agent that opened it for its whole
//! life: a session id that is not one of the caller's open sessions is answered `404`, whoever
//! sends it (see [`haggle_mcp::http::Sessions`]).
//!
//! The service refuses a `Host` this instance does not serve and a browser `Origin` not
//! allowed ([`Access`]); its refusals of malformed requests are answered as problem documents
//! here, each with its status's code, as the rest of the API answers.

use std::sync::Arc;

use axum::body::to_bytes;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::Router;
use haggle_mcp::Credentials;
use haggle_mcp::http::{Sessions, Setup};
use tower::ServiceBuilder;

use super::AppState;
pub use super::access::Access;
use super::error::{ApiError, Code};
use super::extract::{address_of, agent_key, api_key_of, authenticate};
use super::in_process;
use super::recheck::Recheck;

/// The path the service answers at (every method: POST, GET and DELETE).
pub const PATH: &str = "/mcp";
/// The methods it takes, for the OpenAPI document.
pub const METHODS: [Method; 3] = [Method::POST, Method::GET, Method::DELETE];

const SESSION_HEADER: &str = "mcp-session-id";

/// The most of the SDK's own refusal read, to say why in the problem document.
const MAX_REFUSAL_BYTES: usize = 1024;

/// The router with the MCP service at [`PATH`], whose tools call `api` (the REST API's router,
/// with its layers) in process, or unchanged if the service cannot be made (an unusable
/// loopback address, which is logged).
pub fn mount(router: Router<AppState>, state: &AppState, api: Router) -> Router<AppState> {
    let access = &state.settings.mcp;
    let setup = Setup {
        api: in_process::service(api),
        api_url: state.loopback.clone(),
        body_limit: state.settings.body_limit,
        allowed_hosts: access.served_hosts(&state.loopback),
        allowed_origins: access.origins.clone(),
        shutdown: state.shutdown.child_token(),
    };
    let (service, sessions) = match haggle_mcp::http::service(setup) {
        Ok(made) => made,
        Err(error) => {
            tracing::error!(%error, loopback = %state.loopback, "the MCP endpoint is off: its API client cannot be made");
            return router;
        }
    };
    let gate = Gate { state: state.clone(), sessions };
    let service = ServiceBuilder::new().layer(middleware::from_fn_with_state(gate, admit)).service(service);
    router.nest_service(PATH, service)
}

/// What the authentication in front of the MCP service needs.
#[derive(Clone)]
struct Gate {
    state: AppState,
    /// The service's sessions, each with the agent it belongs to.
    sessions: Arc<Sessions>,
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
    if let Some(session) = request.headers().get(SESSION_HEADER) {
        // Unknown, ended, another agent's or not yet initialized: all the same to the caller.
        let owner = session.to_str().ok().and_then(|session| gate.sessions.owner(session));
        if owner != Some(caller.id) {
            return ApiError::new(
                Code::NotFound,
                "no open MCP session with this id is yours (it ended, or another agent opened it); start one \
                 with initialize",
            )
            .into_response();
        }
    }
    let method = request.method().clone();
    let sent_json = is_json(request.headers());
    // A stream is open for as long as its client keeps it: it checks its key again as the
    // API's streams do, and ends when the key is revoked or its agent suspended.
    let recheck = match method {
        Method::GET => match agent_key(caller, request.headers()) {
            Ok(credential) => Some(Recheck::new(&gate.state, credential)),
            Err(error) => return error.into_response(),
        },
        _ => None,
    };
    let carried = in_process::carried(&request);
    request.extensions_mut().insert(Credentials { api_key, agent_id: caller.id, carried });
    let response = answer(next.run(request).await, &method, sent_json).await;
    match recheck {
        Some(recheck) if response.status() == StatusCode::OK => recheck.ending(response, "MCP"),
        _ => response,
    }
}

/// Whether a message declares itself JSON.
fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split(';').next())
        .is_some_and(|essence| essence.trim().eq_ignore_ascii_case("application/json"))
}

/// The service's answer as the API answers: a closed session is `204 No Content`, as clients
/// expect of a `DELETE`; a refusal in words of the SDK's own (not a JSON-RPC error, which the
/// protocol's clients read) is a problem document with its status's code.
async fn answer(response: Response, method: &Method, sent_json: bool) -> Response {
    let status = response.status();
    if method == Method::DELETE && status == StatusCode::ACCEPTED {
        return StatusCode::NO_CONTENT.into_response();
    }
    if !(status.is_client_error() || status.is_server_error()) || is_json(response.headers()) {
        return response;
    }
    let (parts, body) = response.into_parts();
    if status.is_server_error() {
        // The SDK logged what failed; its words are not for the caller.
        return ApiError::internal().into_response();
    }
    let said = to_bytes(body, MAX_REFUSAL_BYTES).await.unwrap_or_default();
    let said = String::from_utf8_lossy(&said).trim().to_owned();
    let error = match status {
        // The SDK calls a body it cannot read as one message "unsupported"; a JSON body that is
        // not one JSON-RPC message of the protocol (not JSON, empty, a batch) is malformed.
        StatusCode::UNSUPPORTED_MEDIA_TYPE if sent_json => ApiError::malformed(
            "the body is not one JSON-RPC message of the Model Context Protocol (batches are not taken)",
        ),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => {
            ApiError::new(Code::UnsupportedMediaType, "send the message as `Content-Type: application/json`")
        }
        _ => {
            let detail = if said.is_empty() { status.canonical_reason().unwrap_or("refused").to_owned() } else { said };
            ApiError::for_status(status, detail)
        }
    };
    let mut answer = error.into_response();
    if let Some(allow) = parts.headers.get(header::ALLOW) {
        answer.headers_mut().insert(header::ALLOW, allow.clone());
    }
    answer
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hosts_served_are_the_loopback_names_the_bound_address_and_those_configured() {
        let access = Access { hosts: vec!["mcp.example.com".into(), " ".into()], origins: vec![] };
        assert_eq!(
            access.served_hosts("http://10.0.0.7:8080"),
            ["localhost", "127.0.0.1", "[::1]", "10.0.0.7", "mcp.example.com"]
        );
        let any = Access { hosts: vec!["*".into()], origins: vec![] };
        assert!(any.served_hosts("http://127.0.0.1:8080").is_empty());
    }
}
