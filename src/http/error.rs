//! Errors as `application/problem+json` (RFC 9457), each with a stable `code`.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use crate::domain::{FieldError, Rejection};
use crate::market;

pub const PROBLEM_JSON: &str = "application/problem+json";

/// The stable error codes of SPEC §3, each with its status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    MalformedRequest,
    Unauthenticated,
    Forbidden,
    NotYourTurn,
    OwnListing,
    NegotiationNotAllowed,
    NotFound,
    MethodNotAllowed,
    InvalidTransition,
    BidExpired,
    FinalOffer,
    ThreadActive,
    OfferLimitReached,
    ListingUnavailable,
    IdempotencyKeyInUse,
    PayloadTooLarge,
    ValidationFailed,
    NotAConcession,
    IdempotencyKeyReused,
    RateLimited,
    Internal,
    Unavailable,
}

impl Code {
    pub const ALL: [Code; 22] = [
        Code::MalformedRequest,
        Code::Unauthenticated,
        Code::Forbidden,
        Code::NotYourTurn,
        Code::OwnListing,
        Code::NegotiationNotAllowed,
        Code::NotFound,
        Code::MethodNotAllowed,
        Code::InvalidTransition,
        Code::BidExpired,
        Code::FinalOffer,
        Code::ThreadActive,
        Code::OfferLimitReached,
        Code::ListingUnavailable,
        Code::IdempotencyKeyInUse,
        Code::PayloadTooLarge,
        Code::ValidationFailed,
        Code::NotAConcession,
        Code::IdempotencyKeyReused,
        Code::RateLimited,
        Code::Internal,
        Code::Unavailable,
    ];

    pub fn status(self) -> StatusCode {
        match self {
            Code::MalformedRequest => StatusCode::BAD_REQUEST,
            Code::Unauthenticated => StatusCode::UNAUTHORIZED,
            Code::Forbidden | Code::NotYourTurn | Code::OwnListing | Code::NegotiationNotAllowed => {
                StatusCode::FORBIDDEN
            }
            Code::NotFound => StatusCode::NOT_FOUND,
            Code::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Code::InvalidTransition
            | Code::BidExpired
            | Code::FinalOffer
            | Code::ThreadActive
            | Code::OfferLimitReached
            | Code::ListingUnavailable
            | Code::IdempotencyKeyInUse => StatusCode::CONFLICT,
            Code::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Code::ValidationFailed | Code::NotAConcession | Code::IdempotencyKeyReused => {
                StatusCode::UNPROCESSABLE_ENTITY
            }
            Code::RateLimited => StatusCode::TOO_MANY_REQUESTS,
            Code::Internal => StatusCode::INTERNAL_SERVER_ERROR,
            Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Code::MalformedRequest => "malformed_request",
            Code::Unauthenticated => "unauthenticated",
            Code::Forbidden => "forbidden",
            Code::NotYourTurn => "not_your_turn",
            Code::OwnListing => "own_listing",
            Code::NegotiationNotAllowed => "negotiation_not_allowed",
            Code::NotFound => "not_found",
            Code::MethodNotAllowed => "method_not_allowed",
            Code::InvalidTransition => "invalid_transition",
            Code::BidExpired => "bid_expired",
            Code::FinalOffer => "final_offer",
            Code::ThreadActive => "thread_active",
            Code::OfferLimitReached => "offer_limit_reached",
            Code::ListingUnavailable => "listing_unavailable",
            Code::IdempotencyKeyInUse => "idempotency_key_in_use",
            Code::PayloadTooLarge => "payload_too_large",
            Code::ValidationFailed => "validation_failed",
            Code::NotAConcession => "not_a_concession",
            Code::IdempotencyKeyReused => "idempotency_key_reused",
            Code::RateLimited => "rate_limited",
            Code::Internal => "internal",
            Code::Unavailable => "unavailable",
        }
    }

