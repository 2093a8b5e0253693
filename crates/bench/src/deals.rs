//! The `deals` workload: a deal carried through from the handshake to its end. One unit is one
//! deal, made as a list of steps, each step the calls of one part of the order's life: the price
//! negotiated, a handover scheduled, a plan of two installments agreed and paid, the order
//! fulfilled, a refund disputed and settled, the order completed. Another part of the life is
//! one more step in [`STEPS`] and its arm in [`Step::run`].

use chrono::{Duration, Utc};
use serde_json::json;
use uuid::Uuid;

use super::api::{CallFailed, timed};
use super::args::BenchArgs;
use super::level::{self, Making, Moves};
use super::report::LevelReport;
use super::stats::{Call, Recorder};
use super::workload::{OPENING_BID, Parties, SELLER_COUNTER, Workload};
use haggle_client::{Acceptance, Client, CounterOffer, Fulfil, NewPayment, OpenNegotiation, Order, Placement};
use haggle_domain::ThreadKind;

/// The first of the plan's two installments (and so of the two payments); the second is the rest.
pub const FIRST_PAYMENT: i64 = 50_000;
/// The refund the buyer asks for, and the seller's answer to it, which the buyer accepts.
pub const REFUND_ASKED: i64 = 20_000;
pub const REFUND_COUNTERED: i64 = 8_000;
// The seller's counter concedes toward the buyer's ask, which was paid.
const _: () = assert!(REFUND_COUNTERED < REFUND_ASKED && REFUND_ASKED <= FIRST_PAYMENT);

/// One part of a deal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The buyer bids, the seller counters, the buyer accepts: the order.
    Negotiate,
    /// The seller proposes two handover windows, the buyer takes the second: the appointment.
    Schedule,
    /// The buyer proposes a plan of two installments (a part in a week, the rest in two), the
    /// seller accepts it: the order's payment plan.
    Plan,
    /// The buyer records a payment for each installment and the seller confirms each.
    Pay,
    /// The seller fulfils the order.
    Fulfil,
    /// The buyer disputes the deal with a refund, the seller counters, the buyer accepts.
    Refund,
    /// The buyer completes the order.
    Complete,
}

/// A deal's steps, in order.
pub const STEPS: &[Step] =
    &[Step::Negotiate, Step::Schedule, Step::Plan, Step::Pay, Step::Fulfil, Step::Refund, Step::Complete];

/// What the steps so far made: the order, once negotiated.
#[derive(Debug, Default)]
pub struct Deal {
    pub order: Option<Order>,
}

