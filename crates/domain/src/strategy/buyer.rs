//! Buyer strategies for client agents and simulations (SPEC §5), after the ad-buyer guide
//! (its `SimpleThresholdStrategy` and `auto_negotiate` loop).
//!
//! The guide's loop, for each seller price: accept if it is at most `max`; walk away if the
//! buyer has made `max_rounds` offers or the seller did not move since its previous counter;
//! otherwise offer the previous offer plus `step`, capped at `max`. The opening offer is
//! `target`. Adaptive and Competitive, "coming soon" in the guide, are defined here precisely.
//!
//! Amounts are minor units; the profiles are the guide's, in currency units × 100.

use super::super::bid::Party;
use super::super::issues::Prices;
use super::super::listing::MAX_ROUNDS;
use super::super::money::{DEFAULT_MAX_AMOUNT, MIN_AMOUNT};
use super::super::rejection::{Rejection, Validator};
use super::model::{DEFAULT_BAYES_E, opening};
use super::{
    Aim, Decision, MAX_AUTO_ROUNDS, NegotiationState, Negotiator, Policy, Rationale, Strategy, Turn, decide, open,
    settle,
};

/// The guide's behaviour profiles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Profile {
    Conservative,
    Balanced,
    Aggressive,
}

impl Profile {
    pub const ALL: [Profile; 3] = [Profile::Conservative, Profile::Balanced, Profile::Aggressive];

    pub fn as_str(self) -> &'static str {
        match self {
            Profile::Conservative => "conservative",
            Profile::Balanced => "balanced",
            Profile::Aggressive => "aggressive",
        }
    }
}

impl std::str::FromStr for Profile {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Profile::ALL
            .into_iter()
            .find(|profile| profile.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| format!("unknown profile `{s}`; expected conservative, balanced or aggressive"))
    }
}

/// Fixed thresholds with linear concession steps: the guide's production strategy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimpleThreshold {
    /// The opening offer.
    pub target: i64,
    /// The ceiling: any seller price at or below it is accepted; no offer goes above it.
    pub max: i64,
    /// How much each offer adds to the previous one.
    pub step: i64,
    /// How many offers the buyer makes before walking away.
    pub max_rounds: i32,
}

impl SimpleThreshold {
    /// The guide's profiles: (target, max, step, max_rounds) = conservative (15, 20, 1, 3),
    /// balanced (20, 30, 2, 5), aggressive (15, 35, 5, 10), in currency units.
    pub fn profile(profile: Profile) -> SimpleThreshold {
        let units = |target: i64, max: i64, step: i64, max_rounds| SimpleThreshold {
            target: target * 100,
            max: max * 100,
            step: step * 100,
            max_rounds,
        };
        match profile {
            Profile::Conservative => units(15, 20, 1, 3),
            Profile::Balanced => units(20, 30, 2, 5),
            Profile::Aggressive => units(15, 35, 5, 10),
        }
    }

    pub fn validate(&self) -> Result<(), Rejection> {
        validate_budget(self.target, self.max, self.step, self.max_rounds)
    }

    pub fn next(&self, state: &NegotiationState) -> Decision {
        let turn = match begin(state, self.target, self.max) {
            Ok(turn) => turn,
            Err(decision) => return decision,
        };
        if let Some(decision) = walk_away(state, self.max_rounds, true) {
            return decision;
        }
        let target = turn.own_previous.saturating_add(self.step).min(self.max);
        settle(state, turn, Aim { limit: self.max, target }, false)
    }
}

/// Like [`SimpleThreshold`], but each step is scaled by how the seller moved last.
///
/// Let r be the seller's last concession as a share of the gap it faced: the seller went from
/// `s_before` (its previous counter, or the ask for its first) to `s_now`, answering the buyer's
/// offer `b`, so r = (s_before − s_now) / (s_before − b), in [0, 1). The buyer's next offer adds
/// step · max(0, 2 − 4r), rounded down: twice the step against a seller who did not move, the
/// step itself against one who gave a quarter of the gap (a fair reciprocator), nothing (holding
/// firm) against one who gave half of it or more. Offers stay capped at `max`; the seller's
/// price at or below `max` is accepted; after `max_rounds` offers the buyer walks away. It does
/// not walk away from a seller who stands still: it concedes faster instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Adaptive {
    pub target: i64,
    pub max: i64,
    pub step: i64,
    pub max_rounds: i32,
}

