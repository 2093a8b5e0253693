//! What clients send: request bodies, read strictly by the server (unknown fields refused) and
//! written by the typed client, and the query strings of the list routes.

use haggle_domain::bid::Proposal;
use haggle_domain::money::RawAmount;
use haggle_domain::{ListingStatus, Party, ThreadStatus, Tier};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

pub use haggle_domain::listing::{ListingPatch, NewListing};

use crate::double_option;

/// `POST /v1/agents`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Registration {
    pub name: String,
}

/// `PATCH /v1/admin/agents/{id}`: the operator sets the tier and the verified identity. Absent
/// fields stay as they are; `null` clears an identity.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfilePatch {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<Tier>,
    #[serde(default, deserialize_with = "double_option", skip_serializing_if = "Option::is_none")]
    pub agency_id: Option<Option<String>>,
    #[serde(default, deserialize_with = "double_option", skip_serializing_if = "Option::is_none")]
    pub advertiser_id: Option<Option<String>>,
    #[serde(default, deserialize_with = "double_option", skip_serializing_if = "Option::is_none")]
    pub seat_id: Option<Option<String>>,
}

impl ProfilePatch {
    pub fn tier(tier: Tier) -> ProfilePatch {
        ProfilePatch { tier: Some(tier), ..ProfilePatch::default() }
    }
}

/// `POST /v1/listings/{id}/bids`: a buyer's opening bid.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Placement {
    pub amount: RawAmount,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, deserialize_with = "haggle_domain::whole::option", skip_serializing_if = "Option::is_none")]
    pub expires_in: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terms: Option<serde_json::Value>,
}

impl From<Placement> for Proposal {
    fn from(placement: Placement) -> Proposal {
        Proposal {
            amount: placement.amount,
            message: placement.message,
            expires_in: placement.expires_in,
            is_final: false,
            terms: placement.terms.map(Some),
        }
    }
}

impl From<CounterOffer> for Proposal {
    fn from(offer: CounterOffer) -> Proposal {
        Proposal {
            amount: offer.amount,
            message: offer.message,
            expires_in: offer.expires_in,
            is_final: offer.is_final.unwrap_or(false),
            terms: offer.terms,
        }
    }
}

impl Placement {
    /// An opening bid of `amount` minor units.
    pub fn new(amount: i64) -> Placement {
        Placement { amount: amount.into(), message: None, expires_in: None, terms: None }
    }
}

/// `POST /v1/bids/{id}/counter`. Terms left out carry over from the bid being answered;
/// `"terms": null` drops them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CounterOffer {
    pub amount: RawAmount,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, deserialize_with = "haggle_domain::whole::option", skip_serializing_if = "Option::is_none")]
    pub expires_in: Option<i64>,
    #[serde(default, rename = "final", skip_serializing_if = "Option::is_none")]
    pub is_final: Option<bool>,
    #[serde(default, deserialize_with = "double_option", skip_serializing_if = "Option::is_none")]
    pub terms: Option<Option<serde_json::Value>>,
}

impl CounterOffer {
    /// A counter of `amount` minor units, marked final if `is_final`.
    pub fn new(amount: i64, is_final: bool) -> CounterOffer {
        CounterOffer {
            amount: amount.into(),
            message: None,
            expires_in: None,
            is_final: is_final.then_some(true),
            terms: None,
        }
    }
}

/// `POST /v1/webhooks`: where to send which events (`*` for all).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewWebhook {
    pub url: String,
    pub events: Vec<String>,
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

/// Paging for the webhook lists.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PageQuery {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cursor: Option<Uuid>,
}
