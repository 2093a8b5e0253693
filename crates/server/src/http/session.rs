//! The console's session: the cookie that carries the session id, whether it is open, and the
//! same-origin rule a session's changes are held to (the `Operator` extractor applies them to
//! the operator API; signing in and out is the console's, `console/sign.rs`). It sits below both
//! the console and the API's extractors, which use it alike.
//!
//! The session id is 256 random bits, sent once in a `Secure; HttpOnly; SameSite=Strict` cookie
//! and stored only as its SHA-256 (`console_sessions`), so every instance behind a load
//! balancer knows it and a copy of the table signs nobody in. The operator token itself never
//! leaves the sign-in form's body.

use std::time::Duration;

use axum::http::{HeaderMap, Method, header};

use crate::db;
use crate::http::AppState;
use crate::http::error::ApiError;
use crate::secrets;

/// The cookie's name. The `__Host-` prefix makes browsers keep it only as set here: `Secure`,
/// `Path=/` and no `Domain`, so no other host can plant or read it.
pub const COOKIE: &str = "__Host-haggle-console";
/// How long a session lasts from sign-in.
pub const LASTS: Duration = Duration::from_secs(12 * 60 * 60);
/// Characters of a session id: 32 bytes in unpadded base64url.
const ID_LEN: usize = 43;

/// The session id the request's cookie carries, if it has the shape of one.
pub fn session_id(headers: &HeaderMap) -> Option<&str> {
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

/// Whether the request carries the id of a session that is open.
pub async fn is_open(state: &AppState, id: &str) -> Result<bool, ApiError> {
    let digest = secrets::sha256(id.as_bytes());
    Ok(db::again_if_lost(|| db::console::session_is_open(&state.pool, &digest)).await?)
}

/// The answer to a request whose session has ended (signed out, or expired).
pub fn ended() -> ApiError {
    ApiError::unauthenticated("the console session has ended; sign in again at /console")
}

/// Whether the request comes from a page of this server: its `Origin` names the host it was
/// sent to (browsers send `Origin` with every POST, PATCH and DELETE, and a page of another
/// site cannot forge it), or, without an `Origin`, the browser says the request is
/// same-origin. A console session's cookie makes a change only with this, against cross-site
/// request forgery; `SameSite=Strict` is the first line, this the second.
pub fn same_origin(headers: &HeaderMap) -> bool {
    let host = headers.get(header::HOST).and_then(|value| value.to_str().ok());
    match headers.get(header::ORIGIN).map(|value| value.to_str()) {
        Some(Ok(origin)) => {
            let authority = origin.strip_prefix("https://").or_else(|| origin.strip_prefix("http://"));
            matches!((authority, host), (Some(authority), Some(host)) if authority.eq_ignore_ascii_case(host))
        }
        Some(Err(_)) => false,
        None => headers.get("sec-fetch-site").is_some_and(|site| site == "same-origin"),
    }
}

/// Whether a method only reads.
pub fn is_safe(method: &Method) -> bool {
    [Method::GET, Method::HEAD, Method::OPTIONS].contains(method)
}
