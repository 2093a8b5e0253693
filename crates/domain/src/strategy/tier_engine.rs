//! The seller tier engine of SPEC §5: the buyer's tier picks how far and how fast the seller gives way.
//!
//! The numbers are SPEC §5's table. Where the spec leaves room, this follows the ad-seller
//! reference the spec was drawn from (IAB Tech Lab `seller-agent`, `engines/negotiation_engine.py`
//! and `models/negotiation.py`):
//!
//! - a tier's `max_rounds` counts the seller's counters in the thread (the reference counts one
//!   round per buyer offer answered), so the k-th counter of the seller is bid round 2k;
//! - the seller's position before its first counter is the tier price `base`, not the ask
//!   (the reference starts from the tier-adjusted price: "last counter, or base_price if first
//!   round"); later, L is the seller's previous counter;
//! - past its `max_rounds` the engine walks away (rejects), as the reference does;
//! - "nearly spent" is the reference's rule: this counter uses at least 80 % of the concession
//!   budget that remained, i.e. 5·(counter − lowest) ≤ L − lowest, where `lowest` is the lowest
//!   price the engine will ever offer, max(floor, base·(1 − total cap)). A counter at `lowest`
//!   has spent everything and is always final.
//!
//! Two departures. The spec is explicit about the counter, so the final counter is the spec's
//! formula, only marked `final` (the reference jumps to its lowest price when it makes its final
//! offer). And the engine never accepts below the seller's floor: with a floor above the tier
//! price, the counter lands on the floor and is final.
//!
//! Rates are integer basis points so that the arithmetic is exact. Concessions round down and
//! prices round up: every rounding is in the seller's favour.

use super::super::bid::Party;
use super::super::tier::Tier;
use super::{NegotiationState, Proposal, Rationale, Turn};

const BASIS: i128 = 10_000;

/// One row of the engine's table, with the tier's discount off the ask.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TierTerms {
    /// The reference's name for the strategy.
    pub style: &'static str,
    /// How many counters the seller makes at most.
    pub max_rounds: i32,
    /// The largest concession in one counter, in basis points of `base`.
    pub per_round_cap_bp: i64,
    /// The largest concession in all, in basis points of `base`.
    pub total_cap_bp: i64,
    /// The share of the gap between the two positions the seller gives up, in basis points.
    pub gap_share_bp: i64,
    /// The tier's discount off the ask, in basis points.
    pub discount_bp: i64,
}

impl TierTerms {
    pub fn for_tier(tier: Tier) -> TierTerms {
        let row = |style, max_rounds, per_round_cap_bp, total_cap_bp, gap_share_bp, discount_bp| TierTerms {
            style,
            max_rounds,
            per_round_cap_bp,
            total_cap_bp,
            gap_share_bp,
            discount_bp,
        };
        match tier {
            Tier::Public => row("aggressive", 3, 300, 800, 3_000, 0),
            Tier::Seat => row("standard", 4, 400, 1_200, 4_000, 500),
            Tier::Agency => row("collaborative", 5, 500, 1_500, 5_000, 1_000),
            Tier::Advertiser => row("premium", 6, 600, 2_000, 6_500, 1_500),
        }
    }

    /// The ask less the tier discount, rounded up.
    pub fn base(&self, ask: i64) -> i64 {
        scale_up(ask, BASIS - i128::from(self.discount_bp))
    }

    /// base·(1 − total cap), rounded up: the engine never concedes past it.
    pub fn cap_floor(&self, base: i64) -> i64 {
        scale_up(base, BASIS - i128::from(self.total_cap_bp))
    }

    /// base·(per-round cap), rounded down.
    pub fn per_round_cap(&self, base: i64) -> i64 {
        scale_down(base, i128::from(self.per_round_cap_bp))
    }

    /// gap·share, rounded down.
    pub fn gap_share(&self, gap: i64) -> i64 {
        scale_down(gap, i128::from(self.gap_share_bp))
    }
}

