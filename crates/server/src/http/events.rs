//! `/v1/events`: an agent's events, read from a cursor, long-polled or streamed.
//!
//! Waiting never holds a database connection: a waiter subscribes to this instance's hub,
//! reads, and sleeps until it hears that an event for its agent was committed (from this
//! instance's announcer, or from the listener for another instance's) or its time is up.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use futures::Stream;
use haggle_api::{EventQuery, StreamQuery};
use serde::Serialize;
use sqlx::PgPool;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::error::{ApiError, Code};
use super::extract::{Params, agent_key};
use super::recheck::Recheck;
use super::{AppState, Endpoint, MAX_WAIT, invalid_param, page_size};
use crate::db;
use crate::db::agents::Caller;
use crate::events::{Crowded, Event, Subscription};
use crate::metrics;
use haggle_domain::FieldError;

pub fn endpoints() -> Vec<Endpoint> {
    vec![Endpoint::get("/v1/events", list), Endpoint::get("/v1/events/stream", stream)]
}

/// Events read per query by a stream.
const STREAM_BATCH: i64 = 100;
/// The shortest a stream with nothing to send sleeps between reads.
pub const MIN_PAUSE: Duration = Duration::from_millis(10);

/// Validates a `wait` parameter in seconds: 0 to 60, fractions allowed.
pub fn wait_param(wait: Option<f64>) -> Result<Option<Duration>, ApiError> {
    match wait {
        None => Ok(None),
        Some(seconds) if seconds.is_finite() && (0.0..=MAX_WAIT.as_secs_f64()).contains(&seconds) => {
            Ok(Some(Duration::from_secs_f64(seconds)))
        }
        Some(_) => Err(invalid_param("wait", format!("must be a number of seconds from 0 to {}", MAX_WAIT.as_secs()))),
    }
}

fn after_param(after: i64) -> Result<i64, ApiError> {
    if after < 0 {
        return Err(invalid_param("after", "must be an event id (0 or more)"));
    }
    Ok(after)
}

/// A page of events. `next_cursor` is where to resume (pass it as `after`): the last event's
/// id, or the `after` given when there was none.
#[derive(Debug, Serialize)]
struct EventPage {
    data: Vec<Event>,
    next_cursor: String,
    has_more: bool,
}

/// A page of events; with `wait`, as soon as there is one, or empty when the time is up. A
/// wait ends early, answered as the request would be now, when its key is revoked or its agent
/// suspended.
async fn list(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    Params(query): Params<EventQuery>,
) -> Result<Json<EventPage>, ApiError> {
    let after = after_param(query.after)?;
    let limit = page_size(query.limit)?;
    let wait = wait_param(query.wait)?.unwrap_or(Duration::ZERO);
    let deadline = Instant::now() + wait;
    let mut subscription = subscribe(&state, caller.id)?;
    let mut recheck = Recheck::new(&state, agent_key(caller, &headers)?);
    let _open = (!wait.is_zero()).then(metrics::Open::long_poll);
    // It reads at first, and again only when woken (a wake-up lost is made up for by the
    // catch-up's); between wake-ups it checks its key when that is due.
    let mut read = true;
    let mut events = loop {
        if read {
            subscription.mark();
            let events = db::events::for_agent(&state.pool, caller.id, after, limit + 1).await?;
            if !events.is_empty() {
                break events;
            }
        }
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            break Vec::new();
        }
        let woke = wake_or_stop(&mut subscription, remaining.min(recheck.due_in()), &state.shutdown).await;
        if !woke && state.shutdown.is_cancelled() {
            break Vec::new();
        }
        recheck.still_stands().await?;
        read = woke;
    };
    let has_more = events.len() as i64 > limit;
    events.truncate(limit as usize);
    let next_cursor = events.last().map_or(after, |event| event.id).to_string();
    Ok(Json(EventPage { data: events, next_cursor, has_more }))
}

/// Subscribes a waiter for the agent, or answers 429 when it already has as many as it may.
pub fn subscribe(state: &AppState, agent_id: Uuid) -> Result<Subscription, ApiError> {
    state.hub.subscribe(agent_id).map_err(|crowded| match crowded {
        Crowded::Agent(share) => {
            metrics::rate_limited("waiters");
            ApiError {
                detail: format!(
                    "this agent already has {share} long polls, bid waits and event streams open on this server (its \
                 share of the {} it may hold over the deployment); close one, or follow everything with one stream",
                    state.settings.max_waiters_per_agent
                ),
                ..ApiError::rate_limited(Duration::from_secs(1))
            }
        }
        Crowded::Instance => ApiError::unavailable(
            "this server holds as many long polls, bid waits and event streams as it takes; retry shortly",
        ),
    })
}

