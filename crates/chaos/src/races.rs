//! Races: a buyer's pending bid, then at once the seller's accept, reject and counter, each
//! sent straight to a different instance, and the buyer's withdrawal through the balancer. Of
//! the four exactly one may win; the others must be refused with 409 (or, during a fault, be
//! left unanswered or answered 503). Races are paced evenly over the run, so that they meet
//! every fault.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::http::{Agent, Endpoint, Outcome, Request, Verdict, verdict};
use super::market::{Answer, Moves};
use super::negotiations::{Listings, OPENING_BID, Pair, SELLER_COUNTER};
use super::record::{Ack, MoveKind, Race, Racer, Workload};
use haggle_api::{Answered, BidAndThread};

/// Races to run, shared by the race workers, and when each may start.
pub struct Plan {
    pub next: AtomicU64,
    pub total: u64,
    pub start: Instant,
    pub spacing: Duration,
}

/// Runs races from `plan` until they are all taken, or `abort`.
pub async fn run(
    moves: Moves,
    pair: Pair,
    instances: Vec<Endpoint>,
    plan: Arc<Plan>,
    index: usize,
    abort: CancellationToken,
) {
    let mut listings = Listings::new(format!("race lot {index}"), None);
    loop {
        let number = plan.next.fetch_add(1, Ordering::Relaxed);
        if number >= plan.total || abort.is_cancelled() {
            return;
        }
        let due = plan.start + plan.spacing.mul_f64(number as f64);
        tokio::select! {
            _ = abort.cancelled() => return,
            _ = tokio::time::sleep_until(due.into()) => {}
        }
        // The race's bid: placed under a key, and again until it is (the faults may take a while).
        let placed = loop {
            if abort.is_cancelled() {
                return;
            }
            let Some(listing) = listings.next(&moves, Workload::Race, &pair.seller).await else {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            };
            match moves.place(Workload::Race, &pair.buyer, listing, OPENING_BID, true).await {
                Ok(placed) => break placed,
                Err(_) => listings.abandon(),
            }
        };
        let (race, counter_bid) = race(&moves, &pair, &instances, number, placed.bid.id, placed.thread.id).await;
        let winner = race.racers.iter().find(|racer| racer.status.is_some_and(|s| (200..300).contains(&s)));
        match winner.map(|racer| racer.kind) {
            // The seller's counter won: the buyer turns it down, to end the thread.
            Some(MoveKind::Counter) => {
                if let Some(counter) = counter_bid
                    && moves.answer(Workload::Race, &pair.buyer, counter, Answer::Reject, true).await.is_err()
                {
                    listings.abandon();
                }
            }
            Some(_) => {}
            // Nobody is known to have won: the thread may be live.
            None => listings.abandon(),
        }
        moves.ledger.race(race);
    }
}

async fn race(
    moves: &Moves,
    pair: &Pair,
    instances: &[Endpoint],
    number: u64,
    bid: uuid::Uuid,
    thread: uuid::Uuid,
) -> (Race, Option<uuid::Uuid>) {
    let via = |offset: u64| &instances[((number + offset) % instances.len() as u64) as usize];
    let entries: [(MoveKind, &Endpoint, &Agent, String, serde_json::Value); 4] = [
        (MoveKind::Accept, via(0), &pair.seller, Answer::Accept.path(bid), json!({})),
        (MoveKind::Reject, via(1), &pair.seller, Answer::Reject.path(bid), json!({})),
        (
            MoveKind::Counter,
            via(2),
            &pair.seller,
            format!("/v1/bids/{bid}/counter"),
            json!({ "amount": SELLER_COUNTER }),
        ),
        (MoveKind::Withdraw, &moves.to, &pair.buyer, Answer::Withdraw.path(bid), json!({})),
    ];
    let sends =
        entries.iter().map(|(_, to, agent, path, body)| moves.api.send(to, Request::post(path, &agent.key, body)));
    let outcomes = futures::future::join_all(sends).await;
    let mut counter_bid = None;
    let mut racers = Vec::with_capacity(4);
    for ((kind, to, agent, _, _), outcome) in entries.iter().zip(outcomes) {
        let judged = verdict(&outcome);
        if let Outcome::Answered(reply) = &outcome
            && reply.success()
        {
            // A winner is an acknowledged move like any other.
            let ack = match kind {
                MoveKind::Counter => reply.json::<BidAndThread>().ok().map(|made| {
                    counter_bid = Some(made.bid.id);
                    Ack::Countered { parent: bid, bid: made.bid.id }
                }),
                MoveKind::Accept => reply
                    .json::<Answered>()
                    .ok()
                    .map(|made| Ack::Accepted { bid, order: made.order.map(|order| order.id) }),
                MoveKind::Reject => Some(Ack::Rejected { bid }),
                MoveKind::Withdraw => Some(Ack::Withdrew { bid }),
                // Races are between moves on a bid only.
                MoveKind::List
                | MoveKind::Place
                | MoveKind::Fulfil
                | MoveKind::Pay
                | MoveKind::Confirm
                | MoveKind::Complete
                | MoveKind::Open
                | MoveKind::Settle
                | MoveKind::Hold
                | MoveKind::Approve
                | MoveKind::Unhold => None,
            };
            match ack {
                Some(ack) => moves.ledger.ack(Workload::Race, agent.id, reply.answered, reply.replayed, ack),
                None => moves.violations.add(
                    "2xx answer that cannot be read",
                    format!("race {number}: {} of {bid}: {}", kind.as_str(), String::from_utf8_lossy(&reply.body)),
                ),
            }
        }
        let code = match &outcome {
            Outcome::Answered(reply) => reply.code(),
            Outcome::NotSent(_) | Outcome::NoAnswer(_) => None,
        };
        racers.push(Racer {
            kind: *kind,
            via: to.name.clone(),
            status: outcome.status(),
            code,
            unclear: judged == Verdict::Unclear,
            summary: outcome.describe(),
        });
    }
    (Race { number, bid, thread, racers }, counter_bid)
}
