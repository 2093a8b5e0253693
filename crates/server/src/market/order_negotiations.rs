//! Negotiations on an order (a refund, a cancellation, a schedule, a payment plan): opening
//! one, its counters and its agreement, a refund's escalation to the operator and the operator's decision. The moves
//! are the price's (`bid::apply` decides them, in `negotiation.rs`); what a kind allows and
//! what its agreement does to the order are `haggle_domain::order_negotiation`'s.
//!
//! Every move here is made under locks, in one transaction, never through the batcher: the
//! open thread first, then the order, as an answer on the thread takes them (after the listing,
//! which an answer that may change it locks first). Every check runs before the first write,
//! since a refusal still commits what was written before it.

use chrono::Duration;
use sqlx::PgConnection;
use uuid::Uuid;

use super::{Result, Rules};
use crate::db::agents::Caller;
use crate::db::negotiations;
use crate::db::rows::BidContext;
use crate::db::{self, Bid, Order, Thread};
use crate::events::{EventType, NewEvent, Outbox, Written};
use haggle_api::{DisputeDecision, OpenNegotiation};
use haggle_domain::bid::{self, Positions, Transition};
use haggle_domain::money::Amount;
use haggle_domain::order::{self as table, OrderAction, OrderActor};
use haggle_domain::order_negotiation::{self as rules, Refunds, Terms};
use haggle_domain::rejection::Validator;
use haggle_domain::{BidStatus, Party, Rejection, ThreadKind, ThreadStatus};
use haggle_domain::{appointment, plan};

fn order_not_found() -> Rejection {
    Rejection::NotFound { what: "order" }
}

fn thread_not_found() -> Rejection {
    Rejection::NotFound { what: "thread" }
}

/// A write that the checks before it made certain failed anyway: the transaction must not
/// commit what came before it, so this is no refusal but an error that rolls it back.
fn unexpected(what: &str) -> super::Error {
    tracing::error!(what, "a write checked under its locks changed nothing");
    super::Error::Database(sqlx::Error::RowNotFound)
}

/// Opens a negotiation of `input.kind` on the order with its first bid, for one of the order's
/// parties (to anyone else the order does not exist). An open thread of the kind past its
/// deadline ends first, as the sweeper would end it.
pub async fn open(
    conn: &mut PgConnection,
    events: &mut Outbox,
    caller: Caller,
    order_id: Uuid,
    input: &OpenNegotiation,
    limits: Rules,
) -> Result<(Bid, Thread)> {
    let kind = input.kind;
    let mut check = Validator::new();
    let amount = match (rules::has_amount(kind), input.amount) {
        (true, Some(raw)) => check.check("amount", raw.validate(limits.amounts)),
        (true, None) => {
            check.fail("amount", "is required: the refund asked, in minor units");
            None
        }
        (false, Some(_)) => {
            check.fail("amount", format!("a {kind} negotiation names no amount"));
            None
        }
        (false, None) => None,
    };
    check.check("message", bid::check_message(input.message.as_deref()));
    if input.expires_in.is_some() {
        check.check("expires_in", bid::expires_in(input.expires_in, 0));
    }
    let terms = match rules::read_terms(kind, Some(&input.terms)) {
        Ok(terms) => Some(terms),
        Err(Rejection::Validation(errors)) => {
            errors.into_iter().for_each(|error| check.fail(&error.field, error.message));
            None
        }
        Err(other) => return Err(other.into()),
    };
    check.finish()?;
    let terms = terms.ok_or_else(|| Rejection::invalid("terms", "is required"))?;

    let open = negotiations::lock_open_thread(conn, order_id, kind, caller.id).await?;
    let order = db::orders::lock(conn, order_id, caller.id).await?.ok_or_else(order_not_found)?;
    let party = if order.buyer_id == caller.id { Party::Buyer } else { Party::Seller };
    rules::may_open(kind, party, order.status)?;
    if let Some(amount) = amount {
        order.refunds().admit(amount.minor_units())?;
    }
    if kind == ThreadKind::Installments {
        plan::may_plan(order.plan.is_some())?;
    }
    let listing = negotiations::listing_rules(&mut *conn, order.listing_id).await?;
    rules::check_terms_at(&terms, listing.db_now, order.ledger().outstanding())?;
    if let Some(open) = open {
        if open.expires_at > open.db_now {
            return Err(Rejection::NegotiationOpen { kind, thread_id: Some(open.id) }.into());
        }
        let expiry = bid::expire(BidStatus::Pending, open.expires_at, open.db_now)?;
        if let Some((bid, thread)) = db::sweeps::end_with_bid(conn, open.last_bid_id, expiry).await? {
            events.push(NewEvent::bid(&bid, &thread));
        }
    }
    // One opened while this request waited for the order's lock.
    if let Some(thread_id) = negotiations::open_thread(&mut *conn, order_id, kind).await? {
        return Err(Rejection::NegotiationOpen { kind, thread_id: Some(thread_id) }.into());
    }

    let expires_in = bid::expires_in(input.expires_in, listing.bid_ttl_seconds)
        .map_err(|message| Rejection::invalid("expires_in", message))?;
    let now = listing.db_now;
    let bid = Bid {
        id: Uuid::now_v7(),
        thread_id: Uuid::now_v7(),
        author: party,
        author_id: caller.id,
        kind,
        amount: amount.map_or(0, Amount::minor_units),
        currency: order.currency,
        message: input.message.clone(),
        terms: Some(input.terms.clone()),
        is_final: rules::opens_final(kind) || bid::is_final(1, listing.max_rounds, input.is_final.unwrap_or(false)),
        status: BidStatus::Pending,
        reason: None,
        parent_bid_id: None,
        round: 1,
        expires_at: now + Duration::seconds(expires_in.into()),
        responded_at: None,
        approval: None,
        created_at: now,
        updated_at: now,
    };
    let thread = Thread::opened_with(&bid, order.listing_id, order.buyer_id, order.seller_id, Some(order.id));
    let (bid, thread) = negotiations::open(conn, &thread, &bid).await?;
    events.push(NewEvent::bid(&bid, &thread));
    queue_for_policy(conn, events, &bid).await?;
    Ok((bid, thread))
}