impl Step {
    /// Makes this step's calls, timed into `recorder`.
    pub async fn run(
        self,
        parties: &Parties,
        listing: Uuid,
        deal: &mut Deal,
        recorder: &mut Recorder,
    ) -> Result<(), CallFailed> {
        let (buyer, seller) = (&parties.buyer, &parties.seller);
        if self == Step::Negotiate {
            let placed = timed(recorder, Call::Place, buyer.place_bid(listing, &Placement::new(OPENING_BID))).await?;
            let offer = CounterOffer::new(SELLER_COUNTER, false);
            let countered = timed(recorder, Call::Counter, seller.counter(placed.bid.id, &offer)).await?;
            let accepted = timed(recorder, Call::Accept, buyer.accept(countered.bid.id)).await?;
            deal.order = accepted.order;
            return if deal.order.is_some() { Ok(()) } else { Err(CallFailed) };
        }
        let Some(order) = &deal.order else { return Err(CallFailed) };
        let id = order.id;
        match self {
            Step::Negotiate => unreachable!("negotiated above"),
            Step::Schedule => {
                let day =
                    |days: i64, hours: i64| (Utc::now() + Duration::days(days) + Duration::hours(hours)).to_rfc3339();
                let windows =
                    json!([{ "start": day(1, 0), "end": day(1, 2) }, { "start": day(2, 0), "end": day(2, 2) }]);
                let opening =
                    negotiation(ThreadKind::Schedule, None, json!({ "windows": windows, "method": "pickup" }));
                let proposed = timed(recorder, Call::Open, seller.open_negotiation(id, &opening)).await?;
                timed(recorder, Call::Accept, buyer.accept_with(proposed.bid.id, &Acceptance::choosing(1))).await?;
            }
            Step::Plan => {
                let due = |days: i64| (Utc::now() + Duration::days(days)).to_rfc3339();
                let installments = json!([
                    { "amount": FIRST_PAYMENT, "due": due(7) },
                    { "amount": order.amount - FIRST_PAYMENT, "due": due(14) },
                ]);
                let opening = negotiation(ThreadKind::Installments, None, json!({ "installments": installments }));
                let proposed = timed(recorder, Call::Open, buyer.open_negotiation(id, &opening)).await?;
                timed(recorder, Call::Accept, seller.accept(proposed.bid.id)).await?;
            }
            Step::Pay => {
                for amount in [FIRST_PAYMENT, order.amount - FIRST_PAYMENT] {
                    let payment = NewPayment { amount: amount.into(), reference: format!("bench {}", Uuid::now_v7()) };
                    let paid = timed(recorder, Call::Pay, buyer.record_payment(id, &payment)).await?;
                    timed(recorder, Call::Confirm, seller.confirm_payment(id, paid.payment.id)).await?;
                }
            }
            Step::Fulfil => {
                timed(recorder, Call::Fulfil, seller.fulfil_order(id, &Fulfil::default())).await?;
            }
            Step::Refund => {
                let opening = negotiation(ThreadKind::Refund, Some(REFUND_ASKED), json!({ "reason": "damaged" }));
                let asked = timed(recorder, Call::Open, buyer.open_negotiation(id, &opening)).await?;
                let offer = CounterOffer::new(REFUND_COUNTERED, false);
                let countered = timed(recorder, Call::Counter, seller.counter(asked.bid.id, &offer)).await?;
                timed(recorder, Call::Accept, buyer.accept(countered.bid.id)).await?;
            }
            Step::Complete => {
                timed(recorder, Call::Complete, buyer.complete_order(id)).await?;
            }
        }
        Ok(())
    }
}

/// The opening of a negotiation on an order.
fn negotiation(kind: ThreadKind, amount: Option<i64>, terms: serde_json::Value) -> OpenNegotiation {
    OpenNegotiation { kind, amount: amount.map(Into::into), terms, message: None, expires_in: None, is_final: None }
}

/// A worker's way of making a unit: one deal, step after step; the first failure ends it.
pub struct DealMoves;

impl Moves for DealMoves {
    async fn make(&self, parties: &Parties, listing: Uuid, recorder: &mut Recorder) -> Result<(), CallFailed> {
        let mut deal = Deal::default();
        for step in STEPS {
            step.run(parties, listing, &mut deal, recorder).await?;
        }
        Ok(())
    }
}

/// A level: the workers set up as W1's (a seller and an AGENCY buyer each, and their
/// listings), warmed up and measured.
pub async fn run_level(
    client: &Client,
    admin: &Client,
    args: &BenchArgs,
    run_id: &str,
    concurrency: usize,
) -> anyhow::Result<LevelReport> {
    let label = format!("[{} c={concurrency}]", Workload::Deals.name());
    let (workers, listings_per_worker) = level::set_up_workers(client, admin, args, run_id, concurrency).await?;
    let making = workers.into_iter().map(|worker| Making { worker, moves: DealMoves }).collect();
    let (_, level) = level::measure_level(client, args, &label, Workload::Deals, listings_per_worker, making).await?;
    Ok(level)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deal_negotiates_first_and_completes_last_and_reports_every_call_it_makes() {
        assert_eq!(STEPS.first(), Some(&Step::Negotiate));
        assert_eq!(STEPS.last(), Some(&Step::Complete));
        // The refund comes after the payments it refunds, and the completion after fulfilment.
        let at = |step| STEPS.iter().position(|s| *s == step).unwrap();
        assert!(at(Step::Pay) < at(Step::Refund) && at(Step::Fulfil) < at(Step::Complete));
        // A handover is scheduled and a plan agreed before fulfilment, the plan before its payments.
        assert!(at(Step::Schedule) < at(Step::Fulfil) && at(Step::Plan) < at(Step::Pay));
        let names: Vec<&str> = Workload::Deals.calls().iter().map(|call| call.name()).collect();
        assert_eq!(names, ["place", "counter", "accept", "pay", "confirm", "fulfil", "open", "complete"]);
    }
}