impl From<SimpleThreshold> for Adaptive {
    fn from(s: SimpleThreshold) -> Adaptive {
        Adaptive { target: s.target, max: s.max, step: s.step, max_rounds: s.max_rounds }
    }
}

impl Adaptive {
    pub fn validate(&self) -> Result<(), Rejection> {
        validate_budget(self.target, self.max, self.step, self.max_rounds)
    }

    /// The next increment over the buyer's previous offer.
    pub fn increment(&self, state: &NegotiationState, turn: Turn) -> i64 {
        let seller_before = i128::from(state.other_previous().unwrap_or(state.ask));
        let faced = seller_before - i128::from(turn.own_previous);
        let conceded = (seller_before - i128::from(turn.pending)).max(0);
        if faced <= 0 {
            return self.step;
        }
        // step · (2 − 4·conceded/faced), in integers, rounded down.
        let scaled = i128::from(self.step) * (2 * faced - 4 * conceded);
        if scaled <= 0 { 0 } else { (scaled / faced).min(i128::from(i64::MAX)) as i64 }
    }

    pub fn next(&self, state: &NegotiationState) -> Decision {
        let turn = match begin(state, self.target, self.max) {
            Ok(turn) => turn,
            Err(decision) => return decision,
        };
        if let Some(decision) = walk_away(state, self.max_rounds, false) {
            return decision;
        }
        let target = turn.own_previous.saturating_add(self.increment(state, turn)).min(self.max);
        settle(state, turn, Aim { limit: self.max, target }, false)
    }
}

/// A buyer shopping several listings at once, using the best standing counter as leverage.
///
/// With `best_elsewhere` the lowest standing seller counter on the other listings, the buyer's
/// cap on this listing is min(`max`, `best_elsewhere`): it never offers more here than it could
/// pay elsewhere, and accepts here only at or below that cap (so within `max`, and no worse than
/// elsewhere). Below the cap it steps like [`SimpleThreshold`] (walking away after `max_rounds`
/// offers or from a seller who stands still). If its previous offer here is already above the
/// best elsewhere, it cannot move without paying more than elsewhere: it stops on this listing.
/// [`Competitive::next_all`] runs all listings together: it accepts the best standing counter
/// when it is within `max` and leaves the others standing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Competitive {
    pub target: i64,
    pub max: i64,
    pub step: i64,
    pub max_rounds: i32,
    /// The lowest standing seller counter on other listings, if any.
    pub best_elsewhere: Option<i64>,
}

impl From<SimpleThreshold> for Competitive {
    fn from(s: SimpleThreshold) -> Competitive {
        Competitive { target: s.target, max: s.max, step: s.step, max_rounds: s.max_rounds, best_elsewhere: None }
    }
}

impl Competitive {
    pub fn validate(&self) -> Result<(), Rejection> {
        validate_budget(self.target, self.max, self.step, self.max_rounds)
    }

    /// The most the buyer will offer or accept on this listing.
    pub fn cap(&self) -> i64 {
        self.best_elsewhere.map_or(self.max, |best| best.min(self.max))
    }

    pub fn next(&self, state: &NegotiationState) -> Decision {
        let cap = self.cap();
        let turn = match begin(state, self.target.min(cap), cap) {
            Ok(turn) => turn,
            Err(decision) => return decision,
        };
        if turn.pending <= self.max && state.pending_final {
            // Within budget but worse than elsewhere, and it cannot be countered: not ours to drop.
            return Decision::Stop { rationale: Rationale::BetterElsewhere };
        }
        if let Some(decision) = walk_away(state, self.max_rounds, true) {
            return decision;
        }
        if turn.own_previous > cap {
            return Decision::Stop { rationale: Rationale::BetterElsewhere };
        }
        let target = turn.own_previous.saturating_add(self.step).min(cap);
        settle(state, turn, Aim { limit: cap, target }, false)
    }

