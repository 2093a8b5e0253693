//! A server-side policy (SPEC §5): private limits and a counter strategy, applied by [`decide`].

use serde::{Deserialize, Serialize};

use super::super::bid::Party;
use super::super::issues::{Issues, Prices, Utility, Valuation};
use super::super::listing::MAX_ROUNDS;
use super::super::money::{AmountLimits, MIN_AMOUNT};
use super::super::rejection::{Rejection, Validator};
use super::counter::{MAX_E, MAX_KINDNESS, MIN_KINDNESS};
use super::learned;
use super::model::{MAX_BAYES_E, MIN_BAYES_E};
use super::multi::MultiIssue;
use super::refund::RefundPolicy;
use super::schedule::SchedulePolicy;
use super::{Aim, Decision, NegotiationState, Negotiator, Proposal, Rationale, Strategy, at_or_better, settle};

pub const DEFAULT_MAX_AUTO_ROUNDS: i32 = 5;
/// No thread can hold more counters than a listing's largest `max_rounds`.
pub const MAX_AUTO_ROUNDS: i32 = MAX_ROUNDS as i32;

/// What the server does on an agent's behalf, for one role (seller or buyer).
///
/// JSON: `{"limit": 90000, "accept_at": 120000, "reject_beyond": 50000, "max_auto_rounds": 5,
/// "require_approval": false, "counter": {"strategy": "tier"}}`; only `limit` and `counter` are
/// required. None of it is ever shown to the counterparty.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Policy {
    /// The private limit: the seller's floor or the buyer's ceiling, in minor units. Never crossed.
    #[serde(deserialize_with = "crate::whole::number")]
    pub limit: i64,
    /// Accept at once when the other side's amount is at or better than this.
    #[serde(default, deserialize_with = "crate::whole::option", skip_serializing_if = "Option::is_none")]
    pub accept_at: Option<i64>,
    /// Reject at once when the other side's amount is worse than this.
    #[serde(default, deserialize_with = "crate::whole::option", skip_serializing_if = "Option::is_none")]
    pub reject_beyond: Option<i64>,
    /// After this many automatic counters in a thread, stop and leave it to the owner.
    #[serde(default = "default_max_auto_rounds", deserialize_with = "crate::whole::small")]
    pub max_auto_rounds: i32,
    /// Never act; tell the owner instead.
    #[serde(default)]
    pub require_approval: bool,
    /// How far to move when countering.
    pub counter: Strategy,
    /// On a listing with issues: how the owner values price and issues together. The policy
    /// then negotiates in utility ([`MultiIssue`]), never accepting an offer worth less than
    /// the reservation utility; its `limit` still bounds the price.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub utility: Option<Utility>,
    /// Settle a deadlocked negotiation at the mediator's suggestion when it is within the
    /// limit (and, with a utility, at or above the reservation utility).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub accept_mediation: bool,
    /// On an order's `schedule` negotiation: accept the first proposed window inside this
    /// weekly availability, and leave the bid to the owner when none is ([`SchedulePolicy`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<SchedulePolicy>,
    /// A seller's answer to refunds asked on its orders ([`RefundPolicy`], SPEC §8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refund: Option<RefundPolicy>,
}

fn default_max_auto_rounds() -> i32 {
    DEFAULT_MAX_AUTO_ROUNDS
}

impl Policy {
    /// A policy with a limit and a strategy, and every other setting at its default.
    pub fn new(limit: i64, counter: Strategy) -> Policy {
        Policy {
            limit,
            accept_at: None,
            reject_beyond: None,
            max_auto_rounds: DEFAULT_MAX_AUTO_ROUNDS,
            require_approval: false,
            counter,
            utility: None,
            accept_mediation: false,
            schedule: None,
            refund: None,
        }
    }

    /// The multi-issue negotiator this policy plays on a listing with `issues`, when it declares
    /// a utility: Faratin's exponent of a `time` counter strategy, linear otherwise.
    pub fn multi_issue(&self, role: Party, issues: &Issues, ask: i64) -> Option<MultiIssue> {
        let utility = self.utility.as_ref().filter(|_| !issues.is_empty())?;
        let e = match self.counter {
            Strategy::Time { e, .. } | Strategy::Bayes { e } => e,
            Strategy::Split {}
            | Strategy::Step { .. }
            | Strategy::TitForTat { .. }
            | Strategy::Tier {}
            | Strategy::Competitive { .. }
            | Strategy::Closer { .. }
            | Strategy::Learned { .. } => 1.0,
        };
        Some(MultiIssue {
            valuation: utility.valuation(role, issues, Prices { limit: self.limit, ask }),
            e,
            fixed_terms: None,
        })
    }

