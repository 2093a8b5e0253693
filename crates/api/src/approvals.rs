//! Approvals on the wire (SPEC §10): the rules as stored, held moves, approvers, and the answers
//! approvers give.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

pub use haggle_domain::approval::{ApprovalRules, ApprovalStatus, Budget, BudgetScope, Move, Rule};
use haggle_domain::{Currency, Party};

use crate::double_option;
use crate::query::{choice, cursor, limit};
use crate::views::{Bid, GrantedBudget, Order, PolicyLevel, Thread, WebhookCreated};

/// Approval rules as their owner reads them back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredApprovalRules {
    pub scope: PolicyLevel,
    pub listing_id: Option<Uuid>,
    pub thread_id: Option<Uuid>,
    #[serde(flatten)]
    pub rules: ApprovalRules,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// The exact move a request holds: what the agent sent, where, and the amount it commits to.
/// Its canonical JSON (keys sorted) is what `move_hash` and a receipt are computed over.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldMove {
    #[serde(rename = "move")]
    pub kind: Move,
    /// The request as it was sent: `POST /v1/bids/{id}/counter`, with the id.
    pub route: String,
    pub party: Party,
    pub listing_id: Uuid,
    /// The thread the move is made in (none yet for a placement or a purchase).
    pub thread_id: Option<Uuid>,
    /// The bid a counter or an acceptance answers.
    pub bid_id: Option<Uuid>,
    /// What the move commits to, in minor units: the counter's or opening bid's amount, the
    /// accepted bid's, the ask for a purchase.
    pub amount: i64,
    pub currency: Currency,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_in: Option<i64>,
    #[serde(rename = "final", default)]
    pub is_final: bool,
    /// A counter's terms: left out, the answered bid's carry over; `null` drops them. An
    /// acceptance's: on a schedule, the window it takes (`{"chosen": i}`).
    #[serde(default, deserialize_with = "double_option", skip_serializing_if = "Option::is_none")]
    pub terms: Option<Option<serde_json::Value>>,
}

/// Why an approved move was not made: its own refusal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalFailure {
    pub code: String,
    pub detail: String,
}

/// A request for approval, as the agent and its approvers read it (never the counterparty).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Approval {
    pub id: Uuid,
    pub agent_id: Uuid,
    /// As it truly is now: a pending request past its time reads EXPIRED.
    pub status: ApprovalStatus,
    #[serde(rename = "move")]
    pub held: HeldMove,
    /// The SHA-256 of the move's canonical JSON, in hex.
    pub move_hash: String,
    /// Who may answer: the agent's key, or the token of one of its approvers.
    pub approvers: Vec<String>,
    pub expires_at: DateTime<Utc>,
    pub answered_at: Option<DateTime<Utc>>,
    /// Who answered: an approver's name, or `agent`.
    pub approver: Option<String>,
    pub note: Option<String>,
    pub failure: Option<ApprovalFailure>,
    pub budget: Option<GrantedBudget>,
    /// What the approved move made.
    pub bid_id: Option<Uuid>,
    pub order_id: Option<Uuid>,
    /// The signed receipt of the approved move (a compact JWS), once made.
    pub receipt: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// `202`: the move was held for approval, and nothing was made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Held {
    pub approval: Approval,
}

/// The answer to an approval: the request as it ended (APPROVED, or FAILED with the move's
/// refusal), and what the move made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalOutcome {
    pub approval: Approval,
    pub bid: Option<Bid>,
    pub thread: Option<Thread>,
    pub order: Option<Order>,
}

/// `POST /v1/approvals/{id}/approve`; the body may be left out.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ApprovalGrant {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<Budget>,
    /// A word to the agent, up to 500 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// `POST /v1/approvals/{id}/deny`; the body may be left out.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ApprovalDenial {
    /// Why, for the agent to read; up to 500 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// `POST /v1/agents/me/approvers`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewApprover {
    pub name: String,
    /// Where the agent's approval.* events go for this approver, signed as every webhook's; its
    /// secret is in the answer, shown once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook_url: Option<String>,
}

/// An approver as the agent sees it: never its token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Approver {
    pub id: Uuid,
    pub name: String,
    pub prefix: String,
    pub created_at: DateTime<Utc>,
    pub revoked_at: Option<DateTime<Utc>>,
}

/// A new approver and its token, shown this once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApproverIssued {
    pub approver: Approver,
    pub token: String,
    /// The approver's webhook, with its signing secret shown this once, when a `webhook_url`
    /// was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook: Option<WebhookCreated>,
}

/// `GET /v1/approvals`: the agent's requests, newest first.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ApprovalQuery {
    /// Only requests in this status (as read now: a pending request past its time is EXPIRED).
    #[serde(default, deserialize_with = "choice", skip_serializing_if = "Option::is_none")]
    pub status: Option<ApprovalStatus>,
    /// Page size, 1 to 200 (50 by default).
    #[serde(default, deserialize_with = "limit", skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schemars", schemars(range(min = 1, max = 200)))]
    pub limit: Option<u32>,
    /// The `next_cursor` of the previous page, for the next one.
    #[serde(default, deserialize_with = "cursor", skip_serializing_if = "Option::is_none")]
    pub cursor: Option<Uuid>,
}
