//! The MCP server over Streamable HTTP, for the Haggle server to mount at `/mcp`.
//!
//! Each request acts as the agent whose [`Credentials`](crate::Credentials) the server's
//! authentication put into it, and its tools call the server's own REST API with that agent's
//! key, in process: the server hands over its router (`api`, every layer included), each call
//! is a request to it as a service, with no socket and no HTTP on the wire, and carries what
//! the credentials carry of the MCP request (its client's address). Rate limits, body limits,
//! idempotency, answers and errors are the REST API's own. Sessions follow the protocol version the client asks for, as the SDK serves them:
//! `initialize` and `Mcp-Session-Id` (kept in this instance's memory, 5 minutes idle, each
//! bound to its agent: [`Sessions`]) before 2026-07-28, stateless requests from 2026-07-28 on.

use std::sync::Arc;

use haggle_client::{Client, ClientError};
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use crate::Haggle;
pub use crate::sessions::{MAX_SESSIONS, MAX_SESSIONS_PER_AGENT, Sessions};
pub use haggle_client::{ApiBody, ApiService, BodyError, Carried};

/// The service to mount at `/mcp`.
pub type McpService = StreamableHttpService<Haggle, Sessions>;

/// How the service is set up.
#[derive(Clone)]
pub struct Setup {
    /// The API the tools call: the server's router, in process.
    pub api: ApiService,
    /// The API's URL, as its requests say (their `Host`) and its errors name it.
    pub api_url: String,
    /// Bodies over this many bytes are refused.
    pub body_limit: usize,
    /// The `Host` values answered (`name` or `name:port`); empty answers any.
    pub allowed_hosts: Vec<String>,
    /// The browser origins answered (`scheme://host:port`); a request without `Origin` is
    /// answered whatever this holds, one with an `Origin` only if it is here.
    pub allowed_origins: Vec<String>,
    /// Ends the sessions and streams when cancelled.
    pub shutdown: CancellationToken,
}

/// The service, and the sessions it keeps (for the server to check whose each one is).
pub fn service(setup: Setup) -> Result<(McpService, Arc<Sessions>), ClientError> {
    let client = Client::in_process(&setup.api_url, setup.api)?;
    let config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(setup.allowed_hosts)
        // Validated even when the list is empty: then no browser origin is answered at all.
        .with_allowed_origins(setup.allowed_origins)
        .enforce_origin_validation()
        .with_max_request_body_bytes(setup.body_limit)
        // A stateless (2026-07-28) tool call that emits nothing before its result is answered
        // as one JSON document rather than a one-message event stream: less to write and to
        // read. A call that notifies first is still a stream, so nothing is lost.
        .with_json_response(true)
        .with_cancellation_token(setup.shutdown);
    let sessions = Arc::new(Sessions::default());
    let service = StreamableHttpService::new(move || Ok(Haggle::per_request(client.clone())), sessions.clone(), config);
    Ok((service, sessions))
}