/// `amount · bp / 10000`, rounded up. Amounts reaching here are below 2^60, so nothing overflows.
fn scale_up(amount: i64, bp: i128) -> i64 {
    let product = i128::from(amount) * bp;
    (product.div_euclid(BASIS) + i128::from(product.rem_euclid(BASIS) != 0)) as i64
}

/// `amount · bp / 10000`, rounded down.
fn scale_down(amount: i64, bp: i128) -> i64 {
    (i128::from(amount) * bp).div_euclid(BASIS) as i64
}

/// The engine's move for the seller; `floor` is the seller's private floor.
pub(super) fn propose(state: &NegotiationState, turn: Turn, floor: i64) -> Proposal {
    if state.mover != Party::Seller {
        return Proposal::Stop(Rationale::WrongSide);
    }
    let terms = TierTerms::for_tier(state.buyer_tier);
    let base = terms.base(state.ask);
    let counters_so_far = state.bids_by(Party::Seller);
    let last = if counters_so_far == 0 { base } else { turn.own_previous };
    let buyer = turn.pending;

    // The spec's acceptance rule, short of the floor: a floor above the tier price makes the
    // floor the price (the counter below lands on it, and is final).
    if (buyer >= base || buyer >= last) && buyer >= floor {
        return Proposal::Accept(Rationale::TierTarget);
    }
    // This counter's number among the seller's, 1-based.
    let k = i32::try_from(counters_so_far).map_or(i32::MAX, |n| n.saturating_add(1));
    if k > terms.max_rounds {
        return Proposal::Reject(Rationale::RoundsExhausted);
    }
    let lowest = floor.max(terms.cap_floor(base));
    let concession = terms.gap_share((last - buyer).max(0)).min(terms.per_round_cap(base));
    let amount = lowest.max(last - concession);
    let nearly_spent = amount <= lowest || 5 * (i128::from(amount) - i128::from(lowest)) <= i128::from(last - lowest);
    Proposal::Counter { amount, is_final: nearly_spent || k >= terms.max_rounds }
}

#[cfg(test)]
mod tests {
    use super::super::{Decision, NegotiationState, Policy, decide};
    use super::*;

    #[test]
    fn the_table_is_the_spec() {
        // (tier, style, max_rounds, per-round cap, total cap, share of gap, discount)
        let spec = [
            (Tier::Public, "aggressive", 3, 0.03, 0.08, 0.30, 0.00),
            (Tier::Seat, "standard", 4, 0.04, 0.12, 0.40, 0.05),
            (Tier::Agency, "collaborative", 5, 0.05, 0.15, 0.50, 0.10),
            (Tier::Advertiser, "premium", 6, 0.06, 0.20, 0.65, 0.15),
        ];
        let bp = |rate: f64| (rate * 10_000.0).round() as i64;
        for (tier, style, rounds, per_round, total, share, discount) in spec {
            let t = TierTerms::for_tier(tier);
            assert_eq!(t.style, style);
            assert_eq!(t.max_rounds, rounds);
            assert_eq!(
                (t.per_round_cap_bp, t.total_cap_bp, t.gap_share_bp, t.discount_bp),
                (bp(per_round), bp(total), bp(share), bp(discount)),
                "{tier}"
            );
        }
    }

    #[test]
    fn prices_round_in_the_sellers_favour() {
        let seat = TierTerms::for_tier(Tier::Seat);
        assert_eq!(seat.base(10_000), 9_500);
        assert_eq!(seat.base(10_001), 9_501); // 9500.95 up
        assert_eq!(seat.cap_floor(9_500), 8_360); // 9500 · 0.88
        assert_eq!(seat.cap_floor(9_501), 8_361); // 8360.88 up
        assert_eq!(seat.per_round_cap(9_501), 380); // 380.04 down
        assert_eq!(seat.gap_share(999), 399); // 399.6 down
    }

