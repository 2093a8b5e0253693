//! Signing in to the console with the operator token, and signing out.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use super::pages::SignIn;
use crate::db;
use crate::http::error::{ApiError, Code};
use crate::http::extract::address_of;
use crate::http::session::{COOKIE, LASTS, is_open, same_origin, session_id};
use crate::http::{AppState, Write};
use crate::secrets;

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
/// address and the token's prefix as a wrong operator token on the API does (429 beyond).
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
    let token = url::form_urlencoded::parse(&body).find(|(name, _)| name == "token").map(|(_, token)| token);
    let Some(token) = token.filter(|token| !token.is_empty()) else {
        return Ok(refuse(StatusCode::BAD_REQUEST, "Enter the operator token."));
    };
    // The token is compared first, so that no one's wrong guesses keep the operator out.
    if !secrets::secrets_equal(&token, expected) {
        let refusal = ApiError::unauthenticated("the operator token is not valid");
        let answer = state.refuse_credential(address_of(&extensions), &token, refusal);
        if answer.code == Code::RateLimited {
            return Ok(answer.into_response());
        }
        return Ok(refuse(StatusCode::UNAUTHORIZED, "That is not the operator token."));
    }
    let id = URL_SAFE_NO_PAD.encode(secrets::random_bytes::<32>());
    let digest = secrets::sha256(id.as_bytes());
    let mut command = Write::new(&state);
    db::console::open_session(command.conn().await?, &digest, LASTS).await?;
    command.done().await?;
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
        let mut command = Write::new(&state);
        db::console::close_session(command.conn().await?, &digest).await?;
        command.done().await?;
    }
    let cookie = format!("{COOKIE}=; Max-Age=0; Path=/; Secure; HttpOnly; SameSite=Strict");
    Ok(with_cookie(Redirect::to(super::SIGN_IN).into_response(), &cookie))
}

fn with_cookie(mut response: Response, cookie: &str) -> Response {
    let value = HeaderValue::from_str(cookie).expect("a cookie of base64url characters is a header value");
    response.headers_mut().insert(header::SET_COOKIE, value);
    response
}
