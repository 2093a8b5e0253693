//! Approvals (SPEC §10): which of an agent's own moves wait for a person's approval before they
//! are made, the life of a held move, and the budgets an approval may leave behind.
//!
//! Pure: the server reads the rules most specific to a move (the thread's, the listing's, else
//! the agent's), asks [`ApprovalRules::catches`], and holds the move if a rule catches it and no
//! budget [`covers`](Budget::covers) it.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::money::AmountLimits;
use super::party::Party;
use super::rejection::{Rejection, Validator};

/// A request's lifetime when the rules do not say (one hour).
pub const DEFAULT_TTL_SECONDS: i64 = 3600;
pub const MIN_TTL_SECONDS: i64 = 60;
pub const MAX_TTL_SECONDS: i64 = 2_592_000;
/// The most pending requests an agent may hold at once.
pub const MAX_PENDING: i64 = 20;
/// The most unrevoked approvers an agent may have.
pub const MAX_APPROVERS: i64 = 10;
/// A note on an answer, in characters.
pub const MAX_NOTE_CHARS: usize = 500;

/// The moves a rule may name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum Move {
    Place,
    Counter,
    Accept,
    Purchase,
    /// A refund asked, offered or accepted on an order: opening a refund negotiation, or
    /// countering or accepting on a refund thread (its amount is the refund's).
    Refund,
}

impl Move {
    pub const ALL: [Move; 5] = [Move::Place, Move::Counter, Move::Accept, Move::Purchase, Move::Refund];

    pub fn as_str(self) -> &'static str {
        match self {
            Move::Place => "place",
            Move::Counter => "counter",
            Move::Accept => "accept",
            Move::Purchase => "purchase",
            Move::Refund => "refund",
        }
    }

    /// Whether `party` ever makes this move: only buyers place and purchase.
    pub fn made_by(self, party: Party) -> bool {
        match self {
            Move::Place | Move::Purchase => party == Party::Buyer,
            Move::Counter | Move::Accept | Move::Refund => true,
        }
    }

    /// Whether the move is made inside a thread (a placement opens one, a purchase needs none).
    fn in_thread(self) -> bool {
        match self {
            Move::Counter | Move::Accept | Move::Refund => true,
            Move::Place | Move::Purchase => false,
        }
    }
}

impl FromStr for Move {
    type Err = String;

    fn from_str(value: &str) -> Result<Move, String> {
        Move::ALL
            .into_iter()
            .find(|kind| kind.as_str() == value)
            .ok_or_else(|| format!("unknown move `{value}`; expected place, counter, accept, purchase or refund"))
    }
}

impl TryFrom<String> for Move {
    type Error = String;

    fn try_from(value: String) -> Result<Move, String> {
        value.parse()
    }
}

impl fmt::Display for Move {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One rule: a move, and the amounts at which it needs approval. A rule with no bound catches
/// every such move.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Rule {
    #[serde(rename = "move")]
    pub kind: Move,
    /// A buyer's move above this amount (minor units) needs approval.
    #[serde(default, deserialize_with = "crate::whole::option", skip_serializing_if = "Option::is_none")]
    pub buyer_above: Option<i64>,
    /// A seller's move below this amount needs approval.
    #[serde(default, deserialize_with = "crate::whole::option", skip_serializing_if = "Option::is_none")]
    pub seller_below: Option<i64>,
    /// A refund above this amount needs approval (refunds only).
    #[serde(default, deserialize_with = "crate::whole::option", skip_serializing_if = "Option::is_none")]
    pub above: Option<i64>,
}

impl Rule {
    /// A rule catching every `kind` move.
    pub fn every(kind: Move) -> Rule {
        Rule { kind, buyer_above: None, seller_below: None, above: None }
    }

    fn unbounded(&self) -> bool {
        self.buyer_above.is_none() && self.seller_below.is_none() && self.above.is_none()
    }

