//! The console's session: signing in with the operator token, the cookie that carries the
//! session id, and signing out.
//!
//! The session id is 256 random bits, sent once in a `Secure; HttpOnly; SameSite=Strict` cookie
//! and stored only as its SHA-256 (`console_sessions`), so every instance behind a load
//! balancer knows it and a copy of the table signs nobody in. The operator token itself never
//! leaves the sign-in form's body.

use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use super::pages::SignIn;
use crate::db;
use crate::http::AppState;
use crate::http::error::ApiError;
use crate::http::extract::address_of;
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

/// `GET /console/sign-in`: the form.
pub async fn form(State(state): State<AppState>, headers: HeaderMap) -> Result<Response, ApiError> {
    if let Some(id) = session_id(&headers)
        && is_open(&state, id).await?
    {
        return Ok(Redirect::to(super::PATH).into_response());
    }
    Ok(SignIn::page(&state, None).into_response())
}

/// `POST /console/session`: signs in with the operator token sent as the form's `token`.
/// A wrong token is answered 401 with the form again and no cookie; it counts against the
/// address as a wrong operator token on the API does.
pub async fn sign_in(
    State(state): State<AppState>,
    extensions: axum::http::Extensions,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let refuse = |status: StatusCode, message: &str| (status, SignIn::page(&state, Some(message))).into_response();
    let Some(expected) = state.settings.admin_token.as_deref() else {
        return Ok(refuse(
            StatusCode::FORBIDDEN,
            "The console is off: this server was started without HAGGLE_ADMIN_TOKEN.",
        ));
    };
    if !same_origin(&headers) {
        return Ok(refuse(StatusCode::FORBIDDEN, "Sign in from this server's own sign-in page."));
    }
    let address = address_of(&extensions);
    if let Err(limited) = state.check_auth_allowed(address) {
        return Ok(limited.into_response());
    }
    let token = url::form_urlencoded::parse(&body).find(|(name, _)| name == "token").map(|(_, token)| token);
    let Some(token) = token.filter(|token| !token.is_empty()) else {
        return Ok(refuse(StatusCode::BAD_REQUEST, "Enter the operator token."));
    };
    if !secrets::secrets_equal(&token, expected) {
        drop(state.auth_failed(address, ApiError::unauthenticated("the operator token is not valid")));
        return Ok(refuse(StatusCode::UNAUTHORIZED, "That is not the operator token."));
    }
    let id = URL_SAFE_NO_PAD.encode(secrets::random_bytes::<32>());
    let digest = secrets::sha256(id.as_bytes());
    db::again_if_lost(|| db::console::open_session(&state.pool, &digest, LASTS)).await?;
    tracing::info!("an operator signed in to the console");
    let cookie = format!("{COOKIE}={id}; Max-Age={}; Path=/; Secure; HttpOnly; SameSite=Strict", LASTS.as_secs());
    Ok(with_cookie(Redirect::to(super::PATH).into_response(), &cookie))
}

/// `POST /console/sign-out`: ends the session, here and on every instance.
pub async fn sign_out(State(state): State<AppState>, headers: HeaderMap) -> Result<Response, ApiError> {
    if !same_origin(&headers) {
        return Ok((StatusCode::FORBIDDEN, SignIn::page(&state, Some("Sign out from the console's own pages.")))
            .into_response());
    }
    if let Some(id) = session_id(&headers) {
        let digest = secrets::sha256(id.as_bytes());
        db::again_if_lost(|| db::console::close_session(&state.pool, &digest)).await?;
    }
    let cookie = format!("{COOKIE}=; Max-Age=0; Path=/; Secure; HttpOnly; SameSite=Strict");
    Ok(with_cookie(Redirect::to(super::SIGN_IN).into_response(), &cookie))
}

fn with_cookie(mut response: Response, cookie: &str) -> Response {
    let value = HeaderValue::from_str(cookie).expect("a cookie of base64url characters is a header value");
    response.headers_mut().insert(header::SET_COOKIE, value);
    response
}
