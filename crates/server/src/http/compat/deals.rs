//! `GET /products`, `POST /api/v1/quotes` and `POST /api/v1/deals`: discovery, quotes and
//! booking, as the IAB buyer agent's deals client speaks them.
//!
//! A product is a listing for sale. A quote (`market::quotes`) restates the buyer's agreed
//! order on the product when `target_cpm` is that order's price, and otherwise offers the ask.
//! Booking the first gives the agreed order as the deal; booking the second buys at the ask. A
//! deal is an order (`deal_id` = the order's id): booking a quote again, under any key, gives the
//! same deal, never a second order.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use chrono::{NaiveDate, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Number;
use uuid::Uuid;

use super::view::Money;
use super::{MoneyInput, body_key, check, invalid, uuid};
use crate::db::agents::Caller;
use crate::db::{self, Listing};
use crate::http::error::ApiError;
use crate::http::extract::{IdempotencyKey, JsonBody, Params};
use crate::http::{AppState, Reply, Write};
use crate::market::quotes::{self, Booked, QuoteRequest, Quoted};
use haggle_domain::FieldError;
use haggle_domain::money;

/// The largest page of products, and the deepest offset (deeper pages cost a scan each).
pub const MAX_PRODUCTS: i64 = 500;
pub const MAX_OFFSET: i64 = 10_000;

// ----- discovery -----

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProductQuery {
    #[serde(default, deserialize_with = "haggle_domain::whole::text_option")]
    limit: Option<i64>,
    #[serde(default, deserialize_with = "haggle_domain::whole::text_option")]
    offset: Option<i64>,
}

#[derive(Debug, Serialize)]
pub struct Products {
    products: Vec<Product>,
    total_count: i64,
    limit: i64,
    offset: i64,
}

#[derive(Debug, Serialize)]
struct Product {
    product_id: Uuid,
    seller_organization_id: Uuid,
    name: String,
    description: String,
    base_price: Money,
    /// A listing sells at the price agreed, for the quantity listed.
    delivery_type: &'static str,
    ad_formats: Vec<String>,
    negotiable: bool,
    quantity_available: i32,
}

fn money_of(amount: i64, listing: &Listing) -> Money {
    Money { amount_micros: money::micros_from_minor_units(amount), currency: listing.currency }
}

impl From<Listing> for Product {
    fn from(listing: Listing) -> Product {
        Product {
            product_id: listing.id,
            seller_organization_id: listing.seller_id,
            base_price: money_of(listing.ask_amount, &listing),
            name: listing.title,
            description: listing.description,
            delivery_type: "Guaranteed",
            ad_formats: Vec::new(),
            negotiable: listing.negotiable,
            quantity_available: listing.quantity_available,
        }
    }
}

/// `GET /products`: the listings for sale, newest first, by `limit` and `offset`.
pub async fn products(
    State(state): State<AppState>,
    _caller: Caller,
    Params(query): Params<ProductQuery>,
) -> Result<Json<Products>, ApiError> {
    let mut errors = Vec::new();
    let limit = query.limit.unwrap_or(100);
    if !(1..=MAX_PRODUCTS).contains(&limit) {
        errors.push(FieldError::new("limit", format!("must be between 1 and {MAX_PRODUCTS}")));
    }
    let offset = query.offset.unwrap_or(0);
    if !(0..=MAX_OFFSET).contains(&offset) {
        errors.push(FieldError::new("offset", format!("must be between 0 and {MAX_OFFSET}")));
    }
    if !errors.is_empty() {
        return Err(invalid(&errors));
    }
    let mut conn = state.pool.acquire().await?;
    let (listings, total_count) = db::listings::for_sale(&mut conn, limit, offset).await?;
    Ok(Json(Products { products: listings.into_iter().map(Product::from).collect(), total_count, limit, offset }))
}

// ----- quotes -----

/// `POST /api/v1/quotes`. The other fields IAB clients send (`buyer_identity`, `agent_url`,
/// `audience_plan`...) are accepted and ignored.
#[derive(Debug, Deserialize)]
pub struct QuoteBody {
    idempotency_key: Option<String>,
    product_id: String,
    deal_type: String,
    impressions: Option<Number>,
    flight_start: Option<String>,
    flight_end: Option<String>,
    target_cpm: Option<MoneyInput>,
    media_type: Option<String>,
}

const DEAL_TYPES: [&str; 3] = ["PG", "PD", "PA"];
const MEDIA_TYPES: [&str; 3] = ["digital", "ctv", "linear_tv"];

