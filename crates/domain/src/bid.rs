//! The bid state machine of SPEC §2.
//!
//! A thread holds a chain of bids; at most one is PENDING. The party who did not author the
//! pending bid is the responder, and only the responder may counter, accept or reject it.
//! [`apply`] is the whole transition table, matched exhaustively.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::money::{Amount, AmountLimits, MIN_AMOUNT, RawAmount};
use super::rejection::{FieldError, Rejection};
use super::thread::ThreadStatus;
pub use crate::party::Party;

/// Bounds on `expires_in`, in seconds.
pub const MIN_EXPIRES_IN: i64 = 60;
pub const MAX_EXPIRES_IN: i64 = 2_592_000;
/// Longest `message` on a bid, in characters.
pub const MAX_MESSAGE_CHARS: usize = 500;
/// Largest `terms` object on a bid, in bytes of JSON.
pub const MAX_TERMS_BYTES: usize = 4096;
/// Deepest nesting of `terms`: the object itself is level 1. Stored JSON is read back inside
/// envelopes (a thread, an event, a page) that must stay well under a JSON reader's recursion
/// limit (128 levels for serde_json).
pub const MAX_TERMS_DEPTH: usize = 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum BidStatus {
    Pending,
    Countered,
    Accepted,
    Rejected,
    Expired,
}

impl BidStatus {
    pub const ALL: [BidStatus; 5] =
        [BidStatus::Pending, BidStatus::Countered, BidStatus::Accepted, BidStatus::Rejected, BidStatus::Expired];

    pub fn as_str(self) -> &'static str {
        match self {
            BidStatus::Pending => "PENDING",
            BidStatus::Countered => "COUNTERED",
            BidStatus::Accepted => "ACCEPTED",
            BidStatus::Rejected => "REJECTED",
            BidStatus::Expired => "EXPIRED",
        }
    }
}

impl FromStr for BidStatus {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        BidStatus::ALL
            .into_iter()
            .find(|status| status.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| format!("unknown bid status `{s}`"))
    }
}

impl fmt::Display for BidStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A bid as its mover proposes it (an opening bid or a counter), before the rules have checked
/// it against the negotiation: what an agent sends, or what a policy decided.
#[derive(Debug, Clone, PartialEq)]
pub struct Proposal {
    /// The amount in minor units: as it arrived (checked against the limits with the rest), or
    /// as a caller that read it in its own dialect already validated it. `None` for a counter on
    /// a negotiation whose bids name no amount (a schedule, a payment plan), where what moves is
    /// the terms; every other bid requires one.
    pub amount: Option<Offered>,
    pub message: Option<String>,
    /// Seconds until the bid expires; the listing's default when `None`.
    pub expires_in: Option<i64>,
    /// Marks a counter final (an opening bid is final only at the listing's last round).
    pub is_final: bool,
    /// `None` carries the answered bid's terms over (an opening bid then has none);
    /// `Some(None)` drops them; `Some(Some(terms))` sets new ones.
    pub terms: Option<Option<serde_json::Value>>,
}

/// A proposal's amount: as it arrived, or already validated (and then never validated again).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Offered {
    Raw(RawAmount),
    Valid(Amount),
}

impl Offered {
    /// The amount, validated against `limits` if it has not been yet.
    pub fn validate(self, limits: AmountLimits) -> Result<Amount, String> {
        match self {
            Offered::Raw(raw) => raw.validate(limits),
            Offered::Valid(amount) => Ok(amount),
        }
    }
}

impl From<RawAmount> for Offered {
    fn from(raw: RawAmount) -> Offered {
        Offered::Raw(raw)
    }
}

/// Minor units that no one has checked yet, as a policy or a test proposes them.
impl From<i64> for Offered {
    fn from(minor_units: i64) -> Offered {
        Offered::Raw(minor_units.into())
    }
}

impl From<Amount> for Offered {
    fn from(amount: Amount) -> Offered {
        Offered::Valid(amount)
    }
}

impl Proposal {
    /// A bid of `amount` and nothing else: minor units still to be checked, or a validated
    /// [`Amount`].
    pub fn of(amount: impl Into<Offered>) -> Proposal {
        Proposal { amount: Some(amount.into()), message: None, expires_in: None, is_final: false, terms: None }
    }

    /// A counter naming no amount, only `terms` (on a schedule or a payment plan).
    pub fn of_terms(terms: serde_json::Value) -> Proposal {
        Proposal { amount: None, message: None, expires_in: None, is_final: false, terms: Some(Some(terms)) }
    }

    /// The same bid, marked final (or not).
    pub fn finally(self, is_final: bool) -> Proposal {
        Proposal { is_final, ..self }
    }

    /// The terms the new bid states itself, if any: `None` both when it carries the answered
    /// bid's over and when it drops them (a JSON `null` counts as no terms).
    pub fn own_terms(&self) -> Option<&serde_json::Value> {
        self.terms.as_ref().and_then(|terms| terms.as_ref()).filter(|terms| !terms.is_null())
    }