    /// The owner's valuation of offers on a listing with `issues`, if the policy declares one.
    pub fn valuation(&self, role: Party, issues: &Issues, ask: i64) -> Option<Valuation> {
        self.utility
            .as_ref()
            .filter(|_| !issues.is_empty())
            .map(|u| u.valuation(role, issues, Prices { limit: self.limit, ask }))
    }

    /// Checks the policy for `role`, against the listing's `ask` when it applies to one listing
    /// (a policy set per agent has no ask yet). [`decide`] does not rely on it: an invalid policy
    /// still never crosses its limit or counters illegally, it only stops more often.
    pub fn validate(&self, role: Party, ask: Option<i64>, limits: AmountLimits) -> Result<(), Rejection> {
        let mut v = Validator::new();
        let amount = |v: &mut Validator, field: &str, value: i64| v.check(field, check_amount(value, limits)).is_some();
        let limit_ok = amount(&mut v, "limit", self.limit);
        let (limit_name, better, worse) = match role {
            Party::Seller => ("floor", "at least", "above"),
            Party::Buyer => ("ceiling", "at most", "below"),
        };
        if let (Party::Seller, Some(ask), true) = (role, ask, limit_ok)
            && self.limit > ask
        {
            v.fail("limit", format!("the floor ({}) must not exceed the listing's ask ({ask})", self.limit));
        }
        let accept_at = self.accept_at.filter(|&value| amount(&mut v, "accept_at", value));
        if let Some(accept_at) = accept_at
            && limit_ok
            && !at_or_better(role, accept_at, self.limit)
        {
            v.fail(
                "accept_at",
                format!("must be {better} the {limit_name} ({}); accepting it would cross it", self.limit),
            );
        }
        let reject_beyond = self.reject_beyond.filter(|&value| amount(&mut v, "reject_beyond", value));
        if let (Some(reject_beyond), Some(accept_at)) = (reject_beyond, accept_at)
            && !at_or_better(role, accept_at, reject_beyond)
        {
            v.fail("reject_beyond", format!("must not be {worse} accept_at ({accept_at})"));
        }
        if !(1..=MAX_AUTO_ROUNDS).contains(&self.max_auto_rounds) {
            v.fail("max_auto_rounds", format!("must be between 1 and {MAX_AUTO_ROUNDS}"));
        }
        self.validate_counter(&mut v, role, ask, limits, limit_ok);
        match (role, &self.refund) {
            (_, None) => {}
            (Party::Seller, Some(refund)) => refund.check(&mut v, "refund"),
            (Party::Buyer, Some(_)) => v.fail("refund", "only a seller's policy answers refunds"),
        }
        if let Some(utility) = &self.utility {
            utility.check(&mut v, None);
        }
        if let Some(schedule) = &self.schedule {
            schedule.check(&mut v);
        }
        v.finish()
    }

    fn validate_counter(&self, v: &mut Validator, role: Party, ask: Option<i64>, limits: AmountLimits, limit_ok: bool) {
        match &self.counter {
            Strategy::Split {} => {}
            Strategy::Step { amount, fraction } => match (*amount, *fraction) {
                (Some(_), Some(_)) => v.fail("counter.amount", "give either amount or fraction, not both"),
                (None, None) => v.fail("counter.amount", "give a step: amount (minor units) or fraction of the gap"),
                (Some(amount), None) => {
                    v.check("counter.amount", check_amount_range(amount, 1, limits.max));
                }
                (None, Some(fraction)) => {
                    if !(fraction > 0.0 && fraction <= 1.0) {
                        v.fail("counter.fraction", "must be greater than 0 and at most 1");
                    }
                }
            },
            Strategy::Time { k, e, start } => {
                if !(0.0..=1.0).contains(k) {
                    v.fail("counter.k", "must be between 0 and 1");
                }
                if !(*e > 0.0 && *e <= MAX_E) {
                    v.fail("counter.e", format!("must be greater than 0 and at most {MAX_E}"));
                }
                let start = start.filter(|&value| v.check("counter.start", check_amount(value, limits)).is_some());
                if let Some(start) = start {
                    if limit_ok && !at_or_better(role, start, self.limit) {
                        v.fail("counter.start", "must not be past the limit: the tactic concedes from start to limit");
                    }
                    if role == Party::Seller && ask.is_some_and(|ask| start > ask) {
                        v.fail("counter.start", "must not exceed the listing's ask");
                    }
                }
            }
            Strategy::TitForTat { kindness } => {
                if !(MIN_KINDNESS..=MAX_KINDNESS).contains(kindness) {
                    v.fail("counter.kindness", format!("must be between {MIN_KINDNESS} and {MAX_KINDNESS}"));
                }
            }
            Strategy::Tier {} => {
                if role == Party::Buyer {
                    v.fail("counter.strategy", "the tier engine is a seller strategy: it answers buyers by their tier");
                }
            }
            Strategy::Bayes { e } => {
                if !(MIN_BAYES_E..=MAX_BAYES_E).contains(e) {
                    v.fail("counter.e", format!("must be between {MIN_BAYES_E} and {MAX_BAYES_E}"));
                }
            }
            Strategy::Competitive { step, best_elsewhere } => {
                v.check("counter.step", check_amount_range(*step, 1, limits.max));
                if let Some(best) = best_elsewhere {
                    v.check("counter.best_elsewhere", check_amount(*best, limits));
                }
                if role == Party::Seller {
                    v.fail(
                        "counter.strategy",
                        "competitive is a buyer strategy: it caps what the buyer pays by its best offer elsewhere",
                    );
                }
            }
            Strategy::Closer { .. } => {
                if role == Party::Buyer {
                    v.fail("counter.strategy", "closer is a seller strategy");
                }
            }
            Strategy::Learned { levels, steps, q } => {
                if let Err((field, message)) = learned::check_shape(*levels, *steps, q) {
                    v.fail(field, message);
                }
            }
        }
    }
}

