//! The JSON-RPC 2.0 binding: one `POST` a call, the method by its v1.0 name, errors in an HTTP
//! `200` with A2A's codes (a rate limit excepted, which is the transport's `429`).

use a2a::{
    A2AError, CancelTaskRequest, GetTaskRequest, JsonRpcId, JsonRpcResponse, ListTasksRequest, SendMessageRequest,
    SubscribeToTaskRequest,
};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::acting::{Agent2Agent, Caller};
use crate::error::{
    Refusal, history_length, jsonrpc_status, push_notifications_unsupported, version_refused, with_code,
};
use crate::negotiation;
use crate::sse::{self, Framing};

/// Answers one JSON-RPC request (`body`) as `caller`.
pub(crate) async fn answer(
    a2a: &Agent2Agent,
    caller: &Caller,
    base_url: &str,
    headers: &HeaderMap,
    body: &[u8],
) -> Response {
    let sent_json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split(';').next())
        .is_none_or(|essence| essence.trim().eq_ignore_ascii_case("application/json"));
    if !sent_json {
        let detail = "send the JSON-RPC request as `Content-Type: application/json`";
        return refused(
            JsonRpcId::Null,
            with_code(A2AError::content_type_not_supported(), "unsupported_media_type", detail).into(),
        );
    }
    let request: Value = match serde_json::from_slice(body) {
        Ok(request) => request,
        Err(error) => {
            return refused(JsonRpcId::Null, A2AError::parse_error(format!("the body is not JSON: {error}")).into());
        }
    };
    let id = match request.get("id") {
        Some(Value::String(id)) => JsonRpcId::String(id.clone()),
        Some(Value::Number(id)) if id.is_i64() => JsonRpcId::Number(id.as_i64().unwrap_or_default()),
        Some(Value::Null) | None => JsonRpcId::Null,
        Some(_) => return refused(JsonRpcId::Null, A2AError::invalid_request("`id` is a string or an integer").into()),
    };
    let method = match (request.get("jsonrpc"), request.get("method")) {
        (Some(Value::String(version)), Some(Value::String(method))) if version == "2.0" => method.clone(),
        _ => {
            return refused(
                id,
                A2AError::invalid_request(
                    "a JSON-RPC 2.0 request: {\"jsonrpc\": \"2.0\", \"id\", \"method\", \"params\"}",
                )
                .into(),
            );
        }
    };
    if let Some(version) = version_refused(headers) {
        return refused(id, A2AError::version_not_supported(&version).into());
    }
    let params = request.get("params").cloned().unwrap_or(Value::Object(Default::default()));
    let acting = a2a.acting(caller);
    match method.as_str() {
        "SendMessage" => match read::<SendMessageRequest>(params) {
            Ok(request) => {
                let blocking = !request.configuration.as_ref().and_then(|c| c.return_immediately).unwrap_or(false);
                done(id, negotiation::send(&acting, &request, blocking).await)
            }
            Err(refusal) => refused(id, refusal),
        },
        "SendStreamingMessage" => match read::<SendMessageRequest>(params) {
            Ok(request) => sse::send(acting, request, Framing::JsonRpc(id)).await,
            Err(refusal) => refused(id, refusal),
        },
        "GetTask" => match read::<GetTaskRequest>(params) {
            Ok(request) => match history_length(request.history_length) {
                Ok(()) => done(id, negotiation::get_task(&acting, &request.id, request.history_length).await),
                Err(refusal) => refused(id, refusal),
            },
            Err(refusal) => refused(id, refusal),
        },
        "ListTasks" => match read::<ListTasksRequest>(params) {
            Ok(request) => done(id, negotiation::list(&acting, &request).await),
            Err(refusal) => refused(id, refusal),
        },
        "CancelTask" => match read::<CancelTaskRequest>(params) {
            Ok(request) => done(id, negotiation::cancel(&acting, &request.id).await),
            Err(refusal) => refused(id, refusal),
        },
        "SubscribeToTask" => match read::<SubscribeToTaskRequest>(params) {
            Ok(request) => sse::subscribe(acting, request.id, Framing::JsonRpc(id)).await,
            Err(refusal) => refused(id, refusal),
        },
        "GetExtendedAgentCard" => done(id, negotiation::extended_card(&acting, base_url).await),
        "CreateTaskPushNotificationConfig"
        | "GetTaskPushNotificationConfig"
        | "ListTaskPushNotificationConfigs"
        | "DeleteTaskPushNotificationConfig" => refused(id, push_notifications_unsupported()),
        other => refused(id, A2AError::method_not_found(other).into()),
    }
}

fn read<T: DeserializeOwned>(params: Value) -> Result<T, Refusal> {
    serde_json::from_value(params).map_err(|error| Refusal::invalid_params(format!("invalid params: {error}")))
}

fn done<T: Serialize>(id: JsonRpcId, result: Result<T, Refusal>) -> Response {
    match result {
        Ok(result) => {
            let result = serde_json::to_value(&result).unwrap_or_default();
            (StatusCode::OK, axum::Json(JsonRpcResponse::success(id, result))).into_response()
        }
        Err(refusal) => refused(id, refusal),
    }
}

fn refused(id: JsonRpcId, refusal: Refusal) -> Response {
    let status = jsonrpc_status(&refusal);
    (status, axum::Json(JsonRpcResponse::error(id, refusal.error.to_jsonrpc_error()))).into_response()
}