    /// Whether this rule holds the move.
    pub fn catches(&self, candidate: &Candidate) -> bool {
        if self.kind != candidate.kind {
            return false;
        }
        if self.unbounded() {
            return true;
        }
        let party = candidate.party;
        let amount = candidate.amount;
        self.buyer_above.is_some_and(|bound| party == Party::Buyer && amount > bound)
            || self.seller_below.is_some_and(|bound| party == Party::Seller && amount < bound)
            || self.above.is_some_and(|bound| amount > bound)
    }
}

/// `PUT /v1/agents/me/approval-rules` (and per listing and thread): the rules, whether the
/// agent's server-side policy moves are held too, and how long a request waits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ApprovalRules {
    pub rules: Vec<Rule>,
    /// Hold the moves the agent's policies make too.
    #[serde(default)]
    pub policy_moves: bool,
    /// Seconds a request waits for an answer (60 to 2592000), never past the answered bid's
    /// own expiry.
    #[serde(default = "default_ttl", deserialize_with = "crate::whole::number")]
    pub ttl_seconds: i64,
}

fn default_ttl() -> i64 {
    DEFAULT_TTL_SECONDS
}

/// Where rules are set, and the agent's side there: what decides which moves it can make.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// The agent's own rules, for every listing and thread.
    Anywhere,
    /// One listing, where the agent is its seller or a (prospective) buyer, and whether it may
    /// negotiate there (the listing is negotiable and, for a buyer, open to its tier): if not,
    /// a buyer only purchases.
    Listing { party: Party, negotiates: bool },
    /// One thread, where the agent is this party.
    Thread(Party),
}

impl Standing {
    /// Whether the agent can make `kind` moves here, and as which parties.
    fn parties(self, kind: Move) -> Vec<Party> {
        let (sides, in_thread) = match self {
            Standing::Anywhere => (vec![Party::Buyer, Party::Seller], false),
            Standing::Listing { party, negotiates } => {
                if !negotiates && matches!(kind, Move::Place | Move::Counter | Move::Accept) {
                    return Vec::new();
                }
                (vec![party], false)
            }
            Standing::Thread(party) => (vec![party], true),
        };
        if in_thread && !kind.in_thread() {
            return Vec::new();
        }
        sides.into_iter().filter(|&party| kind.made_by(party)).collect()
    }
}

impl ApprovalRules {
    /// Checks the rules for an agent standing so: every amount valid, no bound a move cannot
    /// meet (a seller's bound on a placement, a refund's on a counter), no move twice, no move
    /// or bound the agent cannot make there. Every mistake at once, each naming its field.
    pub fn validate(&self, standing: Standing, limits: AmountLimits) -> Result<(), Rejection> {
        let mut v = Validator::new();
        if self.rules.is_empty() {
            v.fail("rules", "must hold at least one rule; DELETE the rules to clear them");
        }
        let mut seen = Vec::new();
        for (i, rule) in self.rules.iter().enumerate() {
            let field = |name: &str| format!("rules[{i}].{name}");
            if seen.contains(&rule.kind) {
                v.fail(&field("move"), format!("`{}` has a rule already; one rule a move", rule.kind));
            }
            seen.push(rule.kind);
            let parties = standing.parties(rule.kind);
            if parties.is_empty() {
                v.fail(&field("move"), format!("you cannot make `{}` moves here", rule.kind));
                continue;
            }
            for (name, bound) in
                [("buyer_above", rule.buyer_above), ("seller_below", rule.seller_below), ("above", rule.above)]
            {
                let Some(bound) = bound else { continue };
                if let Err(message) = check_bound(bound, limits) {
                    v.fail(&field(name), message);
                }
            }
            if rule.kind == Move::Refund {
                for (name, bound) in [("buyer_above", rule.buyer_above), ("seller_below", rule.seller_below)] {
                    if bound.is_some() {
                        v.fail(&field(name), "a refund is bounded by `above`");
                    }
                }
            } else if rule.above.is_some() {
                v.fail(&field("above"), "only a refund is bounded by `above`; use `buyer_above` or `seller_below`");
            }
            if rule.buyer_above.is_some() && !parties.contains(&Party::Buyer) {
                v.fail(&field("buyer_above"), format!("you make no `{}` move as a buyer here", rule.kind));
            }
            if rule.seller_below.is_some() && !parties.contains(&Party::Seller) {
                v.fail(&field("seller_below"), format!("you make no `{}` move as a seller here", rule.kind));
            }
        }
        if let Err(message) = ttl(self.ttl_seconds) {
            v.fail("ttl_seconds", message);
        }
        v.finish()
    }

