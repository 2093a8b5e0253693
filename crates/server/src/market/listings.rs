//! Creating, changing and withdrawing listings, and buying at the ask.

use sqlx::PgConnection;
use uuid::Uuid;

use super::{Result, Rules};
use crate::db::agents::Caller;
use crate::db::{self, Listing, Order};
use crate::events::{EventType, NewEvent, Outbox};
use haggle_domain::listing::{ListingPatch, NewListing};
use haggle_domain::{ListingStatus, Reason, Rejection};

fn not_found() -> Rejection {
    Rejection::NotFound { what: "listing" }
}

pub(super) fn require_active(listing: &Listing) -> Result<()> {
    match listing.status {
        ListingStatus::Active => Ok(()),
        ListingStatus::Sold | ListingStatus::Withdrawn => {
            Err(Rejection::ListingUnavailable { current_status: listing.status.as_str() }.into())
        }
    }
}

fn require_seller(listing: &Listing, caller: Caller, what: &str) -> Result<()> {
    if listing.seller_id == caller.id {
        Ok(())
    } else {
        Err(Rejection::forbidden(format!("only the listing's seller may {what} it")).into())
    }
}

pub async fn create(conn: &mut PgConnection, caller: Caller, input: NewListing, rules: Rules) -> Result<Listing> {
    let terms = input.validate(rules.amounts)?;
    Ok(db::listings::insert(conn, Uuid::now_v7(), caller.id, &terms).await?)
}

pub async fn update(
    conn: &mut PgConnection,
    caller: Caller,
    id: Uuid,
    patch: ListingPatch,
    rules: Rules,
) -> Result<Listing> {
    let listing = db::listings::lock(conn, id).await?.ok_or_else(not_found)?;
    require_seller(&listing, caller, "change")?;
    require_active(&listing)?;
    if patch.is_empty() {
        return Ok(listing);
    }
    let terms = patch.apply(&listing.terms(), rules.amounts)?;
    Ok(db::listings::update_terms(conn, id, &terms).await?)
}

/// Withdraws the listing and ends its live threads, rejecting their pending bids.
pub async fn withdraw(conn: &mut PgConnection, events: &mut Outbox, caller: Caller, id: Uuid) -> Result<Listing> {
    let listing = db::listings::lock(conn, id).await?.ok_or_else(not_found)?;
    require_seller(&listing, caller, "withdraw")?;
    require_active(&listing)?;
    let withdrawn = db::listings::withdraw(conn, id).await?;
    events.push(NewEvent::listing(EventType::ListingWithdrawn, &withdrawn));
    let ended = db::sweeps::end_listing_threads(conn, id, Reason::ListingWithdrawn).await?;
    super::negotiation::record_closed(events, ended);
    Ok(withdrawn)
}

/// Buys one unit at the ask, whatever the buyer's tier. The last unit sells the listing out and
/// ends its other live threads.
pub async fn purchase(conn: &mut PgConnection, events: &mut Outbox, caller: Caller, id: Uuid) -> Result<Order> {
    let listing = db::listings::lock(conn, id).await?.ok_or_else(not_found)?;
    if listing.seller_id == caller.id {
        return Err(Rejection::OwnListing.into());
    }
    require_active(&listing)?;
    let (order, listing) = db::orders::purchase(conn, Uuid::now_v7(), id, caller.id).await?;
    events.push(NewEvent::order_created(&order));
    if listing.status == ListingStatus::Sold {
        events.push(NewEvent::listing(EventType::ListingSold, &listing));
        let ended = db::sweeps::end_listing_threads(conn, id, Reason::ListingSold).await?;
        super::negotiation::record_closed(events, ended);
    }
    Ok(order)
}
