//! Placing, countering and answering bids.

use serde::Deserialize;
use sqlx::PgConnection;
use uuid::Uuid;

use super::{Error, Result, Rules, double_option};
use crate::db::agents::Caller;
use crate::db::negotiation::{self, BidContext, NewBid};
use crate::db::{self, Bid, Order, Thread};
use crate::domain::bid::{self, Action, Actor, Transition};
use crate::domain::money::RawAmount;
use crate::domain::rejection::Validator;
use crate::domain::{BidStatus, ListingStatus, Party, Reason, Rejection};
use crate::events::{EventType, NewEvent, Outbox};

/// `POST /v1/listings/{id}/bids`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Placement {
    pub amount: RawAmount,
    #[serde(default)]
    pub message: Option<String>,
    #[serde(default)]
    pub expires_in: Option<i64>,
    #[serde(default)]
    pub terms: Option<serde_json::Value>,
}

/// `POST /v1/bids/{id}/counter`. Terms left out carry over from the bid being answered;
/// `"terms": null` drops them.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CounterOffer {
    pub amount: RawAmount,
    #[serde(default)]
    pub message: Option<String>,
    #[serde(default)]
    pub expires_in: Option<i64>,
    #[serde(default, rename = "final")]
    pub is_final: Option<bool>,
    #[serde(default, deserialize_with = "double_option")]
    pub terms: Option<Option<serde_json::Value>>,
}

/// The answers to a pending bid that end the thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    Accept,
    Reject,
    Withdraw,
}

impl Answer {
    fn action(self) -> Action {
        match self {
            Answer::Accept => Action::Accept,
            Answer::Reject => Action::Reject,
            Answer::Withdraw => Action::Withdraw,
        }
    }
}

pub struct Answered {
    pub bid: Bid,
    pub thread: Thread,
    pub order: Option<Order>,
}

/// Checks the parts of a new bid that do not depend on the negotiation's state.
fn check_bid_fields(
    v: &mut Validator,
    amount: RawAmount,
    message: Option<&str>,
    terms: Option<&serde_json::Value>,
    expires_in: Option<i64>,
    rules: Rules,
) -> Option<i64> {
    let amount = v.check("amount", amount.validate(rules.amounts)).map(|a| a.minor_units());
    v.check("message", bid::check_message(message));
    v.check("terms", bid::check_terms(terms));
    if expires_in.is_some() {
        v.check("expires_in", bid::expires_in(expires_in, 0));
    }
    amount
}

fn not_found() -> Rejection {
    Rejection::NotFound { what: "bid" }
}

