//! Events: what changed, for whom, as agents read them.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

/// The kinds of event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum EventType {
    #[serde(rename = "bid.placed")]
    BidPlaced,
    #[serde(rename = "bid.countered")]
    BidCountered,
    #[serde(rename = "bid.accepted")]
    BidAccepted,
    #[serde(rename = "bid.rejected")]
    BidRejected,
    #[serde(rename = "bid.expired")]
    BidExpired,
    #[serde(rename = "thread.closed")]
    ThreadClosed,
    #[serde(rename = "order.created")]
    OrderCreated,
    /// The seller fulfilled an order.
    #[serde(rename = "order.fulfilled")]
    OrderFulfilled,
    /// The buyer completed an order, or the server did after the configured time.
    #[serde(rename = "order.completed")]
    OrderCompleted,
    /// An accepted `cancel` negotiation cancelled an order.
    #[serde(rename = "order.cancelled")]
    OrderCancelled,
    /// A refund was recorded on an order: an accepted `refund` negotiation, or the operator's
    /// decision on an escalated one.
    #[serde(rename = "order.refunded")]
    OrderRefunded,
    /// An accepted `schedule` negotiation set (or moved) the order's appointment.
    #[serde(rename = "order.scheduled")]
    OrderScheduled,
    /// The buyer recorded a payment on an order.
    #[serde(rename = "payment.recorded")]
    PaymentRecorded,
    /// The seller confirmed a payment.
    #[serde(rename = "payment.confirmed")]
    PaymentConfirmed,
    /// The seller disputed a payment.
    #[serde(rename = "payment.disputed")]
    PaymentDisputed,
    /// An installment of the order's payment plan passed its due date without being covered by
    /// confirmed payments: raised once per installment.
    #[serde(rename = "payment.overdue")]
    PaymentOverdue,
    /// A refund that found no agreement went to the operator.
    #[serde(rename = "dispute.escalated")]
    DisputeEscalated,
    /// The operator decided an escalated refund.
    #[serde(rename = "dispute.decided")]
    DisputeDecided,
    #[serde(rename = "listing.sold")]
    ListingSold,
    #[serde(rename = "listing.withdrawn")]
    ListingWithdrawn,
    #[serde(rename = "negotiation.action_required")]
    NegotiationActionRequired,
    /// A thread stopped converging; carries the mediator's suggestion.
    #[serde(rename = "negotiation.deadlock")]
    NegotiationDeadlock,
    #[serde(rename = "webhook.disabled")]
    WebhookDisabled,
    /// One of the agent's moves was held for approval (SPEC §10).
    #[serde(rename = "approval.requested")]
    ApprovalRequested,
    /// A held move was approved and made.
    #[serde(rename = "approval.approved")]
    ApprovalApproved,
    #[serde(rename = "approval.denied")]
    ApprovalDenied,
    #[serde(rename = "approval.expired")]
    ApprovalExpired,
    /// A held move was approved but refused when made: nothing was made.
    #[serde(rename = "approval.failed")]
    ApprovalFailed,
}

impl EventType {
    pub const ALL: [EventType; 28] = [
        EventType::BidPlaced,
        EventType::BidCountered,
        EventType::BidAccepted,
        EventType::BidRejected,
        EventType::BidExpired,
        EventType::ThreadClosed,
        EventType::OrderCreated,
        EventType::OrderFulfilled,
        EventType::OrderCompleted,
        EventType::OrderCancelled,
        EventType::OrderRefunded,
        EventType::OrderScheduled,
        EventType::PaymentRecorded,
        EventType::PaymentConfirmed,
        EventType::PaymentDisputed,
        EventType::PaymentOverdue,
        EventType::DisputeEscalated,
        EventType::DisputeDecided,
        EventType::ListingSold,
        EventType::ListingWithdrawn,
        EventType::NegotiationActionRequired,
        EventType::NegotiationDeadlock,
        EventType::WebhookDisabled,
        EventType::ApprovalRequested,
        EventType::ApprovalApproved,
        EventType::ApprovalDenied,
        EventType::ApprovalExpired,
        EventType::ApprovalFailed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EventType::BidPlaced => "bid.placed",
            EventType::BidCountered => "bid.countered",
            EventType::BidAccepted => "bid.accepted",
            EventType::BidRejected => "bid.rejected",
            EventType::BidExpired => "bid.expired",
            EventType::ThreadClosed => "thread.closed",
            EventType::OrderCreated => "order.created",
            EventType::OrderFulfilled => "order.fulfilled",
            EventType::OrderCompleted => "order.completed",
            EventType::OrderCancelled => "order.cancelled",
            EventType::OrderRefunded => "order.refunded",
            EventType::OrderScheduled => "order.scheduled",
            EventType::PaymentRecorded => "payment.recorded",
            EventType::PaymentConfirmed => "payment.confirmed",
            EventType::PaymentDisputed => "payment.disputed",
            EventType::PaymentOverdue => "payment.overdue",
            EventType::DisputeEscalated => "dispute.escalated",
            EventType::DisputeDecided => "dispute.decided",
            EventType::ListingSold => "listing.sold",
            EventType::ListingWithdrawn => "listing.withdrawn",
            EventType::NegotiationActionRequired => "negotiation.action_required",
            EventType::NegotiationDeadlock => "negotiation.deadlock",
            EventType::WebhookDisabled => "webhook.disabled",
            EventType::ApprovalRequested => "approval.requested",
            EventType::ApprovalApproved => "approval.approved",
            EventType::ApprovalDenied => "approval.denied",
            EventType::ApprovalExpired => "approval.expired",
            EventType::ApprovalFailed => "approval.failed",
        }
    }
}

impl FromStr for EventType {
    type Err = String;

    fn from_str(value: &str) -> Result<EventType, String> {
        EventType::ALL.into_iter().find(|kind| kind.as_str() == value).ok_or_else(|| {
            let names: Vec<&str> = EventType::ALL.iter().map(|kind| kind.as_str()).collect();
            format!("`{value}` is not an event type; expected one of {}", names.join(", "))
        })
    }
}

impl TryFrom<String> for EventType {
    type Error = String;

    fn try_from(value: String) -> Result<EventType, String> {
        value.parse()
    }
}

impl fmt::Display for EventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An event, as agents read it (its id the reader's own number for it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    pub id: i64,
    #[serde(rename = "type")]
    pub kind: EventType,
    pub created_at: DateTime<Utc>,
    pub listing_id: Option<Uuid>,
    pub thread_id: Option<Uuid>,
    pub bid_id: Option<Uuid>,
    pub order_id: Option<Uuid>,
    pub data: Value,
}

/// A page of events; resume with `after = next_cursor`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventPage {
    pub data: Vec<Event>,
    #[serde(with = "cursor_string")]
    pub next_cursor: i64,
    pub has_more: bool,
}

/// The event cursor travels as a string of digits.
mod cursor_string {
    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    pub fn serialize<S: Serializer>(cursor: &i64, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&cursor.to_string())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<i64, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(|_| D::Error::custom(format!("next_cursor `{text}` is not an event id")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_type_names_round_trip() {
        for kind in EventType::ALL {
            assert_eq!(kind.as_str().parse::<EventType>().unwrap(), kind);
            assert_eq!(serde_json::to_value(kind).unwrap(), serde_json::json!(kind.as_str()));
        }
        assert!("bid.eaten".parse::<EventType>().unwrap_err().contains("bid.placed"));
    }
}
