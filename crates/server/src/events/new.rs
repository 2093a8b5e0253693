//! The events a change makes: for each kind, who may see it and its payload, the objects as the
//! change left them in the views agents are shown.

use chrono::Utc;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::db::events::NewEvent;
use crate::db::orders::Payment;
use crate::db::{Bid, Listing, Order, Thread};
use haggle_api::{self as api, EventType};
use haggle_domain::{BidStatus, Party};

impl NewEvent {
    fn about_thread(kind: EventType, thread: &Thread, bid: Option<&Bid>, data: Value) -> NewEvent {
        NewEvent {
            kind,
            audience: vec![thread.buyer_id, thread.seller_id],
            listing_id: Some(thread.listing_id),
            thread_id: Some(thread.id),
            bid_id: bid.map(|bid| bid.id),
            order_id: None,
            data,
        }
    }

    /// A bid changed (or was made): its event type follows from its status. `bid.countered`
    /// carries the new pending counter, whose `parent_bid_id` is the bid it answered.
    pub fn bid(bid: &Bid, thread: &Thread) -> NewEvent {
        let kind = match bid.status {
            BidStatus::Pending if bid.round == 1 => EventType::BidPlaced,
            BidStatus::Pending => EventType::BidCountered,
            BidStatus::Countered => EventType::BidCountered,
            BidStatus::Accepted => EventType::BidAccepted,
            BidStatus::Rejected => EventType::BidRejected,
            BidStatus::Expired => EventType::BidExpired,
        };
        NewEvent::about_thread(kind, thread, Some(bid), bid_and_thread(bid, thread))
    }

    /// A thread ended because its listing sold out or was withdrawn; `bid` is its pending bid
    /// as the cascade left it.
    pub fn thread_closed(thread: &Thread, bid: &Bid) -> NewEvent {
        if bid.status == BidStatus::Expired {
            return NewEvent::bid(bid, thread);
        }
        NewEvent::about_thread(EventType::ThreadClosed, thread, Some(bid), bid_and_thread(bid, thread))
    }

    /// The thread stopped converging, or a counter on it renewed the mediator's suggestion: both
    /// parties are told, with the suggestion (its `renewal` counts the renewals), the agreements
    /// that carried over to it (`carried_over`, the thread's `deadlock.agreed`) and those that
    /// did not (`dropped`: the suggestion moved against the party who gave it).
    pub fn deadlock(thread: &Thread, suggestion: &api::Suggestion, dropped: &[Party]) -> NewEvent {
        let data = json!({
            "thread": thread.at(Utc::now()),
            "suggestion": suggestion,
            "carried_over": thread.mediation_agreed,
            "dropped": dropped,
        });
        let mut event = NewEvent::about_thread(EventType::NegotiationDeadlock, thread, None, data);
        event.bid_id = Some(suggestion.bid_id);
        event
    }

    /// A refund went to the operator (`dispute.escalated`), or the operator decided it
    /// (`dispute.decided`): both parties are told, with the thread and its order.
    pub fn dispute(kind: EventType, thread: &Thread, order: &Order) -> NewEvent {
        let data = json!({ "thread": thread.at(Utc::now()), "order": api::Order::from(order.clone()) });
        let mut event = NewEvent::about_thread(kind, thread, None, data);
        event.order_id = Some(order.id);
        event
    }

    pub fn order_created(order: &Order) -> NewEvent {
        NewEvent {
            kind: EventType::OrderCreated,
            audience: vec![order.buyer_id, order.seller_id],
            listing_id: Some(order.listing_id),
            thread_id: order.thread_id,
            bid_id: order.bid_id,
            order_id: Some(order.id),
            data: json!({ "order": api::Order::from(order.clone()) }),
        }
    }

    /// The order changed (fulfilled, completed): both parties are told.
    pub fn order(kind: EventType, order: &Order) -> NewEvent {
        NewEvent { kind, data: json!({ "order": api::Order::from(order.clone()) }), ..NewEvent::order_created(order) }
    }

    /// An installment of the order's plan is overdue: both parties are told, with the order (whose
    /// `plan` shows it) and the installment's place in the plan, from 0.
    pub fn installment_overdue(order: &Order, seq: i32) -> NewEvent {
        let data = json!({ "order": api::Order::from(order.clone()), "installment": seq });
        NewEvent { kind: EventType::PaymentOverdue, data, ..NewEvent::order_created(order) }
    }

    /// A payment was recorded, confirmed or disputed: both parties are told, with the order as
    /// the payment left it.
    pub fn payment(kind: EventType, payment: &Payment, order: &Order) -> NewEvent {
        let data = json!(api::PaymentAndOrder { payment: payment.clone().into(), order: order.clone().into() });
        NewEvent { kind, data, ..NewEvent::order_created(order) }
    }

    /// The listing sold out or was withdrawn; its seller is told (the buyers of its live
    /// threads hear of it through their threads).
    pub fn listing(kind: EventType, listing: &Listing) -> NewEvent {
        NewEvent {
            kind,
            audience: vec![listing.seller_id],
            listing_id: Some(listing.id),
            thread_id: None,
            bid_id: None,
            order_id: None,
            data: json!({ "listing": api::Listing::from(listing.clone()) }),
        }
    }

    /// An event for one agent only, about something of its own (a webhook, a policy stop).
    pub fn private(kind: EventType, owner: Uuid, data: Value) -> NewEvent {
        NewEvent { kind, audience: vec![owner], listing_id: None, thread_id: None, bid_id: None, order_id: None, data }
    }
}

/// The payload of a bid's event: the bid as stored, and its thread as it truly is now.
fn bid_and_thread(bid: &Bid, thread: &Thread) -> Value {
    json!(api::BidAndThread { bid: bid.clone().into(), thread: thread.at(Utc::now()) })
}