/// Opens a thread on a listing with the buyer's first bid.
pub async fn place(
    conn: &mut PgConnection,
    events: &mut Outbox,
    caller: Caller,
    listing_id: Uuid,
    input: Placement,
    rules: Rules,
) -> Result<(Bid, Thread)> {
    let mut v = Validator::new();
    let amount =
        check_bid_fields(&mut v, input.amount, input.message.as_deref(), input.terms.as_ref(), input.expires_in, rules);
    v.finish()?;
    let amount = amount.expect("validated");

    let locked = db::listings::lock_for_placement(conn, listing_id, caller.id)
        .await?
        .ok_or(Rejection::NotFound { what: "listing" })?;
    let listing = &locked.listing;
    if listing.seller_id == caller.id {
        return Err(Rejection::OwnListing.into());
    }
    match listing.status {
        ListingStatus::Active => {}
        ListingStatus::Sold | ListingStatus::Withdrawn => {
            return Err(Rejection::ListingUnavailable { current_status: listing.status.as_str() }.into());
        }
    }
    if !listing.negotiable {
        return Err(Rejection::NegotiationNotAllowed {
            detail: format!(
                "this listing is not negotiable; buy it at the ask of {} {} with POST /v1/listings/{}/purchase",
                listing.ask_amount, listing.currency, listing.id
            ),
            listing_id: listing.id,
            ask_amount: listing.ask_amount,
        }
        .into());
    }
    if !caller.tier.may_negotiate(listing.min_negotiation_tier) {
        return Err(Rejection::NegotiationNotAllowed {
            detail: format!(
                "negotiating on this listing takes tier {} or above and yours is {}; any tier may buy it at the ask of {} {} with POST /v1/listings/{}/purchase",
                listing.min_negotiation_tier, caller.tier, listing.ask_amount, listing.currency, listing.id
            ),
            listing_id: listing.id,
            ask_amount: listing.ask_amount,
        }
        .into());
    }
    let mine = db::listings::buyer_threads(conn, listing.id, caller.id).await?;
    if let (Some(thread_id), Some(deadline), Some(pending)) =
        (mine.active_thread_id, mine.active_expires_at, mine.active_last_bid_id)
    {
        if deadline > locked.db_now {
            return Err(Rejection::ThreadActive { thread_id: Some(thread_id) }.into());
        }
        // The buyer's live thread ran out of time before the sweeper saw it: it ends now.
        negotiation::lock_thread(conn, thread_id).await?;
        if let Some((bid, thread)) = negotiation::end_with_bid(conn, pending, Transition::Expire).await? {
            events.push(NewEvent::bid(&bid, &thread));
        }
    }
    if mine.thread_count >= i64::from(listing.max_threads_per_buyer) {
        return Err(Rejection::OfferLimitReached { limit: listing.max_threads_per_buyer }.into());
    }
    bid::check_opening(amount, listing.ask_amount)?;
    let expires_in =
        bid::expires_in(input.expires_in, listing.bid_ttl_seconds).map_err(|m| Rejection::invalid("expires_in", m))?;
    let opening = NewBid {
        id: Uuid::now_v7(),
        author_id: caller.id,
        amount,
        currency: listing.currency,
        message: input.message.as_deref(),
        terms: input.terms.as_ref().filter(|terms| !terms.is_null()),
        is_final: bid::is_final(1, listing.max_rounds, false),
        expires_in,
    };
    let opened = negotiation::insert_opening(conn, Uuid::now_v7(), listing.id, listing.seller_id, &opening).await?;
    // None: a concurrent placement by the same buyer on the same listing came first.
    let (bid, thread) = opened.ok_or(Rejection::ThreadActive { thread_id: None })?;
    events.push(NewEvent::bid(&bid, &thread));
    Ok((bid, thread))
}

/// Decides `action` on the bid in `context`, recording the expiry if the bid ran out of time.
async fn decide(
    conn: &mut PgConnection,
    events: &mut Outbox,
    bid_id: Uuid,
    context: &BidContext,
    action: Action,
    party: Party,
) -> Result<Transition> {
    match bid::apply(&context.state(), action, Actor::Party(party), context.db_now) {
        Ok(transition) => Ok(transition),
        Err(Rejection::BidExpired) => {
            record_expiry(conn, events, bid_id).await?;
            Err(Rejection::BidExpired.into())
        }
        Err(rejection) => Err(rejection.into()),
    }
}

/// Records that the pending bid ran out of time, with its event.
async fn record_expiry(conn: &mut PgConnection, events: &mut Outbox, bid_id: Uuid) -> Result<()> {
    if let Some((bid, thread)) = negotiation::end_with_bid(conn, bid_id, Transition::Expire).await? {
        events.push(NewEvent::bid(&bid, &thread));
    }
    Ok(())
}

/// Records the end of threads that a sold-out or withdrawn listing closed.
pub(super) fn record_closed(events: &mut Outbox, ended: Vec<(Bid, Thread)>) {
    for (bid, thread) in ended {
        events.push(NewEvent::thread_closed(&thread, &bid));
    }
}

/// The compare-and-set changed nothing: a concurrent action won, or the bid's deadline passed
/// while this request waited for its locks (then the expiry is recorded).
async fn lost_race(conn: &mut PgConnection, events: &mut Outbox, bid_id: Uuid) -> Error {
    match negotiation::stored_status(conn, bid_id).await {
        Ok(BidStatus::Pending) => match record_expiry(conn, events, bid_id).await {
            Ok(()) => Rejection::BidExpired.into(),
            Err(error) => error,
        },
        Ok(current @ (BidStatus::Countered | BidStatus::Accepted | BidStatus::Rejected | BidStatus::Expired)) => {
            Rejection::InvalidTransition {
                current_status: current.as_str(),
                detail: format!("the bid is {current}: another action on it came first"),
            }
            .into()
        }
        Err(error) => error.into(),
    }
}

async fn lock_context(conn: &mut PgConnection, caller: Caller, bid_id: Uuid) -> Result<(BidContext, Party)> {
    let context = negotiation::lock_bid_context(conn, bid_id, caller.id).await?.ok_or_else(not_found)?;
    let party = context.party_of(caller.id).ok_or_else(not_found)?;
    Ok((context, party))
}

