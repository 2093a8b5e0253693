//! A proposal as the compatibility routes show it, and its three renderings: the proposal's
//! answer, the legacy flat answer with prices in currency units, and the messages route's
//! nested round with `Money` prices.
//!
//! IAB clients count rounds as exchanges: one buyer price and the seller's answer. The buyer's
//! opening bid is round 1, each buyer counter the next, and a buyer's accept or reject of the
//! seller's price one more. `rounds_remaining` is how many counters the seller's policy may
//! still make (its `max_auto_rounds` less those it made, and no more than the listing's
//! `max_rounds` leaves); a seller counter with none left is its last word, shown as
//! `final_offer` like a counter marked final.

use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgConnection;
use uuid::Uuid;

use super::super::Reply;
use crate::db::agents::Caller;
use crate::db::{self};
use crate::market::{self};
use haggle_api as api;
use haggle_domain::money;
use haggle_domain::strategy::Policy;
use haggle_domain::{BidStatus, Currency, Party, Reason, Rejection, ThreadStatus};

/// A move of the negotiation, as IAB clients name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum IabMove {
    Counter,
    Accept,
    Reject,
    FinalOffer,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Active,
    Accepted,
    Rejected,
    Expired,
}

impl From<ThreadStatus> for Status {
    fn from(status: ThreadStatus) -> Status {
        match status {
            ThreadStatus::Active => Status::Active,
            ThreadStatus::Accepted => Status::Accepted,
            ThreadStatus::Rejected | ThreadStatus::Closed => Status::Rejected,
            ThreadStatus::Expired => Status::Expired,
        }
    }
}

/// What the seller's policy has left to give, as far as the compatibility routes tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Counters the policy may still make; `None` without a policy.
    pub policy_counters: Option<i64>,
    pub max_rounds: i32,
}

/// A proposal as the compatibility routes show it, amounts in minor units.
#[derive(Debug, Clone, PartialEq)]
pub struct View {
    pub thread_id: Uuid,
    pub status: Status,
    /// Exchanges so far.
    pub round: i32,
    pub rounds_remaining: Option<i32>,
    pub currency: Currency,
    pub buyer_price: i64,
    pub seller_price: Option<i64>,
    /// The latest move: the seller's answer, or the buyer's accept or decline; `None` while the
    /// buyer's bid waits for the seller.
    pub action: Option<IabMove>,
    pub rationale: Option<String>,
    /// The buyer's pending bid, while it waits for the seller's answer.
    pub awaiting: Option<Uuid>,
    /// The seller's price that waits for the buyer's answer.
    pub standing: Option<i64>,
    /// The seller's concession in its latest counter, and since the ask, in percent.
    pub concession_pct: f64,
    pub cumulative_concession_pct: f64,
    /// When the latest move was made.
    pub at: DateTime<Utc>,
    /// The thread's latest bid (its pending one while it is live), and who made it.
    pub last_bid: Uuid,
    pub last_author: Party,
}

/// What the thread's bids say, before the seller's rationale is looked up.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    pub round: i32,
    pub buyer_price: i64,
    pub seller_price: Option<i64>,
    pub action: Option<IabMove>,
    /// The buyer's bid that the seller's latest move answered, if that move is the latest.
    pub answered_by_seller: Option<Uuid>,
    /// The message of the seller's latest counter, if that counter is the latest move.
    pub seller_message: Option<String>,
    pub awaiting: Option<Uuid>,
    pub standing: Option<i64>,
    pub accepted: bool,
    pub rounds_remaining: Option<i32>,
    pub concession_pct: f64,
    pub cumulative_concession_pct: f64,
}

/// `part` of `whole` in percent, to two decimals.
fn percent(part: i64, whole: i64) -> f64 {
    if whole <= 0 { 0.0 } else { (part as f64 * 10_000.0 / whole as f64).round() / 100.0 }
}

