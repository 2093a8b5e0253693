//! The REST API called in process by the protocol surfaces that act as an agent (MCP at `/mcp`,
//! A2A at `/a2a`): the API's router as the service their client calls, and what each call
//! carries of the protocol request it is made for.

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, Request};
use axum::response::Response;
use axum::routing::Router;
// The typed client's own types, which the A2A crate re-exports as well.
use haggle_mcp::http::{ApiService, BodyError, Carried};
use http_body_util::BodyExt;
use tower::ServiceBuilder;
use tower::util::BoxCloneSyncService;

use super::address::ClientAddress;

const FORWARDED_FOR: &str = "x-forwarded-for";

/// The API's router (built with every layer a request from the network passes) as the service
/// a surface's client calls.
pub fn service(api: Router) -> ApiService {
    let api = ServiceBuilder::new()
        .map_response(|response: Response| response.map(|body| body.map_err(BodyError::new).boxed_unsync()))
        .service(api);
    BoxCloneSyncService::new(api)
}

/// What a surface's API calls carry of its request: its peer and the `X-Forwarded-For` it came
/// with, from which the API's layers find the same client address again, and the address found.
pub fn carried(request: &Request) -> Carried {
    let mut carried = Carried::default();
    if let Some(peer) = request.extensions().get::<ConnectInfo<SocketAddr>>() {
        carried.extensions.insert(*peer);
    }
    if let Some(address) = request.extensions().get::<ClientAddress>() {
        carried.extensions.insert(*address);
    }
    for forwarded in request.headers().get_all(FORWARDED_FOR) {
        carried.headers.append(FORWARDED_FOR, forwarded.clone());
    }
    carried
}