/// Answers the pending bid with a counter: it becomes COUNTERED and the counter is the new
/// pending bid, one round later.
pub async fn counter(
    conn: &mut PgConnection,
    events: &mut Outbox,
    caller: Caller,
    bid_id: Uuid,
    input: CounterOffer,
    rules: Rules,
) -> Result<(Bid, Thread)> {
    let mut v = Validator::new();
    let new_terms = input.terms.as_ref().map(|terms| terms.as_ref().filter(|t| !t.is_null()));
    let amount =
        check_bid_fields(&mut v, input.amount, input.message.as_deref(), new_terms.flatten(), input.expires_in, rules);
    v.finish()?;
    let amount = amount.expect("validated");

    let (context, party) = lock_context(conn, caller, bid_id).await?;
    decide(conn, events, bid_id, &context, Action::Counter, party).await?;
    // The responder's own previous position: the bid this one answered, or the ask for the
    // seller's first counter.
    let own_previous = context.parent_amount.unwrap_or(context.ask_amount);
    bid::check_counter(party, amount, context.amount, own_previous)?;
    let round = context.round + 1;
    let expires_in =
        bid::expires_in(input.expires_in, context.bid_ttl_seconds).map_err(|m| Rejection::invalid("expires_in", m))?;
    let terms = match new_terms {
        Some(terms) => terms,
        None => context.terms.as_ref(),
    };
    let counter = NewBid {
        id: Uuid::now_v7(),
        author_id: caller.id,
        amount,
        currency: context.currency,
        message: input.message.as_deref(),
        terms,
        is_final: bid::is_final(round, context.max_rounds, input.is_final.unwrap_or(false)),
        expires_in,
    };
    match negotiation::insert_counter(conn, bid_id, party, round, &counter).await? {
        Some((bid, thread)) => {
            events.push(NewEvent::bid(&bid, &thread));
            Ok((bid, thread))
        }
        None => Err(lost_race(conn, events, bid_id).await),
    }
}

/// Accepts, rejects or withdraws the pending bid, which ends its thread. Accepting creates the
/// order, and the listing's last unit ends the listing's other live threads.
pub async fn answer(
    conn: &mut PgConnection,
    events: &mut Outbox,
    caller: Caller,
    bid_id: Uuid,
    answer: Answer,
) -> Result<Answered> {
    // Accepting changes the listing, which is locked before the thread.
    let listing_status = match answer {
        Answer::Accept => Some(negotiation::lock_listing_of_bid(conn, bid_id, caller.id).await?.ok_or_else(not_found)?),
        Answer::Reject | Answer::Withdraw => None,
    };
    let (context, party) = lock_context(conn, caller, bid_id).await?;
    let transition = decide(conn, events, bid_id, &context, answer.action(), party).await?;
    match transition {
        Transition::Accept => {
            if let Some(status @ (ListingStatus::Sold | ListingStatus::Withdrawn)) = listing_status {
                return Err(Rejection::ListingUnavailable { current_status: status.as_str() }.into());
            }
            let Some(accepted) = negotiation::accept(conn, bid_id, Uuid::now_v7()).await? else {
                return Err(lost_race(conn, events, bid_id).await);
            };
            events.push(NewEvent::bid(&accepted.bid, &accepted.thread));
            events.push(NewEvent::order_created(&accepted.order));
            if accepted.listing.status == ListingStatus::Sold {
                events.push(NewEvent::listing(EventType::ListingSold, &accepted.listing));
                let ended = negotiation::end_listing_threads(conn, context.listing_id, Reason::ListingSold).await?;
                record_closed(events, ended);
            }
            Ok(Answered { bid: accepted.bid, thread: accepted.thread, order: Some(accepted.order) })
        }
        Transition::Reject(_) | Transition::Expire => {
            match negotiation::end_with_bid(conn, bid_id, transition).await? {
                Some((bid, thread)) => {
                    events.push(NewEvent::bid(&bid, &thread));
                    Ok(Answered { bid, thread, order: None })
                }
                None => Err(lost_race(conn, events, bid_id).await),
            }
        }
        Transition::Counter => unreachable!("accept, reject and withdraw never counter"),
    }
}
