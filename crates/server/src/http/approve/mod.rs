//! `/approve`: the page where a person behind an agent answers its held moves (SPEC §10),
//! signed into with one of the agent's approver tokens.
//!
//! Signing in posts the token in a form; the answer sets a cookie holding a random session id
//! (256 bits, `Secure; HttpOnly; SameSite=Strict`), stored as its SHA-256 with the approver it
//! signs in (`approver_sessions`), so the token never leaves the form's body, as with the
//! console's session. The page is a frame whose script polls [`pages::requests`], a JSON
//! document of the agent's pending requests (each with its listing and its thread's price
//! ladder), every few seconds, so a new request appears without a reload; every such read is
//! authorised afresh, and a revoked approver's session lets nothing in from the next one.
//! Approving (with or without a budget) and denying are plain form posts, each checked for
//! the page's own `Origin`, made through the same market operations as the API's
//! `POST /v1/approvals/{id}/approve` and `/deny`, and answered with a redirect to the page.
//!
//! The page is for people, not agents: its routes are mounted beside the API and are not part
//! of `openapi.yaml`. Everything it needs is built into the binary and served under a strict
//! Content-Security-Policy (no inline script, nothing from another origin).

use std::time::Duration;

use axum::Router;
use axum::http::{HeaderMap, HeaderValue, Method, header};
use axum::middleware;
use axum::response::Response;
use axum::routing::{self, MethodRouter};

use super::AppState;
use crate::db;
use crate::db::approvals::ApproverHolder;
use crate::http::error::ApiError;
use crate::secrets;

mod assets;
mod pages;

/// Where the page lives.
pub const PATH: &str = "/approve";

/// The session cookie's name (`__Host-`: `Secure`, `Path=/`, no `Domain`, as set here only).
const COOKIE: &str = "__Host-haggle-approve";
/// How long a session lasts from sign-in.
const LASTS: Duration = Duration::from_secs(12 * 60 * 60);
/// Characters of a session id: 32 bytes in unpadded base64url.
const ID_LEN: usize = 43;

const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
     connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

fn routes() -> Vec<(Method, &'static str, MethodRouter<AppState>)> {
    vec![
        (Method::GET, PATH, routing::get(pages::page)),
        (Method::POST, "/approve/session", routing::post(pages::sign_in)),
        (Method::POST, "/approve/sign-out", routing::post(pages::sign_out)),
        (Method::GET, "/approve/requests", routing::get(pages::requests)),
        (Method::POST, "/approve/requests/{id}/approve", routing::post(pages::approve)),
        (Method::POST, "/approve/requests/{id}/deny", routing::post(pages::deny)),
        (Method::GET, "/approve/assets/{version}/{name}", routing::get(assets::serve)),
    ]
}

/// The page's routes, by method and path (none of them in the OpenAPI document).
pub fn pages() -> Vec<(Method, &'static str)> {
    routes().into_iter().map(|(method, path, _)| (method, path)).collect()
}

/// The router with the page's routes added, each answer under its security headers.
pub fn mount(router: Router<AppState>) -> Router<AppState> {
    let mut approve = Router::new();
    for (_, path, handler) in routes() {
        approve = approve.route(path, handler);
    }
    router.merge(approve.layer(middleware::map_response(secure)))
}

/// The headers every answer of the page carries, as the console's do.
async fn secure(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CONTENT_SECURITY_POLICY));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    headers.entry(header::CACHE_CONTROL).or_insert(HeaderValue::from_static("no-store"));
    response
}

/// The session id the request's cookie carries, if it has the shape of one.
fn session_id(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, id)| id.trim())
        .filter(|id| id.len() == ID_LEN && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'))
}

/// The approver the request's session signs in, read afresh: none without a session, or when
/// it has expired, was signed out, or its approver was revoked since.
async fn signed_in(state: &AppState, headers: &HeaderMap) -> Result<Option<ApproverHolder>, ApiError> {
    let Some(id) = session_id(headers) else { return Ok(None) };
    let digest = secrets::sha256(id.as_bytes());
    Ok(db::again_if_lost(|| db::approver_sessions::holder(&state.pool, &digest)).await?)
}