    /// Whether some rule holds the move.
    pub fn catches(&self, candidate: &Candidate) -> bool {
        self.rules.iter().any(|rule| rule.catches(candidate))
    }
}

fn check_bound(bound: i64, limits: AmountLimits) -> Result<(), String> {
    if bound < 0 || bound > limits.max {
        return Err(format!("must be between 0 and {}", limits.max));
    }
    Ok(())
}

fn ttl(seconds: i64) -> Result<i64, String> {
    if (MIN_TTL_SECONDS..=MAX_TTL_SECONDS).contains(&seconds) {
        Ok(seconds)
    } else {
        Err(format!("must be between {MIN_TTL_SECONDS} and {MAX_TTL_SECONDS}"))
    }
}

/// A move as the rules see it: its kind, the mover's side, and its amount (a counter's or an
/// opening bid's own, the accepted bid's, the ask for a purchase).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate {
    pub kind: Move,
    pub party: Party,
    pub amount: i64,
}

/// When a request made at `now` stops waiting: after the rules' lifetime, and never after the
/// bid it answers expires.
pub fn expires_at(now: DateTime<Utc>, ttl_seconds: i64, bid_expires_at: Option<DateTime<Utc>>) -> DateTime<Utc> {
    let own = now + Duration::seconds(ttl_seconds);
    bid_expires_at.map_or(own, |bid| own.min(bid))
}

/// What a budget covers: moves in one thread, or on one listing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum BudgetScope {
    Thread,
    Listing,
}

impl BudgetScope {
    pub fn as_str(self) -> &'static str {
        match self {
            BudgetScope::Thread => "thread",
            BudgetScope::Listing => "listing",
        }
    }
}

impl FromStr for BudgetScope {
    type Err = String;

    fn from_str(value: &str) -> Result<BudgetScope, String> {
        match value {
            "thread" => Ok(BudgetScope::Thread),
            "listing" => Ok(BudgetScope::Listing),
            other => Err(format!("unknown budget scope `{other}`; expected thread or listing")),
        }
    }
}

impl TryFrom<String> for BudgetScope {
    type Error = String;

    fn try_from(value: String) -> Result<BudgetScope, String> {
        value.parse()
    }
}

/// "Approved, and up to `amount` on this thread (or listing) for the next `expires_in`
/// seconds": later moves of the agent there within it are made without asking.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Budget {
    /// The furthest amount the agent may go without asking: a buyer's highest, a seller's lowest.
    #[serde(deserialize_with = "crate::whole::number")]
    pub amount: i64,
    /// Seconds the budget lasts (60 to 2592000).
    #[serde(deserialize_with = "crate::whole::number")]
    pub expires_in: i64,
    pub scope: BudgetScope,
}

impl Budget {
    /// Whether a budget of `limit` lets `party`'s move of `amount` through: a buyer's at or below
    /// it, a seller's at or above it.
    pub fn covers(party: Party, limit: i64, amount: i64) -> bool {
        match party {
            Party::Buyer => amount <= limit,
            Party::Seller => amount >= limit,
        }
    }

