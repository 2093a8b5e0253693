//! What clients send: request bodies, read strictly by the server (unknown fields refused) and
//! written by the typed client, and the query strings of the routes that take one (read as
//! [`crate::query`] says).

use haggle_domain::bid::Proposal;
use haggle_domain::money::RawAmount;
use haggle_domain::{ListingStatus, Party, ThreadKind, ThreadStatus, Tier};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

pub use haggle_domain::listing::{ListingPatch, NewListing};
pub use haggle_domain::order::{Fulfil, NewPayment, PaymentDispute};

use crate::double_option;
use crate::query::{choice, cursor, event_id, limit};

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
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Placement {
    /// The opening amount in minor units, at most the listing's ask.
    pub amount: RawAmount,
    /// A note to the seller, up to 500 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schemars", schemars(length(max = 500)))]
    pub message: Option<String>,
    /// Seconds until the bid expires unanswered (60 to 2592000); the listing's `bid_ttl_seconds`
    /// by default.
    #[serde(default, deserialize_with = "haggle_domain::whole::option", skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schemars", schemars(range(min = 60, max = 2_592_000)))]
    pub expires_in: Option<i64>,
    /// Terms beside the price (a JSON object up to 4 KiB, e.g. `{"delivery_days": 5}`), bound
    /// into the order on acceptance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schemars", schemars(with = "Option<serde_json::Map<String, serde_json::Value>>"))]
    pub terms: Option<serde_json::Value>,
}

impl From<Placement> for Proposal {
    fn from(placement: Placement) -> Proposal {
        Proposal {
            amount: Some(placement.amount.into()),
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
            amount: offer.amount.map(Into::into),
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

/// `POST /v1/bids/{id}/accept`: empty, or `{}`; accepting a `schedule` bid names the window
/// taken, by its index in the bid's `terms.windows`: `{"terms": {"chosen": 0}}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Acceptance {
    /// Only on a schedule: `{"chosen": i}`, the index of the window taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schemars", schemars(with = "Option<serde_json::Map<String, serde_json::Value>>"))]
    pub terms: Option<serde_json::Value>,
}

impl Acceptance {
    /// The acceptance of a schedule bid taking its window `chosen` (an index into its windows).
    pub fn choosing(chosen: usize) -> Acceptance {
        Acceptance { terms: Some(serde_json::json!({ "chosen": chosen })) }
    }
}

/// `POST /v1/threads/{id}/settle`: the caller agrees to the thread's suggestion; naming the
/// pending bid it answers (`bid_id`) agrees to that suggestion only, so that an agreement sent
/// as a counter renewed the suggestion is refused rather than given to the renewed one.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Settle {
    /// The `bid_id` of the suggestion agreed to; the suggestion current when the agreement is
    /// recorded if left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bid_id: Option<Uuid>,
}

/// `POST /v1/bids/{id}/counter`. Terms left out carry over from the bid being answered;
/// `"terms": null` drops them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct CounterOffer {
    /// The counter amount in minor units: strictly between the two latest positions, never
    /// taking back a concession (the buyer from its previous amount up to below the seller's
    /// pending one; the seller from above the buyer's pending amount down to its previous one,
    /// the ask at first). Required on a price or a refund; left out on a schedule or a payment
    /// plan, whose counters propose other terms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub amount: Option<RawAmount>,
    /// A note to the other side, up to 500 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schemars", schemars(length(max = 500)))]
    pub message: Option<String>,
    /// Seconds until the counter expires unanswered (60 to 2592000); the listing's
    /// `bid_ttl_seconds` by default.
    #[serde(default, deserialize_with = "haggle_domain::whole::option", skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schemars", schemars(range(min = 60, max = 2_592_000)))]
    pub expires_in: Option<i64>,
    /// A final offer: the other side may then only accept or reject it. The bid that reaches
    /// the listing's `max_rounds` is final anyway.
    #[serde(default, rename = "final", skip_serializing_if = "Option::is_none")]
    pub is_final: Option<bool>,
    /// Terms beside the price; left out, the answered bid's terms carry over, and `null` drops them.
    #[serde(default, deserialize_with = "double_option", skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schemars", schemars(with = "Option<serde_json::Map<String, serde_json::Value>>"))]
    pub terms: Option<Option<serde_json::Value>>,
}