/// Counters the pending bid of an order's negotiation in `context` (read with its thread
/// locked), which the state machine allowed `party` as `transition`. A refund's counter
/// concedes the other way from a price's; a cancellation is never countered (its bid is final);
/// a schedule's or a plan's counter names no amount but terms of its own (other windows; another
/// split of the same sum). `None` if the compare-and-set found the bid answered or past its deadline.
#[allow(clippy::too_many_arguments)]
pub(super) async fn counter(
    conn: &mut PgConnection,
    events: &mut Outbox,
    caller: Caller,
    context: &BidContext,
    party: Party,
    transition: Transition,
    input: &bid::Proposal,
    amount: Option<Amount>,
) -> Result<Option<(Bid, Thread)>> {
    let kind = context.thread.kind;
    let now = context.db_now;
    let terms = match kind {
        ThreadKind::Refund => {
            let amount = amount.ok_or_else(|| Rejection::invalid("amount", "is required: the refund asked"))?;
            let own_previous = context.parent_amount.unwrap_or(rules::SELLER_FIRST_POSITION);
            let positions = Positions { pending: context.bid.amount, own_previous };
            rules::check_refund_counter(party, amount.minor_units(), positions)?;
            let terms = if input.carries_terms_over() { context.bid.terms.clone() } else { input.own_terms().cloned() };
            rules::read_terms(kind, terms.as_ref())?;
            terms
        }
        ThreadKind::Schedule | ThreadKind::Installments => {
            if amount.is_some() {
                return Err(Rejection::invalid("amount", format!("a {kind} negotiation names no amount")).into());
            }
            let Some(own) = input.own_terms() else {
                return Err(
                    Rejection::invalid("terms", format!("is required: a {kind} counter proposes its own")).into()
                );
            };
            let read = rules::read_terms(kind, Some(own))?;
            // A plan's counter changes the split and the dates, never the sum it answers.
            let total = match rules::read_terms(kind, context.bid.terms.as_ref())? {
                Terms::Installments(pending) => pending.total(),
                Terms::Refund(_) | Terms::Cancel(_) | Terms::Schedule(_) => 0,
            };
            rules::check_terms_at(&read, now, total)?;
            Some(own.clone())
        }
        ThreadKind::Price | ThreadKind::Cancel => return Err(Rejection::FinalOffer.into()),
    };
    let round = context.bid.round + 1;
    let expires_in = bid::expires_in(input.expires_in, context.listing.bid_ttl_seconds)
        .map_err(|message| Rejection::invalid("expires_in", message))?;
    let counter = Bid {
        id: Uuid::now_v7(),
        thread_id: context.thread.id,
        author: party,
        author_id: caller.id,
        kind,
        amount: amount.map_or(0, Amount::minor_units),
        currency: context.bid.currency,
        message: input.message.clone(),
        terms,
        is_final: bid::is_final(round, context.listing.max_rounds, input.is_final),
        status: BidStatus::Pending,
        reason: None,
        parent_bid_id: Some(context.bid.id),
        round,
        expires_at: now + Duration::seconds(expires_in.into()),
        responded_at: None,
        approval: None,
        created_at: now,
        updated_at: now,
    };
    let Some((bid, thread)) = negotiations::counter(conn, context.bid.id, transition.into(), &counter).await? else {
        return Ok(None);
    };
    events.push(NewEvent::bid(&bid, &thread));
    queue_for_policy(conn, events, &bid).await?;
    Ok(Some((bid, thread)))
}

