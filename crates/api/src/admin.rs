//! What the operator's routes (`/v1/admin/*`) answer with and read.

use chrono::{DateTime, Utc};
use haggle_domain::{Currency, Tier};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::views::WebhookStatus;

/// An agent as the operator sees it: its profile, when it was last active, whether it is
/// suspended, and how many live negotiations it is party to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdminAgent {
    pub id: Uuid,
    pub name: String,
    pub tier: Tier,
    pub agency_id: Option<String>,
    pub advertiser_id: Option<String>,
    pub seat_id: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// The latest of: the newest event the agent was told of (a bid, order or listing event in
    /// which it is a party, its own moves included), its newest listing, and its newest API
    /// key. `None` when there is none of them.
    pub last_active_at: Option<DateTime<Utc>>,
    /// When the operator suspended the agent; `None` unless suspended.
    pub suspended_at: Option<DateTime<Utc>>,
    /// The operator's note given with the suspension, if any.
    pub suspended_reason: Option<String>,
    /// Live (ACTIVE, not past their deadline) threads the agent is buyer or seller of.
    pub open_threads: i64,
}

/// The optional body of `POST /v1/admin/agents/{id}/suspend`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Suspension {
    /// A note for the operators, at most 500 characters.
    #[serde(default)]
    pub reason: Option<String>,
}

/// How many deliveries of a webhook are in each status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveryCounts {
    pub pending: i64,
    pub succeeded: i64,
    pub failed: i64,
}

/// A webhook as the operator sees it: its owner, and how its deliveries fare.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdminWebhook {
    pub id: Uuid,
    pub agent_id: Uuid,
    pub agent_name: String,
    pub url: String,
    pub events: Vec<String>,
    pub status: WebhookStatus,
    pub disabled_reason: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub deliveries: DeliveryCounts,
    /// When the latest failed attempt (no answer, or a status other than 2xx) started.
    pub last_failure_at: Option<DateTime<Utc>>,
}

/// Listings on the market.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListingCounts {
    pub active: i64,
    pub total: i64,
}

/// Registered agents.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentCounts {
    pub total: i64,
    pub suspended: i64,
}

/// An amount of money in one currency, in minor units.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Volume {
    pub currency: Currency,
    pub amount: i64,
}

/// One hour of the market.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HourStats {
    /// The start of the hour.
    pub hour: DateTime<Utc>,
    /// Orders created in the hour (accepted bids and purchases at the ask).
    pub deals: i64,
    /// The orders' amounts, summed per currency (currencies with no order are left out).
    pub volume: Vec<Volume>,
    /// Threads opened in the hour.
    pub negotiations_opened: i64,
}

/// The market at a glance (`GET /v1/admin/stats`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MarketStats {
    /// The window, in hours: the current hour and the `hours - 1` before it.
    pub hours: i64,
    pub listings: ListingCounts,
    pub agents: AgentCounts,
    /// Threads ACTIVE and not past their deadline, now.
    pub active_negotiations: i64,
    /// Every hour of the window, oldest first, zeros included.
    pub per_hour: Vec<HourStats>,
    /// The median `rounds` of the threads opened in the window that ended ACCEPTED; `None`
    /// when there is none.
    pub median_rounds_to_deal: Option<f64>,
    /// Of the threads opened in the window that have ended, the share that ended ACCEPTED;
    /// `None` when none has ended.
    pub agreement_rate: Option<f64>,
}