    /// Runs the engine through `decide` against a buyer who answers every counter with `buyer`,
    /// until the engine stops countering; returns the seller's counters.
    fn sequence(tier: Tier, ask: i64, floor: i64, buyer: i64, max_rounds: i32) -> Vec<(i64, bool)> {
        let policy = Policy::new(floor, super::super::Strategy::Tier {});
        let mut bids = vec![buyer];
        let mut counters = Vec::new();
        loop {
            let state = NegotiationState {
                mover: Party::Seller,
                ask,
                max_rounds,
                buyer_tier: tier,
                bids: bids.clone(),
                pending_final: false,
                auto_moves: 0,
            };
            match decide(&policy, &state) {
                Decision::Counter { amount, is_final } => {
                    counters.push((amount, is_final));
                    if is_final {
                        return counters;
                    }
                    bids.extend([amount, buyer]);
                }
                other => panic!("{tier}: unexpected {other:?} after {counters:?}"),
            }
        }
    }

    #[test]
    fn public_concedes_three_percent_a_round_down_to_eight() {
        // base 10000 (no discount); lowest = 10000 · 0.92 = 9200; per round 300; share 30 %.
        // k1: L 10000, gap 3000 · 0.3 = 900, capped 300 → 9700 (5 · 500 > 800: not final)
        // k2: L 9700, gap 2700 · 0.3 = 810 → 300 → 9400 (5 · 200 > 500)
        // k3: L 9400 → 9100, held at 9200 = lowest: final (and k3 is the last round).
        assert_eq!(
            sequence(Tier::Public, 10_000, 5_000, 7_000, 20),
            vec![(9_700, false), (9_400, false), (9_200, true)]
        );
    }

    #[test]
    fn seat_spends_its_budget_before_its_last_round() {
        // base 9500 (5 % off); lowest = 9500 · 0.88 = 8360; per round 380; share 40 %.
        // k1: L 9500 (the tier price, not the ask), gap 2500 · 0.4 = 1000 → 380 → 9120
        // k2: L 9120, gap 2120 · 0.4 = 848 → 380 → 8740
        // k3: L 8740 → 8360 = lowest: the budget is spent, final at k3 of 4.
        assert_eq!(sequence(Tier::Seat, 10_000, 5_000, 7_000, 20), vec![(9_120, false), (8_740, false), (8_360, true)]);
    }

    #[test]
    fn agency_splits_the_gap_and_ends_at_its_fifth_counter() {
        // base 9000 (10 % off); lowest = 9000 · 0.85 = 7650; per round 450; share 50 %; buyer 8000.
        // k1: gap 1000 · 0.5 = 500, capped 450 → 8550
        // k2: gap 550 → 275 → 8275 (5 · 625 > 900)
        // k3: gap 275 → 137 (137.5 down) → 8138 (5 · 488 > 625)
        // k4: gap 138 → 69 → 8069 (5 · 419 > 488)
        // k5: gap 69 → 34 (34.5 down) → 8035, the tier's last round: final.
        assert_eq!(
            sequence(Tier::Agency, 10_000, 5_000, 8_000, 20),
            vec![(8_550, false), (8_275, false), (8_138, false), (8_069, false), (8_035, true)]
        );
    }

    #[test]
    fn advertiser_gives_most_and_lasts_six_rounds() {
        // base 8500 (15 % off); lowest = 8500 · 0.8 = 6800; per round 510; share 65 %; buyer 7000.
        // k1: gap 1500 · 0.65 = 975 → 510 → 7990
        // k2: gap 990 · 0.65 = 643.5 → 643 → 510 → 7480
        // k3: gap 480 · 0.65 = 312 → 7168
        // k4: gap 168 · 0.65 = 109.2 → 109 → 7059
        // k5: gap 59 · 0.65 = 38.35 → 38 → 7021
        // k6: gap 21 · 0.65 = 13.65 → 13 → 7008, the tier's last round: final.
        assert_eq!(
            sequence(Tier::Advertiser, 10_000, 5_000, 7_000, 20),
            vec![(7_990, false), (7_480, false), (7_168, false), (7_059, false), (7_021, false), (7_008, true)]
        );
        // On a listing of 10 rounds, the fifth counter is round 10 and final by the listing's rule.
        let short = sequence(Tier::Advertiser, 10_000, 5_000, 7_000, 10);
        assert_eq!(short.last(), Some(&(7_021, true)));
        assert_eq!(short.len(), 5);
    }

