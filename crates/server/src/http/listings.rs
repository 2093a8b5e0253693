//! `/v1/listings`: listings, and the bids and purchases made on them.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use chrono::Utc;
use haggle_api::{self as api, BidAndThread, ListingPatch, ListingQuery, NewListing, Purchased};

use super::approvals::{self, Proposed};
use super::error::ApiError;
use super::extract::{ActionBody, Id, IdempotencyKey, JsonBody, Params};
use super::{AppState, Endpoint, Page, Reply, Write, invalid_param, page_size};
use crate::db;
use crate::db::agents::Caller;
use crate::db::listings::ListingFilter;
use crate::market::{listings, negotiation};
use haggle_domain::bid::Proposal;

pub fn endpoints() -> Vec<Endpoint> {
    vec![
        Endpoint::post("/v1/listings", create),
        Endpoint::get("/v1/listings", list),
        Endpoint::get("/v1/listings/{id}", read),
        Endpoint::patch("/v1/listings/{id}", update),
        Endpoint::post("/v1/listings/{id}/withdraw", withdraw),
        Endpoint::post("/v1/listings/{id}/bids", place_bid),
        Endpoint::post("/v1/listings/{id}/purchase", purchase),
    ]
}

async fn create(
    State(state): State<AppState>,
    caller: Caller,
    key: IdempotencyKey,
    body: JsonBody<NewListing>,
) -> Result<Response, Response> {
    let mut command = Write::begin(&state, caller.id, key, body.digest).await?;
    let outcome =
        async { listings::create(command.conn().await?, caller, body.value, state.settings.rules).await }.await;
    Ok(command.finish(outcome.map(|listing| Reply::json(StatusCode::CREATED, &api::Listing::from(listing)))).await)
}

async fn list(
    State(state): State<AppState>,
    _caller: Caller,
    Params(query): Params<ListingQuery>,
) -> Result<Json<Page<api::Listing>>, ApiError> {
    let filter = ListingFilter {
        limit: page_size(query.limit)?,
        seller_id: query.seller_id,
        status: query.status,
        q: search_text(query.q)?,
        after: query.cursor,
    };
    let page = db::listings::list(&state.pool, &filter).await?;
    Ok(Json(page.map(api::Listing::from)))
}

/// The `q` parameter: free text of at most 200 characters, without control characters; blank
/// means no filter. A blank one is checked too, so that what is refused does not depend on the
/// other characters sent.
fn search_text(q: Option<String>) -> Result<Option<String>, ApiError> {
    let Some(q) = q else { return Ok(None) };
    let q = haggle_domain::rejection::text(&q, false, 200).map_err(|message| invalid_param("q", message))?;
    Ok(Some(q).filter(|q| !q.trim().is_empty()))
}

async fn read(State(state): State<AppState>, _caller: Caller, Id(id): Id) -> Result<Json<api::Listing>, ApiError> {
    db::listings::get(&state.pool, id)
        .await?
        .map(|listing| Json(listing.into()))
        .ok_or_else(|| ApiError::not_found("listing"))
}

async fn update(
    State(state): State<AppState>,
    caller: Caller,
    Id(id): Id,
    body: JsonBody<ListingPatch>,
) -> Result<Response, Response> {
    let mut command = Write::begin(&state, caller.id, IdempotencyKey(None), body.digest).await?;
    let outcome =
        async { listings::update(command.conn().await?, caller, id, body.value, state.settings.rules).await }.await;
    Ok(command.finish(outcome.map(|listing| Reply::json(StatusCode::OK, &api::Listing::from(listing)))).await)
}

async fn withdraw(
    State(state): State<AppState>,
    caller: Caller,
    Id(id): Id,
    key: IdempotencyKey,
    body: ActionBody,
) -> Result<Response, Response> {
    let mut command = Write::begin(&state, caller.id, key, body.digest).await?;
    let outcome = async {
        let (conn, events) = command.parts().await?;
        listings::withdraw(conn, events, caller, id).await
    }
    .await;
    Ok(command.finish(outcome.map(|listing| Reply::json(StatusCode::OK, &api::Listing::from(listing)))).await)
}

async fn place_bid(
    State(state): State<AppState>,
    caller: Caller,
    Id(id): Id,
    key: IdempotencyKey,
    body: JsonBody<api::Placement>,
) -> Result<Response, Response> {
    let mut command = Write::begin_move(&state, caller.id, key, body.digest, bid_made_of).await?;
    let proposed = Proposed::Place { listing_id: id, placement: &body.value };
    if let Some(held) = approvals::hold_if_caught(&state, &mut command, caller, proposed).await.transpose() {
        return Ok(command.finish(held).await);
    }
    let rules = state.settings.rules;
    let placement = Proposal::from(body.value);
    let outcome = command
        .run(|conn, events, access| {
            let placement = placement.clone();
            Box::pin(async move { negotiation::place(conn, events, access, caller, id, &placement, rules).await })
        })
        .await;
    Ok(command.finish(outcome.map(bid_made)).await)
}

/// The answer to a placement or a counter: the new bid, and its thread as it is now.
pub(super) fn bid_made((bid, thread): (db::Bid, db::Thread)) -> Reply {
    Reply::json(StatusCode::CREATED, &BidAndThread { bid: bid.into(), thread: thread.at(Utc::now()) })
}

/// [`bid_made`], of the rows a keyed move will write (`Write::begin_move`).
pub(super) fn bid_made_of(bid: &db::Bid, thread: &db::Thread, _: Option<&db::Order>) -> Reply {
    bid_made((bid.clone(), thread.clone()))
}

async fn purchase(
    State(state): State<AppState>,
    caller: Caller,
    Id(id): Id,
    key: IdempotencyKey,
    body: ActionBody,
) -> Result<Response, Response> {
    let mut command = Write::begin(&state, caller.id, key, body.digest).await?;
    let proposed = Proposed::Purchase { listing_id: id };
    if let Some(held) = approvals::hold_if_caught(&state, &mut command, caller, proposed).await.transpose() {
        return Ok(command.finish(held).await);
    }
    let outcome = async {
        let (conn, events) = command.parts().await?;
        listings::purchase(conn, events, caller, id).await
    }
    .await;
    Ok(command.finish(outcome.map(|order| Reply::json(StatusCode::CREATED, &Purchased { order: order.into() }))).await)
}
