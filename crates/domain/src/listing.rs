//! Listings: what a seller offers, at what ask, and on which negotiation terms.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::bid::ConcessionRule;
use super::issues::Issues;
use super::money::{AmountLimits, Currency, RawAmount};
use super::rejection::{Rejection, Validator, in_range, text};
use super::tier::Tier;

pub const MAX_TITLE_CHARS: usize = 200;
pub const MAX_DESCRIPTION_CHARS: usize = 5000;
pub const MAX_QUANTITY: i64 = 1_000_000;
pub const MAX_ROUNDS: i64 = 100;
pub const MAX_THREADS_PER_BUYER: i64 = 100;

pub const DEFAULT_MAX_ROUNDS: i32 = 10;
pub const DEFAULT_BID_TTL_SECONDS: i32 = 172_800;
pub const DEFAULT_MAX_THREADS_PER_BUYER: i32 = 3;
pub const DEFAULT_MIN_NEGOTIATION_TIER: Tier = Tier::Agency;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ListingStatus {
    Active,
    Sold,
    Withdrawn,
}

impl ListingStatus {
    pub const ALL: [ListingStatus; 3] = [ListingStatus::Active, ListingStatus::Sold, ListingStatus::Withdrawn];

    pub fn as_str(self) -> &'static str {
        match self {
            ListingStatus::Active => "ACTIVE",
            ListingStatus::Sold => "SOLD",
            ListingStatus::Withdrawn => "WITHDRAWN",
        }
    }
}

impl fmt::Display for ListingStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ListingStatus {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ListingStatus::ALL
            .into_iter()
            .find(|status| status.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| format!("unknown listing status `{s}`; expected one of ACTIVE, SOLD, WITHDRAWN"))
    }
}

/// The seller-controlled terms of a listing, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListingTerms {
    pub title: String,
    pub description: String,
    pub ask_amount: i64,
    pub currency: Currency,
    pub quantity: i32,
    pub quantity_available: i32,
    pub negotiable: bool,
    pub min_negotiation_tier: Tier,
    pub max_rounds: i32,
    pub bid_ttl_seconds: i32,
    pub max_threads_per_buyer: i32,
    /// The issues negotiated beside price; none for a price-only listing.
    pub issues: Issues,
    /// Whether a counter may retract its mover's earlier concessions.
    pub concession_rule: ConcessionRule,
}

/// `POST /v1/listings`: a seller's new listing, as sent; [`NewListing::validate`] turns it into
/// terms. Fields left `None` take the defaults above.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct NewListing {
    /// What is for sale, up to 200 characters.
    pub title: String,
    /// More about it, up to 5000 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The asking price in minor units: the most a buyer's bid may be, and the price of buying now.
    pub ask_amount: RawAmount,
    /// ISO 4217 code, `USD` by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub currency: Option<String>,
    /// Units for sale (1 by default, up to 1000000); the last one sold closes the listing.
    #[serde(default, deserialize_with = "crate::whole::option", skip_serializing_if = "Option::is_none")]
    pub quantity: Option<i64>,
    /// Whether buyers may bid (true by default); if not, they can only buy at the ask.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub negotiable: Option<bool>,
    /// The lowest tier a buyer needs to negotiate (AGENCY by default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_negotiation_tier: Option<Tier>,
    /// The most bids one negotiation may hold (10 by default, 1 to 100); the bid reaching it is final.
    #[serde(default, deserialize_with = "crate::whole::option", skip_serializing_if = "Option::is_none")]
    pub max_rounds: Option<i64>,
    /// How long a bid stays open unanswered by default, in seconds (172800 = 48 h; 60 to 2592000).
    #[serde(default, deserialize_with = "crate::whole::option", skip_serializing_if = "Option::is_none")]
    pub bid_ttl_seconds: Option<i64>,
    /// How many negotiations one buyer may open on it (3 by default, 1 to 100).
    #[serde(default, deserialize_with = "crate::whole::option", skip_serializing_if = "Option::is_none")]
    pub max_threads_per_buyer: Option<i64>,
    /// Issues negotiated beside price (at most 8), each a whole-number range or an ordered list
    /// of values with the end the buyer prefers; every bid then states a value for each in its
    /// `terms`. Fixed once the listing is made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issues: Option<Issues>,
    /// How far a counter may move back: `strict` (the default) keeps every counter between the
    /// two latest positions; `none` lets a counter retract its mover's own earlier concessions,
    /// never crossing the other side's pending amount (nor, for a seller, past the ask).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concession_rule: Option<ConcessionRule>,
}

impl NewListing {
    /// A listing of `title` at an ask of `ask_amount` minor units, on the default terms.
    pub fn new(title: impl Into<String>, ask_amount: i64) -> NewListing {
        NewListing {
            title: title.into(),
            description: None,
            ask_amount: ask_amount.into(),
            currency: None,
            quantity: None,
            negotiable: None,
            min_negotiation_tier: None,
            max_rounds: None,
            bid_ttl_seconds: None,
            max_threads_per_buyer: None,
            issues: None,
            concession_rule: None,
        }
    }
}

