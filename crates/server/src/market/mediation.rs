//! Settling a deadlocked thread at the mediator's suggestion (the mark and the suggestion come
//! from [`super::deadlock`]).
//!
//! Settling is a counter at the suggestion by the side whose turn it is and its acceptance by
//! the other side, in one transaction, through the state machine's own operations. It happens
//! when both sides agreed: a party agrees by calling `POST /v1/threads/{id}/settle` (recorded
//! on the thread) or through a policy that opted in (`accept_mediation`) and finds the
//! suggestion within its limits. A counter on the thread renews the suggestion (and carries the
//! agreements over that it does not move against): an agreement is always to the suggestion
//! current when it is recorded, or, when the caller names it (`bid_id`), to that one only.

use sqlx::PgConnection;
use sqlx::types::Json;
use uuid::Uuid;

use super::negotiation::{self, Answer};
use super::{Access, Error, Result, Rules};
use crate::db::agents::Caller;
use crate::db::{self, Bid, Listing, Order, Thread};
use crate::events::Outbox;
use haggle_api as api;
use haggle_domain::bid::Proposal;
use haggle_domain::deadlock;
use haggle_domain::strategy::Policy;
use haggle_domain::{Party, Rejection, ThreadStatus, Tier};

/// A settlement: the thread, and once both sides agreed, the counter at the suggestion (now
/// ACCEPTED) and the order.
#[derive(Debug)]
pub struct Settlement {
    pub thread: Thread,
    pub bid: Option<Bid>,
    pub order: Option<Order>,
}

/// The caller agrees to settle the thread at its suggestion (the one answering `bid_id`, if it
/// names one); if the other side agreed too, the side whose turn it is counters at the
/// suggestion and the other accepts it, in this transaction. Under locks only.
pub async fn settle(
    conn: &mut PgConnection,
    events: &mut Outbox,
    access: Access,
    caller: Caller,
    thread_id: Uuid,
    bid_id: Option<Uuid>,
    rules: Rules,
) -> Result<Settlement> {
    if !access.is_locked() {
        return Err(Error::NeedsLocks);
    }
    let (thread, listing) = db::mediation::lock_thread_and_listing(conn, thread_id, caller.id)
        .await?
        .ok_or(Rejection::NotFound { what: "thread" })?;
    let party = if caller.id == thread.buyer_id { Party::Buyer } else { Party::Seller };
    let suggestion = current_suggestion(&thread)?;
    if let Some(named) = bid_id.filter(|&named| named != suggestion.bid_id) {
        return Err(Rejection::InvalidTransition {
            current_status: thread.status.as_str(),
            detail: format!(
                "the suggestion for bid {named} was renewed: the thread's suggestion now answers bid {}",
                suggestion.bid_id
            ),
        }
        .into());
    }
    let thread = db::mediation::agree_to_mediation(conn, thread_id, party).await?;
    let other = party.other();
    let other_agrees =
        thread.mediation_agreed.contains(&other) || policy_agrees(conn, &thread, &listing, other, &suggestion).await?;
    if !other_agrees {
        return Ok(Settlement { thread, bid: None, order: None });
    }
    let (mover, acceptor) = match suggestion.mover {
        Party::Buyer => (thread.buyer_id, thread.seller_id),
        Party::Seller => (thread.seller_id, thread.buyer_id),
    };
    // Neither move reads the tier of its maker.
    let as_party = |id| Caller { id, tier: Tier::Public, approval_rules: false };
    let offer = Proposal {
        terms: Some(suggestion.terms.clone()),
        message: Some("Settled at the mediator's suggestion.".into()),
        ..Proposal::of(suggestion.amount)
    };
    // The counter at the suggestion is the settlement's, accepted at once: it renews nothing.
    let settling = Rules { deadlock: deadlock::Settings { rounds: 0, ..rules.deadlock }, ..rules };
    let (counter, _) =
        negotiation::counter(conn, events, Access::Locked, as_party(mover), suggestion.bid_id, &offer, settling)
            .await?;
    let answered =
        negotiation::answer(conn, events, Access::Locked, as_party(acceptor), counter.id, Answer::Accept).await?;
    Ok(Settlement { thread: answered.thread, bid: Some(answered.bid), order: answered.order })
}

/// The thread's suggestion, if it still answers the pending bid of a live thread.
fn current_suggestion(thread: &Thread) -> Result<api::Suggestion> {
    if thread.status != ThreadStatus::Active {
        return Err(Rejection::InvalidTransition {
            current_status: thread.status.as_str(),
            detail: format!("the thread is {}: there is nothing left to settle", thread.status),
        }
        .into());
    }
    let Some(suggestion) = thread.mediation.clone() else {
        return Err(Rejection::InvalidTransition {
            current_status: thread.status.as_str(),
            detail: "the thread is not deadlocked: there is no suggestion to settle at".into(),
        }
        .into());
    };
    if suggestion.bid_id != thread.last_bid_id {
        return Err(Rejection::InvalidTransition {
            current_status: thread.status.as_str(),
            detail: "the negotiation moved on since the suggestion was made: it no longer applies".into(),
        }
        .into());
    }
    Ok(suggestion)
}

/// Whether `party`'s policy on the thread opted in to mediation and finds the suggestion
/// within its limits.
pub async fn policy_agrees(
    conn: &mut PgConnection,
    thread: &Thread,
    listing: &Listing,
    party: Party,
    suggestion: &api::Suggestion,
) -> Result<bool> {
    let policies = db::policies::thread_policies(&mut *conn, thread.id).await?;
    let stored = match party {
        Party::Buyer => policies.buyer,
        Party::Seller => policies.seller,
    };
    let Some(policy) = stored.and_then(|Json(value)| serde_json::from_value::<Policy>(value).ok()) else {
        return Ok(false);
    };
    Ok(policy_accepts(&policy, party, listing, suggestion))
}

/// Whether `policy`, for `party`, settles at `suggestion`: it opted in, and the suggestion is
/// within its price limit and, with a utility, at or above its reservation utility.
pub fn policy_accepts(policy: &Policy, party: Party, listing: &Listing, suggestion: &api::Suggestion) -> bool {
    let issues = listing.issues();
    let Some(offer) = issues.offer(suggestion.amount, suggestion.terms.as_ref()) else {
        return false;
    };
    let valuation = policy.valuation(party, &issues, listing.ask_amount);
    policy.accept_mediation && deadlock::agrees(party, policy.limit, valuation.as_ref(), &offer)
}