fn date(raw: &str) -> Result<NaiveDate, String> {
    NaiveDate::parse_from_str(raw, "%Y-%m-%d").map_err(|_| "must be a date, YYYY-MM-DD".to_owned())
}

impl QuoteBody {
    /// The request as the market takes it, or every faulty field.
    fn read(&self, limits: money::AmountLimits) -> Result<QuoteRequest, Vec<FieldError>> {
        let mut errors = Vec::new();
        let listing_id = check(&mut errors, "product_id", uuid(&self.product_id, "a product id"));
        if !DEAL_TYPES.contains(&self.deal_type.as_str()) {
            errors.push(FieldError::new("deal_type", "must be one of PG, PD, PA"));
        }
        if self.media_type.as_deref().is_some_and(|media| !MEDIA_TYPES.contains(&media)) {
            errors.push(FieldError::new("media_type", "must be one of digital, ctv, linear_tv"));
        }
        let impressions = self.impressions.as_ref().and_then(|number| {
            let count = number.as_i64().filter(|count| *count > 0);
            check(&mut errors, "impressions", count.ok_or_else(|| "must be a whole number above 0".to_owned()))
        });
        let flight_start = self.flight_start.as_deref().and_then(|raw| check(&mut errors, "flight_start", date(raw)));
        let flight_end = self.flight_end.as_deref().and_then(|raw| check(&mut errors, "flight_end", date(raw)));
        if let (Some(start), Some(end)) = (flight_start, flight_end)
            && end < start
        {
            errors.push(FieldError::new("flight_end", "must not be before flight_start"));
        }
        let target = self.target_cpm.as_ref().and_then(|target| {
            let amount = check(&mut errors, "target_cpm.amount_micros", target.amount(limits));
            let currency = check(&mut errors, "target_cpm.currency", target.currency());
            amount.zip(currency)
        });
        match listing_id {
            Some(listing_id) if errors.is_empty() => Ok(QuoteRequest {
                listing_id,
                deal_type: self.deal_type.clone(),
                impressions,
                flight_start,
                flight_end,
                target,
            }),
            _ => Err(errors),
        }
    }
}

#[derive(Debug, Serialize)]
struct QuoteView {
    quote_id: Uuid,
    deal_type: String,
    product: ProductRef,
    pricing: Pricing,
    terms: Terms,
    status: &'static str,
    buyer_tier: String,
    expires_at: chrono::DateTime<Utc>,
    /// The order the quote restates or was booked as.
    order_id: Option<Uuid>,
}

#[derive(Debug, Serialize)]
struct ProductRef {
    product_id: Uuid,
    name: String,
}

#[derive(Debug, Serialize)]
struct Pricing {
    base_cpm: Money,
    final_cpm: Money,
    tier_discount_pct: f64,
    pricing_type: &'static str,
    pricing_model: &'static str,
    rationale: String,
}

#[derive(Debug, Serialize)]
struct Terms {
    impressions: Option<i64>,
    flight_start: Option<NaiveDate>,
    flight_end: Option<NaiveDate>,
    guaranteed: bool,
}

impl QuoteView {
    fn of(quoted: &Quoted, caller: Caller) -> QuoteView {
        let Quoted { quote, listing } = quoted;
        let status = match (quote.booked_at, quote.expires_at <= Utc::now()) {
            (Some(_), _) => "booked",
            (None, true) => "expired",
            (None, false) => "available",
        };
        let discount = (listing.ask_amount - quote.amount) as f64 * 100.0 / listing.ask_amount as f64;
        let rationale = match quote.order_id {
            Some(order_id) => format!("the price agreed in negotiation (order {order_id})"),
            None => "the product's asking price".to_owned(),
        };
        QuoteView {
            quote_id: quote.id,
            deal_type: quote.deal_type.clone(),
            product: ProductRef { product_id: listing.id, name: listing.title.clone() },
            pricing: Pricing {
                base_cpm: money_of(listing.ask_amount, listing),
                final_cpm: Money {
                    amount_micros: money::micros_from_minor_units(quote.amount),
                    currency: quote.currency,
                },
                tier_discount_pct: (discount * 100.0).round() / 100.0,
                pricing_type: "fixed",
                pricing_model: "cpm",
                rationale,
            },
            terms: Terms {
                impressions: quote.impressions,
                flight_start: quote.flight_start,
                flight_end: quote.flight_end,
                guaranteed: quote.deal_type == "PG",
            },
            status,
            buyer_tier: caller.tier.as_str().to_lowercase(),
            expires_at: quote.expires_at,
            order_id: quote.order_id,
        }
    }
}

