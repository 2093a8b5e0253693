//! `/v1/orders`: my orders, as buyer or seller.

use axum::Json;
use axum::extract::State;

use super::error::ApiError;
use super::extract::{Id, Params};
use super::{AppState, Endpoint, Page, page_size};
use crate::db;
use crate::db::agents::Caller;
use crate::db::orders::OrderFilter;
use haggle_api::{self as api, OrderQuery};

pub fn endpoints() -> Vec<Endpoint> {
    vec![Endpoint::get("/v1/orders", list), Endpoint::get("/v1/orders/{id}", read)]
}

async fn list(
    State(state): State<AppState>,
    caller: Caller,
    Params(query): Params<OrderQuery>,
) -> Result<Json<Page<api::Order>>, ApiError> {
    let filter = OrderFilter {
        limit: page_size(query.limit)?,
        role: query.role,
        listing_id: query.listing_id,
        after: query.cursor,
    };
    let page = db::orders::list(&state.pool, caller.id, &filter).await?;
    Ok(Json(page.map(api::Order::from)))
}

async fn read(State(state): State<AppState>, caller: Caller, Id(id): Id) -> Result<Json<api::Order>, ApiError> {
    db::orders::get(&state.pool, id, caller.id)
        .await?
        .map(|order| Json(order.into()))
        .ok_or_else(|| ApiError::not_found("order"))
}
