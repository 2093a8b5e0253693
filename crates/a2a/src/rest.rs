//! The HTTP+JSON binding: the v1.0 routes (`/message:send`, `/tasks/{id}:cancel`, ...) under
//! the card's URL for it, errors as a `google.rpc.Status` in `error` with the HTTP status the
//! protocol gives each.

use a2a::{A2AError, ListTasksRequest, SendMessageRequest, TaskState};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

use crate::acting::{Acting, Agent2Agent, Caller};
use crate::error::{Refusal, history_length, push_notifications_unsupported, rest_error};
use crate::negotiation;
use crate::sse::{self, Framing};

/// `POST /message:send` and `POST /message:stream`.
pub(crate) async fn message(a2a: &Agent2Agent, caller: &Caller, body: &[u8], streaming: bool) -> Response {
    let request: SendMessageRequest = match serde_json::from_slice(body) {
        Ok(request) => request,
        Err(error) => {
            return refused(Refusal::invalid_params(format!("the body is not a SendMessageRequest: {error}")));
        }
    };
    let acting = a2a.acting(caller);
    if streaming {
        return sse::send(acting, request, Framing::Rest).await;
    }
    let blocking = !request.configuration.as_ref().and_then(|c| c.return_immediately).unwrap_or(false);
    done(negotiation::send(&acting, &request, blocking).await)
}

/// What a `/tasks/{name}` segment asks for: the task, or one of its custom methods.
pub(crate) async fn task(a2a: &Agent2Agent, caller: &Caller, name: &str, post: bool, query: Option<&str>) -> Response {
    let acting: Acting = a2a.acting(caller);
    match (name.rsplit_once(':'), post) {
        (Some((id, "cancel")), true) => done(negotiation::cancel(&acting, id).await),
        (Some((id, "subscribe")), _) => sse::subscribe(acting, id.to_owned(), Framing::Rest).await,
        (None, false) => {
            let query: TaskQuery = match serde_urlencoded::from_str(query.unwrap_or("")) {
                Ok(query) => query,
                Err(error) => return refused(Refusal::invalid_params(format!("invalid query: {error}"))),
            };
            if let Err(refusal) = history_length(query.history_length) {
                return refused(refusal);
            }
            done(negotiation::get_task(&acting, name, query.history_length).await)
        }
        _ => {
            refused(A2AError::method_not_found(&format!("{} /tasks/{name}", if post { "POST" } else { "GET" })).into())
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct TaskQuery {
    history_length: Option<i32>,
}

/// `GET /tasks`, its request's fields in the query.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ListQuery {
    context_id: Option<String>,
    status: Option<String>,
    page_size: Option<i32>,
    page_token: Option<String>,
    history_length: Option<i32>,
    status_timestamp_after: Option<chrono::DateTime<chrono::Utc>>,
    include_artifacts: Option<bool>,
}

pub(crate) async fn list(a2a: &Agent2Agent, caller: &Caller, query: Option<&str>) -> Response {
    let query: ListQuery = match serde_urlencoded::from_str(query.unwrap_or("")) {
        Ok(query) => query,
        Err(error) => return refused(Refusal::invalid_params(format!("invalid query: {error}"))),
    };
    let status = match query.status.as_deref() {
        None | Some("") => None,
        Some(name) => match serde_json::from_value::<TaskState>(serde_json::Value::String(name.to_owned())) {
            Ok(state) => Some(state),
            Err(_) => return refused(Refusal::invalid_params(format!("status: no task state is called {name:?}"))),
        },
    };
    let request = ListTasksRequest {
        context_id: query.context_id,
        status,
        page_size: query.page_size,
        page_token: query.page_token,
        history_length: query.history_length,
        status_timestamp_after: query.status_timestamp_after,
        include_artifacts: query.include_artifacts,
        tenant: None,
    };
    done(negotiation::list(&a2a.acting(caller), &request).await)
}

pub(crate) async fn extended_card(a2a: &Agent2Agent, caller: &Caller, base_url: &str) -> Response {
    done(negotiation::extended_card(&a2a.acting(caller), base_url).await)
}

pub(crate) fn version_not_supported(version: &str) -> Response {
    refused(A2AError::version_not_supported(version).into())
}

pub(crate) fn push_notifications() -> Response {
    refused(push_notifications_unsupported())
}

pub(crate) fn no_such_method(method: &str, path: &str) -> Response {
    refused(A2AError::method_not_found(&format!("{method} {path}")).into())
}

fn done<T: Serialize>(result: Result<T, Refusal>) -> Response {
    match result {
        Ok(result) => (StatusCode::OK, axum::Json(result)).into_response(),
        Err(refusal) => refused(refusal),
    }
}

fn refused(refusal: Refusal) -> Response {
    let (status, body) = rest_error(&refusal);
    (status, axum::Json(body)).into_response()
}
