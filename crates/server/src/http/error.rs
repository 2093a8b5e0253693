//! Errors as `application/problem+json` (RFC 9457), each with a stable `code`.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use crate::market;
use haggle_domain::{BidStatus, FieldError, Rejection};

pub use haggle_api::problem::{Code, PROBLEM_JSON};

/// An error answer: a code, a human explanation, and any extension members.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub code: Code,
    pub detail: String,
    pub extensions: Map<String, Value>,
    pub retry_after: Option<u32>,
    /// The request failed because a database connection was lost ([`LostConnection`]).
    pub lost_connection: bool,
}

/// Marks an answer given because a database connection was lost: a request that changed nothing
/// (a read) may be made again ([`crate::http::RetryReads`]).
#[derive(Debug, Clone, Copy)]
pub struct LostConnection;

impl ApiError {
    pub fn new(code: Code, detail: impl Into<String>) -> ApiError {
        ApiError { code, detail: detail.into(), extensions: Map::new(), retry_after: None, lost_connection: false }
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

    /// A valid key whose agent the operator suspended (not a 401: the key is right, its agent
    /// may not act).
    pub fn agent_suspended() -> ApiError {
        ApiError::new(
            Code::AgentSuspended,
            "the operator suspended this agent; its keys are refused until it is reinstated",
        )
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

    /// The problem for an error answer made without one: the code of its status, or, for a
    /// status no code has, `malformed_request` for a refusal of the request (never a server
    /// error) and `internal` otherwise.
    pub fn for_status(status: StatusCode, detail: impl Into<String>) -> ApiError {
        let unknown = if status.is_client_error() { Code::MalformedRequest } else { Code::Internal };
        let code = Code::ALL.into_iter().find(|code| code.status() == status.as_u16()).unwrap_or(unknown);
        ApiError::new(code, detail)
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
        StatusCode::from_u16(self.code.status()).expect("every code has a valid status")
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
        if self.lost_connection {
            response.extensions_mut().insert(LostConnection);
        }
        response
    }
}

impl From<Rejection> for ApiError {
    fn from(rejection: Rejection) -> ApiError {
        let error = ApiError::new(rejection.code(), rejection.detail());
        match rejection {
            Rejection::NegotiationNotAllowed { listing_id, ask_amount, .. } => {
                error.with("purchase_url", format!("/v1/listings/{listing_id}/purchase")).with("ask_amount", ask_amount)
            }
            Rejection::InvalidTransition { current_status, .. } | Rejection::ListingUnavailable { current_status } => {
                error.with("current_status", current_status)
            }
            Rejection::BidExpired => error.with("current_status", BidStatus::Expired.as_str()),
            Rejection::FinalOffer => error.with("current_status", BidStatus::Pending.as_str()),
            Rejection::ThreadActive { thread_id: Some(id) } => error.with("thread_id", id.to_string()),
            Rejection::OfferLimitReached { limit } => error.with("limit", limit),
            Rejection::NotYourTurn { turn } => error.with("turn", turn.as_str()),
            Rejection::Validation(errors) => ApiError::fields(error.code, error.detail, &errors),
            Rejection::NotAConcession { min, max, .. } => error.with("min_amount", min).with("max_amount", max),
            Rejection::ExceedsOutstanding { outstanding } => error.with("outstanding", outstanding),
            Rejection::ExceedsRefundable { refundable } => error.with("refundable", refundable),
            Rejection::NegotiationOpen { thread_id: Some(id), .. } => error.with("thread_id", id.to_string()),
            Rejection::ApprovalLimitReached { limit } | Rejection::ApproverLimitReached { limit } => {
                error.with("limit", limit)
            }
            Rejection::ApprovalExpired => error.with("current_status", "EXPIRED"),
            Rejection::NotFound { .. }
            | Rejection::Forbidden { .. }
            | Rejection::OwnListing
            | Rejection::QuoteExpired { .. }
            | Rejection::ThreadActive { thread_id: None }
            | Rejection::NegotiationOpen { thread_id: None, .. } => error,
        }
    }
}

/// What a 503 says when a change may have been made: a blind retry could make it twice.
pub const OUTCOME_UNKNOWN: &str = "the database did not confirm the change, so whether it was made is unknown; \
     retry only with the same Idempotency-Key, which answers with the outcome if it was made, or read the \
     current state first";

/// SQLSTATEs that mean the database is out of reach or shutting down.
fn is_unavailable(code: &str) -> bool {
    // 25006: a read-only server, which a primary becomes when it is demoted to a standby.
    crate::db::connection_lost(Some(code)) || matches!(code, "53300" | "25006")
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
        let answer = match &error {
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
        };
        ApiError { lost_connection: crate::db::lost(&error), ..answer }
    }
}

impl From<market::Error> for ApiError {
    fn from(error: market::Error) -> ApiError {
        match error {
            market::Error::Rejected(rejection) => rejection.into(),
            market::Error::Database(error) => error.into(),
            market::Error::OutcomeUnknown(error) => {
                tracing::warn!(%error, "the database did not confirm a commit");
                ApiError::unavailable(OUTCOME_UNKNOWN)
            }
            market::Error::NeedsLocks => {
                tracing::error!("an unlocked move asking for locks reached the end of its request");
                ApiError::internal()
            }
        }
    }
}
