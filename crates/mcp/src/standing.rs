//! Where a negotiation stands for one of its parties: whose move it is, which moves the bid
//! state machine allows them now, and the amounts a counter may have. Decided by the domain's
//! rules (`bid::apply`, `bid::Positions::counter_range`), never restated here.

use chrono::Utc;
use haggle_client::{Bid, ClientError, Listing, ThreadWithBids};
use haggle_domain::bid::{self, Action, Actor, BidState};
use haggle_domain::order_negotiation;
use haggle_domain::{BidStatus, Party, ThreadKind, ThreadStatus};
use serde::Serialize;
use uuid::Uuid;

use crate::caller::Acting;

#[derive(Debug, Clone, Serialize)]
pub(crate) struct Standing {
    /// The caller's side of the negotiation.
    pub you: Party,
    pub status: ThreadStatus,
    /// Whose move it is while the thread is ACTIVE.
    pub turn: Option<Party>,
    pub your_turn: bool,
    /// The bid waiting for an answer, if any.
    pub pending_bid: Option<PendingBid>,
    /// The tools that may make a move on the pending bid now, for the caller.
    pub moves: Vec<&'static str>,
    /// The amounts a counter by the caller may have, both included.
    pub counter_range: Option<CounterRange>,
    /// Bids so far, and the most the listing allows (the bid at the last round is final).
    pub rounds: i32,
    pub max_rounds: Option<i32>,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct PendingBid {
    pub id: Uuid,
    pub author: Party,
    pub amount: i64,
    pub currency: haggle_domain::Currency,
    #[serde(rename = "final")]
    pub is_final: bool,
    pub expires_at: chrono::DateTime<Utc>,
}

#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct CounterRange {
    pub min: i64,
    pub max: i64,
}

/// The tools that make each move on a pending bid.
const MOVES: [(Action, &str); 4] = [
    (Action::Counter, "counter_bid"),
    (Action::Accept, "accept_bid"),
    (Action::Reject, "reject_bid"),
    (Action::Withdraw, "withdraw_bid"),
];

/// Which side `agent` is on, if it is a party at all.
pub(crate) fn side(thread: &haggle_client::Thread, agent: Uuid) -> Option<Party> {
    if thread.buyer_id == agent {
        Some(Party::Buyer)
    } else if thread.seller_id == agent {
        Some(Party::Seller)
    } else {
        None
    }
}

/// A thread and the caller's standing in it, with the listing a live thread's standing needs
/// (its ask is the seller's first position, its `max_rounds` the last round).
pub(crate) async fn read(acting: &Acting, thread_id: Uuid) -> Result<(ThreadWithBids, Standing), ClientError> {
    let thread = acting.client.get_thread(thread_id).await?;
    let listing = match thread.thread.status {
        ThreadStatus::Active => Some(acting.client.get_listing(thread.thread.listing_id).await?),
        ThreadStatus::Accepted | ThreadStatus::Rejected | ThreadStatus::Expired | ThreadStatus::Closed => None,
    };
    // The API shows a thread to its two parties only.
    let you = side(&thread.thread, acting.agent_id).unwrap_or(Party::Buyer);
    let standing = standing(&thread, you, listing.as_ref());
    Ok((thread, standing))
}

