//! An order's life after the handshake: fulfilment, completion (by the buyer, or by the server
//! once the buyer has had long enough), and the payments recorded against it. Each is one
//! transaction that locks the order first, asks the domain's tables (`haggle_domain::order`),
//! and writes with a compare-and-set, so that of two racing actions exactly one wins.

use chrono::{DateTime, Utc};
use sqlx::PgConnection;
use uuid::Uuid;

use super::{Result, Rules};
use crate::db::Order;
use crate::db::agents::Caller;
use crate::db::orders::{self, Payment};
use crate::events::{EventType, NewEvent, Outbox};
use haggle_domain::order::{
    self as table, Fulfil, NewPayment, OrderAction, OrderActor, OrderStatus, PaymentAction, PaymentDispute,
};
use haggle_domain::{Party, Rejection, ThreadKind};

fn order_not_found() -> Rejection {
    Rejection::NotFound { what: "order" }
}

/// The order locked, if the caller is one of its parties (to anyone else it does not exist),
/// with the caller's side of it.
async fn lock_as_party(conn: &mut PgConnection, caller: Caller, id: Uuid) -> Result<(Order, Party)> {
    let order = orders::lock(conn, id, caller.id).await?.ok_or_else(order_not_found)?;
    let party = if order.buyer_id == caller.id { Party::Buyer } else { Party::Seller };
    Ok((order, party))
}

/// What a compare-and-set that failed under the order's lock means: the order changed anyway.
fn changed(order: &Order) -> Rejection {
    Rejection::InvalidTransition {
        current_status: order.status.as_str(),
        detail: "the order changed while the action was made; read it again".into(),
    }
}

/// The seller fulfils a CONFIRMED order, with an optional reference and note.
pub async fn fulfil(
    conn: &mut PgConnection,
    events: &mut Outbox,
    caller: Caller,
    id: Uuid,
    fulfilment: Fulfil,
) -> Result<(Order, Vec<Payment>)> {
    let fulfilment = fulfilment.validate()?;
    let (order, party) = lock_as_party(conn, caller, id).await?;
    table::apply(order.status, OrderAction::Fulfil, OrderActor::Party(party))?;
    let fulfilled = orders::fulfil(conn, id, fulfilment.reference.as_deref(), fulfilment.note.as_deref())
        .await?
        .ok_or_else(|| changed(&order))?;
    events.push(NewEvent::order(EventType::OrderFulfilled, &fulfilled));
    let payments = orders::payments(&mut *conn, id).await?;
    Ok((fulfilled, payments))
}

/// The buyer completes a FULFILLED order, unless a refund is still open on it.
pub async fn complete(
    conn: &mut PgConnection,
    events: &mut Outbox,
    caller: Caller,
    id: Uuid,
) -> Result<(Order, Vec<Payment>)> {
    let (order, party) = lock_as_party(conn, caller, id).await?;
    table::apply(order.status, OrderAction::Complete, OrderActor::Party(party))?;
    // Under the order's lock, which opening a refund takes too: of the two, one wins.
    if let Some(thread_id) = orders::open_refund(&mut *conn, id).await? {
        return Err(Rejection::NegotiationOpen { kind: ThreadKind::Refund, thread_id: Some(thread_id) }.into());
    }
    let completed = orders::complete(conn, &[id]).await?.pop().ok_or_else(|| changed(&order))?;
    events.push(NewEvent::order(EventType::OrderCompleted, &completed));
    let payments = orders::payments(&mut *conn, id).await?;
    Ok((completed, payments))
}

/// The server completes up to `batch` orders fulfilled at or before `fulfilled_before` that
/// their buyers left alone, skipping those another transaction holds. Returns how many.
pub async fn complete_due(
    conn: &mut PgConnection,
    events: &mut Outbox,
    fulfilled_before: DateTime<Utc>,
    batch: i64,
) -> std::result::Result<usize, sqlx::Error> {
    let due = orders::lock_due_completions(conn, fulfilled_before, batch).await?;
    // Completion is the order's table's decision, here as when the buyer completes.
    let completing: Vec<Uuid> = due
        .iter()
        .filter(|due| table::apply(due.status, OrderAction::Complete, OrderActor::Server).is_ok())
        .map(|due| due.id)
        .collect();
    let completed = orders::complete(conn, &completing).await?;
    for order in &completed {
        events.push(NewEvent::order(EventType::OrderCompleted, order));
    }
    Ok(completed.len())
}

/// The buyer records a payment of at most what is outstanding.
pub async fn record_payment(
    conn: &mut PgConnection,
    events: &mut Outbox,
    caller: Caller,
    id: Uuid,
    payment: NewPayment,
    rules: Rules,
) -> Result<(Payment, Order)> {
    let payment = payment.validate(rules.amounts)?;
    let (order, party) = lock_as_party(conn, caller, id).await?;
    table::require_payer(party)?;
    if order.status == OrderStatus::Cancelled {
        return Err(Rejection::InvalidTransition {
            current_status: order.status.as_str(),
            detail: "the order is CANCELLED: nothing more is owed on it".into(),
        }
        .into());
    }
    order.ledger().admit(payment.amount.minor_units())?;
    let recorded = orders::insert_payment(conn, Uuid::now_v7(), &order, payment.amount, &payment.reference).await?;
    events.push(NewEvent::payment(EventType::PaymentRecorded, &recorded, &order));
    Ok((recorded, order))
}

/// The seller answers a recorded payment: confirms it (adding it to the paid amount, never past
/// the order's), or disputes it with a reason.
pub async fn answer_payment(
    conn: &mut PgConnection,
    events: &mut Outbox,
    caller: Caller,
    order_id: Uuid,
    payment_id: Uuid,
    answer: PaymentAnswer,
) -> Result<(Payment, Order)> {
    let (action, reason) = match answer {
        PaymentAnswer::Confirm => (PaymentAction::Confirm, None),
        PaymentAnswer::Dispute(dispute) => (PaymentAction::Dispute, Some(dispute.validate()?)),
    };
    let (order, party) = lock_as_party(conn, caller, order_id).await?;
    let payment =
        orders::lock_payment(conn, order_id, payment_id).await?.ok_or(Rejection::NotFound { what: "payment" })?;
    table::answer_payment(payment.status, action, party)?;
    match reason {
        None => {
            order.ledger().admit(payment.amount)?;
            let (confirmed, order) = orders::confirm_payment(conn, payment_id).await?.ok_or_else(|| changed(&order))?;
            events.push(NewEvent::payment(EventType::PaymentConfirmed, &confirmed, &order));
            Ok((confirmed, order))
        }
        Some(reason) => {
            let disputed = orders::dispute_payment(conn, payment_id, &reason).await?.ok_or_else(|| changed(&order))?;
            events.push(NewEvent::payment(EventType::PaymentDisputed, &disputed, &order));
            Ok((disputed, order))
        }
    }
}

/// The seller's answer to a payment.
#[derive(Debug, Clone)]
pub enum PaymentAnswer {
    Confirm,
    Dispute(PaymentDispute),
}