    /// Decides every listing at once. `states[i]` is the thread on listing i.
    ///
    /// A listing's standing counter is the seller's pending amount when the buyer is to move
    /// there. If the lowest of them (the first on a tie) is within `max`, it is accepted and the
    /// other listings get `Stop` (better elsewhere): the client withdraws them once the deal is
    /// confirmed. Otherwise each listing is decided by [`Competitive::next`] with the best
    /// standing counter on the other listings (and `self.best_elsewhere`) as leverage.
    pub fn next_all(&self, states: &[NegotiationState]) -> Vec<Decision> {
        let standing: Vec<Option<i64>> = states.iter().map(standing_counter).collect();
        let best = standing
            .iter()
            .enumerate()
            .filter_map(|(i, amount)| amount.map(|amount| (amount, i)))
            .min()
            .filter(|&(amount, _)| amount <= self.max && self.best_elsewhere.is_none_or(|other| amount <= other));
        if let Some((_, chosen)) = best {
            return (0..states.len())
                .map(|i| {
                    let rationale = if i == chosen { Rationale::WithinMax } else { Rationale::BetterElsewhere };
                    if i == chosen { Decision::Accept { rationale } } else { Decision::Stop { rationale } }
                })
                .collect();
        }
        states
            .iter()
            .enumerate()
            .map(|(i, state)| {
                let elsewhere = standing
                    .iter()
                    .enumerate()
                    .filter(|&(j, _)| j != i)
                    .filter_map(|(_, amount)| *amount)
                    .chain(self.best_elsewhere)
                    .min();
                Competitive { best_elsewhere: elsewhere, ..self.clone() }.next(state)
            })
            .collect()
    }
}

/// The seller's pending counter on a thread where the buyer is to move.
fn standing_counter(state: &NegotiationState) -> Option<i64> {
    match state.turn() {
        Ok(turn) if state.mover == Party::Buyer => Some(turn.pending),
        _ => None,
    }
}

/// The steps every buyer strategy shares: refuse to play the seller, open at `opening` when the
/// thread is empty, accept a seller price at or below `accept_up_to`.
fn begin(state: &NegotiationState, opening: i64, accept_up_to: i64) -> Result<Turn, Decision> {
    if state.mover != Party::Buyer {
        return Err(Decision::Stop { rationale: Rationale::WrongSide });
    }
    if state.bids.is_empty() {
        return Err(open(state, opening));
    }
    let turn = state.turn().map_err(|rationale| Decision::Stop { rationale })?;
    if turn.pending <= accept_up_to {
        return Err(Decision::Accept { rationale: Rationale::WithinMax });
    }
    Ok(turn)
}

/// The guide's walk-away rule: `max_rounds` offers made, or (if `on_standstill`) the seller's
/// counter no lower than its previous one. The seller's first counter has no previous one.
fn walk_away(state: &NegotiationState, max_rounds: i32, on_standstill: bool) -> Option<Decision> {
    let offers = i64::try_from(state.bids_by(Party::Buyer)).unwrap_or(i64::MAX);
    if offers >= i64::from(max_rounds) {
        return Some(Decision::Reject { rationale: Rationale::RoundsExhausted });
    }
    let n = state.bids.len();
    if on_standstill && n >= 4 && state.bids[n - 1] >= state.bids[n - 3] {
        return Some(Decision::Reject { rationale: Rationale::SellerNotMoving });
    }
    None
}

fn validate_budget(target: i64, max: i64, step: i64, max_rounds: i32) -> Result<(), Rejection> {
    let mut v = Validator::new();
    let amount_range =
        format!("must be an integer number of minor units between {MIN_AMOUNT} and {DEFAULT_MAX_AMOUNT}");
    if !(MIN_AMOUNT..=DEFAULT_MAX_AMOUNT).contains(&target) {
        v.fail("target", amount_range.clone());
    }
    if !(MIN_AMOUNT..=DEFAULT_MAX_AMOUNT).contains(&max) {
        v.fail("max", amount_range);
    } else if max < target {
        v.fail("max", "must be at least the target");
    }
    if !(1..=DEFAULT_MAX_AMOUNT).contains(&step) {
        v.fail("step", "must be a positive number of minor units");
    }
    if !(1..=MAX_ROUNDS).contains(&i64::from(max_rounds)) {
        v.fail("max_rounds", format!("must be between 1 and {MAX_ROUNDS}"));
    }
    v.finish()
}

impl Negotiator for SimpleThreshold {
    fn next(&self, state: &NegotiationState) -> Decision {
        SimpleThreshold::next(self, state)
    }
}

impl Negotiator for Adaptive {
    fn next(&self, state: &NegotiationState) -> Decision {
        Adaptive::next(self, state)
    }
}

