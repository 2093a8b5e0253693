//! The streaming methods (`SendStreamingMessage`, `SubscribeToTask`) as Server-Sent Events: the
//! task first, then each change of it as it happens, heard from the caller's own event stream
//! (`GET /v1/events/stream`, in process: the same event hub as every SSE client, which checks
//! the caller's key again as it streams and ends when the key no longer stands), each change
//! read back through `GetTask`'s truth. A stream ends when the task is terminal, or, for a
//! sent message, when it waits for the caller (`input-required`).

use std::convert::Infallible;
use std::time::Duration;

use a2a::{
    A2AError, JsonRpcId, JsonRpcResponse, SendMessageRequest, SendMessageResponse, StreamResponse, Task,
    TaskArtifactUpdateEvent, TaskState, TaskStatusUpdateEvent,
};
use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use haggle_client::EventStream;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use crate::acting::Acting;
use crate::error::{About, Refusal, jsonrpc_status, rest_error, with_code};
use crate::negotiation::{self, Made};
use crate::task;

/// How often a quiet stream says it is alive, so that proxies and clients keep it.
const HEARTBEAT: Duration = Duration::from_secs(15);

/// How a binding frames its answers.
#[derive(Debug, Clone)]
pub(crate) enum Framing {
    JsonRpc(JsonRpcId),
    Rest,
}

impl Framing {
    fn event(&self, response: &StreamResponse) -> String {
        let result = serde_json::to_value(response).unwrap_or_default();
        let data = match self {
            Framing::JsonRpc(id) => serde_json::to_string(&JsonRpcResponse::success(id.clone(), result)),
            Framing::Rest => serde_json::to_string(&result),
        };
        format!("data: {}\n\n", data.unwrap_or_default())
    }

    fn error_event(&self, refusal: &Refusal) -> String {
        match self {
            Framing::JsonRpc(id) => {
                let error = JsonRpcResponse::error(id.clone(), refusal.error.to_jsonrpc_error());
                format!("data: {}\n\n", serde_json::to_string(&error).unwrap_or_default())
            }
            Framing::Rest => format!("event: error\ndata: {}\n\n", rest_error(refusal).1),
        }
    }

    /// The answer to a request refused before its stream began: the binding's plain error.
    pub fn refused(&self, refusal: Refusal) -> Response {
        match self {
            Framing::JsonRpc(id) => {
                let status = jsonrpc_status(&refusal);
                let body = JsonRpcResponse::error(id.clone(), refusal.error.to_jsonrpc_error());
                (status, axum::Json(body)).into_response()
            }
            Framing::Rest => {
                let (status, body) = rest_error(&refusal);
                (status, axum::Json(body)).into_response()
            }
        }
    }
}

/// `SendStreamingMessage`.
pub(crate) async fn send(acting: Acting, request: SendMessageRequest, framing: Framing) -> Response {
    // Listening first, so that nothing the move sets off is missed.
    let events = match acting.client.event_stream(None).await {
        Ok(events) => events,
        Err(error) => return framing.refused(Refusal::from_client(error, About::Other)),
    };
    match negotiation::make(&acting, &request).await {
        Err(refusal) => framing.refused(refusal),
        Ok(Made::Message(SendMessageResponse::Message(message))) => single(&framing, StreamResponse::Message(message)),
        Ok(Made::Message(SendMessageResponse::Task(task)) | Made::Task(task, _)) => {
            follow(acting, framing, task, events, Until::Interrupted)
        }
    }
}

/// `SubscribeToTask`.
pub(crate) async fn subscribe(acting: Acting, id: String, framing: Framing) -> Response {
    let events = match acting.client.event_stream(None).await {
        Ok(events) => events,
        Err(error) => return framing.refused(Refusal::from_client(error, About::Task(&id))),
    };
    let task = match negotiation::read_task(&acting, &id).await {
        Ok(task) => task,
        Err(refusal) => return framing.refused(refusal),
    };
    if task::is_terminal(&task.status.state) {
        let detail =
            format!("task {id} has ended ({}): there is nothing to follow", task::state_name(&task.status.state));
        return framing
            .refused(with_code(A2AError::unsupported_operation(detail.clone()), "task_ended", &detail).into());
    }
    follow(acting, framing, task, events, Until::Terminal)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Until {
    /// Ends when the task waits for the caller, or has ended.
    Interrupted,
    /// Ends only when the task has ended.
    Terminal,
}

impl Until {
    fn reached(self, state: &TaskState) -> bool {
        task::is_terminal(state) || (self == Until::Interrupted && *state == TaskState::InputRequired)
    }
}

fn single(framing: &Framing, response: StreamResponse) -> Response {
    stream_response(Body::from(framing.event(&response)))
}

fn stream_response(body: Body) -> Response {
    let mut response = (StatusCode::OK, body).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// The task, then its changes until `until`.
fn follow(acting: Acting, framing: Framing, first: Task, mut events: EventStream, until: Until) -> Response {
    let (sender, receiver) = mpsc::channel::<String>(16);
    tokio::spawn(async move {
        let mut last = (first.status.state.clone(), status_id(&first));
        let done = until.reached(&first.status.state);
        if sender.send(framing.event(&StreamResponse::Task(first.clone()))).await.is_err() || done {
            return;
        }
        let task_id = first.id.clone();
        let mut heartbeat = tokio::time::interval_at(tokio::time::Instant::now() + HEARTBEAT, HEARTBEAT);
        loop {
            tokio::select! {
                () = sender.closed() => return,
                _ = heartbeat.tick() => {
                    if sender.send(": keep-alive\n\n".to_owned()).await.is_err() {
                        return;
                    }
                }
                event = events.next() => {
                    // The caller's event stream ended: the server is stopping, or the key no
                    // longer stands. So does this one.
                    let Some(event) = event else { return };
                    if event.thread_id.map(|id| id.to_string()) != Some(task_id.clone()) {
                        continue;
                    }
                    let task = match negotiation::read_task(&acting, &task_id).await {
                        Ok(task) => task,
                        Err(refusal) => {
                            let _ = sender.send(framing.error_event(&refusal)).await;
                            return;
                        }
                    };
                    let now = (task.status.state.clone(), status_id(&task));
                    if now == last {
                        continue;
                    }
                    last = now;
                    for update in updates(&task) {
                        if sender.send(framing.event(&update)).await.is_err() {
                            return;
                        }
                    }
                    if until.reached(&task.status.state) {
                        return;
                    }
                }
            }
        }
    });
    let stream = ReceiverStream::new(receiver).map(Ok::<_, Infallible>);
    stream_response(Body::from_stream(stream))
}

/// The updates a changed task is told in: its artifacts (the order), then its status.
fn updates(task: &Task) -> Vec<StreamResponse> {
    let mut updates: Vec<StreamResponse> = task
        .artifacts
        .iter()
        .flatten()
        .map(|artifact| {
            StreamResponse::ArtifactUpdate(TaskArtifactUpdateEvent {
                task_id: task.id.clone(),
                context_id: task.context_id.clone(),
                artifact: artifact.clone(),
                append: Some(false),
                last_chunk: Some(true),
                metadata: None,
            })
        })
        .collect();
    updates.push(StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
        task_id: task.id.clone(),
        context_id: task.context_id.clone(),
        status: task.status.clone(),
        metadata: None,
    }));
    updates
}

fn status_id(task: &Task) -> Option<String> {
    task.status.message.as_ref().map(|message| message.message_id.clone())
}
