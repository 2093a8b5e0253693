//! `/v1/admin`: the operator's routes. Every one takes the operator's credential ([`Operator`]);
//! an agent's API key is refused with 403, a missing or wrong token with 401.

use std::collections::VecDeque;
use std::convert::Infallible;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{FromRequest, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use chrono::Utc;
use futures::Stream;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::error::{ApiError, Code};
use super::extract::{Id, IdempotencyKey, JsonBody, Operator, Params, parse_json};
use super::recheck::Recheck;
use super::{AppState, Endpoint, Page, Reply, Write, invalid_param, page_size};
use crate::db;
use crate::db::admin::{AgentFilter, MarketPosition, OrderFilter, ThreadFilter};
use crate::events::{Event, MARKET, Subscription};
use crate::market::{agents, order_negotiations};
use crate::secrets;
use haggle_api::query;
use haggle_api::{
    self as api, AdminAgentQuery, AdminOrderQuery, AdminPageQuery, AdminThreadQuery, AdminWebhookQuery, AgentStatus,
    DisputeDecision, ProfilePatch, StatsQuery, StreamQuery, Suspension, ThreadWithBids,
};

pub fn endpoints() -> Vec<Endpoint> {
    vec![
        Endpoint::get("/v1/admin/agents", list_agents),
        Endpoint::get("/v1/admin/agents/{id}", read_agent),
        Endpoint::patch("/v1/admin/agents/{id}", update_agent),
        Endpoint::post("/v1/admin/agents/{id}/suspend", suspend_agent),
        Endpoint::post("/v1/admin/agents/{id}/reinstate", reinstate_agent),
        Endpoint::get("/v1/admin/agents/{id}/keys", list_keys),
        Endpoint::delete("/v1/admin/keys/{key_id}", revoke_key),
        Endpoint::get("/v1/admin/threads", list_threads),
        Endpoint::get("/v1/admin/threads/{id}", read_thread),
        Endpoint::post("/v1/admin/threads/{id}/decide", decide_dispute),
        Endpoint::get("/v1/admin/orders", list_orders),
        Endpoint::get("/v1/admin/webhooks", list_webhooks),
        Endpoint::get("/v1/admin/webhooks/{id}/deliveries", list_deliveries),
        Endpoint::get("/v1/admin/stats", stats),
        Endpoint::get("/v1/admin/events/stream", stream_events),
    ]
}

/// Whose `Idempotency-Key`s the operator's writes are stored under: a scope no agent has.
const OPERATOR_SCOPE: Uuid = Uuid::max();

/// Agents, newest first: by name (a case-insensitive substring) or id (`q`), tier, and status.
async fn list_agents(
    State(state): State<AppState>,
    _operator: Operator,
    Params(query): Params<AdminAgentQuery>,
) -> Result<Json<Page<api::AdminAgent>>, ApiError> {
    let limit = page_size(query.limit)?;
    let q = query.q.filter(|q| !q.trim().is_empty());
    if q.as_ref().is_some_and(|q| q.chars().count() > 200) {
        return Err(invalid_param("q", "must be at most 200 characters"));
    }
    let suspended = query.status.map(|status| match status {
        AgentStatus::Active => false,
        AgentStatus::Suspended => true,
    });
    let filter = AgentFilter { q, tier: query.tier, suspended, after: query.cursor, limit };
    let page = db::admin::agents(&state.pool, &filter).await?;
    Ok(Json(page.map(api::AdminAgent::from)))
}

async fn read_agent(
    State(state): State<AppState>,
    _operator: Operator,
    Id(id): Id,
) -> Result<Json<api::AdminAgent>, ApiError> {
    let agent = db::admin::agent(&state.pool, id).await?.ok_or_else(|| ApiError::not_found("agent"))?;
    Ok(Json(agent.into()))
}

/// Sets an agent's tier and verified identity.
async fn update_agent(
    State(state): State<AppState>,
    _operator: Operator,
    Id(id): Id,
    body: JsonBody<ProfilePatch>,
) -> Result<Response, Response> {
    let mut command = Write::begin(&state, uuid::Uuid::nil(), IdempotencyKey(None), body.digest).await?;
    let updated = async { agents::update_profile(command.conn().await?, id, body.value).await }.await;
    let outcome = updated.map(|agent| Reply::json(StatusCode::OK, &api::Agent::from(agent)));
    let response = command.finish(outcome).await;
    // The next request here must read the new tier.
    state.keys.forget_agent(id);
    Ok(response)
}

/// A JSON object body that may be left out (empty is the type's default), with the request's
/// digest for idempotency.
struct OptionalBody<T> {
    value: T,
    digest: [u8; 32],
}

impl<S: Send + Sync, T: serde::de::DeserializeOwned + Default> FromRequest<S> for OptionalBody<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        let path = request.uri().path().to_owned();
        let method = request.method().clone();
        let bytes = Bytes::from_request(request, state).await.map_err(|rejection| {
            if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::new(Code::PayloadTooLarge, "the request body is larger than this server accepts")
            } else {
                ApiError::malformed("the request body could not be read")
            }
        })?;
        let digest = secrets::sha256_parts(&[method.as_str().as_bytes(), path.as_bytes(), &bytes]);
        let value = match bytes.iter().find(|b| !b.is_ascii_whitespace()) {
            None => T::default(),
            Some(b'{') => parse_json(&bytes)?,
            Some(_) => return Err(ApiError::malformed("the request body must be empty or a JSON object")),
        };
        Ok(OptionalBody { value, digest })
    }
}

