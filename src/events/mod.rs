//! Events: what changed, for whom.
//!
//! Every state change records its events in an [`Outbox`] that is written in the change's own
//! transaction. The [`publisher`] numbers committed events and tells every server instance
//! through PostgreSQL NOTIFY; each instance's [`listener`] wakes the waiters of the agents
//! concerned through its [`Hub`].

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sqlx::PgConnection;
use uuid::Uuid;

use crate::db::{Bid, Listing, Order, Thread};
use crate::domain::BidStatus;

mod hub;
pub mod listener;
pub mod publisher;

pub use crate::db::events::Written;
pub use hub::{Crowded, Hub, MAX_WAITERS_PER_AGENT, Subscription};

/// The NOTIFY channel that carries published events' ids and recipients.
pub const CHANNEL: &str = "haggle_events";
/// The NOTIFY channel that tells webhook workers that deliveries were queued.
pub const DELIVERIES_CHANNEL: &str = "haggle_deliveries";
/// The NOTIFY channel that tells auto-negotiation executors that bids wait for a policy.
pub const AUTO_CHANNEL: &str = "haggle_auto";

macro_rules! event_types {
    ($($variant:ident => $name:literal),* $(,)?) => {
        /// The kinds of event.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        pub enum EventType {
            $(#[serde(rename = $name)] $variant,)*
        }

        impl EventType {
            pub const ALL: [EventType; [$($name),*].len()] = [$(EventType::$variant),*];

            pub fn as_str(self) -> &'static str {
                match self {
                    $(EventType::$variant => $name,)*
                }
            }
        }

        impl std::str::FromStr for EventType {
            type Err = String;

            fn from_str(value: &str) -> Result<EventType, String> {
                match value {
                    $($name => Ok(EventType::$variant),)*
                    other => Err(format!(
                        "`{other}` is not an event type; expected one of {}",
                        [$($name),*].join(", ")
                    )),
                }
            }
        }
    };
}

event_types! {
    BidPlaced => "bid.placed",
    BidCountered => "bid.countered",
    BidAccepted => "bid.accepted",
    BidRejected => "bid.rejected",
    BidExpired => "bid.expired",
    ThreadClosed => "thread.closed",
    OrderCreated => "order.created",
    ListingSold => "listing.sold",
    ListingWithdrawn => "listing.withdrawn",
    NegotiationActionRequired => "negotiation.action_required",
    WebhookDisabled => "webhook.disabled",
}

impl std::fmt::Display for EventType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An event about to be written: its kind, who may see it, the ids it concerns and a snapshot
/// of the objects as the change left them.
#[derive(Debug, Clone, Serialize)]
pub struct NewEvent {
    #[serde(rename = "type")]
    pub kind: EventType,
    pub audience: Vec<Uuid>,
    pub listing_id: Option<Uuid>,
    pub thread_id: Option<Uuid>,
    pub bid_id: Option<Uuid>,
    pub order_id: Option<Uuid>,
    pub data: Value,
}

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
        let thread = thread.clone().at(Utc::now());
        NewEvent::about_thread(kind, &thread, Some(bid), json!({ "bid": bid, "thread": thread }))
    }

    /// A thread ended because its listing sold out or was withdrawn; `bid` is its pending bid
    /// as the cascade left it.
    pub fn thread_closed(thread: &Thread, bid: &Bid) -> NewEvent {
        if bid.status == BidStatus::Expired {
            return NewEvent::bid(bid, thread);
        }
        let thread = thread.clone().at(Utc::now());
        NewEvent::about_thread(EventType::ThreadClosed, &thread, Some(bid), json!({ "bid": bid, "thread": thread }))
    }

    pub fn order_created(order: &Order) -> NewEvent {
        NewEvent {
            kind: EventType::OrderCreated,
            audience: vec![order.buyer_id, order.seller_id],
            listing_id: Some(order.listing_id),
            thread_id: order.thread_id,
            bid_id: order.bid_id,
            order_id: Some(order.id),
            data: json!({ "order": order }),
        }
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
            data: json!({ "listing": listing }),
        }
    }

    /// An event for one agent only, about something of its own (a webhook, a policy stop).
    pub fn private(kind: EventType, owner: Uuid, data: Value) -> NewEvent {
        NewEvent { kind, audience: vec![owner], listing_id: None, thread_id: None, bid_id: None, order_id: None, data }
    }
}

/// The events of one transaction: written just before it commits, or by the statement that
/// makes a move, together with the move ([`pending`](Outbox::pending), then
/// [`wrote`](Outbox::wrote)).
#[derive(Debug, Default)]
pub struct Outbox {
    events: Vec<NewEvent>,
    written: Written,
}

impl Outbox {
    pub fn new() -> Outbox {
        Outbox::default()
    }

    pub fn push(&mut self, event: NewEvent) {
        self.events.push(event);
    }

    /// The events not written yet.
    pub fn pending(&self) -> &[NewEvent] {
        &self.events
    }

    /// Forgets the events pushed after the first `len`: the move they described did not happen.
    pub fn truncate(&mut self, len: usize) {
        self.events.truncate(len);
    }

    /// Records that a statement wrote every pending event (and queued `written.tasks`).
    pub fn wrote(&mut self, written: Written) {
        self.events.clear();
        self.written.events += written.events;
        self.written.tasks += written.tasks;
    }

    /// Everything written so far, by [`flush`](Outbox::flush) and by moves.
    pub fn written(&self) -> Written {
        self.written
    }

    /// Writes the pending events in one statement, inside the caller's transaction.
    ///
    /// New pending bids whose responder has a policy are queued for the executor in the same
    /// statement ([`Written::tasks`]).
    pub async fn flush(&mut self, conn: &mut PgConnection) -> Result<Written, sqlx::Error> {
        if !self.events.is_empty() {
            let written = crate::db::events::insert_outbox(conn, &self.events).await?;
            self.wrote(written);
        }
        Ok(self.written)
    }
}

/// A published event, as agents read it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, sqlx::FromRow)]
pub struct Event {
    pub id: i64,
    #[serde(rename = "type")]
    #[sqlx(rename = "type")]
    pub kind: String,
    pub created_at: DateTime<Utc>,
    pub listing_id: Option<Uuid>,
    pub thread_id: Option<Uuid>,
    pub bid_id: Option<Uuid>,
    pub order_id: Option<Uuid>,
    pub data: Value,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_type_names_round_trip() {
        for kind in EventType::ALL {
            assert_eq!(kind.as_str().parse::<EventType>().unwrap(), kind);
            assert_eq!(serde_json::to_value(kind).unwrap(), json!(kind.as_str()));
        }
        assert!("bid.eaten".parse::<EventType>().unwrap_err().contains("bid.placed"));
    }
}