impl CounterOffer {
    /// A counter of `amount` minor units, marked final if `is_final`.
    pub fn new(amount: i64, is_final: bool) -> CounterOffer {
        CounterOffer {
            amount: Some(amount.into()),
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
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ListingQuery {
    /// Only this seller's listings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seller_id: Option<Uuid>,
    /// Only listings in this status.
    #[serde(default, deserialize_with = "choice", skip_serializing_if = "Option::is_none")]
    pub status: Option<ListingStatus>,
    /// Words to find in the title or description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub q: Option<String>,
    /// Page size, 1 to 200 (50 by default).
    #[serde(default, deserialize_with = "limit", skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schemars", schemars(range(min = 1, max = 200)))]
    pub limit: Option<u32>,
    /// The `next_cursor` of the previous page, for the next one.
    #[serde(default, deserialize_with = "cursor", skip_serializing_if = "Option::is_none")]
    pub cursor: Option<Uuid>,
}

/// Filters and paging for `GET /v1/threads`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ThreadQuery {
    /// Only the threads where I am the buyer, or the seller.
    #[serde(default, deserialize_with = "choice", skip_serializing_if = "Option::is_none")]
    pub role: Option<Party>,
    /// Only threads in this status (ACTIVE for live negotiations).
    #[serde(default, deserialize_with = "choice", skip_serializing_if = "Option::is_none")]
    pub status: Option<ThreadStatus>,
    /// Only threads on this listing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listing_id: Option<Uuid>,
    /// Only the negotiations on this order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub order_id: Option<Uuid>,
    /// Only threads of this kind (`price`, `refund`, `cancel`).
    #[serde(default, deserialize_with = "choice", skip_serializing_if = "Option::is_none")]
    pub kind: Option<ThreadKind>,
    /// Page size, 1 to 200 (50 by default).
    #[serde(default, deserialize_with = "limit", skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schemars", schemars(range(min = 1, max = 200)))]
    pub limit: Option<u32>,
    /// The `next_cursor` of the previous page, for the next one.
    #[serde(default, deserialize_with = "cursor", skip_serializing_if = "Option::is_none")]
    pub cursor: Option<Uuid>,
}

/// Filters and paging for `GET /v1/orders`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct OrderQuery {
    /// Only the orders where I am the buyer, or the seller.
    #[serde(default, deserialize_with = "choice", skip_serializing_if = "Option::is_none")]
    pub role: Option<Party>,
    /// Only orders on this listing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listing_id: Option<Uuid>,
    /// Page size, 1 to 200 (50 by default).
    #[serde(default, deserialize_with = "limit", skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schemars", schemars(range(min = 1, max = 200)))]
    pub limit: Option<u32>,
    /// The `next_cursor` of the previous page, for the next one.
    #[serde(default, deserialize_with = "cursor", skip_serializing_if = "Option::is_none")]
    pub cursor: Option<Uuid>,
}

/// `GET /v1/events`: events after `after`, at most `limit`, waiting up to `wait` seconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct EventQuery {
    /// The cursor: events with a larger id come back (0, the default, reads from the start). Pass
    /// the previous answer's `next_cursor`.
    #[serde(default, deserialize_with = "event_id")]
    #[cfg_attr(feature = "schemars", schemars(range(min = 0)))]
    pub after: i64,
    /// At most this many events, 1 to 200 (50 by default).
    #[serde(default, deserialize_with = "limit", skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schemars", schemars(range(min = 1, max = 200)))]
    pub limit: Option<u32>,
    /// With none yet, wait up to this many seconds (0 to 60) for the first one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schemars", schemars(range(min = 0, max = 60)))]
    pub wait: Option<f64>,
}

/// `GET /v1/events/stream` and `GET /v1/admin/events/stream`: where the stream starts when it
/// does not resume with `Last-Event-ID`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamQuery {
    /// The events after this id; without it, only those committed from now on.
    #[serde(default, deserialize_with = "haggle_domain::whole::text_option", skip_serializing_if = "Option::is_none")]
    pub after: Option<i64>,
}

/// `GET /v1/bids/{id}`: how long to wait for the bid to change.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WaitQuery {
    /// Seconds, 0 to 60 (fractions allowed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait: Option<f64>,
}

/// Paging for an agent's own lists: its keys, its webhooks and their deliveries.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PageQuery {
    /// Page size, 1 to 200 (50 by default).
    #[serde(default, deserialize_with = "limit", skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    /// The `next_cursor` of the previous page, for the next one.
    #[serde(default, deserialize_with = "cursor", skip_serializing_if = "Option::is_none")]
    pub cursor: Option<Uuid>,
}

/// `POST /v1/orders/{id}/negotiations`: opens a negotiation of `kind` on the order with its
/// first bid, between the order's buyer and seller.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct OpenNegotiation {
    /// `refund` (the buyer asks for money back), `cancel` (either party asks to call the order
    /// off before it is fulfilled), `schedule` (either party proposes handover windows) or
    /// `installments` (the buyer proposes a plan of payments).
    pub kind: ThreadKind,
    /// A refund's amount in minor units: at most what was paid (confirmed) and not yet
    /// refunded. The other kinds name none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub amount: Option<RawAmount>,
    /// A refund's `{reason, evidence?}` (`reason` one of `not_as_described`, `damaged`,
    /// `missing`, `late`, `other`; up to 10 `https` evidence URLs); a cancellation's `{reason}`
    /// (1 to 500 characters); a schedule's `{windows, method, place?}` (1 to 5 windows
    /// `{start, end}` ahead, each at most 7 days, none overlapping; `method` one of `pickup`,
    /// `delivery`, `other`); a plan's `{installments}` (2 to 12 `{amount, due}` summing to what is
    /// outstanding, due dates ascending, the first within 30 days).
    #[cfg_attr(feature = "schemars", schemars(with = "serde_json::Map<String, serde_json::Value>"))]
    pub terms: serde_json::Value,
    /// A note to the other side, up to 500 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schemars", schemars(length(max = 500)))]
    pub message: Option<String>,
    /// Seconds until the bid expires unanswered (60 to 2592000); the listing's
    /// `bid_ttl_seconds` by default.
    #[serde(default, deserialize_with = "haggle_domain::whole::option", skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schemars", schemars(range(min = 60, max = 2_592_000)))]
    pub expires_in: Option<i64>,
    /// A final offer: the other side may then only accept or reject it. A cancellation is
    /// always final.
    #[serde(default, rename = "final", skip_serializing_if = "Option::is_none")]
    pub is_final: Option<bool>,
}

/// `POST /v1/admin/threads/{id}/decide`: the operator's decision on an escalated refund.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DisputeDecision {
    /// The refund decided, in minor units: 0 up to what was paid and not yet refunded.
    #[serde(deserialize_with = "haggle_domain::whole::number")]
    pub amount: i64,
    /// Why, 1 to 500 characters; both parties see it.
    pub note: String,
}
