//! `/v1/orders`: my orders, as buyer or seller.

use axum::Json;
use axum::extract::State;
use serde::Deserialize;
use uuid::Uuid;

use super::error::ApiError;
use super::extract::{Id, Params};
use super::{AppState, Endpoint, Page, choice, paging};
use crate::db;
use crate::db::agents::Caller;
use crate::db::orders::OrderFilter;
use haggle_api as api;

pub fn endpoints() -> Vec<Endpoint> {
    vec![Endpoint::get("/v1/orders", list), Endpoint::get("/v1/orders/{id}", read)]
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    role: Option<String>,
    listing_id: Option<Uuid>,
    #[serde(default, deserialize_with = "haggle_domain::whole::text_option")]
    limit: Option<i64>,
    cursor: Option<String>,
}

async fn list(
    State(state): State<AppState>,
    caller: Caller,
    Params(query): Params<ListQuery>,
) -> Result<Json<Page<api::Order>>, ApiError> {
    let (limit, after) = paging(query.limit, query.cursor.as_deref())?;
    let filter =
        OrderFilter { role: choice("role", query.role.as_deref())?, listing_id: query.listing_id, after, limit };
    let page = db::orders::list(&state.pool, caller.id, &filter).await?;
    Ok(Json(page.map(api::Order::from)))
}

async fn read(State(state): State<AppState>, caller: Caller, Id(id): Id) -> Result<Json<api::Order>, ApiError> {
    db::orders::get(&state.pool, id, caller.id)
        .await?
        .map(|order| Json(order.into()))
        .ok_or_else(|| ApiError::not_found("order"))
}