    /// Whether the bid keeps the terms of the bid it answers.
    pub fn carries_terms_over(&self) -> bool {
        self.terms.is_none()
    }
}

/// Who attempts an action: one of the two parties, or the server's expiry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Actor {
    Party(Party),
    Server,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    Counter,
    Accept,
    Reject,
    Withdraw,
    Expire,
}

impl Action {
    pub const ALL: [Action; 5] = [Action::Counter, Action::Accept, Action::Reject, Action::Withdraw, Action::Expire];
}

/// Why a bid left PENDING, or why a thread ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    Countered,
    Accepted,
    Rejected,
    Withdrawn,
    Expired,
    ListingSold,
    ListingWithdrawn,
    /// The operator suspended one of the parties: the server ended its live negotiations.
    AgentSuspended,
}

impl Reason {
    pub const ALL: [Reason; 8] = [
        Reason::Countered,
        Reason::Accepted,
        Reason::Rejected,
        Reason::Withdrawn,
        Reason::Expired,
        Reason::ListingSold,
        Reason::ListingWithdrawn,
        Reason::AgentSuspended,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Countered => "countered",
            Reason::Accepted => "accepted",
            Reason::Rejected => "rejected",
            Reason::Withdrawn => "withdrawn",
            Reason::Expired => "expired",
            Reason::ListingSold => "listing_sold",
            Reason::ListingWithdrawn => "listing_withdrawn",
            Reason::AgentSuspended => "agent_suspended",
        }
    }
}

impl FromStr for Reason {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Reason::ALL.into_iter().find(|reason| reason.as_str() == s).ok_or_else(|| format!("unknown reason `{s}`"))
    }
}

/// What the state machine needs to know about a bid to decide an action on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BidState {
    pub status: BidStatus,
    pub author: Party,
    pub is_final: bool,
    pub expires_at: DateTime<Utc>,
}

impl BidState {
    /// The truth before the sweeper runs: a PENDING bid past its time is EXPIRED.
    pub fn effective_status(&self, now: DateTime<Utc>) -> BidStatus {
        effective_status(self.status, self.expires_at, now)
    }
}

pub fn effective_status(status: BidStatus, expires_at: DateTime<Utc>, now: DateTime<Utc>) -> BidStatus {
    match status {
        BidStatus::Pending if expires_at <= now => BidStatus::Expired,
        BidStatus::Pending | BidStatus::Countered | BidStatus::Accepted | BidStatus::Rejected | BidStatus::Expired => {
            status
        }
    }
}

/// The effect of an allowed action on the bid and its thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    /// Bid → COUNTERED; a new PENDING bid by the responder follows.
    Counter,
    /// Bid → ACCEPTED; thread → ACCEPTED; an order is created.
    Accept,
    /// Bid → REJECTED; thread → REJECTED. The reason tells a rejection from a withdrawal.
    Reject(Reason),
    /// Bid → EXPIRED; thread → EXPIRED.
    Expire,
    /// Bid → REJECTED; thread → CLOSED: the listing sold out or was withdrawn, or the operator
    /// suspended a party (the reason says which) while the negotiation was live. The server's
    /// move, never a party's.
    Close(Reason),
}

impl Transition {
    pub fn bid_status(self) -> BidStatus {
        match self {
            Transition::Counter => BidStatus::Countered,
            Transition::Accept => BidStatus::Accepted,
            Transition::Reject(_) | Transition::Close(_) => BidStatus::Rejected,
            Transition::Expire => BidStatus::Expired,
        }
    }

    /// The thread's status afterwards; a counter keeps it ACTIVE.
    pub fn thread_status(self) -> ThreadStatus {
        match self {
            Transition::Counter => ThreadStatus::Active,
            Transition::Accept => ThreadStatus::Accepted,
            Transition::Reject(_) => ThreadStatus::Rejected,
            Transition::Expire => ThreadStatus::Expired,
            Transition::Close(_) => ThreadStatus::Closed,
        }
    }

    pub fn reason(self) -> Reason {
        match self {
            Transition::Counter => Reason::Countered,
            Transition::Accept => Reason::Accepted,
            Transition::Reject(reason) | Transition::Close(reason) => reason,
            Transition::Expire => Reason::Expired,
        }
    }
}

/// The server's expiry of a bid, wherever it is recorded (the sweeper, or an action that finds
/// the bid past its time): allowed once a PENDING bid has reached its deadline. [`apply`] with
/// `Actor::Server` and `Action::Expire` is this.
pub fn expire(status: BidStatus, expires_at: DateTime<Utc>, now: DateTime<Utc>) -> Result<Transition, Rejection> {
    match status {
        BidStatus::Pending if expires_at <= now => Ok(Transition::Expire),
        BidStatus::Pending => Err(Rejection::InvalidTransition {
            current_status: BidStatus::Pending.as_str(),
            detail: "the bid has not reached its expiry time".into(),
        }),
        BidStatus::Countered | BidStatus::Accepted | BidStatus::Rejected | BidStatus::Expired => {
            Err(Rejection::InvalidTransition {
                current_status: status.as_str(),
                detail: format!("the bid is {status} and can no longer change"),
            })
        }
    }
}

