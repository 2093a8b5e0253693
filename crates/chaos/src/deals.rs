//! Deals carried through, on orders the run makes itself: the buyer bids, the seller accepts,
//! and then either
//! - the buyer records two payments each of the whole amount, the seller confirms both at once
//!   through two instances (together they are past the outstanding amount: one may win), fulfils,
//!   the buyer asks for a refund, the seller counters, the buyer accepts (or, every other time,
//!   rejects), and the buyer completes; or
//! - the buyer pays a part that the seller confirms, asks to cancel, and the seller accepts the
//!   cancellation and fulfils the order at once through two instances (one may win).
//!
//! Each contest is recorded with its racers for the checks (verify.rs).

use std::time::Duration;

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::http::{Endpoint, Outcome, Request, Verdict, verdict};
use super::market::{Answer, Moves, NotMade};
use super::negotiations::{Listings, OPENING_BID, Pair};
use super::record::{Ack, Contest, ContestRecord, MoveKind, Racer, Workload};
use haggle_api::{Answered, Order, PaymentAndOrder};

/// The refund the buyer asks for, and the seller's counter.
const REFUND_ASKED: i64 = 30_000;
const REFUND_COUNTERED: i64 = 10_000;
/// The part paid before a cancellation.
const PART_PAID: i64 = 30_000;

/// One racer of a contest: its move, where it goes, who sends it, and what.
pub struct Entry<'a> {
    pub kind: MoveKind,
    pub to: &'a Endpoint,
    pub auth: &'a str,
    pub path: String,
    pub body: Value,
}