/// Waits for a wake-up, at most `timeout`. `false` when the time ran out or the server is
/// stopping.
pub async fn wake_or_stop(subscription: &mut Subscription, timeout: Duration, shutdown: &CancellationToken) -> bool {
    tokio::select! {
        woke = subscription.wait(timeout) => woke,
        _ = shutdown.cancelled() => false,
    }
}

/// Where an agent's stream starts: after `Last-Event-ID` when reconnecting, else after
/// `?after=`, else after the agent's newest event (only what happens from now on).
pub async fn stream_start(
    pool: &PgPool,
    agent_id: Uuid,
    headers: &HeaderMap,
    after: Option<i64>,
) -> Result<i64, ApiError> {
    match resume_from(headers, after)? {
        Some(after) => Ok(after),
        None => Ok(db::events::last_id(pool, agent_id).await?),
    }
}

/// Where a stream resumes, if the client says: after `Last-Event-ID` when reconnecting, else
/// after `?after=`. A reconnecting client sends the URL it first used, so `after` comes with
/// `Last-Event-ID`: it is checked, and the header wins.
pub fn resume_from(headers: &HeaderMap, after: Option<i64>) -> Result<Option<i64>, ApiError> {
    let after = after.map(after_param).transpose()?;
    if let Some(value) = headers.get("last-event-id") {
        return value
            .to_str()
            .ok()
            .and_then(|value| value.trim().parse::<i64>().ok())
            .filter(|id| *id >= 0)
            .map(Some)
            .ok_or_else(|| {
                ApiError::fields(
                    Code::MalformedRequest,
                    "the Last-Event-ID header is invalid",
                    &[FieldError::new("Last-Event-ID", "must be the id of an event this stream sent")],
                )
            });
    }
    Ok(after)
}

struct Streaming {
    pool: PgPool,
    agent_id: Uuid,
    /// The stream's API key: revoking it or suspending the agent ends the stream.
    recheck: Recheck,
    cursor: i64,
    ready: VecDeque<Event>,
    subscription: Subscription,
    shutdown: CancellationToken,
    /// Counts the stream as open until it ends.
    _open: metrics::Open,
}

impl Streaming {
    /// The next event, waiting for it if need be; `None` ends the stream (the server is
    /// stopping, or the database failed and the client should reconnect with Last-Event-ID).
    async fn next(&mut self) -> Option<Event> {
        // It reads when asked for an event it does not hold, and again only when woken (a
        // wake-up lost is made up for by the catch-up's); between wake-ups it checks its key
        // when that is due.
        let mut read = true;
        loop {
            if let Err(error) = self.recheck.still_stands().await {
                tracing::info!(code = error.code.as_str(), "an event stream's API key no longer stands; closing it");
                return None;
            }
            if let Some(event) = self.ready.pop_front() {
                self.cursor = event.id;
                return Some(event);
            }
            if read {
                self.subscription.mark();
                match db::events::for_agent(&self.pool, self.agent_id, self.cursor, STREAM_BATCH).await {
                    Ok(events) if !events.is_empty() => {
                        self.ready.extend(events);
                        continue;
                    }
                    Ok(_) => {}
                    Err(error) => {
                        tracing::warn!(%error, "an event stream could not read its events; closing it");
                        return None;
                    }
                }
            }
            tokio::select! {
                woke = self.subscription.wait(self.recheck.due_in().max(MIN_PAUSE)) => read = woke,
                _ = self.shutdown.cancelled() => return None,
            }
        }
    }
}

async fn stream(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    Params(query): Params<StreamQuery>,
) -> Result<Sse<impl Stream<Item = Result<SseEvent, Infallible>>>, ApiError> {
    // Subscribed before the start is read, so nothing committed in between is missed.
    let subscription = subscribe(&state, caller.id)?;
    let recheck = Recheck::new(&state, agent_key(caller, &headers)?);
    let cursor = stream_start(&state.pool, caller.id, &headers, query.after).await?;
    let streaming = Streaming {
        pool: state.pool.clone(),
        agent_id: caller.id,
        recheck,
        cursor,
        ready: VecDeque::new(),
        subscription,
        shutdown: state.shutdown.clone(),
        _open: metrics::Open::stream(),
    };
    let events = futures::stream::unfold(streaming, |mut streaming| async move {
        let event = streaming.next().await?;
        let sse = SseEvent::default()
            .id(event.id.to_string())
            .event(event.kind.as_str())
            .json_data(&event)
            .expect("events serialize to JSON");
        Some((Ok(sse), streaming))
    });
    Ok(Sse::new(events).keep_alive(KeepAlive::new().interval(state.settings.heartbeat).text("heartbeat")))
}