impl Negotiator for Competitive {
    fn next(&self, state: &NegotiationState) -> Decision {
        Competitive::next(self, state)
    }
}

/// The `bayes` buyer as a client plays it: its opening bid, then the policy of ceiling `max`
/// (with no cap on the counters it makes: a client agent follows the thread to its end).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BayesBuyer {
    pub max: i64,
    pub e: f64,
}

impl BayesBuyer {
    pub fn new(max: i64) -> BayesBuyer {
        BayesBuyer { max, e: DEFAULT_BAYES_E }
    }

    pub fn policy(&self) -> Policy {
        Policy { max_auto_rounds: MAX_AUTO_ROUNDS, ..Policy::new(self.max, Strategy::Bayes { e: self.e }) }
    }
}

impl Negotiator for BayesBuyer {
    fn next(&self, state: &NegotiationState) -> Decision {
        if state.mover != Party::Buyer {
            return Decision::Stop { rationale: Rationale::WrongSide };
        }
        if state.bids.is_empty() {
            return open(state, opening(Prices { limit: self.max, ask: state.ask }));
        }
        decide(&self.policy(), state)
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::state;
    use super::super::simulate::{Ending, PlacedBid, Setting, simulate};
    use super::*;
    use crate::tier::Tier;

    /// A seller who plays a fixed script of answers, one per turn.
    struct Scripted(Vec<Decision>);

    impl Negotiator for Scripted {
        fn next(&self, state: &NegotiationState) -> Decision {
            let turn = state.bids_by(Party::Seller);
            self.0.get(turn).copied().unwrap_or(Decision::Stop { rationale: Rationale::NothingToAnswer })
        }
    }

    fn counters(amounts: &[i64]) -> Scripted {
        Scripted(amounts.iter().map(|&amount| Decision::Counter { amount, is_final: false }).collect())
    }

    fn setting(ask: i64) -> Setting {
        Setting { ask, max_rounds: 20, buyer_tier: Tier::Agency }
    }

    fn amounts(bids: &[PlacedBid]) -> Vec<i64> {
        bids.iter().map(|bid| bid.amount).collect()
    }

    #[test]
    fn profiles_are_the_guides() {
        let p = SimpleThreshold::profile;
        assert_eq!(p(Profile::Conservative), SimpleThreshold { target: 1_500, max: 2_000, step: 100, max_rounds: 3 });
        assert_eq!(p(Profile::Balanced), SimpleThreshold { target: 2_000, max: 3_000, step: 200, max_rounds: 5 });
        assert_eq!(p(Profile::Aggressive), SimpleThreshold { target: 1_500, max: 3_500, step: 500, max_rounds: 10 });
        for profile in Profile::ALL {
            assert!(p(profile).validate().is_ok());
            assert_eq!(profile.as_str().parse::<Profile>(), Ok(profile));
        }
    }

    #[test]
    fn balanced_replays_the_guides_negotiation() {
        // The guide: open at $20; the seller says $32; not ≤ $30, so offer $22; the seller says
        // $28 ≤ $30: accept. Deal at $28 after two offers.
        let buyer = SimpleThreshold::profile(Profile::Balanced);
        let run = simulate(&setting(4_000), &buyer, &counters(&[3_200, 2_800]));
        assert_eq!(amounts(&run.bids), [2_000, 3_200, 2_200, 2_800]);
        assert_eq!(run.ending, Ending::Accepted { by: Party::Buyer, amount: 2_800 });
    }

    #[test]
    fn profiles_step_and_walk_away_as_the_guide_says() {
        // Conservative against a slow seller: 15, 16, 17, then three offers made: walk away.
        let slow = counters(&[3_200, 3_100, 3_000, 2_900]);
        let run = simulate(&setting(4_000), &SimpleThreshold::profile(Profile::Conservative), &slow);
        assert_eq!(amounts(&run.bids), [1_500, 3_200, 1_600, 3_100, 1_700, 3_000]);
        assert_eq!(run.ending, Ending::Rejected { by: Party::Buyer, rationale: Rationale::RoundsExhausted });

        // Aggressive: steps of 5; the seller's 34 is within max (35).
        let seller = counters(&[4_500, 4_200, 4_000, 3_400]);
        let aggressive = SimpleThreshold::profile(Profile::Aggressive);
        let run = simulate(&setting(5_000), &aggressive, &seller);
        assert_eq!(amounts(&run.bids), [1_500, 4_500, 2_000, 4_200, 2_500, 4_000, 3_000, 3_400]);
        assert_eq!(run.ending, Ending::Accepted { by: Party::Buyer, amount: 3_400 });
        // Offers are capped at max: 3000 + 500 = 3500 = max; then it holds there.
        let at = |bids: &[i64]| aggressive.next(&state(5_000, bids));
        assert_eq!(
            at(&[1_500, 4_500, 2_000, 4_200, 2_500, 4_000, 3_000, 3_800]),
            Decision::Counter { amount: 3_500, is_final: false }
        );
        assert_eq!(
            at(&[1_500, 4_500, 2_000, 4_200, 2_500, 4_000, 3_000, 3_800, 3_500, 3_600]),
            Decision::Counter { amount: 3_500, is_final: false }
        );

        // Balanced against a seller who stands still: walk away.
        let stubborn = counters(&[3_200, 3_200]);
        let run = simulate(&setting(4_000), &SimpleThreshold::profile(Profile::Balanced), &stubborn);
        assert_eq!(amounts(&run.bids), [2_000, 3_200, 2_200, 3_200]);
        assert_eq!(run.ending, Ending::Rejected { by: Party::Buyer, rationale: Rationale::SellerNotMoving });

        // An ask below the target is the opening bid (a bid may not exceed the ask).
        let buyer = SimpleThreshold::profile(Profile::Balanced);
        assert_eq!(buyer.next(&state(1_800, &[])), Decision::Counter { amount: 1_800, is_final: false });
        // A final counter above max cannot be countered: walk away.
        let fin = NegotiationState { pending_final: true, ..state(4_000, &[2_000, 3_200]) };
        assert_eq!(buyer.next(&fin), Decision::Reject { rationale: Rationale::FinalPastLimit });
        // The buyer never plays the seller.
        assert_eq!(buyer.next(&state(4_000, &[2_000])), Decision::Stop { rationale: Rationale::WrongSide });
    }

    #[test]
    fn adaptive_scales_its_step_by_the_sellers_concession() {
        let buyer = Adaptive::from(SimpleThreshold::profile(Profile::Balanced)); // step 200, max 3000
        // Columns: bids (ask 5000), expected increment, expected offer.
        let cases: &[(&[i64], i64, i64)] = &[
            // The seller stayed at the ask (5000 → 5000, facing 2000): r = 0, twice the step.
            (&[2_000, 5_000], 400, 2_400),
            // 5000 → 4250 facing 2000: r = 750/3000 = 0.25, the step itself.
            (&[2_000, 4_250], 200, 2_200),
            // 5000 → 3500: r = 1500/3000 = 0.5, hold firm.
            (&[2_000, 3_500], 0, 2_000),
            // 5000 → 4700: r = 0.1, 200 · (2 − 0.4) = 320.
            (&[2_000, 4_700], 320, 2_320),
            // Later: 4700 → 4600 facing 2320: r = 100/2380; 200 · (2 − 400/2380) = 366.39 → 366.
            (&[2_000, 4_700, 2_320, 4_600], 366, 2_686),
            // Near the cap: 2900 + 400 is capped at max 3000.
            (&[2_000, 4_700, 2_900, 4_700], 400, 3_000),
        ];
        for (bids, increment, offer) in cases {
            let s = state(5_000, bids);
            assert_eq!(buyer.increment(&s, s.turn().unwrap()), *increment, "{bids:?}");
            assert_eq!(buyer.next(&s), Decision::Counter { amount: *offer, is_final: false }, "{bids:?}");
        }
        // Within max: accept. Out of offers: walk away.
        assert_eq!(
            buyer.next(&state(4_000, &[2_000, 3_000 - 1])),
            Decision::Accept { rationale: Rationale::WithinMax }
        );
        let spent = state(5_000, &[2_000, 4_900, 2_100, 4_800, 2_200, 4_700, 2_300, 4_600, 2_400, 4_500]);
        assert_eq!(buyer.next(&spent), Decision::Reject { rationale: Rationale::RoundsExhausted });
    }

    #[test]
    fn competitive_never_pays_more_than_elsewhere() {
        let base = Competitive::from(SimpleThreshold::profile(Profile::Aggressive)); // 1500, 3500, 500
        let with = |best| Competitive { best_elsewhere: best, ..base.clone() };
        let counter = |amount| Decision::Counter { amount, is_final: false };
        // Opening: target 1500, or less if something stands lower elsewhere.
        assert_eq!(with(None).next(&state(5_000, &[])), counter(1_500));
        assert_eq!(with(Some(1_200)).next(&state(5_000, &[])), counter(1_200));
        // Stepping: 1500 + 500, capped by the best elsewhere (1800) rather than max (3500).
        assert_eq!(with(None).next(&state(5_000, &[1_500, 4_500])), counter(2_000));
        assert_eq!(with(Some(1_800)).next(&state(5_000, &[1_500, 4_500])), counter(1_800));
        // Within max but worse than elsewhere: do not accept here; offer the best elsewhere.
        assert_eq!(with(Some(2_500)).next(&state(5_000, &[1_500, 3_000])), counter(2_000));
        assert_eq!(
            with(Some(2_500)).next(&state(5_000, &[1_500, 2_500])),
            Decision::Accept { rationale: Rationale::WithinMax }
        );
        // Our offer here already tops the best elsewhere: stop here.
        assert_eq!(
            with(Some(1_900)).next(&state(5_000, &[1_500, 4_500, 2_000, 4_000])),
            Decision::Stop { rationale: Rationale::BetterElsewhere }
        );
    }

    #[test]
    fn competitive_accepts_the_best_of_several_listings() {
        let buyer = Competitive::from(SimpleThreshold::profile(Profile::Balanced)); // 2000, 3000, 200
        let a = state(4_000, &[2_000, 3_400]);
        let b = state(4_000, &[2_000, 3_100]);
        let c = state(4_000, &[]);
        // No standing counter within max: each listing steps on its own (counters above max
        // never bind), and C opens at the target.
        assert_eq!(
            buyer.next_all(&[a.clone(), b.clone(), c.clone()]),
            [
                Decision::Counter { amount: 2_200, is_final: false },
                Decision::Counter { amount: 2_200, is_final: false },
                Decision::Counter { amount: 2_000, is_final: false },
            ]
        );
        // B's seller comes down to 2900: accept B; leave A and C standing.
        let b = state(4_000, &[2_000, 3_100, 2_200, 2_900]);
        let stop = Decision::Stop { rationale: Rationale::BetterElsewhere };
        assert_eq!(
            buyer.next_all(&[a.clone(), b, c]),
            [stop, Decision::Accept { rationale: Rationale::WithinMax }, stop]
        );
        // A better deal outside these listings (2150) caps every offer: the leverage.
        let leverage = Competitive { best_elsewhere: Some(2_150), ..buyer.clone() };
        let b = state(4_000, &[2_000, 3_100]);
        assert_eq!(
            leverage.next_all(&[a.clone(), b]),
            [
                Decision::Counter { amount: 2_150, is_final: false },
                Decision::Counter { amount: 2_150, is_final: false },
            ]
        );
        // A standing counter within max but above the outside deal is not accepted.
        let b = state(4_000, &[2_000, 2_900]);
        assert_eq!(
            leverage.next_all(&[a, b]),
            [
                Decision::Counter { amount: 2_150, is_final: false },
                Decision::Counter { amount: 2_150, is_final: false },
            ]
        );
    }

    #[test]
    fn budgets_are_validated() {
        let fields = |s: SimpleThreshold| match s.validate() {
            Ok(()) => Vec::new(),
            Err(Rejection::Validation(errors)) => errors.into_iter().map(|e| e.field).collect(),
            Err(other) => panic!("{other:?}"),
        };
        let ok = SimpleThreshold::profile(Profile::Balanced);
        assert!(fields(ok).is_empty());
        assert_eq!(fields(SimpleThreshold { max: 1_900, ..ok }), ["max"]);
        assert_eq!(fields(SimpleThreshold { step: 0, ..ok }), ["step"]);
        assert_eq!(fields(SimpleThreshold { step: -200, ..ok }), ["step"]);
        assert_eq!(fields(SimpleThreshold { target: 50, ..ok }), ["target"]);
        assert_eq!(fields(SimpleThreshold { max_rounds: 0, ..ok }), ["max_rounds"]);
    }
}
