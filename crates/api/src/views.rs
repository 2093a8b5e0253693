//! What the API answers with: the records agents see, each as it is shown, never a database row.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};
pub use haggle_domain::appointment::{Method as HandoverMethod, Window};
use haggle_domain::approval::BudgetScope;
use haggle_domain::bid::ConcessionRule;
use haggle_domain::deadlock::Method;
use haggle_domain::issues::Issues;
pub use haggle_domain::plan::{Installment, InstallmentStatus};
use haggle_domain::strategy::Policy;
use haggle_domain::{BidStatus, Currency, ListingStatus, Party, Reason, ThreadKind, ThreadStatus, Tier};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

pub use haggle_domain::order::{OrderStatus, PaymentStatus};

/// A registered agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Agent {
    pub id: Uuid,
    pub name: String,
    pub tier: Tier,
    pub agency_id: Option<String>,
    pub advertiser_id: Option<String>,
    pub seat_id: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// An API key's record: never the key itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyRecord {
    pub id: Uuid,
    pub prefix: String,
    pub created_at: DateTime<Utc>,
    pub revoked_at: Option<DateTime<Utc>>,
}

/// A new agent and its API key, shown this once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Registered {
    pub agent: Agent,
    pub api_key: String,
    pub key: KeyRecord,
}

/// A new API key, shown this once, and its record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IssuedKey {
    pub key: KeyRecord,
    pub api_key: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Listing {
    pub id: Uuid,
    pub seller_id: Uuid,
    pub title: String,
    pub description: String,
    pub ask_amount: i64,
    pub currency: Currency,
    pub quantity: i32,
    pub quantity_available: i32,
    pub status: ListingStatus,
    pub negotiable: bool,
    pub min_negotiation_tier: Tier,
    pub max_rounds: i32,
    pub bid_ttl_seconds: i32,
    pub max_threads_per_buyer: i32,
    /// The issues negotiated beside price, if the listing declares any.
    #[serde(default)]
    pub issues: Option<Issues>,
    /// Whether a counter may retract its mover's earlier concessions: `strict` or `none`.
    #[serde(default)]
    pub concession_rule: ConcessionRule,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// The mediator's suggestion for a deadlocked thread: a counter by `mover` at `amount` and
/// `terms` (answering the pending bid `bid_id`), to be accepted by the other side.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Suggestion {
    pub bid_id: Uuid,
    pub mover: Party,
    pub amount: i64,
    pub terms: Option<serde_json::Value>,
    pub method: Method,
    /// 0 for the suggestion made when the deadlock was detected; n for the one the n-th
    /// counter since renewed it for its new pending bid.
    #[serde(default)]
    pub renewal: u32,
}

/// A thread marked as deadlocked: when, the suggestion, and the parties that agreed to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Deadlock {
    pub detected_at: DateTime<Utc>,
    pub suggestion: Suggestion,
    pub agreed: Vec<Party>,
}

/// The answer to `POST /v1/threads/{id}/settle`: with `bid` (the counter at the suggestion,
/// accepted) and `order` once both parties agreed; without them while the other party has not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Settled {
    pub thread: Thread,
    pub bid: Option<Bid>,
    pub order: Option<Order>,
}

/// One negotiation between a buyer and the seller of a listing, as it truly is when shown (an
/// ACTIVE thread past its deadline reads EXPIRED before the sweeper has caught up).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Thread {
    pub id: Uuid,
    pub listing_id: Uuid,
    pub buyer_id: Uuid,
    pub seller_id: Uuid,
    pub status: ThreadStatus,
    pub rounds: i32,
    /// Whose move it is, while the thread is live.
    #[serde(default)]
    pub turn: Option<Party>,
    pub last_bid_id: Uuid,
    pub expires_at: Option<DateTime<Utc>>,
    pub closed_reason: Option<Reason>,
    /// Set once the thread stopped converging (`negotiation.deadlock`); boxed, as it is rare.
    #[serde(default)]
    pub deadlock: Option<Box<Deadlock>>,
    /// What it negotiates: `price` on a listing, or `refund` or `cancel` on an order.
    #[serde(default)]
    pub kind: ThreadKind,
    /// The order a `refund` or `cancel` negotiates on.
    #[serde(default)]
    pub order_id: Option<Uuid>,
    /// Set once a refund without agreement went to the operator; boxed, as it is rare.
    #[serde(default)]
    pub escalation: Option<Box<Escalation>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// A refund escalated to the operator: by whom and when, and the operator's decision once made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Escalation {
    pub escalated_at: DateTime<Utc>,
    pub escalated_by: Uuid,
    pub decision: Option<Decision>,
}