/// `PATCH /v1/listings/{id}`: every field optional; the currency never changes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ListingPatch {
    /// A new title, up to 200 characters.
    pub title: Option<String>,
    /// A new description, up to 5000 characters.
    pub description: Option<String>,
    /// A new ask in minor units.
    pub ask_amount: Option<RawAmount>,
    /// Units for sale in all, more than those already sold.
    #[serde(default, deserialize_with = "crate::whole::option")]
    pub quantity: Option<i64>,
    /// Whether buyers may bid.
    pub negotiable: Option<bool>,
    /// The lowest tier a buyer needs to negotiate.
    pub min_negotiation_tier: Option<Tier>,
    /// The most bids one negotiation may hold (1 to 100).
    #[serde(default, deserialize_with = "crate::whole::option")]
    pub max_rounds: Option<i64>,
    /// How long a new bid stays open unanswered by default, in seconds (60 to 2592000).
    #[serde(default, deserialize_with = "crate::whole::option")]
    pub bid_ttl_seconds: Option<i64>,
    /// How many negotiations one buyer may open on it (1 to 100).
    #[serde(default, deserialize_with = "crate::whole::option")]
    pub max_threads_per_buyer: Option<i64>,
    /// `strict` or `none`: whether a counter may retract its mover's earlier concessions. A
    /// counter is held to the rule in force when it is made.
    pub concession_rule: Option<ConcessionRule>,
}

fn check_int(v: &mut Validator, field: &str, value: i64, min: i64, max: i64) -> Option<i32> {
    v.check(field, in_range(value, min, max)).map(|n| n as i32)
}

impl NewListing {
    pub fn validate(self, limits: AmountLimits) -> Result<ListingTerms, Rejection> {
        let mut v = Validator::new();
        let title = v.check("title", text(&self.title, true, MAX_TITLE_CHARS));
        let description =
            v.check("description", text(self.description.as_deref().unwrap_or(""), false, MAX_DESCRIPTION_CHARS));
        let ask = v.check("ask_amount", self.ask_amount.validate(limits));
        let currency = match self.currency.as_deref() {
            None => Some(Currency::USD),
            Some(code) => v.check("currency", Currency::parse(code)),
        };
        let quantity = check_int(&mut v, "quantity", self.quantity.unwrap_or(1), 1, MAX_QUANTITY);
        let max_rounds =
            check_int(&mut v, "max_rounds", self.max_rounds.unwrap_or(DEFAULT_MAX_ROUNDS.into()), 1, MAX_ROUNDS);
        let ttl = check_int(
            &mut v,
            "bid_ttl_seconds",
            self.bid_ttl_seconds.unwrap_or(DEFAULT_BID_TTL_SECONDS.into()),
            super::bid::MIN_EXPIRES_IN,
            super::bid::MAX_EXPIRES_IN,
        );
        let max_threads = check_int(
            &mut v,
            "max_threads_per_buyer",
            self.max_threads_per_buyer.unwrap_or(DEFAULT_MAX_THREADS_PER_BUYER.into()),
            1,
            MAX_THREADS_PER_BUYER,
        );
        let issues = self.issues.unwrap_or_default();
        issues.check(&mut v);
        v.finish()?;
        // Every Option is Some once the validator found no error.
        let (
            Some(title),
            Some(description),
            Some(ask),
            Some(currency),
            Some(quantity),
            Some(max_rounds),
            Some(ttl),
            Some(max_threads),
        ) = (title, description, ask, currency, quantity, max_rounds, ttl, max_threads)
        else {
            unreachable!("validator passed with a missing field");
        };
        Ok(ListingTerms {
            title,
            description,
            ask_amount: ask.minor_units(),
            currency,
            quantity,
            quantity_available: quantity,
            negotiable: self.negotiable.unwrap_or(true),
            min_negotiation_tier: self.min_negotiation_tier.unwrap_or(DEFAULT_MIN_NEGOTIATION_TIER),
            max_rounds,
            bid_ttl_seconds: ttl,
            max_threads_per_buyer: max_threads,
            issues,
            concession_rule: self.concession_rule.unwrap_or_default(),
        })
    }
}

impl ListingPatch {
    pub fn is_empty(&self) -> bool {
        self.title.is_none()
            && self.description.is_none()
            && self.ask_amount.is_none()
            && self.quantity.is_none()
            && self.negotiable.is_none()
            && self.min_negotiation_tier.is_none()
            && self.max_rounds.is_none()
            && self.bid_ttl_seconds.is_none()
            && self.max_threads_per_buyer.is_none()
            && self.concession_rule.is_none()
    }

