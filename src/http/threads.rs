//! `/v1/threads`: my negotiations.

use axum::Json;
use axum::extract::State;
use chrono::Utc;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::error::ApiError;
use super::extract::{Id, Params};
use super::{AppState, Endpoint, Page, choice, paging};
use crate::db::agents::Caller;
use crate::db::negotiation::ThreadFilter;
use crate::db::{self, Bid, Thread};

pub fn endpoints() -> Vec<Endpoint> {
    vec![Endpoint::get("/v1/threads", list), Endpoint::get("/v1/threads/{id}", read)]
}

/// A thread with its bids in order.
#[derive(Serialize)]
struct ThreadWithBids {
    #[serde(flatten)]
    thread: Thread,
    bids: Vec<Bid>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    role: Option<String>,
    status: Option<String>,
    listing_id: Option<Uuid>,
    limit: Option<i64>,
    cursor: Option<String>,
}

async fn list(
    State(state): State<AppState>,
    caller: Caller,
    Params(query): Params<ListQuery>,
) -> Result<Json<Page<Thread>>, ApiError> {
    let (limit, after) = paging(query.limit, query.cursor.as_deref())?;
    let filter = ThreadFilter {
        role: choice("role", query.role.as_deref())?,
        status: choice("status", query.status.as_deref())?,
        listing_id: query.listing_id,
        after,
        limit,
    };
    let page = db::negotiation::list_threads(&state.pool, caller.id, &filter).await?;
    let now = Utc::now();
    Ok(Json(Page::from_db(page, |thread| thread.at(now))))
}

async fn read(State(state): State<AppState>, caller: Caller, Id(id): Id) -> Result<Json<ThreadWithBids>, ApiError> {
    let (thread, bids) = db::negotiation::get_thread_with_bids(&state.pool, id, caller.id)
        .await?
        .ok_or_else(|| ApiError::not_found("thread"))?;
    let now = Utc::now();
    Ok(Json(ThreadWithBids { thread: thread.at(now), bids: bids.into_iter().map(|bid| bid.at(now)).collect() }))
}
