//! An order's life after the handshake, and its payments: the two transition tables, and the
//! ledger that holds payments to the order's amount.
//!
//! An order is CONFIRMED when made; the seller fulfils it (FULFILLED), and the buyer, or the
//! server once the buyer has had long enough, completes it (COMPLETED). Money moves outside
//! Haggle, so payments are a ledger: the buyer records one (RECORDED), the seller confirms it
//! (CONFIRMED) or disputes it (DISPUTED). Only confirmed payments count as paid, and no payment
//! may take the paid amount past the order's.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::money::{Amount, AmountLimits, RawAmount};
use crate::party::Party;
use crate::rejection::{Rejection, Validator, text};

/// Where an order stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum OrderStatus {
    Confirmed,
    Fulfilled,
    Completed,
    /// Cancelled by an accepted `cancel` negotiation, before fulfilment.
    Cancelled,
}

impl OrderStatus {
    pub const ALL: [OrderStatus; 4] =
        [OrderStatus::Confirmed, OrderStatus::Fulfilled, OrderStatus::Completed, OrderStatus::Cancelled];

    pub fn as_str(self) -> &'static str {
        match self {
            OrderStatus::Confirmed => "CONFIRMED",
            OrderStatus::Fulfilled => "FULFILLED",
            OrderStatus::Completed => "COMPLETED",
            OrderStatus::Cancelled => "CANCELLED",
        }
    }
}

/// What may be done to an order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OrderAction {
    /// The seller has handed the goods over (shipped, delivered, made available).
    Fulfil,
    /// The buyer has what it bought: the deal is done.
    Complete,
    /// Both parties agreed to call the deal off (an accepted `cancel` negotiation).
    Cancel,
}

impl OrderAction {
    pub const ALL: [OrderAction; 3] = [OrderAction::Fulfil, OrderAction::Complete, OrderAction::Cancel];
}

/// Who acts on an order: one of its parties, or the server (completing a fulfilled order the
/// buyer left alone for the configured time).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OrderActor {
    Party(Party),
    Server,
}

/// The order's transition table: may `actor` perform `action` on an order in `status`, and what
/// does it become?
///
/// Checks run in a fixed order: who may act, then the status. Nothing leaves COMPLETED or
/// CANCELLED; an order is cancelled only before it is fulfilled, by either party (through the
/// negotiation whose acceptance is the other's consent).
pub fn apply(status: OrderStatus, action: OrderAction, actor: OrderActor) -> Result<OrderStatus, Rejection> {
    match (action, actor) {
        (OrderAction::Cancel, OrderActor::Party(_)) => {}
        (OrderAction::Cancel, OrderActor::Server) => {
            return Err(Rejection::forbidden("only the order's parties, agreeing, cancel it"));
        }
        (OrderAction::Fulfil, OrderActor::Party(Party::Seller)) => {}
        (OrderAction::Fulfil, OrderActor::Party(Party::Buyer) | OrderActor::Server) => {
            return Err(Rejection::forbidden("only the order's seller may fulfil it"));
        }
        (OrderAction::Complete, OrderActor::Party(Party::Buyer) | OrderActor::Server) => {}
        (OrderAction::Complete, OrderActor::Party(Party::Seller)) => {
            return Err(Rejection::forbidden(
                "only the order's buyer completes it (the server does once the buyer has had long enough)",
            ));
        }
    }
    match (action, status) {
        (OrderAction::Fulfil, OrderStatus::Confirmed) => Ok(OrderStatus::Fulfilled),
        (OrderAction::Complete, OrderStatus::Fulfilled) => Ok(OrderStatus::Completed),
        (OrderAction::Fulfil, OrderStatus::Fulfilled | OrderStatus::Completed) => {
            Err(invalid(status, format!("the order is {status} and was fulfilled already")))
        }
        (OrderAction::Complete, OrderStatus::Confirmed) => {
            Err(invalid(status, "the order is CONFIRMED: its seller has not fulfilled it yet".into()))
        }
        (OrderAction::Complete, OrderStatus::Completed) => {
            Err(invalid(status, "the order is COMPLETED already".into()))
        }
        (OrderAction::Cancel, OrderStatus::Confirmed) => Ok(OrderStatus::Cancelled),
        (OrderAction::Cancel, OrderStatus::Fulfilled | OrderStatus::Completed) => {
            Err(invalid(status, format!("the order is {status}: it can be cancelled only before it is fulfilled")))
        }
        (OrderAction::Fulfil | OrderAction::Complete | OrderAction::Cancel, OrderStatus::Cancelled) => {
            Err(invalid(status, "the order is CANCELLED".into()))
        }
    }
}