    /// Checks a budget given with the approval of `held` (in a thread or not): it must cover the
    /// held move itself, and a move outside a thread (a purchase) has no thread to cover.
    pub fn validate(&self, held: &Candidate, in_thread: bool, limits: AmountLimits) -> Result<(), Rejection> {
        let mut v = Validator::new();
        if let Err(message) = check_bound(self.amount, limits) {
            v.fail("budget.amount", message);
        } else if !Budget::covers(held.party, self.amount, held.amount) {
            v.fail(
                "budget.amount",
                match held.party {
                    Party::Buyer => format!("is below the held move's amount, {}", held.amount),
                    Party::Seller => format!("is above the held move's amount, {}", held.amount),
                },
            );
        }
        if let Err(message) = ttl(self.expires_in) {
            v.fail("budget.expires_in", message);
        }
        if self.scope == BudgetScope::Thread && !in_thread {
            v.fail("budget.scope", "a purchase is made outside any thread; use `listing`");
        }
        v.finish()
    }
}

/// Where a request stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "UPPERCASE")]
pub enum ApprovalStatus {
    Pending,
    /// Approved, and the move made.
    Approved,
    Denied,
    Expired,
    /// Approved, but the move was refused (its code kept): nothing was made.
    Failed,
    /// The agent took its request back.
    Withdrawn,
}

impl ApprovalStatus {
    pub const ALL: [ApprovalStatus; 6] = [
        ApprovalStatus::Pending,
        ApprovalStatus::Approved,
        ApprovalStatus::Denied,
        ApprovalStatus::Expired,
        ApprovalStatus::Failed,
        ApprovalStatus::Withdrawn,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalStatus::Pending => "PENDING",
            ApprovalStatus::Approved => "APPROVED",
            ApprovalStatus::Denied => "DENIED",
            ApprovalStatus::Expired => "EXPIRED",
            ApprovalStatus::Failed => "FAILED",
            ApprovalStatus::Withdrawn => "WITHDRAWN",
        }
    }

    /// The status as read at `now`: a pending request past its time reads EXPIRED before the
    /// sweeper records it.
    pub fn at(self, expires_at: DateTime<Utc>, now: DateTime<Utc>) -> ApprovalStatus {
        match self {
            ApprovalStatus::Pending if expires_at <= now => ApprovalStatus::Expired,
            status => status,
        }
    }
}

impl FromStr for ApprovalStatus {
    type Err = String;

    fn from_str(value: &str) -> Result<ApprovalStatus, String> {
        ApprovalStatus::ALL.into_iter().find(|status| status.as_str() == value).ok_or_else(|| {
            format!(
                "unknown approval status `{value}`; expected PENDING, APPROVED, DENIED, EXPIRED, FAILED or WITHDRAWN"
            )
        })
    }
}

impl TryFrom<String> for ApprovalStatus {
    type Error = String;

    fn try_from(value: String) -> Result<ApprovalStatus, String> {
        value.parse()
    }
}

impl fmt::Display for ApprovalStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What is done to a pending request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// An approver (or the agent) approves: the move is made now.
    Approve,
    Deny,
    /// The agent takes its request back.
    Withdraw,
    /// The server: its time is up.
    Expire,
}

/// Who answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answerer {
    /// The agent, with its own key.
    Agent,
    /// One of the agent's approvers, with its token.
    Approver,
    Server,
}