/// Reads the latest move off the thread's bids (in round order, with their effective
/// statuses), given the listing's ask and the seller's budget.
pub fn summarize(bids: &[api::Bid], ask: i64, budget: Budget) -> Summary {
    let latest_of = |party: Party| bids.iter().rev().find(|bid| bid.author == party).map(|bid| bid.amount);
    let seller_prices: Vec<i64> = bids.iter().filter(|bid| bid.author == Party::Seller).map(|bid| bid.amount).collect();
    let buyer_bids = bids.iter().filter(|bid| bid.author == Party::Buyer).count() as i32;
    let mut summary = Summary {
        round: buyer_bids.max(1),
        buyer_price: latest_of(Party::Buyer).unwrap_or_default(),
        seller_price: latest_of(Party::Seller),
        action: None,
        answered_by_seller: None,
        seller_message: None,
        awaiting: None,
        standing: None,
        accepted: false,
        rounds_remaining: Some(0),
        concession_pct: 0.0,
        cumulative_concession_pct: 0.0,
    };
    if let Some(&latest) = seller_prices.last() {
        summary.cumulative_concession_pct = percent(ask - latest, ask);
    }
    let Some(last) = bids.last() else { return summary };
    match (last.author, last.status) {
        (Party::Seller, BidStatus::Pending) => {
            // The seller's counters left after this one: its policy's, and the listing's
            // (the even rounds still to come).
            let by_listing = i64::from(budget.max_rounds / 2 - last.round / 2).max(0);
            let left = match budget.policy_counters {
                _ if last.is_final => Some(0),
                Some(counters) => Some(counters.min(by_listing).max(0)),
                None => None,
            };
            summary.rounds_remaining = left.map(|left| left as i32);
            summary.action = Some(if left == Some(0) { IabMove::FinalOffer } else { IabMove::Counter });
            summary.answered_by_seller = last.parent_bid_id;
            summary.seller_message = last.message.clone();
            summary.standing = Some(last.amount);
            let previous = seller_prices.iter().rev().nth(1).copied().unwrap_or(ask);
            summary.concession_pct = percent(previous - last.amount, previous);
        }
        (Party::Buyer, BidStatus::Pending) => {
            summary.awaiting = Some(last.id);
            summary.rounds_remaining = budget
                .policy_counters
                .map(|counters| counters.min(i64::from(budget.max_rounds / 2 - last.round / 2)).max(0) as i32);
        }
        // Out of time, on either side: nothing more can happen.
        (_, BidStatus::Expired) => summary.action = Some(IabMove::Reject),
        (author, BidStatus::Accepted) => {
            summary.action = Some(IabMove::Accept);
            summary.answered_by_seller = (author == Party::Buyer).then_some(last.id);
            // Both sides now stand at the agreed price.
            summary.buyer_price = last.amount;
            summary.seller_price = Some(last.amount);
            summary.accepted = true;
            if author == Party::Seller {
                summary.round += 1;
            }
        }
        (author, BidStatus::Rejected) => {
            summary.action = Some(IabMove::Reject);
            let rejected = last.reason == Some(Reason::Rejected);
            summary.answered_by_seller = (author == Party::Buyer && rejected).then_some(last.id);
            if author == Party::Seller && rejected {
                summary.round += 1;
            }
        }
        // A countered bid is never a thread's latest.
        (_, BidStatus::Countered) => {}
    }
    summary
}

impl View {
    /// The proposal as it is now, read with the caller's visibility.
    pub async fn read(conn: &mut PgConnection, caller: Caller, thread_id: Uuid) -> market::Result<View> {
        let not_found = || Rejection::NotFound { what: "proposal" };
        let (thread, bids) =
            db::threads::get_thread_with_bids(&mut *conn, thread_id, Some(caller.id)).await?.ok_or_else(not_found)?;
        let listing = db::listings::get(&mut *conn, thread.listing_id).await?.ok_or_else(not_found)?;
        let stored = db::policies::seller_budget(&mut *conn, thread_id).await?;
        let policy = stored.policy.and_then(|policy| serde_json::from_value::<Policy>(policy.0).ok());
        let budget = Budget {
            policy_counters: policy.map(|policy| match policy.require_approval {
                true => 0,
                false => i64::from(policy.max_auto_rounds) - stored.auto_counters,
            }),
            max_rounds: stored.max_rounds,
        };
        let now = Utc::now();
        let thread = thread.at(now);
        let bids: Vec<api::Bid> = bids.iter().map(|bid| bid.at(now)).collect();
        let summary = summarize(&bids, listing.ask_amount, budget);
        let policy_rationale = match summary.answered_by_seller {
            Some(bid_id) => db::policies::rationale(conn, thread.id, thread.seller_id, bid_id).await?,
            None => None,
        };
        let status = Status::from(thread.status);
        let rationale = policy_rationale.or(summary.seller_message).or_else(|| match status {
            Status::Accepted => Some(format!(
                "Deal confirmed at {} {}: order it with POST /api/v1/quotes (target_cpm at this price), then \
                 POST /api/v1/deals.",
                money::price_text(summary.buyer_price),
                listing.currency
            )),
            Status::Expired => Some("The negotiation ran out of time.".to_owned()),
            Status::Active | Status::Rejected => None,
        });
        Ok(View {
            thread_id: thread.id,
            status,
            round: summary.round,
            rounds_remaining: if status == Status::Active { summary.rounds_remaining } else { Some(0) },
            currency: listing.currency,
            buyer_price: summary.buyer_price,
            seller_price: summary.seller_price,
            action: summary.action,
            rationale,
            awaiting: summary.awaiting,
            standing: summary.standing.filter(|_| status == Status::Active),
            concession_pct: summary.concession_pct,
            cumulative_concession_pct: summary.cumulative_concession_pct,
            at: bids.last().map_or(thread.updated_at, |bid| bid.updated_at),
            last_bid: thread.last_bid_id,
            last_author: bids.last().map_or(Party::Buyer, |bid| bid.author),
        })
    }

