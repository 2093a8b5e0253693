//! Extractors that turn every malformed input into a problem+json answer.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Path, Request};
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use serde::de::DeserializeOwned;
use serde_json::error::Category;
use uuid::Uuid;

use super::address::ClientAddress;
use super::error::{ApiError, Code};
use super::recheck::Credential;
use super::{AppState, session};
use crate::db;
use crate::db::agents::Caller;
use crate::secrets;
use haggle_api::query::{self, QueryError};
use haggle_domain::FieldError;

/// The longest `Idempotency-Key` accepted.
pub const MAX_IDEMPOTENCY_KEY_LEN: usize = 255;

/// A JSON request body, with a digest of the request it came in (method, path and body), which
/// idempotency uses to tell a retry from a different request under the same key.
pub struct JsonBody<T> {
    pub value: T,
    pub digest: [u8; 32],
}

/// The body of an action whose fields are all optional: empty (every field left out), or a JSON
/// object read as [`JsonBody`] reads it.
pub struct OptionalJsonBody<T> {
    pub value: T,
    pub digest: [u8; 32],
}

/// The body of an action that takes no fields: empty, or `{}`.
pub struct ActionBody {
    pub digest: [u8; 32],
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct NoFields {}

async fn read_body<S: Send + Sync>(request: Request, state: &S) -> Result<(Bytes, [u8; 32]), ApiError> {
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let bytes = Bytes::from_request(request, state).await.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(Code::PayloadTooLarge, "the request body is larger than this server accepts")
        } else {
            ApiError::malformed("the request body could not be read")
        }
    })?;
    let digest = secrets::sha256_parts(&[method.as_str().as_bytes(), path.as_bytes(), &bytes]);
    Ok((bytes, digest))
}

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        let (bytes, digest) = read_body(request, state).await?;
        match bytes.iter().find(|b| !b.is_ascii_whitespace()) {
            None => Err(ApiError::malformed("the request body is empty; send a JSON object")),
            // Serde would read a JSON array into a struct field by field; only objects are accepted.
            Some(b'{') => Ok(JsonBody { value: parse_json(&bytes)?, digest }),
            Some(_) => Err(ApiError::malformed("the request body must be a JSON object")),
        }
    }
}

impl<S: Send + Sync> FromRequest<S> for ActionBody {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        let (bytes, digest) = read_body(request, state).await?;
        // No body at all, or a JSON object: blanks alone are neither (not JSON, yet not nothing).
        match bytes.iter().find(|b| !b.is_ascii_whitespace()) {
            None if bytes.is_empty() => {}
            Some(b'{') => parse_json::<NoFields>(&bytes).map(drop)?,
            None | Some(_) => return Err(ApiError::malformed("the request body must be empty or a JSON object")),
        }
        Ok(ActionBody { digest })
    }
}

impl<S: Send + Sync, T: DeserializeOwned + Default> FromRequest<S> for OptionalJsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        let (bytes, digest) = read_body(request, state).await?;
        match bytes.iter().find(|b| !b.is_ascii_whitespace()) {
            None if bytes.is_empty() => Ok(OptionalJsonBody { value: T::default(), digest }),
            Some(b'{') => Ok(OptionalJsonBody { value: parse_json(&bytes)?, digest }),
            None | Some(_) => Err(ApiError::malformed("the request body must be empty or a JSON object")),
        }
    }
}

/// Parses JSON, naming the field at fault. Unreadable JSON, wrong types and unknown fields are
/// malformed requests (400); a missing field or a value outside a field's choices fails
/// validation (422).
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut deserializer).map_err(|error| {
        let path = error.path().to_string();
        classify(error.into_inner(), &path)
    })?;
    deserializer
        .end()
        .map_err(|error| ApiError::malformed(format!("the request body has data after its JSON value: {error}")))?;
    Ok(value)
}

fn classify(error: serde_json::Error, path: &str) -> ApiError {
    match error.classify() {
        Category::Syntax | Category::Eof | Category::Io => {
            ApiError::malformed(format!("the request body is not valid JSON: {error}"))
        }
        Category::Data => {
            let full = error.to_string();
            let message = full.split(" at line ").next().unwrap_or(&full).to_owned();
            let (code, field, message) = if let Some(name) = message.strip_prefix("missing field `") {
                let name = name.trim_end_matches('`');
                let field = if path == "." { name.to_owned() } else { format!("{path}.{name}") };
                (Code::ValidationFailed, field, "is required".to_owned())
            } else if message.starts_with("unknown variant") || message.starts_with("invalid value") {
                (Code::ValidationFailed, path.to_owned(), message)
            } else {
                (Code::MalformedRequest, path.to_owned(), message)
            };
            let detail = match code {
                Code::ValidationFailed => "some fields of the request are invalid",
                _ => "the request body does not have the expected shape",
            };
            ApiError::fields(code, detail, &[FieldError::new(field, message)])
        }
    }
}

