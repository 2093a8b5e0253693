//! A seller's refund policy at work (SPEC §8): the executor's answer to a buyer's refund bid on
//! one of the seller's orders, when the seller's policy declares `refund`. The decision is the
//! domain's (`strategy::decide_refund`); the move goes through the market's operations under
//! locks, as a price policy's does, so every rule of a refund negotiation holds for it.

use sqlx::PgConnection;

use crate::db;
use crate::db::agents::Caller;
use crate::db::tasks::{Decided, Task, TaskContext};
use crate::events::Outbox;
use crate::market::negotiation::{self, Answer};
use crate::market::{Access, PolicyMove, Rules};
use haggle_domain::Party;
use haggle_domain::bid::Proposal;
use haggle_domain::strategy::{Decision, Policy, RefundState, concession_exponent, decide_refund};

/// What the refund policy did with a task, or decided to do.
#[derive(Debug, Clone, PartialEq)]
pub enum Answered {
    /// The task's thread is no refund, or the policy declares none: the price policy decides.
    NotARefund,
    /// Nothing to do: the bid was answered or ended meanwhile.
    Dropped,
    /// The policy chose this counter or answer ([`decide`]), to be made by [`make`] unless its
    /// owner's rules hold it for approval.
    Decided(Decision),
    /// The policy accepted or countered (the action's name).
    Acted(&'static str),
    /// The owner decides: the executor tells it why.
    Stop { reason: &'static str, detail: String },
}

/// What the seller's refund policy does with the task's refund bid, in the executor's
/// transaction: [`Answered::Decided`] with a counter or an answer for [`make`], or why not.
pub async fn decide(
    conn: &mut PgConnection,
    task: Task,
    context: &TaskContext,
    policy: &Policy,
) -> Result<Answered, sqlx::Error> {
    let Some(refund) = policy.refund.as_ref().filter(|_| context.role == Party::Seller) else {
        return Ok(Answered::NotARefund);
    };
    let Some(order) = db::refund_tasks::refund_order(&mut *conn, task.thread_id).await? else {
        return Ok(Answered::NotARefund);
    };
    let Some(&asked) = context.amounts.last() else {
        return Ok(Answered::Dropped);
    };
    if policy.require_approval {
        let detail = "the policy asks its owner to approve every move".to_owned();
        return Ok(Answered::Stop { reason: "approval_required", detail });
    }
    // The buyer opens a refund: the seller's offers are the thread's even rounds.
    let own_previous = context.amounts.iter().skip(1).step_by(2).next_back().copied();
    let state = RefundState {
        order_amount: order.order_amount,
        refundable: order.paid_amount - order.refunded_amount,
        asked,
        own_previous,
        pending_final: context.bid_final,
        auto_moves: u32::try_from(context.auto_counters).unwrap_or(u32::MAX),
        max_auto_moves: u32::try_from(policy.max_auto_rounds).unwrap_or(0),
    };
    Ok(match decide_refund(refund, concession_exponent(&policy.counter), &state) {
        Decision::Stop { rationale } => {
            Answered::Stop { reason: rationale.as_str(), detail: rationale.describe().to_owned() }
        }
        decision => Answered::Decided(decision),
    })
}

/// Makes the refund policy's decision ([`decide`]) through the market, under locks.
pub async fn make(
    conn: &mut PgConnection,
    events: &mut Outbox,
    task: Task,
    decision: Decision,
    caller: Caller,
    rules: Rules,
) -> Result<Answered, sqlx::Error> {
    let (action, reason, made) = match decision {
        Decision::Counter { amount, is_final } => {
            let offer = Proposal::of(amount).finally(is_final);
            let countered =
                negotiation::counter(conn, events, Access::Locked, caller, task.bid_id, &offer, rules).await;
            ("counter", "refund_strategy", countered.map(|(bid, _)| Some(bid.id)))
        }
        Decision::Accept { rationale } => {
            let accepted = negotiation::answer(conn, events, Access::Locked, caller, task.bid_id, Answer::Accept).await;
            ("accept", rationale.as_str(), accepted.map(|_| None))
        }
        Decision::Reject { rationale } => {
            let rejected = negotiation::answer(conn, events, Access::Locked, caller, task.bid_id, Answer::Reject).await;
            ("reject", rationale.as_str(), rejected.map(|_| None))
        }
        Decision::Stop { rationale } => {
            return Ok(Answered::Stop { reason: rationale.as_str(), detail: rationale.describe().to_owned() });
        }
    };
    match PolicyMove::of(made)? {
        PolicyMove::Made(counter_bid_id) => {
            let rationale = match action {
                "accept" => "Refund accepted.",
                "reject" => "Refund declined.",
                _ => "Counter-offer.",
            };
            db::tasks::record_decision(conn, task, Decided { action, reason, rationale, counter_bid_id }).await?;
            Ok(Answered::Acted(action))
        }
        PolicyMove::Overtaken => Ok(Answered::Dropped),
        PolicyMove::Refused(rejection) => Ok(Answered::Stop {
            reason: "refused",
            detail: format!(
                "the marketplace refused the refund policy's {action} ({}): {}",
                rejection.code(),
                rejection.detail()
            ),
        }),
    }
}