/// How a live negotiation ends when its listing sells out or is withdrawn, or a party is
/// suspended (`reason`), as the server closes it at `now`: its pending bid expires if it already ran out of time, and is
/// otherwise rejected with the thread closed.
pub fn close(expires_at: DateTime<Utc>, now: DateTime<Utc>, reason: Reason) -> Transition {
    match expire(BidStatus::Pending, expires_at, now) {
        Ok(expiry) => expiry,
        Err(_) => Transition::Close(reason),
    }
}

/// The transition table: may `actor` perform `action` on `bid` at `now`?
///
/// Checks run in a fixed order: the bid's status, then who may act, then expiry, then `final`.
/// An action by a party on a PENDING bid past its time is refused with `BidExpired`; the caller
/// then records the expiry, as SPEC §2 requires.
pub fn apply(bid: &BidState, action: Action, actor: Actor, now: DateTime<Utc>) -> Result<Transition, Rejection> {
    match bid.status {
        BidStatus::Pending => {}
        BidStatus::Countered | BidStatus::Accepted | BidStatus::Rejected | BidStatus::Expired => {
            return Err(Rejection::InvalidTransition {
                current_status: bid.status.as_str(),
                detail: format!("the bid is {} and can no longer change", bid.status),
            });
        }
    }
    let expired = bid.expires_at <= now;
    let responder = bid.author.other();

    match (action, actor) {
        (Action::Expire, Actor::Server) => expire(bid.status, bid.expires_at, now),
        (Action::Expire, Actor::Party(_)) => Err(Rejection::forbidden("only the server expires bids")),
        (Action::Counter | Action::Accept | Action::Reject | Action::Withdraw, Actor::Server) => {
            Err(Rejection::forbidden("the server only expires bids; parties answer them"))
        }

        (Action::Withdraw, Actor::Party(party)) if party != bid.author => {
            Err(Rejection::forbidden("only the author of a bid may withdraw it; the responder may reject it"))
        }
        (Action::Withdraw, Actor::Party(_)) if expired => Err(Rejection::BidExpired),
        (Action::Withdraw, Actor::Party(_)) => Ok(Transition::Reject(Reason::Withdrawn)),

        (Action::Counter | Action::Accept | Action::Reject, Actor::Party(party)) if party != responder => {
            Err(Rejection::NotYourTurn { turn: responder })
        }
        (Action::Counter | Action::Accept | Action::Reject, Actor::Party(_)) if expired => Err(Rejection::BidExpired),
        (Action::Counter, Actor::Party(_)) if bid.is_final => Err(Rejection::FinalOffer),
        (Action::Counter, Actor::Party(_)) => Ok(Transition::Counter),
        (Action::Accept, Actor::Party(_)) => Ok(Transition::Accept),
        (Action::Reject, Actor::Party(_)) => Ok(Transition::Reject(Reason::Rejected)),
    }
}

/// How far a counter on a listing may move back (SPEC §2, "Amount rules"): the listing's
/// `concession_rule`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum ConcessionRule {
    /// A counter lies between the two latest positions: it never retracts a concession.
    #[default]
    Strict,
    /// A counter may retract the mover's own earlier concessions, but never crosses the other
    /// side's pending amount (nor, for a seller, goes past the ask).
    None,
}

impl ConcessionRule {
    pub const ALL: [ConcessionRule; 2] = [ConcessionRule::Strict, ConcessionRule::None];

    pub fn as_str(self) -> &'static str {
        match self {
            ConcessionRule::Strict => "strict",
            ConcessionRule::None => "none",
        }
    }
}

impl FromStr for ConcessionRule {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ConcessionRule::ALL
            .into_iter()
            .find(|rule| rule.as_str() == s)
            .ok_or_else(|| format!("unknown concession rule `{s}`; expected strict or none"))
    }
}

impl fmt::Display for ConcessionRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The two latest positions of a negotiation as the side about to counter sees them: the other
/// side's pending amount, and its own previous one (the ask, for the seller's first counter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Positions {
    pub pending: i64,
    pub own_previous: i64,
}

/// What a listing holds a counter on it to beside the two positions: its concession rule, and
/// its ask (under `none`, the most a seller may go back to).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CounterTerms {
    pub rule: ConcessionRule,
    pub ask: i64,
}

impl CounterTerms {
    /// The strict rule, whatever the ask: what every negotiation was held to before listings
    /// had a rule, and what a policy's own counters keep to.
    pub const STRICT: CounterTerms = CounterTerms { rule: ConcessionRule::Strict, ask: i64::MAX };
}