    /// The seller's last word restated to a buyer that countered it: nothing was recorded, and
    /// the offer still waits for an accept or a reject.
    pub fn restating(mut self, refused: i64) -> View {
        self.buyer_price = refused;
        self.action = Some(IabMove::FinalOffer);
        self.rounds_remaining = Some(0);
        self.concession_pct = 0.0;
        self.rationale = Some(format!(
            "This is the seller's final offer, {} {}: accept it or reject it. Your counter was not recorded.",
            self.seller_price.map(money::price_text).unwrap_or_default(),
            self.currency
        ));
        self
    }

    /// The proposal after the server withdrew the buyer's bid that the seller did not answer.
    pub fn unanswered(mut self, waited: std::time::Duration) -> View {
        self.rationale = Some(format!(
            "The seller did not answer within {} s, so your bid was withdrawn and the negotiation ended.",
            waited.as_secs()
        ));
        self
    }

    fn flat<P>(&self, price: impl Fn(i64) -> P) -> Flat<P> {
        Flat {
            negotiation_id: self.thread_id,
            proposal_id: self.thread_id,
            round_number: self.round,
            buyer_price: price(self.buyer_price),
            seller_price: self.seller_price.map(&price),
            action: self.action,
            rationale: self.rationale.clone(),
            status: self.status,
            rounds_remaining: self.rounds_remaining,
        }
    }

    /// `202` only if the seller's answer could not be read after the buyer's move committed.
    fn status_code(&self, answered: StatusCode) -> StatusCode {
        if self.awaiting.is_some() { StatusCode::ACCEPTED } else { answered }
    }

    fn money(&self, minor: i64) -> Money {
        Money { amount_micros: money::micros_from_minor_units(minor), currency: self.currency }
    }
}

/// `Money` on the `/api/v1` routes.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Money {
    pub amount_micros: i64,
    pub currency: Currency,
}

/// The legacy flat answer.
#[derive(Debug, Serialize)]
struct Flat<P> {
    negotiation_id: Uuid,
    proposal_id: Uuid,
    round_number: i32,
    buyer_price: P,
    seller_price: Option<P>,
    action: Option<IabMove>,
    rationale: Option<String>,
    status: Status,
    rounds_remaining: Option<i32>,
}

/// The legacy counter route's answer, prices in currency units.
pub fn render_legacy(view: &View) -> Reply {
    Reply::json(view.status_code(StatusCode::OK), &view.flat(money::price_from_minor_units))
}

/// The messages route's answer: the round as an object, both prices as `Money`.
#[derive(Debug, Serialize)]
struct Message {
    negotiation_id: Uuid,
    proposal_id: Uuid,
    status: Status,
    round: Round,
    rounds_remaining: Option<i32>,
}

#[derive(Debug, Serialize)]
struct Round {
    round_number: i32,
    buyer_price: Money,
    seller_price: Money,
    action: Option<IabMove>,
    concession_pct: f64,
    cumulative_concession_pct: f64,
    rationale: String,
    timestamp: DateTime<Utc>,
}

pub fn render_message(view: &View) -> Reply {
    let message = Message {
        negotiation_id: view.thread_id,
        proposal_id: view.thread_id,
        status: view.status,
        round: Round {
            round_number: view.round,
            buyer_price: view.money(view.buyer_price),
            // Both prices are always given: without a seller price yet, the buyer's stands.
            seller_price: view.money(view.seller_price.unwrap_or(view.buyer_price)),
            action: view.action,
            concession_pct: view.concession_pct,
            cumulative_concession_pct: view.cumulative_concession_pct,
            rationale: view.rationale.clone().unwrap_or_default(),
            timestamp: view.at,
        },
        rounds_remaining: view.rounds_remaining,
    };
    Reply::json(view.status_code(StatusCode::OK), &message)
}