/// Suspends an agent (see [`agents::suspend`]) and answers it. Idempotent.
async fn suspend_agent(
    State(state): State<AppState>,
    _operator: Operator,
    Id(id): Id,
    key: IdempotencyKey,
    body: OptionalBody<Suspension>,
) -> Result<Response, Response> {
    let mut command = Write::begin(&state, OPERATOR_SCOPE, key, body.digest).await?;
    let outcome = async {
        let (conn, events) = command.parts().await?;
        agents::suspend(conn, events, id, body.value).await?;
        agent_reply(command.conn().await?, id).await
    }
    .await;
    let response = command.finish(outcome).await;
    // Committed (or not): either way this instance reads the agent afresh from now on.
    state.keys.forget_agent(id);
    Ok(response)
}

/// Lifts an agent's suspension and answers it. Idempotent.
async fn reinstate_agent(
    State(state): State<AppState>,
    _operator: Operator,
    Id(id): Id,
    key: IdempotencyKey,
    body: OptionalBody<NoFields>,
) -> Result<Response, Response> {
    let mut command = Write::begin(&state, OPERATOR_SCOPE, key, body.digest).await?;
    let outcome = async {
        agents::reinstate(command.conn().await?, id).await?;
        agent_reply(command.conn().await?, id).await
    }
    .await;
    let response = command.finish(outcome).await;
    state.keys.forget_agent(id);
    Ok(response)
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct NoFields {}

/// The agent as the operator sees it, read in the write's transaction.
async fn agent_reply(conn: &mut sqlx::PgConnection, id: Uuid) -> crate::market::Result<Reply> {
    let agent = db::admin::agent(conn, id).await?.ok_or(haggle_domain::Rejection::NotFound { what: "agent" })?;
    Ok(Reply::json(StatusCode::OK, &api::AdminAgent::from(agent)))
}

async fn list_keys(
    State(state): State<AppState>,
    _operator: Operator,
    Id(id): Id,
    Params(query): Params<AdminPageQuery>,
) -> Result<Json<Page<api::KeyRecord>>, ApiError> {
    let (limit, after) = (page_size(query.limit)?, query.cursor);
    if db::agents::get(&state.pool, id).await?.is_none() {
        return Err(ApiError::not_found("agent"));
    }
    let page = db::agents::keys_page(&state.pool, id, after, limit).await?;
    Ok(Json(page.map(api::KeyRecord::from)))
}

/// Revokes any key, an agent's last included: 204, also when it was revoked already; 404 for
/// an unknown key.
async fn revoke_key(
    State(state): State<AppState>,
    _operator: Operator,
    Id(key_id): Id,
) -> Result<StatusCode, ApiError> {
    let mut command = Write::new(&state);
    let agent_id = agents::revoke_any_key(command.conn().await?, key_id).await?;
    let committed = command.done().await;
    // Committed (or not): either way this instance reads the agent's keys afresh from now on.
    state.keys.forget_agent(agent_id);
    committed?;
    Ok(StatusCode::NO_CONTENT)
}

async fn list_threads(
    State(state): State<AppState>,
    _operator: Operator,
    Params(query): Params<AdminThreadQuery>,
) -> Result<Json<Page<api::Thread>>, ApiError> {
    let filter = ThreadFilter {
        limit: page_size(query.limit)?,
        status: query.status,
        listing_id: query.listing_id,
        agent_id: query.agent_id,
        since: query.since,
        escalated: query.escalated.unwrap_or(false),
        after: query.cursor,
    };
    let page = db::admin::threads(&state.pool, &filter).await?;
    let now = Utc::now();
    Ok(Json(page.map(|thread| thread.at(now))))
}

/// Any thread with every bid in round order, each with its effective status.
async fn read_thread(
    State(state): State<AppState>,
    _operator: Operator,
    Id(id): Id,
) -> Result<Json<ThreadWithBids>, ApiError> {
    let (thread, bids) =
        db::threads::get_thread_with_bids(&state.pool, id, None).await?.ok_or_else(|| ApiError::not_found("thread"))?;
    let now = Utc::now();
    Ok(Json(ThreadWithBids { thread: thread.at(now), bids: bids.iter().map(|bid| bid.at(now)).collect() }))
}

/// The operator decides an escalated refund: the thread with its decision, and the order with
/// the refund recorded.
async fn decide_dispute(
    State(state): State<AppState>,
    _operator: Operator,
    Id(id): Id,
    key: IdempotencyKey,
    body: JsonBody<DisputeDecision>,
) -> Result<Response, Response> {
    let mut command = Write::begin(&state, OPERATOR_SCOPE, key, body.digest).await?;
    let outcome = async {
        let (conn, events) = command.parts().await?;
        order_negotiations::decide(conn, events, id, &body.value).await
    }
    .await;
    let now = Utc::now();
    Ok(command
        .finish(outcome.map(|(thread, order)| {
            Reply::json(StatusCode::OK, &api::Decided { thread: thread.at(now), order: order.into() })
        }))
        .await)
}

async fn list_orders(
    State(state): State<AppState>,
    _operator: Operator,
    Params(query): Params<AdminOrderQuery>,
) -> Result<Json<Page<api::Order>>, ApiError> {
    let filter = OrderFilter {
        limit: page_size(query.limit)?,
        agent_id: query.agent_id,
        listing_id: query.listing_id,
        since: query.since,
        after: query.cursor,
    };
    let page = db::admin::orders(&state.pool, &filter).await?;
    Ok(Json(page.map(api::Order::from)))
}

async fn list_webhooks(
    State(state): State<AppState>,
    _operator: Operator,
    Params(query): Params<AdminWebhookQuery>,
) -> Result<Json<Page<api::AdminWebhook>>, ApiError> {
    let limit = page_size(query.limit)?;
    let page = db::admin::webhooks(&state.pool, query.failing.unwrap_or(false), query.cursor, limit).await?;
    Ok(Json(page.map(api::AdminWebhook::from)))
}

/// Any webhook's deliveries, as its owner reads them.
async fn list_deliveries(
    State(state): State<AppState>,
    _operator: Operator,
    Id(id): Id,
    Params(query): Params<AdminPageQuery>,
) -> Result<Json<Page<api::Delivery>>, ApiError> {
    let (limit, after) = (page_size(query.limit)?, query.cursor);
    if !db::admin::webhook_exists(&state.pool, id).await? {
        return Err(ApiError::not_found("webhook"));
    }
    let page = db::webhooks::deliveries(&state.pool, id, after, limit).await?;
    Ok(Json(page.map(api::Delivery::from)))
}

/// The market at a glance, over the current hour and the `hours - 1` before it.
async fn stats(
    State(state): State<AppState>,
    _operator: Operator,
    Params(query): Params<StatsQuery>,
) -> Result<Json<api::MarketStats>, ApiError> {
    let hours = query.hours.unwrap_or(query::DEFAULT_STATS_HOURS);
    if !(1..=query::MAX_STATS_HOURS).contains(&hours) {
        return Err(invalid_param("hours", query::hours_range()));
    }
    let hours = i64::from(hours);
    let pool = &state.pool;
    let (from, to) = db::admin::window(pool, hours).await?;
    let (totals, per_hour, outcomes) =
        tokio::try_join!(db::admin::totals(pool), db::admin::hours(pool, from, to), db::admin::outcomes(pool, from))?;
    let per_hour = per_hour
        .into_iter()
        .map(|hour| api::HourStats {
            hour: hour.hour,
            deals: hour.deals,
            volume: hour.volume.0.into_iter().map(|v| api::Volume { currency: v.currency, amount: v.amount }).collect(),
            negotiations_opened: hour.negotiations_opened,
        })
        .collect();
    Ok(Json(api::MarketStats {
        hours,
        listings: api::ListingCounts { active: totals.listings_active, total: totals.listings_total },
        agents: api::AgentCounts { total: totals.agents_total, suspended: totals.agents_suspended },
        active_negotiations: totals.active_negotiations,
        per_hour,
        median_rounds_to_deal: outcomes.median_rounds_to_deal,
        agreement_rate: (outcomes.ended > 0).then(|| outcomes.accepted as f64 / outcomes.ended as f64),
    }))
}

/// Events read per query by the market stream.
const STREAM_BATCH: i64 = 100;

/// How soon the market stream reads again when committed events wait behind a transaction still
/// running.
const HELD_BACK_PAUSE: std::time::Duration = std::time::Duration::from_millis(25);

struct MarketStream {
    pool: PgPool,
    /// The operator's credential: signing its console session out ends the stream.
    recheck: Recheck,
    cursor: MarketPosition,
    ready: VecDeque<(MarketPosition, Event)>,
    subscription: Subscription,
    shutdown: CancellationToken,
}

impl MarketStream {
    /// The next event of the market, waiting for it if need be; `None` ends the stream.
    async fn next(&mut self) -> Option<Event> {
        loop {
            if let Err(error) = self.recheck.still_stands().await {
                tracing::info!(
                    code = error.code.as_str(),
                    "the market event stream's credential no longer stands; closing it"
                );
                return None;
            }
            if let Some((position, event)) = self.ready.pop_front() {
                self.cursor = position;
                return Some(event);
            }
            self.subscription.mark();
            let pause = match db::admin::events_after(&self.pool, self.cursor, STREAM_BATCH).await {
                Ok((events, _)) if !events.is_empty() => {
                    self.ready.extend(events);
                    continue;
                }
                // Committed events wait behind a transaction still running, which may write no
                // event and so wake nobody when it ends: read again soon.
                Ok((_, true)) => HELD_BACK_PAUSE,
                Ok((_, false)) => self.recheck.due_in().max(super::events::MIN_PAUSE),
                Err(error) => {
                    tracing::warn!(%error, "the market event stream could not read events; closing it");
                    return None;
                }
            };
            tokio::select! {
                // A wake-up gone astray is made up for by reading again at each check.
                _ = self.subscription.wait(pause) => {}
                _ = self.shutdown.cancelled() => return None,
            }
        }
    }
}

/// Every event of the market, as Server-Sent Events shaped as the agents' stream (each with
/// its own id, in the order of the transactions that wrote them, each transaction's once every
/// transaction begun before it has ended). It counts against the waiter limits as one waiter of the operator, and ends when
/// its credential no longer stands (the console session signed out).
async fn stream_events(
    State(state): State<AppState>,
    Operator(credential): Operator,
    headers: HeaderMap,
    Params(query): Params<StreamQuery>,
) -> Result<Sse<impl Stream<Item = Result<SseEvent, Infallible>>>, ApiError> {
    // Subscribed before the start is read, so nothing committed in between is missed.
    let subscription = super::events::subscribe(&state, MARKET)?;
    let after = super::events::resume_from(&headers, query.after)?;
    let cursor = db::admin::market_position(&state.pool, after).await?;
    let streaming = MarketStream {
        pool: state.pool.clone(),
        recheck: Recheck::new(&state, credential),
        cursor,
        ready: VecDeque::new(),
        subscription,
        shutdown: state.shutdown.clone(),
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
