//! Each of the agent's negotiations as a resource, `haggle://threads/{id}`, and notice of their
//! changes: `resources/subscribe` on the protocol versions that have it (one watcher per
//! connection), `subscriptions/listen` on 2026-07-28. Both are fed by the agent's event stream,
//! which carries only the agent's own negotiations' events.

use std::collections::HashSet;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use haggle_client::{Client, ClientError, ThreadQuery};
use haggle_domain::ThreadStatus;
use rmcp::ErrorData;
use rmcp::model::{
    ListResourceTemplatesResult, ListResourcesResult, ReadResourceResult, Resource, ResourceContents, ResourceTemplate,
};
use rmcp::service::{Peer, RoleServer};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::caller::Acting;
use crate::standing;

const PREFIX: &str = "haggle://threads/";
const JSON: &str = "application/json";
/// Threads listed per page of `resources/list`.
const PAGE: u32 = 100;
/// How long to wait before reconnecting a broken event stream.
const RECONNECT: Duration = Duration::from_secs(1);

pub(crate) fn thread_uri(id: Uuid) -> String {
    format!("{PREFIX}{id}")
}

/// The thread a URI names, if it names one.
pub(crate) fn thread_of(uri: &str) -> Option<Uuid> {
    uri.strip_prefix(PREFIX).and_then(|id| Uuid::parse_str(id).ok())
}

fn not_found(uri: &str) -> ErrorData {
    ErrorData::resource_not_found(
        format!("no resource {uri}: resources are haggle://threads/{{id}}, one for each negotiation of yours"),
        Some(json!({ "uri": uri })),
    )
}

/// The protocol's error for a failed read of the API.
fn failed(uri: &str, error: ClientError) -> ErrorData {
    match error.code() {
        Some("not_found") => not_found(uri),
        _ => ErrorData::internal_error(format!("reading {uri} failed: {error}"), None),
    }
}

/// My negotiations, newest first, a page at a time.
pub(crate) async fn list(acting: &Acting, cursor: Option<String>) -> Result<ListResourcesResult, ErrorData> {
    let cursor = match cursor {
        Some(cursor) => Some(
            Uuid::parse_str(&cursor)
                .map_err(|_| ErrorData::invalid_params("the cursor is not one this server gave", None))?,
        ),
        None => None,
    };
    let query = ThreadQuery { limit: Some(PAGE), cursor, ..ThreadQuery::default() };
    let page = acting
        .client
        .list_threads(&query)
        .await
        .map_err(|error| ErrorData::internal_error(format!("listing your negotiations failed: {error}"), None))?;
    let resources = page
        .data
        .iter()
        .map(|thread| {
            let you = standing::side(thread, acting.agent_id).map_or("party", |side| side.as_str());
            let state = match (thread.status, thread.turn) {
                (ThreadStatus::Active, Some(turn)) => {
                    format!("ACTIVE, round {}, the {}'s turn", thread.rounds, turn.as_str())
                }
                (status, _) => format!("{status} after {} rounds", thread.rounds),
            };
            Resource::new(thread_uri(thread.id), format!("thread-{}", thread.id))
                .with_title(format!("Negotiation as {you} on listing {}", thread.listing_id))
                .with_description(format!("{state}. The thread with its bids, and where you stand."))
                .with_mime_type(JSON)
        })
        .collect();
    let mut result = ListResourcesResult::with_all_items(resources);
    result.next_cursor = page.next_cursor.map(|cursor| cursor.to_string());
    Ok(result)
}

pub(crate) fn templates() -> ListResourceTemplatesResult {
    ListResourceTemplatesResult::with_all_items(vec![
        ResourceTemplate::new(format!("{PREFIX}{{thread_id}}"), "thread")
            .with_title("One of your negotiations")
            .with_description("A negotiation of yours with all its bids, and where you stand: whose turn it is, the moves allowed, the counter range.")
            .with_mime_type(JSON),
    ])
}

/// A negotiation as get_thread shows it.
pub(crate) async fn read(acting: &Acting, uri: &str) -> Result<ReadResourceResult, ErrorData> {
    let thread = thread_of(uri).ok_or_else(|| not_found(uri))?;
    let (thread, standing) = standing::read(acting, thread).await.map_err(|error| failed(uri, error))?;
    let text = serde_json::to_string_pretty(&json!({ "standing": standing, "thread": thread }))
        .map_err(|error| ErrorData::internal_error(error.to_string(), None))?;
    Ok(ReadResourceResult::new(vec![ResourceContents::text(text, uri).with_mime_type(JSON)]))
}

/// The negotiations a connection subscribed to with `resources/subscribe`, and the watcher
/// that tells it of their changes. The watcher stops when the connection's handler is dropped.
#[derive(Debug, Default)]
pub(crate) struct Subscriptions {
    threads: Arc<Mutex<HashSet<Uuid>>>,
    watching: Mutex<bool>,
    stop: CancellationToken,
}

impl Drop for Subscriptions {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl Subscriptions {
    pub async fn subscribe(&self, acting: &Acting, peer: Peer<RoleServer>, uri: &str) -> Result<(), ErrorData> {
        let thread = thread_of(uri).ok_or_else(|| not_found(uri))?;
        // Only a party may watch a negotiation (its events reach only its parties anyway).
        acting.client.get_thread(thread).await.map_err(|error| failed(uri, error))?;
        self.threads.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).insert(thread);
        let mut watching = self.watching.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if !*watching {
            *watching = true;
            let threads = self.threads.clone();
            let client = acting.client.clone();
            let stop = self.stop.clone();
            tokio::spawn(async move {
                let wanted = |thread| threads.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).contains(&thread);
                let notify = |thread| {
                    let peer = peer.clone();
                    async move {
                        let uri = thread_uri(thread);
                        peer.notify_resource_updated(rmcp::model::ResourceUpdatedNotificationParam::new(uri))
                            .await
                            .is_ok()
                    }
                };
                follow(&client, &stop, wanted, notify).await;
            });
        }
        Ok(())
    }

    pub fn unsubscribe(&self, uri: &str) -> Result<(), ErrorData> {
        let thread = thread_of(uri).ok_or_else(|| not_found(uri))?;
        self.threads.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).remove(&thread);
        Ok(())
    }
}

/// Follows the agent's events until `stop` or until `notify` says the peer is gone, calling
/// `notify` with each event's negotiation that is `wanted`. A broken stream is opened again
/// where it left off.
pub(crate) async fn follow<N, F>(client: &Client, stop: &CancellationToken, wanted: impl Fn(Uuid) -> bool, notify: N)
where
    N: Fn(Uuid) -> F,
    F: Future<Output = bool>,
{
    let mut cursor = None;
    loop {
        let opened = tokio::select! {
            opened = client.event_stream(cursor) => opened,
            () = stop.cancelled() => return,
        };
        match opened {
            Ok(mut stream) => loop {
                let event = tokio::select! {
                    event = stream.next() => event,
                    () = stop.cancelled() => return,
                };
                let Some(event) = event else {
                    cursor = stream.cursor();
                    break;
                };
                if let Some(thread) = event.thread_id.filter(|thread| wanted(*thread))
                    && !notify(thread).await
                {
                    return;
                }
            },
            Err(error) => {
                tracing::debug!(%error, "an MCP subscription could not open the agent's event stream; retrying");
                // A refused key will not become valid: stop instead of retrying for ever.
                if matches!(error.code(), Some("unauthenticated")) {
                    return;
                }
            }
        }
        tokio::select! {
            () = tokio::time::sleep(RECONNECT) => {}
            () = stop.cancelled() => return,
        }
    }
}