    #[test]
    fn the_floor_and_the_tier_price_bound_the_engine() {
        let policy = |floor| Policy::new(floor, super::super::Strategy::Tier {});
        let state = |tier, bids: &[i64]| NegotiationState {
            mover: Party::Seller,
            ask: 10_000,
            max_rounds: 20,
            buyer_tier: tier,
            bids: bids.to_vec(),
            pending_final: false,
            auto_moves: 0,
        };
        let accept = Decision::Accept { rationale: Rationale::TierTarget };
        // A buyer at the tier price is accepted at once: 9000 for AGENCY, 10000 for PUBLIC.
        assert_eq!(decide(&policy(5_000), &state(Tier::Agency, &[9_000])), accept);
        assert!(matches!(decide(&policy(5_000), &state(Tier::Public, &[9_000])), Decision::Counter { .. }));
        // A floor above the tier price (8500) wins over it: counter at the floor, which is final.
        assert_eq!(
            decide(&policy(9_600), &state(Tier::Advertiser, &[9_000])),
            Decision::Counter { amount: 9_600, is_final: true }
        );
        // A floor above the total-cap price is the lowest price: AGENCY, floor 9000 = base; the
        // first counter (9000 − 450 = 8550) is held at the floor, which spends everything: final.
        assert_eq!(sequence(Tier::Agency, 10_000, 9_000, 7_000, 20), vec![(9_000, true)]);
        // A buyer close to the seller gets the share of the gap, below the per-round cap:
        // SEAT, k1 countered 9120; the buyer comes up to 9000; gap 120 · 0.4 = 48 → 9072.
        assert_eq!(
            decide(&policy(5_000), &state(Tier::Seat, &[7_000, 9_120, 9_000])),
            Decision::Counter { amount: 9_072, is_final: false }
        );
        // With the seller's counters exhausted (a manual counter without `final`), it walks away.
        let after = state(Tier::Public, &[7_000, 9_700, 7_000, 9_400, 7_000, 9_300, 7_000]);
        assert_eq!(decide(&policy(5_000), &after), Decision::Reject { rationale: Rationale::RoundsExhausted });
    }

    #[test]
    fn nearly_spent_is_eighty_percent_of_what_remained() {
        // SEAT, base 9500, lowest 8360, per round 380. Columns: seller's last price L, buyer,
        // expected counter, expected final. k = 2 of 4, so only the budget can make it final.
        let cases = [
            // L 8810: 450 remain; 8810 − 380 = 8430; 5 · 70 = 350 ≤ 450: final.
            (8_810, 7_000, 8_430, true),
            // L 8860: 500 remain; 8480; 5 · 120 = 600 > 500: not final.
            (8_860, 7_000, 8_480, false),
            // L 8835: 475 remain; 8455; 5 · 95 = 475 ≤ 475: final, at the boundary.
            (8_835, 7_000, 8_455, true),
            // A small gap keeps the budget: L 8810, buyer 8700, 110 · 0.4 = 44 → 8766; 5 · 406 > 450.
            (8_810, 8_700, 8_766, false),
        ];
        for (last, buyer, amount, is_final) in cases {
            let state = NegotiationState {
                mover: Party::Seller,
                ask: 10_000,
                max_rounds: 20,
                buyer_tier: Tier::Seat,
                bids: vec![6_000, last, buyer],
                pending_final: false,
                auto_moves: 0,
            };
            let turn = state.turn().unwrap();
            assert_eq!(propose(&state, turn, 5_000), Proposal::Counter { amount, is_final }, "L {last}");
        }
    }
}