fn invalid(status: OrderStatus, detail: String) -> Rejection {
    Rejection::InvalidTransition { current_status: status.as_str(), detail }
}

/// Where a payment stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum PaymentStatus {
    Recorded,
    Confirmed,
    Disputed,
}

impl PaymentStatus {
    pub const ALL: [PaymentStatus; 3] = [PaymentStatus::Recorded, PaymentStatus::Confirmed, PaymentStatus::Disputed];

    pub fn as_str(self) -> &'static str {
        match self {
            PaymentStatus::Recorded => "RECORDED",
            PaymentStatus::Confirmed => "CONFIRMED",
            PaymentStatus::Disputed => "DISPUTED",
        }
    }
}

/// The payee's answer to a recorded payment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PaymentAction {
    Confirm,
    Dispute,
}

impl PaymentAction {
    pub const ALL: [PaymentAction; 2] = [PaymentAction::Confirm, PaymentAction::Dispute];
}

/// The payment's transition table: only the seller answers a payment (the payer never confirms
/// its own), and only once, while it is RECORDED. Checks run: who may act, then the status.
pub fn answer_payment(status: PaymentStatus, action: PaymentAction, party: Party) -> Result<PaymentStatus, Rejection> {
    match party {
        Party::Seller => {}
        Party::Buyer => {
            return Err(Rejection::forbidden(
                "only the order's seller, who receives the money, may confirm or dispute a payment",
            ));
        }
    }
    match (status, action) {
        (PaymentStatus::Recorded, PaymentAction::Confirm) => Ok(PaymentStatus::Confirmed),
        (PaymentStatus::Recorded, PaymentAction::Dispute) => Ok(PaymentStatus::Disputed),
        (PaymentStatus::Confirmed | PaymentStatus::Disputed, PaymentAction::Confirm | PaymentAction::Dispute) => {
            Err(Rejection::InvalidTransition {
                current_status: status.as_str(),
                detail: format!("the payment is {status} and was answered already"),
            })
        }
    }
}

/// What an order owes and what was paid of it, in minor units of its currency.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ledger {
    /// The order's amount.
    pub amount: i64,
    /// The confirmed payments' sum.
    pub paid: i64,
}

impl Ledger {
    pub fn outstanding(self) -> i64 {
        self.amount - self.paid
    }

    /// May a payment of `amount` be recorded or confirmed? Never one past what is outstanding,
    /// so the paid amount never exceeds the order's.
    pub fn admit(self, amount: i64) -> Result<(), Rejection> {
        if amount <= self.outstanding() {
            Ok(())
        } else {
            Err(Rejection::ExceedsOutstanding { outstanding: self.outstanding() })
        }
    }
}

/// Who may record a payment: the order's buyer, the payer.
pub fn require_payer(party: Party) -> Result<(), Rejection> {
    match party {
        Party::Buyer => Ok(()),
        Party::Seller => Err(Rejection::forbidden("only the order's buyer records payments; its seller confirms them")),
    }
}

/// `POST /v1/orders/{id}/fulfil`: the seller's word on the handover, both parts optional.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Fulfil {
    /// A shipment's tracking number, a pickup code: up to 200 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schemars", schemars(length(max = 200)))]
    pub reference: Option<String>,
    /// A note to the buyer, up to 500 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schemars", schemars(length(max = 500)))]
    pub note: Option<String>,
}

impl Fulfil {
    /// Checks every field at once.
    pub fn validate(self) -> Result<Fulfil, Rejection> {
        let mut check = Validator::new();
        let reference = self.reference.and_then(|value| check.check("reference", text(&value, true, 200)));
        let note = self.note.and_then(|value| check.check("note", text(&value, false, 500)));
        check.finish()?;
        Ok(Fulfil { reference, note })
    }
}

