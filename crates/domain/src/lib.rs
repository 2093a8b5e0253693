//! The pure heart of Haggle: money, tiers, listings, the bid state machine and the negotiation strategies.
//!
//! Nothing in here performs I/O. The HTTP layer and the background workers both
//! go through these rules, so every rule of the protocol lives in exactly one place.

pub mod appointment;
pub mod approval;
pub mod bid;
pub mod deadlock;
pub mod issues;
pub mod listing;
pub mod money;
pub mod order;
pub mod order_negotiation;
pub mod party;
pub mod plan;
pub mod rejection;
pub mod strategy;
pub mod thread;
pub mod tier;
pub mod whole;

pub use bid::{Action, Actor, BidState, BidStatus, Reason, Transition};
pub use listing::ListingStatus;
pub use money::{Amount, Currency};
pub use party::Party;
pub use rejection::{Code, FieldError, Rejection};
pub use thread::{ThreadKind, ThreadStatus};
pub use tier::Tier;

/// Statuses and codes are stored as text; reading them back goes through their parsers.
macro_rules! parse_from_string {
    ($($ty:ty),* $(,)?) => {$(
        impl TryFrom<String> for $ty {
            type Error = String;

            fn try_from(value: String) -> Result<Self, String> {
                value.parse()
            }
        }
    )*};
}

parse_from_string!(
    BidStatus,
    Party,
    Reason,
    ThreadStatus,
    ThreadKind,
    ListingStatus,
    Tier,
    Currency,
    bid::ConcessionRule
);