impl Positions {
    /// The inclusive range of amounts `mover` may counter with under the strict rule.
    ///
    /// A counter lies strictly between the two latest positions and never retracts a concession:
    /// the buyer moves within `[own_previous, pending)`, the seller within `(pending, own_previous]`,
    /// where the seller's first previous position is the ask. An empty range (`min > max`) means
    /// there is no room left to counter.
    pub fn counter_range(self, mover: Party) -> (i64, i64) {
        let Positions { pending, own_previous } = self;
        match mover {
            Party::Buyer => (own_previous, pending - 1),
            Party::Seller => (pending + 1, own_previous),
        }
    }

    /// The inclusive range of amounts `mover` may counter with on a listing with `terms`.
    ///
    /// Strict: [`Positions::counter_range`]. `none`: the buyer anywhere in `[MIN_AMOUNT, pending)`
    /// (the smallest amount there is), the seller anywhere in `(pending, ask]`, or up to its own
    /// previous price if the seller has since lowered the ask below it; so `none` never allows
    /// less than strict does, and never lets a counter reach or cross the other side's pending
    /// amount.
    pub fn range_on(self, mover: Party, terms: CounterTerms) -> (i64, i64) {
        match terms.rule {
            ConcessionRule::Strict => self.counter_range(mover),
            ConcessionRule::None => match mover {
                Party::Buyer => (MIN_AMOUNT.min(self.own_previous), self.pending - 1),
                Party::Seller => (self.pending + 1, terms.ask.max(self.own_previous)),
            },
        }
    }
}

/// Whether `mover` may counter the pending bid with `amount` minor units under the strict rule:
/// within [`Positions::counter_range`].
pub fn check_counter(mover: Party, amount: i64, positions: Positions) -> Result<(), Rejection> {
    check_counter_on(mover, amount, positions, CounterTerms::STRICT)
}

/// Whether `mover` may counter the pending bid with `amount` minor units on a listing with
/// `terms`: within [`Positions::range_on`].
pub fn check_counter_on(mover: Party, amount: i64, positions: Positions, terms: CounterTerms) -> Result<(), Rejection> {
    let (min, max) = positions.range_on(mover, terms);
    if min > max {
        return Err(Rejection::NotAConcession {
            min,
            max,
            detail: "there is no amount left between the two positions; accept or reject the pending bid".into(),
        });
    }
    if amount < min || amount > max {
        let Positions { pending, own_previous } = positions;
        let detail = match (terms.rule, mover) {
            (ConcessionRule::Strict, Party::Buyer) => format!(
                "a buyer's counter must be at least its previous offer ({own_previous}) and below the seller's pending amount ({pending}): {min} to {max}"
            ),
            (ConcessionRule::Strict, Party::Seller) => format!(
                "a seller's counter must be above the buyer's pending amount ({pending}) and at most its previous price ({own_previous}): {min} to {max}"
            ),
            (ConcessionRule::None, Party::Buyer) => format!(
                "a buyer's counter must be below the seller's pending amount ({pending}): {min} to {max} (this listing lets a counter retract)"
            ),
            (ConcessionRule::None, Party::Seller) => format!(
                "a seller's counter must be above the buyer's pending amount ({pending}) and at most the ask: {min} to {max} (this listing lets a counter retract)"
            ),
        };
        return Err(Rejection::NotAConcession { min, max, detail });
    }
    Ok(())
}

/// A listing's asking price in minor units: the most a buyer may open with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ask(pub i64);

/// A buyer's opening bid of `amount` minor units is at most the ask.
pub fn check_opening(amount: i64, Ask(ask): Ask) -> Result<(), Rejection> {
    if amount > ask {
        return Err(Rejection::Validation(vec![FieldError::new(
            "amount",
            format!("must not exceed the ask of {ask}; to pay the ask, purchase the listing instead"),
        )]));
    }
    Ok(())
}

/// The bid that reaches `max_rounds` is final automatically; a party may mark any counter final.
pub fn is_final(round: i32, max_rounds: i32, requested: bool) -> bool {
    requested || round >= max_rounds
}

/// The lifetime of a new bid: `expires_in` if given (60 s to 30 days), else the listing's default.
pub fn expires_in(requested: Option<i64>, listing_default: i32) -> Result<i32, String> {
    match requested {
        None => Ok(listing_default),
        Some(seconds) if (MIN_EXPIRES_IN..=MAX_EXPIRES_IN).contains(&seconds) => Ok(seconds as i32),
        Some(_) => Err(format!("must be between {MIN_EXPIRES_IN} and {MAX_EXPIRES_IN} seconds")),
    }
}

/// Checks a bid's free-text message.
pub fn check_message(message: Option<&str>) -> Result<(), String> {
    match message {
        Some(text) => super::rejection::text(text, false, MAX_MESSAGE_CHARS).map(drop),
        None => Ok(()),
    }
}