/// Queues an order negotiation's new pending bid for the policy that answers it, if one covers
/// the thread: on a schedule negotiation, the responder's schedule policy; a buyer's refund bid,
/// the seller's refund policy (SPEC §8). The commit wakes this instance's executor for it.
async fn queue_for_policy(conn: &mut PgConnection, events: &mut Outbox, bid: &Bid) -> Result<()> {
    let queued = match bid.kind {
        ThreadKind::Schedule => db::schedule_tasks::queue(&mut *conn, bid.id).await? as i64,
        ThreadKind::Refund if bid.author == Party::Buyer => {
            i64::from(db::refund_tasks::queue_refund_answer(&mut *conn, bid.id).await?)
        }
        _ => 0,
    };
    events.add(Written { tasks: queued, ..Written::default() });
    Ok(())
}

/// Accepts the pending bid of an order's negotiation in `context` (its listing and thread
/// locked), which the state machine allowed `party`: the thread ends ACCEPTED and, in the same
/// transaction, a refund is recorded on the order (`order.refunded`) or the order is cancelled
/// (`order.cancelled`), its unit given back to the listing, or the window `acceptance` chooses
/// (`{"chosen": i}`) becomes the order's appointment (`order.scheduled`), or the plan becomes the
/// order's payment schedule. `None` if the compare-and-set found the bid answered or past its
/// deadline.
pub(super) async fn accept(
    conn: &mut PgConnection,
    events: &mut Outbox,
    context: &BidContext,
    party: Party,
    transition: Transition,
    acceptance: Option<&serde_json::Value>,
) -> Result<Option<(Bid, Thread, Order)>> {
    let order_id = context.thread.order_id.ok_or_else(order_not_found)?;
    let order = negotiations::lock_order(conn, order_id).await?.ok_or_else(order_not_found)?;
    let kind = context.thread.kind;
    let agreed = match kind {
        ThreadKind::Refund => {
            order.refunds().admit(context.bid.amount)?;
            None
        }
        ThreadKind::Cancel => {
            table::apply(order.status, OrderAction::Cancel, OrderActor::Party(party))?;
            None
        }
        ThreadKind::Schedule | ThreadKind::Installments => {
            rules::may_agree(kind, order.status)?;
            let terms = rules::read_terms(kind, context.bid.terms.as_ref())?;
            match &terms {
                Terms::Schedule(schedule) => {
                    appointment::choose(schedule, acceptance, context.db_now)?;
                }
                Terms::Installments(_) => {
                    plan::may_plan(order.plan.is_some())?;
                    rules::check_terms_at(&terms, context.db_now, order.ledger().outstanding())?;
                }
                Terms::Refund(_) | Terms::Cancel(_) => {}
            }
            Some(terms)
        }
        ThreadKind::Price => return Err(order_not_found().into()),
    };
    let Some((bid, thread)) = db::sweeps::end_with_bid(conn, context.bid.id, transition).await? else {
        return Ok(None);
    };
    events.push(NewEvent::bid(&bid, &thread));
    let order = match kind {
        ThreadKind::Refund => {
            let order = negotiations::record_refund(conn, order_id, bid.amount)
                .await?
                .ok_or_else(|| unexpected("record the refund"))?;
            events.push(NewEvent::order(EventType::OrderRefunded, &order));
            order
        }
        ThreadKind::Schedule => {
            let Some(Terms::Schedule(schedule)) = &agreed else { return Err(unexpected("read the schedule")) };
            let window = appointment::choose(schedule, acceptance, context.db_now)?;
            let order = negotiations::set_appointment(conn, order_id, window, schedule, thread.id)
                .await?
                .ok_or_else(|| unexpected("set the appointment"))?;
            events.push(NewEvent::order(EventType::OrderScheduled, &order));
            order
        }
        ThreadKind::Installments => {
            let Some(Terms::Installments(installments)) = &agreed else { return Err(unexpected("read the plan")) };
            negotiations::set_plan(conn, order_id, installments, thread.id)
                .await?
                .ok_or_else(|| unexpected("set the payment plan"))?
        }
        ThreadKind::Cancel | ThreadKind::Price => {
            let (order, _listing) =
                negotiations::cancel(conn, order_id).await?.ok_or_else(|| unexpected("cancel the order"))?;
            events.push(NewEvent::order(EventType::OrderCancelled, &order));
            order
        }
    };
    Ok(Some((bid, thread, order)))
}

