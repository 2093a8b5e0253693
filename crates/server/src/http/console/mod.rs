//! `/console`: the operator's console in a browser. The market at a glance (figures and charts
//! of deals, volume and negotiations, updated live from the operator's event stream), a
//! negotiation's price ladder, orders with their timelines and the operator's decision on an
//! escalated refund, agents with their tiers and suspension, failing webhooks, and
//! the system's health from `/readyz` and `/metrics`.
//!
//! The pages are server-rendered frames whose script reads the operator API
//! (`/v1/admin/...`) with the console session's cookie ([`super::session`]), which the API's
//! `Operator` extractor accepts besides the operator token. Everything a page needs is built
//! into the binary ([`assets`]) and served from here under a strict Content-Security-Policy:
//! no script, style or connection to any other origin, and no inline script.
//!
//! The console is for people, not agents: its routes are mounted beside the API and are not
//! part of `openapi.yaml` (a test holds them under [`PATH`]).

use axum::Router;
use axum::http::{HeaderValue, Method, header};
use axum::middleware;
use axum::response::Response;
use axum::routing::{self, MethodRouter};

use super::AppState;

mod assets;
mod orders;
mod pages;
mod sign;

/// Where the console lives.
pub const PATH: &str = "/console";
/// Where a visitor without a session is sent.
pub const SIGN_IN: &str = "/console/sign-in";

const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
     connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// The console's routes: method, path and handler.
fn routes() -> Vec<(Method, &'static str, MethodRouter<AppState>)> {
    vec![
        (Method::GET, PATH, routing::get(pages::market)),
        (Method::GET, SIGN_IN, routing::get(sign::form)),
        (Method::POST, "/console/session", routing::post(sign::sign_in)),
        (Method::POST, "/console/sign-out", routing::post(sign::sign_out)),
        (Method::GET, "/console/threads/{id}", routing::get(pages::thread)),
        (Method::GET, "/console/orders", routing::get(orders::list)),
        (Method::GET, "/console/orders/{id}", routing::get(orders::order)),
        (Method::POST, "/console/threads/{id}/decide", routing::post(orders::decide)),
        (Method::GET, "/console/agents", routing::get(pages::agents)),
        (Method::GET, "/console/webhooks", routing::get(pages::webhooks)),
        (Method::GET, "/console/health", routing::get(pages::health)),
        (Method::GET, "/console/assets/{version}/{name}", routing::get(assets::serve)),
    ]
}

/// The console's pages, by method and path (none of them in the OpenAPI document).
pub fn pages() -> Vec<(Method, &'static str)> {
    routes().into_iter().map(|(method, path, _)| (method, path)).collect()
}

/// The router with the console's routes added, each answer under the console's security headers.
pub fn mount(router: Router<AppState>) -> Router<AppState> {
    let mut console = Router::new();
    for (_, path, handler) in routes() {
        console = console.route(path, handler);
    }
    router.merge(console.layer(middleware::map_response(secure)))
}

/// The headers every console answer carries. Pages and answers about a session are never kept
/// by a cache; the assets say for themselves how long they may be. The referrer goes to this
/// server only: `no-referrer` would also make browsers send `Origin: null` with the console's
/// forms, and the same-origin check needs the real one.
async fn secure(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CONTENT_SECURITY_POLICY));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    headers.entry(header::CACHE_CONTROL).or_insert(HeaderValue::from_static("no-store"));
    response
}