/// `POST /v1/orders/{id}/payments`: the buyer says it paid `amount` of the order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct NewPayment {
    /// The amount paid, in minor units of the order's currency: at most what is outstanding.
    pub amount: RawAmount,
    /// The transfer's reference (a processor's charge id, a bank reference), 1 to 200 characters.
    #[cfg_attr(feature = "schemars", schemars(length(min = 1, max = 200)))]
    pub reference: String,
}

/// A payment as validated: its amount and reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PaymentRecord {
    pub amount: Amount,
    pub reference: String,
}

impl NewPayment {
    /// Checks every field at once.
    pub fn validate(self, limits: AmountLimits) -> Result<PaymentRecord, Rejection> {
        let mut check = Validator::new();
        let amount = check.check("amount", self.amount.validate(limits));
        let reference = check.check("reference", text(&self.reference, true, 200));
        check.finish()?;
        Ok(PaymentRecord { amount: amount.expect("checked"), reference: reference.expect("checked") })
    }
}

/// `POST /v1/orders/{id}/payments/{payment_id}/dispute`: why the seller says the money did not
/// arrive as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct PaymentDispute {
    /// 1 to 500 characters.
    #[cfg_attr(feature = "schemars", schemars(length(min = 1, max = 500)))]
    pub reason: String,
}

impl PaymentDispute {
    pub fn validate(self) -> Result<String, Rejection> {
        text(&self.reason, true, 500).map_err(|message| Rejection::invalid("reason", message))
    }
}

macro_rules! display_and_parse {
    ($($ty:ident),*) => {$(
        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $ty {
            type Err = String;

            fn from_str(value: &str) -> Result<$ty, String> {
                $ty::ALL.into_iter().find(|status| status.as_str() == value).ok_or_else(|| {
                    let names: Vec<&str> = $ty::ALL.iter().map(|status| status.as_str()).collect();
                    format!("unknown {} `{value}`; expected one of {}", stringify!($ty), names.join(", "))
                })
            }
        }

        impl TryFrom<String> for $ty {
            type Error = String;

            fn try_from(value: String) -> Result<$ty, String> {
                value.parse()
            }
        }
    )*};
}

