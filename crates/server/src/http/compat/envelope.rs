//! Errors on the compatibility routes in the IAB envelope, `{"detail": {"error", "message"}}`,
//! which IAB clients read, instead of a problem document.
//!
//! Every error answer of these routes, wherever it was made (a handler, an extractor, the
//! rate limiter, the time limit, a replayed answer), is a problem document first; this layer
//! rewrites it on the way out. The IAB `error` code comes from the problem's `code`, which is
//! kept beside it with every other member of the problem (`errors`, `current_status`,
//! `min_amount`...), so nothing a Haggle client could learn is lost.

use axum::body::{Body, to_bytes};
use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use serde_json::{Map, Value, json};

use super::super::error::{Code, PROBLEM_JSON};

/// Problem documents are small; a larger body is passed on as it is.
const MAX_PROBLEM_BYTES: usize = 64 * 1024;

/// Whether `path` is one of the compatibility routes (or under their prefixes).
fn speaks_iab(path: &str) -> bool {
    path == "/proposals" || path.starts_with("/proposals/") || path == "/products" || path.starts_with("/api/v1/")
}

/// The IAB error code for a problem code, and the status IAB clients expect when it differs.
pub fn iab_code(code: Code) -> (&'static str, Option<StatusCode>) {
    match code {
        Code::MalformedRequest | Code::ValidationFailed | Code::NotAConcession => ("validation", None),
        Code::Unauthenticated => ("unauthorized", None),
        Code::Forbidden | Code::NotYourTurn | Code::OwnListing | Code::NegotiationNotAllowed | Code::AgentSuspended => {
            ("forbidden", None)
        }
        Code::NotFound | Code::MethodNotAllowed => ("not_found", None),
        Code::NotAcceptable | Code::UnsupportedMediaType => ("validation", None),
        Code::InvalidTransition | Code::BidExpired | Code::FinalOffer | Code::ApprovalExpired => {
            ("negotiation_closed", None)
        }
        Code::ThreadActive
        | Code::OfferLimitReached
        | Code::ListingUnavailable
        | Code::IdempotencyKeyInUse
        | Code::ExceedsOutstanding
        | Code::NegotiationOpen
        | Code::ExceedsRefundable
        | Code::ApprovalLimitReached
        | Code::ApproverLimitReached => ("contention", None),
        Code::IdempotencyKeyReused => ("idempotency_conflict", Some(StatusCode::CONFLICT)),
        Code::PayloadTooLarge => ("payload_too_large", None),
        Code::RateLimited => ("rate_limited", None),
        Code::Internal => ("internal", None),
        Code::Unavailable | Code::Overloaded => ("unavailable", None),
        Code::NegotiationUnavailable => ("negotiation_unavailable", None),
        Code::QuoteExpired => ("quote_expired", None),
    }
}

/// The envelope for a problem document, and its status.
fn envelope(problem: Map<String, Value>, status: StatusCode) -> (StatusCode, Value) {
    let code = problem.get("code").and_then(Value::as_str).and_then(|code| code.parse::<Code>().ok());
    let (error, remapped) = code.map_or(("error", None), iab_code);
    let mut detail = Map::new();
    detail.insert("error".into(), error.into());
    detail.insert("message".into(), problem.get("detail").cloned().unwrap_or_else(|| "".into()));
    for (name, value) in problem {
        if !matches!(name.as_str(), "type" | "title" | "status" | "detail") {
            detail.insert(name, value);
        }
    }
    (remapped.unwrap_or(status), json!({ "detail": detail }))
}

/// Rewrites the problem documents of the compatibility routes into the IAB envelope.
pub async fn iab_errors(request: Request, next: Next) -> Response {
    if !speaks_iab(request.uri().path()) {
        return next.run(request).await;
    }
    let response = next.run(request).await;
    let is_problem = response.headers().get(header::CONTENT_TYPE).is_some_and(|value| value == PROBLEM_JSON);
    if !is_problem {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let Ok(bytes) = to_bytes(body, MAX_PROBLEM_BYTES).await else {
        return Response::from_parts(parts, Body::empty());
    };
    let Ok(problem) = serde_json::from_slice::<Map<String, Value>>(&bytes) else {
        return Response::from_parts(parts, Body::from(bytes));
    };
    let (status, body) = envelope(problem, parts.status);
    parts.status = status;
    parts.headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(body.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_compatibility_routes_speak_iab() {
        for path in ["/proposals", "/proposals/x/counter", "/products", "/api/v1/quotes", "/api/v1/nothing"] {
            assert!(speaks_iab(path), "{path}");
        }
        for path in ["/v1/listings", "/proposalsx", "/products/1", "/api/v2/quotes", "/healthz"] {
            assert!(!speaks_iab(path), "{path}");
        }
    }

    #[test]
    fn every_code_has_an_iab_code() {
        for code in Code::ALL {
            let (error, status) = iab_code(code);
            assert!(!error.is_empty());
            assert!(status.is_none_or(|status| status.is_client_error()));
        }
    }

    #[test]
    fn the_envelope_keeps_what_the_problem_said() {
        let problem = json!({
            "type": "urn:haggle:problem:not_a_concession", "title": "Not a concession", "status": 422,
            "detail": "too low", "code": "not_a_concession", "min_amount": 2100, "max_amount": 2999
        });
        let (status, body) = envelope(problem.as_object().unwrap().clone(), StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(
            body,
            json!({"detail": {"error": "validation", "message": "too low", "code": "not_a_concession",
                              "min_amount": 2100, "max_amount": 2999}})
        );
        let reused = json!({"detail": "other body", "code": "idempotency_key_reused"});
        let (status, body) = envelope(reused.as_object().unwrap().clone(), StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(status, StatusCode::CONFLICT);
        assert_eq!(body["detail"]["error"], "idempotency_conflict");
    }
}