    pub fn title(self) -> &'static str {
        match self {
            Code::MalformedRequest => "The request could not be read",
            Code::Unauthenticated => "Authentication required",
            Code::Forbidden => "Not allowed",
            Code::NotYourTurn => "Not your turn",
            Code::OwnListing => "This is your own listing",
            Code::NegotiationNotAllowed => "Negotiation not allowed",
            Code::NotFound => "Not found",
            Code::MethodNotAllowed => "Method not allowed",
            Code::InvalidTransition => "Invalid transition",
            Code::BidExpired => "The bid has expired",
            Code::FinalOffer => "Final offer",
            Code::ThreadActive => "A negotiation is already active",
            Code::OfferLimitReached => "Offer limit reached",
            Code::ListingUnavailable => "Listing unavailable",
            Code::IdempotencyKeyInUse => "Idempotency key in use",
            Code::PayloadTooLarge => "Payload too large",
            Code::ValidationFailed => "Validation failed",
            Code::NotAConcession => "Not a concession",
            Code::IdempotencyKeyReused => "Idempotency key reused",
            Code::RateLimited => "Too many requests",
            Code::Internal => "Internal error",
            Code::Unavailable => "Service unavailable",
        }
    }
}

/// An error answer: a code, a human explanation, and any extension members.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub code: Code,
    pub detail: String,
    pub extensions: Map<String, Value>,
    pub retry_after: Option<u32>,
}

impl ApiError {
    pub fn new(code: Code, detail: impl Into<String>) -> ApiError {
        ApiError { code, detail: detail.into(), extensions: Map::new(), retry_after: None }
    }

    pub fn with(mut self, name: &str, value: impl Into<Value>) -> ApiError {
        self.extensions.insert(name.to_owned(), value.into());
        self
    }

    pub fn malformed(detail: impl Into<String>) -> ApiError {
        ApiError::new(Code::MalformedRequest, detail)
    }

    pub fn unauthenticated(detail: impl Into<String>) -> ApiError {
        ApiError::new(Code::Unauthenticated, detail)
    }

    pub fn not_found(what: &str) -> ApiError {
        ApiError::new(Code::NotFound, format!("no {what} with this id exists or is visible to you"))
    }

    pub fn unavailable(detail: impl Into<String>) -> ApiError {
        ApiError { retry_after: Some(1), ..ApiError::new(Code::Unavailable, detail) }
    }

    pub fn rate_limited(wait: std::time::Duration) -> ApiError {
        let seconds = wait.as_secs_f64().ceil().max(1.0) as u32;
        ApiError {
            retry_after: Some(seconds),
            ..ApiError::new(Code::RateLimited, format!("too many requests; retry in {seconds} s"))
        }
    }

    pub fn internal() -> ApiError {
        ApiError::new(Code::Internal, "something went wrong on our side; the request id identifies it in our logs")
    }

    /// A failure on one or more fields of the request.
    pub fn fields(code: Code, detail: impl Into<String>, errors: &[FieldError]) -> ApiError {
        let errors: Vec<Value> = errors.iter().map(|e| json!({"field": e.field, "message": e.message})).collect();
        ApiError::new(code, detail).with("errors", errors)
    }

    pub fn status(&self) -> StatusCode {
        self.code.status()
    }