/// The request's transition table: what `answer` by `by` makes of a request in `status` that
/// expires at `expires_at`, at `now`. Approving gives APPROVED; the move it makes may still
/// turn it FAILED.
pub fn apply(
    status: ApprovalStatus,
    expires_at: DateTime<Utc>,
    answer: Answer,
    by: Answerer,
    now: DateTime<Utc>,
) -> Result<ApprovalStatus, Rejection> {
    let due = expires_at <= now;
    match (status, answer, by) {
        (ApprovalStatus::Pending, Answer::Expire, Answerer::Server) if due => Ok(ApprovalStatus::Expired),
        (ApprovalStatus::Pending, Answer::Approve | Answer::Deny | Answer::Withdraw, _) if due => {
            Err(Rejection::ApprovalExpired)
        }
        (ApprovalStatus::Pending, Answer::Approve, Answerer::Agent | Answerer::Approver) => {
            Ok(ApprovalStatus::Approved)
        }
        (ApprovalStatus::Pending, Answer::Deny, Answerer::Agent | Answerer::Approver) => Ok(ApprovalStatus::Denied),
        (ApprovalStatus::Pending, Answer::Withdraw, Answerer::Agent) => Ok(ApprovalStatus::Withdrawn),
        (ApprovalStatus::Pending, Answer::Withdraw, Answerer::Approver | Answerer::Server) => {
            Err(Rejection::forbidden("only the agent withdraws its own request; an approver denies it"))
        }
        (ApprovalStatus::Pending, Answer::Approve | Answer::Deny, Answerer::Server)
        | (ApprovalStatus::Pending, Answer::Expire, Answerer::Agent | Answerer::Approver)
        | (ApprovalStatus::Pending, Answer::Expire, Answerer::Server) => Err(Rejection::InvalidTransition {
            current_status: status.as_str(),
            detail: "the request is still waiting for its answer".into(),
        }),
        (ApprovalStatus::Expired, _, _) => Err(Rejection::ApprovalExpired),
        (
            ApprovalStatus::Approved | ApprovalStatus::Denied | ApprovalStatus::Failed | ApprovalStatus::Withdrawn,
            _,
            _,
        ) => Err(Rejection::InvalidTransition {
            current_status: status.as_str(),
            detail: format!("the request is {status}: it was answered already"),
        }),
    }
}