/// The standing of `you` in `thread`; `listing` gives the seller's first position (the ask)
/// and the round limit.
pub(crate) fn standing(thread: &ThreadWithBids, you: Party, listing: Option<&Listing>) -> Standing {
    let now = Utc::now();
    let pending = thread.bids.iter().rev().find(|bid| bid.status == BidStatus::Pending);
    let live = thread.thread.status == ThreadStatus::Active;
    let mut moves = Vec::new();
    let mut counter_range = None;
    if let (true, Some(pending)) = (live, pending) {
        let state = BidState {
            status: pending.status,
            author: pending.author,
            is_final: pending.is_final,
            expires_at: pending.expires_at,
        };
        for (action, tool) in MOVES {
            if bid::apply(&state, action, Actor::Party(you), now).is_ok() {
                if action == Action::Counter {
                    let Some((min, max)) = counter_range_of(thread, pending, you, listing) else { continue };
                    if min > max {
                        continue;
                    }
                    counter_range = Some(CounterRange { min, max });
                }
                moves.push(tool);
            }
        }
    }
    let turn = if live { thread.thread.turn } else { None };
    Standing {
        you,
        status: thread.thread.status,
        turn,
        your_turn: turn == Some(you),
        pending_bid: pending.filter(|_| live).map(|bid| PendingBid {
            id: bid.id,
            author: bid.author,
            amount: bid.amount,
            currency: bid.currency,
            is_final: bid.is_final,
            expires_at: bid.expires_at,
        }),
        moves,
        counter_range,
        rounds: thread.thread.rounds,
        max_rounds: listing.map(|listing| listing.max_rounds),
    }
}

/// The amounts `you` may counter `pending` with, by the rule of the thread's kind: a price's
/// (`bid::Positions::range_on`, under the listing's concession rule), or a refund's, which concedes the other way
/// (`order_negotiation::refund_counter_range`, the seller starting from nothing back). A
/// cancellation is never countered; a schedule's and a plan's counters name no amount.
fn counter_range_of(
    thread: &ThreadWithBids,
    pending: &Bid,
    you: Party,
    listing: Option<&Listing>,
) -> Option<(i64, i64)> {
    match thread.thread.kind {
        ThreadKind::Price => {
            let previous = own_previous(&thread.bids, you, listing)?;
            let positions = bid::Positions { pending: pending.amount, own_previous: previous };
            // Without the listing, the strict range: within every rule's.
            Some(match listing {
                Some(listing) => positions
                    .range_on(you, bid::CounterTerms { rule: listing.concession_rule, ask: listing.ask_amount }),
                None => positions.counter_range(you),
            })
        }
        ThreadKind::Refund => {
            let previous = thread
                .bids
                .iter()
                .rev()
                .find(|bid| bid.author == you)
                .map_or(order_negotiation::SELLER_FIRST_POSITION, |bid| bid.amount);
            Some(order_negotiation::refund_counter_range(
                you,
                bid::Positions { pending: pending.amount, own_previous: previous },
            ))
        }
        ThreadKind::Cancel | ThreadKind::Schedule | ThreadKind::Installments => None,
    }
}

/// The mover's previous position: its latest bid, or for a seller who has not bid yet, the ask.
fn own_previous(bids: &[Bid], you: Party, listing: Option<&Listing>) -> Option<i64> {
    match bids.iter().rev().find(|bid| bid.author == you) {
        Some(bid) => Some(bid.amount),
        None => match you {
            Party::Seller => listing.map(|listing| listing.ask_amount),
            Party::Buyer => None,
        },
    }
}

/// The standing in a sentence.
pub(crate) fn describe(standing: &Standing) -> String {
    let you = standing.you.as_str();
    if standing.status != ThreadStatus::Active {
        return format!("You are the {you}; the negotiation has ended ({}).", standing.status);
    }
    let Some(pending) = &standing.pending_bid else {
        return format!("You are the {you}; the negotiation is ACTIVE.");
    };
    let finality = if pending.is_final { " It is a final offer." } else { "" };
    let bid = format!(
        "The pending bid is the {}'s {} (round {}), expiring at {}.{finality}",
        pending.author.as_str(),
        crate::answer::money(pending.amount, pending.currency),
        standing.rounds,
        pending.expires_at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    );
    if standing.your_turn {
        let range = standing
            .counter_range
            .map(|range| format!(" A counter may be from {} to {}.", range.min, range.max))
            .unwrap_or_default();
        format!("You are the {you} and it is your turn. {bid} You may: {}.{range}", standing.moves.join(", "))
    } else {
        format!(
            "You are the {you}; it is the {}'s turn. {bid} Call wait_for_turn to wait for the answer{}.",
            pending.author.other().as_str(),
            if standing.moves.contains(&"withdraw_bid") { ", or withdraw_bid to take your bid back" } else { "" }
        )
    }
}