/// Sends every entry at once, each once; gives each racer with its outcome.
pub async fn at_once(moves: &Moves, entries: &[Entry<'_>]) -> Vec<(Racer, Outcome)> {
    let sends =
        entries.iter().map(|entry| moves.api.send(entry.to, Request::post(&entry.path, entry.auth, &entry.body)));
    let outcomes = futures::future::join_all(sends).await;
    entries
        .iter()
        .zip(outcomes)
        .map(|(entry, outcome)| {
            let code = match &outcome {
                Outcome::Answered(reply) => reply.code(),
                Outcome::NotSent(_) | Outcome::NoAnswer(_) => None,
            };
            let racer = Racer {
                kind: entry.kind,
                via: entry.to.name.clone(),
                status: outcome.status(),
                code,
                unclear: verdict(&outcome) == Verdict::Unclear,
                summary: outcome.describe(),
            };
            (racer, outcome)
        })
        .collect()
}

/// The successful answer of an outcome, if it was one.
pub fn success(outcome: &Outcome) -> Option<&super::http::Reply> {
    match outcome {
        Outcome::Answered(reply) if reply.success() => Some(reply),
        _ => None,
    }
}

/// Deals until `until`.
pub async fn run(moves: Moves, pair: Pair, instances: Vec<Endpoint>, index: usize, until: CancellationToken) {
    let mut listings = Listings::new(format!("deal lot {index}"), None);
    let mut number = 0u64;
    while !until.is_cancelled() {
        let Some(listing) = listings.next(&moves, Workload::Deal, &pair.seller).await else {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        number += 1;
        let order = async {
            let placed = moves.place(Workload::Deal, &pair.buyer, listing, OPENING_BID, true).await?;
            let accepted = moves.answer(Workload::Deal, &pair.seller, placed.bid.id, Answer::Accept, true).await?;
            accepted.order.ok_or(NotMade)
        };
        let Ok(order) = order.await else {
            moves.ledger.abandoned(Workload::Deal);
            listings.abandon();
            continue;
        };
        // Contests are numbered by worker, a thousand apart.
        let contest = index as u64 * 1_000_000 + number;
        let via = |offset: u64| &instances[((contest + offset) % instances.len() as u64) as usize];
        let carried = if number.is_multiple_of(2) {
            refund(&moves, &pair, &order, contest, [via(0), via(1)], number.is_multiple_of(4)).await
        } else {
            cancel(&moves, &pair, &order, contest, [via(0), via(1)]).await
        };
        match carried {
            Ok(()) => moves.ledger.completed(Workload::Deal),
            Err(NotMade) => moves.ledger.abandoned(Workload::Deal),
        }
    }
}

/// Two payments of the whole amount confirmed at once, fulfilment, a refund negotiated to an
/// acceptance (`accept`) or a rejection, completion.
async fn refund(
    moves: &Moves,
    pair: &Pair,
    order: &Order,
    number: u64,
    via: [&Endpoint; 2],
    accept: bool,
) -> Result<(), NotMade> {
    let (seller, buyer) = (&pair.seller, &pair.buyer);
    let first = moves.pay(Workload::Deal, buyer, order.id, order.amount, true).await?;
    let second = moves.pay(Workload::Deal, buyer, order.id, order.amount, true).await?;
    let entries: Vec<Entry<'_>> = [first, second]
        .iter()
        .zip(via)
        .map(|(payment, to)| Entry {
            kind: MoveKind::Confirm,
            to,
            auth: &seller.key,
            path: format!("/v1/orders/{}/payments/{payment}/confirm", order.id),
            body: json!({}),
        })
        .collect();
    let raced = at_once(moves, &entries).await;
    let mut confirmed = false;
    for ((_, outcome), payment) in raced.iter().zip([first, second]) {
        if let Some(reply) = success(outcome) {
            if reply.json::<PaymentAndOrder>().is_ok() {
                confirmed = true;
                let ack = Ack::Confirmed { order: order.id, payment };
                moves.ledger.ack(Workload::Deal, seller.id, reply.answered, reply.replayed, ack);
            } else {
                moves.violations.add("2xx answer that cannot be read", format!("confirmation of {payment}"));
            }
        }
    }
    moves.ledger.contest(ContestRecord {
        number,
        contest: Contest::Confirms { order: order.id, payments: [first, second] },
        racers: raced.into_iter().map(|(racer, _)| racer).collect(),
        approval_answer: None,
    });
    if !confirmed {
        // Nobody is known to have won: nothing to refund for sure.
        return Err(NotMade);
    }
    moves.fulfil(Workload::Deal, seller, order.id, true).await?;
    let asked = moves.open(Workload::Deal, buyer, order.id, "refund", Some(REFUND_ASKED)).await?;
    let countered = moves.counter(Workload::Deal, seller, asked.bid.id, REFUND_COUNTERED, true).await?;
    if accept {
        moves.settle(Workload::Deal, buyer, order.id, "refund", countered.bid.id).await?;
    } else {
        moves.answer(Workload::Deal, buyer, countered.bid.id, Answer::Reject, true).await?;
    }
    moves.complete(Workload::Deal, buyer, order.id, true).await
}

/// A part paid and confirmed, a cancellation asked, and the seller's acceptance of it racing the
/// seller's fulfilment.
async fn cancel(moves: &Moves, pair: &Pair, order: &Order, number: u64, via: [&Endpoint; 2]) -> Result<(), NotMade> {
    let (seller, buyer) = (&pair.seller, &pair.buyer);
    let payment = moves.pay(Workload::Deal, buyer, order.id, PART_PAID, true).await?;
    moves.confirm(Workload::Deal, seller, order.id, payment, true).await?;
    let asked = moves.open(Workload::Deal, buyer, order.id, "cancel", None).await?;
    let bid = asked.bid.id;
    let entries = [
        Entry {
            kind: MoveKind::Settle,
            to: via[0],
            auth: &seller.key,
            path: Answer::Accept.path(bid),
            body: json!({}),
        },
        Entry {
            kind: MoveKind::Fulfil,
            to: via[1],
            auth: &seller.key,
            path: format!("/v1/orders/{}/fulfil", order.id),
            body: json!({}),
        },
    ];
    let raced = at_once(moves, &entries).await;
    let mut won = None;
    for ((racer, outcome), entry) in raced.iter().zip(&entries) {
        if let Some(reply) = success(outcome) {
            won = Some(entry.kind);
            let ack = match entry.kind {
                MoveKind::Settle => Ack::Settled { order: order.id, kind: "cancel".to_owned(), bid },
                _ => Ack::Fulfilled { order: order.id },
            };
            let readable = match entry.kind {
                MoveKind::Settle => reply.json::<Answered>().is_ok(),
                _ => reply.json::<Value>().is_ok(),
            };
            if readable {
                moves.ledger.ack(Workload::Deal, seller.id, reply.answered, reply.replayed, ack);
            } else {
                moves
                    .violations
                    .add("2xx answer that cannot be read", format!("{} on order {}", racer.summary, order.id));
            }
        }
    }
    moves.ledger.contest(ContestRecord {
        number,
        contest: Contest::CancelOrFulfil { order: order.id, cancel_bid: bid },
        racers: raced.into_iter().map(|(racer, _)| racer).collect(),
        approval_answer: None,
    });
    match won {
        // Fulfilled: the buyer takes its request back, pays the rest, and completes.
        Some(MoveKind::Fulfil) => {
            moves.answer(Workload::Deal, buyer, bid, Answer::Withdraw, true).await?;
            let rest = moves.pay(Workload::Deal, buyer, order.id, order.amount - PART_PAID, true).await?;
            moves.confirm(Workload::Deal, seller, order.id, rest, true).await?;
            moves.complete(Workload::Deal, buyer, order.id, true).await
        }
        Some(_) => Ok(()),
        None => Err(NotMade),
    }
}