fn check_amount(value: i64, limits: AmountLimits) -> Result<i64, String> {
    check_amount_range(value, MIN_AMOUNT, limits.max)
}

fn check_amount_range(value: i64, min: i64, max: i64) -> Result<i64, String> {
    if (min..=max).contains(&value) {
        Ok(value)
    } else {
        Err(format!("must be an integer number of minor units between {min} and {max}"))
    }
}

/// What `policy` does with `state`.
///
/// In order: nothing to answer, approval required, or `max_auto_rounds` counters made → stop;
/// the pending amount at or better than `accept_at` (and within the limit) → accept; worse than
/// `reject_beyond` → reject; otherwise the strategy proposes. A proposed acceptance of an amount
/// past the limit becomes a counter at the limit; a proposed counter goes through [`settle`],
/// which never crosses the limit, never counters illegally, and marks final the bid that reaches
/// the listing's `max_rounds`.
///
/// The private limit is a reservation price, not an acceptance threshold: an amount within it is
/// accepted when it is at least as good as the strategy's next counter (see [`settle`]), or
/// earlier if `accept_at` says so.
pub fn decide(policy: &Policy, state: &NegotiationState) -> Decision {
    let turn = match state.turn() {
        Ok(turn) => turn,
        Err(rationale) => return Decision::Stop { rationale },
    };
    if policy.require_approval {
        return Decision::Stop { rationale: Rationale::ApprovalRequired };
    }
    if i64::from(state.auto_moves) >= i64::from(policy.max_auto_rounds) {
        return Decision::Stop { rationale: Rationale::MaxAutoRounds };
    }
    let mover = state.mover;
    let within_limit = at_or_better(mover, turn.pending, policy.limit);
    if within_limit && policy.accept_at.is_some_and(|accept_at| at_or_better(mover, turn.pending, accept_at)) {
        return Decision::Accept { rationale: Rationale::AcceptAt };
    }
    if policy.reject_beyond.is_some_and(|reject_beyond| !at_or_better(mover, turn.pending, reject_beyond)) {
        return Decision::Reject { rationale: Rationale::RejectBeyond };
    }
    match policy.counter.propose(state, turn, policy.limit) {
        Proposal::Accept(rationale) if within_limit => Decision::Accept { rationale },
        Proposal::Accept(_) => settle(state, turn, Aim { limit: policy.limit, target: policy.limit }, false),
        Proposal::Reject(rationale) => Decision::Reject { rationale },
        Proposal::Stop(rationale) => Decision::Stop { rationale },
        Proposal::Counter { amount, is_final } => {
            settle(state, turn, Aim { limit: policy.limit, target: amount }, is_final)
        }
    }
}

