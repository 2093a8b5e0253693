//! A thread is one negotiation between one buyer and the seller of one listing.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::party::Party;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ThreadStatus {
    Active,
    Accepted,
    Rejected,
    Expired,
    Closed,
}

impl ThreadStatus {
    pub const ALL: [ThreadStatus; 5] = [
        ThreadStatus::Active,
        ThreadStatus::Accepted,
        ThreadStatus::Rejected,
        ThreadStatus::Expired,
        ThreadStatus::Closed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ThreadStatus::Active => "ACTIVE",
            ThreadStatus::Accepted => "ACCEPTED",
            ThreadStatus::Rejected => "REJECTED",
            ThreadStatus::Expired => "EXPIRED",
            ThreadStatus::Closed => "CLOSED",
        }
    }
}

impl fmt::Display for ThreadStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ThreadStatus {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ThreadStatus::ALL.into_iter().find(|status| status.as_str().eq_ignore_ascii_case(s)).ok_or_else(|| {
            format!("unknown thread status `{s}`; expected one of ACTIVE, ACCEPTED, REJECTED, EXPIRED, CLOSED")
        })
    }
}

/// What a thread negotiates: the price of a listing (a thread that can end in an order), or,
/// on an order already made, a refund, its cancellation, the handover's time and place
/// (`schedule`) or a payment plan (`installments`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum ThreadKind {
    #[default]
    Price,
    Refund,
    Cancel,
    Schedule,
    Installments,
}

impl ThreadKind {
    pub const ALL: [ThreadKind; 5] =
        [ThreadKind::Price, ThreadKind::Refund, ThreadKind::Cancel, ThreadKind::Schedule, ThreadKind::Installments];

    pub fn as_str(self) -> &'static str {
        match self {
            ThreadKind::Price => "price",
            ThreadKind::Refund => "refund",
            ThreadKind::Cancel => "cancel",
            ThreadKind::Schedule => "schedule",
            ThreadKind::Installments => "installments",
        }
    }
}

impl fmt::Display for ThreadKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ThreadKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ThreadKind::ALL.into_iter().find(|kind| kind.as_str() == s).ok_or_else(|| {
            format!("unknown thread kind `{s}`; expected one of price, refund, cancel, schedule, installments")
        })
    }
}

/// An ACTIVE thread whose pending bid is past its time reads EXPIRED before the sweep.
pub fn effective_status(status: ThreadStatus, expires_at: Option<DateTime<Utc>>, now: DateTime<Utc>) -> ThreadStatus {
    match (status, expires_at) {
        (ThreadStatus::Active, Some(deadline)) if deadline <= now => ThreadStatus::Expired,
        (
            ThreadStatus::Active
            | ThreadStatus::Accepted
            | ThreadStatus::Rejected
            | ThreadStatus::Expired
            | ThreadStatus::Closed,
            _,
        ) => status,
    }
}

/// Whose move it is: the responder to the latest bid while the thread is live, else nobody.
pub fn turn(effective: ThreadStatus, rounds: i32) -> Option<Party> {
    match effective {
        ThreadStatus::Active => Some(Party::author_of_round(rounds).other()),
        ThreadStatus::Accepted | ThreadStatus::Rejected | ThreadStatus::Expired | ThreadStatus::Closed => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Duration;

    #[test]
    fn turns_alternate_and_stop_when_the_thread_ends() {
        assert_eq!(turn(ThreadStatus::Active, 1), Some(Party::Seller));
        assert_eq!(turn(ThreadStatus::Active, 2), Some(Party::Buyer));
        assert_eq!(turn(ThreadStatus::Active, 3), Some(Party::Seller));
        assert_eq!(turn(ThreadStatus::Accepted, 3), None);
        assert_eq!(turn(ThreadStatus::Expired, 2), None);
    }

    #[test]
    fn an_active_thread_past_its_deadline_reads_expired() {
        let now = Utc::now();
        assert_eq!(effective_status(ThreadStatus::Active, Some(now), now), ThreadStatus::Expired);
        assert_eq!(effective_status(ThreadStatus::Active, Some(now + Duration::seconds(5)), now), ThreadStatus::Active);
        assert_eq!(effective_status(ThreadStatus::Closed, None, now), ThreadStatus::Closed);
    }
}