/// A UUID path parameter.
pub struct Id(pub Uuid);

impl<S: Send + Sync> FromRequestParts<S> for Id {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let Path(raw) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(|_| ApiError::malformed("the path is missing its id"))?;
        Uuid::parse_str(&raw).map(Id).map_err(|_| {
            ApiError::fields(
                Code::MalformedRequest,
                "the id in the path is not a UUID",
                &[FieldError::new("id", "must be a UUID")],
            )
        })
    }
}

/// The two UUID path parameters of an order's payment: the order's (`id`) and the payment's
/// (`payment_id`), as in `/v1/orders/{id}/payments/{payment_id}/confirm`.
pub struct PaymentIds(pub Uuid, pub Uuid);

impl<S: Send + Sync> FromRequestParts<S> for PaymentIds {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let Path((id, part)) = Path::<(String, String)>::from_request_parts(parts, state)
            .await
            .map_err(|_| ApiError::malformed("the path is missing its ids"))?;
        let mut errors = Vec::new();
        let id = Uuid::parse_str(&id).map_err(|_| errors.push(FieldError::new("id", "must be a UUID"))).ok();
        let part =
            Uuid::parse_str(&part).map_err(|_| errors.push(FieldError::new("payment_id", "must be a UUID"))).ok();
        match (id, part) {
            (Some(id), Some(part)) => Ok(PaymentIds(id, part)),
            _ => Err(ApiError::fields(Code::MalformedRequest, "an id in the path is not a UUID", &errors)),
        }
    }
}

/// Query parameters, read with [`query::read`]: unknown parameters and unreadable values are
/// malformed requests (400); values their parameters do not take fail validation (422).
pub struct Params<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for Params<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ApiError> {
        query::read(parts.uri.query().unwrap_or_default()).map(Params).map_err(|error| match error {
            QueryError::Malformed(reason) => {
                ApiError::malformed(format!("Failed to deserialize query string: {reason}"))
            }
            QueryError::Refused(fields) => {
                ApiError::fields(Code::ValidationFailed, "some query parameters are invalid", &fields)
            }
        })
    }
}

/// The `Idempotency-Key` header, if sent.
pub struct IdempotencyKey(pub Option<String>);

impl<S: Send + Sync> FromRequestParts<S> for IdempotencyKey {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ApiError> {
        let Some(value) = parts.headers.get("idempotency-key") else {
            return Ok(IdempotencyKey(None));
        };
        let invalid = || {
            ApiError::fields(
                Code::MalformedRequest,
                "the Idempotency-Key header is invalid",
                &[FieldError::new(
                    "Idempotency-Key",
                    format!("must be 1 to {MAX_IDEMPOTENCY_KEY_LEN} printable ASCII characters"),
                )],
            )
        };
        let key = value.to_str().map_err(|_| invalid())?;
        if key.is_empty() || key.len() > MAX_IDEMPOTENCY_KEY_LEN || !key.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(invalid());
        }
        Ok(IdempotencyKey(Some(key.to_owned())))
    }
}

/// The client address a request's extensions carry: the connection's peer, or the client a
/// trusted proxy forwarded the request for ([`ClientAddress`]).
pub fn address_of(extensions: &axum::http::Extensions) -> Option<std::net::IpAddr> {
    ClientAddress::of(extensions).map(|ClientAddress(address)| address)
}

fn bearer_token(parts: &Parts) -> Option<&str> {
    bearer_token_of(&parts.headers)
}

/// The digest of the API key a request authenticated with, for a long-lived request (an event
/// stream) to check later that the key still stands.
pub fn api_key_digest(headers: &axum::http::HeaderMap) -> Option<[u8; 32]> {
    api_key_of(headers).map(|token| secrets::sha256(token.as_bytes()))
}

/// An agent's API key: `Authorization: Bearer <key>`, or `X-API-Key: <key>` as IAB-style buyer
/// agents send it.
pub fn api_key_of(headers: &axum::http::HeaderMap) -> Option<&str> {
    bearer_token_of(headers).or_else(|| {
        let key = headers.get("x-api-key")?.to_str().ok()?.trim();
        (!key.is_empty()).then_some(key)
    })
}