impl Negotiator for Policy {
    fn next(&self, state: &NegotiationState) -> Decision {
        decide(self, state)
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::state;
    use super::*;

    fn field_errors(result: Result<(), Rejection>) -> Vec<String> {
        match result {
            Ok(()) => Vec::new(),
            Err(Rejection::Validation(errors)) => errors.into_iter().map(|e| e.field).collect(),
            Err(other) => panic!("{other:?}"),
        }
    }

    #[test]
    fn policies_parse_with_defaults_and_refuse_unknowns() {
        let policy: Policy = serde_json::from_str(r#"{"limit": 90000, "counter": {"strategy": "tier"}}"#).unwrap();
        assert_eq!(policy, Policy::new(90_000, Strategy::Tier {}));
        assert_eq!(policy.max_auto_rounds, 5);
        let full = r#"{"limit": 90000, "accept_at": 120000, "reject_beyond": 50000, "max_auto_rounds": 3,
            "require_approval": true, "counter": {"strategy": "time", "k": 0.1, "e": 0.5}}"#;
        let policy: Policy = serde_json::from_str(full).unwrap();
        assert_eq!(policy.counter, Strategy::Time { k: 0.1, e: 0.5, start: None });
        let back: Policy = serde_json::from_str(&serde_json::to_string(&policy).unwrap()).unwrap();
        assert_eq!(back, policy);
        for bad in [
            r#"{"limit": 90000, "counter": {"strategy": "haggle_hard"}}"#,
            r#"{"limit": 90000, "counter": {"strategy": "split"}, "floor": 1}"#,
            r#"{"limit": 90000}"#,
            r#"{"counter": {"strategy": "split"}}"#,
            r#"{"limit": 900.5, "counter": {"strategy": "split"}}"#,
        ] {
            assert!(serde_json::from_str::<Policy>(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn validation_names_every_bad_field() {
        let limits = AmountLimits::default();
        let seller = |policy: Policy| field_errors(policy.validate(Party::Seller, Some(100_000), limits));
        let buyer = |policy: Policy| field_errors(policy.validate(Party::Buyer, Some(100_000), limits));
        let step = |amount, fraction| Strategy::Step { amount, fraction };

        assert!(seller(Policy::new(90_000, Strategy::Tier {})).is_empty());
        assert!(buyer(Policy::new(90_000, step(Some(500), None))).is_empty());
        // The floor is checked against the ask only when one is known.
        assert_eq!(seller(Policy::new(100_001, Strategy::Split {})), ["limit"]);
        assert!(
            field_errors(Policy::new(100_001, Strategy::Split {}).validate(Party::Seller, None, limits)).is_empty()
        );
        assert_eq!(seller(Policy::new(99, Strategy::Split {})), ["limit"]);

        let cases: &[(Strategy, &str)] = &[
            (step(Some(-500), None), "counter.amount"),
            (step(Some(0), None), "counter.amount"),
            (step(None, Some(0.0)), "counter.fraction"),
            (step(None, Some(1.5)), "counter.fraction"),
            (step(None, Some(f64::NAN)), "counter.fraction"),
            (step(Some(500), Some(0.5)), "counter.amount"),
            (step(None, None), "counter.amount"),
            (Strategy::Time { k: 0.0, e: 0.0, start: None }, "counter.e"),
            (Strategy::Time { k: 0.0, e: -1.0, start: None }, "counter.e"),
            (Strategy::Time { k: 1.5, e: 1.0, start: None }, "counter.k"),
            (Strategy::Time { k: 0.0, e: 1.0, start: Some(80_000) }, "counter.start"), // below the floor
            (Strategy::Time { k: 0.0, e: 1.0, start: Some(100_001) }, "counter.start"), // above the ask
            (Strategy::TitForTat { kindness: -1.5 }, "counter.kindness"),
            (Strategy::TitForTat { kindness: 2.0 }, "counter.kindness"),
        ];
        for (strategy, field) in cases {
            assert_eq!(seller(Policy::new(90_000, strategy.clone())), [*field], "{strategy:?}");
        }
        for fine in [step(None, Some(1.0)), Strategy::Time { k: 1.0, e: 100.0, start: Some(95_000) }] {
            assert!(seller(Policy::new(90_000, fine.clone())).is_empty(), "{fine:?}");
        }
        assert_eq!(buyer(Policy::new(90_000, Strategy::Tier {})), ["counter.strategy"]);
        // A buyer's start must be at or below its ceiling.
        assert_eq!(
            buyer(Policy::new(90_000, Strategy::Time { k: 0.0, e: 1.0, start: Some(95_000) })),
            ["counter.start"]
        );

        // accept_at may not cross the limit; reject_beyond may not pass accept_at.
        let with =
            |accept_at, reject_beyond| Policy { accept_at, reject_beyond, ..Policy::new(90_000, Strategy::Split {}) };
        assert!(seller(with(Some(95_000), Some(60_000))).is_empty());
        assert_eq!(seller(with(Some(85_000), None)), ["accept_at"]);
        assert_eq!(seller(with(Some(95_000), Some(96_000))), ["reject_beyond"]);
        assert!(buyer(with(Some(85_000), Some(99_000))).is_empty());
        assert_eq!(buyer(with(Some(95_000), None)), ["accept_at"]);
        assert_eq!(buyer(with(Some(85_000), Some(80_000))), ["reject_beyond"]);
        let rounds = |max_auto_rounds| Policy { max_auto_rounds, ..Policy::new(90_000, Strategy::Split {}) };
        assert_eq!(seller(rounds(0)), ["max_auto_rounds"]);
        assert_eq!(seller(rounds(101)), ["max_auto_rounds"]);
        // All mistakes at once.
        let mut bad = with(Some(10), Some(1));
        bad.limit = 100_001;
        bad.counter = step(None, Some(2.0));
        assert_eq!(seller(bad), ["limit", "accept_at", "reject_beyond", "counter.fraction"]);
    }

    #[test]
    fn limits_come_before_the_strategy() {
        // Seller, floor 80000, ask 100000, split. Columns: policy tweak, bids, expected.
        let base = Policy::new(80_000, Strategy::Split {});
        let counter = |amount| Decision::Counter { amount, is_final: false };
        let accept_at = Policy { accept_at: Some(95_000), ..base.clone() };
        let reject_beyond = Policy { reject_beyond: Some(60_000), ..base.clone() };
        let approval = Policy { require_approval: true, ..base.clone() };
        let cases: &[(&Policy, &[i64], Decision)] = &[
            (&base, &[90_000], counter(95_000)), // (90000 + 100000) / 2
            (&base, &[60_000], counter(80_000)), // midpoint 80000 is the floor
            (&base, &[50_000], counter(80_000)), // midpoint 75000, held at the floor
            (&accept_at, &[95_000], Decision::Accept { rationale: Rationale::AcceptAt }),
            (&accept_at, &[94_999], counter(97_500)),
            (&reject_beyond, &[59_999], Decision::Reject { rationale: Rationale::RejectBeyond }),
            (&reject_beyond, &[60_000], counter(80_000)),
            (&approval, &[95_000], Decision::Stop { rationale: Rationale::ApprovalRequired }),
            (&base, &[], Decision::Stop { rationale: Rationale::NothingToAnswer }),
            // Split: the buyer 1 below the seller's previous: midpoint rounds up to the previous.
            (&base, &[90_000, 95_000, 94_999], counter(95_000)),
            // The buyer at the seller's previous price cannot be countered: it is as good.
            (&base, &[100_000], Decision::Accept { rationale: Rationale::AsGoodAsCounter }),
        ];
        for (policy, bids, want) in cases {
            assert_eq!(decide(policy, &state(100_000, bids)), *want, "{bids:?}");
        }
        // After max_auto_rounds counters, stop, even for an amount that accept_at would take.
        let tired = NegotiationState { auto_moves: 5, ..state(100_000, &[95_000]) };
        assert_eq!(decide(&accept_at, &tired), Decision::Stop { rationale: Rationale::MaxAutoRounds });
        // accept_at never overrides the limit, even if unvalidated.
        let careless = Policy { accept_at: Some(50_000), ..base.clone() };
        assert_eq!(decide(&careless, &state(100_000, &[60_000])), counter(80_000));
        // A buyer policy: ceiling 90000; the seller countered 96000 from the ask; TFT gives 4000.
        let buyer = Policy::new(90_000, Strategy::TitForTat { kindness: 0.0 });
        assert_eq!(decide(&buyer, &state(100_000, &[80_000, 96_000])), counter(84_000));
        // A final seller counter within the ceiling is accepted (a deal beats none); past it,
        // rejected. (The seller came down 1000, so TFT would counter 82000, short of it.)
        let fin = |bids: &[i64]| NegotiationState { pending_final: true, ..state(100_000, bids) };
        let take = Decision::Accept { rationale: Rationale::FinalWithinLimit };
        assert_eq!(decide(&buyer, &fin(&[80_000, 90_000, 81_000, 89_000])), take);
        let reject = Decision::Reject { rationale: Rationale::FinalPastLimit };
        assert_eq!(decide(&buyer, &fin(&[80_000, 92_000, 81_000, 91_000])), reject);
        // A final amount at least as good as the next counter is simply accepted: the seller came
        // down 11000 from the ask, TFT would offer 91000, capped at 90000, above the pending 89000.
        let accept = Decision::Accept { rationale: Rationale::AsGoodAsCounter };
        assert_eq!(decide(&buyer, &fin(&[80_000, 89_000])), accept);
    }
}
