//! The API's request and response bodies, as a client sends and reads them (see openapi.yaml).
//!
//! The records the server stores and returns unchanged (agents, listings, bids, threads, orders,
//! events) are the server's own types.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

pub use crate::db::webhooks::{Attempt, Delivery, Webhook};
pub use crate::db::{Agent, Bid, Listing, Order, Thread};
use crate::domain::strategy::Policy;
use crate::domain::{ListingStatus, Party, ThreadStatus, Tier};
pub use crate::events::Event;

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
pub struct Answer {
    pub bid: Bid,
    pub thread: Thread,
    pub order: Option<Order>,
}

/// The answer to a purchase at the ask.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Purchased {
    pub order: Order,
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

/// A page of a list, newest first; pass `next_cursor` as the query's `cursor` for the next one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Page<T> {
    pub data: Vec<T>,
    pub next_cursor: Option<Uuid>,
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

/// A policy as its owner reads it back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredPolicy {
    /// `agent`, `listing` or `thread`.
    pub scope: String,
    pub role: Party,
    pub listing_id: Option<Uuid>,
    pub thread_id: Option<Uuid>,
    pub policy: Policy,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// Where a policy applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyScope {
    /// The agent's default in one role.
    Agent(Party),
    /// One listing: its seller's policy, or a buyer's for it.
    Listing(Uuid),
    /// One thread.
    Thread(Uuid),
}

impl PolicyScope {
    pub(crate) fn path(self) -> String {
        match self {
            PolicyScope::Agent(role) => format!("/v1/agents/me/policies/{}", role.as_str()),
            PolicyScope::Listing(id) => format!("/v1/listings/{id}/policy"),
            PolicyScope::Thread(id) => format!("/v1/threads/{id}/policy"),
        }
    }
}

/// `POST /v1/listings`. Fields left `None` take the server's defaults.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct NewListing {
    pub title: String,
    pub ask_amount: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub currency: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quantity: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub negotiable: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_negotiation_tier: Option<Tier>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_rounds: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bid_ttl_seconds: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_threads_per_buyer: Option<i64>,
}

impl NewListing {
    pub fn new(title: impl Into<String>, ask_amount: i64) -> NewListing {
        NewListing { title: title.into(), ask_amount, ..NewListing::default() }
    }
}

/// `POST /v1/listings/{id}/bids`: an opening bid.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Placement {
    pub amount: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_in: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub terms: Option<serde_json::Value>,
}

impl Placement {
    pub fn new(amount: i64) -> Placement {
        Placement { amount, ..Placement::default() }
    }
}

/// `POST /v1/bids/{id}/counter`. Terms left `None` carry over from the countered bid.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CounterOffer {
    pub amount: i64,
    #[serde(rename = "final", skip_serializing_if = "std::ops::Not::not")]
    pub is_final: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_in: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub terms: Option<serde_json::Value>,
}

impl CounterOffer {
    pub fn new(amount: i64, is_final: bool) -> CounterOffer {
        CounterOffer { amount, is_final, ..CounterOffer::default() }
    }
}

/// Filters and paging for `GET /v1/listings`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ListingQuery {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seller_id: Option<Uuid>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<ListingStatus>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub q: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cursor: Option<Uuid>,
}

/// Filters and paging for `GET /v1/threads`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ThreadQuery {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<Party>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<ThreadStatus>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listing_id: Option<Uuid>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cursor: Option<Uuid>,
}

/// Filters and paging for `GET /v1/orders`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct OrderQuery {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<Party>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listing_id: Option<Uuid>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cursor: Option<Uuid>,
}

/// `GET /v1/events`: events after `after`, at most `limit`, waiting up to `wait` seconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct EventQuery {
    pub after: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wait: Option<f64>,
}

/// `PATCH /v1/admin/agents/{id}`, the operator's change to an agent. Fields left `None` stay.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ProfileUpdate {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tier: Option<Tier>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agency_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub advertiser_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seat_id: Option<String>,
}

impl ProfileUpdate {
    pub fn tier(tier: Tier) -> ProfileUpdate {
        ProfileUpdate { tier: Some(tier), ..ProfileUpdate::default() }
    }
}

/// `POST /v1/webhooks`: where to send which events (`*` for all).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NewWebhook {
    pub url: String,
    pub events: Vec<String>,
}

/// A new webhook and its signing secret, shown this once.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct WebhookCreated {
    pub webhook: Webhook,
    pub secret: String,
}

/// Paging for the webhook lists.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PageQuery {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cursor: Option<Uuid>,
}