/// `POST /api/v1/quotes`: the agreed order at `target_cpm`, or the ask.
pub async fn request_quote(
    State(state): State<AppState>,
    caller: Caller,
    header_key: IdempotencyKey,
    body: JsonBody<QuoteBody>,
) -> Result<Response, Response> {
    let mut errors = Vec::new();
    let key = body_key(&mut errors, header_key, body.value.idempotency_key.as_deref());
    let request = body.value.read(state.settings.rules.amounts);
    let request = match request {
        Ok(request) if errors.is_empty() => request,
        Ok(_) => return Err(invalid(&errors).into_response()),
        Err(more) => return Err(invalid(&[errors, more].concat()).into_response()),
    };
    // What the request names is checked before its key is claimed, so that nothing is stored
    // for a request that could never succeed (the market checks again, on the rows it uses).
    let listing = db::listings::get(&state.pool, request.listing_id).await;
    let listing = listing.map_err(|error| ApiError::from(error).into_response())?;
    let Some(listing) = listing else {
        return Err(ApiError::not_found("product").into_response());
    };
    if let Some((_, currency)) = request.target.filter(|(_, currency)| *currency != listing.currency) {
        let message = format!("must be the product's currency, {} (not {currency})", listing.currency);
        return Err(invalid(&[FieldError::new("target_cpm.currency", message)]).into_response());
    }
    let mut command = Write::begin(&state, caller.id, key, body.digest).await?;
    let outcome = async { quotes::quote(command.conn().await?, caller, request).await }.await;
    let reply = outcome.map(|quoted| {
        Reply::json(StatusCode::CREATED, &serde_json::json!({ "quote": QuoteView::of(&quoted, caller) }))
    });
    Ok(command.finish(reply).await)
}

// ----- deals -----

/// `POST /api/v1/deals`.
#[derive(Debug, Deserialize)]
pub struct DealBody {
    idempotency_key: Option<String>,
    quote_id: String,
}

#[derive(Debug, Serialize)]
struct DealView {
    deal_id: Uuid,
    deal_type: String,
    product: ProductRef,
    pricing: Pricing,
    terms: Terms,
    status: &'static str,
    quote_id: Uuid,
    order_id: Uuid,
    openrtb_params: OpenRtb,
}

#[derive(Debug, Serialize)]
struct OpenRtb {
    id: Uuid,
    bidfloor: Money,
}

#[derive(Debug, Serialize)]
struct DealReply {
    deal: DealView,
    audience_plan_snapshot: Option<()>,
    audience_match_summary: Option<()>,
}

impl DealReply {
    fn of(booked: &Booked, caller: Caller) -> DealReply {
        let quote = QuoteView::of(&booked.quoted, caller);
        let bidfloor = quote.pricing.final_cpm;
        DealReply {
            deal: DealView {
                deal_id: booked.order.id,
                deal_type: quote.deal_type,
                product: quote.product,
                pricing: quote.pricing,
                terms: quote.terms,
                status: "booked",
                quote_id: quote.quote_id,
                order_id: booked.order.id,
                openrtb_params: OpenRtb { id: booked.order.id, bidfloor },
            },
            audience_plan_snapshot: None,
            audience_match_summary: None,
        }
    }
}

/// `POST /api/v1/deals`: books the quote: its agreed order, or a purchase at the ask.
pub async fn book_deal(
    State(state): State<AppState>,
    caller: Caller,
    header_key: IdempotencyKey,
    body: JsonBody<DealBody>,
) -> Result<Response, Response> {
    let mut errors = Vec::new();
    let key = body_key(&mut errors, header_key, body.value.idempotency_key.as_deref());
    let quote_id = check(&mut errors, "quote_id", uuid(&body.value.quote_id, "a quote id"));
    let Some(quote_id) = quote_id.filter(|_| errors.is_empty()) else {
        return Err(invalid(&errors).into_response());
    };
    let mut command = Write::begin(&state, caller.id, key, body.digest).await?;
    let outcome = async {
        let (conn, events) = command.parts().await?;
        quotes::book(conn, events, caller, quote_id, Utc::now()).await
    }
    .await;
    let reply = outcome.map(|booked| {
        let status = if booked.newly { StatusCode::CREATED } else { StatusCode::OK };
        Reply::json(status, &DealReply::of(&booked, caller))
    });
    Ok(command.finish(reply).await)
}