display_and_parse!(OrderStatus, PaymentStatus);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rejection::Code;
    use proptest::prelude::*;

    const ACTORS: [OrderActor; 3] =
        [OrderActor::Party(Party::Buyer), OrderActor::Party(Party::Seller), OrderActor::Server];

    #[test]
    fn the_happy_path_is_fulfil_then_complete() {
        let fulfilled = apply(OrderStatus::Confirmed, OrderAction::Fulfil, OrderActor::Party(Party::Seller)).unwrap();
        assert_eq!(fulfilled, OrderStatus::Fulfilled);
        assert_eq!(
            apply(fulfilled, OrderAction::Complete, OrderActor::Party(Party::Buyer)),
            Ok(OrderStatus::Completed)
        );
        assert_eq!(apply(fulfilled, OrderAction::Complete, OrderActor::Server), Ok(OrderStatus::Completed));
    }

    #[test]
    fn completing_before_fulfilment_is_an_invalid_transition() {
        let refused = apply(OrderStatus::Confirmed, OrderAction::Complete, OrderActor::Party(Party::Buyer));
        assert!(matches!(refused, Err(Rejection::InvalidTransition { current_status: "CONFIRMED", .. })));
    }

    #[test]
    fn the_buyer_never_answers_its_own_payment() {
        let refused = answer_payment(PaymentStatus::Recorded, PaymentAction::Confirm, Party::Buyer);
        assert_eq!(refused.unwrap_err().code(), Code::Forbidden);
        assert_eq!(require_payer(Party::Seller).unwrap_err().code(), Code::Forbidden);
        assert_eq!(require_payer(Party::Buyer), Ok(()));
    }

    #[test]
    fn statuses_read_back_as_they_are_written() {
        for status in OrderStatus::ALL {
            assert_eq!(status.as_str().parse::<OrderStatus>(), Ok(status));
        }
        for status in PaymentStatus::ALL {
            assert_eq!(status.as_str().parse::<PaymentStatus>(), Ok(status));
        }
        assert!("CANCELED".parse::<OrderStatus>().is_err());
    }

    proptest! {
        /// Every (status, action, actor) of the order's table: the seller alone fulfils, only
        /// from CONFIRMED; the buyer or the server alone completes, only from FULFILLED; either
        /// party cancels, only from CONFIRMED; an order only moves forward, and nothing leaves
        /// COMPLETED or CANCELLED. A refusal is `forbidden` for
        /// the wrong actor and `invalid_transition`, naming the status, for the wrong status.
        #[test]
        fn the_order_moves_forward_only(
            status in prop::sample::select(OrderStatus::ALL.to_vec()),
            action in prop::sample::select(OrderAction::ALL.to_vec()),
            actor in prop::sample::select(ACTORS.to_vec()),
        ) {
            let rank = |status: OrderStatus| OrderStatus::ALL.iter().position(|s| *s == status).unwrap();
            let allowed_actor = match action {
                OrderAction::Fulfil => actor == OrderActor::Party(Party::Seller),
                OrderAction::Complete => actor != OrderActor::Party(Party::Seller),
                OrderAction::Cancel => actor != OrderActor::Server,
            };
            let (from, to) = match action {
                OrderAction::Fulfil => (OrderStatus::Confirmed, OrderStatus::Fulfilled),
                OrderAction::Complete => (OrderStatus::Fulfilled, OrderStatus::Completed),
                OrderAction::Cancel => (OrderStatus::Confirmed, OrderStatus::Cancelled),
            };
            match apply(status, action, actor) {
                Ok(next) => {
                    prop_assert!(allowed_actor);
                    prop_assert_eq!(status, from);
                    prop_assert_eq!(next, to);
                    prop_assert!(rank(next) > rank(status));
                }
                Err(Rejection::Forbidden { .. }) => prop_assert!(!allowed_actor),
                Err(Rejection::InvalidTransition { current_status, .. }) => {
                    prop_assert!(allowed_actor);
                    prop_assert_ne!(status, from);
                    prop_assert_eq!(current_status, status.as_str());
                }
                Err(other) => prop_assert!(false, "unexpected refusal {:?}", other),
            }
        }

        /// A payment is answered once, by the seller, from RECORDED.
        #[test]
        fn a_payment_is_answered_once_by_the_seller(
            status in prop::sample::select(PaymentStatus::ALL.to_vec()),
            action in prop::sample::select(PaymentAction::ALL.to_vec()),
            party in prop::sample::select(vec![Party::Buyer, Party::Seller]),
        ) {
            match answer_payment(status, action, party) {
                Ok(next) => {
                    prop_assert_eq!(party, Party::Seller);
                    prop_assert_eq!(status, PaymentStatus::Recorded);
                    prop_assert_eq!(next, match action {
                        PaymentAction::Confirm => PaymentStatus::Confirmed,
                        PaymentAction::Dispute => PaymentStatus::Disputed,
                    });
                }
                Err(Rejection::Forbidden { .. }) => prop_assert_eq!(party, Party::Buyer),
                Err(Rejection::InvalidTransition { current_status, .. }) => {
                    prop_assert_eq!(party, Party::Seller);
                    prop_assert_ne!(status, PaymentStatus::Recorded);
                    prop_assert_eq!(current_status, status.as_str());
                }
                Err(other) => prop_assert!(false, "unexpected refusal {:?}", other),
            }
        }

        /// Whatever payments are confirmed in whatever order, the ledger admits each only while
        /// it fits, so the paid amount never passes the order's and every admitted payment is
        /// counted once.
        #[test]
        fn the_paid_amount_never_passes_the_order(
            amount in 100i64..10_000_000,
            payments in prop::collection::vec(1i64..5_000_000, 0..20),
        ) {
            let mut ledger = Ledger { amount, paid: 0 };
            for payment in payments {
                let before = ledger;
                match ledger.admit(payment) {
                    Ok(()) => {
                        prop_assert!(payment <= before.outstanding());
                        ledger.paid += payment;
                    }
                    Err(Rejection::ExceedsOutstanding { outstanding }) => {
                        prop_assert_eq!(outstanding, before.outstanding());
                        prop_assert!(payment > outstanding);
                    }
                    Err(other) => prop_assert!(false, "unexpected refusal {:?}", other),
                }
                prop_assert!(ledger.paid <= ledger.amount);
                prop_assert!(ledger.outstanding() >= 0);
            }
        }
    }
}
