//! A seller's refund policy (SPEC §8): how the server answers, for the seller, a refund the buyer
//! asks on one of its orders. It accepts at once a refund of at most `accept_up_to` of the
//! order's amount; above that it counters, conceding the refund's way (its offers only rise,
//! from nothing towards the buyer's ask) on the policy's strategy, and never offers or accepts
//! more than `limit` of the order's amount, nor more than was paid and not yet refunded.
//!
//! Pure: [`decide_refund`] takes what the thread and the order say and gives a [`Decision`], as
//! the price policies' `decide` does; the executor makes the move through the market.

use serde::{Deserialize, Serialize};

use super::super::rejection::{Rejection, Validator};
use super::{Decision, Rationale, Strategy};

/// JSON: `{"accept_up_to": 0.1, "limit": 0.3}`, the optional `refund` of a seller's policy.
/// Both are shares of the order's amount, from 0 to 1, `accept_up_to` at most `limit`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct RefundPolicy {
    /// Accept at once a refund asked of at most this share of the order's amount.
    pub accept_up_to: f64,
    /// The most the policy ever offers or accepts, as a share of the order's amount.
    pub limit: f64,
}

impl RefundPolicy {
    /// Checks the shares: each within 0 to 1, `accept_up_to` at most `limit`.
    pub fn validate(&self) -> Result<(), Rejection> {
        let mut v = Validator::new();
        self.check(&mut v, "refund");
        v.finish()
    }

    /// The same checks, into a validator whose fields sit under `prefix`.
    pub fn check(&self, v: &mut Validator, prefix: &str) {
        let share = |value: f64| value.is_finite() && (0.0..=1.0).contains(&value);
        if !share(self.accept_up_to) {
            v.fail(&format!("{prefix}.accept_up_to"), "must be a share of the order's amount, from 0 to 1");
        }
        if !share(self.limit) {
            v.fail(&format!("{prefix}.limit"), "must be a share of the order's amount, from 0 to 1");
        }
        if share(self.accept_up_to) && share(self.limit) && self.accept_up_to > self.limit {
            v.fail(&format!("{prefix}.accept_up_to"), format!("must not exceed the limit ({})", self.limit));
        }
    }

    /// A share of the order's amount in minor units, rounded down (never above the share).
    fn of(share: f64, order_amount: i64) -> i64 {
        if !share.is_finite() || share <= 0.0 || order_amount <= 0 {
            return 0;
        }
        ((order_amount as f64) * share.min(1.0)).floor() as i64
    }

    /// The most the policy offers or accepts on this order: its `limit` of the order's amount,
    /// and never more than is left to refund.
    pub fn ceiling(&self, order_amount: i64, refundable: i64) -> i64 {
        Self::of(self.limit, order_amount).min(refundable).max(0)
    }

    /// The largest refund accepted at once.
    pub fn accepted_up_to(&self, order_amount: i64, refundable: i64) -> i64 {
        Self::of(self.accept_up_to, order_amount).min(self.ceiling(order_amount, refundable))
    }
}

/// A refund thread as the seller's policy sees it when the buyer's bid waits for its answer.
#[derive(Debug, Clone, PartialEq)]
pub struct RefundState {
    /// The order's amount, in minor units.
    pub order_amount: i64,
    /// What was paid and not yet refunded: no refund can be more.
    pub refundable: i64,
    /// The refund the buyer's pending bid asks.
    pub asked: i64,
    /// The seller's previous counter in the thread, if any (its offers start from nothing).
    pub own_previous: Option<i64>,
    /// Whether the buyer's bid is final (no counter may answer it).
    pub pending_final: bool,
    /// The counters the policy made in this thread so far.
    pub auto_moves: u32,
    /// The most counters the policy makes in a thread.
    pub max_auto_moves: u32,
}

