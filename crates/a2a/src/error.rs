//! A2A's errors for the REST API's refusals: a task the caller cannot see is "task not found",
//! a request the rules refuse is "invalid params", each with the API's problem in the error's
//! `google.rpc.ErrorInfo` (its `code`, `detail` and status) and whole in a `Struct` detail.

use std::collections::HashMap;

use a2a::{A2AError, TypedDetail, error_code};
use axum::http::StatusCode;
use haggle_client::{ClientError, Problem};
use serde_json::Value;

/// A refusal, and the HTTP status it travels with when the protocol's own is not enough (a
/// rate limit is the transport's `429`, whichever binding).
#[derive(Debug)]
pub(crate) struct Refusal {
    pub error: A2AError,
    pub status: Option<StatusCode>,
}

impl From<A2AError> for Refusal {
    fn from(error: A2AError) -> Refusal {
        Refusal { error, status: None }
    }
}

/// What a refused call was about: a task (whose absence is "task not found") or anything else.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum About<'a> {
    Task(&'a str),
    Other,
}

impl Refusal {
    pub fn invalid_params(message: impl Into<String>) -> Refusal {
        A2AError::invalid_params(message).into()
    }

    pub fn task_not_found(id: &str) -> Refusal {
        A2AError::task_not_found(id).into()
    }

    /// The A2A error for the REST API's refusal of a call about `about`.
    pub fn from_client(error: ClientError, about: About<'_>) -> Refusal {
        let Some(problem) = error.problem() else {
            tracing::warn!(%error, "an A2A call got no answer from the API");
            return A2AError::internal("the marketplace did not answer; retry shortly").into();
        };
        let (code, status) = match (problem.status, about) {
            (404, About::Task(_)) => (error_code::TASK_NOT_FOUND, None),
            (429, _) => (error_code::INTERNAL_ERROR, Some(StatusCode::TOO_MANY_REQUESTS)),
            (status, _) if status >= 500 => (error_code::INTERNAL_ERROR, None),
            _ => (error_code::INVALID_PARAMS, None),
        };
        let message = match about {
            About::Task(id) if code == error_code::TASK_NOT_FOUND => format!("task not found: {id}"),
            _ => format!("{}: {}", problem.code, problem.detail),
        };
        Refusal { error: with_problem(A2AError::new(code, message), problem), status }
    }
}

/// `error`, carrying `problem`: its code, detail and status in the `ErrorInfo`'s metadata, the
/// whole document in a `google.protobuf.Struct` detail.
pub(crate) fn with_problem(error: A2AError, problem: &Problem) -> A2AError {
    let metadata = HashMap::from([
        ("code".to_owned(), problem.code.clone()),
        ("detail".to_owned(), problem.detail.clone()),
        ("http_status".to_owned(), problem.status.to_string()),
    ]);
    let reason = a2a::error_reason(error.code);
    let mut details = vec![TypedDetail::error_info(reason, a2a::PROTOCOL_DOMAIN, Some(metadata))];
    if let Ok(Value::Object(fields)) = serde_json::to_value(problem) {
        details.push(TypedDetail::from_struct(fields.into_iter().collect()));
    }
    error.with_details(details)
}

/// `error` with Haggle's own reason in its `ErrorInfo` metadata (`code`), for refusals made
/// here rather than by the REST API.
pub(crate) fn with_code(error: A2AError, code: &str, detail: &str) -> A2AError {
    let metadata = HashMap::from([("code".to_owned(), code.to_owned()), ("detail".to_owned(), detail.to_owned())]);
    let reason = a2a::error_reason(error.code);
    error.with_details(vec![TypedDetail::error_info(reason, a2a::PROTOCOL_DOMAIN, Some(metadata))])
}

/// The HTTP+JSON binding's error body (a `google.rpc.Status` in `error`) and its status.
pub(crate) fn rest_error(refusal: &Refusal) -> (StatusCode, Value) {
    let error = &refusal.error;
    // The protocol's table: a method the binding lacks is a `404`, like a task (not a server's
    // `501`), content it does not take a `415`.
    let status = refusal.status.unwrap_or(match error.code {
        error_code::TASK_NOT_FOUND | error_code::METHOD_NOT_FOUND => StatusCode::NOT_FOUND,
        error_code::INTERNAL_ERROR | error_code::INVALID_AGENT_RESPONSE => StatusCode::INTERNAL_SERVER_ERROR,
        error_code::CONTENT_TYPE_NOT_SUPPORTED => StatusCode::UNSUPPORTED_MEDIA_TYPE,
        _ => StatusCode::BAD_REQUEST,
    });
    let grpc =
        match error.code {
            error_code::TASK_NOT_FOUND | error_code::METHOD_NOT_FOUND => "NOT_FOUND",
            error_code::INVALID_PARAMS
            | error_code::INVALID_REQUEST
            | error_code::PARSE_ERROR
            | error_code::CONTENT_TYPE_NOT_SUPPORTED => "INVALID_ARGUMENT",
            error_code::INTERNAL_ERROR | error_code::INVALID_AGENT_RESPONSE => {
                if status == StatusCode::TOO_MANY_REQUESTS { "RESOURCE_EXHAUSTED" } else { "INTERNAL" }
            }
            _ => "FAILED_PRECONDITION",
        };
    // The JSON-RPC form's details are the same list, with the ErrorInfo last.
    let details = error.to_jsonrpc_error().data.unwrap_or_else(|| Value::Array(vec![]));
    let body = serde_json::json!({
        "error": {
            "code": status.as_u16(),
            "status": grpc,
            "message": error.message,
            "details": details,
        }
    });
    (status, body)
}

/// The JSON-RPC status a refusal travels with: `200`, as the binding carries its errors, but
/// for a rate limit.
pub(crate) fn jsonrpc_status(refusal: &Refusal) -> StatusCode {
    refusal.status.unwrap_or(StatusCode::OK)
}

/// Push notifications are not offered: an agent's signed webhooks (`POST /v1/webhooks`) carry
/// every event of its negotiations instead.
pub(crate) fn push_notifications_unsupported() -> Refusal {
    A2AError::new(
        error_code::PUSH_NOTIFICATION_NOT_SUPPORTED,
        "push notifications are not supported: register a signed webhook (POST /v1/webhooks) for the task's events",
    )
    .into()
}

/// A negative `historyLength` is refused (`0` asks for no history, unset for all of it).
pub(crate) fn history_length(length: Option<i32>) -> Result<(), Refusal> {
    match length {
        Some(length) if length < 0 => Err(Refusal::invalid_params("historyLength is 0 or more")),
        _ => Ok(()),
    }
}

/// The header a client names the protocol version it speaks in.
const VERSION_HEADER: &str = "a2a-version";

/// The version a request asks for, when it is not the one served (1.0); a request without
/// `A2A-Version` is served.
pub(crate) fn version_refused(headers: &axum::http::HeaderMap) -> Option<String> {
    let version = headers.get(VERSION_HEADER)?.to_str().unwrap_or("?").trim();
    match version {
        "" | "1" | "1.0" => None,
        other => Some(other.to_owned()),
    }
}
