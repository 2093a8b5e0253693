//! The MCP server over Streamable HTTP, for the Haggle server to mount at `/mcp`.
//!
//! Each request acts as the agent whose [`Credentials`](crate::Credentials) the server's
//! authentication put into it, and its tools call the server's own REST API (at `api_url`,
//! over loopback) with that agent's key: rate limits, body limits and idempotency are the REST
//! API's own. Sessions follow the protocol version the client asks for, as the SDK serves them:
//! `initialize` and `Mcp-Session-Id` (kept in this instance's memory, 5 minutes idle) before
//! 2026-07-28, stateless requests from 2026-07-28 on.

use haggle_client::{Client, ClientError};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use crate::Haggle;

/// The service to mount at `/mcp`.
pub type McpService = StreamableHttpService<Haggle, LocalSessionManager>;

/// The service, calling the API at `api_url`, refusing bodies over `body_limit` bytes, and
/// ending its sessions and streams when `shutdown` is cancelled.
pub fn service(api_url: &str, body_limit: usize, shutdown: CancellationToken) -> Result<McpService, ClientError> {
    let client = Client::new(api_url, None)?;
    let config = StreamableHttpServerConfig::default()
        // The SDK's default admits only loopback Host headers, against DNS rebinding of a local
        // server that needs no credentials; every request here is an agent's, with its key.
        .disable_allowed_hosts()
        .with_max_request_body_bytes(body_limit)
        .with_cancellation_token(shutdown);
    Ok(StreamableHttpService::new(
        move || Ok(Haggle::per_request(client.clone())),
        LocalSessionManager::default().into(),
        config,
    ))
}