fn bearer_token_of(headers: &axum::http::HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim()).filter(|token| !token.is_empty())
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let caller = authenticate(state, &parts.headers, address_of(&parts.extensions)).await?;
        state.check_rate(super::ratelimit::Requester::Agent(caller.id))?;
        Ok(caller)
    }
}

/// The agent whose API key the headers carry, refusing a missing or wrong key (401), a
/// suspended agent's key (403 `agent_suspended`), and a wrong key from an address, or with a
/// prefix, that presented too many wrong ones lately (429). A valid key is let in whatever
/// others presented. It takes nothing from the agent's request rate: [`Caller`]'s extraction
/// does that for the REST routes.
pub async fn authenticate(
    state: &AppState,
    headers: &axum::http::HeaderMap,
    address: Option<std::net::IpAddr>,
) -> Result<Caller, ApiError> {
    let token = api_key_of(headers)
        .ok_or_else(|| ApiError::unauthenticated("send your API key as `Authorization: Bearer <api key>`"))?;
    let invalid = || {
        state.refuse_credential(
            address,
            token,
            ApiError::unauthenticated("the API key is not valid or has been revoked"),
        )
    };
    if token.starts_with(secrets::APPROVER_TOKEN_PREFIX) {
        return Err(ApiError::new(
            Code::Forbidden,
            "an approver token only reads and answers the agent's approval requests (/v1/approvals); \
             this route takes the agent's API key",
        ));
    }
    if !token.starts_with(secrets::API_KEY_PREFIX) || token.len() > 128 {
        return Err(invalid());
    }
    let digest = secrets::sha256(token.as_bytes());
    match state.keys.get(&digest) {
        Ok(caller) => Ok(caller),
        Err(ticket) => {
            let holder =
                db::again_if_lost(|| db::agents::key_holder(&state.pool, &digest)).await?.ok_or_else(invalid)?;
            // The key is valid (not a 401): its agent may not act. Never remembered, so that
            // reinstatement takes effect at the next request.
            if holder.suspended {
                return Err(ApiError::agent_suspended());
            }
            state.keys.store(ticket, digest, holder.caller);
            Ok(holder.caller)
        }
    }
}

/// The API key an agent's request came with, for a long-lived request to check again as it
/// waits ([`Recheck`](super::recheck::Recheck)).
pub fn agent_key(caller: Caller, headers: &axum::http::HeaderMap) -> Result<Credential, ApiError> {
    let digest = api_key_digest(headers).ok_or_else(ApiError::internal)?;
    Ok(Credential::ApiKey { agent_id: caller.id, digest })
}

/// The operator, authenticated by `HAGGLE_ADMIN_TOKEN` as `Authorization: Bearer <token>`, or
/// by the session cookie of the console (`/console`), which signed in with that token. With the
/// cookie, a request that changes something must also come from the console's own pages
/// ([`session::same_origin`]), so that another site cannot make it in the operator's
/// browser.
pub struct Operator(pub Credential);

impl FromRequestParts<AppState> for Operator {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let Some(expected) = state.settings.admin_token.as_deref() else {
            return Err(ApiError::new(
                Code::Forbidden,
                "the operator API is disabled on this server; start it with HAGGLE_ADMIN_TOKEN set",
            ));
        };
        if let Some(token) = bearer_token(parts) {
            // The token is compared first, so that no one's wrong guesses refuse the operator.
            return if secrets::secrets_equal(token, expected) {
                Ok(Operator(Credential::OperatorToken { digest: secrets::sha256(token.as_bytes()) }))
            } else if token.starts_with(secrets::API_KEY_PREFIX) {
                Err(ApiError::new(Code::Forbidden, "this route is for the operator; agent keys cannot use it"))
            } else {
                let address = address_of(&parts.extensions);
                Err(state.refuse_credential(
                    address,
                    token,
                    ApiError::unauthenticated("the operator token is not valid"),
                ))
            };
        }
        let Some(session) = session::session_id(&parts.headers) else {
            return Err(ApiError::unauthenticated("send the operator token as `Authorization: Bearer <token>`"));
        };
        if !session::is_open(state, session).await? {
            return Err(session::ended());
        }
        if !session::is_safe(&parts.method) && !session::same_origin(&parts.headers) {
            return Err(ApiError::new(
                Code::Forbidden,
                "a console session makes changes only from the console's own pages (same Origin)",
            ));
        }
        Ok(Operator(Credential::ConsoleSession { digest: secrets::sha256(session.as_bytes()) }))
    }
}