/// Sends a refund that ended without agreement (REJECTED, or EXPIRED, a live one past its
/// deadline ending first) to the operator, at the request of either party: once.
pub async fn escalate(conn: &mut PgConnection, events: &mut Outbox, caller: Caller, thread_id: Uuid) -> Result<Thread> {
    let locked = negotiations::lock_thread(conn, thread_id, Some(caller.id)).await?.ok_or_else(thread_not_found)?;
    let mut thread = locked.thread;
    if let (ThreadStatus::Active, Some(deadline)) = (thread.status, thread.expires_at)
        && deadline <= locked.db_now
    {
        let expiry = bid::expire(BidStatus::Pending, deadline, locked.db_now)?;
        if let Some((bid, ended)) = db::sweeps::end_with_bid(conn, thread.last_bid_id, expiry).await? {
            events.push(NewEvent::bid(&bid, &ended));
            thread = ended;
        }
    }
    rules::may_escalate(thread.kind, thread.status, thread.escalated_at.is_some())?;
    let order_id = thread.order_id.ok_or_else(order_not_found)?;
    let order = db::orders::get(&mut *conn, order_id, caller.id).await?.ok_or_else(order_not_found)?;
    let escalated =
        negotiations::escalate(conn, thread.id, caller.id).await?.ok_or_else(|| unexpected("escalate the refund"))?;
    events.push(NewEvent::dispute(EventType::DisputeEscalated, &escalated, &order));
    Ok(escalated)
}

/// The operator decides an escalated refund: at most what was paid and not yet refunded,
/// recorded on the order as an agreed refund is (`dispute.decided`, `order.refunded`).
pub async fn decide(
    conn: &mut PgConnection,
    events: &mut Outbox,
    thread_id: Uuid,
    decision: &DisputeDecision,
) -> Result<(Thread, Order)> {
    let locked = negotiations::lock_thread(conn, thread_id, None).await?.ok_or_else(thread_not_found)?;
    let thread = locked.thread;
    let order = match thread.order_id {
        Some(order_id) => Some(negotiations::lock_order(conn, order_id).await?.ok_or_else(order_not_found)?),
        None => None,
    };
    let refunds = order.as_ref().map_or(Refunds { paid: 0, refunded: 0 }, Order::refunds);
    rules::check_decision(
        thread.escalated_at.is_some(),
        thread.decided_at.is_some(),
        refunds,
        decision.amount,
        &decision.note,
    )?;
    let order = order.ok_or_else(order_not_found)?;
    let decided = negotiations::decide(conn, thread.id, decision.amount, &decision.note)
        .await?
        .ok_or_else(|| unexpected("record the decision"))?;
    let order = negotiations::record_refund(conn, order.id, decision.amount)
        .await?
        .ok_or_else(|| unexpected("record the decided refund"))?;
    events.push(NewEvent::dispute(EventType::DisputeDecided, &decided, &order));
    events.push(NewEvent::order(EventType::OrderRefunded, &order));
    Ok((decided, order))
}