/// Checks a bid's `terms`: a JSON object of at most 4 KiB, nested at most [`MAX_TERMS_DEPTH`]
/// levels deep.
pub fn check_terms(terms: Option<&serde_json::Value>) -> Result<(), String> {
    match terms {
        None | Some(serde_json::Value::Null) => Ok(()),
        Some(value @ serde_json::Value::Object(_)) => {
            if depth_exceeds(value, MAX_TERMS_DEPTH) {
                return Err(format!("must be nested at most {MAX_TERMS_DEPTH} levels deep"));
            }
            let size = serde_json::to_vec(value).map(|bytes| bytes.len()).unwrap_or(usize::MAX);
            if size > MAX_TERMS_BYTES {
                Err(format!("must be at most {MAX_TERMS_BYTES} bytes of JSON"))
            } else if contains_nul(value) {
                Err("must not contain the NUL character".into())
            } else {
                Ok(())
            }
        }
        Some(_) => Err("must be a JSON object".into()),
    }
}

/// Whether the value nests more than `limit` levels of arrays and objects (a scalar is level 0).
/// Iterative, so that no input can exhaust the stack.
pub fn depth_exceeds(value: &serde_json::Value, limit: usize) -> bool {
    let mut stack = vec![(value, 0usize)];
    while let Some((value, depth)) = stack.pop() {
        let children: Box<dyn Iterator<Item = &serde_json::Value>> = match value {
            serde_json::Value::Array(items) => Box::new(items.iter()),
            serde_json::Value::Object(fields) => Box::new(fields.values()),
            serde_json::Value::Null
            | serde_json::Value::Bool(_)
            | serde_json::Value::Number(_)
            | serde_json::Value::String(_) => {
                continue;
            }
        };
        if depth + 1 > limit {
            return true;
        }
        stack.extend(children.map(|child| (child, depth + 1)));
    }
    false
}