/// The operator's decision on an escalated refund: the amount refunded, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decision {
    pub amount: i64,
    pub note: String,
    pub decided_at: DateTime<Utc>,
}

/// The answer to `POST /v1/admin/threads/{id}/decide`: the thread with its decision, and the
/// order with the refund recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decided {
    pub thread: Thread,
    pub order: Order,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bid {
    pub id: Uuid,
    pub thread_id: Uuid,
    pub author: Party,
    pub author_id: Uuid,
    /// Its thread's kind.
    #[serde(default)]
    pub kind: ThreadKind,
    /// Minor units; 0 for a cancellation's bid, which names no amount.
    pub amount: i64,
    pub currency: Currency,
    pub message: Option<String>,
    pub terms: Option<serde_json::Value>,
    #[serde(rename = "final")]
    pub is_final: bool,
    pub status: BidStatus,
    pub reason: Option<Reason>,
    pub parent_bid_id: Option<Uuid>,
    pub round: i32,
    pub expires_at: DateTime<Utc>,
    pub responded_at: Option<DateTime<Utc>>,
    /// The approval the bid was made under (SPEC §10), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<ApprovalMark>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Order {
    pub id: Uuid,
    pub listing_id: Uuid,
    pub thread_id: Option<Uuid>,
    pub bid_id: Option<Uuid>,
    pub buyer_id: Uuid,
    pub seller_id: Uuid,
    pub amount: i64,
    pub currency: Currency,
    pub terms: Option<serde_json::Value>,
    /// CONFIRMED when made, FULFILLED once the seller has handed it over, COMPLETED once the
    /// buyer (or the server, after the configured time) has said so.
    pub status: OrderStatus,
    /// The confirmed payments' sum, in minor units.
    pub paid_amount: i64,
    /// What is still owed: `amount` less `paid_amount`.
    pub outstanding: i64,
    /// The refunds agreed (accepted refund negotiations) or decided by the operator, in minor
    /// units: never more than `paid_amount`.
    #[serde(default)]
    pub refunded_amount: i64,
    /// Owed back to the buyer by the seller: on a CANCELLED order, what was paid and not yet
    /// refunded; 0 otherwise.
    #[serde(default)]
    pub refund_due: i64,
    /// When an accepted `cancel` negotiation cancelled it.
    #[serde(default)]
    pub cancelled_at: Option<DateTime<Utc>>,
    /// The handover agreed by the latest accepted `schedule` negotiation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub appointment: Option<Appointment>,
    /// The payment plan agreed by an accepted `installments` negotiation, each installment with
    /// its status: confirmed payments fill them in due order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<Vec<PlannedInstallment>>,
    /// The seller's word on the handover, once fulfilled.
    pub fulfilment: Option<Fulfilment>,
    pub completed_at: Option<DateTime<Utc>>,
    /// The approval the order's move (an acceptance, a purchase) was made under, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<ApprovalMark>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// The window of the handover both parties agreed, how and where.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Appointment {
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
    pub method: HandoverMethod,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub place: Option<String>,
    /// The schedule negotiation that agreed it.
    pub thread_id: Uuid,
}

/// An installment of an agreed plan: `paid` once the confirmed payments since the plan cover it
/// and every installment before it, `overdue` once its due date has come without, `due` before.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedInstallment {
    pub amount: i64,
    pub due: DateTime<Utc>,
    pub status: InstallmentStatus,
}

/// The seller's word on handing an order over.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fulfilment {
    pub fulfilled_at: DateTime<Utc>,
    /// A shipment's tracking number, a pickup code: whatever the seller gave.
    pub reference: Option<String>,
    pub note: Option<String>,
}

/// A payment the buyer recorded on an order: the money moved outside Haggle, and the seller
/// confirms or disputes that it arrived.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Payment {
    pub id: Uuid,
    pub order_id: Uuid,
    pub amount: i64,
    pub currency: Currency,
    /// The payer's reference of the transfer (a processor's charge id, a bank reference).
    pub reference: String,
    pub status: PaymentStatus,
    /// Why the seller disputed it.
    pub dispute_reason: Option<String>,
    pub answered_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// An order with its payments, oldest first (`GET /v1/orders/{id}`, and the answers of the
