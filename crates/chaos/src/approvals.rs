//! Approvals racing the counterparty across instances. The buyer has approval rules that hold
//! its counters and acceptances, and two approvers. On each of its negotiations the buyer bids,
//! the seller counters, and the buyer answers the counter (by accepting it, or every other time
//! by countering): the answer is held (202). Then, at once and each through another instance,
//! both approvers approve the request and the seller withdraws its counter. One of the three may
//! win: an approval that makes the move (the other approver refused, the withdrawal refused), or
//! the withdrawal (the approval then ends FAILED, nothing made).

use std::time::Duration;

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::deals::{Entry, at_once, success};
use super::http::Endpoint;
use super::market::{Answer, Moves};
use super::negotiations::{Listings, OPENING_BID, Pair, SELLER_COUNTER};
use super::record::{Ack, Contest, ContestRecord, MoveKind, Workload};
use haggle_api::ApprovalOutcome;
use haggle_domain::approval::ApprovalStatus;

/// The buyer's counter when it counters.
const BUYER_COUNTER: i64 = 90_000;

/// A buyer with approval rules and two approvers' tokens, and its seller.
#[derive(Debug, Clone)]
pub struct Ruled {
    pub pair: Pair,
    pub approvers: [String; 2],
}

/// The rules the buyer has: every counter and acceptance of its own held.
pub fn rules() -> Value {
    json!({ "rules": [{ "move": "accept" }, { "move": "counter" }], "ttl_seconds": 600 })
}

/// Held moves approved while the seller withdraws, until `until`.
pub async fn run(moves: Moves, ruled: Ruled, instances: Vec<Endpoint>, index: usize, until: CancellationToken) {
    let (seller, buyer) = (&ruled.pair.seller, &ruled.pair.buyer);
    let mut listings = Listings::new(format!("approval lot {index}"), None);
    let mut number = 0u64;
    while !until.is_cancelled() {
        let Some(listing) = listings.next(&moves, Workload::Approval, seller).await else {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        number += 1;
        let contest = 500_000 + index as u64 * 1_000_000 + number;
        let accept = number.is_multiple_of(2);
        let held = async {
            let placed = moves.place(Workload::Approval, buyer, listing, OPENING_BID, true).await?;
            let countered = moves.counter(Workload::Approval, seller, placed.bid.id, SELLER_COUNTER, true).await?;
            let counter = (!accept).then_some(BUYER_COUNTER);
            let approval = moves.hold(Workload::Approval, buyer, countered.bid.id, counter).await?;
            Ok::<_, super::market::NotMade>((countered.bid.id, approval.id))
        };
        let Ok((bid, approval)) = held.await else {
            moves.ledger.abandoned(Workload::Approval);
            listings.abandon();
            continue;
        };
        let via = |offset: u64| &instances[((contest + offset) % instances.len() as u64) as usize];
        let approve = format!("/v1/approvals/{approval}/approve");
        let entries = [
            Entry {
                kind: MoveKind::Approve,
                to: via(0),
                auth: &ruled.approvers[0],
                path: approve.clone(),
                body: json!({}),
            },
            Entry { kind: MoveKind::Approve, to: via(1), auth: &ruled.approvers[1], path: approve, body: json!({}) },
            Entry {
                kind: MoveKind::Withdraw,
                to: via(2),
                auth: &seller.key,
                path: Answer::Withdraw.path(bid),
                body: json!({}),
            },
        ];
        let raced = at_once(&moves, &entries).await;
        let mut answer = None;
        let mut made_bid = None;
        let mut withdrawn = false;
        for ((_, outcome), entry) in raced.iter().zip(&entries) {
            let Some(reply) = success(outcome) else { continue };
            match entry.kind {
                MoveKind::Approve => match reply.json::<ApprovalOutcome>() {
                    Ok(outcome) => {
                        let status = outcome.approval.status;
                        answer = serde_json::to_value(status).ok().and_then(|value| value.as_str().map(str::to_owned));
                        let ack = if status == ApprovalStatus::Approved {
                            made_bid = outcome.bid.as_ref().map(|bid| bid.id);
                            Ack::Approved {
                                approval,
                                bid: outcome.bid.map(|bid| bid.id),
                                order: outcome.order.map(|order| order.id),
                            }
                        } else {
                            Ack::ApprovalFailed { approval }
                        };
                        moves.ledger.ack(Workload::Approval, buyer.id, reply.answered, reply.replayed, ack);
                    }
                    Err(error) => moves
                        .violations
                        .add("2xx answer that cannot be read", format!("approval of {approval}: {error}")),
                },
                _ => {
                    withdrawn = true;
                    moves.ledger.ack(
                        Workload::Approval,
                        seller.id,
                        reply.answered,
                        reply.replayed,
                        Ack::Withdrew { bid },
                    );
                }
            }
        }
        moves.ledger.contest(ContestRecord {
            number: contest,
            contest: Contest::ApprovalOrWithdraw { approval, bid },
            racers: raced.into_iter().map(|(racer, _)| racer).collect(),
            approval_answer: answer.clone(),
        });
        let ended = match answer.as_deref() {
            // The buyer's counter was made: the seller turns it down, to end the thread.
            Some("APPROVED") if !accept => match made_bid {
                Some(counter) => moves.answer(Workload::Approval, seller, counter, Answer::Reject, true).await.is_ok(),
                None => false,
            },
            Some(_) => true,
            None => {
                // No approver is known to have answered: the request may still be pending.
                let _ = moves.unhold(Workload::Approval, buyer, approval).await;
                withdrawn
            }
        };
        if ended {
            moves.ledger.completed(Workload::Approval);
        } else {
            moves.ledger.abandoned(Workload::Approval);
            listings.abandon();
        }
    }
}

/// Sets up a ruled buyer: its rules and two approvers.
pub async fn set_up(setup: &super::market::Setup<'_>, pair: Pair, name: &str) -> anyhow::Result<Ruled> {
    setup.approval_rules(&pair.buyer, rules()).await?;
    let first = setup.approver(&pair.buyer, &format!("{name} first")).await?;
    let second = setup.approver(&pair.buyer, &format!("{name} second")).await?;
    Ok(Ruled { pair, approvers: [first, second] })
}

/// The agents whose every counter and acceptance must carry an approval.
pub fn ruled_agents(ruled: &[Ruled]) -> Vec<uuid::Uuid> {
    ruled.iter().map(|ruled| ruled.pair.buyer.id).collect::<Vec<_>>()
}