/// How fast the policy's offers rise, from its counter strategy: Faratin's exponent for a
/// `time` or `bayes` strategy (below 1 holds back, above 1 concedes early), linear otherwise.
pub fn concession_exponent(counter: &Strategy) -> f64 {
    match *counter {
        Strategy::Time { e, .. } | Strategy::Bayes { e } if e.is_finite() && e > 0.0 => e,
        Strategy::Time { .. }
        | Strategy::Bayes { .. }
        | Strategy::Split {}
        | Strategy::Step { .. }
        | Strategy::TitForTat { .. }
        | Strategy::Tier {}
        | Strategy::Competitive { .. }
        | Strategy::Closer { .. }
        | Strategy::Learned { .. } => 1.0,
    }
}

/// The seller's answer to the buyer's refund ask in `state`, under `policy`, conceding at the
/// rate `e` ([`concession_exponent`]):
/// - accept an ask of at most `accept_up_to` of the order's amount (and within what is left);
/// - otherwise counter with an offer that rises from the previous one towards the ceiling
///   (`limit` of the order's amount), strictly between the previous offer and the ask;
/// - a final ask within the ceiling is accepted (a refund within the limit beats a dispute);
///   one above it is left to the owner, as is every ask once no offer is left to make.
///
/// It never offers or accepts more than the ceiling.
pub fn decide_refund(policy: &RefundPolicy, e: f64, state: &RefundState) -> Decision {
    let ceiling = policy.ceiling(state.order_amount, state.refundable);
    let asked = state.asked;
    if asked <= policy.accepted_up_to(state.order_amount, state.refundable) {
        return Decision::Accept { rationale: Rationale::AcceptAt };
    }
    if state.pending_final {
        return if asked <= ceiling {
            Decision::Accept { rationale: Rationale::FinalWithinLimit }
        } else {
            Decision::Stop { rationale: Rationale::FinalPastLimit }
        };
    }
    if state.auto_moves >= state.max_auto_moves {
        return Decision::Stop { rationale: Rationale::MaxAutoRounds };
    }
    // A counter lies strictly between the seller's previous position (0 before its first) and
    // the buyer's ask, and never above the ceiling.
    let previous = state.own_previous.unwrap_or(0);
    let low = previous + 1;
    let high = (asked - 1).min(ceiling);
    if low > high {
        return if asked <= ceiling {
            Decision::Accept { rationale: Rationale::NoRoomLeft }
        } else {
            Decision::Stop { rationale: Rationale::NoRoomLeft }
        };
    }
    // Faratin's time-dependent tactic over the policy's rounds: from what it accepts at once
    // to the ceiling.
    let start = policy.accepted_up_to(state.order_amount, state.refundable);
    let rounds = f64::from(state.max_auto_moves.max(1));
    let progress = (f64::from(state.auto_moves + 1) / rounds).min(1.0);
    let e = if e.is_finite() && e > 0.0 { e } else { 1.0 };
    let target = start as f64 + (ceiling - start).max(0) as f64 * progress.powf(1.0 / e);
    let amount = (target.round() as i64).clamp(low, high);
    Decision::Counter { amount, is_final: false }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn state(asked: i64, own_previous: Option<i64>) -> RefundState {
        RefundState {
            order_amount: 100_000,
            refundable: 100_000,
            asked,
            own_previous,
            pending_final: false,
            auto_moves: 0,
            max_auto_moves: 5,
        }
    }

    const POLICY: RefundPolicy = RefundPolicy { accept_up_to: 0.1, limit: 0.3 };

    #[test]
    fn an_ask_within_the_share_is_accepted_and_one_above_is_countered_below_the_limit() {
        assert_eq!(
            decide_refund(&POLICY, 1.0, &state(10_000, None)),
            Decision::Accept { rationale: Rationale::AcceptAt }
        );
        match decide_refund(&POLICY, 1.0, &state(50_000, None)) {
            Decision::Counter { amount, is_final: false } => assert!((1..=30_000).contains(&amount), "{amount}"),
            other => panic!("{other:?}"),
        }
        // A final ask within the limit is taken, above it left to the owner.
        let last = RefundState { pending_final: true, ..state(25_000, Some(20_000)) };
        assert!(matches!(decide_refund(&POLICY, 1.0, &last), Decision::Accept { .. }));
        let last = RefundState { pending_final: true, ..state(35_000, Some(20_000)) };
        assert!(matches!(decide_refund(&POLICY, 1.0, &last), Decision::Stop { .. }));
        // At the ceiling already: nothing more to offer.
        assert!(matches!(decide_refund(&POLICY, 1.0, &state(40_000, Some(30_000))), Decision::Stop { .. }));
        // Never more than is left to refund.
        let little_left = RefundState { refundable: 5_000, ..state(9_000, None) };
        assert!(
            matches!(decide_refund(&POLICY, 1.0, &little_left), Decision::Counter { amount, .. } if amount <= 5_000)
        );
    }

    #[test]
    fn shares_are_checked() {
        assert!(POLICY.validate().is_ok());
        for (accept_up_to, limit) in [(0.5, 0.3), (-0.1, 0.3), (0.1, 1.5), (f64::NAN, 0.3)] {
            assert!(RefundPolicy { accept_up_to, limit }.validate().is_err(), "{accept_up_to} {limit}");
        }
    }

    proptest! {
        /// Whatever the thread, the policy never offers or accepts above its limit (nor above
        /// what is refundable), accepts every ask within `accept_up_to`, and its counters are
        /// legal refund counters: strictly between its previous offer and the ask, so they
        /// never fall.
        #[test]
        fn never_above_the_limit_and_counters_never_fall(
            order_amount in 100i64..10_000_000,
            paid_share in 0.0f64..=1.0,
            accept_up_to in 0.0f64..=1.0,
            limit in 0.0f64..=1.0,
            asked_share in 0.0f64..=1.2,
            previous_share in proptest::option::of(0.0f64..=1.0),
            pending_final in any::<bool>(),
            auto_moves in 0u32..8,
            e in 0.1f64..5.0,
        ) {
            let (accept_up_to, limit) = if accept_up_to <= limit { (accept_up_to, limit) } else { (limit, accept_up_to) };
            let policy = RefundPolicy { accept_up_to, limit };
            let refundable = (order_amount as f64 * paid_share) as i64;
            let asked = ((order_amount as f64 * asked_share) as i64).max(1);
            let ceiling = policy.ceiling(order_amount, refundable);
            let own_previous = previous_share.map(|share| ((order_amount as f64 * share) as i64).min(asked - 1).min(ceiling)).filter(|p| *p >= 0);
            let state = RefundState { order_amount, refundable, asked, own_previous, pending_final, auto_moves, max_auto_moves: 5 };
            let decision = decide_refund(&policy, e, &state);
            match decision {
                Decision::Accept { .. } => prop_assert!(asked <= ceiling, "accepted {asked} above {ceiling}"),
                Decision::Counter { amount, .. } => {
                    prop_assert!(amount <= ceiling, "offered {amount} above {ceiling}");
                    prop_assert!(amount > own_previous.unwrap_or(0), "{amount} fell from {own_previous:?}");
                    prop_assert!(amount < asked, "{amount} not below the ask {asked}");
                    prop_assert!(!pending_final);
                }
                Decision::Reject { .. } | Decision::Stop { .. } => {}
            }
            if asked <= policy.accepted_up_to(order_amount, refundable) {
                prop_assert!(matches!(decision, Decision::Accept { .. }), "{asked} within the share: {decision:?}");
            }
        }

        /// Played against a buyer that keeps asking, the policy's offers rise round by round
        /// and stop at the ceiling.
        #[test]
        fn offers_rise_towards_the_ceiling(e in 0.2f64..5.0, asked in 40_000i64..100_000) {
            let mut previous = None;
            for moves in 0..5 {
                let state = RefundState { auto_moves: moves, own_previous: previous, ..state(asked, None) };
                match decide_refund(&POLICY, e, &state) {
                    Decision::Counter { amount, .. } => {
                        prop_assert!(previous.is_none_or(|p| amount > p));
                        prop_assert!(amount <= 30_000);
                        previous = Some(amount);
                    }
                    Decision::Stop { .. } => break,
                    other => prop_assert!(false, "{other:?}"),
                }
            }
        }
    }
}
