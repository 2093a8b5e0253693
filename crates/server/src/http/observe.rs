//! What the operator sees of requests: each one's id (in its answer, its problem document and
//! every log line it causes), the HTTP metrics, and `/metrics` itself.

use std::time::Instant;

use axum::body::{Body, to_bytes};
use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderName, HeaderValue, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use metrics_exporter_prometheus::PrometheusHandle;
use serde_json::{Map, Value};
use uuid::Uuid;

use super::error::{ApiError, Code, PROBLEM_JSON};
use super::extract::Operator;
use super::{AppState, Endpoint};
use crate::metrics;

pub const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// The longest request id taken from a client; a longer one is replaced.
pub const MAX_REQUEST_ID: usize = 128;

/// The request's id, among its extensions.
#[derive(Debug, Clone)]
pub struct RequestId(pub HeaderValue);

pub fn endpoints() -> Vec<Endpoint> {
    vec![Endpoint::get("/metrics", scrape)]
}

/// Whether a client's `X-Request-Id` can be kept: 1 to [`MAX_REQUEST_ID`] visible ASCII
/// characters, so that it is safe in a header, a log line and a JSON string.
fn is_sane(id: &HeaderValue) -> bool {
    let bytes = id.as_bytes();
    (1..=MAX_REQUEST_ID).contains(&bytes.len()) && bytes.iter().all(|byte| (0x21..=0x7e).contains(byte))
}

/// Gives the request its id (the client's if sane, else a new UUID) before anything logs,
/// answers with it in `X-Request-Id`, and counts the request in the HTTP metrics.
pub async fn request_ids(mut request: Request, next: Next) -> Response {
    let id =
        request.headers().get(X_REQUEST_ID).filter(|id| is_sane(id)).cloned().unwrap_or_else(|| {
            HeaderValue::from_str(&Uuid::now_v7().to_string()).expect("a UUID is a valid header value")
        });
    request.headers_mut().insert(X_REQUEST_ID, id.clone());
    request.extensions_mut().insert(RequestId(id.clone()));
    let observed = metrics::enabled().then(|| {
        let route = request.extensions().get::<MatchedPath>().map_or("unmatched", MatchedPath::as_str).to_owned();
        (Instant::now(), request.method().clone(), route)
    });
    let mut response = next.run(request).await;
    if let Some((started, method, route)) = observed {
        metrics::http_request(&route, &method, response.status(), started);
    }
    response.headers_mut().insert(X_REQUEST_ID, id);
    response
}

/// Problem documents are small; a larger body is passed on as it is.
const MAX_PROBLEM_BYTES: usize = 64 * 1024;

/// Adds the request id to every problem document answered, wherever it was made (a handler,
/// an extractor, a fallback, a time limit, a panic), as the member `request_id`.
pub async fn stamp_problems(request: Request, next: Next) -> Response {
    let id = request.extensions().get::<RequestId>().cloned();
    let response = next.run(request).await;
    let is_problem = response.headers().get(header::CONTENT_TYPE).is_some_and(|value| value == PROBLEM_JSON);
    let Some(RequestId(id)) = id.filter(|_| is_problem) else {
        return response;
    };
    let (mut parts, body) = response.into_parts();
    let Ok(bytes) = to_bytes(body, MAX_PROBLEM_BYTES).await else {
        return Response::from_parts(parts, Body::empty());
    };
    let Ok(mut problem) = serde_json::from_slice::<Map<String, Value>>(&bytes) else {
        return Response::from_parts(parts, Body::from(bytes));
    };
    problem.insert("request_id".into(), String::from_utf8_lossy(id.as_bytes()).into_owned().into());
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(serde_json::to_vec(&problem).unwrap_or_default()))
}

/// `GET /metrics` on the main port, for the operator: the Prometheus text format.
async fn scrape(_: Operator, State(state): State<AppState>) -> Result<Response, ApiError> {
    let Some(handle) = &state.metrics else {
        return Err(ApiError::new(
            Code::NotFound,
            "this server does not serve metrics here: they are off (HAGGLE_METRICS=off) or served on \
             HAGGLE_METRICS_BIND",
        ));
    };
    Ok(text(handle, &state.pool).await)
}

/// The metrics as a response.
pub async fn text(handle: &PrometheusHandle, pool: &sqlx::PgPool) -> Response {
    ([(header::CONTENT_TYPE, metrics::TEXT_FORMAT)], metrics::sample(handle, pool).await).into_response()
}

/// The router of a separate metrics address: `/metrics` alone, without authentication.
pub fn separate_router(handle: PrometheusHandle, pool: sqlx::PgPool) -> axum::Router {
    axum::Router::new().route("/metrics", axum::routing::get(separate_scrape)).with_state((handle, pool))
}

async fn separate_scrape(State((handle, pool)): State<(PrometheusHandle, sqlx::PgPool)>) -> Response {
    text(&handle, &pool).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_short_visible_ascii_ids_are_kept() {
        for id in ["abc", "0b7c2a3e-1f4d-4c1e-9f1a-2b3c4d5e6f70", "req_1.2:3/4", &"x".repeat(MAX_REQUEST_ID)] {
            assert!(is_sane(&HeaderValue::from_str(id).unwrap()), "{id}");
        }
        for id in ["", "has space", "tab\there", &"x".repeat(MAX_REQUEST_ID + 1)] {
            assert!(!is_sane(&HeaderValue::from_str(id).unwrap()), "{id:?}");
        }
        assert!(!is_sane(&HeaderValue::from_bytes(b"caf\xc3\xa9").unwrap()));
    }
}