/// `POST /proposals`' answer.
#[derive(Debug, Serialize)]
struct Proposal {
    proposal_id: Uuid,
    negotiation_id: Uuid,
    status: Status,
    /// The seller's answer: a final offer is a counter here (`counter_terms.action` tells).
    recommendation: Option<IabMove>,
    counter_terms: Option<CounterTerms>,
    round_number: i32,
    buyer_price: f64,
    seller_price: Option<f64>,
    action: Option<IabMove>,
    rationale: Option<String>,
    rounds_remaining: Option<i32>,
}

#[derive(Debug, Serialize)]
struct CounterTerms {
    proposed_price: f64,
    negotiation_id: Uuid,
    round_number: i32,
    action: IabMove,
    rounds_remaining: Option<i32>,
}

pub fn render_proposal(view: &View) -> Reply {
    let flat = view.flat(money::price_from_minor_units);
    let countered = matches!(view.action, Some(IabMove::Counter | IabMove::FinalOffer));
    let reply = Proposal {
        proposal_id: flat.proposal_id,
        negotiation_id: flat.negotiation_id,
        status: flat.status,
        recommendation: view.action.map(|action| if countered { IabMove::Counter } else { action }),
        counter_terms: match (countered, view.action, flat.seller_price) {
            (true, Some(action), Some(proposed_price)) => Some(CounterTerms {
                proposed_price,
                negotiation_id: flat.negotiation_id,
                round_number: flat.round_number,
                action,
                rounds_remaining: flat.rounds_remaining,
            }),
            _ => None,
        },
        round_number: flat.round_number,
        buyer_price: flat.buyer_price,
        seller_price: flat.seller_price,
        action: flat.action,
        rationale: flat.rationale,
        rounds_remaining: flat.rounds_remaining,
    };
    Reply::json(view.status_code(StatusCode::CREATED), &reply)
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;
    use haggle_api::Bid;

    const ASK: i64 = 4000;

    fn bid(round: i32, amount: i64, status: BidStatus, reason: Option<Reason>, is_final: bool) -> Bid {
        let at = Utc.with_ymd_and_hms(2030, 1, 1, 0, 0, 0).unwrap();
        Bid {
            id: Uuid::from_u128(round as u128),
            thread_id: Uuid::nil(),
            author: Party::author_of_round(round),
            author_id: Uuid::nil(),
            kind: Default::default(),
            amount,
            currency: Currency::USD,
            message: (round % 2 == 0).then(|| format!("seller note {round}")),
            terms: None,
            is_final,
            status,
            reason,
            parent_bid_id: (round > 1).then(|| Uuid::from_u128(round as u128 - 1)),
            round,
            expires_at: at,
            responded_at: None,
            approval: None,
            created_at: at,
            updated_at: at,
        }
    }

    fn countered(round: i32, amount: i64) -> Bid {
        bid(round, amount, BidStatus::Countered, Some(Reason::Countered), false)
    }

    fn pending(round: i32, amount: i64) -> Bid {
        bid(round, amount, BidStatus::Pending, None, false)
    }

    /// A seller policy with `counters` left, on a listing of ten rounds.
    fn budget(counters: i64) -> Budget {
        Budget { policy_counters: Some(counters), max_rounds: 10 }
    }

    #[test]
    fn the_latest_move_is_read_off_the_bids() {
        use BidStatus::*;
        let id = Uuid::from_u128;
        // (bids, action, answered by the seller, awaiting, buyer price, seller price, round)
        type Case = (Vec<Bid>, Option<IabMove>, Option<Uuid>, Option<Uuid>, i64, Option<i64>, i32);
        let cases: Vec<Case> = vec![
            (vec![pending(1, 2000)], None, None, Some(id(1)), 2000, None, 1),
            (
                vec![bid(1, 2000, Expired, Some(Reason::Expired), false)],
                Some(IabMove::Reject),
                None,
                None,
                2000,
                None,
                1,
            ),
            (
                vec![countered(1, 2000), pending(2, 3200)],
                Some(IabMove::Counter),
                Some(id(1)),
                None,
                2000,
                Some(3200),
                1,
            ),
            (
                vec![countered(1, 2000), bid(2, 3200, Pending, None, true)],
                Some(IabMove::FinalOffer),
                Some(id(1)),
                None,
                2000,
                Some(3200),
                1,
            ),
            (
                vec![countered(1, 2000), countered(2, 3200), pending(3, 2200)],
                None,
                None,
                Some(id(3)),
                2200,
                Some(3200),
                2,
            ),
            (
                vec![countered(1, 2000), countered(2, 3200), bid(3, 2200, Accepted, Some(Reason::Accepted), false)],
                Some(IabMove::Accept),
                Some(id(3)),
                None,
                2200,
                Some(2200),
                2,
            ),
            // The buyer's accept of the seller's price is one more exchange.
            (
                vec![countered(1, 2000), bid(2, 2800, Accepted, Some(Reason::Accepted), false)],
                Some(IabMove::Accept),
                None,
                None,
                2800,
                Some(2800),
                2,
            ),
            (
                vec![bid(1, 2000, Rejected, Some(Reason::Rejected), false)],
                Some(IabMove::Reject),
                Some(id(1)),
                None,
                2000,
                None,
                1,
            ),
            (
                vec![bid(1, 2000, Rejected, Some(Reason::Withdrawn), false)],
                Some(IabMove::Reject),
                None,
                None,
                2000,
                None,
                1,
            ),
            (
                vec![countered(1, 2000), bid(2, 3200, Rejected, Some(Reason::Rejected), false)],
                Some(IabMove::Reject),
                None,
                None,
                2000,
                Some(3200),
                2,
            ),
        ];
        for (i, (bids, action, answered, awaiting, buyer_price, seller_price, round)) in cases.into_iter().enumerate() {
            let summary = summarize(&bids, ASK, budget(4));
            assert_eq!(summary.action, action, "case {i}");
            assert_eq!(summary.answered_by_seller, answered, "case {i}");
            assert_eq!(summary.awaiting, awaiting, "case {i}");
            assert_eq!((summary.buyer_price, summary.seller_price), (buyer_price, seller_price), "case {i}");
            assert_eq!(summary.round, round, "case {i}");
        }
    }

    #[test]
    fn rounds_remaining_are_the_seller_policys_counters_left() {
        let two = [countered(1, 2000), pending(2, 3600)];
        assert_eq!(summarize(&two, ASK, budget(4)).rounds_remaining, Some(4));
        // The listing leaves fewer: rounds 4 and 6 of 6.
        let short = Budget { policy_counters: Some(4), max_rounds: 6 };
        assert_eq!(summarize(&two, ASK, short).rounds_remaining, Some(2));
        // No policy: unknown.
        let none = Budget { policy_counters: None, max_rounds: 10 };
        assert_eq!(summarize(&two, ASK, none).rounds_remaining, None);
        assert_eq!(summarize(&two, ASK, none).action, Some(IabMove::Counter));
        // None left: the counter is the seller's last word.
        let last = summarize(&two, ASK, budget(0));
        assert_eq!((last.rounds_remaining, last.action), (Some(0), Some(IabMove::FinalOffer)));
        // A counter marked final is one whatever the policy has left.
        let marked = summarize(&[countered(1, 2000), bid(2, 3600, BidStatus::Pending, None, true)], ASK, budget(4));
        assert_eq!((marked.rounds_remaining, marked.action), (Some(0), Some(IabMove::FinalOffer)));
        // While the buyer's bid waits, the seller's next counter is still to come.
        let waiting = [countered(1, 2000), countered(2, 3600), pending(3, 2200)];
        assert_eq!(summarize(&waiting, ASK, budget(3)).rounds_remaining, Some(3));
    }

    #[test]
    fn concessions_are_measured_from_the_sellers_previous_price() {
        let first = summarize(&[countered(1, 2000), pending(2, 3600)], ASK, budget(4));
        assert_eq!((first.concession_pct, first.cumulative_concession_pct), (10.0, 10.0));
        let second =
            summarize(&[countered(1, 2000), countered(2, 3600), countered(3, 2200), pending(4, 3420)], ASK, budget(3));
        assert_eq!((second.concession_pct, second.cumulative_concession_pct), (5.0, 14.5));
        assert_eq!(percent(1, 3), 33.33);
        assert_eq!(percent(1, 0), 0.0);
    }

    #[test]
    fn a_seller_counter_carries_its_message() {
        let summary = summarize(&[countered(1, 2000), pending(2, 3200)], ASK, budget(4));
        assert_eq!(summary.seller_message.as_deref(), Some("seller note 2"));
        assert_eq!(summary.standing, Some(3200));
    }

    #[test]
    fn thread_statuses_map_to_iab_statuses() {
        for (status, expected) in [
            (ThreadStatus::Active, Status::Active),
            (ThreadStatus::Accepted, Status::Accepted),
            (ThreadStatus::Rejected, Status::Rejected),
            (ThreadStatus::Closed, Status::Rejected),
            (ThreadStatus::Expired, Status::Expired),
        ] {
            assert_eq!(Status::from(status), expected);
        }
    }
}
