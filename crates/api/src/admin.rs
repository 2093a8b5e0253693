//! What the operator's routes (`/v1/admin/*`) answer with and read, their query strings among it.

use std::str::FromStr;

use chrono::{DateTime, Utc};
use haggle_domain::{Currency, ThreadStatus, Tier};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::query::{choice, cursor, flag, hours, limit, moment};
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

/// Paging for the operator's lists without filters (an agent's keys, a webhook's deliveries):
/// as [`crate::PageQuery`], the cursor also read as `after`, as on every operator list. The
/// operator's queries are only ever query strings, where an absent value is not written.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AdminPageQuery {
    /// Page size, 1 to 200 (50 by default).
    #[serde(deserialize_with = "limit")]
    pub limit: Option<u32>,
    /// The `next_cursor` of the previous page, for the next one.
    #[serde(alias = "after", deserialize_with = "cursor")]
    pub cursor: Option<Uuid>,
}

/// Whether an agent is suspended, as `GET /v1/admin/agents` filters on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AgentStatus {
    Active,
    Suspended,
}

impl FromStr for AgentStatus {
    type Err = String;

    fn from_str(s: &str) -> Result<AgentStatus, String> {
        match s.to_ascii_lowercase().as_str() {
            "active" => Ok(AgentStatus::Active),
            "suspended" => Ok(AgentStatus::Suspended),
            _ => Err("must be `active` or `suspended`".to_owned()),
        }
    }
}

/// `GET /v1/admin/agents`: agents by name or id (`q`), tier and status.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AdminAgentQuery {
    /// A part of the name (case-insensitively), or the agent's id; blank is no filter.
    pub q: Option<String>,
    #[serde(deserialize_with = "choice")]
    pub tier: Option<Tier>,
    #[serde(deserialize_with = "choice")]
    pub status: Option<AgentStatus>,
    #[serde(deserialize_with = "limit")]
    pub limit: Option<u32>,
    #[serde(alias = "after", deserialize_with = "cursor")]
    pub cursor: Option<Uuid>,
}

/// `GET /v1/admin/threads`: any agent's threads.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AdminThreadQuery {
    #[serde(deserialize_with = "choice")]
    pub status: Option<ThreadStatus>,
    pub listing_id: Option<Uuid>,
    /// Threads where this agent is the buyer or the seller.
    pub agent_id: Option<Uuid>,
    /// Only refunds escalated to the operator and not yet decided (`true`); `false`, like
    /// none, is no filter.
    #[serde(deserialize_with = "flag")]
    pub escalated: Option<bool>,
    /// Only threads opened at or after this moment.
    #[serde(deserialize_with = "moment")]
    pub since: Option<DateTime<Utc>>,
    #[serde(deserialize_with = "limit")]
    pub limit: Option<u32>,
    #[serde(alias = "after", deserialize_with = "cursor")]
    pub cursor: Option<Uuid>,
}

/// `GET /v1/admin/orders`: any agent's orders.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AdminOrderQuery {
    /// Orders where this agent is the buyer or the seller.
    pub agent_id: Option<Uuid>,
    pub listing_id: Option<Uuid>,
    /// Only orders made at or after this moment.
    #[serde(deserialize_with = "moment")]
    pub since: Option<DateTime<Utc>>,
    #[serde(deserialize_with = "limit")]
    pub limit: Option<u32>,
    #[serde(alias = "after", deserialize_with = "cursor")]
    pub cursor: Option<Uuid>,
}

/// `GET /v1/admin/webhooks`: every webhook, or only the failing ones.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AdminWebhookQuery {
    /// Only the failing webhooks (`true`); `false`, like none, is no filter.
    #[serde(deserialize_with = "flag")]
    pub failing: Option<bool>,
    #[serde(deserialize_with = "limit")]
    pub limit: Option<u32>,
    #[serde(alias = "after", deserialize_with = "cursor")]
    pub cursor: Option<Uuid>,
}

/// `GET /v1/admin/stats`: the window, in hours.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StatsQuery {
    /// 1 to 720 ([`crate::query::DEFAULT_STATS_HOURS`] by default).
    #[serde(deserialize_with = "hours")]
    pub hours: Option<u32>,
}