/// The canonical text of a JSON value: object keys sorted, no blanks. What a held move's hash
/// and its receipt are computed over, so that anyone can recompute them from the move.
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                write_canonical(&map[key], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn limits() -> AmountLimits {
        AmountLimits::default()
    }

    fn any_move() -> impl Strategy<Value = Move> {
        prop::sample::select(Move::ALL.to_vec())
    }

    fn any_party() -> impl Strategy<Value = Party> {
        prop::sample::select(vec![Party::Buyer, Party::Seller])
    }

    fn any_rule() -> impl Strategy<Value = Rule> {
        let bound = prop::option::of(0i64..1_000_000);
        (any_move(), bound.clone(), bound.clone(), bound).prop_map(|(kind, buyer_above, seller_below, above)| Rule {
            kind,
            buyer_above,
            seller_below,
            above,
        })
    }

    fn any_candidate() -> impl Strategy<Value = Candidate> {
        (any_move(), any_party(), 0i64..1_000_000).prop_map(|(kind, party, amount)| Candidate { kind, party, amount })
    }

    proptest! {
        /// A rule never catches another move, and one without bounds catches every such move.
        #[test]
        fn a_rule_catches_its_own_move_only(rule in any_rule(), candidate in any_candidate()) {
            if rule.kind != candidate.kind {
                prop_assert!(!rule.catches(&candidate));
            } else if rule.unbounded() {
                prop_assert!(rule.catches(&candidate));
            }
        }

        /// A buyer's bound catches exactly the buyer's moves above it, a seller's exactly the
        /// seller's below it, never the other side's.
        #[test]
        fn bounds_catch_their_own_side_beyond_them(kind in any_move(), bound in 0i64..1_000_000, amount in 0i64..1_000_000) {
            let buyer = Rule { buyer_above: Some(bound), ..Rule::every(kind) };
            let seller = Rule { seller_below: Some(bound), ..Rule::every(kind) };
            let as_buyer = Candidate { kind, party: Party::Buyer, amount };
            let as_seller = Candidate { kind, party: Party::Seller, amount };
            prop_assert_eq!(buyer.catches(&as_buyer), amount > bound);
            prop_assert!(!buyer.catches(&as_seller));
            prop_assert_eq!(seller.catches(&as_seller), amount < bound);
            prop_assert!(!seller.catches(&as_buyer));
        }

        /// A refund rule catches exactly the refunds above its `above`, offered or accepted by
        /// either side (a seller's counter and a buyer's ask alike), and nothing else; no price
        /// rule catches a refund.
        #[test]
        fn a_refund_rule_catches_refunds_above_it_only(
            bound in 0i64..1_000_000,
            amount in 0i64..1_000_000,
            party in any_party(),
            other in any_move(),
            price_rule in any_rule(),
        ) {
            let rules = ApprovalRules {
                rules: vec![Rule { above: Some(bound), ..Rule::every(Move::Refund) }],
                policy_moves: false,
                ttl_seconds: DEFAULT_TTL_SECONDS,
            };
            let refund = Candidate { kind: Move::Refund, party, amount };
            prop_assert_eq!(rules.catches(&refund), amount > bound);
            if other != Move::Refund {
                let other = Candidate { kind: other, party, amount };
                prop_assert!(!rules.catches(&other), "a refund rule caught {:?}", other);
            }
            if price_rule.kind != Move::Refund {
                prop_assert!(!price_rule.catches(&refund));
            }
            let rising = Candidate { amount: amount + 1, ..refund };
            prop_assert!(!rules.catches(&refund) || rules.catches(&rising), "a larger refund is caught too");
        }

        /// Raising a buyer's amount never frees a caught move; lowering a seller's never does.
        #[test]
        fn catching_is_monotone(rule in any_rule(), candidate in any_candidate(), step in 0i64..1_000_000) {
            if rule.catches(&candidate) {
                let further = match candidate.party {
                    Party::Buyer => Candidate { amount: candidate.amount + step, ..candidate },
                    Party::Seller if rule.above.is_none() => Candidate { amount: (candidate.amount - step).max(0), ..candidate },
                    Party::Seller => candidate,
                };
                prop_assert!(rule.catches(&further));
            }
        }

        /// A rule set catches a move exactly when one of its rules does.
        #[test]
        fn rules_catch_as_any_rule(rules in prop::collection::vec(any_rule(), 0..6), candidate in any_candidate()) {
            let set = ApprovalRules { rules: rules.clone(), policy_moves: false, ttl_seconds: DEFAULT_TTL_SECONDS };
            prop_assert_eq!(set.catches(&candidate), rules.iter().any(|rule| rule.catches(&candidate)));
        }

        /// A budget covers the buyer's moves up to it and the seller's down to it.
        #[test]
        fn a_budget_covers_up_to_its_amount(limit in 0i64..1_000_000, amount in 0i64..1_000_000) {
            prop_assert_eq!(Budget::covers(Party::Buyer, limit, amount), amount <= limit);
            prop_assert_eq!(Budget::covers(Party::Seller, limit, amount), amount >= limit);
        }

        /// A request never outlives the bid it answers, nor its own lifetime.
        #[test]
        fn a_request_never_outlives_its_bid(ttl in MIN_TTL_SECONDS..MAX_TTL_SECONDS, bid_in in prop::option::of(0i64..5_000_000)) {
            let now = Utc::now();
            let bid = bid_in.map(|seconds| now + Duration::seconds(seconds));
            let at = expires_at(now, ttl, bid);
            prop_assert!(at <= now + Duration::seconds(ttl));
            if let Some(bid) = bid {
                prop_assert!(at <= bid);
            }
        }

        /// Canonical text does not depend on the order keys were written in.
        #[test]
        fn canonical_text_ignores_key_order(pairs in prop::collection::btree_map("[a-z]{1,6}", 0i64..1000, 0..8)) {
            let forward: serde_json::Map<String, Value> = pairs.iter().map(|(k, v)| (k.clone(), Value::from(*v))).collect();
            let backward: serde_json::Map<String, Value> = pairs.iter().rev().map(|(k, v)| (k.clone(), Value::from(*v))).collect();
            let text = canonical_json(&Value::Object(forward));
            prop_assert_eq!(&text, &canonical_json(&Value::Object(backward)));
            let read: Value = serde_json::from_str(&text).unwrap();
            prop_assert_eq!(canonical_json(&read), text);
        }
    }

    #[test]
    fn contradictory_and_impossible_rules_are_refused() {
        let refused = |rules: Vec<Rule>, standing| {
            let set = ApprovalRules { rules, policy_moves: false, ttl_seconds: DEFAULT_TTL_SECONDS };
            match set.validate(standing, limits()) {
                Err(Rejection::Validation(errors)) => errors.into_iter().map(|e| e.field).collect::<Vec<_>>(),
                other => panic!("expected a refusal, got {other:?}"),
            }
        };
        let seller_place = Rule { seller_below: Some(100), ..Rule::every(Move::Place) };
        assert_eq!(refused(vec![seller_place], Standing::Anywhere), ["rules[0].seller_below"]);
        let counter_above = Rule { above: Some(100), ..Rule::every(Move::Counter) };
        assert_eq!(refused(vec![counter_above], Standing::Anywhere), ["rules[0].above"]);
        assert_eq!(
            refused(vec![Rule::every(Move::Accept), Rule::every(Move::Accept)], Standing::Anywhere),
            ["rules[1].move"]
        );
        let seller = Standing::Listing { party: Party::Seller, negotiates: true };
        assert_eq!(refused(vec![Rule::every(Move::Place)], seller), ["rules[0].move"]);
        let buyer_at_the_ask = Standing::Listing { party: Party::Buyer, negotiates: false };
        assert_eq!(refused(vec![Rule::every(Move::Counter)], buyer_at_the_ask), ["rules[0].move"]);
        let purchase_only = ApprovalRules {
            rules: vec![Rule::every(Move::Purchase)],
            policy_moves: false,
            ttl_seconds: DEFAULT_TTL_SECONDS,
        };
        assert_eq!(purchase_only.validate(buyer_at_the_ask, limits()), Ok(()));
        assert_eq!(refused(vec![Rule::every(Move::Purchase)], Standing::Thread(Party::Buyer)), ["rules[0].move"]);
        let buyer_bound = Rule { buyer_above: Some(100), ..Rule::every(Move::Counter) };
        assert_eq!(refused(vec![buyer_bound], Standing::Thread(Party::Seller)), ["rules[0].buyer_above"]);
        let fine = ApprovalRules {
            rules: vec![
                Rule { buyer_above: Some(50_000), ..Rule::every(Move::Accept) },
                Rule { seller_below: Some(80_000), ..Rule::every(Move::Counter) },
                Rule { above: Some(10_000), ..Rule::every(Move::Refund) },
                Rule::every(Move::Place),
            ],
            policy_moves: false,
            ttl_seconds: DEFAULT_TTL_SECONDS,
        };
        assert_eq!(fine.validate(Standing::Anywhere, limits()), Ok(()));
    }

    #[test]
    fn answers_follow_the_table() {
        let now = Utc::now();
        let later = now + Duration::seconds(60);
        let pending = ApprovalStatus::Pending;
        assert_eq!(apply(pending, later, Answer::Approve, Answerer::Approver, now), Ok(ApprovalStatus::Approved));
        assert_eq!(apply(pending, now, Answer::Approve, Answerer::Approver, now), Err(Rejection::ApprovalExpired));
        assert_eq!(apply(pending, now, Answer::Expire, Answerer::Server, now), Ok(ApprovalStatus::Expired));
        assert!(apply(pending, later, Answer::Withdraw, Answerer::Approver, now).is_err());
        assert!(matches!(
            apply(ApprovalStatus::Approved, later, Answer::Approve, Answerer::Agent, now),
            Err(Rejection::InvalidTransition { current_status: "APPROVED", .. })
        ));
    }
}