    /// The listing's terms after this patch. Units already sold stay sold: a new quantity must
    /// leave at least one unit available.
    pub fn apply(self, current: &ListingTerms, limits: AmountLimits) -> Result<ListingTerms, Rejection> {
        let mut v = Validator::new();
        let mut next = current.clone();
        if let Some(title) = &self.title
            && let Some(title) = v.check("title", text(title, true, MAX_TITLE_CHARS))
        {
            next.title = title;
        }
        if let Some(description) = &self.description
            && let Some(description) = v.check("description", text(description, false, MAX_DESCRIPTION_CHARS))
        {
            next.description = description;
        }
        if let Some(ask) = self.ask_amount
            && let Some(ask) = v.check("ask_amount", ask.validate(limits))
        {
            next.ask_amount = ask.minor_units();
        }
        if let Some(quantity) = self.quantity {
            let sold = i64::from(current.quantity - current.quantity_available);
            if let Some(quantity) = check_int(&mut v, "quantity", quantity, 1, MAX_QUANTITY) {
                if i64::from(quantity) <= sold {
                    v.fail("quantity", format!("must exceed the {sold} units already sold"));
                } else {
                    next.quantity = quantity;
                    next.quantity_available = quantity - sold as i32;
                }
            }
        }
        if let Some(negotiable) = self.negotiable {
            next.negotiable = negotiable;
        }
        if let Some(tier) = self.min_negotiation_tier {
            next.min_negotiation_tier = tier;
        }
        if let Some(rule) = self.concession_rule {
            next.concession_rule = rule;
        }
        if let Some(max_rounds) = self.max_rounds
            && let Some(max_rounds) = check_int(&mut v, "max_rounds", max_rounds, 1, MAX_ROUNDS)
        {
            next.max_rounds = max_rounds;
        }
        if let Some(ttl) = self.bid_ttl_seconds
            && let Some(ttl) =
                check_int(&mut v, "bid_ttl_seconds", ttl, super::bid::MIN_EXPIRES_IN, super::bid::MAX_EXPIRES_IN)
        {
            next.bid_ttl_seconds = ttl;
        }
        if let Some(max_threads) = self.max_threads_per_buyer
            && let Some(max_threads) = check_int(&mut v, "max_threads_per_buyer", max_threads, 1, MAX_THREADS_PER_BUYER)
        {
            next.max_threads_per_buyer = max_threads;
        }
        v.finish()?;
        Ok(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn new_listing(json: serde_json::Value) -> Result<ListingTerms, Rejection> {
        serde_json::from_value::<NewListing>(json).unwrap().validate(AmountLimits::default())
    }

    fn fields(rejection: Rejection) -> Vec<String> {
        match rejection {
            Rejection::Validation(errors) => errors.into_iter().map(|e| e.field).collect(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn defaults_follow_the_spec() {
        let terms = new_listing(serde_json::json!({"title": "Desk", "ask_amount": 138000})).unwrap();
        assert_eq!(terms.currency, Currency::USD);
        assert_eq!((terms.quantity, terms.quantity_available), (1, 1));
        assert!(terms.negotiable);
        assert_eq!(terms.min_negotiation_tier, Tier::Agency);
        assert_eq!((terms.max_rounds, terms.bid_ttl_seconds, terms.max_threads_per_buyer), (10, 172_800, 3));
        assert_eq!(terms.concession_rule, ConcessionRule::Strict);
        let none = new_listing(serde_json::json!({"title": "Desk", "ask_amount": 1000, "concession_rule": "none"}));
        assert_eq!(none.unwrap().concession_rule, ConcessionRule::None);
        let unknown = serde_json::from_value::<NewListing>(
            serde_json::json!({"title": "Desk", "ask_amount": 1000, "concession_rule": "loose"}),
        );
        assert!(unknown.is_err());
    }

    #[test]
    fn every_bad_field_is_reported_at_once() {
        let err = new_listing(serde_json::json!({
            "title": " ", "ask_amount": 50, "currency": "XYZ", "quantity": 0,
            "max_rounds": 0, "bid_ttl_seconds": 10, "max_threads_per_buyer": 1000
        }))
        .unwrap_err();
        assert_eq!(
            fields(err),
            ["title", "ask_amount", "currency", "quantity", "max_rounds", "bid_ttl_seconds", "max_threads_per_buyer"]
        );
    }

    #[test]
    fn patches_keep_sold_units_sold() {
        let mut terms = new_listing(serde_json::json!({"title": "Desk", "ask_amount": 1000, "quantity": 5})).unwrap();
        terms.quantity_available = 3;
        let patch =
            ListingPatch { quantity: Some(10), ask_amount: Some(RawAmount::Integer(900)), ..Default::default() };
        let next = patch.apply(&terms, AmountLimits::default()).unwrap();
        assert_eq!((next.quantity, next.quantity_available, next.ask_amount), (10, 8, 900));
        let too_few = ListingPatch { quantity: Some(2), ..Default::default() };
        assert_eq!(fields(too_few.apply(&terms, AmountLimits::default()).unwrap_err()), ["quantity"]);
    }
}