/// Whether any key or string in the value holds U+0000, which PostgreSQL cannot store.
fn contains_nul(value: &serde_json::Value) -> bool {
    match value {
        serde_json::Value::String(text) => text.contains('\0'),
        serde_json::Value::Array(items) => items.iter().any(contains_nul),
        serde_json::Value::Object(fields) => {
            fields.iter().any(|(key, value)| key.contains('\0') || contains_nul(value))
        }
        serde_json::Value::Null | serde_json::Value::Bool(_) | serde_json::Value::Number(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Duration;
    use proptest::prelude::*;

    fn now() -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000, 0).unwrap()
    }

    /// The role of the actor relative to the bid, which is what the table is written in.
    #[derive(Debug, Clone, Copy)]
    enum Who {
        Author,
        Responder,
        Server,
    }

    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Expect {
        Ok(Transition),
        Invalid,
        Expired,
        /// Naming whose turn it is.
        NotYourTurn(Party),
        Forbidden,
        Final,
    }

    fn classify(result: Result<Transition, Rejection>) -> Expect {
        match result {
            Ok(t) => Expect::Ok(t),
            Err(Rejection::InvalidTransition { .. }) => Expect::Invalid,
            Err(Rejection::BidExpired) => Expect::Expired,
            Err(Rejection::NotYourTurn { turn }) => Expect::NotYourTurn(turn),
            Err(Rejection::Forbidden { .. }) => Expect::Forbidden,
            Err(Rejection::FinalOffer) => Expect::Final,
            Err(other) => panic!("unexpected rejection {other:?}"),
        }
    }

    /// The expected outcome of every (bid state × action × actor), written out by hand.
    fn expected(status: BidStatus, expired: bool, is_final: bool, author: Party, action: Action, who: Who) -> Expect {
        use Expect::*;
        if status != BidStatus::Pending {
            return Invalid;
        }
        match (action, who) {
            (Action::Expire, Who::Server) => {
                if expired {
                    Ok(Transition::Expire)
                } else {
                    Invalid
                }
            }
            (Action::Expire, _) => Forbidden,
            (_, Who::Server) => Forbidden,
            (Action::Withdraw, Who::Responder) => Forbidden,
            (Action::Withdraw, Who::Author) => {
                if expired {
                    Expired
                } else {
                    Ok(Transition::Reject(Reason::Withdrawn))
                }
            }
            (_, Who::Author) => NotYourTurn(author.other()),
            (_, Who::Responder) if expired => Expired,
            (Action::Counter, Who::Responder) if is_final => Final,
            (Action::Counter, Who::Responder) => Ok(Transition::Counter),
            (Action::Accept, Who::Responder) => Ok(Transition::Accept),
            (Action::Reject, Who::Responder) => Ok(Transition::Reject(Reason::Rejected)),
        }
    }

    #[test]
    fn terms_nest_at_most_the_limit() {
        let nested = |levels: usize| {
            let mut value = serde_json::json!(1);
            for _ in 0..levels {
                value = serde_json::json!({ "n": value });
            }
            value
        };
        assert!(check_terms(Some(&nested(MAX_TERMS_DEPTH))).is_ok());
        let too_deep = check_terms(Some(&nested(MAX_TERMS_DEPTH + 1))).unwrap_err();
        assert!(too_deep.contains("levels deep"), "{too_deep}");
        assert!(!depth_exceeds(&serde_json::json!([[1]]), 2));
        assert!(depth_exceeds(&serde_json::json!([[[1]]]), 2));
        assert!(!depth_exceeds(&serde_json::json!(1), 0));
    }

    #[test]
    fn every_status_action_and_actor_is_decided_as_the_table_says() {
        let mut checked = 0;
        for status in BidStatus::ALL {
            for expired in [false, true] {
                for is_final in [false, true] {
                    for author in [Party::Buyer, Party::Seller] {
                        for action in Action::ALL {
                            for who in [Who::Author, Who::Responder, Who::Server] {
                                let expires_at =
                                    if expired { now() - Duration::seconds(1) } else { now() + Duration::hours(1) };
                                let bid = BidState { status, author, is_final, expires_at };
                                let actor = match who {
                                    Who::Author => Actor::Party(author),
                                    Who::Responder => Actor::Party(author.other()),
                                    Who::Server => Actor::Server,
                                };
                                let got = classify(apply(&bid, action, actor, now()));
                                let want = expected(status, expired, is_final, author, action, who);
                                assert_eq!(
                                    got, want,
                                    "{status:?} expired={expired} final={is_final} author={author:?} {action:?} by {who:?}"
                                );
                                checked += 1;
                            }
                        }
                    }
                }
            }
        }
        assert_eq!(checked, 5 * 2 * 2 * 2 * 5 * 3);
    }

    #[test]
    fn expiry_is_exact_at_the_boundary() {
        let bid = BidState { status: BidStatus::Pending, author: Party::Buyer, is_final: false, expires_at: now() };
        assert_eq!(bid.effective_status(now()), BidStatus::Expired);
        assert_eq!(bid.effective_status(now() - Duration::milliseconds(1)), BidStatus::Pending);
        assert_eq!(apply(&bid, Action::Accept, Actor::Party(Party::Seller), now()), Err(Rejection::BidExpired));
        let done = BidState { status: BidStatus::Accepted, ..bid };
        assert_eq!(done.effective_status(now() + Duration::days(1)), BidStatus::Accepted);
    }

    #[test]
    fn transitions_say_what_happens_to_the_thread() {
        assert_eq!(Transition::Counter.thread_status(), ThreadStatus::Active);
        assert_eq!(Transition::Accept.thread_status(), ThreadStatus::Accepted);
        assert_eq!(Transition::Reject(Reason::Withdrawn).thread_status(), ThreadStatus::Rejected);
        assert_eq!(Transition::Reject(Reason::Withdrawn).reason(), Reason::Withdrawn);
        assert_eq!(Transition::Expire.bid_status(), BidStatus::Expired);
    }

    #[test]
    fn counters_stay_between_the_positions() {
        // Ask 138000; the buyer opened at 120000. The seller may counter in (120000, 138000].
        assert!(check_counter(Party::Seller, 138_000, Positions { pending: 120_000, own_previous: 138_000 }).is_ok());
        assert!(check_counter(Party::Seller, 120_001, Positions { pending: 120_000, own_previous: 138_000 }).is_ok());
        assert!(check_counter(Party::Seller, 120_000, Positions { pending: 120_000, own_previous: 138_000 }).is_err());
        assert!(check_counter(Party::Seller, 138_001, Positions { pending: 120_000, own_previous: 138_000 }).is_err());
        // The seller is at 135000; the buyer, previously at 120000, may move within [120000, 135000).
        assert!(check_counter(Party::Buyer, 120_000, Positions { pending: 135_000, own_previous: 120_000 }).is_ok());
        assert!(check_counter(Party::Buyer, 134_999, Positions { pending: 135_000, own_previous: 120_000 }).is_ok());
        assert!(check_counter(Party::Buyer, 119_999, Positions { pending: 135_000, own_previous: 120_000 }).is_err());
        assert!(check_counter(Party::Buyer, 135_000, Positions { pending: 135_000, own_previous: 120_000 }).is_err());
        // Positions one minor unit apart leave the seller no room.
        match check_counter(Party::Seller, 500, Positions { pending: 499, own_previous: 499 }) {
            Err(Rejection::NotAConcession { min, max, .. }) => assert!(min > max),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_last_round_is_final() {
        assert!(!is_final(9, 10, false));
        assert!(is_final(10, 10, false));
        assert!(is_final(3, 10, true));
        assert!(is_final(1, 1, false));
    }

    #[test]
    fn openings_are_at_most_the_ask() {
        assert!(check_opening(100_000, Ask(100_000)).is_ok());
        assert!(check_opening(100_001, Ask(100_000)).is_err());
    }

    #[test]
    fn expiry_requests_are_bounded() {
        assert_eq!(expires_in(None, 172_800), Ok(172_800));
        assert_eq!(expires_in(Some(60), 172_800), Ok(60));
        assert_eq!(expires_in(Some(2_592_000), 172_800), Ok(2_592_000));
        assert!(expires_in(Some(59), 172_800).is_err());
        assert!(expires_in(Some(2_592_001), 172_800).is_err());
        assert!(expires_in(Some(-1), 172_800).is_err());
    }

    #[test]
    fn terms_are_small_objects() {
        assert!(check_terms(Some(&serde_json::json!({"delivery_days": 5}))).is_ok());
        assert!(check_terms(Some(&serde_json::json!([1, 2]))).is_err());
        assert!(check_terms(Some(&serde_json::json!({"x": "y".repeat(5000)}))).is_err());
        assert!(check_terms(Some(&serde_json::json!({"x": ["a\u{0}b"]}))).is_err());
        assert!(check_terms(Some(&serde_json::json!({"\u{0}": 1}))).is_err());
        assert!(check_message(Some(&"m".repeat(500))).is_ok());
        assert!(check_message(Some(&"m".repeat(501))).is_err());
    }

    proptest! {
        /// Whatever the actor does, at most one transition is allowed per bid state, only the
        /// responder moves the negotiation forward, and nothing leaves a terminal status.
        #[test]
        fn only_a_pending_bid_changes(
            status in prop::sample::select(BidStatus::ALL.to_vec()),
            action in prop::sample::select(Action::ALL.to_vec()),
            author in prop::sample::select(vec![Party::Buyer, Party::Seller]),
            offset in -10_000i64..10_000,
            is_final: bool,
            by_author: bool,
        ) {
            let bid = BidState { status, author, is_final, expires_at: now() + Duration::seconds(offset) };
            let party = if by_author { author } else { author.other() };
            if let Ok(transition) = apply(&bid, action, Actor::Party(party), now()) {
                prop_assert_eq!(status, BidStatus::Pending);
                prop_assert!(bid.expires_at > now());
                match transition {
                    Transition::Reject(Reason::Withdrawn) => prop_assert_eq!(party, author),
                    Transition::Counter => { prop_assert!(!is_final); prop_assert_ne!(party, author) }
                    _ => prop_assert_ne!(party, author),
                }
            }
        }

        /// A counter accepted by the rules always lies strictly between the other side's pending
        /// amount and never behind the mover's previous position.
        #[test]
        fn accepted_counters_are_concessions(
            buyer_prev in 100i64..1_000_000,
            gap in 0i64..100_000,
            amount in 100i64..1_200_000,
        ) {
            let seller_pending = buyer_prev + gap;
            if check_counter(Party::Buyer, amount, Positions { pending: seller_pending, own_previous: buyer_prev }).is_ok() {
                prop_assert!(amount >= buyer_prev && amount < seller_pending);
            }
            let seller_prev = buyer_prev + gap;
            if check_counter(Party::Seller, amount, Positions { pending: buyer_prev, own_previous: seller_prev }).is_ok() {
                prop_assert!(amount > buyer_prev && amount <= seller_prev);
            }
        }

        /// `check_counter` accepts exactly the amounts of the range `Positions::counter_range`
        /// gives, for either mover, and reads its two positions by name: swapping them moves the
        /// range, never silently keeps it.
        #[test]
        fn a_counter_is_allowed_exactly_within_its_range(
            mover in prop::sample::select(vec![Party::Buyer, Party::Seller]),
            pending in 100i64..1_000_000,
            own_previous in 100i64..1_000_000,
            offset in -1_000i64..1_000,
        ) {
            let positions = Positions { pending, own_previous };
            let (min, max) = positions.counter_range(mover);
            for amount in [min - 1, min, max, max + 1, pending, own_previous, pending + offset] {
                match check_counter(mover, amount, positions) {
                    Ok(()) => prop_assert!(min <= amount && amount <= max, "{:?} {:?} {}", mover, positions, amount),
                    Err(Rejection::NotAConcession { min: refused_min, max: refused_max, .. }) => {
                        prop_assert!(amount < min || amount > max, "{:?} {:?} {}", mover, positions, amount);
                        prop_assert_eq!((refused_min, refused_max), (min, max));
                    }
                    Err(other) => prop_assert!(false, "{:?}", other),
                }
            }
        }

        /// On a strict listing nothing changed: whatever the ask, `check_counter_on` decides
        /// every amount as `check_counter` always has.
        #[test]
        fn the_strict_rule_is_the_old_rule(
            mover in prop::sample::select(vec![Party::Buyer, Party::Seller]),
            pending in 1i64..1_000_000,
            own_previous in 1i64..1_000_000,
            ask in 1i64..2_000_000,
            amount in -10i64..2_000_000,
        ) {
            let positions = Positions { pending, own_previous };
            let strict = CounterTerms { rule: ConcessionRule::Strict, ask };
            prop_assert_eq!(positions.range_on(mover, strict), positions.counter_range(mover));
            prop_assert_eq!(check_counter_on(mover, amount, positions, strict), check_counter(mover, amount, positions));
        }

        /// With `none`, a retraction of the mover's own concession is legal (down to the
        /// smallest amount for a buyer, up to the ask for a seller), everything strict allows stays allowed, and no
        /// counter ever reaches or crosses the other side's pending amount, nor, for a seller,
        /// passes both the ask and its own previous price.
        #[test]
        fn retractions_are_legal_crossings_never(
            buyer_previous in MIN_AMOUNT..1_000_000,
            gap in 1i64..100_000,
            ask_above in 0i64..100_000,
            amount in -10i64..1_300_000,
        ) {
            let seller_previous = buyer_previous + gap;
            let ask = seller_previous + ask_above;
            let terms = CounterTerms { rule: ConcessionRule::None, ask };
            // The buyer answers the seller's pending amount.
            let buyer = Positions { pending: seller_previous, own_previous: buyer_previous };
            let allowed = check_counter_on(Party::Buyer, amount, buyer, terms).is_ok();
            prop_assert_eq!(allowed, MIN_AMOUNT <= amount && amount < seller_previous);
            if check_counter(Party::Buyer, amount, buyer).is_ok() {
                prop_assert!(allowed);
            }
            // Retracting below its own previous bid: refused by strict, allowed by none.
            if buyer_previous > MIN_AMOUNT {
                let retraction = buyer_previous - 1;
                prop_assert!(check_counter(Party::Buyer, retraction, buyer).is_err());
                prop_assert!(check_counter_on(Party::Buyer, retraction, buyer, terms).is_ok());
            }
            // The seller answers the buyer's pending amount.
            let seller = Positions { pending: buyer_previous, own_previous: seller_previous };
            let allowed = check_counter_on(Party::Seller, amount, seller, terms).is_ok();
            prop_assert_eq!(allowed, buyer_previous < amount && amount <= ask);
            if check_counter(Party::Seller, amount, seller).is_ok() {
                prop_assert!(allowed);
            }
            if ask > seller_previous {
                prop_assert!(check_counter(Party::Seller, seller_previous + 1, seller).is_err());
                prop_assert!(check_counter_on(Party::Seller, seller_previous + 1, seller, terms).is_ok());
            }
            // Crossing: never, whatever the rule.
            for rule in ConcessionRule::ALL {
                let terms = CounterTerms { rule, ask };
                prop_assert!(check_counter_on(Party::Buyer, seller_previous, buyer, terms).is_err());
                prop_assert!(check_counter_on(Party::Buyer, seller_previous + gap, buyer, terms).is_err());
                prop_assert!(check_counter_on(Party::Seller, buyer_previous, seller, terms).is_err());
                prop_assert!(check_counter_on(Party::Seller, buyer_previous - gap, seller, terms).is_err());
            }
        }

        /// A seller whose ask was lowered below its own previous price may still repeat that
        /// price under `none`, as under strict, and go no higher.
        #[test]
        fn a_lowered_ask_never_narrows_none_below_strict(
            pending in 1i64..500_000,
            above in 1i64..100_000,
            lowered in 0i64..100_000,
        ) {
            let own_previous = pending + above;
            let ask = (own_previous - lowered).max(1);
            let terms = CounterTerms { rule: ConcessionRule::None, ask };
            let positions = Positions { pending, own_previous };
            prop_assert!(check_counter_on(Party::Seller, own_previous, positions, terms).is_ok());
            prop_assert!(check_counter_on(Party::Seller, own_previous + 1, positions, terms).is_err());
        }
    }

    #[test]
    fn a_validated_amount_is_carried_as_it_is() {
        let limits = AmountLimits::default();
        let amount = Amount::new(138_000, limits).unwrap();
        let proposal = Proposal::of(amount);
        assert_eq!(proposal.amount, Some(Offered::Valid(amount)));
        let proposal = proposal.amount.unwrap();
        // Validated once, under the limits of the request that brought it: not checked again.
        let tighter = AmountLimits { max: 1_000 };
        assert_eq!(proposal.validate(tighter), Ok(amount));
        // Minor units no one has checked are checked with the rest of the proposal.
        let raw = Proposal::of(138_000).amount.unwrap();
        assert_eq!(raw, Offered::Raw(RawAmount::Integer(138_000)));
        assert!(raw.validate(tighter).is_err());
        assert_eq!(raw.validate(limits), Ok(amount));
        assert_eq!(Offered::from(RawAmount::Float(0.5)).validate(limits), RawAmount::Float(0.5).validate(limits));
    }

    #[test]
    fn an_opening_is_checked_against_the_ask_by_name() {
        assert!(check_opening(100_000, Ask(100_000)).is_ok());
        match check_opening(100_001, Ask(100_000)) {
            Err(Rejection::Validation(errors)) => assert_eq!(errors[0].field, "amount"),
            other => panic!("{other:?}"),
        }
    }
}
