//! Quotes and their booking, for the IAB-style deals routes: a quote restates the buyer's
//! agreed order on a listing, or offers the ask; booking it gives that order, or makes the
//! purchase at the ask. A quote is booked once: booking it again gives the same order.

use chrono::{DateTime, NaiveDate, Utc};
use sqlx::PgConnection;
use uuid::Uuid;

use super::Result;
use crate::db::agents::Caller;
use crate::db::quotes::Quote;
use crate::db::{self, Listing, Order};
use crate::events::Outbox;
use haggle_domain::money::Amount;
use haggle_domain::{Currency, Rejection};

/// How long a quote can be booked.
pub const QUOTE_TTL: chrono::Duration = chrono::Duration::hours(24);

/// What a buyer asks a quote for. The HTTP layer has read the fields and validated the amount.
#[derive(Debug, Clone)]
pub struct QuoteRequest {
    pub listing_id: Uuid,
    pub deal_type: String,
    pub impressions: Option<i64>,
    pub flight_start: Option<NaiveDate>,
    pub flight_end: Option<NaiveDate>,
    /// The price the buyer has in mind, with its currency: an agreed order's price is quoted
    /// as that order.
    pub target: Option<(Amount, Currency)>,
}

/// A quote with the listing it is for.
#[derive(Debug, Clone)]
pub struct Quoted {
    pub quote: Quote,
    pub listing: Listing,
}

/// Quotes the caller's order on the listing at the target price, if it has one; else the ask,
/// if the listing is for sale.
pub async fn quote(conn: &mut PgConnection, caller: Caller, request: QuoteRequest) -> Result<Quoted> {
    let listing =
        db::listings::get(&mut *conn, request.listing_id).await?.ok_or(Rejection::NotFound { what: "product" })?;
    if listing.seller_id == caller.id {
        return Err(Rejection::OwnListing.into());
    }
    let agreed = match request.target {
        Some((_, currency)) if currency != listing.currency => {
            return Err(Rejection::invalid(
                "target_cpm.currency",
                format!("must be the product's currency, {}", listing.currency),
            )
            .into());
        }
        Some((amount, _)) => db::quotes::agreed_order(&mut *conn, caller.id, listing.id, amount)
            .await?
            .map(|order_id| (order_id, amount.minor_units())),
        None => None,
    };
    let (order_id, amount) = match agreed {
        Some((order_id, amount)) => (Some(order_id), amount),
        None => {
            super::listings::require_active(&listing)?;
            (None, listing.ask_amount)
        }
    };
    let now = Utc::now();
    let quote = Quote {
        id: Uuid::now_v7(),
        buyer_id: caller.id,
        listing_id: listing.id,
        order_id,
        amount,
        currency: listing.currency,
        deal_type: request.deal_type,
        impressions: request.impressions,
        flight_start: request.flight_start,
        flight_end: request.flight_end,
        booked_at: None,
        expires_at: now + QUOTE_TTL,
        created_at: now,
    };
    let quote = db::quotes::insert(conn, &quote).await?;
    Ok(Quoted { quote, listing })
}

/// A booked quote: its order, and whether this booking made it so (`false` when the quote
/// was booked before).
#[derive(Debug, Clone)]
pub struct Booked {
    pub quoted: Quoted,
    pub order: Order,
    pub newly: bool,
}

/// Books the caller's quote: the order it restates, or a purchase at the quoted ask. A quote
/// already booked gives its order again; one past its time, or whose ask has changed since,
/// is refused with `quote_expired`.
pub async fn book(
    conn: &mut PgConnection,
    events: &mut Outbox,
    caller: Caller,
    quote_id: Uuid,
    now: DateTime<Utc>,
) -> Result<Booked> {
    let quote = db::quotes::lock(conn, quote_id, caller.id).await?.ok_or(Rejection::NotFound { what: "quote" })?;
    let listing =
        db::listings::get(&mut *conn, quote.listing_id).await?.ok_or(Rejection::NotFound { what: "product" })?;
    if quote.booked_at.is_some() {
        let order = booked_order(conn, &quote, caller).await?;
        return Ok(Booked { quoted: Quoted { quote, listing }, order, newly: false });
    }
    if quote.expires_at <= now {
        return Err(Rejection::QuoteExpired {
            detail: format!("the quote expired at {}; ask for a new one", quote.expires_at.to_rfc3339()),
        }
        .into());
    }
    let order = match quote.order_id {
        Some(_) => booked_order(conn, &quote, caller).await?,
        None => {
            let listing =
                db::listings::lock(conn, quote.listing_id).await?.ok_or(Rejection::NotFound { what: "product" })?;
            super::listings::require_active(&listing)?;
            if (listing.ask_amount, listing.currency) != (quote.amount, quote.currency) {
                return Err(Rejection::QuoteExpired {
                    detail: format!(
                        "the product's price has changed since the quote (now {} {}); ask for a new quote",
                        haggle_domain::money::price_text(listing.ask_amount),
                        listing.currency
                    ),
                }
                .into());
            }
            super::listings::purchase(conn, events, caller, quote.listing_id).await?
        }
    };
    let quote = db::quotes::book(conn, quote.id, order.id).await?;
    let listing = db::listings::get(&mut *conn, quote.listing_id).await?.unwrap_or(listing);
    Ok(Booked { quoted: Quoted { quote, listing }, order, newly: true })
}

async fn booked_order(conn: &mut PgConnection, quote: &Quote, caller: Caller) -> Result<Order> {
    let order_id = quote.order_id.ok_or(Rejection::NotFound { what: "order" })?;
    Ok(db::orders::get(conn, order_id, caller.id).await?.ok_or(Rejection::NotFound { what: "order" })?)
}