    /// The problem document.
    pub fn body(&self) -> Vec<u8> {
        let mut problem = Map::new();
        problem.insert("type".into(), format!("urn:haggle:problem:{}", self.code.as_str()).into());
        problem.insert("title".into(), self.code.title().into());
        problem.insert("status".into(), self.status().as_u16().into());
        problem.insert("detail".into(), self.detail.clone().into());
        problem.insert("code".into(), self.code.as_str().into());
        for (name, value) in &self.extensions {
            problem.insert(name.clone(), value.clone());
        }
        serde_json::to_vec(&problem).unwrap_or_default()
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status(), [(header::CONTENT_TYPE, PROBLEM_JSON)], self.body()).into_response();
        if let Some(seconds) = self.retry_after {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        if self.code == Code::Unauthenticated {
            response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

impl From<Rejection> for ApiError {
    fn from(rejection: Rejection) -> ApiError {
        match rejection {
            Rejection::NotFound { what } => ApiError::not_found(what),
            Rejection::Forbidden { detail } => ApiError::new(Code::Forbidden, detail),
            Rejection::NotYourTurn => ApiError::new(
                Code::NotYourTurn,
                "you made the pending bid; only the other party may counter, accept or reject it",
            ),
            Rejection::OwnListing => ApiError::new(Code::OwnListing, "a seller cannot bid on or buy its own listing"),
            Rejection::NegotiationNotAllowed { detail, listing_id, ask_amount } => {
                ApiError::new(Code::NegotiationNotAllowed, detail)
                    .with("purchase_url", format!("/v1/listings/{listing_id}/purchase"))
                    .with("ask_amount", ask_amount)
            }
            Rejection::InvalidTransition { current_status, detail } => {
                ApiError::new(Code::InvalidTransition, detail).with("current_status", current_status)
            }
            Rejection::BidExpired => {
                ApiError::new(Code::BidExpired, "the bid passed its expiry time and is now EXPIRED")
                    .with("current_status", "EXPIRED")
            }
            Rejection::FinalOffer => {
                ApiError::new(Code::FinalOffer, "the pending bid is a final offer: accept it or reject it")
                    .with("current_status", "PENDING")
            }
            Rejection::ThreadActive { thread_id } => {
                let error = ApiError::new(
                    Code::ThreadActive,
                    "you already have an active negotiation on this listing; continue it instead",
                );
                match thread_id {
                    Some(id) => error.with("thread_id", id.to_string()),
                    None => error,
                }
            }
            Rejection::OfferLimitReached { limit } => ApiError::new(
                Code::OfferLimitReached,
                format!("this listing allows {limit} negotiations per buyer and you have used them all"),
            )
            .with("limit", limit),
            Rejection::ListingUnavailable { current_status } => ApiError::new(
                Code::ListingUnavailable,
                format!("the listing is {current_status} and no longer takes bids, purchases or changes"),
            )
            .with("current_status", current_status),
            Rejection::Validation(errors) => {
                ApiError::fields(Code::ValidationFailed, "some fields of the request are invalid", &errors)
            }
            Rejection::NotAConcession { min, max, detail } => {
                ApiError::new(Code::NotAConcession, detail).with("min_amount", min).with("max_amount", max)
            }
        }
    }
}

/// SQLSTATEs that mean the database is out of reach or shutting down.
fn is_unavailable(code: &str) -> bool {
    code.starts_with("08") || matches!(code, "57P01" | "57P02" | "57P03" | "53300")
}

/// SQLSTATEs of text the database cannot store (a NUL character, a bad escape): a last guard,
/// since validation refuses such input before it reaches the database.
fn is_unstorable_text(code: &str) -> bool {
    matches!(code, "22021" | "22P05")
}

/// SQLSTATEs of a concurrent transaction winning: serialization failure, deadlock, lock timeout.
fn is_conflict(code: &str) -> bool {
    matches!(code, "40001" | "40P01" | "55P03")
}

impl From<sqlx::Error> for ApiError {
    fn from(error: sqlx::Error) -> ApiError {
        match &error {
            sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::Io(_) | sqlx::Error::Tls(_) => {
                tracing::warn!(%error, "database unavailable");
                ApiError::unavailable("the database is unreachable; retry shortly")
            }
            sqlx::Error::Database(db) if db.code().is_some_and(|code| is_unavailable(&code)) => {
                tracing::warn!(%error, "database unavailable");
                ApiError::unavailable("the database is unreachable; retry shortly")
            }
            sqlx::Error::Database(db) if db.code().is_some_and(|code| is_unstorable_text(&code)) => {
                ApiError::malformed("the request contains text that cannot be stored (such as a NUL character)")
            }
            sqlx::Error::Database(db) if db.code().is_some_and(|code| is_conflict(&code)) => {
                tracing::info!(%error, "concurrent transaction won");
                ApiError::new(
                    Code::InvalidTransition,
                    "a concurrent change came first; read the current state and retry",
                )
            }
            _ => {
                tracing::error!(%error, "database error");
                ApiError::internal()
            }
        }
    }
}

impl From<market::Error> for ApiError {
    fn from(error: market::Error) -> ApiError {
        match error {
            market::Error::Rejected(rejection) => rejection.into(),
            market::Error::Database(error) => error.into(),
            market::Error::NeedsLocks => {
                tracing::error!("an unlocked move asking for locks reached the end of its request");
                ApiError::internal()
            }
        }
    }
}