/// order's own routes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderWithPayments {
    #[serde(flatten)]
    pub order: Order,
    pub payments: Vec<Payment>,
}

/// A payment and its order as the payment left it (`POST /v1/orders/{id}/payments`, and a
/// payment's confirmation or dispute).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PaymentAndOrder {
    pub payment: Payment,
    pub order: Order,
}

/// A thread with every bid in round order (`GET /v1/threads/{id}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadWithBids {
    #[serde(flatten)]
    pub thread: Thread,
    pub bids: Vec<Bid>,
}

/// A bid and its thread after a placement or a counter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BidAndThread {
    pub bid: Bid,
    pub thread: Thread,
}

/// The answer to an accept, a reject or a withdrawal: `order` only for an accept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Answered {
    pub bid: Bid,
    pub thread: Thread,
    pub order: Option<Order>,
}

/// The answer to a purchase at the ask.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Purchased {
    pub order: Order,
}

/// Where a policy applies, as its owner reads it back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PolicyLevel {
    Agent,
    Listing,
    Thread,
}

/// A policy as its owner reads it back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredPolicy {
    pub scope: PolicyLevel,
    pub role: Party,
    pub listing_id: Option<Uuid>,
    pub thread_id: Option<Uuid>,
    pub policy: Policy,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// Whether a webhook receives its deliveries. A webhook is disabled when one of its deliveries
/// runs out of retries; its owner enables it again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum WebhookStatus {
    Active,
    Disabled,
}

/// Where one delivery stands: `PENDING` until an attempt succeeds or its retries run out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum DeliveryStatus {
    Pending,
    Succeeded,
    Failed,
}

/// A webhook as its owner sees it: never its secret, only the secret's first characters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Webhook {
    pub id: Uuid,
    pub url: String,
    pub events: Vec<String>,
    pub status: WebhookStatus,
    pub disabled_reason: Option<String>,
    pub secret_prefix: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// A new webhook and its signing secret, shown this once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebhookCreated {
    pub webhook: Webhook,
    pub secret: String,
}

/// One attempt at a delivery.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attempt {
    pub attempt: i32,
    pub started_at: DateTime<Utc>,
    pub duration_ms: i32,
    /// The receiver's HTTP status, if it answered.
    pub response_status: Option<i32>,
    /// Why the attempt failed, if it got no answer (or the answer could not be read).
    pub error: Option<String>,
}

/// One event on its way to one webhook, with every attempt made so far, oldest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delivery {
    pub id: Uuid,
    pub webhook_id: Uuid,
    pub event_id: i64,
    pub event_type: crate::EventType,
    pub status: DeliveryStatus,
    pub attempts: i32,
    pub next_attempt_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub attempt_log: Vec<Attempt>,
}

/// The enums stored as text: their names, parsing back, and display.
macro_rules! named {
    ($ty:ident { $($variant:ident => $name:literal),* $(,)? }) => {
        impl $ty {
            pub const ALL: [$ty; [$($name),*].len()] = [$($ty::$variant),*];

            pub fn as_str(self) -> &'static str {
                match self {
                    $($ty::$variant => $name,)*
                }
            }
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $ty {
            type Err = String;

            fn from_str(value: &str) -> Result<$ty, String> {
                match value {
                    $($name => Ok($ty::$variant),)*
                    other => Err(format!(
                        "unknown {} `{other}`; expected one of {}",
                        stringify!($ty),
                        [$($name),*].join(", ")
                    )),
                }
            }
        }

        impl TryFrom<String> for $ty {
            type Error = String;

            fn try_from(value: String) -> Result<$ty, String> {
                value.parse()
            }
        }
    };
}

named!(WebhookStatus { Active => "ACTIVE", Disabled => "DISABLED" });
named!(DeliveryStatus { Pending => "PENDING", Succeeded => "SUCCEEDED", Failed => "FAILED" });
named!(PolicyLevel { Agent => "agent", Listing => "listing", Thread => "thread" });

/// A budget an approval left: later moves within it are made without asking.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrantedBudget {
    pub amount: i64,
    pub scope: BudgetScope,
    /// The thread or listing it covers.
    pub scope_id: Option<Uuid>,
    pub expires_at: DateTime<Utc>,
}

/// What a bid or order made under an approval carries: which approval, who gave it, when, and
/// the budget it left.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalMark {
    pub id: Uuid,
    pub approver: String,
    pub approved_at: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<GrantedBudget>,
}
